//! The `chopin` binary as an operator runs it: defaults, refusals of bad settings, `--help`,
//! graceful shutdown and data kept across restarts.

use chopin_e2e::{get, Launch};

fn readyz_epoch(body: &str) -> i64 {
    let v: serde_json::Value = serde_json::from_str(body).expect("readyz is JSON");
    v["writer_epoch"]
        .as_i64()
        .unwrap_or_else(|| panic!("no writer_epoch in {body}"))
}

/// With no environment at all (only HOME, which says where the user's state directory is), the
/// server starts on the embedded SQLite default, answers /healthz, stops on SIGTERM, and the next
/// start finds what the first one wrote.
#[tokio::test]
async fn no_environment_starts_on_embedded_sqlite_and_keeps_records_across_restart() {
    let home = tempfile::tempdir().unwrap();
    let launch = Launch::default()
        .env("HOME", home.path().to_string_lossy())
        .arg("--port")
        .arg("0");

    let first = launch.start().await;
    assert!(
        first.base_url.starts_with("http://127.0.0.1:"),
        "{}",
        first.banner
    );
    let db = home.path().join(".local/state/chopin/chopin.db");
    assert!(
        first.banner.contains(&db.display().to_string()),
        "banner names the data file: {}",
        first.banner
    );
    assert!(db.exists(), "embedded database created at {}", db.display());

    let (status, body) = get(&first.url("/healthz")).await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    let (status, body) = get(&first.url("/readyz")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""store":"sqlite""#), "{body}");
    let epoch_before = readyz_epoch(&body);

    let (exit, log) = first.stop().await;
    assert!(exit.success(), "graceful shutdown exits 0: {exit:?}\n{log}");
    assert!(log.contains("SIGTERM received"), "{log}");

    // The lease row the first process wrote is still there: the second acquisition is a later
    // epoch of the same record. (A graceful stop released the lease, so this start is immediate.)
    let second = launch.start().await;
    let (status, body) = get(&second.url("/readyz")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(readyz_epoch(&body), epoch_before + 1, "{body}");
    assert!(second.stop().await.0.success());
}

/// The same on PostgreSQL: `DATABASE_URL=postgres://…` is used, migrated at startup, and what
/// one process wrote is there for the next.
#[tokio::test]
async fn postgres_database_url_serves_and_keeps_records_across_restart() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.expect("a fresh database");
    let launch = Launch::default()
        .env("DATABASE_URL", db.url.clone())
        .arg("--port=0");

    let first = launch.start().await;
    assert!(
        first.banner.contains("PostgreSQL at 127.0.0.1"),
        "{}",
        first.banner
    );
    assert!(
        !first.banner.contains("postgres://"),
        "the URL is never printed: {}",
        first.banner
    );
    let (status, body) = get(&first.url("/readyz")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""store":"postgres""#), "{body}");
    let epoch_before = readyz_epoch(&body);
    let (exit, log) = first.stop().await;
    assert!(exit.success(), "{log}");
    assert!(
        !log.contains("postgres://"),
        "the URL is never logged: {log}"
    );

    let second = launch.start().await;
    let (_, body) = get(&second.url("/readyz")).await;
    assert_eq!(readyz_epoch(&body), epoch_before + 1, "{body}");
    assert!(second.stop().await.0.success());
    pg.drop_database(&db).await.expect("drop the test database");
}

#[tokio::test]
async fn a_bad_timer_value_stops_startup_naming_the_variable() {
    let home = tempfile::tempdir().unwrap();
    let (status, stdout, stderr) = Launch::default()
        .env("HOME", home.path().to_string_lossy())
        .env("PLANNER_ATTACH_GRACE_MS", "abc")
        .run_to_exit()
        .await;
    assert!(!status.success(), "exits non-zero");
    assert_eq!(status.code(), Some(2));
    assert!(
        stderr.contains("PLANNER_ATTACH_GRACE_MS=\"abc\""),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("milliseconds"),
        "says what it accepts: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stdout.is_empty(), "nothing was served: {stdout}");
    assert!(
        !home.path().join(".local/state/chopin/chopin.db").exists(),
        "no database made"
    );
}

#[tokio::test]
async fn a_bad_database_url_is_refused_without_echoing_it() {
    let (status, _, stderr) = Launch::default()
        .env("DATABASE_URL", "mysql://user:hunter2@db/chopin")
        .run_to_exit()
        .await;
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("DATABASE_URL"), "{stderr}");
    assert!(
        !stderr.contains("hunter2"),
        "the URL is never printed: {stderr}"
    );
}

#[tokio::test]
async fn help_explains_every_setting() {
    let (status, stdout, _) = Launch::default().arg("--help").run_to_exit().await;
    assert!(status.success());
    // Help text wraps at the terminal width; compare with whitespace collapsed.
    let stdout = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for var in [
        "SERVER_HOST",
        "PORT",
        "DATABASE_URL",
        "CHOPIN_DATA_DIR",
        "AUTH_MODE",
        "HARNESS",
        "HARNESS_AUTH",
        "AGENT",
        "PLANNER_ATTACH_GRACE_MS",
        "AGENT_CONNECTION_TIMEOUT_MS",
        "HANDOVER_PLANNER_WINDOW_MS",
        "PLANNER_PATIENCE_MS",
        "CHAT_ATTACHMENT_MAX_BYTES",
        "CHAT_ATTACHMENT_MAX_COUNT",
        "CHAT_ATTACHMENT_MAX_TOTAL_BYTES",
        "CHOPIN_LOG_FORMAT",
    ] {
        assert!(
            stdout.contains(&format!("[env: {var}")),
            "--help names {var}:\n{stdout}"
        );
    }
}

#[tokio::test]
async fn json_logs_on_request() {
    let home = tempfile::tempdir().unwrap();
    let server = Launch::default()
        .env("HOME", home.path().to_string_lossy())
        .env("CHOPIN_LOG_FORMAT", "json")
        .arg("--port=0")
        .start()
        .await;
    let (exit, log) = server.stop().await;
    assert!(exit.success(), "{log}");
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 2, "{log}");
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string(), "{line}");
    }
}

/// With `--port 0` and no `APP_ORIGIN`, the origin the server derives names the port it bound,
/// so sign-in's callback URL points back at it.
#[tokio::test]
async fn a_system_chosen_port_is_the_derived_origins_port() {
    let home = tempfile::tempdir().unwrap();
    let server = Launch::default()
        .env("HOME", home.path().to_string_lossy())
        .env("GITHUB_APP_CLIENT_ID", "an-id")
        .env("GITHUB_APP_CLIENT_SECRET", "a-secret")
        .arg("--port=0")
        .start()
        .await;
    let port = server.base_url.rsplit(':').next().unwrap().to_owned();
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(server.url("/auth/github"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 302);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        location.contains(&format!(
            "redirect_uri=http%3A%2F%2F127.0.0.1%3A{port}%2Fauth%2Fgithub%2Fcallback"
        )),
        "{location}"
    );
    assert!(server.stop().await.0.success());
}
