//! The lifecycle event hub behind GetContainerEvents. Every subscriber gets every event, in
//! the order events were published. Publishing never waits: each subscriber has a bounded
//! backlog, and one that falls that far behind (it stopped reading) is cut off with a warning,
//! so it never slows the others or the RPC that produced the event.
//!
//! Events published before anyone subscribed (those of start-up recovery: containers that
//! exited while the daemon was down) are kept, up to a bound, for the first subscriber, so a
//! kubelet reconnecting after a daemon restart learns of them once.
//!
//! The hub is generic over the event: the container module decides what an event holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// Events a subscriber may fall behind by before it is cut off.
pub const BACKLOG: usize = 4096;
/// Events kept for the first subscriber.
const REPLAY: usize = 4096;

pub struct Hub<E> {
    inner: Mutex<Inner<E>>,
    dropped: AtomicU64,
}

struct Inner<E> {
    subscribers: Vec<mpsc::Sender<Arc<E>>>,
    /// Until the first subscription: what was published meanwhile.
    replay: Option<Vec<Arc<E>>>,
}

impl<E: Send + Sync + 'static> Default for Hub<E> {
    fn default() -> Self {
        Hub {
            inner: Mutex::new(Inner {
                subscribers: Vec::new(),
                replay: Some(Vec::new()),
            }),
            dropped: AtomicU64::new(0),
        }
    }
}

impl<E: Send + Sync + 'static> Hub<E> {
    /// A new subscriber's stream of events; it ends when the subscriber is cut off.
    pub fn subscribe(&self) -> mpsc::Receiver<Arc<E>> {
        let (tx, rx) = mpsc::channel(BACKLOG);
        let mut inner = self.lock();
        for event in inner.replay.take().unwrap_or_default() {
            let _ = tx.try_send(event);
        }
        inner.subscribers.push(tx);
        rx
    }

    /// Hands `event` to every subscriber. The lock is held while handing out, so every
    /// subscriber sees events in one order.
    pub fn publish(&self, event: E) {
        let event = Arc::new(event);
        let mut inner = self.lock();
        if let Some(replay) = inner.replay.as_mut() {
            if replay.len() < REPLAY {
                replay.push(event.clone());
            }
        }
        let before = inner.subscribers.len();
        inner
            .subscribers
            .retain(|s| match s.try_send(event.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::warn!(
                        backlog = BACKLOG,
                        "an event subscriber stopped reading; cutting it off"
                    );
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
        let cut = before - inner.subscribers.len();
        if cut > 0 {
            self.dropped.fetch_add(cut as u64, Ordering::Relaxed);
        }
    }

    pub fn subscribers(&self) -> usize {
        self.lock().subscribers.len()
    }

    /// Subscribers cut off or gone since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<E>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_subscriber_gets_every_event_in_order() {
        let hub = Hub::<u32>::default();
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        for i in 0..10 {
            hub.publish(i);
        }
        for rx in [&mut a, &mut b] {
            for i in 0..10 {
                assert_eq!(*rx.recv().await.unwrap(), i);
            }
        }
    }

    #[tokio::test]
    async fn a_subscriber_that_does_not_read_is_cut_off_without_slowing_others() {
        let hub = Hub::<usize>::default();
        let stuck = hub.subscribe();
        let mut live = hub.subscribe();
        for i in 0..BACKLOG + 10 {
            hub.publish(i);
            assert_eq!(*live.recv().await.unwrap(), i);
        }
        assert_eq!(hub.subscribers(), 1);
        assert_eq!(hub.dropped(), 1);
        drop(stuck);
    }

    #[tokio::test]
    async fn the_first_subscriber_gets_what_came_before_it_once() {
        let hub = Hub::<u32>::default();
        hub.publish(1);
        hub.publish(2);
        let mut first = hub.subscribe();
        let mut second = hub.subscribe();
        hub.publish(3);
        assert_eq!(*first.recv().await.unwrap(), 1);
        assert_eq!(*first.recv().await.unwrap(), 2);
        assert_eq!(*first.recv().await.unwrap(), 3);
        assert_eq!(*second.recv().await.unwrap(), 3);
    }
}
