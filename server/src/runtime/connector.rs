//! Outbound connections, behind a seam.
//!
//! Owns: opening byte streams to other hosts (GitHub REST, GitHub OAuth, GitHub MCP) and a
//! small HTTP/1.1 client over them, with TLS (rustls, the Web PKI roots) for `https://` URLs
//! layered over whatever stream the connector gives: one request per fresh connection, its
//! response read whole up to a cap ([`SendOptions::max_body_bytes`], by default
//! [`MAX_RESPONSE_BODY_BYTES`]). Production connects over tokio TCP; the simulator supplies a
//! connector over turmoil TCP to fixture hosts. Nothing else in the server opens an outbound
//! socket.
//! Does not own: deadlines (each caller bounds its own call with `tokio::time::timeout`), retries,
//! what a status code means, or how many calls may run at once (the GitHub client caps its own).
//!
//! Invariants: no task is spawned. The connection (hyper's connection future, owning the socket)
//! is driven inside the request's own future, so when that future completes, times out or is
//! dropped, the connection and its socket go with it at once — even when the peer has stopped
//! reading and a TLS close could never be flushed. A body is never held past its cap: a
//! declared `content-length` over the cap is refused before reading, and reading stops at the
//! first frame that would pass it ([`HttpError::BodyTooLarge`] names the cap).

use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use tokio::io::{AsyncRead, AsyncWrite};

/// A bidirectional byte stream.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

pub type BoxedIo = Pin<Box<dyn Io>>;

#[async_trait]
pub trait Connector: Send + Sync + 'static {
    async fn connect(&self, host: &str, port: u16) -> std::io::Result<BoxedIo>;
}

pub type SharedConnector = Arc<dyn Connector>;

/// Real TCP.
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpConnector;

#[async_trait]
impl Connector for TcpConnector {
    async fn connect(&self, host: &str, port: u16) -> std::io::Result<BoxedIo> {
        let stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream.set_nodelay(true)?;
        Ok(Box::pin(stream))
    }
}

/// The TLS settings for `https://` URLs: the Web PKI's root certificates.
pub fn default_tls() -> Arc<rustls::ClientConfig> {
    static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    TLS.get_or_init(|| {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        Arc::new(tls_with_roots(roots))
    })
    .clone()
}

/// A TLS client configuration trusting exactly `roots`.
pub fn tls_with_roots(roots: rustls::RootCertStore) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// The most bytes of one response body the client reads unless told otherwise: 1 MiB. GitHub's
/// REST and OAuth answers the server asks for are a few KiB.
pub const MAX_RESPONSE_BODY_BYTES: usize = 1024 * 1024;

/// How one request is sent.
#[derive(Clone)]
pub struct SendOptions {
    /// TLS settings for `https://` URLs.
    pub tls: Arc<rustls::ClientConfig>,
    /// The most bytes of the response body read; a longer body is [`HttpError::BodyTooLarge`].
    pub max_body_bytes: usize,
}

impl Default for SendOptions {
    /// The Web PKI roots and [`MAX_RESPONSE_BODY_BYTES`].
    fn default() -> Self {
        Self {
            tls: default_tls(),
            max_body_bytes: MAX_RESPONSE_BODY_BYTES,
        }
    }
}

impl std::fmt::Debug for SendOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendOptions")
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("bad URL {0:?}: expected http:// or https://host[:port]/path")]
    BadUrl(String),
    #[error("TLS with {0} failed: {1}")]
    Tls(String, std::io::Error),
    #[error("connect to {0} failed: {1}")]
    Connect(String, std::io::Error),
    #[error("HTTP exchange failed: {0}")]
    Http(#[from] hyper::Error),
    #[error("bad request: {0}")]
    Request(#[from] http::Error),
    /// The response body is longer than the cap; reading stopped there.
    #[error("the response body is longer than the {limit_bytes}-byte cap")]
    BodyTooLarge { limit_bytes: usize },
}

/// A response read whole.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// Sends one HTTP/1.1 request over a fresh connection from `connector` (TLS with the Web PKI
/// roots for `https://`), reading at most [`MAX_RESPONSE_BODY_BYTES`] of the answer.
pub async fn send(
    connector: &dyn Connector,
    request: http::Request<Bytes>,
) -> Result<HttpResponse, HttpError> {
    send_with(connector, &SendOptions::default(), request).await
}

/// [`send`] with the given TLS settings for `https://` URLs.
pub async fn send_with_tls(
    connector: &dyn Connector,
    tls: &Arc<rustls::ClientConfig>,
    request: http::Request<Bytes>,
) -> Result<HttpResponse, HttpError> {
    let options = SendOptions {
        tls: tls.clone(),
        ..SendOptions::default()
    };
    send_with(connector, &options, request).await
}

/// [`send`] with the given [`SendOptions`].
pub async fn send_with(
    connector: &dyn Connector,
    options: &SendOptions,
    request: http::Request<Bytes>,
) -> Result<HttpResponse, HttpError> {
    let max_body_bytes = options.max_body_bytes;
    let (head, body, connection) = open(connector, options, request).await?;
    // A declared length over the cap is refused before anything is read.
    let declared = head
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > max_body_bytes as u64) {
        return Err(HttpError::BodyTooLarge {
            limit_bytes: max_body_bytes,
        });
    }
    // The connection is driven while the body is read, never on a task of its own: dropping
    // this future (a caller's timeout) drops the connection and closes its socket.
    let mut state = StreamState {
        body,
        connection: Some(connection),
        read: 0,
        max_body_bytes,
    };
    let mut read = Vec::new();
    while let Some(chunk) = state.next_chunk().await? {
        read.extend_from_slice(&chunk);
    }
    Ok(HttpResponse {
        status: head.status,
        headers: head.headers,
        body: Bytes::from(read),
    })
}

/// `GET url`.
pub async fn get(connector: &dyn Connector, url: &str) -> Result<HttpResponse, HttpError> {
    let request = http::Request::get(url).body(Bytes::new())?;
    send(connector, request).await
}

/// The connector as the harness layer's HTTP port ([`chopin_harness::transport`]): a response's
/// body streamed as it is read, at most the cap the caller gives. The connection is driven by
/// the body stream itself (no task is spawned), so dropping the stream closes the socket.
pub struct Streaming(pub SharedConnector);

#[async_trait]
impl chopin_harness::transport::HttpTransport for Streaming {
    async fn send(
        &self,
        request: http::Request<Bytes>,
        max_body_bytes: usize,
    ) -> Result<
        http::Response<chopin_harness::transport::BodyStream>,
        chopin_harness::transport::TransportError,
    > {
        let (head, body, connection) = open(&*self.0, &SendOptions::default(), request)
            .await
            .map_err(connection_error)?;
        let state = StreamState {
            body,
            connection: Some(connection),
            read: 0,
            max_body_bytes,
        };
        let stream = futures::stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            match state.next_chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), Some(state))),
                Ok(None) => None,
                Err(e) => Some((Err(connection_error(e)), None)),
            }
        });
        Ok(http::Response::from_parts(head, Box::pin(stream)))
    }
}

/// An [`HttpError`] as the harness layer's port words it.
fn connection_error(e: HttpError) -> chopin_harness::transport::TransportError {
    use chopin_harness::transport::TransportError;
    match e {
        HttpError::BadUrl(url) => TransportError::BadUrl(url),
        HttpError::BodyTooLarge { limit_bytes } => TransportError::BodyTooLarge { limit_bytes },
        other => TransportError::Connection(other.to_string()),
    }
}

/// A streamed body and the connection it comes over, driven together.
struct StreamState {
    body: Incoming,
    connection: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    read: usize,
    max_body_bytes: usize,
}

impl StreamState {
    /// The next data chunk, `None` at the end.
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        loop {
            let frame = match self.connection.as_mut() {
                Some(connection) => {
                    tokio::select! {
                        biased;
                        frame = self.body.frame() => frame,
                        () = connection.as_mut() => {
                            // The connection ended: what the body still holds is read alone.
                            self.connection = None;
                            continue;
                        }
                    }
                }
                None => self.body.frame().await,
            };
            let Some(frame) = frame else {
                return Ok(None);
            };
            let Ok(data) = frame?.into_data() else {
                continue; // trailers
            };
            self.read += data.len();
            if self.read > self.max_body_bytes {
                return Err(HttpError::BodyTooLarge {
                    limit_bytes: self.max_body_bytes,
                });
            }
            return Ok(Some(data));
        }
    }
}

/// Connects, sends `request` and reads the response's head: the head, the body still to read
/// and the connection to drive while reading it.
async fn open(
    connector: &dyn Connector,
    options: &SendOptions,
    request: http::Request<Bytes>,
) -> Result<
    (
        http::response::Parts,
        Incoming,
        Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    ),
    HttpError,
> {
    let uri = request.uri().clone();
    let secure = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(HttpError::BadUrl(uri.to_string())),
    };
    let host = uri
        .host()
        .ok_or_else(|| HttpError::BadUrl(uri.to_string()))?
        .to_owned();
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let mut io = connector
        .connect(&host, port)
        .await
        .map_err(|e| HttpError::Connect(format!("{host}:{port}"), e))?;
    if secure {
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|_| HttpError::BadUrl(uri.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(options.tls.clone())
            .connect(name, io)
            .await
            .map_err(|e| HttpError::Tls(format!("{host}:{port}"), e))?;
        io = Box::pin(stream);
    }
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    let (parts, body) = origin_form(request, &uri, &host)?.into_parts();
    let mut connection: Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
        Box::pin(async move {
            let _ = connection.await;
        });
    let send = sender.send_request(http::Request::from_parts(parts, Full::new(body)));
    let mut send = std::pin::pin!(send);
    let response = tokio::select! {
        biased;
        response = &mut send => response?,
        () = connection.as_mut() => {
            // The connection ended before the head: what hyper read is the answer.
            connection = Box::pin(std::future::pending());
            send.await?
        }
    };
    let (head, body) = response.into_parts();
    Ok((head, body, connection))
}

/// `request` with a `Host` header and its URI in origin form, as HTTP/1.1 wants on the wire.
fn origin_form(
    request: http::Request<Bytes>,
    uri: &http::Uri,
    host: &str,
) -> Result<http::Request<Bytes>, HttpError> {
    let (mut parts, body) = request.into_parts();
    if !parts.headers.contains_key(http::header::HOST) {
        let value = match uri.port_u16() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        if let Ok(v) = http::HeaderValue::from_str(&value) {
            parts.headers.insert(http::header::HOST, v);
        }
    }
    parts.uri = uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/")
        .parse()
        .map_err(|_| HttpError::BadUrl(uri.to_string()))?;
    Ok(http::Request::from_parts(parts, body))
}
