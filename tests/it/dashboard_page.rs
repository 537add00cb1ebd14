//! The dashboard page over HTTP (`/dashboard`): sign-in with a provider token into an
//! HttpOnly cookie, the figures equal to the JSON API's, the languages, and what the page
//! must never do (show the token, accept a cross-site sign-in, act on a cookie for a
//! change). The browser test (`tests/it/dashboard_browser.rs`) drives the same page live.

use crate::http_support;

use settle::auth::Scope;
use settle::config::HttpConfig;

use http_support::{TestApp, spawn_app, spawn_app_with, usage};

const NOW: &str = "2026-11-25T12:00:00Z";

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn sign_in(app: &TestApp, token: &str, origin: Option<&str>) -> reqwest::Response {
    let mut r = no_redirects()
        .post(app.url("/dashboard/login"))
        .form(&[("token", token), ("lang", "en")]);
    if let Some(o) = origin {
        r = r.header("origin", o);
    }
    r.send().await.unwrap()
}

/// The session cookie of a successful sign-in: `(name=value, attributes)`.
pub(crate) fn session_cookie(r: &reqwest::Response) -> (String, String) {
    let set = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("settle_session="))
        .expect("a session cookie");
    let (pair, attributes) = set.split_once(';').unwrap();
    (pair.to_owned(), attributes.to_owned())
}

async fn page(app: &TestApp, cookie: &str, query: &str, accept_language: &str) -> (u16, String) {
    let r = no_redirects()
        .get(app.url(&format!("/dashboard{query}")))
        .header("cookie", cookie)
        .header("accept-language", accept_language)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// The machine value of `<data id="{id}" value="…">` in a page.
fn data_value<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("<data id=\"{id}\" value=\""))
        .unwrap_or_else(|| panic!("no {id} in the page"));
    let rest = &html[at..];
    let start = rest.find("value=\"").unwrap() + 7;
    let end = start + rest[start..].find('"').unwrap();
    &rest[start..end]
}

#[tokio::test]
async fn a_provider_signs_in_and_sees_the_apis_figures_without_the_token_in_the_page() {
    let app = spawn_app(NOW).await;
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
        "2026-11-03T10:00:00Z",
        "2026-11-03T11:00:00Z",
    )
    .await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;

    // Signed out: the sign-in form, in the browser's language.
    let (status, form) = page(&app, "", "", "de-DE,de;q=0.9").await;
    assert_eq!(status, 200);
    assert!(
        form.contains("<html lang=\"de\">") && form.contains("Anbieter-Token"),
        "{form}"
    );
    let (_, form) = page(&app, "", "", "zh-CN,zh;q=0.9").await;
    assert!(form.contains("<html lang=\"zh-CN\">") && form.contains("提供方令牌"));

    // Sign-in: 303 to the page, the token in an HttpOnly, SameSite=Strict cookie.
    let r = sign_in(&app, &token, Some(&app.base)).await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/dashboard");
    let (cookie, attributes) = session_cookie(&r);
    assert!(attributes.contains("HttpOnly"), "{attributes}");
    assert!(attributes.contains("SameSite=Strict"), "{attributes}");
    assert!(attributes.contains("Path=/"), "{attributes}");
    // Served on loopback (a local demo over plain HTTP): not Secure unless configured.
    assert!(!attributes.contains("Secure"), "{attributes}");

    let (status, html) = page(&app, &cookie, "", "en").await;
    assert_eq!(status, 200);
    assert!(!html.contains(&token), "the token is in the page");
    let (_, secret) = token.split_once('.').unwrap();
    assert!(!html.contains(secret), "the token's secret is in the page");
    let summary = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(
        data_value(&html, "week-net"),
        summary["week_to_date"]["net_usdc"]
    );
    assert_eq!(
        data_value(&html, "month-net"),
        summary["month_to_date"]["net_usdc"]
    );
    assert_eq!(
        data_value(&html, "available"),
        summary["balances"]["available_usdc"]
    );
    // 2 h at 2.49 less 20 %: 3.984; the month adds 1 h at 1.8 less 20 %: 5.424.
    assert!(html.contains(">3.984000 USDC</data>"), "English format");
    assert!(html.contains(">5.424000 USDC</data>"));
    assert!(html.contains("data-stream=\"/v1/providers/prv_a/stream?reports_mark=0.0\""));
    assert!(html.contains("gpu_a0") && html.contains("H100-80GB"));
    assert!(html.contains("<svg role=\"img\""), "charts are drawn");
    assert!(html.contains(
        "/v1/providers/prv_a/earnings.csv?from=2026-11-01&amp;to=2026-12-01&amp;group_by=day"
    ));

    // German by the switch, remembered in a cookie; Chinese dates.
    let r = no_redirects()
        .get(app.url("/dashboard?lang=de"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    let lang_cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("settle_lang=de;"))
        .expect("the language is remembered");
    assert!(lang_cookie.contains("SameSite=Strict"));
    let html = r.text().await.unwrap();
    assert!(html.contains("<html lang=\"de\">") && html.contains("Diese Woche"));
    assert!(
        html.contains(">3,984000 USDC</data>"),
        "German decimal comma"
    );
    let (_, html) = page(&app, &format!("{cookie}; settle_lang=zh-CN"), "", "en").await;
    assert!(
        html.contains("本周") && html.contains("2026年11月25日"),
        "Chinese labels and dates"
    );

    // The panel the script swaps in needs the cookie too.
    let r = no_redirects()
        .get(app.url("/dashboard/panel"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = no_redirects()
        .get(app.url("/dashboard/panel?by=week"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Week of Nov 23, 2026"));

    // Sign-out forgets the cookie.
    let r = no_redirects()
        .post(app.url("/dashboard/logout"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let (pair, attributes) = session_cookie(&r);
    assert_eq!(pair, "settle_session=");
    assert!(attributes.contains("Max-Age=0"));
}

#[tokio::test]
async fn only_a_valid_provider_token_signs_in_and_only_from_this_site() {
    let app = spawn_app(NOW).await;
    let provider = app.token(Scope::Provider, Some("prv_a")).await;
    let admin = app.token(Scope::Admin, None).await;

    let r = sign_in(&app, "stl_nope.nope", None).await;
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    assert!(r.text().await.unwrap().contains("This token is not valid"));

    let r = sign_in(&app, &admin, None).await;
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("set-cookie").is_none());
    assert!(r.text().await.unwrap().contains("provider token"));

    // A sign-in posted from another site's page is refused.
    let r = sign_in(&app, &provider, Some("https://evil.example")).await;
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("set-cookie").is_none());

    // A cookie whose token was revoked shows the form again and clears the cookie.
    let (token, token_id) = app.token_with(Scope::Provider, Some("prv_a"), None).await;
    let cookie = format!("settle_session={token}");
    assert_eq!(page(&app, &cookie, "", "en").await.0, 200);
    app.revoke(&token_id).await;
    let r = no_redirects()
        .get(app.url("/dashboard"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert!(
        r.headers()
            .get_all("set-cookie")
            .iter()
            .any(|c| c.to_str().unwrap().starts_with("settle_session=;"))
    );
    let html = r.text().await.unwrap();
    assert!(html.contains("action=\"/dashboard/login\"") && html.contains("revoked"));
}

#[tokio::test]
async fn cookies_are_secure_off_loopback_and_the_pages_own_assets_are_small() {
    let app = spawn_app_with(
        NOW,
        HttpConfig {
            cookie_secure: settle::config::CookieSecure::Always,
            ..HttpConfig::default()
        },
    )
    .await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let (_, attributes) = session_cookie(&sign_in(&app, &token, None).await);
    assert!(attributes.contains("Secure"), "{attributes}");
    let public = HttpConfig {
        bind: "0.0.0.0:8080".into(),
        ..HttpConfig::default()
    };
    assert!(public.cookie_is_secure());

    // The page's own assets (stylesheet, script) and the page itself stay under 300 KB.
    let mut total = 0;
    for (asset, kind) in [
        ("dashboard.css", "text/css"),
        ("dashboard.js", "text/javascript"),
    ] {
        let r = reqwest::get(app.url(&format!("/dashboard/assets/{asset}")))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        total += r.bytes().await.unwrap().len();
    }
    let (_, html) = page(&app, &format!("settle_session={token}"), "", "en").await;
    assert!(html.contains("Earnings dashboard"));
    total += html.len();
    assert!(total < 300_000, "{total} bytes");
    let r = reqwest::get(app.url("/dashboard/assets/secrets.txt"))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// The part of `html` from the first `start` to the first `end` after it.
fn between<'a>(html: &'a str, start: &str, end: &str) -> &'a str {
    let at = html
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in the page"));
    let rest = &html[at..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

/// The numbers of the amounts (`… USDC</data>`) in `html`.
fn amounts(html: &str) -> Vec<&str> {
    html.split(" USDC</data>")
        .filter_map(|before| before.rsplit('>').next())
        .filter(|n| !n.is_empty() && n.chars().next().unwrap().is_ascii_digit())
        .collect()
}

#[tokio::test]
async fn the_history_has_every_day_of_the_range_and_a_cards_amounts_one_precision() {
    let app = spawn_app(NOW).await;
    // The issue's range: earnings on 3, 24 and 25 Nov only.
    for (id, gpu, start, end) in [
        (
            "k1",
            "gpu_a0",
            "2026-11-24T10:00:00Z",
            "2026-11-24T12:00:00Z",
        ),
        (
            "k2",
            "gpu_a1",
            "2026-11-03T10:00:00Z",
            "2026-11-03T11:00:00Z",
        ),
        (
            "k3",
            "gpu_a0",
            "2026-11-25T08:00:00Z",
            "2026-11-25T09:00:00Z",
        ),
    ] {
        usage(&app.ledger, id, "prv_a", gpu, start, end).await;
    }
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let cookie = format!("settle_session={token}");
    let (status, html) = page(&app, &cookie, "", "en").await;
    assert_eq!(status, 200);

    // Every day of November on the time axis and in its table, zero where nothing was
    // earned: 4 Nov sits between 3 and 5 Nov, not 24 Nov beside 3 Nov.
    let figure = between(
        &html,
        "<figure class=\"chart\" aria-labelledby=\"chart-periods\"",
        "</figure>",
    );
    assert_eq!(figure.matches("<tr><th scope=\"row\">").count(), 30);
    assert_eq!(
        figure.matches("fill=\"#1F5FBF\"").count(),
        30,
        "a bar per day"
    );
    assert!(
        figure.contains(
            "<th scope=\"row\">Nov 4, 2026</th><td><data value=\"0.000000\">0.000000 USDC</data>"
        ),
        "{figure}"
    );
    let days: Vec<usize> = ["Nov 3, 2026", "Nov 4, 2026", "Nov 24, 2026"]
        .iter()
        .map(|d| figure.find(&format!(">{d}</th>")).unwrap())
        .collect();
    assert!(days[0] < days[1] && days[1] < days[2]);
    // By week: every week the month touches (six: 1 Nov is a Sunday), the empty ones too.
    let (_, weekly) = page(&app, &cookie, "?by=week", "en").await;
    let figure = between(
        &weekly,
        "<figure class=\"chart\" aria-labelledby=\"chart-periods\"",
        "</figure>",
    );
    assert_eq!(
        figure.matches("<tr><th scope=\"row\">").count(),
        6,
        "{figure}"
    );
    assert!(figure.contains(">Week of Nov 9, 2026</th><td><data value=\"0.000000\">"));

    // The week's card: 5.976 net beside 7.47 gross was two precisions; now one.
    let card = between(
        &html,
        "<article class=\"card\"><h3>This week</h3>",
        "</article>",
    );
    let numbers = amounts(card);
    assert_eq!(numbers, ["5.976000", "7.470000", "1.494000"], "{card}");
    for (lang, point) in [("en", '.'), ("de", ','), ("zh-CN", '.')] {
        let (_, html) = page(&app, &cookie, &format!("?lang={lang}"), "en").await;
        let shown = amounts(&html);
        assert!(shown.len() > 20, "{lang}: {shown:?}");
        for n in shown {
            let decimals = n.len() - n.rfind(point).unwrap_or(n.len()) - 1;
            assert_eq!(decimals, 6, "{lang}: {n}");
        }
    }
}

/// A provider with reliability reports: `gpu_a0` online around the clock but 3 h 10 min on
/// 20 Nov, one job interrupted by the provider, its FP16 benchmark down to 95.55 %;
/// `gpu_a1` scheduled at weekends only, never online, so not listed on a Wednesday.
pub(crate) const RELIABILITY: &str = r#"
{"type":"gpu.schedule","schedule_id":"s-a0","gpu_id":"gpu_a0","effective_from":"2026-10-01T00:00:00Z","time_zone":"UTC","hours":"24/7"}
{"type":"gpu.schedule","schedule_id":"s-a1","gpu_id":"gpu_a1","effective_from":"2026-11-01T00:00:00Z","time_zone":"UTC","hours":"Sat,Sun 10:00-18:00"}
{"type":"gpu.benchmark","benchmark_id":"b-a0-1","gpu_id":"gpu_a0","measured_at":"2026-10-01T00:00:00Z","fp16_tflops":"1000","fp32_tflops":"60","tensor_tflops":"900","memory_gb_s":3350,"network_mbit_s":10000,"storage_mb_s":2000}
{"type":"gpu.benchmark","benchmark_id":"b-a0-2","gpu_id":"gpu_a0","measured_at":"2026-11-20T00:00:00Z","fp16_tflops":"955.5","fp32_tflops":"60","tensor_tflops":"900","memory_gb_s":3350,"network_mbit_s":10000,"storage_mb_s":2000}
{"type":"gpu.benchmark","benchmark_id":"b-a1-1","gpu_id":"gpu_a1","measured_at":"2026-11-01T00:00:00Z","fp16_tflops":"300","fp32_tflops":"19.5","tensor_tflops":"300","memory_gb_s":2000,"network_mbit_s":10000,"storage_mb_s":2000}
{"type":"gpu.online","report_id":"o-a0-1","gpu_id":"gpu_a0","started_at":"2026-10-01T00:00:00Z","ended_at":"2026-11-20T10:00:00Z"}
{"type":"gpu.online","report_id":"o-a0-2","gpu_id":"gpu_a0","started_at":"2026-11-20T13:10:00Z","ended_at":"2026-11-25T12:00:00Z"}
{"type":"job.outcome","job_id":"j1","gpu_id":"gpu_a0","ended_at":"2026-11-21T10:00:00Z","result":"completed"}
{"type":"job.outcome","job_id":"j2","gpu_id":"gpu_a0","ended_at":"2026-11-22T10:00:00Z","result":"interrupted","cause":"provider"}
"#;

#[tokio::test]
async fn the_reliability_card_shows_the_engines_score_parts_trend_and_listing_in_three_languages() {
    let app = spawn_app(NOW).await;
    http_support::seed(&app.ledger, RELIABILITY).await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let cookie = format!("settle_session={token}");
    let api = app
        .get_json(&token, "/v1/providers/prv_a/reliability")
        .await;
    // The provider's parts carry their GPUs' reasons now.
    let uptime: Vec<&str> = api["uptime"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        uptime.contains(&"gpu_a0: offline 3 h 10 min inside your schedule on 20 Nov"),
        "{api}"
    );

    let (_, html) = page(&app, &cookie, "", "en").await;
    let card = between(&html, "<section id=\"reliability\"", "</section>");
    assert!(
        card.contains("<h2 id=\"h-reliability\">Reliability</h2>"),
        "{card}"
    );
    // The engine's figures: the score and each part, as basis points behind the percent.
    let score = api["score_bps"].as_u64().unwrap();
    assert!(
        card.contains(&format!(
            "id=\"reliability-score\"><data value=\"{score}\">{}.{:02}%</data>",
            score / 100,
            score % 100
        )),
        "{card}"
    );
    for part in ["uptime", "jobs", "benchmark"] {
        let value = &api[part]["value_bps"];
        let article = between(card, &format!("id=\"reliability-{part}\""), "</article>");
        assert!(
            article.contains(&format!("<data value=\"{value}\">")),
            "{part}: {article}"
        );
    }
    // What lowered each part, and the listing, worded on the page.
    for text in [
        "<span class=\"gpu\">gpu_a0</span>: offline 3 h 10 min inside your schedule on Nov 20, 2026",
        "<span class=\"gpu\">gpu_a0</span>: 1 job interrupted by your side at Nov 22, 2026 10:00 UTC",
        "FP16 at 955.5 TFLOPS, 95.55% of the first benchmark&#39;s 1,000 TFLOPS",
        "<th scope=\"row\">gpu_a1</th><td>A100-80GB</td>",
        "not listed: outside your availability schedule; listed again from Nov 28, 2026 10:00 UTC",
        "50% uptime, 30% job completion and 20% benchmark consistency",
    ] {
        assert!(card.contains(text), "{text}\n{card}");
    }
    assert!(
        between(card, "<th scope=\"row\">gpu_a0</th>", "</tr>")
            .contains("<td class=\"why\">listed</td>"),
        "{card}"
    );
    // More reasons than a card lists: counted, not dropped silently.
    let uptime_card = between(card, "id=\"reliability-uptime\"", "</article>");
    assert_eq!(
        uptime_card.matches("<li>").count(),
        6,
        "five reasons and the rest counted: {uptime_card}"
    );
    assert!(uptime_card.contains("<li>and "), "{uptime_card}");
    // The 30-day trend: a line, and its table ending at the score now.
    let trend = between(card, "<table id=\"reliability-trend\"", "</table>");
    assert_eq!(trend.matches("<tr><th scope=\"row\">").count(), 30);
    assert_eq!(
        api["trend"][29]["score_bps"].as_u64(),
        Some(score),
        "the last point is the score now"
    );
    assert!(
        trend.ends_with(&format!(
            "<data value=\"{score}\">{}.{:02}%</data></td></tr></tbody>",
            score / 100,
            score % 100
        )),
        "{trend}"
    );
    assert!(card.contains("<polyline"), "the trend is drawn");
    // The stream the page follows carries the reports' mark it shows.
    let mark = api["reports_mark"].as_str().unwrap();
    assert_ne!(mark, "0.0");
    assert!(html.contains(&format!(
        "data-stream=\"/v1/providers/prv_a/stream?reports_mark={mark}\""
    )));

    let (_, de) = page(&app, &cookie, "?lang=de", "en").await;
    let card = between(&de, "<section id=\"reliability\"", "</section>");
    for text in [
        "<h2 id=\"h-reliability\">Zuverlässigkeit</h2>",
        "am 20.11.2026 3 Std. 10 Min. offline innerhalb Ihres Plans",
        "1 Auftrag von Ihrer Seite unterbrochen am 22.11.2026 10:00 UTC",
        "FP16 bei 955,5 TFLOPS, 95,55 % der 1.000 TFLOPS des ersten Benchmarks",
        "nicht gelistet: außerhalb Ihres Verfügbarkeitsplans; wieder gelistet ab 28.11.2026 10:00 UTC",
        "Was sie gesenkt hat",
    ] {
        assert!(card.contains(text), "{text}\n{card}");
    }
    let (_, zh) = page(&app, &cookie, "?lang=zh-CN", "en").await;
    let card = between(&zh, "<section id=\"reliability\"", "</section>");
    for text in [
        "<h2 id=\"h-reliability\">可靠性</h2>",
        "2026年11月20日 在您的时间表内离线 3 小时 10 分钟",
        "未上架：不在您的可用时间表内；将于 2026年11月28日 10:00 UTC 起重新上架",
        "可靠性评分（最近 30 天）",
    ] {
        assert!(card.contains(text), "{text}\n{card}");
    }
    // No English sentence of the API leaks into another language's card.
    for other in [&de, &zh] {
        assert!(!other.contains("inside your schedule") && !other.contains("not listed"));
    }
}

#[tokio::test]
async fn a_returned_bank_payout_says_the_banks_reason_and_what_to_do_in_each_language() {
    use crate::bank_support::{ACH_INDIVIDUAL, SEPA_DE, World};
    use settle::rails::bank;

    let w = World::new("2026-11-02T00:00:00Z").await;
    w.provider("eu_de", SEPA_DE).await;
    w.provider("us_ind", ACH_INDIVIDUAL).await;
    w.at("2026-11-11T00:00:00Z");
    w.earn("eu_de", 62_500_000, "2026-11-10T01:00:00Z").await;
    w.earn("us_ind", 31_250_000, "2026-11-10T01:00:00Z").await;
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.915").await;
    w.at("2026-12-01T00:05:00Z");
    let run = w.monthly("2026-12").await;
    w.at("2026-12-01T06:30:00Z");
    bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    w.at("2026-12-03T09:00:00Z");
    for (provider, code) in [("eu_de", "AC04"), ("us_ind", "R03")] {
        let payout = run
            .candidates
            .iter()
            .find(|c| c.provider_id == provider)
            .and_then(|c| c.payout_id.clone())
            .unwrap();
        let r = bank::return_payout(&w.ledger, &payout, code, &w.actor())
            .await
            .unwrap();
        assert_eq!(r.status, "accepted");
    }
    let World { db, .. } = w;
    let app = http_support::serve_db(db, "2026-12-03T10:00:00Z", HttpConfig::default()).await;

    let token = app.token(Scope::Provider, Some("eu_de")).await;
    let cookie = format!("settle_session={token}");
    let (status, html) = page(&app, &cookie, "", "en").await;
    assert_eq!(status, 200);
    let history = between(&html, "<h2 id=\"h-history\">", "</section>");
    assert!(history.contains("<td>returned</td>"), "{history}");
    assert!(
        history.contains(
            "<span class=\"bank-answer\">Your bank returned this payout: closed account number: \
             the account has been closed (AC04). The amount is back in your balance; confirm or \
             update your bank details to be paid again.</span>"
        ),
        "{history}"
    );
    // And it is: the returned 50 USDC are available again.
    assert_eq!(data_value(&html, "available"), "50.000000");
    let (_, de) = page(&app, &cookie, "?lang=de", "en").await;
    assert!(
        de.contains(
            "Ihre Bank hat diese Auszahlung zurückgegeben: Konto aufgelöst: das Konto wurde \
             geschlossen (AC04). Der Betrag ist wieder in Ihrem Guthaben; bestätigen oder ändern \
             Sie Ihre Bankverbindung, damit wieder ausgezahlt werden kann."
        ),
        "{de}"
    );
    let (_, zh) = page(&app, &cookie, "?lang=zh-CN", "en").await;
    assert!(
        zh.contains(
            "您的银行退回了这笔付款：账户已关闭：该账户已被注销（AC04）。该金额已退回您的余额；\
             请确认或更新您的银行信息，以便再次收款。"
        ),
        "{zh}"
    );

    // An ACH return, with its NACHA code.
    let token = app.token(Scope::Provider, Some("us_ind")).await;
    let (_, html) = page(&app, &format!("settle_session={token}"), "?lang=de", "en").await;
    assert!(
        html.contains(
            "Ihre Bank hat diese Auszahlung zurückgegeben: kein Konto, oder das Konto ist nicht \
             auffindbar (R03)."
        ),
        "{html}"
    );
    // No English of the engine's reason in another language.
    assert!(!html.contains("Unable to Locate"));
}
