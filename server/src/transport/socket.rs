//! One WebSocket, split in two: the connection's own loop reads frames and keeps its timers, and
//! one writer task sends what the loop queued. A peer that stops reading can fill its queue or
//! stall its writer, never the loop: reads, pings and deadlines go on, and the peer is cut off
//! as a slow consumer.
//!
//! Owns: [`tune`] (the buffer sizes every upgrade gets), [`split`] (the reader half and an
//! [`Outbox`]), and the bounds: at most [`QUEUE_FRAMES`] frames and [`QUEUE_BYTES`] bytes queued
//! per socket, at most [`WRITE_STALL`] for one frame to go out ([`CLOSING_STALL`] once the
//! process is stopping).
//! Does not own: what a frame says or when a socket closes (the agent and room sockets decide).
//!
//! Invariants: queueing never waits; a refused frame means the socket is finished (the caller
//! ends its loop); the writer task is tracked by the process's shutdown, so a stop drains it;
//! when the writer ends (done, failed or stalled) it drops its half, and the connection closes
//! once the loop lets go of the other.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use futures::stream::SplitStream;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::runtime::Shutdown;

/// Frames a socket may have queued and not yet written.
pub const QUEUE_FRAMES: usize = 256;
/// Bytes a socket may have queued and not yet written (frames are up to 1–2 MiB each).
pub const QUEUE_BYTES: usize = 4 * 1024 * 1024;
/// The longest one frame may take to go out before a browser's socket counts as a slow consumer.
/// (An agent link uses its connection timeout: a client that reads nothing answers no ping
/// either, and its silence timer decides first.)
pub const WRITE_STALL: Duration = Duration::from_secs(30);
/// The same bound once the process is stopping, so a peer that does not read cannot hold the
/// drain (and the writer lease) for long.
pub const CLOSING_STALL: Duration = Duration::from_secs(2);
/// The read buffer each socket allocates up front (tungstenite's default is 128 KiB). Larger
/// messages still arrive whole: the buffer grows for them and shrinks back with the next.
pub const READ_BUFFER_BYTES: usize = 4 * 1024;

/// How long a closing socket keeps reading for the peer's close answer.
pub const LINGER: Duration = Duration::from_secs(2);

/// After the loop of a socket has ended (a close queued, or the peer gone): reads and drops what
/// the peer still sends until its close answer, the end of the connection, or [`LINGER`]. A
/// connection dropped with unread data in it is reset by the operating system, and a reset can
/// overtake the close frame: the peer would see 1006 instead of the code it was sent.
pub async fn linger(reader: &mut SplitStream<WebSocket>) {
    let _ = tokio::time::timeout(LINGER, async {
        while let Some(Ok(message)) = reader.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

/// How often a socket with nothing else to say is pinged.
pub const PING_EVERY: Duration = Duration::from_secs(30);
/// A socket that answers nothing (no frame, no pong) for this long is gone: it is closed.
pub const SILENCE_BOUND: Duration = Duration::from_secs(90);

/// When an open document socket's access is checked again: every period from the socket's
/// start (the first check one period after it opened).
pub struct Rechecks {
    interval: tokio::time::Interval,
}

impl Rechecks {
    pub fn every(ms: u64) -> Self {
        let period = Duration::from_millis(ms.max(1));
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.reset();
        Rechecks { interval }
    }

    /// Resolves when the next check is due. Cancel-safe.
    pub async fn tick(&mut self) {
        self.interval.tick().await;
    }
}

/// When a socket is pinged, and when it counts as gone: pings every [`PING_EVERY`], gone after
/// [`SILENCE_BOUND`] without a frame of any kind (pongs included).
pub struct Liveness {
    heard: tokio::time::Instant,
    next_ping: tokio::time::Instant,
}

/// What [`Liveness::due`] says is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    Ping,
    Silent,
}

impl Default for Liveness {
    fn default() -> Self {
        Self::new()
    }
}

impl Liveness {
    pub fn new() -> Self {
        let now = tokio::time::Instant::now();
        Liveness {
            heard: now,
            next_ping: now + PING_EVERY,
        }
    }

    /// The peer sent something.
    pub fn heard(&mut self) {
        self.heard = tokio::time::Instant::now();
    }

    /// Resolves at the next ping or at the silence bound, whichever comes first; then call
    /// [`Liveness::due`].
    pub async fn tick(&self) {
        tokio::time::sleep_until(self.next_ping.min(self.heard + SILENCE_BOUND)).await
    }

    /// What is due now: the socket is gone, or it gets a ping (and the next one is scheduled).
    pub fn due(&mut self) -> Due {
        let now = tokio::time::Instant::now();
        if now >= self.heard + SILENCE_BOUND {
            return Due::Silent;
        }
        self.next_ping = now + PING_EVERY;
        Due::Ping
    }
}

/// The largest frame the server sends on any socket (a document's whole state for a fresh
/// client, [`crate::content::guard::STATE_MAX_BYTES`], is half of it). Set apart from what a
/// socket reads: a browser takes far larger frames than it may send here.
pub const OUTBOUND_FRAME_MAX_BYTES: usize = 2 * crate::content::guard::STATE_MAX_BYTES;

/// The upgrade with this server's buffer sizes: a small eager read buffer, no write buffering
/// (the writer task writes and flushes one frame at a time), `max_message` as the largest
/// message read, and [`OUTBOUND_FRAME_MAX_BYTES`] (or twice `max_message`, if larger) as the
/// most a frame may leave in the write buffer.
pub fn tune(upgrade: WebSocketUpgrade, max_message: usize) -> WebSocketUpgrade {
    upgrade
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(0)
        .max_write_buffer_size(OUTBOUND_FRAME_MAX_BYTES.max(2 * max_message))
        .max_message_size(max_message)
        .max_frame_size(max_message)
}

/// Why a frame was not queued. Either way the socket is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The peer has not read what is queued (frames or bytes at their bound).
    SlowConsumer,
    /// The frame is larger than any socket sends ([`OUTBOUND_FRAME_MAX_BYTES`]): a bug upstream
    /// (every frame's maker bounds it), counted in `/metrics`.
    TooLarge,
    /// The writer has ended: the connection failed, stalled, or a close went out.
    Gone,
}

/// The queue in front of a socket's writer task. A clone queues on the same socket (for an
/// answer worked out beside the socket's loop).
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Message>,
    queued_bytes: Arc<AtomicUsize>,
    ended: CancellationToken,
    /// Where a frame too large to send is counted (and a planted smaller cap read).
    metrics: Option<Arc<Metrics>>,
}

/// The reading half and the outbox of an upgraded socket; a frame that cannot be written within
/// `stall` ends the writer (a slow consumer).
pub fn split(
    socket: WebSocket,
    shutdown: &Shutdown,
    stall: Duration,
    metrics: &Arc<Metrics>,
) -> (SplitStream<WebSocket>, Outbox) {
    let (mut sink, reader) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Message>(QUEUE_FRAMES);
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    let ended = CancellationToken::new();
    let (bytes, done, process) = (queued_bytes.clone(), ended.clone(), shutdown.clone());
    shutdown.spawn(async move {
        while let Some(message) = rx.recv().await {
            let size = frame_bytes(&message);
            let closing = matches!(message, Message::Close(_));
            let stopping = process.stopping();
            let stall = async move {
                tokio::select! {
                    () = tokio::time::sleep(stall) => {}
                    () = async {
                        stopping.await;
                        tokio::time::sleep(CLOSING_STALL).await;
                    } => {}
                }
            };
            let sent = tokio::select! {
                sent = sink.send(message) => sent.is_ok(),
                () = stall => {
                    tracing::info!("a socket's peer read nothing within the write bound; closing it as a slow consumer");
                    false
                }
            };
            bytes.fetch_sub(size, Ordering::SeqCst);
            if !sent || closing {
                break;
            }
        }
        done.cancel();
    });
    (
        reader,
        Outbox {
            tx,
            queued_bytes,
            ended,
            metrics: Some(metrics.clone()),
        },
    )
}

fn frame_bytes(message: &Message) -> usize {
    match message {
        Message::Text(t) => t.len(),
        Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => b.len(),
        Message::Close(_) => 2,
    }
}

impl Outbox {
    /// Queues `message` without waiting.
    pub fn send(&self, message: Message) -> Result<(), Refused> {
        if self.ended.is_cancelled() {
            return Err(Refused::Gone);
        }
        let size = frame_bytes(&message);
        let cap = self
            .metrics
            .as_ref()
            .and_then(|m| m.outbound_frame_cap())
            .unwrap_or(OUTBOUND_FRAME_MAX_BYTES);
        if size > cap {
            tracing::error!(
                size,
                cap,
                "a frame larger than any socket sends was refused; the socket ends"
            );
            if let Some(metrics) = &self.metrics {
                metrics.frame_too_large();
            }
            return Err(Refused::TooLarge);
        }
        let before = self.queued_bytes.fetch_add(size, Ordering::SeqCst);
        if before > 0 && before + size > QUEUE_BYTES {
            self.queued_bytes.fetch_sub(size, Ordering::SeqCst);
            return Err(Refused::SlowConsumer);
        }
        self.tx.try_send(message).map_err(|e| {
            self.queued_bytes.fetch_sub(size, Ordering::SeqCst);
            match e {
                mpsc::error::TrySendError::Full(_) => Refused::SlowConsumer,
                mpsc::error::TrySendError::Closed(_) => Refused::Gone,
            }
        })
    }

    /// Queues a close frame; the writer ends once it is out.
    pub fn close(&self, code: u16, reason: &str) -> Result<(), Refused> {
        self.send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.to_owned().into(),
        })))
    }

    /// Resolves once the writer has ended (its close went out, or the connection failed or
    /// stalled). Owns what it waits on, so a loop can hold it beside the socket it reads.
    pub fn ended(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.ended.clone().cancelled_owned()
    }

    /// Whether the writer has ended.
    pub fn has_ended(&self) -> bool {
        self.ended.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(capacity: usize) -> (Outbox, mpsc::Receiver<Message>) {
        let (tx, rx) = mpsc::channel(capacity);
        (
            Outbox {
                tx,
                queued_bytes: Arc::default(),
                ended: CancellationToken::new(),
                metrics: None,
            },
            rx,
        )
    }

    #[test]
    fn a_full_queue_refuses_as_a_slow_consumer_without_waiting() {
        let (out, _rx) = outbox(2);
        assert_eq!(out.send(Message::Text("a".into())), Ok(()));
        assert_eq!(out.send(Message::Text("b".into())), Ok(()));
        assert_eq!(
            out.send(Message::Text("c".into())),
            Err(Refused::SlowConsumer)
        );
    }

    #[test]
    fn queued_bytes_are_bounded_but_one_large_frame_always_fits_an_empty_queue() {
        let (out, _rx) = outbox(QUEUE_FRAMES);
        let big = vec![0u8; QUEUE_BYTES + 10];
        assert_eq!(out.send(Message::Binary(big.clone().into())), Ok(()));
        assert_eq!(
            out.send(Message::Binary(vec![0u8; 1].into())),
            Err(Refused::SlowConsumer)
        );
    }

    #[test]
    fn an_ended_writer_refuses_as_gone() {
        let (out, rx) = outbox(2);
        drop(rx);
        assert_eq!(out.send(Message::Text("a".into())), Err(Refused::Gone));
        out.ended.cancel();
        assert_eq!(out.close(1000, "bye"), Err(Refused::Gone));
    }
}

/// A frame the WebSocket layer refused to read: larger than the socket reads at all (refused by
/// its header, before anything is buffered), or a text frame that is not UTF-8. Either ends the
/// socket, after an `error` frame saying which, with the close code RFC 6455 gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    TooLarge { bytes: usize },
    NotUtf8 { detail: String },
}

impl Unreadable {
    /// What a read error was; `None` for anything else (the connection failed).
    pub fn of(error: axum::Error) -> Option<Unreadable> {
        use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
        let error = error.into_inner().downcast::<WsError>().ok()?;
        match *error {
            WsError::Capacity(CapacityError::MessageTooLong { size, .. }) => {
                Some(Unreadable::TooLarge { bytes: size })
            }
            WsError::Utf8(detail) => Some(Unreadable::NotUtf8 { detail }),
            _ => None,
        }
    }

    /// 1009 (message too big) or 1008 (policy violation).
    pub fn close_code(&self) -> u16 {
        match self {
            Unreadable::TooLarge { .. } => 1009,
            Unreadable::NotUtf8 { .. } => 1008,
        }
    }
}
