//! A hashing balancer as a host of the world: what the self-hosting guide's nginx does in front
//! of several processes (`PROCESSES=many`), in the simulator.
//!
//! Owns: choosing an upstream for each connection and relaying it. The request head is read
//! whole; the document it names (the id in `/api/documents/<id>/…`, `/api/yjs/<id>` or
//! `/api/channels/<id>/…`, or an agent link's `?document=<id>`) orders the upstreams by
//! rendezvous hashing (each upstream scored by a hash of the document and its name, highest
//! first) — the same order for the same document whichever upstreams are up, as consistent
//! hashing keeps it. An upstream that refuses the connection, does not take it within
//! [`CONNECT_TIMEOUT_MS`], or answers `503` is passed over for the next, as `proxy_next_upstream error http_503` does for a request with no body; the last
//! `503` is relayed when every upstream refused, and `502` when none could be reached. Once an
//! answer is relayed, the two sockets are joined byte for byte (a WebSocket after its `101`).
//! Does not own: anything the server decides; the router never reads past an answer's head.

use std::io;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::{TcpListener, TcpStream};
use uuid::Uuid;

/// The longest request or answer head read.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long a connection to an upstream may take before the next is tried (nginx's
/// `proxy_connect_timeout`; a crashed host never answers a connection at all).
pub const CONNECT_TIMEOUT_MS: u64 = 250;

/// Serves on `port` as the balancer of `upstreams` (server hosts, each listening on that same
/// port) until the host ends.
pub async fn serve(upstreams: Vec<String>, port: u16) -> turmoil::Result {
    let listener = TcpListener::bind(("0.0.0.0", port)).await?;
    loop {
        let (client, _) = listener.accept().await?;
        let upstreams = upstreams.clone();
        tokio::spawn(async move {
            let _ = relay(client, &upstreams, port).await;
        });
    }
}

/// The upstreams in the order the router tries them for a request whose head is `head`.
pub fn order(upstreams: &[String], head: &[u8]) -> Vec<String> {
    let key = document_named(head)
        .map(|d| d.to_string())
        .unwrap_or_else(|| String::from_utf8_lossy(head).into_owned());
    let mut scored: Vec<(u64, &String)> = upstreams
        .iter()
        .map(|upstream| {
            let digest = Sha256::digest(format!("{key}\n{upstream}").as_bytes());
            let mut score = [0u8; 8];
            score.copy_from_slice(&digest[..8]);
            (u64::from_be_bytes(score), upstream)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().map(|(_, u)| u.clone()).collect()
}

/// The upstream the router sends a request for `document` to first.
pub fn first_choice(upstreams: &[String], document: Uuid) -> String {
    let head = format!("GET /api/documents/{document}/room HTTP/1.1\r\n\r\n");
    order(upstreams, head.as_bytes())
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// The document a request head names, by its path or an agent link's `?document=`.
fn document_named(head: &[u8]) -> Option<Uuid> {
    let line = head.split(|b| *b == b'\r').next()?;
    let target = std::str::from_utf8(line).ok()?.split(' ').nth(1)?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut segments = path.trim_start_matches('/').split('/');
    if segments.next() == Some("api") {
        if let (Some("documents" | "yjs" | "channels"), Some(id)) =
            (segments.next(), segments.next())
        {
            if let Ok(id) = Uuid::parse_str(id) {
                return Some(id);
            }
        }
    }
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("document="))
        .and_then(|id| Uuid::parse_str(id).ok())
}

/// Reads up to the end of a head (`\r\n\r\n`): the head, and whatever came after it.
async fn read_head(stream: &mut TcpStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = read.split_off(end + 4);
            return Ok((read, rest));
        }
        if read.len() > MAX_HEAD_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "head too long"));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        read.extend_from_slice(&chunk[..n]);
    }
}

/// The status of an answer head.
fn status(head: &[u8]) -> Option<u16> {
    std::str::from_utf8(head)
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

async fn relay(mut client: TcpStream, upstreams: &[String], port: u16) -> io::Result<()> {
    let (head, early) = read_head(&mut client).await?;
    // Only a request with no body may be sent to another upstream after a refusal.
    let resendable = head.starts_with(b"GET ") || head.starts_with(b"HEAD ");
    let mut refused: Option<(TcpStream, Vec<u8>, Vec<u8>)> = None;
    for upstream in order(upstreams, &head) {
        let connecting = TcpStream::connect((upstream.as_str(), port));
        let Ok(Ok(mut server)) =
            tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connecting).await
        else {
            continue;
        };
        server.write_all(&head).await?;
        server.write_all(&early).await?;
        let Ok((answer, rest)) = read_head(&mut server).await else {
            continue;
        };
        if resendable && status(&answer) == Some(503) {
            refused = Some((server, answer, rest));
            continue;
        }
        return join(client, server, &answer, &rest).await;
    }
    match refused {
        Some((server, answer, rest)) => join(client, server, &answer, &rest).await,
        None => {
            client
                .write_all(
                    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await
        }
    }
}

/// Relays an upstream's answer head and what followed it, then joins the sockets.
async fn join(
    mut client: TcpStream,
    mut server: TcpStream,
    answer: &[u8],
    rest: &[u8],
) -> io::Result<()> {
    client.write_all(answer).await?;
    client.write_all(rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_a_request_names() {
        let id = Uuid::from_u128(9);
        let head = |target: &str| format!("GET {target} HTTP/1.1\r\nhost: x\r\n\r\n");
        for target in [
            format!("/api/documents/{id}/room"),
            format!("/api/yjs/{id}"),
            format!("/api/channels/{id}/attachments"),
            format!("/api/v1/agent?document={id}"),
        ] {
            assert_eq!(
                document_named(head(&target).as_bytes()),
                Some(id),
                "{target}"
            );
        }
        assert_eq!(document_named(head("/api/repositories").as_bytes()), None);
    }

    #[test]
    fn a_document_keeps_its_order_whichever_upstreams_are_up() {
        let all: Vec<String> = ["server", "server-b", "server-c"]
            .map(String::from)
            .to_vec();
        let id = Uuid::from_u128(11);
        let head = format!("GET /api/yjs/{id} HTTP/1.1\r\n\r\n");
        let first = order(&all, head.as_bytes());
        assert_eq!(first[0], first_choice(&all, id));
        let without: Vec<String> = all.iter().filter(|u| **u != first[0]).cloned().collect();
        assert_eq!(order(&without, head.as_bytes()), first[1..].to_vec());
    }
}
