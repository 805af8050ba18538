//! The port through which an adapter reaches a model over HTTP: the host owns the sockets.
//!
//! Owns: [`HttpTransport`] — one request out, the response's status and headers back with its
//! body as a stream of chunks — and [`TransportError`]. The server implements it over its
//! connector seam (real TCP and TLS in production, the simulator's TCP in scenarios), so an
//! adapter built on a model library opens no socket of its own, and every model call is as
//! reachable from the simulator as GitHub is.
//! Does not own: deadlines, body caps or retries (each adapter bounds its own calls and says
//! what it does in its documentation), or what a status code means.
//!
//! Invariants: the response body is read only as it is polled; dropping the response (or the
//! stream) closes the connection at once, which is how an aborted turn stops its HTTP request.

use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

/// A response body: its chunks as they arrive.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, TransportError>> + Send>>;

/// Why a request got no (complete) response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The URL is not one the transport can reach (`http://` or `https://host[:port]/path`).
    #[error("bad URL: {0}")]
    BadUrl(String),
    /// The connection could not be made, or broke (the words say where).
    #[error("{0}")]
    Connection(String),
    /// The body is longer than the transport reads.
    #[error("the response body is longer than {limit_bytes} bytes")]
    BodyTooLarge { limit_bytes: usize },
}

/// Sends one HTTP request and streams its response back.
#[async_trait]
pub trait HttpTransport: Send + Sync + 'static {
    /// Sends `request` on a fresh connection; the answer's head, with its body still to read.
    /// At most `max_body_bytes` of the body are read: a longer one ends its stream with
    /// [`TransportError::BodyTooLarge`].
    async fn send(
        &self,
        request: http::Request<Bytes>,
        max_body_bytes: usize,
    ) -> Result<http::Response<BodyStream>, TransportError>;
}
