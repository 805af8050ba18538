//! The fan-out baseline: a bare tokio-tungstenite relay, measured in the same run as Chopin's
//! room fan-out and the same way.
//!
//! Owns: the relay server (run by `chopin-bench-sockets raw-relay` as its own process: one task
//! reading each connection and one writing it, as Chopin's sockets have; every text or binary
//! frame a socket sends is cloned — the same bytes, shared — onto the queue of every other socket
//! on the same path, in the order received; `relay:hello` is sent to a socket once it is
//! counted in its room, as Chopin's greeting tells a socket it is in its room), and its clients,
//! which connect with the same scripted browser socket the Chopin side uses. Does not own: what
//! is relayed or counted ([`crate::fanout`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::load::dial;

/// What the relay prints before its URL.
pub const LISTENING: &str = "raw relay listening on ";

/// The frame a socket gets once it is in its room.
pub const HELLO: &str = r#"{"type":"relay:hello"}"#;

/// Chopin's socket settings: a 4 KiB read buffer, and every message written at once.
fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0)
}

/// The sockets of each path: an id and the queue of its writer.
type Rooms = Arc<Mutex<BTreeMap<String, Vec<(u64, mpsc::UnboundedSender<Message>)>>>>;

/// The `raw-relay` mode: serves the relay on `127.0.0.1:0` until killed.
pub async fn serve() -> Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .context("the raw relay cannot listen")?;
    println!("{LISTENING}http://{}", listener.local_addr()?);
    let rooms = Rooms::default();
    let mut next = 0u64;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                next += 1;
                tokio::spawn(connection(stream, rooms.clone(), next));
            }
            Err(e) => {
                eprintln!("raw relay: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(stream: TcpStream, rooms: Rooms, id: u64) {
    let _ = stream.set_nodelay(true);
    let mut path = String::new();
    // The error type is tungstenite's, whatever its size.
    #[allow(clippy::result_large_err)]
    let remember = |request: &Request, response: Response| {
        path = request.uri().path().to_owned();
        Ok(response)
    };
    let Ok(ws) =
        tokio_tungstenite::accept_hdr_async_with_config(stream, remember, Some(config())).await
    else {
        return;
    };
    let (mut sink, mut incoming) = ws.split();
    let (tx, mut queue) = mpsc::unbounded_channel::<Message>();
    let writer = tokio::spawn(async move {
        while let Some(message) = queue.recv().await {
            if sink.send(message).await.is_err() {
                return;
            }
        }
    });
    rooms
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(path.clone())
        .or_default()
        .push((id, tx.clone()));
    let _ = tx.send(Message::text(HELLO));
    while let Some(Ok(message)) = incoming.next().await {
        match message {
            Message::Text(_) | Message::Binary(_) => {
                let others: Vec<mpsc::UnboundedSender<Message>> = rooms
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&path)
                    .map(|members| {
                        members
                            .iter()
                            .filter(|(member, _)| *member != id)
                            .map(|(_, tx)| tx.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                for other in others {
                    let _ = other.send(message.clone());
                }
            }
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }
    if let Some(members) = rooms
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(&path)
    {
        members.retain(|(member, _)| *member != id);
    }
    drop(tx);
    let _ = writer.await;
}

/// Opens a socket on the relay at `host` in room `path`, read up to its `relay:hello`.
pub async fn join(host: &str, path: &str) -> Result<BrowserSocket> {
    let stream = dial(host).await.map_err(|e| anyhow!("the relay {e}"))?;
    let mut socket = BrowserSocket::connect(stream, host, path, None, None)
        .await
        .map_err(|e| anyhow!("the relay refused the upgrade: {e}"))?;
    loop {
        match socket
            .recv_json()
            .await
            .map_err(|e| anyhow!("a relay socket lost its hello: {e}"))?
        {
            BrowserEvent::Json(value) if value["type"] == "relay:hello" => return Ok(socket),
            BrowserEvent::Closed { code, reason } => {
                return Err(anyhow!("a relay socket was closed: {code} {reason:?}"))
            }
            _ => {}
        }
    }
}
