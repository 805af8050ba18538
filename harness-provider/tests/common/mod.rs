//! What the adapter's tests share: a plain-HTTP transport over real TCP (the server gives the
//! adapter its connector; these tests stand alone), a host that records the turn, and a driver
//! for one turn.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use chopin_fixtures::model_provider::FakeProvider;
use chopin_harness::transport::{BodyStream, HttpTransport, TransportError};
use chopin_harness::{
    run_turn, CancelSignal, Harness, HostToolResult, Part, SessionMode, SessionRequest, ToolSpec,
    TurnControl, TurnHost, TurnReport, TurnRequest,
};
use chopin_harness_provider::{
    ApiKey, Bounds, Family, ProviderConfig, ProviderDeps, ProviderHarness,
};
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::{json, Value};

/// HTTP/1.1 over a fresh TCP connection per request; the body streamed as it arrives, the
/// connection driven by the stream, so dropping the stream closes the socket.
pub struct PlainHttp;

#[async_trait]
impl HttpTransport for PlainHttp {
    async fn send(
        &self,
        request: http::Request<Bytes>,
        max_body_bytes: usize,
    ) -> Result<http::Response<BodyStream>, TransportError> {
        let uri = request.uri().clone();
        let host = uri
            .host()
            .ok_or_else(|| TransportError::BadUrl(uri.to_string()))?;
        let port = uri.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| TransportError::Connection(e.to_string()))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| TransportError::Connection(e.to_string()))?;
        let (mut parts, body) = request.into_parts();
        if let Some(authority) = uri.authority() {
            parts
                .headers
                .insert(http::header::HOST, authority.as_str().parse().unwrap());
        }
        parts.uri = uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .parse()
            .unwrap();
        let request = http::Request::from_parts(parts, http_body_util::Full::new(body));
        let mut connection = Box::pin(connection);
        let send = sender.send_request(request);
        tokio::pin!(send);
        let response = tokio::select! {
            biased;
            response = &mut send => response.map_err(|e| TransportError::Connection(e.to_string()))?,
            // The connection finished first (the server answered and closed in one go): a
            // head it read is still delivered.
            ended = &mut connection => match send.await {
                Ok(response) => response,
                Err(e) => return Err(TransportError::Connection(format!("the connection ended ({ended:?}): {e}"))),
            },
        };
        let (head, body) = response.into_parts();
        struct State<C> {
            body: hyper::body::Incoming,
            connection: Option<std::pin::Pin<Box<C>>>,
            read: usize,
            max: usize,
        }
        let state = State {
            body,
            connection: Some(connection),
            read: 0,
            max: max_body_bytes,
        };
        let stream = futures::stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            loop {
                let frame = match state.connection.as_mut() {
                    Some(c) => tokio::select! {
                        biased;
                        frame = state.body.frame() => frame,
                        _ = c.as_mut() => { state.connection = None; continue; }
                    },
                    None => state.body.frame().await,
                };
                match frame {
                    None => return None,
                    Some(Err(e)) => {
                        return Some((Err(TransportError::Connection(e.to_string())), None))
                    }
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            state.read += data.len();
                            if state.read > state.max {
                                return Some((
                                    Err(TransportError::BodyTooLarge {
                                        limit_bytes: state.max,
                                    }),
                                    None,
                                ));
                            }
                            return Some((Ok(data), Some(state)));
                        }
                    }
                }
            }
        });
        Ok(http::Response::from_parts(head, stream.boxed()))
    }
}

/// The fake provider on TCP and a config for `family` pointing at it, with the key `sk-test`
/// and short bounds (retries pause 20 ms; a silent provider is given up on after 400 ms).
pub async fn provider(family: Family) -> (FakeProvider, ProviderConfig) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let fake = FakeProvider::new();
    let base = fake.serve_tcp().await.expect("the fake provider listens");
    let base = match family {
        Family::OpenAi => format!("{base}/v1"),
        Family::Anthropic => base,
    };
    let mut config = ProviderConfig::new(family, "fake-model", base);
    config.api_key = Some(ApiKey::new("sk-test-0123456789"));
    config.retry_base_ms = 20;
    config.retry_max_ms = 200;
    config.bounds = Bounds {
        head_ms: 400,
        idle_ms: 400,
        max_body_bytes: 1024 * 1024,
    };
    (fake, config)
}

/// The adapter over `config`, through the plain transport.
pub fn harness(config: ProviderConfig) -> Arc<ProviderHarness> {
    let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
    Arc::new(ProviderHarness::new(ProviderDeps {
        config,
        transport: Arc::new(PlainHttp),
        session_ids: Arc::new(move || {
            format!(
                "provider-{}",
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
            )
        }),
        ledger: Some(Arc::default()),
    }))
}

type Trigger = (String, Box<dyn FnOnce() + Send>);

/// A host that records parts and tool calls; its tools answer `{ "tool", "input", "n" }`, or
/// `big` bytes of text when `big` is set.
#[derive(Default)]
pub struct Host {
    pub parts: Mutex<Vec<Part>>,
    pub calls: Mutex<Vec<(String, Value)>>,
    pub big: Mutex<Option<usize>>,
    trigger: Mutex<Option<Trigger>>,
}

impl Host {
    /// Run `action` once, when a text part containing `text` arrives.
    pub fn on_text(&self, text: &str, action: impl FnOnce() + Send + 'static) {
        *self.trigger.lock().unwrap() = Some((text.to_owned(), Box::new(action)));
    }

    pub fn texts(&self) -> String {
        self.parts
            .lock()
            .unwrap()
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect()
    }
}

#[async_trait]
impl TurnHost for Host {
    async fn execute(&self, name: &str, input: Value, _cancel: CancelSignal) -> HostToolResult {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((name.to_owned(), input.clone()));
            calls.len()
        };
        if let Some(size) = *self.big.lock().unwrap() {
            return HostToolResult::ok(Value::String("x".repeat(size)));
        }
        HostToolResult::ok(json!({ "tool": name, "input": input, "n": n }))
    }

    async fn part(&self, part: &Part) {
        self.parts.lock().unwrap().push(part.clone());
        if let Part::Text(t) = part {
            let fire = {
                let mut slot = self.trigger.lock().unwrap();
                match slot.as_ref() {
                    Some((wanted, _)) if t.text.contains(wanted.as_str()) => slot.take(),
                    _ => None,
                }
            };
            if let Some((_, action)) = fire {
                action();
            }
        }
    }
}

pub fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read_plan".to_owned(),
            description: "Read the plan.".to_owned(),
            input_schema: json!({ "type": "object", "properties": { "page": { "type": "integer" } }, "additionalProperties": false }),
        },
        ToolSpec {
            name: "edit_plan".to_owned(),
            description: "Edit the plan.".to_owned(),
            input_schema: json!({ "type": "object", "required": ["text"], "properties": { "text": { "type": "string" } } }),
        },
    ]
}

/// One turn on a fresh session through the host's driver; `hook` may cancel or steer.
pub async fn turn(
    harness: &dyn Harness,
    host: Arc<Host>,
    response_format: Option<Value>,
    hook: impl FnOnce(&Arc<Host>, &Arc<TurnControl>),
) -> TurnReport {
    turn_with_files(harness, host, response_format, Vec::new(), hook).await
}

/// [`turn`] for a message that sent `files`.
pub async fn turn_with_files(
    harness: &dyn Harness,
    host: Arc<Host>,
    response_format: Option<Value>,
    files: Vec<chopin_harness::TurnFile>,
    hook: impl FnOnce(&Arc<Host>, &Arc<TurnControl>),
) -> TurnReport {
    let (control, steer) = TurnControl::new(harness);
    let control = Arc::new(control);
    hook(&host, &control);
    let request = TurnRequest {
        instructions: "You are the Planner.".to_owned(),
        prompt: "@chopin tidy the plan".to_owned(),
        host_tools: if response_format.is_some() {
            Vec::new()
        } else {
            tools()
        },
        response_format: response_format.clone(),
        cancel: control.cancel_signal(),
        model: None,
        thinking_level: None,
        attachments: files,
    };
    let session = SessionRequest {
        mode: if response_format.is_some() {
            SessionMode::Isolated
        } else {
            SessionMode::Planner
        },
        model: None,
        thinking_level: None,
    };
    run_turn(harness, session, request, steer, host).await
}
