//! Connections an HTTP/1 listener has accepted and not yet handed on (upgraded, or ended),
//! bounded: at most `max` at once, and a new one past that closes the oldest. A client that
//! connects and sends its request at once is served even while a peer holds many connections
//! open without a word; the peer's connections are pushed out by newer ones, or end at the
//! server's header read timeout, whichever comes first. Without this, each silent connection
//! held a descriptor and a task for the whole timeout, and a few thousand of them took every
//! descriptor the daemon has.
//!
//! Used by the streaming server (until a connection is upgraded) and the metrics endpoint.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The connections open at once, oldest first.
#[derive(Clone)]
pub struct Admitted {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    max: usize,
    next: u64,
    /// Each open connection's number, in the order they came, with what closes it.
    open: BTreeMap<u64, oneshot::Sender<()>>,
    /// Connections closed to make room, since start.
    pushed_out: u64,
}

/// One admitted connection. Dropping it (the connection ended or was handed on) frees its
/// place; `pushed_out` resolves when a newer connection took that place.
pub struct Ticket {
    id: u64,
    inner: Arc<Mutex<Inner>>,
    closed: Option<oneshot::Receiver<()>>,
}

impl Admitted {
    pub fn new(max: usize) -> Admitted {
        Admitted {
            inner: Arc::new(Mutex::new(Inner {
                max: max.max(1),
                next: 0,
                open: BTreeMap::new(),
                pushed_out: 0,
            })),
        }
    }

    /// Admits a new connection, closing the oldest one if `max` are open.
    pub fn admit(&self) -> Ticket {
        let mut inner = lock(&self.inner);
        while inner.open.len() >= inner.max {
            if let Some((_, close)) = inner.open.pop_first() {
                let _ = close.send(());
                inner.pushed_out += 1;
            }
        }
        let id = inner.next;
        inner.next += 1;
        let (tx, rx) = oneshot::channel();
        inner.open.insert(id, tx);
        Ticket {
            id,
            inner: self.inner.clone(),
            closed: Some(rx),
        }
    }

    /// How many are open now.
    pub fn open(&self) -> usize {
        lock(&self.inner).open.len()
    }

    /// How many were closed to make room since start.
    pub fn pushed_out(&self) -> u64 {
        lock(&self.inner).pushed_out
    }
}

impl Ticket {
    /// Resolves once a newer connection took this one's place (never, otherwise).
    pub async fn pushed_out(&mut self) {
        if let Some(rx) = self.closed.take() {
            if rx.await.is_ok() {
                return;
            }
        }
        std::future::pending().await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.inner).open.remove(&self.id);
    }
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_goes_when_a_new_one_comes_past_the_cap() {
        let a = Admitted::new(2);
        let mut first = a.admit();
        let second = a.admit();
        assert_eq!(a.open(), 2);
        let _third = a.admit();
        assert_eq!((a.open(), a.pushed_out()), (2, 1));
        first.pushed_out().await;
        drop(second);
        assert_eq!(a.open(), 1);
        // One that ended frees its place: nobody is pushed out for the next.
        let mut fourth = a.admit();
        assert_eq!(a.pushed_out(), 1);
        let waited = tokio::time::timeout(std::time::Duration::ZERO, fourth.pushed_out());
        assert!(waited.await.is_err());
    }
}
