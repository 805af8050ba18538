//! The outbound HTTP client cannot leak: a request that is dropped or times out takes its
//! connection with it (no task or socket outlives the call), and a response body is read only up
//! to its cap. The peers here are plain tokio TCP servers that misbehave on purpose.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;

use chopin_server::runtime::connector::{
    self, BoxedIo, Connector, HttpError, SendOptions, TcpConnector, MAX_RESPONSE_BODY_BYTES,
};
use hyper::body::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// How long the peer waits to see a dropped request's connection close. Only a failing test
/// waits this long: a closed connection is seen at once.
const CLOSE_BOUND: Duration = Duration::from_secs(5);

async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, format!("http://127.0.0.1:{port}"))
}

/// Reads until the client closes its side (end of stream or a reset). `Err` when the
/// connection is still open after [`CLOSE_BOUND`].
async fn closed_by_client(stream: &mut TcpStream) -> Result<(), &'static str> {
    let drained = tokio::time::timeout(CLOSE_BOUND, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    drained.map_err(|_| "the connection is still open after its request was dropped")
}

/// Reads the request head, so the client is past writing when the peer goes quiet.
async fn read_head(stream: &mut TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn a_request_dropped_while_waiting_for_the_answer_closes_its_connection() {
    let (listener, base) = listener().await;
    let url = format!("{base}/never-answered");
    let call = tokio::time::timeout(
        Duration::from_millis(100),
        connector::get(&TcpConnector, &url),
    );
    let (accepted, answer) = tokio::join!(listener.accept(), call);
    assert!(
        answer.is_err(),
        "the peer never answers: the call times out"
    );
    let (mut peer, _) = accepted.unwrap();
    closed_by_client(&mut peer).await.unwrap();
}

#[tokio::test]
async fn a_request_dropped_while_the_body_is_still_coming_closes_its_connection() {
    let (listener, base) = listener().await;
    let peer = tokio::spawn(async move {
        let (mut peer, _) = listener.accept().await.unwrap();
        read_head(&mut peer).await;
        // The head and a little of the body; the rest never comes.
        peer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n{\"login\":")
            .await
            .unwrap();
        closed_by_client(&mut peer).await
    });
    let answer = tokio::time::timeout(
        Duration::from_millis(200),
        connector::get(&TcpConnector, &format!("{base}/hung-body")),
    )
    .await;
    assert!(
        answer.is_err(),
        "the body never finishes: the call times out"
    );
    peer.await.unwrap().unwrap();
}

/// A peer that answers 200 with a chunked body that never ends.
async fn endless_body(listener: TcpListener) -> Result<(), &'static str> {
    let (mut peer, _) = listener.accept().await.unwrap();
    read_head(&mut peer).await;
    peer.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "x".repeat(64 * 1024));
    // Writing fails once the client has stopped reading and closed the connection.
    for _ in 0..1_000 {
        if peer.write_all(chunk.as_bytes()).await.is_err() {
            return Ok(());
        }
    }
    Err("the client read 64 MiB of a body capped far lower")
}

#[tokio::test]
async fn reading_an_endless_body_stops_at_the_cap() {
    let (listener, base) = listener().await;
    let peer = tokio::spawn(endless_body(listener));
    let error = connector::get(&TcpConnector, &format!("{base}/endless"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, HttpError::BodyTooLarge { limit_bytes } if limit_bytes == MAX_RESPONSE_BODY_BYTES),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&MAX_RESPONSE_BODY_BYTES.to_string()),
        "the error names the cap: {error}"
    );
    peer.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_declared_length_over_the_cap_is_refused_before_reading() {
    let (listener, base) = listener().await;
    let peer = tokio::spawn(async move {
        let (mut peer, _) = listener.accept().await.unwrap();
        read_head(&mut peer).await;
        peer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2000\r\n\r\n")
            .await
            .unwrap();
        // Nothing of the body is sent: a client that waited for it would hang.
        closed_by_client(&mut peer).await
    });
    let options = SendOptions {
        max_body_bytes: 1_000,
        ..SendOptions::default()
    };
    let request = http::Request::get(format!("{base}/big"))
        .body(Bytes::new())
        .unwrap();
    let error = tokio::time::timeout(
        CLOSE_BOUND,
        connector::send_with(&TcpConnector, &options, request),
    )
    .await
    .expect("refused without waiting for the body")
    .unwrap_err();
    assert!(
        matches!(error, HttpError::BodyTooLarge { limit_bytes: 1_000 }),
        "{error:?}"
    );
    peer.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_body_at_the_cap_is_read_whole() {
    let (listener, base) = listener().await;
    tokio::spawn(async move {
        let (mut peer, _) = listener.accept().await.unwrap();
        read_head(&mut peer).await;
        let body = "y".repeat(1_000);
        let reply = format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1f4\r\n{}\r\n1f4\r\n{}\r\n0\r\n\r\n", &body[..500], &body[500..]);
        peer.write_all(reply.as_bytes()).await.unwrap();
        let _ = closed_by_client(&mut peer).await;
    });
    let options = SendOptions {
        max_body_bytes: 1_000,
        ..SendOptions::default()
    };
    let request = http::Request::get(format!("{base}/exact"))
        .body(Bytes::new())
        .unwrap();
    let response = connector::send_with(&TcpConnector, &options, request)
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body.len(), 1_000);
}

/// Real TCP whose streams count themselves while open, so a test sees when the client has let
/// go of a socket.
struct Tracking {
    open: Arc<AtomicUsize>,
}

struct Tracked {
    inner: TcpStream,
    open: Arc<AtomicUsize>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Connector for Tracking {
    async fn connect(&self, host: &str, port: u16) -> std::io::Result<BoxedIo> {
        let inner = TcpStream::connect((host, port)).await?;
        self.open.fetch_add(1, Ordering::SeqCst);
        Ok(Box::pin(Tracked {
            inner,
            open: self.open.clone(),
        }))
    }
}

/// An HTTPS peer for `localhost` that completes the TLS handshake and then never reads again,
/// holding each connection until the test ends.
async fn tls_peer_that_stops_reading() -> (u16, Arc<rustls::ClientConfig>) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.clone()], key.into())
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            if let Ok(tls) = acceptor.accept(tcp).await {
                held.push(tls);
            }
        }
    });
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    (port, Arc::new(connector::tls_with_roots(roots)))
}

#[tokio::test]
async fn a_request_dropped_while_a_peer_will_not_read_lets_go_of_its_socket() {
    let (port, tls) = tls_peer_that_stops_reading().await;
    let open = Arc::new(AtomicUsize::new(0));
    let tracking = Tracking { open: open.clone() };
    // More than the socket buffers on both sides hold, so writing the request blocks.
    let request = http::Request::post(format!("https://localhost:{port}/upload"))
        .body(Bytes::from(vec![b'x'; 32 * 1024 * 1024]))
        .unwrap();
    let answer = tokio::time::timeout(
        Duration::from_millis(300),
        connector::send_with_tls(&tracking, &tls, request),
    )
    .await;
    assert!(answer.is_err(), "the peer never reads: the call times out");
    let released = tokio::time::timeout(CLOSE_BOUND, async {
        while open.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        released.is_ok(),
        "a socket is still held after its request was dropped"
    );
}
