//! The pages over HTTP, against the built binary: which page each URL is, the answers for what
//! is not there, the security headers, the embedded assets and their caching — and that the
//! committed build is what the sources and the lockfile give (rebuilt here with esbuild).

use std::path::PathBuf;

use chopin_e2e::{sign_in, Launch};
use chopin_fixtures::github::{FakeGitHub, Permission};
use reqwest::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};

fn meta<'a>(html: &'a str, name: &str) -> Option<&'a str> {
    let tag = format!("<meta name=\"chopin-{name}\" content=\"");
    let start = html.find(&tag)? + tag.len();
    let end = html[start..].find('"')?;
    Some(&html[start..start + end])
}

fn assert_page_headers(response: &reqwest::Response) {
    let h = response.headers();
    let csp = h[CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("script-src 'self' 'unsafe-inline'"), "{csp}");
    assert_eq!(h[X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(h[REFERRER_POLICY], "same-origin");
    assert_eq!(h[X_FRAME_OPTIONS], "DENY");
}

#[tokio::test]
async fn every_page_url_answers_its_page_with_the_security_headers_and_nothing_is_an_empty_404() {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("eve", 1666)
        .add_repo("octo", "plans")
        .add_repo("octo", "secret");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "secret", "mona", Permission::Write);
    github.install_app("octo");
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = Launch::hosted(&github_url)
        .env("HOME", home.path().to_string_lossy())
        .start()
        .await;
    let cookie = sign_in(&server, &github, "mona").await;
    let eve = sign_in(&server, &github, "eve").await;
    let root = server
        .create_document(&mona, "octo/plans", "Root plan")
        .await;
    let secret = server.create_document(&mona, "octo/secret", "Hidden").await;
    let child: serde_json::Value = reqwest::Client::new()
        .post(server.url(&format!(
            "/api/documents/{}/children",
            root["id"].as_str().unwrap()
        )))
        .bearer_auth(&mona)
        .json(&serde_json::json!({ "title": "Child part" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let get = |path: String, cookie: Option<&str>| {
        let mut r = http.get(server.url(&path));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        r.send()
    };

    // `/`: signed out, the sign-in page; signed in, who you are. Both name the server.
    let signed_out = get("/".into(), None).await.unwrap();
    assert_eq!(signed_out.status(), 200);
    assert_page_headers(&signed_out);
    assert_eq!(
        signed_out.headers()[CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    let html = signed_out.text().await.unwrap();
    assert_eq!(meta(&html, "page"), Some("home"));
    assert_eq!(meta(&html, "login"), None);
    assert_eq!(meta(&html, "database"), Some("sqlite"));
    assert_eq!(meta(&html, "harness"), Some("remote"));
    assert!(!html.contains("<script>"), "no inline script: {html}");
    let html = get("/".into(), Some(&cookie))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(meta(&html, "login"), Some("mona"));

    // Every document URL the server hands out opens its document's page: the root's, the
    // child's nested URL, and the child's own.
    for (url, doc) in [
        (root["url"].as_str().unwrap(), &root),
        (child["url"].as_str().unwrap(), &child),
        (
            &*format!("/documents/octo/plans/{}", child["slug"].as_str().unwrap()),
            &child,
        ),
    ] {
        let response = get(url.to_owned(), Some(&cookie)).await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        assert_page_headers(&response);
        let html = response.text().await.unwrap();
        assert_eq!(meta(&html, "page"), Some("document"), "{url}");
        assert_eq!(meta(&html, "document"), doc["id"].as_str(), "{url}");
    }
    // Signed out, a document page asks to sign in and names nothing of the document.
    let html = get(root["url"].as_str().unwrap().into(), None)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(meta(&html, "page"), Some("document"));
    assert_eq!(meta(&html, "document"), None);
    // A missing document and one in a repository the person cannot read answer alike: 404 and
    // a page that says so.
    for (path, who) in [
        ("/documents/octo/plans/no-such-plan".to_owned(), &cookie),
        (secret["url"].as_str().unwrap().to_owned(), &eve),
        (
            "/documents/octo/plans/root-plan/no-such-child".to_owned(),
            &cookie,
        ),
    ] {
        let response = get(path.clone(), Some(who)).await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
        assert_page_headers(&response);
        let html = response.text().await.unwrap();
        assert_eq!(meta(&html, "page"), Some("not-found"), "{path}");
        assert_eq!(meta(&html, "document"), None, "{path}");
        assert!(meta(&html, "missing").unwrap().contains("No such document"));
    }
    // GitHub down: the document page says so with 503 and the server's words, not a bare
    // JSON body (the access answer is cached 30 s, so a document nobody asked about yet).
    github.set_outage(true);
    let response = get(secret["url"].as_str().unwrap().into(), Some(&cookie))
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_page_headers(&response);
    let html = response.text().await.unwrap();
    assert_eq!(meta(&html, "page"), Some("error"), "{html}");
    assert!(
        meta(&html, "missing").is_some_and(|m| !m.is_empty()),
        "{html}"
    );
    github.set_outage(false);

    // Any other path: a page for a browser, JSON under /api/. The page's top bar says what
    // every page says of the server, and who is signed in.
    let response = get("/nowhere/at/all".into(), Some(&cookie)).await.unwrap();
    assert_eq!(response.status(), 404);
    assert_page_headers(&response);
    let html = response.text().await.unwrap();
    assert_eq!(meta(&html, "page"), Some("not-found"));
    assert_eq!(meta(&html, "database"), Some("sqlite"), "{html}");
    assert_eq!(meta(&html, "harness"), Some("remote"), "{html}");
    assert_eq!(meta(&html, "login"), Some("mona"), "{html}");
    let response = get("/assets/no-such-file.js".into(), None).await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(
        meta(&response.text().await.unwrap(), "harness"),
        Some("remote")
    );
    let response = get("/api/nowhere".into(), None).await.unwrap();
    assert_eq!(response.status(), 404);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "not-found", "{body}");

    // The repository's documents, for its page.
    let listed: serde_json::Value = get(
        "/api/repositories/octo/plans/documents".into(),
        Some(&cookie),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let docs = listed["documents"].as_array().unwrap();
    assert_eq!(docs.len(), 2, "{listed}");
    assert_eq!(docs[1]["parentId"], root["id"], "{listed}");
    assert_eq!(docs[1]["url"], child["url"], "{listed}");
    let hidden = get("/api/repositories/octo/secret/documents".into(), Some(&eve))
        .await
        .unwrap();
    assert_eq!(hidden.status(), 404);

    // The repositories each person reaches through the App, for the start page.
    for (who, expected) in [
        (&cookie, serde_json::json!(["octo/plans", "octo/secret"])),
        (&eve, serde_json::json!([])),
    ] {
        let listed: serde_json::Value = get("/api/repositories".into(), Some(who))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed["repositories"], expected, "{listed}");
        assert_eq!(listed["more"], false, "{listed}");
    }
    assert_eq!(
        get("/api/repositories".into(), None)
            .await
            .unwrap()
            .status(),
        401
    );

    // The assets the page links: cached for good under their hashed names, with an ETag.
    let script = html.find("src=\"/assets/").map(|at| {
        let from = at + "src=\"".len();
        let end = html[from..].find('"').unwrap();
        html[from..from + end].to_owned()
    });
    let script = script.expect("the page links its script");
    let response = get(script.clone(), None).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()[CACHE_CONTROL],
        "public, max-age=31536000, immutable"
    );
    assert_eq!(
        response.headers()[CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    let plain = response.headers()[ETAG].clone();
    assert!(response.headers().get("content-encoding").is_none());
    let whole = response.bytes().await.unwrap();
    // A browser that takes gzip gets the build's gzipped copy: the same script, fewer bytes.
    let zipped = http
        .get(server.url(&script))
        .header("accept-encoding", "gzip, deflate, br")
        .send()
        .await
        .unwrap();
    assert_eq!(zipped.status(), 200);
    assert_eq!(zipped.headers()["content-encoding"], "gzip");
    assert_eq!(zipped.headers()["vary"], "accept-encoding");
    let packed = zipped.bytes().await.unwrap();
    assert!(
        packed.len() * 2 < whole.len(),
        "{} of {}",
        packed.len(),
        whole.len()
    );
    let mut unpacked = Vec::new();
    {
        use std::io::Read;
        let mut gz = std::process::Command::new("gzip")
            .args(["-d", "-c"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        gz.stdin.take().unwrap().write_all(&packed).unwrap();
        gz.stdout
            .take()
            .unwrap()
            .read_to_end(&mut unpacked)
            .unwrap();
        gz.wait().unwrap();
    }
    assert_eq!(
        unpacked,
        whole.to_vec(),
        "the gzipped copy is the same script"
    );
    assert_eq!(
        get(format!("{script}.gz"), None).await.unwrap().status(),
        404,
        "the copies are not assets of their own"
    );
    let etag = plain;
    let again = http
        .get(server.url(&script))
        .header(IF_NONE_MATCH, etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(
        get("/assets/manifest.json".into(), None)
            .await
            .unwrap()
            .status(),
        404
    );
    server.stop().await;
}

/// The committed build is the build of the committed sources with the locked packages: rebuilt
/// into a temporary folder, every file is the same bytes (the gzipped copies too). Also prints
/// what a document page downloads, gzipped (budget: 350 KiB).
#[tokio::test]
async fn the_committed_pages_are_what_the_sources_and_the_lockfile_build() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let web = root.join("web");
    assert!(
        web.join("node_modules/esbuild").exists(),
        "the web pages' packages are missing: run `npm ci --prefix web` (scripts/test does)"
    );
    let out = tempfile::tempdir().unwrap();
    let built = tokio::process::Command::new("node")
        .arg(web.join("build.mjs"))
        .arg(out.path())
        .current_dir(&web)
        .output()
        .await
        .expect("node runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let committed = root.join("server/web-dist");
    let names = |dir: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(out.path()),
        names(&committed),
        "server/web-dist differs from a fresh build: run `node web/build.mjs` and commit it"
    );
    let mut gzipped = 0;
    for name in names(&committed) {
        let fresh = std::fs::read(out.path().join(&name)).unwrap();
        let kept = std::fs::read(committed.join(&name)).unwrap();
        assert!(
            fresh == kept,
            "server/web-dist/{name} differs from a fresh build: run `node web/build.mjs` and commit it"
        );
        // What a browser downloads: the gzipped copies the server sends.
        if name.ends_with(".gz") {
            gzipped += kept.len();
        }
    }
    eprintln!(
        "the document page loads {:.1} KiB gzipped (budget 350 KiB)",
        gzipped as f64 / 1024.0
    );
    assert!(gzipped <= 350 * 1024, "{gzipped} bytes gzipped");
}
