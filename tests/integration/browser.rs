//! The status page in a real browser: Debian's headless Chromium, driven
//! through chromedriver's W3C WebDriver HTTP API (a few JSON requests over
//! loopback, so no WebDriver crate), against a real fleet. It loads `/`, sees
//! one bar per member, kills a member, and sees the page show it failed
//! without a reload (a marker set in the page's `window` survives).
//!
//! Needs `chromium` and `chromium-driver` (`scripts/test` installs them).
//! Without them: skipped with a notice, or a failure under
//! `REQUIRE_BROWSER=1`. `UI_SCREENSHOT=<path>` saves a PNG of the page once
//! it shows the failure (how `docs/status-page.png` was made).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distributor::edge::redis::Store;
use distributor::ops::api::Api;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// One WebDriver request: `method path` with an optional JSON body; the
/// reply's `value`. Panics on an error reply, or after 60 s.
async fn wd(port: u16, method: &str, path: &str, body: Option<Value>) -> Value {
    tokio::time::timeout(
        Duration::from_secs(60),
        Box::pin(wd_once(port, method, path, body)),
    )
    .await
    .unwrap_or_else(|_| panic!("{method} {path}: no answer within 60 s"))
}

async fn wd_once(port: u16, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    // The head, then exactly Content-Length bytes: chromedriver may keep the
    // connection open whatever the request says.
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let (head, len, start) = loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "{method} {path}: connection closed before the head");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or_else(|| panic!("{method} {path}: no Content-Length: {head}"));
            break (head, len, end + 4);
        }
    };
    while buf.len() < start + len {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "{method} {path}: body cut short");
        buf.extend_from_slice(&chunk[..n]);
    }
    let rest = String::from_utf8_lossy(&buf[start..start + len]);
    let v: Value = serde_json::from_str(&rest)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}: {head}\n{rest}"));
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "{method} {path}: {head}\n{v}"
    );
    v["value"].clone()
}

struct Driver {
    child: Child,
    port: u16,
    session: String,
}

impl Driver {
    async fn start() -> Driver {
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        wait_for("chromedriver up", Duration::from_secs(20), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1100"]
            }
        }}});
        let v = wd(port, "POST", "/session", Some(caps)).await;
        let session = v["sessionId"].as_str().expect("a session").to_string();
        Driver {
            child,
            port,
            session,
        }
    }

    async fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}/{what}", self.session);
        wd(self.port, method, &path, body).await
    }

    async fn goto(&self, url: &str) {
        self.cmd("POST", "url", Some(json!({ "url": url }))).await;
    }

    /// Runs `script` (a function body) in the page; its return value.
    async fn run(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// Polls `script` until it returns something other than `null`/`false`.
    async fn wait_for(&self, what: &str, limit: Duration, script: &str) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let v = self.run(script).await;
            if !(v.is_null() || v == false) {
                return v;
            }
            let page = self
                .run("return document.body ? document.body.innerText : ''")
                .await;
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; the page shows:\n{}",
                page.as_str().unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn quit(mut self) {
        let path = format!("/session/{}", self.session);
        let _ = wd(self.port, "DELETE", &path, None).await;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn browser_installed() -> bool {
    let found =
        std::path::Path::new(CHROMEDRIVER).exists() && std::path::Path::new(CHROMIUM).exists();
    if !found {
        assert!(
            std::env::var("REQUIRE_BROWSER").as_deref() != Ok("1"),
            "REQUIRE_BROWSER=1 but {CHROMIUM} or {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)"
        );
        eprintln!(
            "browser: skipped: {CHROMIUM} or {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver; scripts/test does)"
        );
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_crash_without_a_reload() {
    if !browser_installed() {
        return;
    }
    let units = units(60);
    let (mut fleet, _) = Fleet::converged(|_| {}, 4, 1, &units).await;
    let replica = fleet.replicas[0].as_ref().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let store =
        Store::connect(&fleet.config.redis_options(), TABLE, Duration::from_secs(3)).unwrap();
    let api = Api::start(
        store,
        fleet.config.services_namespaces.clone(),
        fleet.config.workunits_namespace.clone(),
        replica.status(),
        stop.clone().cancelled_owned(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(distributor::ops::http::serve_with(
        listener,
        replica.status(),
        replica.metrics(),
        Duration::from_secs(5),
        Some(api),
        stop.clone().cancelled_owned(),
    ));

    let driver = Driver::start().await;
    driver.goto(&format!("http://127.0.0.1:{port}/")).await;
    // Four bars, with all the units between them.
    driver
        .wait_for(
            "four members with 60 units",
            Duration::from_secs(20),
            "const rows = [...document.querySelectorAll('.member')];
             const units = rows.reduce((n, r) => n + Number(r.dataset.units), 0);
             return rows.length === 4 && units === 60;",
        )
        .await;
    let holder = driver
        .run("return document.getElementById('holder').textContent")
        .await;
    assert_eq!(holder, "replica-0");
    // Set in this document only: a reload would lose it.
    driver.run("window.__notReloaded = 1; return true").await;

    let crashed = fleet.member_id(1);
    fleet.members[1].take().unwrap().abort();
    let script = format!(
        "const row = [...document.querySelectorAll('.member.failed')].find(r => r.dataset.id === {id});
         const tags = [...document.querySelectorAll('#changes .tag.failure')];
         return row && row.dataset.units === '0' && tags.length > 0 && window.__notReloaded === 1;",
        id = Value::from(crashed.clone())
    );
    driver
        .wait_for(
            "the crashed member failed, with no units, and a failure change, without a reload",
            Duration::from_secs(20),
            &script,
        )
        .await;
    // The live ones take its units (once the holder found its address
    // refused after the write that revoked them): 60 in all again.
    driver
        .wait_for(
            "the crashed member's units owned by the live ones",
            Duration::from_secs(20),
            "return [...document.querySelectorAll('.member')]
               .reduce((n, r) => n + Number(r.dataset.units), 0) === 60",
        )
        .await;

    if let Ok(path) = std::env::var("UI_SCREENSHOT") {
        use base64_png::decode;
        let png = driver.cmd("GET", "screenshot", None).await;
        std::fs::write(&path, decode(png.as_str().unwrap())).unwrap();
        eprintln!("browser: screenshot saved to {path}");
    }
    driver.quit().await;
    stop.cancel();
    fleet.shutdown().await;
}

/// Base64 decoding for the screenshot (standard alphabet, with padding).
mod base64_png {
    pub fn decode(s: &str) -> Vec<u8> {
        let val = |c: u8| -> u32 {
            match c {
                b'A'..=b'Z' => u32::from(c - b'A'),
                b'a'..=b'z' => u32::from(c - b'a') + 26,
                b'0'..=b'9' => u32::from(c - b'0') + 52,
                b'+' => 62,
                b'/' => 63,
                _ => panic!("not base64: {c}"),
            }
        };
        let bytes: Vec<u8> = s
            .bytes()
            .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
            .collect();
        let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
        for chunk in bytes.chunks(4) {
            let mut n = 0u32;
            for (i, c) in chunk.iter().enumerate() {
                n |= val(*c) << (18 - 6 * i);
            }
            let take = chunk.len() - 1;
            for i in 0..take {
                out.push((n >> (16 - 8 * i)) as u8);
            }
        }
        out
    }

    #[test]
    fn decodes() {
        assert_eq!(decode("aGVsbG8="), b"hello");
        assert_eq!(decode("aGk="), b"hi");
        assert_eq!(decode("YWJj"), b"abc");
    }
}
