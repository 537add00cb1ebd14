//! A provider statement as a page (SPEC §13): what it covers, its totals, each event, the
//! anchor it is proven against and the command that checks it. Every text from the ledger
//! is escaped.

use std::fmt::Write as _;

use super::html::escape;
use crate::domain::money::format_micro_usdc;
use crate::domain::time::format_ms;
use crate::statement::check::Statement;

/// Events the page lists (the JSON has all).
pub const PAGE_EVENTS_MAX: usize = 1_000;

/// The signed payable line of an event for `provider_id`, from its stored lines.
fn payable_of(provider_id: &str, lines: &str) -> i64 {
    let account = format!("provider:{provider_id}:payable");
    crate::domain::event::lines_from_json(lines)
        .unwrap_or_default()
        .iter()
        .filter(|l| l.account == account)
        .map(|l| l.amount_micro_usdc)
        .sum()
}

fn usdc(micro: i64) -> String {
    format!("{} USDC", format_micro_usdc(micro))
}

fn events(out: &mut String, s: &Statement) {
    out.push_str(
        "<h2>Events</h2><table class=\"events\"><tr><th>Seq</th><th>Booked</th><th>Event</th>\
         <th>Your balance</th></tr>",
    );
    for e in s.events.iter().take(PAGE_EVENTS_MAX) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            e.seq,
            format_ms(e.recorded_at_ms),
            escape(&e.event_type),
            usdc(payable_of(&s.provider_id, &e.lines))
        );
    }
    out.push_str("</table>");
    if s.events.len() > PAGE_EVENTS_MAX {
        let _ = write!(
            out,
            "<p>{} more events in the JSON.</p>",
            s.events.len() - PAGE_EVENTS_MAX
        );
    }
}

/// The page of `s`; `json_href` is where its JSON is downloaded, `rpc` the Solana endpoint
/// the check command names.
pub fn page(s: &Statement, json_href: &str, rpc: &str) -> String {
    let mut out = String::new();
    let title = match (&s.payout, &s.period) {
        (Some(p), _) => format!("Statement of payout {}", p.payout_id),
        (_, Some(p)) => format!("Statement {} – {}", p.from, p.to),
        _ => "Statement".to_owned(),
    };
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"stylesheet\" href=\"/dashboard/assets/dashboard.css\"></head><body>\
         <main class=\"statement\"><h1>{t}</h1><p>Provider <b>{p}</b>, events {a} to {b} of its \
         ledger stream.</p>",
        t = escape(&title),
        p = escape(&s.provider_id),
        a = s.events.first().map_or(0, |e| e.seq),
        b = s.events.last().map_or(0, |e| e.seq),
    );
    let t = &s.totals;
    let _ = write!(
        out,
        "<h2>Totals</h2><table class=\"totals\"><tr><th>Events</th><td>{}</td></tr>\
         <tr><th>Gross</th><td>{}</td></tr><tr><th>Platform fee</th><td>{}</td></tr>\
         <tr><th>Earned</th><td>{}</td></tr><tr><th>Paid out</th><td>{}</td></tr></table>",
        t.events,
        usdc(t.gross_micro_usdc),
        usdc(t.fee_micro_usdc),
        usdc(t.earned_micro_usdc),
        usdc(t.paid_out_micro_usdc)
    );
    if let Some(p) = &s.payout {
        let _ = write!(
            out,
            "<p>Payout <b>{}</b>: {}; statement hash <code>{}</code>.</p>",
            escape(&p.payout_id),
            usdc(p.amount_micro_usdc),
            escape(&p.statement_hash)
        );
    }
    events(&mut out, s);
    let a = &s.proof.anchor;
    let _ = write!(
        out,
        "<h2>Proof</h2><p>Anchor {} ({}) signed by <code>{}</code> leads to root \
         <code>{}</code>{}.</p><p>Check it yourself, with nothing but this file and the public \
         chain: <a href=\"{}\" download>download the statement (JSON)</a>, then run \
         <code>settle statement verify statement.json --rpc {}</code>.</p>",
        a.n,
        escape(&a.at),
        escape(&a.key),
        escape(&s.proof.final_root),
        s.proof.published.as_ref().map_or(
            " (not published yet: published once a day)".to_owned(),
            |p| format!(
                ", published on Solana in transaction <code>{}</code>",
                escape(&p.signature)
            )
        ),
        escape(json_href),
        escape(rpc)
    );
    out.push_str("</main></body></html>");
    out
}
