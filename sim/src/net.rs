//! Simulated sockets for the server's two network seams.
//!
//! Owns: [`TurmoilListener`], the inbound seam (an `axum::serve::Listener` over a turmoil TCP
//! listener, so `chopin_server::serve` runs unchanged in the simulator), and
//! [`TurmoilConnector`], the outbound seam (a `chopin_server::runtime::connector::Connector` over turmoil
//! TCP, used by the server to reach fixture hosts and by scripted clients to reach the server).
//! Does not own: HTTP — the server's router and `chopin_server::runtime::connector::get` speak it over
//! these byte streams. Everything here must run inside a turmoil host.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use chopin_server::runtime::connector::{BoxedIo, Connector};

/// The scripted connector's way to the server (`chopin_fixtures::connector::Dial`) over
/// turmoil TCP.
#[derive(Debug, Default, Clone, Copy)]
pub struct TurmoilDial;

impl chopin_fixtures::connector::Dial for TurmoilDial {
    fn dial(
        &self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = io::Result<chopin_fixtures::connector::Dialed>>
                + Send
                + '_,
        >,
    > {
        Box::pin(async {
            let stream =
                turmoil::net::TcpStream::connect((crate::SERVER_HOST, crate::SERVER_PORT)).await?;
            Ok(Box::pin(stream) as chopin_fixtures::connector::Dialed)
        })
    }
}

/// How long the listener waits before accepting again after an accept error.
pub const ACCEPT_RETRY_DELAY_MS: u64 = 10;

/// A turmoil TCP listener that axum can serve on.
pub struct TurmoilListener(turmoil::net::TcpListener);

impl std::fmt::Debug for TurmoilListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TurmoilListener")
            .field(&self.0.local_addr().ok())
            .finish()
    }
}

impl TurmoilListener {
    /// Binds on the current simulated host. turmoil accepts only `0.0.0.0`, `::` or loopback.
    pub async fn bind(addr: (&str, u16)) -> io::Result<Self> {
        turmoil::net::TcpListener::bind(addr).await.map(Self)
    }

    pub fn new(listener: turmoil::net::TcpListener) -> Self {
        Self(listener)
    }
}

impl axum::serve::Listener for TurmoilListener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // axum's contract: never return an error; log and retry.
        loop {
            match self.0.accept().await {
                Ok(accepted) => return accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "simulated accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_DELAY_MS)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// Outbound connections over turmoil TCP; `host` is a simulated host name (or an IP).
#[derive(Debug, Default, Clone, Copy)]
pub struct TurmoilConnector;

#[async_trait]
impl Connector for TurmoilConnector {
    async fn connect(&self, host: &str, port: u16) -> io::Result<BoxedIo> {
        let stream = turmoil::net::TcpStream::connect((host, port)).await?;
        Ok(Box::pin(stream))
    }
}
