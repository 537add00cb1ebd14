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
    assert!(html.contains(">3.984 USDC</data>"), "English format");
    assert!(html.contains(">5.424 USDC</data>"));
    assert!(html.contains("data-stream=\"/v1/providers/prv_a/stream\""));
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
    assert!(html.contains(">3,984 USDC</data>"), "German decimal comma");
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
