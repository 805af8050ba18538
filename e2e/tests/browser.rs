//! The pages in a real browser: Debian's Chromium, headless, through ChromeDriver, against the
//! release-built binary and the fake GitHub. People sign in through the server's GitHub sign-in,
//! open a repository, create a document, type in it together and see each other's text and
//! cursors; a reader cannot type; a restart reconnects both pages with nothing lost.
//! A failing step saves a screenshot, the page's text and its console (see `chopin_e2e::browser`).

use std::time::{Duration, Instant};

use chopin_e2e::browser::{artefacts, Driver, Page};
use chopin_e2e::{Backend, Launch, Server};
use chopin_fixtures::github::{FakeGitHub, Permission};

const SECOND: Duration = Duration::from_secs(1);

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
        mona.type_into("#repository", "octo/plans").await?;
        mona.click("#open-repository button").await?;
        mona.until_text("#repository-status", 10 * SECOND, |t| {
            t == "No documents yet."
        })
        .await
    })
    .await;
    let opened = Instant::now();
    mona.step("create a document", async {
        mona.type_into("#new-title", "Browser plan").await?;
        mona.click("#create-document button").await?;
        mona.until_text("#title", 10 * SECOND, |t| t == "Browser plan")
            .await?;
        mona.until_text("#connection", 10 * SECOND, |t| t == "Connected")
            .await?;
        mona.until_script(
            "return document.querySelector('.cm-content')?.getAttribute('contenteditable')",
            10 * SECOND,
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
        lisa.until_text("#connection", 10 * SECOND, |t| t == "Connected")
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
        lisa.until_script(EDITOR_TEXT, SECOND, |v| {
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
        lisa.until_script(CURSORS, SECOND, |v| v == &serde_json::json!(["mona"]))
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
        mona.until_script(EDITOR_TEXT, SECOND, |v| {
            v.as_str().is_some_and(|t| t.contains("And lisa"))
        })
        .await?;
        mona.until_script(CURSORS, SECOND, |v| v == &serde_json::json!(["lisa"]))
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
                .until_text("#read-only", 10 * SECOND, |t| {
                    t.contains("you cannot push to octo/plans")
                })
                .await?;
            hubot
                .until_script(
                    "return document.querySelector('.cm-content')?.getAttribute('contenteditable')",
                    10 * SECOND,
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

    // The server restarts on the same address: both pages reconnect and nothing is lost.
    let relaunch = launch.at(&server);
    let (status, _) = server.stop().await;
    assert!(status.success(), "the server stopped cleanly");
    for page in [&mona, &lisa] {
        page.step("show that it reconnects", async {
            page.until_text("#connection", 10 * SECOND, |t| t == "Reconnecting…")
                .await
        })
        .await;
    }
    let server = relaunch.start().await;
    for page in [&mona, &lisa] {
        page.step("reconnect after the restart", async {
            page.until_text("#connection", 20 * SECOND, |t| t == "Connected")
                .await?;
            page.until_script(EDITOR_TEXT, 5 * SECOND, |v| {
                v.as_str()
                    .is_some_and(|t| t.contains("Hello from mona") && t.contains("And lisa"))
            })
            .await
        })
        .await;
    }
    mona.step("type after the restart", async {
        mona.type_into(".cm-content", TO_THE_END).await?;
        mona.type_into(".cm-content", " again").await
    })
    .await;
    lisa.step("see it", async {
        lisa.until_script(EDITOR_TEXT, 2 * SECOND, |v| {
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
    let _ = artefacts(name);
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
