//! The dashboard in a real headless browser (Debian's Chromium, driven by its ChromeDriver
//! over the W3C WebDriver protocol): sign in, see the JSON API's totals and reliability
//! score, book usage through `POST /v1/usage` and an agent's online interval through
//! `POST /v1/gpus/online` and see the totals and the reliability card change without a
//! reload, switch to German and Chinese, use it at 360 px and by keyboard, sign out. With
//! `SETTLE_SCREENSHOTS_DIR` set, the screenshots of the README are written there
//! (`ops/screenshots/`), the reliability card's on its own (`dashboard-reliability.png`).
//!
//! Needs `chromium` and `chromedriver` (skipped with a reason on a machine without them,
//! required in CI: `crates/settle-prereq`).

use crate::http_support;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use settle::auth::Scope;
use settle::config::HttpConfig;

use http_support::{spawn_app_with, usage};

const NOW: &str = "2026-11-25T12:00:00Z";

/// A WebDriver session of a headless Chromium.
struct Browser {
    driver: Child,
    url: String,
    client: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start(found: &settle_prereq::Browser) -> Browser {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        // Its own process group: the Chromium it starts is killed with it (killing the
        // driver alone left the browser running after every test).
        let driver = Command::new(&found.chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,2000",
            "--lang=en-US",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let session: Value = client
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": found.chromium,
                    "args": args,
                    "prefs": {"intl.accept_languages": "en-US,en"},
                },
            }}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = session["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {session}"));
        Browser {
            driver,
            url: format!("{base}/session/{id}"),
            client,
            _profile: profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut r = self.client.request(method, format!("{}{path}", self.url));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let v: Value = r.send().await.unwrap().json().await.unwrap();
        if v["value"]["error"].is_string() {
            panic!("WebDriver {path}: {v}");
        }
        v["value"].clone()
    }

    async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    async fn script(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// The element of a CSS selector (its WebDriver reference).
    async fn find(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_owned()
    }

    async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            Some(json!({})),
        )
        .await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// The text of the first element of `css` ("" when there is none).
    async fn text(&self, css: &str) -> String {
        self.script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent.trim() : '';",
            json!([css]),
        )
        .await
        .as_str()
        .unwrap_or("")
        .to_owned()
    }

    /// Waits until `css`'s text satisfies `ok` (up to `wait`); returns it and the time taken.
    async fn wait_text(
        &self,
        css: &str,
        wait: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> (String, Duration) {
        let start = Instant::now();
        loop {
            let t = self.text(css).await;
            if ok(&t) || start.elapsed() > wait {
                return (t, start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn attribute(&self, css: &str, name: &str) -> String {
        self.script(
            "const e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null;",
            json!([css, name]),
        )
        .await
        .as_str()
        .unwrap_or("")
        .to_owned()
    }

    async fn screenshot(&self, name: &str) {
        self.save_screenshot("/screenshot", name).await;
    }

    /// A screenshot of the element of `css` alone.
    async fn element_screenshot(&self, css: &str, name: &str) {
        let e = self.find(css).await;
        self.save_screenshot(&format!("/element/{e}/screenshot"), name)
            .await;
    }

    async fn save_screenshot(&self, path: &str, name: &str) {
        let png = self
            .call(reqwest::Method::GET, path, None)
            .await
            .as_str()
            .unwrap()
            .to_owned();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png)
            .unwrap();
        assert!(bytes.starts_with(b"\x89PNG"));
        let dir = std::env::var_os("SETTLE_SCREENSHOTS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    /// The viewport of a phone (`width` CSS pixels), through the DevTools protocol.
    async fn phone(&self, width: u32) {
        self.call(
            reqwest::Method::POST,
            "/goog/cdp/execute",
            Some(
                json!({"cmd": "Emulation.setDeviceMetricsOverride", "params": {
                "width": width, "height": 800, "deviceScaleFactor": 1, "mobile": true}}),
            ),
        )
        .await;
    }

    async fn press_tab(&self) {
        self.call(
            reqwest::Method::POST,
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": "\u{E004}"}, {"type": "keyUp", "value": "\u{E004}"}]}]})),
        )
        .await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Ok(group) = i32::try_from(self.driver.id()) {
            // SAFETY: a signal to the process group this test started (the driver's id is
            // its group's, `process_group(0)`); no memory is touched.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

#[tokio::test]
async fn a_provider_watches_earnings_change_live_in_three_languages() {
    let Some(found) = settle_prereq::require(settle_prereq::browser()) else {
        return;
    };
    let app = spawn_app_with(
        NOW,
        HttpConfig {
            stream_poll_interval_ms: 100,
            ..HttpConfig::default()
        },
    )
    .await;
    usage(
        &app.ledger,
        "k1",
        "prv_a",
        "gpu_a0",
        "2026-11-24T10:00:00Z",
        "2026-11-24T12:00:00Z",
    )
    .await;
    usage(
        &app.ledger,
        "k2",
        "prv_a",
        "gpu_a1",
        "2026-11-03T08:00:00Z",
        "2026-11-03T20:00:00Z",
    )
    .await;
    http_support::seed(&app.ledger, crate::dashboard_page::RELIABILITY).await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let admin = app.token(Scope::Admin, None).await;
    let browser = Browser::start(&found).await;

    // Sign in through the form.
    browser.goto(&app.url("/dashboard")).await;
    assert_eq!(browser.attribute("html", "lang").await, "en");
    browser.type_into("#token", &token).await;
    browser.click("button[type=submit]").await;
    let (week, _) = browser
        .wait_text("#week-net", Duration::from_secs(10), |t| !t.is_empty())
        .await;

    // The totals are the JSON API's, in the English format.
    let summary = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(
        browser.attribute("#week-net", "value").await,
        summary["week_to_date"]["net_usdc"]
    );
    assert_eq!(
        browser.attribute("#month-net", "value").await,
        summary["month_to_date"]["net_usdc"]
    );
    assert_eq!(week, "3.984000 USDC");
    assert_eq!(browser.text("#month-net").await, "21.264000 USDC");
    // The reliability card: the engine's score, visible.
    let reliability = app
        .get_json(&token, "/v1/providers/prv_a/reliability")
        .await;
    assert_eq!(browser.text("#h-reliability").await, "Reliability");
    assert_eq!(
        browser.attribute("#reliability-score data", "value").await,
        reliability["score_bps"].to_string()
    );
    assert!(visible(&browser, "#reliability-score").await);
    // The token: not readable by the page's scripts, not in its source or address.
    let cookies = browser.script("return document.cookie;", json!([])).await;
    assert!(!cookies.as_str().unwrap().contains("stl_"), "{cookies}");
    let source = browser.call(reqwest::Method::GET, "/source", None).await;
    assert!(!source.as_str().unwrap().contains(&token));
    let url = browser.call(reqwest::Method::GET, "/url", None).await;
    assert!(!url.as_str().unwrap().contains("stl_"));

    // Live: booked through the API, shown without a reload within 2 s.
    browser
        .wait_text("#live-status", Duration::from_secs(10), |t| {
            t.starts_with("Live")
        })
        .await;
    browser
        .script("window.__not_reloaded = true; return true;", json!([]))
        .await;
    let r = app
        .post(
            Some(&admin),
            "/v1/usage",
            json!({"events": [{"event_id": "live-1", "provider_id": "prv_a", "gpu_id": "gpu_a0",
                "started_at": "2026-11-25T08:00:00Z", "ended_at": "2026-11-25T09:00:00Z"}]})
            .to_string(),
        )
        .await;
    assert_eq!(r.status(), 200);
    let (week, took) = browser
        .wait_text("#week-net", Duration::from_secs(10), |t| {
            t != "3.984000 USDC"
        })
        .await;
    // + 1 h at 2.49 less 20 %.
    assert_eq!(week, "5.976000 USDC");
    assert!(
        took <= Duration::from_secs(2),
        "the page took {took:?} to show the booking"
    );
    assert_eq!(
        browser
            .script("return window.__not_reloaded === true;", json!([]))
            .await,
        true
    );
    assert_eq!(
        browser.attribute("#week-net", "value").await,
        app.get_json(&token, "/v1/providers/prv_a/summary").await["week_to_date"]["net_usdc"]
    );
    browser.screenshot("dashboard-en.png").await;

    // Live reliability: the agent reports the 3 h 10 min gpu_a0 was missing on 20 Nov. No
    // ledger event: the stream's `reliability` event refreshes the card, without a reload.
    let score_before = browser.text("#reliability-score").await;
    let r = app
        .post(
            Some(&admin),
            "/v1/gpus/online",
            json!({"intervals": [{"report_id": "live-o1", "gpu_id": "gpu_a0",
                "started_at": "2026-11-20T10:00:00Z", "ended_at": "2026-11-20T13:10:00Z"}]})
            .to_string(),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["accepted"], 1);
    let (score, _) = browser
        .wait_text("#reliability-score", Duration::from_secs(10), |t| {
            t != score_before
        })
        .await;
    assert_ne!(score, score_before, "the card did not follow the report");
    let reliability = app
        .get_json(&token, "/v1/providers/prv_a/reliability")
        .await;
    assert_eq!(
        browser.attribute("#reliability-score data", "value").await,
        reliability["score_bps"].to_string()
    );
    assert!(
        !browser
            .text("#reliability-uptime")
            .await
            .contains("3 h 10 min"),
        "what lowered uptime is gone"
    );
    assert_eq!(
        browser
            .script("return window.__not_reloaded === true;", json!([]))
            .await,
        true
    );
    browser
        .element_screenshot("#reliability", "dashboard-reliability.png")
        .await;

    // Keyboard: the first Tab reaches the skip link.
    browser.press_tab().await;
    let focused = browser
        .script("return document.activeElement.className;", json!([]))
        .await;
    assert_eq!(focused, "skip");

    // German: labels and the decimal comma.
    browser.click("a[hreflang=de]").await;
    browser
        .wait_text("h1", Duration::from_secs(10), |t| {
            t == "Einnahmen-Dashboard"
        })
        .await;
    assert_eq!(browser.attribute("html", "lang").await, "de");
    assert_eq!(browser.text("#week-net").await, "5,976000 USDC");
    assert_eq!(browser.text("#h-gpus").await, "Ihre GPUs");
    assert_eq!(browser.text("#h-reliability").await, "Zuverlässigkeit");
    assert!(browser.text("#reliability-score").await.ends_with(" %"));
    assert!(visible(&browser, "#reliability-score").await);
    browser.screenshot("dashboard-de.png").await;

    // Chinese: labels and dates.
    browser.click("a[hreflang=zh-CN]").await;
    browser
        .wait_text("h1", Duration::from_secs(10), |t| t == "收益仪表盘")
        .await;
    assert_eq!(browser.text("#h-gpus").await, "您的 GPU");
    assert_eq!(browser.text(".asof").await, "截至 2026年11月25日 12:00 UTC");
    assert_eq!(browser.text("#h-reliability").await, "可靠性");
    assert!(visible(&browser, "#reliability-score").await);
    browser.screenshot("dashboard-zh.png").await;

    // The language stays chosen (cookie) and the stream still follows in Chinese.
    usage(
        &app.ledger,
        "live-2",
        "prv_a",
        "gpu_a1",
        "2026-11-25T09:00:00Z",
        "2026-11-25T10:00:00Z",
    )
    .await;
    let (week, _) = browser
        .wait_text("#week-net", Duration::from_secs(5), |t| {
            t != "5.976000 USDC"
        })
        .await;
    assert_eq!(week, "7.416000 USDC");

    // A phone 360 px wide: nothing wider than the screen.
    browser.goto(&app.url("/dashboard?lang=en")).await;
    browser.phone(360).await;
    let fits = browser
        .script(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            json!([]),
        )
        .await;
    assert_eq!(fits, true, "the page scrolls sideways at 360 px");
    for lang in ["en", "de", "zh-CN"] {
        browser
            .goto(&app.url(&format!("/dashboard?lang={lang}")))
            .await;
        assert!(live(&browser).await, "{lang}: the page did not go live");
        let heading = browser.text("#h-reliability").await;
        assert!(!heading.is_empty(), "{lang}: no reliability heading");
        assert!(
            visible(&browser, "#h-reliability").await
                && visible(&browser, "#reliability-score").await,
            "{lang}: the reliability card is not visible at 360 px"
        );
        let fits = browser
            .script(
                "return document.documentElement.scrollWidth <= window.innerWidth;",
                json!([]),
            )
            .await;
        assert_eq!(fits, true, "{lang}: the page scrolls sideways at 360 px");
    }
    browser.goto(&app.url("/dashboard?lang=en")).await;
    if !live(&browser).await {
        let r = app.get(Some(&token), "/v1/providers/prv_a/stream").await;
        panic!(
            "the page did not go live: {} {:?}",
            browser.text("#live-status").await,
            r.status()
        );
    }
    browser.screenshot("dashboard-360.png").await;
    browser
        .element_screenshot("#reliability", "dashboard-reliability-360.png")
        .await;

    // Sign-out: back to the form, and the page is gone.
    browser.click(".signout button").await;
    browser
        .wait_text("h1", Duration::from_secs(10), |t| t.starts_with("Sign in"))
        .await;
    browser.goto(&app.url("/dashboard")).await;
    assert!(
        browser
            .text("label[for=token]")
            .await
            .contains("Provider token")
    );
}

/// Whether the element of `css` is drawn: it has a size, lies within the viewport's width
/// and is not hidden by CSS.
async fn visible(browser: &Browser, css: &str) -> bool {
    browser
        .script(
            "const e = document.querySelector(arguments[0]); if (!e) { return false; } \
             const r = e.getBoundingClientRect(); const s = getComputedStyle(e); \
             return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth \
             && s.visibility !== 'hidden' && s.display !== 'none';",
            json!([css]),
        )
        .await
        == json!(true)
}

/// Waits (up to 10 s) until the page says it follows its live stream.
async fn live(browser: &Browser) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let on = browser
            .script(
                "const s = document.getElementById('live-status'); \
                 return !!s && s.textContent === s.dataset.live;",
                json!([]),
            )
            .await;
        if on == json!(true) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
