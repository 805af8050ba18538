//! The `provider` adapter against the fake model provider on real TCP, in both wire families:
//! what the contract suite does not reach (each family's wire, the key's headers, reasoning,
//! a malformed stream, a provider that never answers, a session's kept conversation).

mod common;

use std::sync::Arc;

use chopin_fixtures::model_provider::{Chunk, Reply};
use chopin_harness::{Harness, HarnessError, Part, TurnEnder, TurnFailure, TurnResult};
use chopin_harness_provider::Family;
use common::{harness, provider, turn, turn_with_files, Host};
use serde_json::json;

const FAMILIES: [Family; 2] = [Family::OpenAi, Family::Anthropic];

fn stream(chunks: Vec<Chunk>) -> Reply {
    Reply::Stream {
        chunks,
        input_tokens: 31,
        output_tokens: 7,
    }
}

fn failure(report: &chopin_harness::TurnReport) -> String {
    match &report.result {
        TurnResult::Failed(TurnFailure::Adapter(words)) => words.clone(),
        other => panic!("expected the adapter to fail the turn, got {other:?}"),
    }
}

#[tokio::test]
async fn a_turn_streams_text_and_reasoning_in_order_and_reports_usage_in_both_families() {
    for family in FAMILIES {
        let (fake, config) = provider(family).await;
        fake.script(stream(vec![
            Chunk::Reasoning {
                text: "thinking it over".into(),
            },
            Chunk::Text {
                text: "Hello ".into(),
            },
            Chunk::Text {
                text: "world".into(),
            },
        ]));
        let host = Arc::new(Host::default());
        let report = turn(&*harness(config), host.clone(), None, |_, _| {}).await;
        assert_eq!(
            report.result,
            TurnResult::Completed { output: None },
            "{family:?}"
        );
        let parts = host.parts.lock().unwrap().clone();
        let kinds: Vec<&str> = parts
            .iter()
            .map(|p| match p {
                Part::Reasoning(_) => "reasoning",
                Part::Text(_) => "text",
                Part::FinishStep(_) => "finish-step",
                Part::Finish(_) => "finish",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            ["reasoning", "text", "text", "finish-step", "finish"],
            "{family:?}"
        );
        assert_eq!(host.texts(), "Hello world");
        let Some(Part::Finish(finish)) = parts.last() else {
            unreachable!()
        };
        let usage = finish.usage.clone().expect("usage on the finish part");
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (Some(31), Some(7)),
            "{family:?}"
        );
        let sent = fake.requests();
        assert_eq!(sent.len(), 1);
        assert_eq!(
            sent[0].body["stream"],
            json!(true),
            "{family:?}: a streamed request"
        );
        assert_eq!(sent[0].body["model"], json!("fake-model"));
    }
}

#[tokio::test]
async fn the_operators_key_goes_only_in_the_familys_auth_header() {
    for family in FAMILIES {
        let (fake, config) = provider(family).await;
        assert!(
            !format!("{config:?}").contains("sk-test"),
            "Debug never shows the key"
        );
        let report = turn(
            &*harness(config),
            Arc::new(Host::default()),
            None,
            |_, _| {},
        )
        .await;
        assert!(matches!(report.result, TurnResult::Completed { .. }));
        let sent = &fake.requests()[0];
        match family {
            Family::OpenAi => {
                assert_eq!(
                    sent.header("authorization"),
                    Some("Bearer sk-test-0123456789")
                );
                assert_eq!(sent.path, "/v1/chat/completions");
            }
            Family::Anthropic => {
                assert_eq!(sent.header("x-api-key"), Some("sk-test-0123456789"));
                assert!(sent.header("anthropic-version").is_some());
                assert_eq!(sent.path, "/v1/messages");
            }
        }
        assert!(
            !sent.body.to_string().contains("sk-test"),
            "never in the body"
        );
    }
}

#[tokio::test]
async fn host_tool_calls_run_in_the_host_and_their_results_go_back_parallel_ones_included() {
    for family in FAMILIES {
        let (fake, config) = provider(family).await;
        fake.script(stream(vec![
            Chunk::ToolCall {
                id: "call_a".into(),
                name: "read_plan".into(),
                arguments: r#"{"page":1}"#.into(),
            },
            Chunk::ToolCall {
                id: "call_b".into(),
                name: "read_plan".into(),
                arguments: r#"{"page":2}"#.into(),
            },
        ]));
        fake.script(stream(vec![Chunk::Text {
            text: "read both".into(),
        }]));
        let host = Arc::new(Host::default());
        let report = turn(&*harness(config), host.clone(), None, |_, _| {}).await;
        assert_eq!(
            report.result,
            TurnResult::Completed { output: None },
            "{family:?}"
        );
        let calls = host.calls.lock().unwrap().clone();
        assert_eq!(
            calls,
            vec![
                ("read_plan".to_owned(), json!({"page": 1})),
                ("read_plan".to_owned(), json!({"page": 2}))
            ],
            "{family:?}"
        );
        let second = fake.requests()[1].as_text();
        assert!(
            second.contains("call_a") && second.contains("call_b"),
            "{family:?}: both results answer their calls"
        );
        assert!(
            second.contains(r#"\"page\":2"#) || second.contains(r#"\"page\": 2"#),
            "{family:?}: the results' text went back: {second}"
        );
        let tools = &fake.requests()[0].body["tools"];
        assert_eq!(
            tools.as_array().map(Vec::len),
            Some(2),
            "{family:?}: exactly the host tools: {tools}"
        );
    }
}

#[tokio::test]
async fn arguments_that_do_not_match_the_schema_are_an_error_result_and_the_host_never_runs_them() {
    for family in FAMILIES {
        let (fake, config) = provider(family).await;
        fake.script(stream(vec![Chunk::ToolCall {
            id: "call_bad".into(),
            name: "read_plan".into(),
            arguments: r#"{"page":"two"}"#.into(),
        }]));
        fake.script(stream(vec![Chunk::Text {
            text: "sorry".into(),
        }]));
        let host = Arc::new(Host::default());
        let report = turn(&*harness(config), host.clone(), None, |_, _| {}).await;
        assert_eq!(
            report.result,
            TurnResult::Completed { output: None },
            "{family:?}"
        );
        assert!(
            host.calls.lock().unwrap().is_empty(),
            "{family:?}: the host never ran it"
        );
        let second = fake.requests()[1].as_text();
        assert!(
            second.contains("do not match its input schema"),
            "{family:?}: {second}"
        );
    }
}

#[tokio::test]
async fn provider_errors_become_words_in_chat_and_the_turn_ends_cleanly() {
    for family in FAMILIES {
        // 401: not retried.
        let (fake, config) = provider(family).await;
        fake.script(Reply::Error {
            status: 401,
            retry_after_s: None,
            message: "Incorrect API key provided: sk-test-0123456789".into(),
        });
        let report = turn(
            &*harness(config),
            Arc::new(Host::default()),
            None,
            |_, _| {},
        )
        .await;
        let words = failure(&report);
        assert!(
            words.contains("HTTP 401") && words.contains("credentials"),
            "{words}"
        );
        assert!(
            !words.contains("sk-test"),
            "the key is never quoted: {words}"
        );
        assert_eq!(
            fake.requests().len(),
            1,
            "{family:?}: a refused key is not retried"
        );

        // 500, three times: tried once and retried twice, then given up.
        let (fake, config) = provider(family).await;
        fake.set_outage(Some(503));
        let report = turn(
            &*harness(config),
            Arc::new(Host::default()),
            None,
            |_, _| {},
        )
        .await;
        let words = failure(&report);
        assert!(words.contains("HTTP 503"), "{words}");
        assert_eq!(fake.requests().len(), 3, "{family:?}: 1 + 2 retries");

        // 429 with retry-after, then an answer.
        let (fake, config) = provider(family).await;
        fake.script(Reply::Error {
            status: 429,
            retry_after_s: Some(0),
            message: "slow down".into(),
        });
        fake.script(Reply::text("after the pause"));
        let host = Arc::new(Host::default());
        let report = turn(&*harness(config), host.clone(), None, |_, _| {}).await;
        assert_eq!(
            report.result,
            TurnResult::Completed { output: None },
            "{family:?}"
        );
        assert_eq!(host.texts(), "after the pause");
        assert_eq!(fake.requests().len(), 2);

        // A stream cut in the same read as its first text (found by the simulator's explorer:
        // it used to be asked again, since the host had seen nothing yet): an answer that began
        // is never replayed (SES-27).
        let (fake, config) = provider(family).await;
        fake.script(stream(vec![
            Chunk::Text {
                text: "half an ans".into(),
            },
            Chunk::Cut,
        ]));
        fake.script(Reply::text("a replay"));
        let host = Arc::new(Host::default());
        let report = turn(&*harness(config), host.clone(), None, |_, _| {}).await;
        let words = failure(&report);
        assert!(words.contains("stopped partway"), "{family:?}: {words}");
        assert_eq!(
            fake.requests().len(),
            1,
            "{family:?}: an answer that began is not asked again"
        );

        // A stream cut after the model spoke: not retried (nothing is replayed). (The pause lets
        // the text reach the host first.)
        let (fake, config) = provider(family).await;
        fake.script(stream(vec![
            Chunk::Text {
                text: "half an ans".into(),
            },
            Chunk::Delay { ms: 100 },
            Chunk::Cut,
        ]));
        let host = Arc::new(Host::default());
        let report = turn(&*harness(config), host.clone(), None, |_, _| {}).await;
        let words = failure(&report);
        assert!(!words.is_empty());
        assert_eq!(
            fake.requests().len(),
            1,
            "{family:?}: output was streamed, so no retry"
        );
        assert_eq!(host.texts(), "half an ans");

        // A malformed chunk.
        let (fake, config) = provider(family).await;
        fake.set_fallback(stream(vec![Chunk::Malformed]));
        let report = turn(
            &*harness(config),
            Arc::new(Host::default()),
            None,
            |_, _| {},
        )
        .await;
        let words = failure(&report);
        assert!(words.contains("could not read"), "{family:?}: {words}");

        // No answer at all: each call gives up at its deadline; retried, then given up.
        let (fake, config) = provider(family).await;
        fake.set_fallback(Reply::Hang);
        let report = turn(
            &*harness(config),
            Arc::new(Host::default()),
            None,
            |_, _| {},
        )
        .await;
        let words = failure(&report);
        assert!(
            words.contains("did not answer in time"),
            "{family:?}: {words}"
        );
        assert_eq!(fake.requests().len(), 3);
        for word in ["kept", "saved"] {
            assert!(!words.contains(word), "MSG-14: {words}");
        }
    }
}

#[tokio::test]
async fn a_cancel_mid_stream_closes_the_model_call() {
    for family in FAMILIES {
        let (fake, config) = provider(family).await;
        fake.script(stream(vec![
            Chunk::Text {
                text: "working on it".into(),
            },
            Chunk::Hang,
        ]));
        let report = turn(
            &*harness(config),
            Arc::new(Host::default()),
            None,
            |host, control| {
                let control = control.clone();
                host.on_text("working", move || control.cancel("stopped by a person"));
            },
        )
        .await;
        assert_eq!(report.result, TurnResult::Aborted, "{family:?}");
        assert_eq!(report.ended_by, TurnEnder::Adapter);
        for _ in 0..200 {
            if fake.requests()[0].abandoned {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(
            fake.requests()[0].abandoned,
            "{family:?}: the provider saw the client go"
        );
        assert_eq!(fake.in_flight(), 0);
    }
}

#[tokio::test]
async fn a_steer_message_reaches_the_model_when_it_next_stops() {
    for family in FAMILIES {
        let (fake, config) = provider(family).await;
        fake.script(Reply::text("first thoughts"));
        fake.script(Reply::text("steered"));
        let host = Arc::new(Host::default());
        let report = turn(&*harness(config), host.clone(), None, |host, control| {
            let control = control.clone();
            host.on_text("first", move || {
                control.steer("@mona: use the blue one").unwrap()
            });
        })
        .await;
        assert_eq!(
            report.result,
            TurnResult::Completed { output: None },
            "{family:?}"
        );
        assert_eq!(report.unread_steers, Vec::<String>::new());
        let sent = fake.requests();
        assert_eq!(sent.len(), 2, "{family:?}");
        assert!(sent[1].as_text().contains("@mona: use the blue one"));
    }
}

#[tokio::test]
async fn a_turn_makes_at_most_its_model_calls_and_long_results_are_cut() {
    for family in FAMILIES {
        let (fake, mut config) = provider(family).await;
        config.max_model_calls = 2;
        config.tool_result_max_bytes = 1000;
        fake.set_fallback(stream(vec![Chunk::ToolCall {
            id: "call_again".into(),
            name: "read_plan".into(),
            arguments: "{}".into(),
        }]));
        let host = Arc::new(Host::default());
        *host.big.lock().unwrap() = Some(5000);
        let report = turn(&*harness(config), host.clone(), None, |_, _| {}).await;
        let words = failure(&report);
        assert!(
            words.contains("limit of 2 model calls"),
            "{family:?}: {words}"
        );
        let sent = fake.requests();
        assert_eq!(sent.len(), 2, "{family:?}");
        let second = sent[1].as_text();
        assert!(
            second.contains("[cut: 4000 more bytes of this result were left out]"),
            "{family:?}"
        );
        assert!(
            !second.contains(&"x".repeat(1001)),
            "{family:?}: at most 1000 bytes went back"
        );
    }
}

#[tokio::test]
async fn structured_output_is_asked_for_and_read_back() {
    let schema = json!({
        "type": "object",
        "required": ["description"],
        "additionalProperties": false,
        "properties": { "description": { "type": "string" } }
    });
    for family in FAMILIES {
        let (fake, config) = provider(family).await;
        fake.script(stream(vec![Chunk::Text {
            text: r#"{"description":"Adds paging."}"#.into(),
        }]));
        let report = turn(
            &*harness(config),
            Arc::new(Host::default()),
            Some(schema.clone()),
            |_, _| {},
        )
        .await;
        assert_eq!(
            report.result,
            TurnResult::Completed {
                output: Some(json!({"description": "Adds paging."}))
            },
            "{family:?}: {}",
            fake.requests()[0].as_text()
        );
    }
}

/// A harness whose every session is the one session it holds, and whose destroy keeps it: how
/// the server runs a kept session's next turn.
struct Kept {
    adapter: Arc<chopin_harness_provider::ProviderHarness>,
    session: Arc<dyn chopin_harness::HarnessSession>,
}

struct Borrowed(Arc<dyn chopin_harness::HarnessSession>);

#[async_trait::async_trait]
impl chopin_harness::HarnessSession for Borrowed {
    fn id(&self) -> &str {
        self.0.id()
    }
    async fn run_turn(
        &self,
        turn: chopin_harness::TurnRequest,
        io: chopin_harness::TurnIo,
    ) -> chopin_harness::TurnOutcome {
        self.0.run_turn(turn, io).await
    }
    async fn destroy(&self) {}
}

#[async_trait::async_trait]
impl chopin_harness::Harness for Kept {
    fn name(&self) -> &str {
        "kept"
    }
    fn builtin_tools(&self) -> Vec<String> {
        Vec::new()
    }
    fn can_filter_builtins(&self) -> bool {
        true
    }
    fn capabilities(&self) -> chopin_harness::Capabilities {
        self.adapter.capabilities()
    }
    async fn start_session(
        &self,
        _request: chopin_harness::SessionRequest,
    ) -> Result<Box<dyn chopin_harness::HarnessSession>, chopin_harness::HarnessError> {
        Ok(Box::new(Borrowed(self.session.clone())))
    }
}

#[tokio::test]
async fn a_kept_session_remembers_its_conversation_and_a_destroyed_one_forgets() {
    use chopin_harness::{Harness, SessionMode, SessionRequest};
    for family in FAMILIES {
        let (fake, config) = provider(family).await;
        fake.script(Reply::text("the first answer"));
        fake.script(Reply::text("the second answer"));
        let adapter = harness(config);
        let session: Arc<dyn chopin_harness::HarnessSession> = Arc::from(
            adapter
                .start_session(SessionRequest {
                    mode: SessionMode::Planner,
                    model: None,
                    thinking_level: None,
                })
                .await
                .unwrap(),
        );
        let kept = Kept {
            adapter: adapter.clone(),
            session: session.clone(),
        };
        for _ in 0..2 {
            let report = turn(&kept, Arc::new(Host::default()), None, |_, _| {}).await;
            assert!(matches!(report.result, TurnResult::Completed { .. }));
        }
        let second = fake.requests()[1].as_text();
        assert!(
            second.contains("the first answer"),
            "{family:?}: the second call carries the first turn: {second}"
        );
        session.destroy().await;
        session.destroy().await;
        assert_eq!(
            adapter.sessions()[0].teardowns,
            1,
            "destroyed once, however often asked"
        );
        assert!(!session.is_usable());
    }
}

/// MOD-07 as it fits this adapter: `MODEL` first (the default), then `PROVIDER_MODELS` with
/// their levels, then what the provider's listing adds, each as `provider/model`; the listing
/// is read once a minute however many ask (single flight), in both families; a listing that
/// cannot be read is an error, never a shorter catalog.
#[tokio::test]
async fn mod_07_the_catalog_is_the_configured_models_then_the_providers_listing_read_once_a_minute()
{
    for family in [Family::OpenAi, Family::Anthropic] {
        let (fake, mut config) = provider(family).await;
        fake.set_models(Some(vec![
            "fake-model".to_owned(),
            "listed-a".to_owned(),
            "big".to_owned(),
        ]));
        config.offered = vec![chopin_harness_provider::OfferedModel {
            model: "big".to_owned(),
            levels: vec!["low".to_owned(), "high".to_owned()],
        }];
        config.listing = Some(Arc::new(chopin_harness_provider::ModelListing::default()));
        let adapter = harness(config);
        // The listing was read somewhere in between: the edges below are taken from both ends
        // of that span, so a slow machine cannot move them.
        let asked = tokio::time::Instant::now();
        let asks = (0..8).map(|_| adapter.catalog());
        let answers = futures::future::join_all(asks).await;
        tokio::time::pause();
        let spent = asked.elapsed();
        assert_eq!(
            fake.listings(),
            1,
            "{family:?}: one request for every asker"
        );
        let prefix = family.name();
        for answer in answers {
            let Ok(chopin_harness::Offer::Known(catalog)) = answer else {
                panic!("{family:?}: {answer:?}");
            };
            let ids: Vec<_> = catalog.models.iter().map(|m| m.id.clone()).collect();
            assert_eq!(
                ids,
                vec![
                    format!("{prefix}/fake-model"),
                    format!("{prefix}/big"),
                    format!("{prefix}/listed-a"),
                ],
                "{family:?}"
            );
            assert!(catalog.models[0].default);
            assert_eq!(catalog.models[1].thinking_levels, vec!["low", "high"]);
            assert_eq!(catalog.commands, Some(Vec::new()), "CMD-07");
        }
        // Fresh for a minute: no second request 1 ms before it ends (counted from the ask, the
        // earliest the listing can have been read), one 1 ms after (counted from the answer, the
        // latest).
        let fresh = std::time::Duration::from_millis(chopin_harness_provider::LISTING_FRESH_MS);
        let ms = std::time::Duration::from_millis(1);
        tokio::time::advance(fresh - ms - spent).await;
        adapter.catalog().await.unwrap();
        assert_eq!(fake.listings(), 1, "{family:?}: still fresh at T-1 ms");
        tokio::time::advance(spent + 2 * ms).await;
        tokio::time::resume();
        adapter.catalog().await.unwrap();
        assert_eq!(fake.listings(), 2, "{family:?}: read again at T+1 ms");
    }
    // An API with no listing: the catalog cannot be read (MOD-32), it is not silently shorter.
    let (fake, mut config) = provider(Family::OpenAi).await;
    fake.set_models(None);
    config.listing = Some(Arc::new(chopin_harness_provider::ModelListing::default()));
    let adapter = harness(config);
    let refused = adapter.catalog().await;
    assert!(
        matches!(&refused, Err(HarnessError::Unavailable { message }) if message.contains("HTTP 404")),
        "{refused:?}"
    );
}

/// FILE-23: a message's files reach the provider as parts of the person's message, in each
/// family's own format: the image in base64 as an image part, the text file as text under its
/// name; and the catalog says which models read images (`PROVIDER_IMAGE_MODELS`).
#[tokio::test]
async fn file_23_a_messages_files_go_to_the_provider_as_parts_of_the_message_in_its_own_format() {
    let png = vec![0x89u8, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3];
    let b64 = "iVBORw0KGgoBAgM=";
    for family in FAMILIES {
        let (fake, mut config) = provider(family).await;
        config.image_models = vec!["fake-model".into()];
        fake.script(stream(vec![Chunk::Text {
            text: "seen".into(),
        }]));
        let host = Arc::new(Host::default());
        let files = vec![
            chopin_harness::TurnFile::Text {
                id: "f-1".into(),
                name: "notes.txt".into(),
                text: "canary first\n".into(),
            },
            chopin_harness::TurnFile::Image {
                id: "f-2".into(),
                name: "dot.png".into(),
                mime_type: "image/png".into(),
                data: png.clone(),
            },
        ];
        let h = harness(config);
        let report = turn_with_files(&*h, host, None, files, |_, _| {}).await;
        assert_eq!(
            report.result,
            TurnResult::Completed { output: None },
            "{family:?}"
        );
        let body = &fake.requests()[0].body;
        let user = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .unwrap()
            .clone();
        let parts = user["content"].as_array().expect("the message in parts");
        let text = serde_json::to_string(parts).unwrap();
        assert!(text.contains("@chopin tidy the plan"), "{family:?}: {text}");
        assert!(
            text.contains("[File: notes.txt]\\ncanary first"),
            "{family:?}: {text}"
        );
        match family {
            Family::OpenAi => assert!(
                parts.iter().any(|p| p["type"] == "image_url"
                    && p["image_url"]["url"] == format!("data:image/png;base64,{b64}")),
                "{text}"
            ),
            Family::Anthropic => assert!(
                parts.iter().any(|p| p["type"] == "image"
                    && p["source"]["data"] == b64
                    && p["source"]["media_type"] == "image/png"),
                "{text}"
            ),
        }
        let catalog = match h.catalog().await.unwrap() {
            chopin_harness::Offer::Known(c) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!(catalog.models[0].input_types, ["text", "image"]);
    }
}
