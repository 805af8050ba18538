//! A real browser for the page tests: Debian's Chromium, headless, driven through ChromeDriver
//! (WebDriver) with `fantoccini`. One ChromeDriver process serves every [`Page`] of a test; each
//! page is its own Chromium with its own profile, so two pages are two people.
//!
//! A failing step saves a screenshot, the page's text and its console log under
//! `target/browser/<test>/` and says where ([`Page::step`]).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::wd::{Capabilities, WebDriverCompatibleCommand};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::process::{Child, Command};

/// The ChromeDriver of a test, stopped when dropped.
pub struct Driver {
    child: Child,
    url: String,
    test: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Where a test's screenshots and logs go.
pub fn artefacts(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("browser")
        .join(test);
    std::fs::create_dir_all(&dir).expect("an artefacts folder");
    dir
}

impl Driver {
    /// Starts ChromeDriver for the test named `test` (scripts/test installs it and Chromium).
    pub async fn start(test: &str) -> Driver {
        let port = free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver runs (scripts/test installs chromium-driver)");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Driver {
            child,
            url,
            test: test.to_owned(),
        }
    }

    /// A new browser (its own Chromium and profile), named `who` in artefacts.
    pub async fn page(&self, who: &str) -> Page {
        let profile = tempfile::tempdir().expect("a profile folder");
        let mut caps = Capabilities::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                    // A fake microphone that needs no permission prompt, for dictation.
                    "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        caps.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("a Chromium session");
        Page {
            client,
            who: who.to_owned(),
            test: self.test.clone(),
            _profile: profile,
        }
    }
}

/// One person's browser.
pub struct Page {
    pub client: Client,
    who: String,
    test: String,
    _profile: tempfile::TempDir,
}

/// ChromeDriver's own command for the browser's console log.
#[derive(Debug)]
struct ConsoleLog;

impl WebDriverCompatibleCommand for ConsoleLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({ "type": "browser" }).to_string()),
        )
    }
}

impl Page {
    /// The browser's console since the last read: one line per entry.
    pub async fn console(&self) -> Vec<String> {
        match self.client.issue_cmd(ConsoleLog).await {
            Ok(Value::Array(entries)) => entries
                .iter()
                .map(|e| {
                    format!(
                        "{} {}",
                        e["level"].as_str().unwrap_or_default(),
                        e["message"].as_str().unwrap_or_default()
                    )
                })
                .collect(),
            Ok(other) => vec![format!("(console log unreadable: {other})")],
            Err(e) => vec![format!("(console log unreadable: {e})")],
        }
    }

    /// Saves a screenshot (`<who>-<name>.png`), the page's text and its console log.
    pub async fn save(&self, name: &str) -> PathBuf {
        let dir = artefacts(&self.test);
        let png = dir.join(format!("{}-{name}.png", self.who));
        if let Ok(bytes) = self.client.screenshot().await {
            let _ = std::fs::write(&png, bytes);
        }
        let text = self
            .text("body")
            .await
            .unwrap_or_else(|e| format!("(no text: {e})"));
        let console = self.console().await.join("\n");
        let url = self
            .client
            .current_url()
            .await
            .map(|u| u.to_string())
            .unwrap_or_default();
        let _ = std::fs::write(
            dir.join(format!("{}-{name}.txt", self.who)),
            format!("url: {url}\n\n--- page text ---\n{text}\n\n--- console ---\n{console}\n"),
        );
        png
    }

    /// Runs one step; if it fails, saves what the page showed and panics saying where.
    pub async fn step<T, F>(&self, name: &str, f: F) -> T
    where
        F: std::future::Future<Output = Result<T, String>>,
    {
        match f.await {
            Ok(v) => v,
            Err(e) => {
                let png = self.save(name).await;
                panic!(
                    "{}: step `{name}` failed: {e}\n(screenshot, text and console: {})",
                    self.who,
                    png.display()
                );
            }
        }
    }

    pub async fn goto(&self, url: &str) -> Result<(), String> {
        self.client.goto(url).await.map_err(|e| e.to_string())
    }

    /// The text of the first element `css` finds.
    pub async fn text(&self, css: &str) -> Result<String, String> {
        let el = self
            .client
            .find(Locator::Css(css))
            .await
            .map_err(|e| format!("{css}: {e}"))?;
        el.text().await.map_err(|e| e.to_string())
    }

    /// Waits up to `within` for `css` to exist and its text to satisfy `ok`; the last text
    /// seen otherwise.
    pub async fn until_text(
        &self,
        css: &str,
        within: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let deadline = Instant::now() + within;
        let mut last = String::from("(not found)");
        loop {
            if let Ok(text) = self.text(css).await {
                if ok(&text) {
                    return Ok(text);
                }
                last = text;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{css} never read as expected within {within:?}; last: {last:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits up to `within` for a script's value to satisfy `ok`.
    pub async fn until_script(
        &self,
        script: &str,
        within: Duration,
        ok: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        let deadline = Instant::now() + within;
        loop {
            let v = self
                .client
                .execute(script, vec![])
                .await
                .map_err(|e| e.to_string())?;
            if ok(&v) {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "`{script}` never read as expected within {within:?}; last: {v}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The first element `css` finds, waited for up to 10 s.
    async fn element(&self, css: &str) -> Result<fantoccini::elements::Element, String> {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .map_err(|e| format!("{css}: {e}"))
    }

    pub async fn click(&self, css: &str) -> Result<(), String> {
        let el = self.element(css).await?;
        el.click().await.map_err(|e| format!("click {css}: {e}"))
    }

    pub async fn type_into(&self, css: &str, text: &str) -> Result<(), String> {
        let el = self.element(css).await?;
        el.send_keys(text)
            .await
            .map_err(|e| format!("type into {css}: {e}"))
    }

    /// Signs in through the server's GitHub sign-in, as the fake GitHub's browser user (set by
    /// the caller), from the start page; back on `/`, signed in.
    pub async fn sign_in(&self, origin: &str, login: &str) -> Result<(), String> {
        self.goto(&format!("{origin}/")).await?;
        self.click("#sign-in").await?;
        self.until_text("#who", Duration::from_secs(10), |t| {
            t == format!("Signed in as {login}")
        })
        .await
        .map(|_| ())
    }
}
