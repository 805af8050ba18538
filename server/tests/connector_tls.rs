//! The outbound HTTP client speaks TLS for `https://` URLs over the connector's stream, and
//! refuses a server its roots do not trust.

use std::sync::Arc;

use chopin_server::runtime::connector::{self, HttpError, TcpConnector};
use hyper::body::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-connection HTTPS server for `localhost` with a fresh self-signed certificate.
async fn https_server() -> (u16, rustls::pki_types::CertificateDer<'static>) {
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                continue;
            };
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let body = if seen.starts_with(b"GET /hello ") {
                "over tls"
            } else {
                "?"
            };
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tls.write_all(reply.as_bytes()).await;
            let _ = tls.shutdown().await;
        }
    });
    (port, cert)
}

#[tokio::test]
async fn https_goes_over_tls_to_a_trusted_server() {
    let (port, cert) = https_server().await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let tls = Arc::new(connector::tls_with_roots(roots));
    let request = http::Request::get(format!("https://localhost:{port}/hello"))
        .body(Bytes::new())
        .unwrap();
    let response = connector::send_with_tls(&TcpConnector, &tls, request)
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(&response.body[..], b"over tls");
}

#[tokio::test]
async fn https_refuses_a_server_the_web_pki_does_not_trust() {
    let (port, _) = https_server().await;
    let err = connector::get(&TcpConnector, &format!("https://localhost:{port}/hello"))
        .await
        .unwrap_err();
    assert!(matches!(err, HttpError::Tls(..)), "{err}");
}

#[tokio::test]
async fn other_schemes_are_refused() {
    let err = connector::get(&TcpConnector, "ftp://localhost/x")
        .await
        .unwrap_err();
    assert!(matches!(err, HttpError::BadUrl(_)), "{err}");
}
