//! Giving memory back after pulls. A pull runs several MiB of code the daemon does not run
//! between pulls (HTTP, TLS, decompression, tar, hashing); once faulted in, those pages stay
//! resident and the daemon's RSS stays ~3 MiB above idle for good. When no pull has run for
//! `QUIET_AFTER`, their resident pages are dropped (`sys::trim_file_pages`: the clean file
//! pages of crust's executable, read back on the next pull). Waiting for a quiet spell keeps
//! back-to-back pulls from paying the page faults again and again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

const QUIET_AFTER: Duration = Duration::from_secs(5);

/// Counts pulls in flight; the last one to finish arms the trim.
#[derive(Default, Clone)]
pub struct PullActivity(Arc<Mutex<Activity>>);

#[derive(Default)]
struct Activity {
    in_flight: usize,
    /// Bumped whenever a pull starts, so an armed trim sees it was overtaken.
    epoch: u64,
}

/// Held for the length of one pull.
pub struct Busy(PullActivity);

impl PullActivity {
    pub fn begin(&self) -> Busy {
        let mut a = super::lock(&self.0);
        a.in_flight += 1;
        a.epoch += 1;
        Busy(self.clone())
    }

    /// Whether no pull started since `epoch` and none is running.
    fn quiet_since(&self, epoch: u64) -> bool {
        let a = super::lock(&self.0);
        a.in_flight == 0 && a.epoch == epoch
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let epoch = {
            let mut a = super::lock(&self.0.0);
            a.in_flight -= 1;
            if a.in_flight > 0 {
                return;
            }
            a.epoch
        };
        // Outside a runtime (unit tests, the CLI) there is nothing long-lived to trim.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let activity = self.0.clone();
        runtime.spawn(async move {
            tokio::time::sleep(QUIET_AFTER).await;
            if activity.quiet_since(epoch) {
                crate::sys::trim_file_pages();
                crate::sys::release_free_heap();
                tracing::debug!("no pull for {QUIET_AFTER:?}: dropped resident code pages");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_started_meanwhile_cancels_the_trim() {
        let a = PullActivity::default();
        let first = a.begin();
        let second = a.begin();
        drop(first);
        let epoch = super::super::lock(&a.0).epoch;
        assert!(!a.quiet_since(epoch), "one pull still running");
        drop(second);
        assert!(a.quiet_since(epoch));
        let _third = a.begin();
        assert!(!a.quiet_since(epoch), "a new pull overtook the armed trim");
    }
}
