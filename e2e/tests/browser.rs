//! The pages in a real browser: Debian's Chromium, headless, through ChromeDriver, against the
//! release-built binary and the fake GitHub. People sign in through the server's GitHub sign-in,
//! open a repository, create a document, type in it together and see each other's text and
//! cursors; a reader cannot type; a restart reconnects both pages with nothing lost.
//! A failing step saves a screenshot, the page's text and its console (see `chopin_e2e::browser`).

use std::time::{Duration, Instant};

use chopin_e2e::browser::{Driver, Page};
use chopin_e2e::{Backend, Launch, Server};
use chopin_fixtures::github::{FakeGitHub, Permission};

const SECOND: Duration = Duration::from_secs(1);

/// How long a step may wait for what another page did. A guard against a hang, not a measure:
/// how fast typing reaches the other page is printed (`reached … in … ms`), never asserted.
const WAIT: Duration = Duration::from_secs(10);

fn github() -> FakeGitHub {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("lisa", 1002)
        .add_user("hubot", 1003)
        .add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "lisa", Permission::Write);
    github.grant("octo", "plans", "hubot", Permission::Read);
    github.install_app("octo");
    github
}

async fn signed_in(driver: &Driver, github: &FakeGitHub, server: &Server, login: &str) -> Page {
    let page = driver.page(login).await;
    github.set_browser_user(login);
    page.step("sign in", page.sign_in(&server.origin(), login))
        .await;
    page
}

/// The editor's text, as CodeMirror holds it.
const EDITOR_TEXT: &str =
    "const c = document.querySelector('.cm-content'); return c ? [...c.querySelectorAll('.cm-line')].map(l => l.textContent).join('\\n') : null;";

/// The names on the other people's cursors (shown on hover, so read as the page holds them).
const CURSORS: &str =
    "return [...document.querySelectorAll('.cm-ySelectionInfo')].map(e => e.textContent);";

/// WebDriver keys: Control, End, and the release of held modifiers.
const TO_THE_END: &str = "\u{E009}\u{E010}\u{E000}";

async fn editing_together(backend: Backend, name: &str) {
    let github = github();
    let github_url = github.serve_tcp().await.unwrap();
    let launch = Launch::hosted(&github_url).on(&backend);
    let server = launch.start().await;
    let driver = Driver::start(name).await;

    // mona signs in, opens the repository and creates a document from its page.
    let mona = signed_in(&driver, &github, &server, "mona").await;
    mona.step("open the repository", async {
        mona.until_text("#repositories", WAIT, |t| t == "octo/plans")
            .await?;
        mona.click("#repositories a").await?;
        mona.until_text("#repository-status", WAIT, |t| t == "No documents yet.")
            .await
    })
    .await;
    let opened = Instant::now();
    mona.step("create a document", async {
        mona.type_into("#new-title", "Browser plan").await?;
        mona.click("#create-document button").await?;
        mona.until_text("#title", WAIT, |t| t == "Browser plan")
            .await?;
        mona.until_text("#connection", WAIT, |t| t == "Connected")
            .await?;
        mona.until_script(
            "return document.querySelector('.cm-content')?.getAttribute('contenteditable')",
            WAIT,
            |v| v == "true",
        )
        .await
    })
    .await;
    eprintln!(
        "navigation to an editable document: {} ms",
        opened.elapsed().as_millis()
    );
    let url = mona.client.current_url().await.unwrap().to_string();
    assert!(url.ends_with("/documents/octo/plans/browser-plan"), "{url}");

    // lisa opens the same URL; both type and each sees the other's text within a second.
    let lisa = signed_in(&driver, &github, &server, "lisa").await;
    lisa.step("open the document", async {
        lisa.goto(&url).await?;
        lisa.until_text("#connection", WAIT, |t| t == "Connected")
            .await
    })
    .await;
    mona.step("type", async {
        mona.click(".cm-content").await?;
        mona.type_into(".cm-content", "Hello from mona").await
    })
    .await;
    let typed = Instant::now();
    lisa.step("see mona's text", async {
        lisa.until_script(EDITOR_TEXT, WAIT, |v| {
            v.as_str().is_some_and(|t| t.contains("Hello from mona"))
        })
        .await
    })
    .await;
    eprintln!(
        "mona's typing reached lisa in {} ms",
        typed.elapsed().as_millis()
    );
    lisa.step("see mona's cursor", async {
        lisa.until_script(CURSORS, WAIT, |v| v == &serde_json::json!(["mona"]))
            .await
    })
    .await;
    lisa.step("type", async {
        lisa.click(".cm-content").await?;
        lisa.type_into(".cm-content", TO_THE_END).await?;
        lisa.type_into(".cm-content", "\nAnd lisa").await
    })
    .await;
    mona.step("see lisa's text and cursor", async {
        mona.until_script(EDITOR_TEXT, WAIT, |v| {
            v.as_str().is_some_and(|t| t.contains("And lisa"))
        })
        .await?;
        mona.until_script(CURSORS, WAIT, |v| v == &serde_json::json!(["lisa"]))
            .await
    })
    .await;
    let shot = mona.save("document-page").await;
    eprintln!("screenshot: {}", shot.display());

    // hubot reads: the editor refuses input and says why.
    let hubot = signed_in(&driver, &github, &server, "hubot").await;
    hubot
        .step("a reader cannot type", async {
            hubot.goto(&url).await?;
            hubot
                .until_text("#read-only", WAIT, |t| {
                    t.contains("you cannot push to octo/plans")
                })
                .await?;
            hubot
                .until_script(
                    "return document.querySelector('.cm-content')?.getAttribute('contenteditable')",
                    WAIT,
                    |v| v == "false",
                )
                .await?;
            let _ = hubot.type_into(".cm-content", "reader was here").await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let text = hubot
                .client
                .execute(EDITOR_TEXT, vec![])
                .await
                .map_err(|e| e.to_string())?;
            match text.as_str() {
                Some(t) if !t.contains("reader was here") => Ok(()),
                _ => Err(format!("the reader's editor took input: {text}")),
            }
        })
        .await;

    // How long a page takes from navigation to an editable document (printed, not asserted).
    let mut loads = Vec::new();
    for _ in 0..10 {
        let began = Instant::now();
        mona.step("load the document", async {
            mona.goto(&url).await?;
            mona.until_script(
                "return document.querySelector('#connection')?.textContent === 'Connected' && document.querySelector('.cm-content')?.getAttribute('contenteditable')",
                WAIT,
                |v| v == "true",
            )
            .await
        })
        .await;
        loads.push(began.elapsed().as_millis());
    }
    loads.sort_unstable();
    eprintln!(
        "navigation to an editable document, {name}: median of 10 loads {} ms (fastest {}, slowest {})",
        loads[loads.len() / 2],
        loads[0],
        loads[loads.len() - 1]
    );

    // Something said before the restart.
    mona.step("say something", async {
        mona.type_into("#chat-text", "said before the restart")
            .await?;
        mona.click("#send").await?;
        lisa.until_text("#messages", WAIT, |t| t.contains("said before the restart"))
            .await
    })
    .await;

    // The server restarts on the same address: both pages reconnect and nothing is lost.
    let relaunch = launch.at(&server);
    let (status, _) = server.stop().await;
    assert!(status.success(), "the server stopped cleanly");
    for page in [&mona, &lisa] {
        page.step("show that it reconnects", async {
            page.until_text("#connection", WAIT, |t| t == "Reconnecting…")
                .await
        })
        .await;
    }
    let server = relaunch.start().await;
    for page in [&mona, &lisa] {
        page.step("reconnect after the restart", async {
            page.until_text("#connection", 20 * SECOND, |t| t == "Connected")
                .await?;
            page.until_script(EDITOR_TEXT, WAIT, |v| {
                v.as_str()
                    .is_some_and(|t| t.contains("Hello from mona") && t.contains("And lisa"))
            })
            .await
        })
        .await;
    }
    // Each page read the latest Chat again when it came back: nothing shown twice.
    for page in [&mona, &lisa] {
        page.step("the Chat is whole after the restart", async {
            page.until_script(
                "return [...document.querySelectorAll('#messages .text')].map(e => e.textContent)",
                WAIT,
                |v| v == &serde_json::json!(["said before the restart"]),
            )
            .await
        })
        .await;
    }
    lisa.step("speak after the restart", async {
        lisa.type_into("#chat-text", "said after the restart")
            .await?;
        lisa.click("#send").await
    })
    .await;
    mona.step("hear it, in order", async {
        mona.until_script(
            "return [...document.querySelectorAll('#messages .text')].map(e => e.textContent)",
            WAIT,
            |v| v == &serde_json::json!(["said before the restart", "said after the restart"]),
        )
        .await
    })
    .await;
    mona.step("type after the restart", async {
        mona.type_into(".cm-content", TO_THE_END).await?;
        mona.type_into(".cm-content", " again").await
    })
    .await;
    lisa.step("see it", async {
        lisa.until_script(EDITOR_TEXT, WAIT, |v| {
            v.as_str().is_some_and(|t| t.contains(" again"))
        })
        .await
    })
    .await;
    // What the pages show is what the server keeps.
    let source: serde_json::Value = reqwest::Client::new()
        .get(server.url("/api/repositories/octo/plans/documents/browser-plan"))
        .bearer_auth(github.issue_token("mona"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = source["id"].as_str().unwrap().to_owned();
    let source: serde_json::Value = reqwest::Client::new()
        .get(server.url(&format!("/api/documents/{id}/source")))
        .bearer_auth(github.issue_token("mona"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kept = source["source"].as_str().unwrap();
    assert!(
        kept.contains("Hello from mona") && kept.contains("And lisa") && kept.contains(" again"),
        "{kept}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_edit_one_document_in_chromium_on_sqlite() {
    let home = tempfile::tempdir().unwrap();
    editing_together(Backend::Sqlite(home), "edit-sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_edit_one_document_in_chromium_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    editing_together(Backend::Postgres(db), "edit-postgres").await;
}

mod planner {
    use super::*;
    use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
    use chopin_protocol::agent::{
        ClientMessage, ControlResult, HostInput, InputAnswer, InputRequest, Part, PartMessage, Run,
        RunStatus, Runs, Select, ServerMessage, Started, TextPart, TurnEnd, TurnStatus,
    };

    async fn next(client: &mut AgentClient) -> ServerMessage {
        match tokio::time::timeout(Duration::from_secs(15), client.recv())
            .await
            .expect("a frame within 15 s")
            .unwrap()
        {
            Event::Message(m) => m,
            Event::Closed { code, reason } => panic!("closed {code} {reason}"),
        }
    }

    /// The next turn (answering `start` if a new session comes first): its session, id and
    /// prompt.
    async fn started_turn(client: &mut AgentClient) -> (String, String, String) {
        loop {
            match next(client).await {
                ServerMessage::Start(s) => client
                    .send(&ClientMessage::Started(Started {
                        session_id: s.session_id,
                    }))
                    .await
                    .unwrap(),
                ServerMessage::Turn(t) => return (t.session_id, t.turn_id, t.prompt),
                _ => {}
            }
        }
    }

    async fn say(client: &mut AgentClient, turn: &str, text: &str) {
        client
            .send(&ClientMessage::Part(PartMessage {
                turn_id: turn.into(),
                part: Part::Text(TextPart { text: text.into() }),
            }))
            .await
            .unwrap();
    }

    /// Things that must stay text: if any ran, the page's title would change.
    const HOSTILE: &str = "<script>document.title='pwned'</script> <img src=x onerror=\"document.title='pwned'\"> [click](javascript:document.title='pwned')";

    /// What the page holds that could run: script elements, any element with an inline handler,
    /// images from the text (CodeMirror's own `img.cm-widgetBuffer` spacers are not), and
    /// javascript: links.
    const RUNNABLE: &str = "return { title: document.title, scripts: document.querySelectorAll('main script').length, handlers: document.querySelectorAll('main [onerror], main [onload], main [onclick]').length, images: document.querySelectorAll('main img:not(.cm-widgetBuffer)').length, js: [...document.querySelectorAll('a')].filter(a => a.href.startsWith('javascript:')).length };";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_planner_in_chromium_replies_takes_an_answer_and_is_stopped_and_nothing_hostile_runs(
    ) {
        let github = github();
        let mona_token = github.issue_token("mona");
        let github_url = github.serve_tcp().await.unwrap();
        // Kept for the whole test: dropping it deletes the server's data folder.
        let backend = Backend::Sqlite(tempfile::tempdir().unwrap());
        let server = Launch::hosted(&github_url).on(&backend).start().await;
        let doc = server
            .create_document(&mona_token, "octo/plans", "Planner page")
            .await;
        let id = doc["id"].as_str().unwrap().to_owned();
        let url = format!("{}{}", server.origin(), doc["url"].as_str().unwrap());
        let driver = Driver::start("planner").await;
        let mona = signed_in(&driver, &github, &server, "mona").await;
        mona.step("open the document", async {
            mona.goto(&url).await?;
            mona.until_text("#connection", WAIT, |t| t == "Connected")
                .await?;
            mona.until_text("#presence", WAIT, |t| t == "Planner: none")
                .await
        })
        .await;

        // With no Planner attached, a message to it is refused in the server's words, and the
        // text stays in the box to send again.
        mona.step("a refusal shows its words", async {
            mona.type_into("#chat-text", "@chopin are you there?")
                .await?;
            mona.click("#send").await?;
            mona.until_text("#chat-refused", WAIT, |t| {
                t.starts_with("No Planner is attached to ")
            })
            .await?;
            mona.until_script(
                "return document.querySelector('#chat-text').value",
                WAIT,
                |v| v == "@chopin are you there?",
            )
            .await?;
            mona.client
                .execute("document.querySelector('#chat-text').value = ''", vec![])
                .await
                .map_err(|e| e.to_string())
                .map(|_| ())
        })
        .await;

        // mona's Planner client attaches: the page shows it.
        let host = server.host();
        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        let mut client = connect(stream, &Upgrade::new(host.clone(), Some(&mona_token)))
            .await
            .unwrap();
        let attached = client.attach(&id, &[]).await.unwrap();
        assert!(
            matches!(attached, ServerMessage::Attached(_)),
            "{attached:?}"
        );
        mona.step("see the Planner attached", async {
            mona.until_text("#presence", WAIT, |t| t == "Planner: attached (mona)")
                .await
        })
        .await;

        mona.step("write the plan", async {
            mona.click(".cm-content").await?;
            mona.type_into(
                ".cm-content",
                "# Rollout\n\nShip the canary region by region, watching the error budget.",
            )
            .await
        })
        .await;

        // @chopin from the page starts a turn; the client asks a question.
        mona.step("ask the Planner", async {
            mona.type_into("#chat-text", "@chopin which region first?")
                .await?;
            mona.click("#send").await
        })
        .await;
        let (session, turn, prompt) = started_turn(&mut client).await;
        assert!(prompt.contains("which region first?"), "{prompt}");
        client
            .send(&ClientMessage::InputRequest(InputRequest {
                session_id: session.clone(),
                request_id: "q-1".into(),
                turn_id: Some(turn.clone()),
                run_id: None,
                block: None,
                input: HostInput::Select(Select {
                    title: "Which region goes first?".into(),
                    options: vec!["eu-west".into(), "us-east".into()],
                }),
            }))
            .await
            .unwrap();
        // The card appears in the page; mona picks us-east and answers.
        mona.step("answer the card", async {
            mona.until_text("#decisions .question", WAIT, |t| {
                t == "Which region goes first?"
            })
            .await?;
            // The screenshot at the top of the README: a document with a question open.
            mona.save("document-page").await;
            mona.click("#decisions .option:nth-of-type(2) input")
                .await?;
            mona.click("#decisions button[type=submit]").await
        })
        .await;
        let result = mona
            .step("the answer reaches the client", async {
                loop {
                    match tokio::time::timeout(WAIT, client.recv()).await {
                        Ok(Ok(Event::Message(ServerMessage::InputResult(r)))) => return Ok(r),
                        Ok(Ok(Event::Message(_))) => {}
                        other => return Err(format!("no input-result: {other:?}")),
                    }
                }
            })
            .await;
        match result.answer {
            Some(InputAnswer::Select(a)) => assert_eq!(a.choice, "us-east"),
            other => panic!("the answer reached the client as {other:?}"),
        }
        mona.step("the answered card leaves", async {
            mona.until_script(
                "return document.querySelectorAll('#decisions .card').length",
                WAIT,
                |v| v == 0,
            )
            .await
        })
        .await;
        // The client replies; the reply appears in the page's Chat.
        say(&mut client, &turn, "us-east first, then eu-west.").await;
        client
            .send(&ClientMessage::TurnEnd(TurnEnd {
                turn_id: turn,
                status: TurnStatus::Completed,
                output: None,
                message: None,
            }))
            .await
            .unwrap();
        mona.step("see the reply", async {
            mona.until_text("#messages .planner:last-child .text", WAIT, |t| {
                t == "us-east first, then eu-west."
            })
            .await
        })
        .await;

        // Hostile text in the document and in Chat stays text.
        mona.step("type hostile text", async {
            mona.click(".cm-content").await?;
            mona.type_into(".cm-content", TO_THE_END).await?;
            mona.type_into(".cm-content", HOSTILE).await?;
            mona.type_into("#chat-text", HOSTILE).await?;
            mona.click("#send").await?;
            mona.until_text("#messages", WAIT, |t| t.contains("<script>"))
                .await
        })
        .await;

        // A second turn, stopped from the page: its turn hears `abort`, its run `stop`.
        mona.step("ask again", async {
            mona.type_into("#chat-text", "@chopin keep going").await?;
            mona.click("#send").await
        })
        .await;
        let (session, turn, _) = started_turn(&mut client).await;
        // The turn reports a workflow run: its card shows in the page.
        client
            .send(&ClientMessage::Runs(Runs {
                session_id: session.clone(),
                runs: vec![Run {
                    run_id: "run-1".into(),
                    name: "canary-rollout".into(),
                    status: RunStatus::Running,
                    root_run_id: None,
                    elapsed_ms: Some(1_000),
                    stages: Vec::new(),
                    omitted_stages: None,
                }],
            }))
            .await
            .unwrap();
        mona.step("see the run card", async {
            mona.until_text("#runs .run", WAIT, |t| {
                t.contains("canary-rollout") && t.contains("running")
            })
            .await
        })
        .await;
        mona.step("press Stop", mona.click("#stop")).await;
        // The running turn hears `abort`, its live run `stop`.
        let (mut aborted, mut stopped) = (false, false);
        while !(aborted && stopped) {
            match next(&mut client).await {
                ServerMessage::Abort(a) => {
                    assert_eq!(a.turn_id, turn);
                    aborted = true;
                    client
                        .send(&ClientMessage::TurnEnd(TurnEnd {
                            turn_id: turn.clone(),
                            status: TurnStatus::Aborted,
                            output: None,
                            message: None,
                        }))
                        .await
                        .unwrap();
                }
                ServerMessage::Stop(stop) => {
                    stopped = true;
                    client
                        .send(&ClientMessage::ControlResult(ControlResult {
                            request_id: stop.request_id,
                            ok: true,
                            message: None,
                        }))
                        .await
                        .unwrap();
                }
                _ => {}
            }
        }
        mona.step("Chat says it stopped", async {
            mona.until_text("#messages", WAIT, |t| t.contains("stopped"))
                .await
        })
        .await;

        // Nothing hostile ran, in the page that took it or in a fresh one.
        let fresh = signed_in(&driver, &github, &server, "lisa").await;
        fresh
            .step("open the document afresh", async {
                fresh.goto(&url).await?;
                fresh
                    .until_text("#messages", WAIT, |t| t.contains("<script>"))
                    .await
            })
            .await;
        for page in [&mona, &fresh] {
            page.step("nothing hostile ran", async {
                let v = page
                    .client
                    .execute(RUNNABLE, vec![])
                    .await
                    .map_err(|e| e.to_string())?;
                let ok = v["title"].as_str().is_some_and(|t| t != "pwned")
                    && v["scripts"] == 0
                    && v["handlers"] == 0
                    && v["images"] == 0
                    && v["js"] == 0;
                if ok {
                    Ok(())
                } else {
                    Err(format!("{v}"))
                }
            })
            .await;
        }
        server.stop().await;
    }
}

/// The composer's model and command controls (MOD-06, MOD-11, MOD-21, CMD-01, CMD-10, CMD-17)
/// in Chromium: a Planner client reports its catalog; mona picks a model and a level and runs a
/// command from the page; the client's turn carries all three; a model that leaves shows its
/// notice above the composer.
mod composer {
    use super::*;
    use chopin_fixtures::agent::{connect, Event, Upgrade};
    use chopin_protocol::agent::{
        Catalog, CatalogCommand, CatalogModel, ClientMessage, ServerMessage, Started,
    };

    fn entry(id: &str, levels: &[&str], default: bool) -> CatalogModel {
        CatalogModel {
            id: id.into(),
            name: None,
            description: None,
            thinking_levels: levels.iter().map(|l| (*l).to_owned()).collect(),
            input_types: vec!["text".into()],
            default,
        }
    }

    /// Sets the `<select>` at `css` to `value` as a person would (the change event fires).
    fn pick(css: &str, value: &str) -> String {
        format!(
            "const s = document.querySelector('{css}'); s.value = '{value}'; s.dispatchEvent(new Event('change')); return s.value;"
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_composer_chooses_the_model_and_runs_a_planner_command_in_chromium() {
        let github = github();
        let mona_token = github.issue_token("mona");
        let github_url = github.serve_tcp().await.unwrap();
        let backend = Backend::Sqlite(tempfile::tempdir().unwrap());
        let server = Launch::hosted(&github_url).on(&backend).start().await;
        let doc = server
            .create_document(&mona_token, "octo/plans", "Composer")
            .await;
        let id = doc["id"].as_str().unwrap().to_owned();
        let url = format!("{}{}", server.origin(), doc["url"].as_str().unwrap());
        let driver = Driver::start("composer").await;
        let mona = signed_in(&driver, &github, &server, "mona").await;
        mona.step("open the document", async {
            mona.goto(&url).await?;
            mona.until_text("#connection", WAIT, |t| t == "Connected")
                .await
        })
        .await;
        let host = server.host();
        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        let mut client = connect(stream, &Upgrade::new(host.clone(), Some(&mona_token)))
            .await
            .unwrap();
        let attached = client.attach(&id, &["capability-catalog"]).await.unwrap();
        assert!(
            matches!(attached, ServerMessage::Attached(_)),
            "{attached:?}"
        );
        let catalog = |models| {
            ClientMessage::Catalog(Catalog {
                models,
                commands: vec![CatalogCommand {
                    name: "review".into(),
                    kind: "skill".into(),
                    description: "Review the plan".into(),
                }],
            })
        };
        client
            .send(&catalog(vec![
                entry("anthropic/sonnet", &["low", "high"], true),
                entry("openai/mini", &[], false),
            ]))
            .await
            .unwrap();
        mona.step("choose a model and a level", async {
            mona.until_script(
                "return document.querySelectorAll('#model-choice option').length",
                WAIT,
                |v| v == 3,
            )
            .await?;
            let page = &mona;
            let go = |script: String| async move {
                page.client
                    .execute(&script, vec![])
                    .await
                    .map_err(|e| e.to_string())
            };
            go(pick("#model-choice", "anthropic/sonnet")).await?;
            mona.until_script(
                "return document.querySelectorAll('#level-choice option').length",
                WAIT,
                |v| v == 3,
            )
            .await?;
            go(pick("#level-choice", "high")).await?;
            // The server's answer redraws the controls with what it stored.
            mona.until_script(
                "return document.querySelector('#level-choice').value",
                WAIT,
                |v| v == "high",
            )
            .await?;
            go(pick("#command-choice", "0")).await?;
            mona.until_script(
                "return document.querySelector('#chat-text').value",
                WAIT,
                |v| v == "/review ",
            )
            .await?;
            mona.type_into("#chat-text", "the intro").await?;
            mona.click("#send").await
        })
        .await;
        let turn = loop {
            match tokio::time::timeout(WAIT, client.recv()).await {
                Ok(Ok(Event::Message(ServerMessage::Start(s)))) => client
                    .send(&ClientMessage::Started(Started {
                        session_id: s.session_id,
                    }))
                    .await
                    .unwrap(),
                Ok(Ok(Event::Message(ServerMessage::Turn(t)))) => break t,
                Ok(Ok(Event::Message(_))) => {}
                other => panic!("no turn: {other:?}"),
            }
        };
        assert_eq!(turn.prompt, "/review the intro", "CMD-17");
        assert_eq!(turn.model.as_deref(), Some("anthropic/sonnet"), "MOD-11");
        assert_eq!(turn.thinking_level.as_deref(), Some("high"), "MOD-11");
        // The model leaves: the composer says the default runs.
        client
            .send(&catalog(vec![entry("openai/mini", &[], true)]))
            .await
            .unwrap();
        mona.step("the notice shows", async {
            mona.until_text("#model-notice", WAIT, |t| {
                t == "anthropic/sonnet is not available now: the default model runs until it is."
            })
            .await
        })
        .await;
        server.stop().await;
    }
}

/// Automatic participation in Chromium (CTX-01..03): mona, alone with an attached Planner,
/// writes without `@chopin` and the Planner gets it; she unticks "chopin joins in without
/// @chopin", the server stores the pause and Chat says so, and her next plain line reaches
/// nobody.
mod participation {
    use super::*;
    use chopin_fixtures::agent::{connect, Event, Upgrade};
    use chopin_protocol::agent::{ClientMessage, ServerMessage, Started, TurnEnd, TurnStatus};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_pauses_chopin_joining_in_from_the_page_in_chromium() {
        let github = github();
        let mona_token = github.issue_token("mona");
        let github_url = github.serve_tcp().await.unwrap();
        let backend = Backend::Sqlite(tempfile::tempdir().unwrap());
        let server = Launch::hosted(&github_url).on(&backend).start().await;
        let doc = server
            .create_document(&mona_token, "octo/plans", "Participation")
            .await;
        let id = doc["id"].as_str().unwrap().to_owned();
        let url = format!("{}{}", server.origin(), doc["url"].as_str().unwrap());
        let driver = Driver::start("participation").await;
        let mona = signed_in(&driver, &github, &server, "mona").await;
        let host = server.host();
        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        let mut client = connect(stream, &Upgrade::new(host.clone(), Some(&mona_token)))
            .await
            .unwrap();
        let attached = client.attach(&id, &[]).await.unwrap();
        assert!(
            matches!(attached, ServerMessage::Attached(_)),
            "{attached:?}"
        );
        mona.step("open the document: chopin joins in", async {
            mona.goto(&url).await?;
            mona.until_text("#connection", WAIT, |t| t == "Connected")
                .await?;
            mona.until_script(
                "const b = document.querySelector('#participation'); return String(b.checked && !b.disabled)",
                WAIT,
                |v| v == "true",
            )
            .await?;
            mona.type_into("#chat-text", "what should the intro say").await?;
            mona.click("#send").await
        })
        .await;
        let turn = loop {
            match tokio::time::timeout(WAIT, client.recv()).await {
                Ok(Ok(Event::Message(ServerMessage::Start(s)))) => client
                    .send(&ClientMessage::Started(Started {
                        session_id: s.session_id,
                    }))
                    .await
                    .unwrap(),
                Ok(Ok(Event::Message(ServerMessage::Turn(t)))) => break t,
                Ok(Ok(Event::Message(_))) => {}
                other => panic!("CTX-01: a solo line reaches the Planner: {other:?}"),
            }
        };
        assert!(
            turn.prompt.ends_with("@mona: what should the intro say"),
            "{}",
            turn.prompt
        );
        client
            .send(&ClientMessage::TurnEnd(TurnEnd {
                turn_id: turn.turn_id,
                status: TurnStatus::Completed,
                output: None,
                message: None,
            }))
            .await
            .unwrap();
        mona.step("pause it", async {
            mona.click("#participation").await?;
            mona.until_script(
                "return document.querySelector('label.participation').dataset.paused",
                WAIT,
                |v| v == "yes",
            )
            .await?;
            mona.until_text("#messages", WAIT, |t| {
                t.contains("mona paused chopin's replies to messages that do not name it")
            })
            .await?;
            mona.type_into("#chat-text", "just a note for the room")
                .await?;
            mona.click("#send").await
        })
        .await;
        let state: serde_json::Value = reqwest::Client::new()
            .get(server.url(&format!("/api/channels/{id}/participation")))
            .header("authorization", format!("Bearer {mona_token}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(state["paused"], true, "stored: {state}");
        assert_eq!(state["pausedBy"], "mona");
        let quiet = tokio::time::timeout(Duration::from_millis(1500), async {
            loop {
                if let Ok(Event::Message(ServerMessage::Start(_))) = client.recv().await {
                    return;
                }
            }
        })
        .await;
        assert!(quiet.is_err(), "paused: the plain line starts no turn");
        server.stop().await;
    }
}

/// Comment threads in Chromium (ISO-17, ISO-18, ISO-19, ISO-21): mona comments on a passage from
/// the page and sends the note to chopin; the attached Planner's turn answers in that thread
/// with `reply_comment`, and her page shows chopin's reply under her note; she resolves it.
mod comments {
    use super::*;
    use chopin_fixtures::agent::{connect, Event, Upgrade};
    use chopin_protocol::agent::{
        ClientMessage, HostToolCall, ServerMessage, Started, TurnEnd, TurnStatus,
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_comment_sent_to_chopin_is_answered_in_its_thread_on_the_page_in_chromium() {
        let github = github();
        let mona_token = github.issue_token("mona");
        let github_url = github.serve_tcp().await.unwrap();
        let backend = Backend::Sqlite(tempfile::tempdir().unwrap());
        let server = Launch::hosted(&github_url).on(&backend).start().await;
        let doc = server
            .create_document(&mona_token, "octo/plans", "Comments")
            .await;
        let id = doc["id"].as_str().unwrap().to_owned();
        let url = format!("{}{}", server.origin(), doc["url"].as_str().unwrap());
        let driver = Driver::start("comments").await;
        let mona = signed_in(&driver, &github, &server, "mona").await;
        let host = server.host();
        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        let mut client = connect(stream, &Upgrade::new(host.clone(), Some(&mona_token)))
            .await
            .unwrap();
        let attached = client.attach(&id, &[]).await.unwrap();
        assert!(
            matches!(attached, ServerMessage::Attached(_)),
            "{attached:?}"
        );
        mona.step("comment on a passage, to chopin", async {
            mona.goto(&url).await?;
            mona.until_text("#connection", WAIT, |t| t == "Connected")
                .await?;
            mona.until_script(
                "return String(!document.querySelector('#comment-text').disabled)",
                WAIT,
                |v| v == "true",
            )
            .await?;
            mona.type_into("#comment-quote", "We serve EU shoppers from one region.")
                .await?;
            mona.type_into("#comment-text", "Is one region enough?")
                .await?;
            mona.click("#comment-to-chopin").await?;
            mona.click("#comment-start").await?;
            mona.until_text("#threads", WAIT, |t| {
                t.contains("@mona (to chopin): Is one region enough?")
            })
            .await
        })
        .await;
        let turn = loop {
            match tokio::time::timeout(WAIT, client.recv()).await {
                Ok(Ok(Event::Message(ServerMessage::Start(s)))) => client
                    .send(&ClientMessage::Started(Started {
                        session_id: s.session_id,
                    }))
                    .await
                    .unwrap(),
                Ok(Ok(Event::Message(ServerMessage::Turn(t)))) => break t,
                Ok(Ok(Event::Message(_))) => {}
                other => panic!("ISO-18: the note starts a turn: {other:?}"),
            }
        };
        let thread = turn
            .prompt
            .split("comment thread ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .expect("the turn names its thread")
            .to_owned();
        client
            .send(&ClientMessage::HostToolCall(HostToolCall {
                turn_id: turn.turn_id.clone(),
                call_id: "r1".into(),
                name: "reply_comment".into(),
                input: serde_json::json!({ "thread": thread, "text": "Yes, for launch." }),
            }))
            .await
            .unwrap();
        loop {
            match tokio::time::timeout(WAIT, client.recv()).await {
                Ok(Ok(Event::Message(ServerMessage::HostToolResult(r)))) => {
                    assert!(!r.is_error, "{r:?}");
                    break;
                }
                Ok(Ok(Event::Message(_))) => {}
                other => panic!("the reply's result: {other:?}"),
            }
        }
        client
            .send(&ClientMessage::TurnEnd(TurnEnd {
                turn_id: turn.turn_id,
                status: TurnStatus::Completed,
                output: None,
                message: None,
            }))
            .await
            .unwrap();
        mona.step("see chopin's reply, then resolve", async {
            mona.until_text("#threads", WAIT, |t| t.contains("chopin: Yes, for launch."))
                .await?;
            mona.click(".thread .resolve").await?;
            mona.until_text("#threads", WAIT, |t| t.contains("Resolved by @mona"))
                .await
        })
        .await;
        server.stop().await;
    }
}

/// Files and dictation in Chromium (FILE-01, FILE-21, FILE-31, DICT-01, DICT-04, DICT-06): mona
/// attaches a text file and a picture to a message from the page; lisa, in another browser,
/// sees the picture load and the text file offered as a download; then mona dictates with the
/// fake microphone and the fake provider's words land in her draft.
mod files {
    use super::*;
    use chopin_fixtures::model_provider::{FakeProvider, Transcript};

    /// Puts files on the composer's file input as a person choosing them would (a `change`
    /// event with a FileList): a text file and a 1×1 PNG.
    const CHOOSE: &str = r#"
        const png = Uint8Array.from(atob('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR42mNkAAIAAAoAAv/lxKUAAAAASUVORK5CYII='), c => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File(['canary first\n'], 'notes.txt', { type: 'text/plain' }));
        dt.items.add(new File([png], 'dot.png', { type: 'image/png' }));
        const input = document.querySelector('#file-input');
        input.files = dt.files;
        input.dispatchEvent(new Event('change'));
        return input.files.length;"#;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn files_go_with_a_message_and_dictation_writes_into_the_draft_in_chromium() {
        let github = github();
        let mona_token = github.issue_token("mona");
        let github_url = github.serve_tcp().await.unwrap();
        let provider = FakeProvider::new();
        let provider_url = provider.serve_tcp().await.unwrap();
        provider.set_transcript(Transcript {
            deltas: vec!["ship ".into(), "the canary".into()],
            cut: false,
        });
        let backend = Backend::Sqlite(tempfile::tempdir().unwrap());
        let server = Launch::hosted(&github_url)
            .on(&backend)
            .env("TRANSCRIPTION_MODEL", "e2e-transcribe")
            .env("TRANSCRIPTION_BASE_URL", format!("{provider_url}/v1"))
            .start()
            .await;
        let doc = server
            .create_document(&mona_token, "octo/plans", "Files")
            .await;
        let url = format!("{}{}", server.origin(), doc["url"].as_str().unwrap());
        let driver = Driver::start("files").await;
        let mona = signed_in(&driver, &github, &server, "mona").await;
        let lisa = signed_in(&driver, &github, &server, "lisa").await;
        for page in [&mona, &lisa] {
            page.step("open the document", async {
                page.goto(&url).await?;
                page.until_text("#connection", WAIT, |t| t == "Connected")
                    .await
            })
            .await;
        }
        mona.step("attach two files and send them", async {
            mona.until_script(
                "return !document.querySelector('#attach').hidden",
                WAIT,
                |v| v == true,
            )
            .await?;
            mona.client
                .execute(CHOOSE, vec![])
                .await
                .map_err(|e| e.to_string())?;
            mona.until_script(
                "return document.querySelectorAll('#file-chips .chip.uploaded').length",
                WAIT,
                |v| v == 2,
            )
            .await?;
            mona.type_into("#chat-text", "the notes and a dot").await?;
            mona.click("#send").await?;
            mona.until_script(
                "return document.querySelectorAll('#file-chips .chip').length",
                WAIT,
                |v| v == 0,
            )
            .await
        })
        .await;
        lisa.step("see the picture and the download", async {
            lisa.until_script(
                "const img = document.querySelector('.message-files img'); return img ? img.complete && img.naturalWidth : 0;",
                WAIT,
                |v| v == 1,
            )
            .await?;
            lisa.until_script(
                "const a = document.querySelector('.message-files a[download]'); return a ? a.getAttribute('download') : null;",
                WAIT,
                |v| v == "notes.txt",
            )
            .await
        })
        .await;
        mona.step("dictate", async {
            mona.until_script(
                "return !document.querySelector('#dictate').hidden",
                WAIT,
                |v| v == true,
            )
            .await?;
            mona.click("#dictate").await?;
            mona.until_script(
                "return document.querySelector('#dictate').getAttribute('aria-pressed')",
                WAIT,
                |v| v == "true",
            )
            .await?;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            mona.click("#dictate").await?;
            mona.until_script(
                "return document.querySelector('#chat-text').value",
                WAIT,
                |v| v == "ship the canary",
            )
            .await
        })
        .await;
        let sent = provider.transcriptions();
        assert_eq!(sent.len(), 1);
        let file = sent[0].part("file").unwrap();
        assert_eq!(file.content_type.as_deref(), Some("audio/webm"), "DICT-03");
        server.stop().await;
    }
}

/// A local server (`AUTH_MODE=local`) has no web sign-in: the start page runs GitHub's device
/// flow, shows the code to type at GitHub, and signs the browser in once GitHub approves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_server_signs_the_browser_in_with_the_device_flow() {
    let github = github();
    let github_url = github.serve_tcp().await.unwrap();
    let backend = Backend::Sqlite(tempfile::tempdir().unwrap());
    let server = Launch::hosted(&github_url)
        .env("AUTH_MODE", "local")
        .on(&backend)
        .start()
        .await;
    let driver = Driver::start("local").await;
    let page = driver.page("mona").await;
    let code = page
        .step("start the device flow", async {
            page.goto(&format!("{}/", server.origin())).await?;
            page.click("#sign-in").await?;
            page.until_text("#user-code", WAIT, |t| !t.is_empty()).await
        })
        .await;
    github.approve_device(&code, "mona");
    page.step("signed in once GitHub approves", async {
        page.until_text("#who", 20 * SECOND, |t| t == "Signed in as mona")
            .await
    })
    .await;
    server.stop().await;
}
