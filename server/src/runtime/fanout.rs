//! A broadcast channel whose buffer holds only what some receiver has yet to read: a room's
//! fan-out of frames to its sockets.
//!
//! Owns: [`channel`], [`Sender`] and [`Receiver`] — tokio's `broadcast` in behaviour (a value
//! goes to every receiver subscribed when it was sent, in the order sent; a receiver that falls
//! more than the channel's capacity behind hears [`RecvError::Lagged`] with how many it missed,
//! then carries on from the oldest value still held; [`RecvError::Closed`] once every sender is
//! gone and it has read the rest), but not in memory: tokio's channel allocates and fills every
//! slot of its capacity when it is made (a room's Yjs relay of 1,024 frames cost ~56 KiB the
//! moment the room opened), while this one holds a value only until every receiver that was
//! owed it has read it, so a room whose sockets keep up holds next to nothing, and a queue that
//! grew for a slow socket shrinks again once it has caught up.
//! Does not own: what a value is (callers share frames encoded once, as `Arc`s or `Bytes`) or
//! what a lagging receiver does.
//!
//! Invariants: never more than `capacity` values held; a value is cloned once per receiver
//! that reads it; [`Receiver::recv`] is cancel-safe (nothing is taken until it returns), so it
//! can sit in a `select!`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

pub use tokio::sync::broadcast::error::{RecvError, SendError, TryRecvError};

/// Held values' room kept when the queue is drained (shrunk to no less than this).
const KEEP_SLOTS: usize = 8;

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Woken on every send and when the last sender goes.
    sent: Notify,
    capacity: usize,
}

struct State<T> {
    /// Values not yet read by every receiver owed them, oldest first, each with how many
    /// receivers still owe it a read.
    held: VecDeque<(T, usize)>,
    /// The position of `held[0]` (positions count every value ever sent).
    first: u64,
    receivers: usize,
    senders: usize,
}

impl<T> State<T> {
    /// The position the next value sent gets.
    fn next(&self) -> u64 {
        self.first + self.held.len() as u64
    }

    /// Drops the values at the front that nobody owes a read any more, and gives back memory a
    /// burst left behind.
    fn trim(&mut self) {
        while self.held.front().is_some_and(|(_, owed)| *owed == 0) {
            self.held.pop_front();
            self.first += 1;
        }
        let (len, room) = (self.held.len(), self.held.capacity());
        if room > KEEP_SLOTS && len * 4 < room {
            self.held.shrink_to((len * 2).max(KEEP_SLOTS));
        }
    }
}

/// A channel of at most `capacity` values held for receivers that have not read them.
pub fn channel<T: Clone>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(capacity > 0, "a fan-out channel holds at least one value");
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            held: VecDeque::new(),
            first: 0,
            receivers: 1,
            senders: 1,
        }),
        sent: Notify::new(),
        capacity,
    });
    let rx = Receiver {
        shared: shared.clone(),
        next: 0,
    };
    (Sender { shared }, rx)
}

fn lock<T>(shared: &Shared<T>) -> MutexGuard<'_, State<T>> {
    // Every change to the state is complete before anything can panic.
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sending side; clones share the channel.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T: Clone> Sender<T> {
    /// A channel with no receiver yet (see [`channel`]).
    pub fn new(capacity: usize) -> Self {
        channel(capacity).0
    }

    /// Sends `value` to every receiver there is now; with none it is handed back. Returns how
    /// many receivers it went to.
    pub fn send(&self, value: T) -> Result<usize, SendError<T>> {
        let receivers = {
            let mut state = lock(&self.shared);
            if state.receivers == 0 {
                return Err(SendError(value));
            }
            let receivers = state.receivers;
            state.held.push_back((value, receivers));
            if state.held.len() > self.shared.capacity {
                // The oldest goes; whoever had not read it hears that it lagged.
                state.held.pop_front();
                state.first += 1;
            }
            receivers
        };
        self.shared.sent.notify_waiters();
        Ok(receivers)
    }

    /// A receiver of every value sent from now on.
    pub fn subscribe(&self) -> Receiver<T> {
        let mut state = lock(&self.shared);
        state.receivers += 1;
        Receiver {
            shared: self.shared.clone(),
            next: state.next(),
        }
    }

    pub fn receiver_count(&self) -> usize {
        lock(&self.shared).receivers
    }

    /// How many values are held now (sent and not yet read by every receiver owed them).
    pub fn held(&self) -> usize {
        lock(&self.shared).held.len()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        lock(&self.shared).senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let last = {
            let mut state = lock(&self.shared);
            state.senders -= 1;
            state.senders == 0
        };
        if last {
            self.shared.sent.notify_waiters();
        }
    }
}

/// The receiving side: every value sent after it subscribed, in order.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// The position of the next value to read.
    next: u64,
}

impl<T: Clone> Receiver<T> {
    /// The next value, waiting for one. Cancel-safe.
    pub async fn recv(&mut self) -> Result<T, RecvError> {
        loop {
            let sent = self.shared.sent.notified();
            match take(&self.shared, &mut self.next) {
                Ok(value) => return Ok(value),
                Err(TryRecvError::Lagged(missed)) => return Err(RecvError::Lagged(missed)),
                Err(TryRecvError::Closed) => return Err(RecvError::Closed),
                // `sent` was made before looking, so a send since then wakes it.
                Err(TryRecvError::Empty) => sent.await,
            }
        }
    }

    /// The next value if one is there.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        take(&self.shared, &mut self.next)
    }
}

/// The value at position `next` for a receiver, if there is one.
fn take<T: Clone>(shared: &Shared<T>, next: &mut u64) -> Result<T, TryRecvError> {
    let mut state = lock(shared);
    if *next < state.first {
        let missed = state.first - *next;
        *next = state.first;
        return Err(TryRecvError::Lagged(missed));
    }
    let at = (*next - state.first) as usize;
    let Some((value, owed)) = state.held.get_mut(at) else {
        return Err(if state.senders == 0 {
            TryRecvError::Closed
        } else {
            TryRecvError::Empty
        });
    };
    *owed -= 1;
    let value = value.clone();
    *next += 1;
    state.trim();
    Ok(value)
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        state.receivers -= 1;
        // The values it was owed and never read are owed no more.
        let from = self.next.saturating_sub(state.first) as usize;
        for (_, owed) in state.held.iter_mut().skip(from) {
            *owed -= 1;
        }
        state.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_receiver_hears_every_value_sent_after_it_subscribed_in_order() {
        let tx = Sender::new(16);
        let mut early = tx.subscribe();
        assert_eq!(tx.send(1).unwrap(), 1);
        let mut late = tx.subscribe();
        assert_eq!(tx.send(2).unwrap(), 2);
        assert_eq!(early.recv().await, Ok(1));
        assert_eq!(early.recv().await, Ok(2));
        assert_eq!(late.recv().await, Ok(2));
        assert_eq!(late.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn with_no_receiver_a_value_is_handed_back_and_not_held() {
        let tx = Sender::new(4);
        assert!(matches!(tx.send(7), Err(SendError(7))));
        assert_eq!(tx.held(), 0);
        let (tx, rx) = channel::<u8>(4);
        drop(rx);
        assert!(tx.send(1).is_err());
    }

    #[test]
    fn a_value_is_held_only_until_every_receiver_owed_it_has_read_it() {
        let tx = Sender::new(1024);
        let mut a = tx.subscribe();
        let mut b = tx.subscribe();
        for n in 0..100 {
            tx.send(n).unwrap();
        }
        assert_eq!(tx.held(), 100);
        for n in 0..100 {
            assert_eq!(a.try_recv(), Ok(n));
        }
        assert_eq!(tx.held(), 100, "b has read none");
        for n in 0..60 {
            assert_eq!(b.try_recv(), Ok(n));
        }
        assert_eq!(tx.held(), 40);
        drop(b);
        assert_eq!(tx.held(), 0, "what only b was owed goes with it");
        let state = lock(&tx.shared);
        assert!(
            state.held.capacity() <= KEEP_SLOTS,
            "the burst's memory is given back: {}",
            state.held.capacity()
        );
    }

    #[test]
    fn a_fresh_channel_allocates_no_slots() {
        let tx = Sender::<u64>::new(1024);
        let _rx = tx.subscribe();
        assert_eq!(lock(&tx.shared).held.capacity(), 0);
    }

    #[tokio::test]
    async fn a_receiver_past_capacity_behind_hears_how_many_it_missed_then_the_oldest_held() {
        let tx = Sender::new(4);
        let mut slow = tx.subscribe();
        let mut quick = tx.subscribe();
        for n in 0..10 {
            tx.send(n).unwrap();
            assert_eq!(quick.recv().await, Ok(n));
        }
        assert!(tx.held() <= 4);
        assert_eq!(slow.recv().await, Err(RecvError::Lagged(6)));
        for n in 6..10 {
            assert_eq!(slow.recv().await, Ok(n));
        }
        assert_eq!(tx.held(), 0);
    }

    #[tokio::test]
    async fn closed_once_every_sender_is_gone_and_the_rest_is_read() {
        let tx = Sender::new(4);
        let mut rx = tx.subscribe();
        let other = tx.clone();
        tx.send(1).unwrap();
        drop(tx);
        other.send(2).unwrap();
        drop(other);
        assert_eq!(rx.recv().await, Ok(1));
        assert_eq!(rx.recv().await, Ok(2));
        assert_eq!(rx.recv().await, Err(RecvError::Closed));
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_on_a_send_and_on_the_close() {
        let tx = Sender::new(4);
        let mut rx = tx.subscribe();
        let waiting = tokio::spawn(async move {
            let first = rx.recv().await;
            let second = rx.recv().await;
            (first, second)
        });
        tokio::task::yield_now().await;
        tx.send("a").unwrap();
        tokio::task::yield_now().await;
        drop(tx);
        let (first, second) = waiting.await.unwrap();
        assert_eq!(first, Ok("a"));
        assert_eq!(second, Err(RecvError::Closed));
    }

    #[tokio::test]
    async fn a_cancelled_recv_takes_nothing() {
        let tx = Sender::new(4);
        let mut rx = tx.subscribe();
        let cancelled = tokio::time::timeout(std::time::Duration::from_millis(1), rx.recv()).await;
        assert!(cancelled.is_err());
        tx.send(5).unwrap();
        tokio::select! {
            biased;
            got = rx.recv() => assert_eq!(got, Ok(5)),
            () = std::future::ready(()) => panic!("the value is there"),
        }
    }
}
