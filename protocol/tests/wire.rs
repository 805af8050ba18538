//! Wire tests of the agent connection (`chopin.agent.v1`).
//!
//! The example frames of `docs/agent-connection.md` are read from the doc itself: each must
//! decode in its direction and re-encode to exactly itself, and together they must show every
//! message type and part kind, so the doc and the types cannot drift. The rest covers strict
//! decoding (each fault named, with its close code), the two `resume`s, feature negotiation,
//! the order rules and the tool boundary.

use std::collections::BTreeSet;

use chopin_protocol::agent::*;
use serde_json::{json, Value};

const DOC: &str = include_str!("../../docs/agent-connection.md");

/// `(direction, json)` of every fenced ```` ```json client ```` / ```` ```json server ```` block.
fn doc_examples() -> Vec<(Sender, String)> {
    let mut out = Vec::new();
    let mut current: Option<(Sender, String)> = None;
    for line in DOC.lines() {
        match &mut current {
            None => {
                let info = line.trim();
                if info == "```json client" {
                    current = Some((Sender::Client, String::new()));
                } else if info == "```json server" {
                    current = Some((Sender::Server, String::new()));
                }
            }
            Some((sender, text)) => {
                if line.trim() == "```" {
                    out.push((*sender, std::mem::take(text)));
                    current = None;
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    assert!(current.is_none(), "unterminated example block in the doc");
    out
}

fn as_value(text: &str) -> Value {
    serde_json::from_str(text).expect("test JSON parses")
}

#[test]
fn every_doc_example_decodes_and_re_encodes_to_itself() {
    let examples = doc_examples();
    assert!(
        examples.len() > 40,
        "only {} examples found",
        examples.len()
    );
    let mut client_types = BTreeSet::new();
    let mut server_types = BTreeSet::new();
    let mut part_types = BTreeSet::new();
    for (sender, text) in &examples {
        let literal = as_value(text);
        let re_encoded = match sender {
            Sender::Client => {
                let message = decode_client(text)
                    .unwrap_or_else(|fault| panic!("doc example does not decode: {fault}\n{text}"));
                client_types.insert(message.type_name());
                if let ClientMessage::Part(p) = &message {
                    part_types.insert(p.part.type_name());
                }
                encode(&message)
            }
            Sender::Server => {
                let message = decode_server(text)
                    .unwrap_or_else(|fault| panic!("doc example does not decode: {fault}\n{text}"));
                server_types.insert(message.type_name());
                encode(&message)
            }
        };
        assert_eq!(
            as_value(&re_encoded),
            literal,
            "doc example is not canonical (a default shown, or a field dropped):\n{text}"
        );
    }
    assert_eq!(client_types, ClientMessage::TYPES.into_iter().collect());
    assert_eq!(server_types, ServerMessage::TYPES.into_iter().collect());
    assert_eq!(part_types, Part::TYPES.into_iter().collect());
}

#[test]
fn the_doc_names_every_code_and_feature() {
    for (code, name) in close::ALL {
        assert!(
            DOC.contains(&format!("| {code} | `{name}` |")),
            "close code {code} {name} missing from the doc's table"
        );
    }
    for code in ErrorCode::ALL {
        assert!(
            DOC.contains(&format!("`{}`", code.as_str())),
            "error code {code} missing"
        );
    }
    for reason in RefusalReason::ALL {
        assert!(
            DOC.contains(&format!(
                "| `{}` | {} |",
                reason.as_str(),
                reason.close_code()
            )),
            "refusal {reason} missing"
        );
    }
    for feature in Feature::ALL {
        assert!(
            DOC.contains(&format!("| `{}` |", feature.as_str())),
            "feature {feature} missing"
        );
    }
    assert!(DOC.contains(AGENT_SUBPROTOCOL));
    assert_eq!(MAX_FRAME_BYTES, 2_097_152);
    assert!(DOC.contains("2,097,152 bytes"));
}

// ---------------------------------------------------------------------------------------------
// Round trips of constructed values, every variant.

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("{name} does things"),
        input_schema: json!({"type": "object"}),
    }
}

fn every_client_message() -> Vec<ClientMessage> {
    let parts = vec![
        Part::Text(TextPart {
            text: "hello".into(),
        }),
        Part::Reasoning(TextPart { text: "hmm".into() }),
        Part::ToolInput(ToolInputPart {
            tool_call_id: "c1".into(),
            tool_name: "t".into(),
            delta: "{".into(),
        }),
        Part::ToolCall(ToolCallPart {
            tool_call_id: "c1".into(),
            tool_name: "t".into(),
            input: json!({"a": [1, 2.5, null]}),
        }),
        Part::ToolResult(ToolResultPart {
            tool_call_id: "c1".into(),
            tool_name: "t".into(),
            output: json!("ok"),
            is_error: false,
        }),
        Part::ToolResult(ToolResultPart {
            tool_call_id: "c1".into(),
            tool_name: "t".into(),
            output: json!({"e": 1}),
            is_error: true,
        }),
        Part::FinishStep(FinishPart {
            finish_reason: FinishReason::ToolCalls,
            usage: None,
        }),
        Part::Finish(FinishPart {
            finish_reason: FinishReason::ContentFilter,
            usage: Some(Usage {
                input_tokens: Some(1),
                output_tokens: Some(2),
                reasoning_tokens: None,
                cached_input_tokens: Some(3),
            }),
        }),
        Part::Error(ErrorPart {
            message: "boom".into(),
        }),
    ];
    let inputs = vec![
        HostInput::Questionnaire(Questionnaire {
            questions: vec![Question {
                question: "Q?".into(),
                header: Some("H".into()),
                options: vec![QuestionOption {
                    label: "a".into(),
                    description: None,
                    preview: Some("| x |".into()),
                }],
                multi_select: true,
            }],
        }),
        HostInput::Confirm(Confirm {
            title: "ok?".into(),
            message: None,
        }),
        HostInput::Select(Select {
            title: "pick".into(),
            options: vec!["a".into(), "b".into()],
        }),
        HostInput::Input(TextPrompt {
            title: "name".into(),
            placeholder: Some("…".into()),
        }),
        HostInput::Editor(EditorPrompt {
            title: "essay".into(),
            prefill: Some("Dear".into()),
        }),
    ];
    let mut out = vec![
        ClientMessage::Attach(Attach {
            version: 1,
            document: "0b6e7c1a-5f2d-4e8b-9a3c-7d1e2f3a4b5c".into(),
            checkout: Some(Checkout {
                repository: "o/r".into(),
                branch: None,
                commit: Some("abc".into()),
            }),
            features: vec![
                Feature::SteerTurn.into(),
                OfferedFeature::Unknown("teleport".into()),
            ],
        }),
        ClientMessage::Attach(Attach {
            version: 1,
            document: "/documents/o/r/s".into(),
            checkout: None,
            features: vec![],
        }),
        ClientMessage::Resume(ClientResume {
            sessions: vec!["s1".into()],
        }),
        ClientMessage::Catalog(Catalog {
            models: vec![CatalogModel {
                id: "m".into(),
                name: None,
                description: Some("d".into()),
                thinking_levels: vec!["high".into()],
                input_types: vec!["text".into()],
                default: true,
            }],
            commands: vec![CatalogCommand {
                name: "review".into(),
                kind: "skill".into(),
                description: "d".into(),
            }],
        }),
        ClientMessage::Catalog(Catalog {
            models: vec![],
            commands: vec![],
        }),
        ClientMessage::Started(Started {
            session_id: "s1".into(),
        }),
        ClientMessage::StartFailed(StartFailed {
            session_id: "s1".into(),
            message: "no".into(),
        }),
        ClientMessage::Tools(Tools {
            turn_id: "t1".into(),
            tools: vec![tool("mine")],
        }),
        ClientMessage::HostToolCall(HostToolCall {
            turn_id: "t1".into(),
            call_id: "c".into(),
            name: "read_plan".into(),
            input: json!({}),
        }),
        ClientMessage::InputCancel(InputCancel {
            request_id: "q".into(),
        }),
        ClientMessage::ControlResult(ControlResult {
            request_id: "r".into(),
            ok: false,
            message: Some("no runs".into()),
        }),
        ClientMessage::Runs(Runs {
            session_id: "s1".into(),
            runs: vec![Run {
                run_id: "r1".into(),
                name: "n".into(),
                status: RunStatus::Paused,
                root_run_id: Some("r0".into()),
                elapsed_ms: Some(5),
                stages: vec![Stage {
                    stage_id: "st".into(),
                    name: "build".into(),
                    status: StageStatus::Skipped,
                    parent_stage_id: Some("p".into()),
                    duration_ms: None,
                }],
                omitted_stages: Some(3),
            }],
        }),
        ClientMessage::TurnEnd(TurnEnd {
            turn_id: "t1".into(),
            status: TurnStatus::Aborted,
            output: None,
            message: None,
        }),
        ClientMessage::TurnEnd(TurnEnd {
            turn_id: "t1".into(),
            status: TurnStatus::Completed,
            output: Some(json!({"k": "v"})),
            message: None,
        }),
        ClientMessage::Detach(Detach {}),
    ];
    out.extend(parts.into_iter().map(|part| {
        ClientMessage::Part(PartMessage {
            turn_id: "t1".into(),
            part,
        })
    }));
    out.extend(inputs.into_iter().map(|input| {
        ClientMessage::InputRequest(InputRequest {
            session_id: "s1".into(),
            request_id: format!("q-{}", input.kind()),
            turn_id: None,
            run_id: Some("r1".into()),
            block: Some("sha256:00".into()),
            input,
        })
    }));
    out
}

fn every_server_message() -> Vec<ServerMessage> {
    let answers = vec![
        InputAnswer::Questionnaire(QuestionnaireAnswer {
            answers: vec![
                QuestionAnswer {
                    question_index: 0,
                    kind: AnswerKind::Option,
                    options: vec![ChosenOption {
                        index: 0,
                        label: "a".into(),
                        preview: None,
                    }],
                    text: None,
                },
                QuestionAnswer {
                    question_index: 1,
                    kind: AnswerKind::Chat,
                    options: vec![],
                    text: Some(String::new()),
                },
            ],
        }),
        InputAnswer::Confirm(ConfirmAnswer { confirmed: false }),
        InputAnswer::Select(SelectAnswer { choice: "b".into() }),
        InputAnswer::Input(TextAnswer { text: "x".into() }),
        InputAnswer::Editor(TextAnswer {
            text: "y\nz".into(),
        }),
    ];
    let mut out = vec![
        ServerMessage::Attached(Attached {
            document_id: "d".into(),
            document_url: "/documents/o/r/s".into(),
            login: "mona".into(),
            generation: None,
            features: Feature::ALL.to_vec(),
            kept: vec![],
            timers: Timers {
                ping_interval_ms: 30_000,
                connection_timeout_ms: 120_000,
                attach_grace_ms: 120_000,
                start_timeout_ms: 30_000,
                abort_wait_ms: 5_000,
                access_recheck_ms: 300_000,
            },
        }),
        ServerMessage::Start(Start {
            session_id: "s1".into(),
            mode: SessionMode::Isolated,
        }),
        ServerMessage::Turn(Turn {
            session_id: "s1".into(),
            turn_id: "t1".into(),
            prompt: "p".into(),
            instructions: "i".into(),
            host_tools: vec![tool("read_plan")],
            response_format: Some(json!({"type": "object"})),
            model: None,
            thinking_level: None,
            attachments: vec![
                Attachment::Text(TextAttachment {
                    id: "f".into(),
                    name: "a.txt".into(),
                    size: 1,
                    text: "a".into(),
                }),
                Attachment::Image(ImageAttachment {
                    id: "g".into(),
                    name: "b.gif".into(),
                    mime_type: "image/gif".into(),
                    size: 3,
                    data: "R0lG".into(),
                }),
            ],
        }),
        ServerMessage::Abort(Abort {
            turn_id: "t1".into(),
            message: None,
        }),
        ServerMessage::HostToolResult(HostToolResult {
            turn_id: "t1".into(),
            call_id: "c".into(),
            output: json!(null),
            is_error: false,
        }),
        ServerMessage::InputResult(InputResult {
            request_id: "q".into(),
            status: InputStatus::Expired,
            answer: None,
            message: None,
        }),
        ServerMessage::InputResult(InputResult {
            request_id: "q".into(),
            status: InputStatus::Failed,
            answer: None,
            message: Some("too big".into()),
        }),
        ServerMessage::Stop(Stop {
            request_id: "c1".into(),
            session_id: "s1".into(),
            run_id: None,
        }),
        ServerMessage::Resume(ServerResume {
            request_id: "c2".into(),
            session_id: "s1".into(),
            run_id: Some("r1".into()),
        }),
        ServerMessage::Destroy(Destroy {
            session_id: "s1".into(),
        }),
        ServerMessage::Steer(Steer {
            turn_id: "t1".into(),
            text: "@a: b".into(),
        }),
        ServerMessage::Resumed(Resumed {
            sessions: vec![],
            inputs: vec![],
        }),
    ];
    for reason in RefusalReason::ALL {
        out.push(ServerMessage::Refused(Refused {
            reason,
            message: "m".into(),
            holder: (reason == RefusalReason::PlannerAttached).then(|| "hubot".into()),
            retry_after_ms: (reason == RefusalReason::Unavailable).then_some(1000),
        }));
    }
    for code in ErrorCode::ALL {
        out.push(ServerMessage::Error(ErrorFrame {
            code,
            message: "m".into(),
            retry_after_ms: None,
            handover_ms: Some(1),
        }));
    }
    out.extend(answers.into_iter().map(|answer| {
        ServerMessage::InputResult(InputResult {
            request_id: "q".into(),
            status: InputStatus::Answered,
            answer: Some(answer),
            message: None,
        })
    }));
    out
}

#[test]
fn every_client_message_round_trips() {
    let messages = every_client_message();
    let names: BTreeSet<_> = messages.iter().map(ClientMessage::type_name).collect();
    assert_eq!(names, ClientMessage::TYPES.into_iter().collect());
    for message in messages {
        let text = encode(&message);
        assert_eq!(as_value(&text)["type"], message.type_name());
        assert_eq!(decode_client(&text), Ok(message), "{text}");
    }
}

#[test]
fn every_server_message_round_trips() {
    let messages = every_server_message();
    let names: BTreeSet<_> = messages.iter().map(ServerMessage::type_name).collect();
    assert_eq!(names, ServerMessage::TYPES.into_iter().collect());
    for message in messages {
        let text = encode(&message);
        assert_eq!(as_value(&text)["type"], message.type_name());
        assert_eq!(decode_server(&text), Ok(message), "{text}");
    }
}

#[test]
fn codes_and_reasons_are_spelled_as_serde_spells_them() {
    for code in ErrorCode::ALL {
        assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
    }
    for reason in RefusalReason::ALL {
        assert_eq!(
            serde_json::to_value(reason).unwrap(),
            json!(reason.as_str())
        );
    }
    for feature in Feature::ALL {
        assert_eq!(
            serde_json::to_value(feature).unwrap(),
            json!(feature.as_str())
        );
    }
}

// ---------------------------------------------------------------------------------------------
// `resume` in both directions.

#[test]
fn resume_is_a_client_message_with_client_fields_and_a_server_message_with_server_fields() {
    let client = r#"{"type":"resume","sessions":["s-7f3a","s-8b21"]}"#;
    let server = r#"{"type":"resume","requestId":"c-3","sessionId":"s-7f3a","runId":"run-12"}"#;

    assert_eq!(
        decode_client(client),
        Ok(ClientMessage::Resume(ClientResume {
            sessions: vec!["s-7f3a".into(), "s-8b21".into()]
        }))
    );
    assert_eq!(
        decode_server(server),
        Ok(ServerMessage::Resume(ServerResume {
            request_id: "c-3".into(),
            session_id: "s-7f3a".into(),
            run_id: Some("run-12".into())
        }))
    );

    // Each side's fields are foreign to the other side's `resume`.
    let fault = decode_client(server).unwrap_err();
    assert!(
        matches!(&fault, Fault::UnknownField { message_type, .. } if message_type == "resume"),
        "{fault:?}"
    );
    assert_eq!(fault.close_code(), close::POLICY_VIOLATION);
    let fault = decode_server(client).unwrap_err();
    assert!(
        matches!(&fault, Fault::UnknownField { field, .. } if field == "sessions"),
        "{fault:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Strict decoding: each fault named, with its code and close code.

#[test]
fn an_unknown_field_is_named_with_its_message() {
    let fault = decode_client(r#"{"type":"attach","version":1,"document":"d","token":"ghp_x"}"#)
        .unwrap_err();
    assert_eq!(
        fault,
        Fault::UnknownField {
            message_type: "attach".into(),
            field: "token".into(),
            expected: "expected one of \"version\", \"document\", \"checkout\", \"features\""
                .into(),
        }
    );
    assert_eq!(fault.to_string(), "unknown field \"token\" in \"attach\" (expected one of \"version\", \"document\", \"checkout\", \"features\")");
    assert_eq!(fault.code(), ErrorCode::UnknownField);
    assert_eq!(fault.close_code(), 1008);
    assert_eq!(fault.close_reason(), "unknown-field");
}

#[test]
fn an_unknown_field_inside_a_nested_object_is_named_too() {
    let fault = decode_client(r#"{"type":"attach","version":1,"document":"d","checkout":{"repository":"o/r","path":"/home/mona/atlas"}}"#).unwrap_err();
    assert!(
        matches!(&fault, Fault::UnknownField { message_type, field, .. } if message_type == "attach" && field == "path"),
        "{fault:?}"
    );

    let fault = decode_client(r#"{"type":"part","turnId":"t","part":{"type":"tool-call","toolCallId":"c","toolName":"x","input":{},"providerExecuted":true}}"#).unwrap_err();
    assert!(
        matches!(&fault, Fault::UnknownField { message_type, field, .. } if message_type == "part" && field == "providerExecuted"),
        "{fault:?}"
    );

    let fault = decode_server(r#"{"type":"input-result","requestId":"q","status":"answered","answer":{"kind":"confirm","confirmed":true,"why":"x"}}"#).unwrap_err();
    assert!(
        matches!(&fault, Fault::UnknownField { field, .. } if field == "why"),
        "{fault:?}"
    );
}

#[test]
fn a_message_without_fields_takes_no_fields() {
    assert_eq!(
        decode_client(r#"{"type":"detach"}"#),
        Ok(ClientMessage::Detach(Detach {}))
    );
    let fault = decode_client(r#"{"type":"detach","reason":"bye"}"#).unwrap_err();
    assert!(
        matches!(&fault, Fault::UnknownField { message_type, field, .. } if message_type == "detach" && field == "reason"),
        "{fault:?}"
    );
}

#[test]
fn an_unknown_type_is_named() {
    let fault = decode_client(r#"{"type":"hello"}"#).unwrap_err();
    assert_eq!(
        fault,
        Fault::UnknownType {
            name: "hello".into(),
            sender: Sender::Client
        }
    );
    assert!(
        fault
            .to_string()
            .starts_with("unknown type \"hello\": a client message is one of attach, resume,"),
        "{fault}"
    );
    assert_eq!(fault.code(), ErrorCode::UnknownType);
    assert_eq!(fault.close_code(), 1008);
}

#[test]
fn a_type_of_the_other_direction_is_an_unknown_type_that_says_so() {
    let fault = decode_client(r#"{"type":"attached"}"#).unwrap_err();
    assert_eq!(fault.code(), ErrorCode::UnknownType);
    assert!(
        fault
            .to_string()
            .contains("\"attached\" is sent by the server, not the client"),
        "{fault}"
    );
    let fault =
        decode_server(r#"{"type":"turn-end","turnId":"t","status":"completed"}"#).unwrap_err();
    assert!(
        fault
            .to_string()
            .contains("\"turn-end\" is sent by the client, not the server"),
        "{fault}"
    );
}

#[test]
fn an_unknown_part_kind_is_an_invalid_value() {
    let fault =
        decode_client(r#"{"type":"part","turnId":"t","part":{"type":"text-delta","text":"x"}}"#)
            .unwrap_err();
    assert!(
        matches!(&fault, Fault::InvalidValue { message_type, detail } if message_type == "part" && detail.contains("text-delta")),
        "{fault:?}"
    );
    assert_eq!(fault.close_code(), 1008);
}

#[test]
fn a_missing_field_is_named() {
    let fault = decode_client(r#"{"type":"attach","version":1}"#).unwrap_err();
    assert_eq!(
        fault,
        Fault::MissingField {
            message_type: "attach".into(),
            field: "document".into()
        }
    );
    assert_eq!(
        fault.to_string(),
        "missing field \"document\" in \"attach\""
    );
    assert_eq!(fault.close_code(), 1008);
}

#[test]
fn a_value_of_the_wrong_shape_is_invalid() {
    for (text, needle) in [
        (
            r#"{"type":"start","sessionId":"s","mode":"turbo"}"#,
            "turbo",
        ),
        (r#"{"type":"started","sessionId":7}"#, "integer"),
        (r#"{"type":"attach","version":-1,"document":"d"}"#, "-1"),
        (
            r#"{"type":"turn-end","turnId":"t","status":"completed","output":null,"message":5}"#,
            "string",
        ),
        (r#"{"type":"tools","turnId":"t","tools":null}"#, "null"),
    ] {
        let sender_is_server = text.contains("\"start\"");
        let fault = if sender_is_server {
            decode_server(text).map(|_| ())
        } else {
            decode_client(text).map(|_| ())
        }
        .unwrap_err();
        assert_eq!(fault.code(), ErrorCode::InvalidValue, "{text}: {fault:?}");
        assert!(fault.to_string().contains(needle), "{text}: {fault}");
        assert_eq!(fault.close_code(), 1008);
    }
}

#[test]
fn malformed_json_is_named_with_its_position() {
    let fault = decode_client("{\"type\":\"detach\"").unwrap_err();
    assert!(
        matches!(fault, Fault::MalformedJson { line: 1, .. }),
        "{fault:?}"
    );
    assert_eq!(fault.code(), ErrorCode::MalformedJson);
    assert_eq!(fault.close_code(), 1008);
    assert!(
        !fault.to_string().contains(" at line 1 column"),
        "position said twice: {fault}"
    );
}

#[test]
fn json_that_is_not_a_message_is_malformed() {
    for (text, words) in [
        ("[1,2]", "a JSON array"),
        ("\"attach\"", "a JSON string"),
        ("{}", "no \"type\" field"),
        (r#"{"type":1}"#, "\"type\" is a JSON number"),
    ] {
        let fault = decode_client(text).unwrap_err();
        assert_eq!(fault.code(), ErrorCode::MalformedJson, "{text}");
        assert!(fault.to_string().contains(words), "{text}: {fault}");
        assert_eq!(fault.close_code(), 1008);
    }
}

#[test]
fn an_oversized_frame_is_a_1009_fault_naming_its_size() {
    assert_eq!(check_frame_size(MAX_FRAME_BYTES), Ok(()));
    let fault = check_frame_size(MAX_FRAME_BYTES + 1).unwrap_err();
    assert_eq!(fault, Fault::TooLarge { bytes: 2_097_153 });
    assert_eq!(fault.close_code(), close::MESSAGE_TOO_BIG);
    assert_eq!(fault.code(), ErrorCode::FrameTooLarge);
    assert_eq!(
        fault.to_string(),
        "frame too large: 2097153 bytes > 2097152 (2 MiB, the limit of one frame)"
    );

    // A well-formed frame one byte over the limit: the size is judged before anything else.
    let head = r#"{"type":"part","turnId":"t","part":{"type":"text","text":""#;
    let tail = r#""}}"#;
    let filler = "a".repeat(MAX_FRAME_BYTES + 1 - head.len() - tail.len());
    let text = format!("{head}{filler}{tail}");
    assert_eq!(text.len(), MAX_FRAME_BYTES + 1);
    assert_eq!(decode_client(&text).unwrap_err().close_code(), 1009);

    // Exactly at the limit it decodes.
    let text = format!("{head}{}{tail}", &filler[1..]);
    assert!(decode_client(&text).is_ok());

    // A frame the sender would make too large is refused before it is sent.
    let big = ServerMessage::HostToolResult(HostToolResult {
        turn_id: "t".into(),
        call_id: "c".into(),
        output: json!(filler),
        is_error: false,
    });
    assert_eq!(encode_checked(&big).unwrap_err().close_code(), 1009);
}

#[test]
fn a_binary_frame_is_a_1008_fault_and_a_huge_one_1009() {
    let fault = decode_client_frame(Frame::Binary(b"{\"type\":\"detach\"}")).unwrap_err();
    assert_eq!(fault, Fault::Binary { bytes: 17 });
    assert_eq!(fault.code(), ErrorCode::BinaryFrame);
    assert_eq!(fault.close_code(), close::POLICY_VIOLATION);
    assert!(
        fault.to_string().contains("only JSON text frames"),
        "{fault}"
    );

    let huge = vec![0u8; MAX_FRAME_BYTES + 1];
    assert_eq!(
        decode_client_frame(Frame::Binary(&huge))
            .unwrap_err()
            .close_code(),
        close::MESSAGE_TOO_BIG
    );
    assert_eq!(
        decode_server_frame(Frame::Binary(&[1])).unwrap_err().code(),
        ErrorCode::BinaryFrame
    );

    assert_eq!(
        decode_client_frame(Frame::Text(r#"{"type":"detach"}"#)),
        Ok(ClientMessage::Detach(Detach {}))
    );
}

#[test]
fn a_fault_becomes_an_error_frame_the_client_can_decode() {
    let fault = decode_client(r#"{"type":"bogus"}"#).unwrap_err();
    let frame = fault.frame();
    assert_eq!(frame.close_code(), Some(1008));
    let ServerMessage::Error(error) = decode_server(&encode(&frame)).unwrap() else {
        panic!("not an error frame");
    };
    assert_eq!(error.code, ErrorCode::UnknownType);
    assert_eq!(error.message, fault.to_string());
}

#[test]
fn another_version_is_refused_with_4426_whatever_else_attach_holds() {
    for text in [
        r#"{"type":"attach","version":2,"document":"d"}"#,
        r#"{"type":"attach","version":2,"document":"d","novelty":{"a":1},"features":["x"]}"#,
        r#"{"type":"attach","version":0}"#,
    ] {
        let fault = decode_client(text).unwrap_err();
        assert!(
            matches!(fault, Fault::UnsupportedVersion { .. }),
            "{text}: {fault:?}"
        );
        assert_eq!(fault.close_code(), close::UNSUPPORTED_VERSION);
        assert_eq!(fault.close_reason(), "unsupported-version");
        let ServerMessage::Refused(refused) = fault.frame() else {
            panic!("an unsupported version answers attach with refused");
        };
        assert_eq!(refused.reason, RefusalReason::UnsupportedVersion);
        assert!(
            refused.message.contains("this server speaks version 1"),
            "{}",
            refused.message
        );
    }
}

#[test]
fn every_error_code_and_refusal_maps_to_its_close_code() {
    let expected = [
        (ErrorCode::BinaryFrame, 1008),
        (ErrorCode::FrameTooLarge, 1009),
        (ErrorCode::MalformedJson, 1008),
        (ErrorCode::UnknownType, 1008),
        (ErrorCode::UnknownField, 1008),
        (ErrorCode::MissingField, 1008),
        (ErrorCode::InvalidValue, 1008),
        (ErrorCode::OutOfOrder, 1008),
        (ErrorCode::AccessRevoked, 4403),
        (ErrorCode::SignInRequired, 4401),
        (ErrorCode::DocumentNotFound, 4404),
        (ErrorCode::PlannerReleased, 4410),
        (ErrorCode::ConnectionTimeout, 4408),
        (ErrorCode::GoingAway, 1001),
        (ErrorCode::Unavailable, 1013),
        (ErrorCode::Internal, 1011),
    ];
    assert_eq!(expected.len(), ErrorCode::ALL.len());
    for (code, close_code) in expected {
        assert_eq!(code.close_code(), close_code, "{code}");
        assert_eq!(
            code.is_protocol_fault(),
            close_code == 1008 || close_code == 1009
        );
    }
    let expected = [
        (RefusalReason::UnsupportedVersion, 4426),
        (RefusalReason::SignInRequired, 4401),
        (RefusalReason::NoWriteAccess, 4403),
        (RefusalReason::AccessRevoked, 4403),
        (RefusalReason::DocumentNotFound, 4404),
        (RefusalReason::PlannerAttached, 4409),
        (RefusalReason::Unavailable, 1013),
    ];
    for (reason, close_code) in expected {
        assert_eq!(reason.close_code(), close_code, "{reason}");
    }
    let codes: BTreeSet<u16> = close::ALL.iter().map(|(c, _)| *c).collect();
    assert_eq!(codes.len(), close::ALL.len());
    assert!(close::ALL.windows(2).all(|w| w[0].0 < w[1].0));
}

// ---------------------------------------------------------------------------------------------
// Features.

#[test]
fn unknown_features_in_attach_are_ignored_not_refused() {
    let attach = decode_client(r#"{"type":"attach","version":1,"document":"d","features":["teleport","steer-turn","steer-turn","resumable-sessions"]}"#).unwrap();
    let ClientMessage::Attach(attach) = attach else {
        panic!()
    };
    assert_eq!(
        attach.known_features(),
        vec![Feature::SteerTurn, Feature::ResumableSessions]
    );
    assert_eq!(attach.unknown_features(), vec!["teleport"]);
    assert_eq!(
        accept_features(
            &attach.features,
            &[Feature::ResumableSessions, Feature::Attachments]
        ),
        vec![Feature::ResumableSessions]
    );
    assert_eq!(
        accept_features(&attach.features, &Feature::ALL),
        vec![Feature::ResumableSessions, Feature::SteerTurn]
    );
}

#[test]
fn attached_may_list_only_known_features() {
    let text = r#"{"type":"attached","documentId":"d","documentUrl":"/u","login":"l","features":["teleport"],"timers":{"pingIntervalMs":1,"connectionTimeoutMs":1,"attachGraceMs":1,"startTimeoutMs":1,"abortWaitMs":1,"accessRecheckMs":1}}"#;
    let fault = decode_server(text).unwrap_err();
    assert_eq!(fault.code(), ErrorCode::InvalidValue, "{fault:?}");
    assert!(fault.to_string().contains("teleport"));
}

// ---------------------------------------------------------------------------------------------
// Order rules.

fn attach(features: &[Feature]) -> ClientMessage {
    ClientMessage::Attach(Attach {
        version: 1,
        document: "d".into(),
        checkout: None,
        features: features.iter().copied().map(OfferedFeature::from).collect(),
    })
}

fn attached(features: &[Feature], kept: &[&str]) -> ServerMessage {
    let ServerMessage::Attached(mut a) = every_server_message().remove(0) else {
        panic!()
    };
    a.features = features.to_vec();
    a.kept = kept.iter().map(|s| s.to_string()).collect();
    ServerMessage::Attached(a)
}

fn attached_link(features: &[Feature], kept: &[&str]) -> LinkOrder {
    let mut order = LinkOrder::new();
    order.check_client(&attach(features)).unwrap();
    order.check_server(&attached(features, kept)).unwrap();
    assert_eq!(order.phase(), Phase::Attached);
    order
}

fn started() -> ClientMessage {
    ClientMessage::Started(Started {
        session_id: "s".into(),
    })
}

fn out_of_order(result: Result<(), Fault>) -> String {
    let fault = result.unwrap_err();
    assert_eq!(fault.code(), ErrorCode::OutOfOrder, "{fault:?}");
    assert_eq!(fault.close_code(), 1008);
    fault.to_string()
}

#[test]
fn the_first_message_must_be_attach() {
    assert_eq!(first_message_ok(&attach(&[])), Ok(()));
    for message in every_client_message()
        .into_iter()
        .filter(|m| m.type_name() != "attach")
    {
        let words = out_of_order(LinkOrder::new().check_client(&message));
        assert!(
            words.contains("the first message must be \"attach\""),
            "{words}"
        );
        assert!(first_message_ok(&message).is_err());
    }
}

#[test]
fn nothing_follows_attach_until_it_is_answered() {
    let mut order = LinkOrder::new();
    order.check_client(&attach(&[])).unwrap();
    assert_eq!(order.phase(), Phase::Attaching);
    assert!(out_of_order(order.check_client(&started())).contains("wait for \"attached\""));
    assert!(
        out_of_order(order.check_server(&ServerMessage::Destroy(Destroy {
            session_id: "s".into()
        })))
        .contains("attached")
    );
}

#[test]
fn refused_and_error_end_the_conversation() {
    let mut order = LinkOrder::new();
    order.check_client(&attach(&[])).unwrap();
    let refused = ServerMessage::Refused(Refused {
        reason: RefusalReason::NoWriteAccess,
        message: "m".into(),
        holder: None,
        retry_after_ms: None,
    });
    order.check_server(&refused).unwrap();
    assert_eq!(order.phase(), Phase::Closing);
    out_of_order(order.check_server(&attached(&[], &[])));

    let mut order = attached_link(&[], &[]);
    order
        .check_server(&Fault::Binary { bytes: 1 }.frame())
        .unwrap();
    assert_eq!(order.phase(), Phase::Closing);
    out_of_order(order.check_client(&started()));

    // The server may send an error before attach, e.g. for a binary first frame.
    let mut order = LinkOrder::new();
    assert_eq!(
        order.check_server(&Fault::Binary { bytes: 1 }.frame()),
        Ok(())
    );
    out_of_order(LinkOrder::new().check_server(&attached(&[], &[])));
}

#[test]
fn one_attach_per_connection_and_nothing_after_detach() {
    let mut order = attached_link(&[], &[]);
    assert!(out_of_order(order.check_client(&attach(&[]))).contains("attaches once"));
    order.check_client(&started()).unwrap();
    order
        .check_client(&ClientMessage::Detach(Detach {}))
        .unwrap();
    assert_eq!(order.phase(), Phase::Closing);
    assert!(out_of_order(order.check_client(&started())).contains("detach"));
    // A server frame that crossed the detach is not the server's fault.
    order
        .check_server(&ServerMessage::Destroy(Destroy {
            session_id: "s".into(),
        }))
        .unwrap();
    out_of_order(order.check_server(&attached(&[], &[])));
    out_of_order(attached_link(&[], &[]).check_server(&attached(&[], &[])));
}

#[test]
fn resume_needs_the_feature_and_comes_first() {
    let resume = ClientMessage::Resume(ClientResume {
        sessions: vec!["s".into()],
    });

    let mut without = attached_link(&[], &[]);
    assert!(out_of_order(without.check_client(&resume)).contains("resumable-sessions"));

    let mut late = attached_link(&[Feature::ResumableSessions], &[]);
    late.check_client(&started()).unwrap();
    assert!(out_of_order(late.check_client(&resume)).contains("first message after \"attached\""));

    let mut owed = attached_link(&[Feature::ResumableSessions], &["s"]);
    assert!(out_of_order(owed.check_client(&started())).contains("answer with \"resume\" first"));

    // Issue 24 item 12: a `resume` after an `attached` that kept nothing answers nothing: it is
    // out of order, even as the first frame.
    let mut nothing_kept = attached_link(&[Feature::ResumableSessions], &[]);
    assert!(out_of_order(nothing_kept.check_client(&resume)).contains("named no kept sessions"));

    // `resumed` before the client's `resume` is the server's fault.
    let resumed = ServerMessage::Resumed(Resumed {
        sessions: vec!["s".into()],
        inputs: vec![],
    });
    out_of_order(attached_link(&[Feature::ResumableSessions], &["s"]).check_server(&resumed));

    let mut order = attached_link(&[Feature::ResumableSessions], &["s"]);
    order.check_client(&resume).unwrap();
    order.check_client(&started()).unwrap();
    order.check_server(&resumed).unwrap();
    out_of_order(order.check_server(&resumed));
    out_of_order(order.check_client(&resume));

    // `kept` goes only to a client that can resume.
    let mut order = LinkOrder::new();
    order.check_client(&attach(&[])).unwrap();
    out_of_order(order.check_server(&attached(&[], &["s"])));
}

#[test]
fn feature_gated_frames_need_their_feature() {
    let catalog = ClientMessage::Catalog(Catalog {
        models: vec![],
        commands: vec![],
    });
    assert!(
        out_of_order(attached_link(&[], &[]).check_client(&catalog)).contains("capability-catalog")
    );
    attached_link(&[Feature::CapabilityCatalog], &[])
        .check_client(&catalog)
        .unwrap();

    let steer = ServerMessage::Steer(Steer {
        turn_id: "t".into(),
        text: "@a: b".into(),
    });
    assert!(out_of_order(attached_link(&[], &[]).check_server(&steer)).contains("steer-turn"));
    attached_link(&[Feature::SteerTurn], &[])
        .check_server(&steer)
        .unwrap();

    let ServerMessage::Turn(mut turn) = every_server_message().remove(2) else {
        panic!()
    };
    assert!(!turn.attachments.is_empty());
    let with_files = ServerMessage::Turn(turn.clone());
    assert!(
        out_of_order(attached_link(&[], &[]).check_server(&with_files)).contains("attachments")
    );
    attached_link(&[Feature::Attachments], &[])
        .check_server(&with_files)
        .unwrap();

    turn.attachments.clear();
    turn.thinking_level = Some("high".into());
    let with_level = ServerMessage::Turn(turn);
    assert!(
        out_of_order(attached_link(&[], &[]).check_server(&with_level))
            .contains("capability-catalog")
    );
    attached_link(&[Feature::CapabilityCatalog], &[])
        .check_server(&with_level)
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// The tool boundary.

#[test]
fn own_tools_are_declared_once_before_use_and_never_shadow_a_host_tool() {
    let mut tools = TurnTools::new(
        SessionMode::Planner,
        &[tool("read_plan"), tool("edit_plan")],
    );
    assert_eq!(
        tools.check_own_call("run_tests"),
        Err(ToolBoundary::Undeclared {
            name: "run_tests".into()
        })
    );
    assert_eq!(tools.check_host_call("read_plan"), Ok(()));
    assert_eq!(
        tools.check_host_call("bash"),
        Err(ToolBoundary::NotAHostTool {
            name: "bash".into()
        })
    );

    assert_eq!(
        tools.clone().declare(&[tool("edit_plan")]),
        Err(ToolBoundary::ShadowsHostTool {
            name: "edit_plan".into()
        })
    );
    assert_eq!(
        tools.clone().declare(&[tool("a"), tool("a")]),
        Err(ToolBoundary::DuplicateTool { name: "a".into() })
    );

    tools.declare(&[tool("run_tests")]).unwrap();
    assert_eq!(tools.own(), Some(&["run_tests".to_string()][..]));
    assert_eq!(tools.check_own_call("run_tests"), Ok(()));
    assert_eq!(
        tools.check_own_call("deploy"),
        Err(ToolBoundary::Undeclared {
            name: "deploy".into()
        })
    );
    assert_eq!(tools.declare(&[]), Err(ToolBoundary::AlreadyDeclared));
    assert!(ToolBoundary::Undeclared {
        name: "deploy".into()
    }
    .to_string()
    .contains("did not declare"));
}

#[test]
fn an_isolated_session_declares_no_tools_of_its_own() {
    let mut tools = TurnTools::new(SessionMode::Isolated, &[tool("web_search")]);
    assert_eq!(
        tools.clone().declare(&[tool("mine")]),
        Err(ToolBoundary::OwnToolsInIsolated { count: 1 })
    );
    assert_eq!(tools.declare(&[]), Ok(()));
    assert!(tools.check_own_call("mine").is_err());
    assert_eq!(tools.check_host_call("web_search"), Ok(()));
}
