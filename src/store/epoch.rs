//! Which life of the state directory the records belong to.
//!
//! Records live on disk (`<root>/records`) and outlive the machine; what they describe does
//! not: processes, namespaces, mounts, sockets and the state directory itself (a tmpfs). The
//! state directory carries an epoch, made whenever it is found without one (a new tmpfs after a
//! reboot, or a directory someone emptied); the records directory keeps the epoch it was last
//! recovered against. When the two differ, every record describes objects that are gone, and
//! recovery ends them as such (NotReady pods, exited containers) instead of looking for them.
//!
//! The comparison is a hint, never the only guard: a pod whose monitor does not answer is
//! NotReady whatever the epochs say. What the epoch adds is knowing why, and knowing that a
//! pid written in another boot names somebody else's process now.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Record, StoreError};

/// The file holding an epoch, in the state directory and in the records directory.
pub const FILE: &str = "epoch.json";

/// One life of a state directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epoch {
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`) when it began.
    pub boot_id: String,
    /// Random, new each time the state directory is found without an epoch.
    pub id: String,
    /// When it began, in nanoseconds since the Unix epoch.
    pub since: i64,
}

impl Record for Epoch {
    const VERSION: u32 = 1;
}

/// What became of the state the records describe since they were last recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Continuity {
    /// The same state directory: its processes and files are as the records left them.
    Same,
    /// No epoch beside the records yet: a new node, or records a crust that kept them in the
    /// state directory wrote (they are moved to disk and are as current as the state).
    First,
    /// The state the records describe is gone.
    Lost(Loss),
}

/// How the state the records describe was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// The kernel booted again; else the state directory was emptied in the same boot.
    pub rebooted: bool,
    /// When the lost state had begun.
    pub since: i64,
}

impl Loss {
    /// A sentence for records and logs: what happened, as far as crust can tell.
    pub fn describe(&self, state: &Path) -> String {
        if self.rebooted {
            format!(
                "the node rebooted (crust's state in {} began at {} in the previous boot)",
                state.display(),
                crate::clock::rfc3339_millis(self.since)
            )
        } else {
            format!(
                "crust's state directory {} was emptied while crust was down, as a reboot empties it \
                 (the node did not reboot: same boot id)",
                state.display()
            )
        }
    }
}

/// The epoch of the state directory `state`, begun now if it has none.
pub fn of_state(state: &Path) -> Result<Epoch, StoreError> {
    let path = state.join(FILE);
    match super::load::<Epoch>(&path) {
        Ok(epoch) => Ok(epoch),
        Err(e) => {
            if !matches!(&e, StoreError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
            {
                tracing::warn!(error = %e, "the state directory's epoch is unreadable; beginning a new one");
            }
            let epoch = Epoch {
                boot_id: boot_id(),
                id: crate::model::new_id()[..32].to_owned(),
                since: crate::clock::now_nanos(),
            };
            super::save(&path, &epoch)?;
            Ok(epoch)
        }
    }
}

/// How the records in `records` stand to the state directory's `current` epoch.
pub fn continuity(records: &Path, current: &Epoch) -> Continuity {
    match super::load::<Epoch>(&records.join(FILE)) {
        Ok(seen) if seen.id == current.id => Continuity::Same,
        Ok(seen) => Continuity::Lost(Loss {
            rebooted: seen.boot_id != current.boot_id,
            since: seen.since,
        }),
        Err(StoreError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Continuity::First
        }
        // Unreadable: nothing says the state was lost, and each record's own check (does its
        // monitor answer?) still finds what is gone.
        Err(e) => {
            tracing::warn!(error = %e, "the records' epoch is unreadable; taking the state as current");
            Continuity::Same
        }
    }
}

/// Records that `records` now describe the state of epoch `current` (once recovery is done).
pub fn settle(records: &Path, current: &Epoch) -> Result<(), StoreError> {
    super::save(&records.join(FILE), current)
}

/// The kernel's boot id; empty where it cannot be read.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_keeps_its_epoch_and_an_emptied_one_begins_another() {
        let (state, records) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = of_state(state.path()).unwrap();
        assert_eq!(first.boot_id, boot_id());
        assert_eq!(continuity(records.path(), &first), Continuity::First);
        settle(records.path(), &first).unwrap();
        assert_eq!(
            of_state(state.path()).unwrap(),
            first,
            "read again, not made anew"
        );
        assert_eq!(continuity(records.path(), &first), Continuity::Same);

        std::fs::remove_file(state.path().join(FILE)).unwrap();
        let second = of_state(state.path()).unwrap();
        assert_ne!(second.id, first.id);
        assert_eq!(
            continuity(records.path(), &second),
            Continuity::Lost(Loss {
                rebooted: false,
                since: first.since
            })
        );
    }

    #[test]
    fn another_boot_id_is_a_reboot() {
        let (state, records) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let old = Epoch {
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            id: "old".into(),
            since: 1,
        };
        settle(records.path(), &old).unwrap();
        let now = of_state(state.path()).unwrap();
        let Continuity::Lost(loss) = continuity(records.path(), &now) else {
            panic!("not lost");
        };
        assert!(loss.rebooted);
        assert!(loss.describe(state.path()).contains("rebooted"));
    }

    #[test]
    fn an_unreadable_epoch_beside_the_records_is_no_proof_of_loss() {
        let (state, records) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(records.path().join(FILE), "{\"vers").unwrap();
        let now = of_state(state.path()).unwrap();
        assert_eq!(continuity(records.path(), &now), Continuity::Same);
    }
}
