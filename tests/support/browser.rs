//! Debian's headless Chromium, driven through chromedriver's W3C WebDriver
//! HTTP API (a few JSON requests over loopback, so no WebDriver crate): the
//! status page's browser test and its render benchmark share it.
//!
//! Needs `chromium` and `chromium-driver` (`scripts/test` and `scripts/bench`
//! install them). [`browser_installed`] says whether they are there.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether Chromium and chromedriver are installed. Without them: `false`
/// with a notice, or a panic under `REQUIRE_BROWSER=1`.
pub fn browser_installed() -> bool {
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

/// One WebDriver request: `method path` with an optional JSON body; the
/// reply's `value`. Panics on an error reply, or after 60 s.
pub async fn wd(port: u16, method: &str, path: &str, body: Option<Value>) -> Value {
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

/// A chromedriver process with one headless Chromium session; both end on
/// drop, with every browser process (chromedriver leads their process
/// group: a test that panics must not leave a browser behind).
pub struct Driver {
    child: Child,
    port: u16,
    session: String,
}

impl Driver {
    /// A new chromedriver and a fresh browser (empty cache, no cookies).
    pub async fn start() -> Driver {
        let port = super::free_port();
        use std::os::unix::process::CommandExt;
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        super::wait_for("chromedriver up", Duration::from_secs(20), || async move {
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

    /// One command of this session (`what` after `/session/<id>/`).
    pub async fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}/{what}", self.session);
        wd(self.port, method, &path, body).await
    }

    /// Navigates and returns once the page's `load` event fired.
    pub async fn goto(&self, url: &str) {
        self.cmd("POST", "url", Some(json!({ "url": url }))).await;
    }

    /// Runs `script` (a function body) in the page; its return value.
    pub async fn run(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// Runs `script` (a function body) in the page; what it passes to its
    /// last argument, a callback (WebDriver's script timeout applies: 30 s).
    pub async fn run_async(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "execute/async",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// Polls `script` until it returns something other than `null`/`false`.
    pub async fn wait_for(&self, what: &str, limit: Duration, script: &str) -> Value {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let v = self.run(script).await;
            if !(v.is_null() || v == false) {
                return v;
            }
            let page = self
                .run("return document.body ? document.body.innerText : ''")
                .await;
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; the page shows:\n{}",
                page.as_str().unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let png = self.cmd("GET", "screenshot", None).await;
        base64_decode(png.as_str().expect("a base64 screenshot"))
    }

    /// Closes the session (the browser exits), then ends chromedriver.
    pub async fn quit(self) {
        let path = format!("/session/{}", self.session);
        let _ = wd(self.port, "DELETE", &path, None).await;
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the process group this driver's chromedriver
        // leads (its id is the group's), not yet reaped.
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Base64 decoding for screenshots (standard alphabet, with padding).
pub fn base64_decode(s: &str) -> Vec<u8> {
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
