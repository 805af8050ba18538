//! The baseline: what a bare tokio-tungstenite WebSocket costs on this machine, measured in the
//! same run as Chopin and the same way.
//!
//! Owns: the echo server (run by `chopin-bench-sockets raw-server` as its own process, so its
//! RSS is its own: one task per connection, a 4 KiB read buffer, writes sent at once, every text
//! or binary frame sent back), and its clients: opening sockets with one echo round trip each
//! (the baseline of an attach or a room greeting) and a sequential echo loop (the baseline of
//! the chat acks). Does not own: concurrency and timing ([`crate::load`]) or the report.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::load::{dial, open_all, Opened, Phase};

/// What the echo server prints before its URL.
pub const LISTENING: &str = "raw echo listening on ";

/// An open client socket to the echo server.
pub type RawSocket = WebSocketStream<TcpStream>;

/// The echo's WebSocket settings, on both ends: a 4 KiB read buffer, and every message written
/// to the socket at once rather than gathered in a write buffer.
fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0)
}

/// A frame the size of an agent `attach` or a `chat:send` (about 100 bytes of JSON).
fn frame(i: usize) -> String {
    format!(
        r#"{{"type":"echo","requestId":"raw-{i}","text":"round trip {i} of the raw tokio-tungstenite baseline"}}"#
    )
}

/// The `raw-server` mode: serves the echo on `127.0.0.1:0` until killed.
pub async fn serve() -> Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .context("the raw echo server cannot listen")?;
    println!("{LISTENING}http://{}", listener.local_addr()?);
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(echo(stream));
            }
            Err(e) => {
                // Out of descriptors, most likely: say so and keep serving what is open.
                eprintln!("raw echo: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn echo(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config())).await
    else {
        return;
    };
    while let Some(Ok(message)) = ws.next().await {
        match message {
            Message::Text(_) | Message::Binary(_) => {
                if ws.send(message).await.is_err() {
                    return;
                }
            }
            Message::Close(_) => return,
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }
}

/// Opens `count` sockets to the echo at `host`, at most `concurrency` in flight; each sends one
/// frame and waits for it back. `step` is that round trip; `total` adds the TCP connect and
/// the upgrade. `first` numbers the sockets in failures.
pub async fn sockets(
    host: &str,
    count: usize,
    concurrency: usize,
    first: usize,
) -> Phase<RawSocket> {
    let host: std::sync::Arc<str> = host.into();
    open_all(
        count,
        concurrency,
        move |i| format!("raw socket {}", first + i),
        move |i| {
            let host = host.clone();
            async move {
                let started = Instant::now();
                let mut ws = upgrade(&host).await?;
                let sent = Instant::now();
                round_trip(&mut ws, frame(first + i)).await?;
                Ok(Opened {
                    socket: ws,
                    step: sent.elapsed(),
                    total: started.elapsed(),
                })
            }
        },
    )
    .await
}

/// On one more socket, `count` round trips one after another. Returns each round trip and the
/// loop's wall time.
pub async fn echo_loop(host: &str, count: usize) -> Result<(Vec<Duration>, Duration)> {
    let mut ws = upgrade(host)
        .await
        .map_err(|e| anyhow::anyhow!("the raw echo loop's socket {e}"))?;
    let mut samples = Vec::with_capacity(count);
    let started = Instant::now();
    for i in 0..count {
        let sent = Instant::now();
        tokio::time::timeout(Duration::from_secs(30), round_trip(&mut ws, frame(i)))
            .await
            .map_err(|_| anyhow::anyhow!("raw echo {i} got no answer within 30 s"))?
            .map_err(|e| anyhow::anyhow!("raw echo {i}: {e}"))?;
        samples.push(sent.elapsed());
    }
    let elapsed = started.elapsed();
    let _ = ws.close(None).await;
    Ok((samples, elapsed))
}

async fn upgrade(host: &str) -> Result<RawSocket, String> {
    let stream = dial(host).await?;
    let (ws, _) = tokio_tungstenite::client_async_with_config(
        format!("ws://{host}/"),
        stream,
        Some(config()),
    )
    .await
    .map_err(|e| format!("was refused at the upgrade: {e}"))?;
    Ok(ws)
}

/// Sends `text` and reads until it comes back.
async fn round_trip(ws: &mut RawSocket, text: String) -> Result<(), String> {
    ws.send(Message::text(text.clone()))
        .await
        .map_err(|e| format!("could not send: {e}"))?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(echoed))) if echoed.as_str() == text => return Ok(()),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format!("lost its echo: {e}")),
            None => return Err("lost its echo: the stream ended".to_owned()),
        }
    }
}
