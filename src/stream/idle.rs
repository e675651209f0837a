//! Idle tracking for a streaming connection: every frame or message either way touches it, and
//! `expired` resolves once nothing has moved for the whole timeout (kubelet's stream idle
//! timeout, 4 hours by default).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct Idle {
    started: Instant,
    timeout: Duration,
    /// Milliseconds since `started` of the last activity.
    last: Arc<AtomicU64>,
}

impl Idle {
    pub fn new(timeout: Duration) -> Idle {
        Idle {
            started: Instant::now(),
            timeout,
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn touch(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }

    fn deadline(&self) -> Instant {
        self.started + Duration::from_millis(self.last.load(Ordering::Relaxed)) + self.timeout
    }

    /// Resolves once the connection has been idle for the whole timeout.
    pub async fn expired(&self) {
        loop {
            let deadline = self.deadline();
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn touching_postpones_expiry() {
        let idle = Idle::new(Duration::from_millis(60));
        let started = Instant::now();
        let toucher = idle.clone();
        tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(30)).await;
                toucher.touch();
            }
        });
        idle.expired().await;
        assert!(started.elapsed() >= Duration::from_millis(140));
    }
}
