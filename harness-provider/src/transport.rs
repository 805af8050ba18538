//! rig's HTTP client contract over the host's transport port, with this adapter's bounds.
//!
//! Owns: [`RigHttp`], rig's `HttpClientExt` implemented over
//! [`chopin_harness::transport::HttpTransport`] (so the model library opens no socket of its
//! own and the simulator reaches the provider like any host), and the bounds of every model
//! request: its response head within [`Bounds::head_ms`], each later chunk within
//! [`Bounds::idle_ms`] of the one before, at most [`Bounds::max_body_bytes`] in all. Time is
//! tokio's (the simulator's in scenarios).
//! Does not own: the wire formats (rig's providers), retries or what an error means to a
//! person ([`crate::words`]).
//!
//! A non-success status comes back as rig's `non_success_with_details` (status, headers, body)
//! so rig classifies it and `retry-after` stays readable.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chopin_harness::transport::{HttpTransport, TransportError};
use futures::StreamExt;
use rig_core::http_client::{
    Error, HttpClientExt, LazyBody, MultipartForm, Request, Response, Result, StreamingResponse,
};

/// How long and how much one model request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The response head must arrive within this long of sending.
    pub head_ms: u64,
    /// Each chunk of the body must follow the one before (or the head) within this long.
    pub idle_ms: u64,
    /// The most bytes of one response body read.
    pub max_body_bytes: usize,
}

/// Words in a [`Bounded::NoHead`] error, which [`crate::words`] looks for.
pub const NO_HEAD_MARK: &str = "the model provider sent no answer within";
/// Words in a [`Bounded::Idle`] error, which [`crate::words`] looks for.
pub const IDLE_MARK: &str = "the model provider sent nothing more for";
/// Words in a [`Bounded::BrokeOff`] error, which [`crate::words`] looks for.
pub const BROKE_MARK: &str = "the model provider's answer broke off";

/// A model request took too long, or carried too much.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Bounded {
    #[error("the model provider sent no answer within {0} ms")]
    NoHead(u64),
    #[error("the model provider sent nothing more for {0} ms")]
    Idle(u64),
    #[error("the model provider's answer broke off: {0}")]
    BrokeOff(TransportError),
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// A response body under the bounds.
type Chunks =
    std::pin::Pin<Box<dyn futures::Stream<Item = std::result::Result<Bytes, Bounded>> + Send>>;

/// rig's HTTP client over the host's transport.
#[derive(Clone)]
pub struct RigHttp {
    transport: Arc<dyn HttpTransport>,
    bounds: Bounds,
}

impl RigHttp {
    pub fn new(transport: Arc<dyn HttpTransport>, bounds: Bounds) -> Self {
        RigHttp { transport, bounds }
    }

    /// Sends `request`; the head within the bound, the body as a bounded stream.
    async fn open(
        &self,
        request: http::Request<Bytes>,
    ) -> std::result::Result<(http::response::Parts, Chunks), Bounded> {
        let sent = self.transport.send(request, self.bounds.max_body_bytes);
        let response = tokio::time::timeout(Duration::from_millis(self.bounds.head_ms), sent)
            .await
            .map_err(|_| Bounded::NoHead(self.bounds.head_ms))??;
        let (head, body) = response.into_parts();
        let idle = Duration::from_millis(self.bounds.idle_ms);
        let idle_ms = self.bounds.idle_ms;
        let body = futures::stream::unfold(Some(body), move |body| async move {
            let mut body = body?;
            match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(body))),
                Ok(Some(Err(e))) => Some((Err(Bounded::BrokeOff(e)), None)),
                Ok(None) => None,
                Err(_) => Some((Err(Bounded::Idle(idle_ms)), None)),
            }
        });
        Ok((head, Box::pin(body)))
    }
}

fn instance(e: Bounded) -> Error {
    Error::instance(e)
}

/// The body of a non-success answer, read whole (within the bounds), as rig's error.
async fn failure(head: http::response::Parts, mut body: Chunks) -> Error {
    let mut text = Vec::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => text.extend_from_slice(&chunk),
            Err(_) => break,
        }
    }
    Error::non_success_with_details(
        head.status,
        head.headers,
        String::from_utf8_lossy(&text).into_owned(),
    )
}

fn to_bytes<T: Into<Bytes>>(request: Request<T>) -> http::Request<Bytes> {
    let (parts, body) = request.into_parts();
    http::Request::from_parts(parts, body.into())
}

// rig's error type is what its trait returns; its size is rig's.
#[allow(clippy::result_large_err)]
impl HttpClientExt for RigHttp {
    fn send<T, U>(
        &self,
        req: Request<T>,
    ) -> impl std::future::Future<Output = Result<Response<LazyBody<U>>>> + Send + 'static
    where
        T: Into<Bytes> + Send,
        U: From<Bytes> + Send + 'static,
    {
        let this = self.clone();
        let request = to_bytes(req);
        async move {
            let (head, mut body) = this.open(request).await.map_err(instance)?;
            if !head.status.is_success() {
                return Err(failure(head, body).await);
            }
            let lazy: LazyBody<U> = Box::pin(async move {
                let mut read = Vec::new();
                while let Some(chunk) = body.next().await {
                    read.extend_from_slice(&chunk.map_err(Error::instance)?);
                }
                Ok(U::from(Bytes::from(read)))
            });
            Ok(Response::from_parts(head, lazy))
        }
    }

    // rig's trait asks for a `'static` future, which an `async fn` borrowing `self` is not.
    #[allow(clippy::manual_async_fn)]
    fn send_multipart<U>(
        &self,
        _req: Request<MultipartForm>,
    ) -> impl std::future::Future<Output = Result<Response<LazyBody<U>>>> + Send + 'static
    where
        U: From<Bytes> + Send + 'static,
    {
        async {
            Err(Error::instance(TransportError::Connection(
                "multipart requests are not used by this adapter".to_owned(),
            )))
        }
    }

    fn send_streaming<T>(
        &self,
        req: Request<T>,
    ) -> impl std::future::Future<Output = Result<StreamingResponse>> + Send
    where
        T: Into<Bytes> + Send,
    {
        let this = self.clone();
        let request = to_bytes(req);
        async move {
            let (head, body) = this.open(request).await.map_err(instance)?;
            if !head.status.is_success() {
                return Err(failure(head, body).await);
            }
            let stream: rig_core::http_client::BoxedStream =
                Box::pin(body.map(|chunk| chunk.map_err(Error::instance)));
            Ok(Response::from_parts(head, stream))
        }
    }
}
