//! More than one process on one PostgreSQL (`PROCESSES=many`), on three release binaries:
//! each document tree is served by exactly one process at a time, the others answer a request
//! for it `503 served-elsewhere` with a `Retry-After`; after `kill -9` of the process serving a
//! document, another serves it within the lease period and nothing it acknowledged is lost; a
//! graceful stop hands its documents over at once, with no window.

use std::time::{Duration, Instant};

use chopin_e2e::{sign_in, sign_in_at, Launch, Server};
use chopin_fixtures::browser::BrowserSocket;
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::mcp::{call, connect, ok, text};
use serde_json::json;

/// The lease period the processes are given (`DOCUMENT_LEASE_MS`).
const LEASE_MS: u64 = 3_000;
/// The origin the balancer would give every process.
const ORIGIN: &str = "http://chopin.test";

async fn join(server: &Server, document: &str, cookie: &str) -> Result<BrowserSocket, String> {
    join_at(&server.host(), ORIGIN, document, cookie).await
}

/// A room socket through whatever listens at `host` (a server, or the balancer).
async fn join_at(
    host: &str,
    origin: &str,
    document: &str,
    cookie: &str,
) -> Result<BrowserSocket, String> {
    let stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| e.to_string())?;
    let mut socket = BrowserSocket::connect(
        stream,
        host,
        &format!("/api/documents/{document}/room"),
        Some(cookie),
        Some(origin),
    )
    .await
    .map_err(|e| format!("{e:?}"))?;
    tokio::time::timeout(
        Duration::from_secs(15),
        socket.next_of_type("session:hello"),
    )
    .await
    .map_err(|_| "no session:hello within 15 s".to_owned())?
    .map_err(|e| format!("{e:?}"))?;
    Ok(socket)
}

/// A Planner client attached to `document` through whatever listens at `host`, on `path`;
/// `Err` with why when the connection or the attach is refused.
async fn attach_at(
    host: &str,
    path: &str,
    token: &str,
    document: &str,
) -> Result<chopin_fixtures::agent::AgentClient, String> {
    let stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| e.to_string())?;
    let upgrade = chopin_fixtures::agent::Upgrade::new(host.to_owned(), Some(token)).path(path);
    let mut client = chopin_fixtures::agent::connect(stream, &upgrade)
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(15), client.attach(document, &[])).await {
        Ok(Ok(chopin_protocol::agent::ServerMessage::Attached(_))) => Ok(client),
        Ok(Ok(other)) => Err(format!("{other:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer to attach within 15 s".to_owned()),
    }
}

/// Sends `text` to Chat and waits for its ack: the seq it was given.
async fn say(socket: &mut BrowserSocket, text: &str) -> i64 {
    socket
        .send_json(&json!({ "type": "chat:send", "requestId": text, "text": text }))
        .await
        .unwrap();
    let ack = tokio::time::timeout(Duration::from_secs(15), socket.next_of_type("chat:ack"))
        .await
        .expect("chat:ack within 15 s")
        .expect("chat:ack");
    assert_eq!(ack["requestId"], text);
    ack["seq"].as_i64().expect("an ack names its seq")
}

/// Every Chat entry's text by seq (one page is enough here).
async fn history(socket: &mut BrowserSocket) -> Vec<(i64, String)> {
    socket
        .send_json(&json!({ "type": "chat:history", "limit": 100 }))
        .await
        .unwrap();
    let page = tokio::time::timeout(Duration::from_secs(15), socket.next_of_type("chat:history"))
        .await
        .expect("chat:history within 15 s")
        .expect("chat:history");
    page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["seq"].as_i64().unwrap(),
                e["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `GET /api/documents/{document}` on `server`: the status, the error code and `Retry-After`.
async fn ask(server: &Server, token: &str, document: &str) -> (u16, String, Option<String>) {
    let response = reqwest::Client::new()
        .get(server.url(&format!("/api/documents/{document}")))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    (
        status,
        body["error"].as_str().unwrap_or_default().to_owned(),
        retry_after,
    )
}

/// Which of `servers` serves `document`: exactly one answers 200, every other one refuses it
/// `503 served-elsewhere` with a `Retry-After`.
async fn served_by(servers: &[&Server], token: &str, document: &str) -> usize {
    let mut serving = Vec::new();
    for (n, server) in servers.iter().enumerate() {
        match ask(server, token, document).await {
            (200, _, _) => serving.push(n),
            (503, code, Some(after)) if code == "served-elsewhere" => {
                let after: u64 = after.parse().expect("Retry-After in seconds");
                assert!((1..=LEASE_MS / 1_000 + 1).contains(&after), "{after}");
            }
            other => panic!("process {n} answered {other:?} for {document}"),
        }
    }
    assert_eq!(serving.len(), 1, "exactly one process serves {document}");
    serving[0]
}

/// Asks `server` for `document` until it serves it: how long that took.
async fn until_served(server: &Server, token: &str, document: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        match ask(server, token, document).await {
            (200, _, _) => return started.elapsed(),
            (503, code, Some(_)) if code == "served-elsewhere" => {}
            other => panic!("{other:?} while waiting for {document}"),
        }
        assert!(
            started.elapsed() < within,
            "{document} was not served within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn each_document_is_served_by_one_process_and_by_another_after_a_crash_or_a_stop() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("hubot", 1003)
        .add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "hubot", Permission::Read);
    let token = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let launch = Launch::hosted(&github_url)
        .release()
        .env("DATABASE_URL", db.url.clone())
        .env("SESSION_ENCRYPTION_KEY", "7e".repeat(32))
        .env("APP_ORIGIN", ORIGIN)
        .env("PROCESSES", "many")
        .env("DOCUMENT_LEASE_MS", LEASE_MS.to_string());
    let a = launch.start().await;
    let b = launch.start().await;
    let c = launch.start().await;
    // A sign-in made through one process is good on every one.
    let mona = sign_in(&a, &github, "mona").await;
    let hubot = sign_in(&b, &github, "hubot").await;

    // A new document is served by the first process asked for it (the one the balancer
    // chooses), whichever made it; the others refuse it.
    let first = c.create_document(&token, "octo/plans", "First").await;
    let first = first["id"].as_str().unwrap().to_owned();
    let second = a.create_document(&token, "octo/plans", "Second").await;
    let second = second["id"].as_str().unwrap().to_owned();
    assert_eq!(served_by(&[&a, &b, &c], &token, &first).await, 0);
    assert_eq!(served_by(&[&b, &a, &c], &token, &second).await, 0);
    // A child is served with its root.
    let child = reqwest::Client::new()
        .post(c.url(&format!("/api/documents/{first}/children")))
        .bearer_auth(&token)
        .json(&json!({ "title": "Child" }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        child.status(),
        503,
        "a child is made where its root is served"
    );
    let child = reqwest::Client::new()
        .post(a.url(&format!("/api/documents/{first}/children")))
        .bearer_auth(&token)
        .json(&json!({ "title": "Child" }))
        .send()
        .await
        .unwrap();
    assert_eq!(child.status(), 201);
    let child: serde_json::Value = child.json().await.unwrap();
    let child = child["id"].as_str().unwrap().to_owned();
    assert_eq!(served_by(&[&a, &b, &c], &token, &child).await, 0);

    // A creation names no document, so its retry may reach any process: the key, kept in the
    // database, answers the document the first call made there.
    let keyed = json!({"repository": "octo/plans", "title": "Keyed", "idempotencyKey": "k-1"});
    let made = ok(call(
        &connect(&c.url("/mcp"), &token).await,
        "create_document",
        keyed.clone(),
    )
    .await);
    let again = ok(call(
        &connect(&b.url("/mcp"), &token).await,
        "create_document",
        keyed,
    )
    .await);
    assert_eq!(
        again["id"], made["id"],
        "the retry on b answers c's document"
    );

    // Sockets: opened where the document is served, refused elsewhere.
    let mut room = join(&a, &first, &mona).await.expect("the room opens on a");
    assert!(join(&c, &first, &mona).await.is_err(), "refused on c");
    let mut acked = Vec::new();
    for n in 0..5 {
        let text = format!("line {n}");
        acked.push((say(&mut room, &text).await, text));
    }
    let ready: serde_json::Value = reqwest::get(a.url("/readyz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["processes"], "many");
    assert_eq!(ready["documents_served"], 1);

    // kill -9 of the process serving the first document: another serves it within the lease.
    let log = a.crash().await;
    assert!(!log.contains(token.as_str()), "a token was logged");
    let waited = until_served(&b, &token, &first, Duration::from_millis(LEASE_MS + 2_000)).await;
    eprintln!("served again {waited:?} after the crash");
    let gone = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match room.recv_json().await {
                Ok(chopin_fixtures::browser::BrowserEvent::Closed { .. }) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(gone.is_ok(), "the room on the crashed process is gone");
    let mut room = join(&b, &first, &hubot).await.expect("the room opens on b");
    let stored = history(&mut room).await;
    for line in &acked {
        assert!(
            stored.contains(line),
            "acknowledged {line:?} after the crash: {stored:?}"
        );
    }
    // A line sent again after the crash (its ack lost with the process) is answered by the
    // process serving the document now with the seq it was saved at, and saved once (MSG-16).
    let mut mona_room = join(&b, &first, &mona).await.expect("mona's room on b");
    let (seq, text) = acked.last().unwrap().clone();
    assert_eq!(say(&mut mona_room, &text).await, seq, "the first ack's seq");
    let stored = history(&mut room).await;
    assert_eq!(
        stored.iter().filter(|(_, t)| *t == text).count(),
        1,
        "{text:?} saved once: {stored:?}"
    );
    let _ = mona_room.close().await;
    assert_eq!(
        served_by(&[&b, &c], &token, &child).await,
        0,
        "its child moved with it"
    );
    let _ = room.close().await;

    // A sign-out made through one process holds on the others within the recheck bound.
    let session = |server: &Server| {
        reqwest::Client::new()
            .get(server.url("/api/session"))
            .header("cookie", hubot.clone())
            .send()
    };
    assert_eq!(session(&b).await.unwrap().status(), 200, "b knows hubot");
    let out = reqwest::Client::new()
        .post(c.url("/auth/logout"))
        .header("cookie", hubot.clone())
        .header("origin", ORIGIN)
        .send()
        .await
        .unwrap();
    assert!(
        out.status().is_success() || out.status().is_redirection(),
        "{}",
        out.status()
    );
    let signed_out = Instant::now();
    while session(&b).await.unwrap().status() == 200 {
        assert!(
            signed_out.elapsed() < Duration::from_millis(2_500),
            "b still takes hubot's cookie {:?} after the sign-out on c",
            signed_out.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A graceful stop hands every document over: the next process serves them at once.
    let (status, log) = b.stop().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("document leases handed back"), "{log}");
    for document in [&first, &second] {
        let waited = until_served(&c, &token, document, Duration::from_millis(LEASE_MS)).await;
        assert!(
            waited < Duration::from_millis(LEASE_MS / 2),
            "{document} was served {waited:?} after the stop: it waited for the expiry"
        );
    }
    let mut room = join(&c, &first, &mona).await.expect("the room opens on c");
    let stored = history(&mut room).await;
    for line in &acked {
        assert!(
            stored.contains(line),
            "acknowledged {line:?} after the stop"
        );
    }
    let _ = room.close().await;
    let (status, log) = c.stop().await;
    assert!(status.success(), "{log}");
    pg.drop_database(&db).await.unwrap();
}

#[tokio::test]
async fn an_mcp_call_naming_a_document_is_carried_to_the_process_that_serves_it() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let token = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    // No PROCESS_URL: each process is reached at the port it bound, on this machine.
    let launch = Launch::hosted(&github_url)
        .release()
        .env("DATABASE_URL", db.url.clone())
        .env("SESSION_ENCRYPTION_KEY", "7e".repeat(32))
        .env("APP_ORIGIN", ORIGIN)
        .env("PROCESSES", "many")
        .env("DOCUMENT_LEASE_MS", LEASE_MS.to_string());
    let a = launch.start().await;
    let b = launch.start().await;
    let c = launch.start().await;
    let mona = sign_in(&b, &github, "mona").await;
    let made = a.create_document(&token, "octo/plans", "Carried").await;
    let id = made["id"].as_str().unwrap().to_owned();
    // b serves it (the balancer sent its first request there).
    assert_eq!(served_by(&[&b, &a, &c], &token, &id).await, 0);

    // MCP clients are not balanced by document: calls reach a and c, and are answered by b.
    let on_a = connect(&a.url("/mcp"), &token).await;
    let on_c = connect(&c.url("/mcp"), &token).await;
    let read = ok(call(&on_a, "read_document", json!({ "document": id })).await);
    let revision = read["revision"].as_u64().expect("a revision");
    let update = json!({ "document": id, "planRevision": revision,
                         "source": "# Carried\n\nWritten through c.\n",
                         "idempotencyKey": "carried-1" });
    let applied = ok(call(&on_c, "update_document", update.clone()).await);
    assert_eq!(applied["planRevision"], revision + 1);
    assert_eq!(
        ok(call(&on_a, "update_document", update).await),
        applied,
        "a replay through another process is the same answer"
    );
    let page = text(&call(&on_a, "read_document", json!({ "document": id })).await);
    assert!(page.contains("Written through c."), "{page}");
    // A Planner client attached on b, where the document is served.
    let mut planner = attach_at(&b.host(), "/api/v1/agent", &token, &id)
        .await
        .expect("the Planner attaches on b");
    let invoked = ok(call(
        &on_c,
        "invoke_planner",
        json!({ "document": id, "instruction": "Carried instruction", "idempotencyKey": "inv-1" }),
    )
    .await);
    let seq = invoked["seq"].as_i64().expect("the instruction's seq");
    // Posted in the document's Chat, on the process that serves it; the lease never moved.
    assert_eq!(served_by(&[&b, &a, &c], &token, &id).await, 0);
    let mut room = join(&b, &id, &mona).await.expect("the room opens on b");
    let stored = history(&mut room).await;
    assert!(
        stored.contains(&(seq, "Carried instruction".to_owned())),
        "{stored:?}"
    );
    let _ = room.close().await;
    let _ = planner.close().await;

    // AO-03 counts the processes together: a Planner attaches on c, which mona's browser never
    // reached (she signed in through b); c restores her sign-in from the store.
    let elsewhere = a.create_document(&token, "octo/plans", "Elsewhere").await;
    let elsewhere = elsewhere["id"].as_str().unwrap().to_owned();
    assert_eq!(served_by(&[&c, &a, &b], &token, &elsewhere).await, 0);
    let mut planner = attach_at(&c.host(), "/api/v1/agent", &token, &elsewhere)
        .await
        .expect("the Planner attaches on c, where mona never signed in");
    let _ = planner.close().await;

    // A call already carried once is never carried again: a process that does not serve the
    // document answers it itself.
    let again = reqwest::Client::new()
        .post(a.url("/mcp"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-chopin-carried", "1")
        .body(
            json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": { "name": "read_document", "arguments": { "document": id } } })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(
        again["result"]["structuredContent"]["code"], "served-elsewhere",
        "{again}"
    );

    let _ = on_a.cancel().await;
    let _ = on_c.cancel().await;
    for server in [a, b, c] {
        let (status, log) = server.stop().await;
        assert!(status.success(), "{log}");
        assert!(!log.contains(token.as_str()), "a token was logged");
    }
    pg.drop_database(&db).await.unwrap();
}

#[tokio::test]
async fn more_than_one_process_on_sqlite_is_refused_at_startup() {
    let home = tempfile::tempdir().unwrap();
    let (status, _, stderr) = Launch::default()
        .release()
        .env("HOME", home.path().to_string_lossy())
        .env("PROCESSES", "many")
        .run_to_exit()
        .await;
    assert!(!status.success());
    assert!(stderr.contains("PROCESSES"), "{stderr}");
    assert!(stderr.contains("needs PostgreSQL"), "{stderr}");
}

/// nginx in front of `servers`, configured as `docs/self-hosting.md` says: its "More than one
/// process" section's configuration, with this machine's addresses, inside a minimal `nginx.conf`
/// that also logs each request's upstream statuses. It runs as one process (no master and
/// workers), so killing it leaves nothing behind.
struct Balancer {
    child: tokio::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Balancer {
    async fn start(reserved: std::net::TcpListener, servers: &[&Server]) -> Balancer {
        let port = reserved.local_addr().unwrap().port();
        let guide = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/self-hosting.md"),
        )
        .unwrap();
        let section = &guide[guide
            .find("## More than one process")
            .expect("the guide has a More than one process section")..];
        let start = section.find("```nginx\n").expect("an nginx block") + "```nginx\n".len();
        let block = &section[start..start + section[start..].find("```").unwrap()];
        let mut config = String::new();
        let mut placed = 0;
        for line in block.lines() {
            if let Some(rest) = line.trim_start().strip_prefix("server 10.0.0.") {
                // The guide's address, this machine's process; the rest of the line as it is.
                let after = rest.find([' ', ';']).unwrap_or(rest.len());
                if let Some(server) = servers.get(placed) {
                    config.push_str(&format!("    server {}{}\n", server.host(), &rest[after..]));
                }
                placed += 1;
            } else if line.trim() == "listen 80;" {
                config.push_str(&format!("    listen 127.0.0.1:{port};\n"));
            } else {
                config.push_str(line);
                config.push('\n');
            }
        }
        assert_eq!(
            placed,
            servers.len(),
            "the guide's block lists its processes as `server 10.0.0.N:…` lines"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let whole = format!(
            "master_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
               log_format upstreams '$request_method $uri | $upstream_status';\n\
               access_log {d}/access.log upstreams;\n{config}}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), whole).unwrap();
        // Its workers may run as another user: they write their temporary files here.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("nginx is installed (scripts/test installs nginx-light)");
        drop(reserved);
        let child = tokio::process::Command::new(nginx)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .kill_on_drop(true)
            .spawn()
            .expect("nginx starts");
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nginx did not listen within 10 s: {}",
                std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Balancer { child, port, dir }
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Each logged request's upstream statuses (`503, 200` for a request refused by one process
    /// and then served by the next).
    fn upstream_statuses(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        // One process (`master_process off`): nothing outlives it.
        let _ = self.child.start_kill();
    }
}

/// A port for the balancer, held (bound, not listening for anyone) until nginx takes it, so the
/// servers started meanwhile on `PORT=0` cannot be given it.
fn reserve_port() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap()
}

#[tokio::test]
async fn behind_nginx_hashing_on_the_document_id_nothing_is_refused_until_a_process_dies() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let token = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let reserved = reserve_port();
    let origin = format!("http://127.0.0.1:{}", reserved.local_addr().unwrap().port());
    let launch = Launch::hosted(&github_url)
        .release()
        .env("DATABASE_URL", db.url.clone())
        .env("SESSION_ENCRYPTION_KEY", "7e".repeat(32))
        .env("APP_ORIGIN", origin.clone())
        .env("PROCESSES", "many")
        .env("DOCUMENT_LEASE_MS", LEASE_MS.to_string())
        // A Planner client that leaves holds its document one second, not two minutes.
        .env("PLANNER_ATTACH_GRACE_MS", "1000");
    let mut servers = vec![
        launch.start().await,
        launch.start().await,
        launch.start().await,
    ];
    let balancer = Balancer::start(reserved, &servers.iter().collect::<Vec<_>>()).await;
    assert_eq!(balancer.origin(), origin);
    let mona = sign_in_at(&origin, &github, "mona").await;
    let http = reqwest::Client::new();

    // Documents made through the balancer, each then read through it a few times.
    let mut documents = Vec::new();
    for n in 0..12 {
        let made = http
            .post(format!("{origin}/api/repositories/octo/plans/documents"))
            .bearer_auth(&token)
            .json(&json!({ "title": format!("Balanced {n}") }))
            .send()
            .await
            .unwrap();
        assert_eq!(made.status(), 201);
        let made: serde_json::Value = made.json().await.unwrap();
        documents.push(made["id"].as_str().unwrap().to_owned());
    }
    for _ in 0..3 {
        for document in &documents {
            let read = http
                .get(format!("{origin}/api/documents/{document}"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            assert_eq!(read.status(), 200);
        }
    }
    // Each is served by the process the hash chose, and they are spread over the processes.
    let mut serving = Vec::new();
    for document in &documents {
        serving.push(served_by(&servers.iter().collect::<Vec<_>>(), &token, document).await);
    }
    let used: std::collections::BTreeSet<usize> = serving.iter().copied().collect();
    assert!(
        used.len() >= 2,
        "12 documents all on one process: {serving:?}"
    );
    // A page on every document, through the balancer, each saying two lines; and a Planner
    // client on every document of the process to be killed and on one document of another,
    // through the balancer at the path a Planner credential names (`?document=`), so nginx
    // hashes it with the document's other requests.
    let mut rooms = Vec::new();
    let mut acked: Vec<Vec<(i64, String)>> = Vec::new();
    for (n, document) in documents.iter().enumerate() {
        let mut room = join_at(&balancer.host(), &origin, document, &mona)
            .await
            .expect("the room opens through the balancer");
        let mut said = Vec::new();
        for line in 0..2 {
            let text = format!("balanced line {line} of document {n}");
            said.push((say(&mut room, &text).await, text));
        }
        rooms.push(room);
        acked.push(said);
    }
    let agent_path = |document: &str| format!("/api/v1/agent?document={document}");
    let dying = serving[0];
    let elsewhere = serving.iter().position(|p| *p != dying).expect("spread");
    let mut planners = Vec::new();
    for (n, document) in documents.iter().enumerate() {
        if serving[n] == dying || n == elsewhere {
            let planner = attach_at(&balancer.host(), &agent_path(document), &token, document)
                .await
                .expect("the Planner attaches through the balancer");
            planners.push((n, planner));
        }
    }
    // The steady state: no request through the balancer met a refusal.
    let refused: Vec<String> = balancer
        .upstream_statuses()
        .into_iter()
        // The statuses alone ("503, 200" when nginx went on to the next process): a
        // document's id may hold the digits 503.
        .filter(|l| l.rsplit(" | ").next().is_some_and(|s| s.contains("503")))
        .collect();
    assert!(
        refused.is_empty(),
        "refused in the steady state: {refused:?}"
    );

    // kill -9 of the process serving the first document: through the balancer its documents
    // are served again within the lease, their Planner clients attach again and their rooms
    // reconnect with every acknowledged line; the other documents' pages and Planners go on.
    let dead = servers.remove(dying);
    let dead_port = dead
        .host()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let log = dead.crash().await;
    assert!(!log.contains(token.as_str()), "a token was logged");
    let crashed = Instant::now();
    let first = documents[0].clone();
    loop {
        let read = http
            .get(format!("{origin}/api/documents/{first}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        match read.status().as_u16() {
            200 => break,
            503 | 502 => {}
            other => panic!("{other} while the first document moved"),
        }
        assert!(
            crashed.elapsed() < Duration::from_millis(LEASE_MS + 2_000),
            "not served again within the lease + 2 s: {:?}\n{}",
            balancer
                .upstream_statuses()
                .iter()
                .rev()
                .take(8)
                .collect::<Vec<_>>(),
            std::fs::read_to_string(balancer.dir.path().join("error.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "served again through nginx {:?} after the crash",
        crashed.elapsed()
    );
    // Each Planner client's link to the killed process died with it; it connects again
    // through the balancer, as a client does, until the process now serving its document
    // takes it. Its person's pages have not come back yet: that process restores her browser
    // sign-in, made through another process, from the store.
    let mut first_planner = None;
    for (n, mut planner) in planners {
        let document = &documents[n];
        if serving[n] != dying {
            // Not on the killed process: its link is still open.
            let closed = tokio::time::timeout(Duration::from_millis(300), async {
                while let Ok(chopin_fixtures::agent::Event::Message(_)) = planner.recv().await {}
            })
            .await;
            assert!(
                closed.is_err(),
                "the Planner of document {n}, on a live process, lost its link"
            );
            continue;
        }
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            while let Ok(chopin_fixtures::agent::Event::Message(_)) = planner.recv().await {}
        })
        .await;
        assert!(ended.is_ok(), "the link to the killed process ends");
        let planner = loop {
            match attach_at(&balancer.host(), &agent_path(document), &token, document).await {
                Ok(planner) => break planner,
                Err(why) => assert!(
                    crashed.elapsed() < Duration::from_millis(LEASE_MS + 4_000),
                    "the Planner of document {n} did not attach again within the lease + 4 s: {why}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        eprintln!(
            "the Planner of document {n} attached again through nginx {:?} after the crash",
            crashed.elapsed()
        );
        if n == 0 {
            first_planner = Some(planner);
        }
    }
    let planner = first_planner.expect("the first document's Planner");
    // Every page: those of the killed process reconnect through the balancer with every
    // acknowledged line; the others were never cut, and Chat goes on in each.
    let mut room = None;
    for (n, (document, mut page)) in documents.iter().zip(rooms).enumerate() {
        if serving[n] == dying {
            let _ = page.close().await;
            page = join_at(&balancer.host(), &origin, document, &mona)
                .await
                .expect("the room opens again through the balancer");
        }
        let stored = history(&mut page).await;
        for line in &acked[n] {
            assert!(
                stored.contains(line),
                "document {n}: acknowledged {line:?} lost after the crash"
            );
        }
        say(&mut page, &format!("after the crash, document {n}")).await;
        if n == 0 {
            room = Some(page);
        } else {
            let _ = page.close().await;
        }
    }
    let mut room = room.expect("the first document's page");
    eprintln!(
        "{} documents of the killed process served again, every page and Planner back, {:?} after the crash",
        serving.iter().filter(|p| **p == dying).count(),
        crashed.elapsed()
    );

    // The killed process comes back on its port. Once nothing uses the first document on the
    // process that took it over (no socket, no Planner, for three lease periods; requests
    // passed on to it by nginx meanwhile do not count), that process gives it back, and the
    // balancer's first choice serves it again: no request through nginx is refused.
    let back = launch.clone().env("PORT", dead_port).start().await;
    servers.push(back);
    let _ = room.close().await;
    drop(planner);
    let quiet_from = Instant::now();
    let on_first_choice = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = balancer.upstream_statuses().len();
        let read = http
            .get(format!("{origin}/api/documents/{first}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 200);
        let statuses = balancer.upstream_statuses();
        let line = statuses.get(before).cloned().unwrap_or_default();
        if line.ends_with("| 200") {
            break line;
        }
        assert!(
            quiet_from.elapsed() < Duration::from_millis(4 * LEASE_MS + 3_000),
            "the first choice does not serve the first document again: {line}"
        );
    };
    assert!(
        quiet_from.elapsed() >= Duration::from_millis(3 * LEASE_MS),
        "given back {:?} after it went quiet: {on_first_choice}",
        quiet_from.elapsed()
    );
    eprintln!(
        "served by the balancer's first choice again {:?} after it went quiet",
        quiet_from.elapsed()
    );
    for server in servers {
        let (status, log) = server.stop().await;
        assert!(status.success(), "{log}");
    }
    drop(balancer);
    pg.drop_database(&db).await.unwrap();
}
