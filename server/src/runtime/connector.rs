//! Outbound connections, behind a seam.
//!
//! Owns: opening byte streams to other hosts (GitHub REST, GitHub MCP) and a small HTTP/1.1
//! client over them, with TLS (rustls, the Web PKI roots) for `https://` URLs layered over
//! whatever stream the connector gives. Production connects over tokio TCP; the simulator
//! supplies a connector over turmoil TCP to fixture hosts. Nothing else in the server opens an
//! outbound socket.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
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
}

/// A response read whole.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// Sends one HTTP/1.1 request over a fresh connection from `connector` (TLS with the Web PKI
/// roots for `https://`).
pub async fn send(
    connector: &dyn Connector,
    request: http::Request<Bytes>,
) -> Result<HttpResponse, HttpError> {
    send_with_tls(connector, &default_tls(), request).await
}

/// [`send`] with the given TLS settings for `https://` URLs.
pub async fn send_with_tls(
    connector: &dyn Connector,
    tls: &Arc<rustls::ClientConfig>,
    request: http::Request<Bytes>,
) -> Result<HttpResponse, HttpError> {
    let uri = request.uri().clone();
    let secure = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(HttpError::BadUrl(uri.to_string())),
    };
    let host = uri
        .host()
        .ok_or_else(|| HttpError::BadUrl(uri.to_string()))?;
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let mut io = connector
        .connect(host, port)
        .await
        .map_err(|e| HttpError::Connect(format!("{host}:{port}"), e))?;
    if secure {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|_| HttpError::BadUrl(uri.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, io)
            .await
            .map_err(|e| HttpError::Tls(format!("{host}:{port}"), e))?;
        io = Box::pin(stream);
    }
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    let driver = tokio::spawn(conn);
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
    // HTTP/1.1 wants origin-form on the wire.
    parts.uri = uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/")
        .parse()
        .map_err(|_| HttpError::BadUrl(uri.to_string()))?;
    let response = sender
        .send_request(http::Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    driver.abort();
    Ok(HttpResponse {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// `GET url`.
pub async fn get(connector: &dyn Connector, url: &str) -> Result<HttpResponse, HttpError> {
    let request = http::Request::get(url).body(Bytes::new())?;
    send(connector, request).await
}
