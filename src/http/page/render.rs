//! The dashboard's HTML. Every text from outside (ids, models, messages) is escaped here;
//! amounts carry their exact API value in `<data value>` beside the local format.

use std::fmt::Write as _;

use chrono::NaiveDate;

use super::chart::{self, Bar};
use super::i18n::Lang;
use super::{History, PageQuery, PanelView};
use crate::domain::money::format_micro_usdc;
use crate::domain::payout::PayoutStatus;
use crate::store::read::{EarningsBy, EarningsGroup, EarningsTotals, PayoutRow};

pub use crate::report::html::escape;

/// A query-string value.
fn url_encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The query of the page with `lang` replaced (for the language switch and the panel).
fn query(q: &PageQuery, lang: Lang) -> String {
    let mut parts = Vec::new();
    for (key, value) in [("from", &q.from), ("to", &q.to), ("by", &q.by)] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            parts.push(format!("{key}={}", url_encode(v)));
        }
    }
    parts.push(format!("lang={}", lang.tag()));
    parts.join("&")
}

/// An amount: the local format, with the API's exact decimal as its machine value.
fn money(lang: Lang, micro_usdc: i64, id: Option<&str>) -> String {
    let id = id.map(|i| format!(" id=\"{i}\"")).unwrap_or_default();
    format!(
        "<data{id} value=\"{}\">{}</data>",
        format_micro_usdc(micro_usdc),
        escape(&lang.usdc(micro_usdc))
    )
}

fn head(lang: Lang, title: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"{}\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><link rel=\"stylesheet\" href=\"/dashboard/assets/dashboard.css\"></head>\n",
        lang.tag(),
        escape(title)
    )
}

fn language_nav(lang: Lang, q: &PageQuery) -> String {
    let mut out = format!(
        "<nav class=\"langs\" aria-label=\"{}\"><ul>",
        escape(lang.t("language"))
    );
    for other in Lang::ALL {
        let current = if other == lang {
            " aria-current=\"true\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<li><a href=\"/dashboard?{}\" hreflang=\"{tag}\" lang=\"{tag}\"{current}>{}</a></li>",
            escape(&query(q, other)),
            escape(other.t("lang_name")),
            tag = other.tag(),
        );
    }
    out.push_str("</ul></nav>");
    out
}

/// The sign-in form, with a message (why the last attempt failed) if any.
pub fn sign_in(lang: Lang, message: Option<String>) -> String {
    let mut out = head(lang, lang.t("sign_in_title"));
    let _ = write!(
        out,
        "<body class=\"signin\"><header>{nav}</header><main id=\"main\">\
         <h1>{title}</h1><p>{help}</p>",
        nav = language_nav(lang, &PageQuery::default()),
        title = escape(lang.t("sign_in_title")),
        help = escape(lang.t("sign_in_help")),
    );
    if let Some(m) = message {
        let _ = write!(out, "<p class=\"error\" role=\"alert\">{}</p>", escape(&m));
    }
    let _ = write!(
        out,
        "<form method=\"post\" action=\"/dashboard/login\">\
         <label for=\"token\">{label}</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" spellcheck=\"false\" required>\
         <input type=\"hidden\" name=\"lang\" value=\"{tag}\">\
         <button type=\"submit\">{submit}</button></form></main></body></html>",
        label = escape(lang.t("token_label")),
        tag = lang.tag(),
        submit = escape(lang.t("sign_in")),
    );
    out
}

/// The whole page: header, range form, live status and the panel.
pub fn page(view: &PanelView, q: &PageQuery) -> String {
    let lang = view.lang;
    let mut out = head(lang, lang.t("title"));
    let by = q.by.as_deref().unwrap_or("day");
    let _ = write!(
        out,
        "<body><a class=\"skip\" href=\"#live\">{skip}</a>\
         <header><div><h1>{title}</h1><p class=\"who\">{who}</p></div>{nav}\
         <form class=\"signout\" method=\"post\" action=\"/dashboard/logout\"><button type=\"submit\">{out_label}</button></form></header>\
         <main id=\"main\" data-stream=\"/v1/providers/{pid}/stream?reports_mark={mark}\" \
         data-panel=\"/dashboard/panel?{panel_query}\" data-position=\"{position}\" data-reports-mark=\"{mark}\">\
         <p id=\"live-status\" role=\"status\" data-live=\"{live}\" data-reconnecting=\"{reconnecting}\"></p>\
         <form class=\"range\" method=\"get\" action=\"/dashboard\" aria-label=\"{range_title}\">\
         <input type=\"hidden\" name=\"lang\" value=\"{tag}\">\
         <label>{from_label} <input type=\"date\" name=\"from\" value=\"{from}\"></label>\
         <label>{to_label} <input type=\"date\" name=\"to\" value=\"{to}\"></label>\
         <label>{by_label} <select name=\"by\">{options}</select></label>\
         <button type=\"submit\">{show}</button></form>\
         <div id=\"live\">{panel}</div></main>\
         <script src=\"/dashboard/assets/dashboard.js\" defer></script></body></html>",
        skip = escape(lang.t("skip_to_content")),
        title = escape(lang.t("title")),
        who = escape(&lang.tf("provider", &[("id", &view.provider_id)])),
        nav = language_nav(lang, q),
        out_label = escape(lang.t("sign_out")),
        pid = url_encode(&view.provider_id),
        panel_query = escape(&query(q, lang)),
        position = view.figures.ledger_position,
        mark = escape(&url_encode(&view.reliability.reports_mark)),
        live = escape(lang.t("live_connected")),
        reconnecting = escape(lang.t("live_reconnecting")),
        range_title = escape(lang.t("range_title")),
        tag = lang.tag(),
        from_label = escape(lang.t("range_from")),
        from = escape(&range_value(view, true, q.from.as_deref())),
        to_label = escape(lang.t("range_to")),
        to = escape(&range_value(view, false, q.to.as_deref())),
        by_label = escape(lang.t("group_by")),
        options = ["day", "week", "month"]
            .iter()
            .map(|b| format!(
                "<option value=\"{b}\"{}>{}</option>",
                if *b == by { " selected" } else { "" },
                escape(lang.t(&format!("by_{b}")))
            ))
            .collect::<String>(),
        show = escape(lang.t("show")),
        panel = panel(view),
    );
    out
}

/// The date a range field shows: the one asked for, else the report's.
fn range_value(view: &PanelView, from: bool, asked: Option<&str>) -> String {
    if let Some(a) = asked.filter(|a| !a.is_empty()) {
        return a.to_owned();
    }
    match &view.history {
        Ok(h) => ymd(if from {
            h.periods.from_ms
        } else {
            h.periods.to_ms
        }),
        Err(_) => String::new(),
    }
}

/// `YYYY-MM-DD` of an instant, UTC.
fn ymd(ms: i64) -> String {
    crate::domain::time::date_of_ms(ms).to_string()
}

/// The live part: current period, balances, next payout, history, GPUs, payouts, downloads.
pub fn panel(view: &PanelView) -> String {
    let lang = view.lang;
    let f = &view.figures;
    let mut out = String::new();
    let _ = write!(
        out,
        "<section aria-labelledby=\"h-current\"><h2 id=\"h-current\">{title}</h2>\
         <p class=\"asof\">{asof}</p><div class=\"cards\">{week}{month}{next}</div>",
        title = escape(lang.t("current_period")),
        asof = escape(&lang.tf("as_of", &[("time", &lang.date_time(f.now_ms))])),
        week = period_card(lang, "week_to_date", "week-net", &f.periods.week),
        month = period_card(lang, "month_to_date", "month-net", &f.periods.month),
        next = next_payout_card(lang, f.next_payout.as_ref()),
    );
    let b = &f.balances;
    let _ = write!(
        out,
        "<h3>{title}</h3><dl class=\"balances\">\
         <div><dt>{a}</dt><dd>{av}</dd></div><div><dt>{h}</dt><dd>{hv}</dd></div>\
         <div><dt>{t}</dt><dd>{tv}</dd></div><div><dt>{p}</dt><dd>{pv}</dd></div></dl></section>",
        title = escape(lang.t("balances")),
        a = escape(lang.t("available")),
        av = money(lang, b.payable_micro_usdc, Some("available")),
        h = escape(lang.t("held")),
        hv = money(lang, b.held_micro_usdc, Some("held")),
        t = escape(lang.t("in_transit")),
        tv = money(lang, b.in_transit_micro_usdc, Some("in-transit")),
        p = escape(lang.t("paid_lifetime")),
        pv = money(lang, b.paid_micro_usdc, Some("paid-lifetime")),
    );
    super::reliability::section(&mut out, lang, &view.reliability);
    history_section(&mut out, view);
    gpus_section(&mut out, view);
    payouts_section(
        &mut out,
        view,
        "payouts_pending",
        "h-pending",
        &view.pending,
    );
    payouts_section(&mut out, view, "payouts_history", "h-history", &view.past);
    downloads_section(&mut out, view);
    out
}

fn period_card(lang: Lang, title_key: &str, id: &str, t: &EarningsTotals) -> String {
    format!(
        "<article class=\"card\"><h3>{title}</h3><p class=\"big\">{net}</p><p class=\"label\">{net_label}</p>\
         <dl><div><dt>{g}</dt><dd>{gv}</dd></div><div><dt>{f}</dt><dd>{fv}</dd></div>\
         <div><dt>{h}</dt><dd>{hv}</dd></div></dl></article>",
        title = escape(lang.t(title_key)),
        net = money(lang, t.net_micro_usdc, Some(id)),
        net_label = escape(lang.t("net")),
        g = escape(lang.t("gross")),
        gv = money(lang, t.gross_micro_usdc, None),
        f = escape(lang.t("fee")),
        fv = money(lang, t.fee_micro_usdc, None),
        h = escape(lang.t("gpu_hours")),
        hv = escape(&lang.hours(t.duration_ms)),
    )
}

fn run_label(lang: Lang, kind: &str) -> &'static str {
    match kind {
        "weekly" => lang.t("run_weekly"),
        "monthly" => lang.t("run_monthly"),
        _ => "",
    }
}

fn date_text(lang: Lang, ymd: &str) -> String {
    NaiveDate::parse_from_str(ymd, "%Y-%m-%d")
        .map(|d| lang.date(d))
        .unwrap_or_else(|_| ymd.to_owned())
}

fn next_payout_card(lang: Lang, next: Option<&crate::ledger::runs::ProjectedPayout>) -> String {
    let body = match next {
        None => format!("<p>{}</p>", escape(lang.t("next_payout_none"))),
        Some(p) => {
            let decision_key = format!("decision_{}", p.decision);
            let decision = match lang.t(&decision_key) {
                "" => p.decision.clone(),
                text => text.to_owned(),
            };
            format!(
                "<p class=\"big\">{amount}</p><p class=\"label\"><time datetime=\"{date}\">{date_text}</time>, {run}</p>\
                 <p id=\"next-decision\">{decision}</p>",
                amount = money(lang, p.amount_micro_usdc, Some("next-amount")),
                date = escape(&p.run_date),
                date_text = escape(&date_text(lang, &p.run_date)),
                run = escape(run_label(lang, &p.run_kind)),
                decision = escape(&decision),
            )
        }
    };
    format!(
        "<article class=\"card\"><h3>{}</h3>{body}</article>",
        escape(lang.t("next_payout"))
    )
}

/// A period key as text: a day, the week from its Monday, a month.
fn period_text(lang: Lang, by: EarningsBy, key: &str, short: bool) -> String {
    match by {
        EarningsBy::Month => {
            let mut parts = key.split('-');
            match (
                parts.next().and_then(|y| y.parse().ok()),
                parts.next().and_then(|m| m.parse().ok()),
            ) {
                (Some(y), Some(m)) => lang.month(y, m),
                _ => key.to_owned(),
            }
        }
        EarningsBy::Week | EarningsBy::Day => {
            let Ok(d) = NaiveDate::parse_from_str(key, "%Y-%m-%d") else {
                return key.to_owned();
            };
            let date = if short {
                lang.short_date(d)
            } else {
                lang.date(d)
            };
            if by == EarningsBy::Week && !short {
                lang.tf("week_of", &[("date", &date)])
            } else {
                date
            }
        }
        _ => key.to_owned(),
    }
}

fn figures_table(
    lang: Lang,
    caption: &str,
    first: &str,
    rows: &[(String, &EarningsTotals)],
) -> String {
    let mut out = format!(
        "<details><summary>{}</summary><div class=\"scroll\"><table><caption>{}</caption><thead><tr>\
         <th scope=\"col\">{}</th><th scope=\"col\">{}</th><th scope=\"col\">{}</th><th scope=\"col\">{}</th><th scope=\"col\">{}</th>\
         </tr></thead><tbody>",
        escape(lang.t("chart_table")),
        escape(caption),
        escape(first),
        escape(lang.t("net")),
        escape(lang.t("gross")),
        escape(lang.t("fee")),
        escape(lang.t("gpu_hours")),
    );
    for (key, t) in rows {
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(key),
            money(lang, t.net_micro_usdc, None),
            money(lang, t.gross_micro_usdc, None),
            money(lang, t.fee_micro_usdc, None),
            escape(&lang.hours(t.duration_ms)),
        );
    }
    out.push_str("</tbody></table></div></details>");
    out
}

fn chart_figure(lang: Lang, id: &str, title_key: &str, svg: String, table: String) -> String {
    format!(
        "<figure class=\"chart\" aria-labelledby=\"{id}\"><figcaption id=\"{id}\">{}</figcaption>{svg}{table}</figure>",
        escape(lang.t(title_key)),
    )
}

fn history_section(out: &mut String, view: &PanelView) {
    let lang = view.lang;
    let _ = write!(
        out,
        "<section aria-labelledby=\"h-history-range\"><h2 id=\"h-history-range\">{}</h2>",
        escape(lang.t("range_title"))
    );
    match &view.history {
        Err(detail) => {
            let _ = write!(
                out,
                "<p class=\"error\" role=\"alert\">{}</p>",
                escape(&lang.tf("error_range", &[("detail", detail)]))
            );
        }
        Ok(h) => history_body(out, lang, h),
    }
    out.push_str("</section>");
}

/// The rows of a chart's table: each group's label and totals.
fn rows<'a>(
    groups: &'a [EarningsGroup],
    label: &dyn Fn(&EarningsGroup) -> String,
) -> Vec<(String, &'a EarningsTotals)> {
    groups.iter().map(|g| (label(g), &g.totals)).collect()
}

/// The bars of a chart: each group's label and net earnings.
fn bars(groups: &[EarningsGroup], label: &dyn Fn(&EarningsGroup) -> String) -> Vec<Bar> {
    groups
        .iter()
        .map(|g| Bar {
            label: label(g),
            micro_usdc: g.totals.net_micro_usdc,
        })
        .collect()
}

/// The chart over time and its table: every period of the range, zero where nothing was
/// earned, so the time axis has no gaps.
fn periods_figure(out: &mut String, lang: Lang, h: &History) {
    let by = h.by;
    let short = |g: &EarningsGroup| period_text(lang, by, &g.key, true);
    let long = |g: &EarningsGroup| period_text(lang, by, &g.key, false);
    let (periods, left_out) = crate::report::every_period(&h.periods, super::PAGE_PERIODS_MAX);
    out.push_str(&chart_figure(
        lang,
        "chart-periods",
        "chart_periods",
        chart::columns(&bars(&periods, &short), lang, lang.t("chart_periods")),
        figures_table(
            lang,
            lang.t("chart_periods"),
            lang.t("period"),
            &rows(&periods, &long),
        ),
    ));
    if left_out > 0 {
        let _ = write!(
            out,
            "<p>{}</p>",
            escape(&lang.tf("more_periods", &[("count", &periods.len().to_string())]))
        );
    }
}

fn history_body(out: &mut String, lang: Lang, h: &History) {
    let t = &h.periods.totals;
    let _ = write!(
        out,
        "<p id=\"range-totals\">{}</p>",
        escape(&lang.tf(
            "range_totals",
            &[
                ("net", &lang.usdc(t.net_micro_usdc)),
                ("gross", &lang.usdc(t.gross_micro_usdc)),
                ("fee", &lang.usdc(t.fee_micro_usdc)),
                ("hours", &lang.hours(t.duration_ms)),
            ]
        ))
    );
    if h.periods.groups.is_empty() {
        let _ = write!(out, "<p>{}</p>", escape(lang.t("no_usage")));
        return;
    }
    periods_figure(out, lang, h);
    let key = |g: &EarningsGroup| g.key.clone();
    out.push_str("<div class=\"pair\">");
    out.push_str(&chart_figure(
        lang,
        "chart-gpus",
        "chart_gpus",
        chart::rows(&bars(&h.by_gpu.groups, &key), lang, lang.t("chart_gpus")),
        figures_table(
            lang,
            lang.t("chart_gpus"),
            lang.t("gpu"),
            &rows(&h.by_gpu.groups, &key),
        ),
    ));
    out.push_str(&chart_figure(
        lang,
        "chart-models",
        "chart_models",
        chart::rows(
            &bars(&h.by_model.groups, &key),
            lang,
            lang.t("chart_models"),
        ),
        figures_table(
            lang,
            lang.t("chart_models"),
            lang.t("model"),
            &rows(&h.by_model.groups, &key),
        ),
    ));
    out.push_str("</div>");
}

fn gpus_section(out: &mut String, view: &PanelView) {
    let lang = view.lang;
    let _ = write!(
        out,
        "<section aria-labelledby=\"h-gpus\"><h2 id=\"h-gpus\">{title}</h2><div class=\"scroll\"><table id=\"gpus\"><thead><tr>\
         <th scope=\"col\">{gpu}</th><th scope=\"col\">{model}</th><th scope=\"col\">{registered}</th>\
         <th scope=\"col\">{week}</th><th scope=\"col\">{month}</th><th scope=\"col\">{lifetime}</th></tr></thead><tbody>",
        title = escape(lang.t("gpus_title")),
        gpu = escape(lang.t("gpu")),
        model = escape(lang.t("model")),
        registered = escape(lang.t("registered")),
        week = escape(lang.t("week_to_date")),
        month = escape(lang.t("month_to_date")),
        lifetime = escape(lang.t("lifetime")),
    );
    let shown = view.gpus.len().min(super::PAGE_GPUS_MAX as usize);
    for g in &view.gpus[..shown] {
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&g.gpu_id),
            escape(&g.model),
            escape(&lang.date_of_ms(g.registered_at_ms)),
            money(lang, g.week.net_micro_usdc, None),
            money(lang, g.month.net_micro_usdc, None),
            money(lang, g.lifetime.net_micro_usdc, None),
        );
    }
    out.push_str("</tbody></table></div>");
    if view.gpus.len() > shown {
        let _ = write!(
            out,
            "<p>{}</p>",
            escape(&lang.tf("more_gpus", &[("count", &shown.to_string())]))
        );
    }
    out.push_str("</section>");
}

fn status_text(lang: Lang, status: &str) -> String {
    match lang.t(&format!("status_{status}")) {
        "" => status.to_owned(),
        text => text.to_owned(),
    }
}

fn payouts_section(
    out: &mut String,
    view: &PanelView,
    title_key: &str,
    id: &str,
    rows: &[PayoutRow],
) {
    let lang = view.lang;
    let _ = write!(
        out,
        "<section aria-labelledby=\"{id}\"><h2 id=\"{id}\">{}</h2>",
        escape(lang.t(title_key))
    );
    if rows.is_empty() {
        let _ = write!(out, "<p>{}</p></section>", escape(lang.t("no_payouts")));
        return;
    }
    let _ = write!(
        out,
        "<div class=\"scroll\"><table><thead><tr><th scope=\"col\">{}</th><th scope=\"col\">{}</th><th scope=\"col\">{}</th>\
         <th scope=\"col\">{}</th><th scope=\"col\">{}</th><th scope=\"col\">{}</th></tr></thead><tbody>",
        escape(lang.t("created")),
        escape(lang.t("run")),
        escape(lang.t("rail")),
        escape(lang.t("status")),
        escape(lang.t("amount")),
        escape(lang.t("details")),
    );
    for p in rows {
        let mut amount = money(lang, p.amount_micro_usdc, None);
        if let Some(cents) = p.amount_eur_cents {
            let _ = write!(
                amount,
                "<br>{}",
                escape(&format!("{} EUR", lang.decimal(cents, 2)))
            );
        }
        let details = match (p.rail.as_str(), &p.reference) {
            ("solana", Some(sig)) => format!(
                "<a href=\"{}\" rel=\"noopener noreferrer\" target=\"_blank\">{}</a>",
                escape(&crate::report::explorer_url(sig, &view.explorer_cluster)),
                escape(lang.t("view_transaction"))
            ),
            (_, Some(batch)) => {
                let reference = escape(&lang.tf(
                    "bank_reference",
                    &[
                        ("batch", batch),
                        ("reference", p.end_to_end_id.as_deref().unwrap_or("—")),
                    ],
                ));
                match bank_answer(lang, p) {
                    Some(answer) => format!(
                        "{reference}<br><span class=\"bank-answer\">{}</span>",
                        escape(&answer)
                    ),
                    None => reference,
                }
            }
            (_, None) => p
                .hold_reason
                .as_deref()
                .or(p.failure_reason.as_deref())
                .map(escape)
                .unwrap_or_default(),
        };
        let details = format!(
            "{details}<br><a href=\"/dashboard/statements/{}\">{}</a>",
            escape(&url_encode(&p.payout_id)),
            escape(lang.t("statement_link"))
        );
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"why\">{}</td></tr>",
            escape(&lang.date_time(p.created_at_ms)),
            escape(run_label(lang, &p.run_kind)),
            escape(&p.run_key),
            escape(&p.rail.as_str().to_uppercase()),
            escape(&status_text(lang, p.status.as_str())),
            amount,
            details,
        );
    }
    out.push_str("</tbody></table></div></section>");
}

/// What the bank answered of a returned or rejected bank payout, and what to do, in the
/// page's language; `None` for any other payout.
fn bank_answer(lang: Lang, p: &PayoutRow) -> Option<String> {
    if !p.rail.is_bank() {
        return None;
    }
    let key = match p.status {
        PayoutStatus::Returned => "bank_returned",
        PayoutStatus::Failed => "bank_rejected",
        _ => return None,
    };
    let stored = p.failure_reason.as_deref()?;
    Some(lang.tf(key, &[("reason", &bank_reason(lang, stored))]))
}

/// The engine's reason of a bank's answer (`AC04: Closed account number: …`, its code
/// first) as `Konto aufgelöst: … (AC04)`: the code's description from the i18n files
/// (`bank_reason_{CODE}`, one for every code `settle_bank::ReturnReason` knows), or the
/// bare code for one it does not know.
pub(crate) fn bank_reason(lang: Lang, stored: &str) -> String {
    let code = stored.split(':').next().unwrap_or_default().trim();
    match settle_bank::ReturnReason::parse(code) {
        Ok(r) => lang.tf(
            "bank_reason",
            &[
                ("description", lang.t(&format!("bank_reason_{}", r.code()))),
                ("code", r.code()),
            ],
        ),
        Err(_)
            if (2..=8).contains(&code.len()) && code.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            lang.tf("bank_reason_unknown", &[("code", code)])
        }
        Err(_) => stored.to_owned(),
    }
}

fn downloads_section(out: &mut String, view: &PanelView) {
    let lang = view.lang;
    let pid = url_encode(&view.provider_id);
    let range = match &view.history {
        Ok(h) => format!(
            "?from={}&to={}&group_by={}",
            ymd(h.periods.from_ms),
            ymd(h.periods.to_ms),
            h.by.as_str()
        ),
        Err(_) => String::new(),
    };
    let _ = write!(
        out,
        "<section aria-labelledby=\"h-downloads\"><h2 id=\"h-downloads\">{}</h2><ul class=\"downloads\">\
         <li><a href=\"/v1/providers/{pid}/earnings.csv{}\" download>{}</a></li>\
         <li><a href=\"/v1/providers/{pid}/payouts.csv\" download>{}</a></li></ul></section>",
        escape(lang.t("downloads")),
        escape(&range),
        escape(lang.t("download_earnings")),
        escape(lang.t("download_payouts")),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::Rail;

    #[test]
    fn text_from_outside_is_escaped() {
        assert_eq!(
            escape("<script>\"x\" & 'y'</script>"),
            "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;"
        );
        assert_eq!(url_encode("a b/é"), "a%20b%2F%C3%A9");
    }

    #[test]
    fn every_return_code_the_engine_knows_is_described_in_each_language() {
        for lang in Lang::ALL {
            for r in settle_bank::ReturnReason::all() {
                let key = format!("bank_reason_{}", r.code());
                assert!(!lang.t(&key).is_empty(), "{lang:?} has no {key}");
            }
        }
        assert_eq!(
            bank_reason(
                Lang::En,
                "AC04: Closed account number: the account has been closed"
            ),
            "closed account number: the account has been closed (AC04)"
        );
        assert_eq!(
            bank_reason(Lang::De, "R03: No Account/Unable to Locate Account"),
            "kein Konto, oder das Konto ist nicht auffindbar (R03)"
        );
        assert_eq!(
            bank_reason(Lang::Zh, "MD07: End customer deceased"),
            "账户持有人已故（MD07）"
        );
        assert_eq!(
            bank_reason(Lang::De, "NARR: rejected by the bank"),
            "Code NARR"
        );
        assert_eq!(bank_reason(Lang::En, "something else"), "something else");
    }

    #[test]
    fn a_rejected_or_returned_bank_payout_says_why_and_what_to_do() {
        let row = |rail: Rail, status: PayoutStatus, reason: Option<&str>| PayoutRow {
            payout_id: "po_1".into(),
            provider_id: "prv".parse().unwrap(),
            run_kind: "monthly".into(),
            run_key: "2026-12".into(),
            rail,
            amount_micro_usdc: 1,
            amount_eur_cents: None,
            eur_per_usd: None,
            status,
            hold_reason: None,
            failure_reason: reason.map(str::to_owned),
            reference: Some("b1".into()),
            end_to_end_id: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        let rejected = row(
            Rail::Sepa,
            PayoutStatus::Failed,
            Some("AC01: Incorrect account number"),
        );
        assert_eq!(
            bank_answer(Lang::En, &rejected).unwrap(),
            "Your bank rejected this payout: incorrect account number: it is invalid or missing \
             (AC01). The amount is back in your balance; confirm or update your bank details to \
             be paid again."
        );
        let returned = row(
            Rail::Ach,
            PayoutStatus::Returned,
            Some("R02: Account Closed"),
        );
        assert!(
            bank_answer(Lang::De, &returned).unwrap().starts_with(
                "Ihre Bank hat diese Auszahlung zurückgegeben: Konto aufgelöst (R02)."
            )
        );
        assert!(
            bank_answer(
                Lang::En,
                &row(Rail::Solana, PayoutStatus::Failed, Some("x"))
            )
            .is_none()
        );
        assert!(bank_answer(Lang::En, &row(Rail::Sepa, PayoutStatus::Settled, None)).is_none());
    }

    #[test]
    fn the_sign_in_form_is_labelled_in_each_language() {
        let de = sign_in(Lang::De, Some("<b>".into()));
        assert!(de.starts_with("<!doctype html>\n<html lang=\"de\">"));
        assert!(de.contains("<label for=\"token\">Anbieter-Token</label>"));
        assert!(de.contains("&lt;b&gt;"));
        let zh = sign_in(Lang::Zh, None);
        assert!(zh.contains("<html lang=\"zh-CN\">") && zh.contains(">登录</button>"));
        assert!(!zh.contains("role=\"alert\""));
    }
}
