//! Helpers of the bank rail tests: a scenario world (ledger on a fresh database with a
//! clock the test moves), the official XSD check of SEPA files (xmllint), checks of the
//! SEPA rules the XSD does not cover, and an independent NACHA file checker.

use crate::common::Tables;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use settle::config::BankConfig;
use settle::domain::event::accounts;
use settle::domain::money::{div_round_half_even, format_micro_usdc};
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::ledger::payouts::PayoutRecord;
use settle::ledger::runs::{self, RunConfig, RunReport};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::wire::import::{apply, parse_line};
use settle_calendar::Calendar;
use sqlx::Row;

use crate::common::TestDb;

pub const SOLANA: &str =
    r#"{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}"#;
pub const SEPA_DE: &str =
    r#"{"kind":"sepa","iban":"DE89370400440532013000","bic":"COBADEFFXXX","holder":"Bee GmbH"}"#;
/// A French IBAN and a holder the SEPA set cannot write as entered.
pub const SEPA_FR: &str = r#"{"kind":"sepa","iban":"FR1420041010050500013M02606","holder":"Zoë Müller-Łukasiewicz & Søn «GPU»"}"#;
pub const SEPA_DE_NEW: &str =
    r#"{"kind":"sepa","iban":"DE02120300000000202051","holder":"Bee GmbH"}"#;
pub const ACH_BUSINESS: &str = r#"{"kind":"ach","routing":"021000021","account":"123456789","account_type":"checking","holder":"Acme Compute LLC","entity":"business"}"#;
pub const ACH_INDIVIDUAL: &str = r#"{"kind":"ach","routing":"011000015","account":"9876-5432","account_type":"savings","holder":"Jane Doe","entity":"individual"}"#;

pub const USDC: i64 = 1_000_000;

pub struct World {
    pub db: TestDb,
    pub ledger: Ledger,
    pub clock: Arc<ManualClock>,
    pub calendar: Calendar,
    pub runs: RunConfig,
    pub bank: BankConfig,
    pub outbox: tempfile::TempDir,
    next_event: AtomicU64,
}

/// Net of a usage event of `gross` at the community fee (2000 bps).
pub fn community_net(gross_micro_usdc: i64) -> i64 {
    gross_micro_usdc - div_round_half_even(i128::from(gross_micro_usdc) * 2000, 10_000) as i64
}

impl World {
    pub async fn new(now: &str) -> World {
        let db = TestDb::new().await;
        let (ledger, clock) = db.ledger_at(now).await;
        let outbox = tempfile::tempdir().expect("outbox dir");
        let bank = BankConfig {
            outbox_dir: outbox.path().join("bank").display().to_string(),
            ..BankConfig::default()
        };
        World {
            db,
            ledger,
            clock,
            calendar: Calendar::platform_default(),
            runs: RunConfig::default(),
            bank,
            outbox,
            next_event: AtomicU64::new(1),
        }
    }

    pub fn at(&self, now: &str) {
        let t = parse_rfc3339_ms(now).expect("valid instant");
        assert!(t >= self.ledger.now_ms(), "the clock only moves forward");
        self.clock.set(t);
    }

    pub fn actor(&self) -> Actor {
        Actor::operator("test")
    }

    pub async fn import(&self, lines: &[String]) {
        for line in lines {
            let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            apply(&self.ledger, &command, &self.actor())
                .await
                .unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    /// Registers a provider with one GPU `{id}-g0`, paid monthly by `method`.
    pub async fn provider(&self, id: &str, method: &str) {
        self.import(&[
            format!(
                r#"{{"type":"provider.register","provider_id":"{id}","name":"Provider {id}","email":"ops@{id}.test","tier":"community","schedule":"monthly","payout_method":{method}}}"#
            ),
            format!(
                r#"{{"type":"gpu.register","gpu_id":"{id}-g0","provider_id":"{id}","model":"H100-80GB"}}"#
            ),
            // The price book the usage rate of `earn` is checked against (SPEC §2).
            format!(
                r#"{{"type":"rate.set","provider_id":"{id}","model":"H100-80GB","rate_usdc_per_hour":"3.6","effective_from":"2026-01-01T00:00:00Z"}}"#
            ),
        ])
        .await;
    }

    pub async fn update_method(&self, id: &str, method: &str) {
        self.import(&[format!(
            r#"{{"type":"provider.update","provider_id":"{id}","payout_method":{method}}}"#
        )])
        .await;
    }

    /// Books usage of exactly `gross_micro_usdc` (rate 3.6 USDC/h = 1 µUSDC per ms) from
    /// `started_at`; returns the net.
    pub async fn earn(&self, provider: &str, gross_micro_usdc: i64, started_at: &str) -> i64 {
        let start = parse_rfc3339_ms(started_at).expect("valid start");
        let end = start + gross_micro_usdc;
        let event_id = format!("ev-{}", self.next_event.fetch_add(1, Ordering::SeqCst));
        self.import(&[format!(
            r#"{{"type":"usage","event_id":"{event_id}","provider_id":"{provider}","gpu_id":"{provider}-g0","started_at":"{}","ended_at":"{}","rate_usdc_per_hour":"3.6"}}"#,
            format_ms(start),
            format_ms(end)
        )])
        .await;
        community_net(gross_micro_usdc)
    }

    pub async fn adjust(&self, provider: &str, adjustment_id: &str, amount_micro_usdc: i64) {
        self.import(&[format!(
            r#"{{"type":"adjustment","adjustment_id":"{adjustment_id}","provider_id":"{provider}","amount_usdc":"{}","reason":"test"}}"#,
            format_micro_usdc(amount_micro_usdc)
        )])
        .await;
    }

    /// Records an FX rate under a new `fx_id`, so the same rate again refreshes it (a
    /// line without a key that repeats the rate in force is a duplicate).
    pub async fn fx(&self, eur_per_usd: &str) {
        let fx_id = format!("fx-{}", self.next_event.fetch_add(1, Ordering::SeqCst));
        self.import(&[format!(
            r#"{{"type":"fx.rate_set","fx_id":"{fx_id}","eur_per_usd":"{eur_per_usd}"}}"#
        )])
        .await;
    }

    pub async fn monthly(&self, month: &str) -> RunReport {
        self.ledger
            .run_payouts(
                runs::monthly_key(month).unwrap(),
                &self.calendar,
                &self.runs,
                &Actor::system("test-run"),
            )
            .await
            .unwrap_or_else(|e| panic!("monthly {month}: {e}"))
    }

    /// The provider as the registry reads it (method, and whether it is blocked).
    pub async fn provider_record(&self, id: &str) -> settle::ledger::registry::ProviderRecord {
        self.ledger.provider_record(id).await.unwrap().unwrap()
    }

    /// A payout, its method's bank details opened.
    pub async fn payout(&self, payout_id: &str) -> PayoutRecord {
        let p = settle::ledger::payouts::payout(&self.ledger.store, payout_id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no payout {payout_id}"));
        let mut opened = [p];
        self.ledger.open_payout_methods(&mut opened).await.unwrap();
        let [p] = opened;
        p
    }

    /// The payouts a generated batch holds, in file order, as recorded on the ledger.
    pub async fn batch_payout_ids(&self, o: &settle::rails::bank::BatchOutcome) -> Vec<String> {
        settle::rails::bank::batch(&self.ledger.store, &o.batch.batch_id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no batch {}", o.batch.batch_id))
            .payout_ids
    }

    pub async fn payouts_of(&self, provider: &str) -> Vec<PayoutRecord> {
        settle::ledger::payouts::provider_payouts(&self.ledger.store, provider)
            .await
            .unwrap()
    }

    /// A provider's balance of `account`.
    pub async fn balance(&self, provider: &str, account: &str) -> i64 {
        // Payout commands leave the aggregates to the projector; a reader folds first.
        let stream = format!("provider:{provider}");
        self.ledger.store.catch_up(&[&stream]).await.unwrap();
        sqlx::query(
            "SELECT balance_micro_usdc FROM account_balances WHERE owner = $1 AND account = $2",
        )
        .bind(format!("provider:{provider}"))
        .bind(account)
        .fetch_optional(self.ledger.store.pool())
        .await
        .unwrap()
        .map(|r| r.get::<i64, _>(0))
        .unwrap_or(0)
    }

    pub async fn payable(&self, provider: &str) -> i64 {
        self.balance(provider, &accounts::payable(provider)).await
    }

    pub async fn treasury_bank(&self, provider: &str) -> i64 {
        self.balance(provider, accounts::TREASURY_BANK).await
    }

    pub async fn in_transit(&self, provider: &str) -> i64 {
        self.balance(provider, &accounts::in_transit(provider))
            .await
    }

    /// `verify` clean, every event matches its schema, and every provider's in-transit
    /// balance equals its created and submitted payouts.
    pub async fn check(&self) {
        let report = settle::verify::verify(&self.ledger.store, &|_| {})
            .await
            .unwrap();
        assert!(report.ok(), "verify: {:?}", report.problems);
        crate::common::assert_events_match_schemas(&self.ledger.store).await;
        let providers: Vec<String> = sqlx::query("SELECT provider_id FROM providers")
            .fetch_all(self.ledger.store.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for p in providers {
            let in_flight: i64 = self
                .payouts_of(&p)
                .await
                .iter()
                .filter(|x| matches!(x.status.as_str(), "created" | "submitted"))
                .map(|x| x.amount_micro_usdc)
                .sum();
            assert_eq!(self.in_transit(&p).await, in_flight, "{p}: in transit");
        }
    }
}

/// The official `pain.001.001.09` XSD check (xmllint), when the machine has both; else
/// `None`, reported by `settle_prereq` as the skipped "XSD validation" step of the
/// calling test (a failure in CI). Take it outside `catch_unwind`: there a missing
/// prerequisite in CI would pass for the panic the test expects.
#[track_caller]
pub fn pain001_schema() -> Option<settle_prereq::Pain001Schema> {
    settle_prereq::require_step("XSD validation", settle_prereq::pain001_schema())
}

/// Validates a SEPA file against the official XSD with `xmllint`; panics with its output.
/// Without xmllint or the XSD (outside CI) the step is reported skipped and the test goes
/// on with its other checks.
#[track_caller]
pub fn assert_valid_pain001(path: &Path) {
    if let Some(schema) = pain001_schema() {
        schema.assert_valid(path);
    }
}

/// The contents of every `<tag …>…</tag>` element in `xml` (not nested in itself).
pub fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let open_plain = format!("<{tag}>");
    let open_attr = format!("<{tag} ");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    loop {
        let start = match (rest.find(&open_plain), rest.find(&open_attr)) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => break,
        };
        let after_open = match rest[start..].find('>') {
            Some(i) => start + i + 1,
            None => break,
        };
        let end = rest[after_open..]
            .find(&close)
            .map(|i| after_open + i)
            .unwrap_or_else(|| panic!("unclosed <{tag}>"));
        out.push(&rest[after_open..end]);
        rest = &rest[end + close.len()..];
    }
    out
}

pub fn element<'a>(xml: &'a str, tag: &str) -> &'a str {
    let all = elements(xml, tag);
    assert!(!all.is_empty(), "no <{tag}>");
    all[0]
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// Runs a checker that should panic; `Some(what its panic said)`, or `None` if it passed.
pub fn panic_message(check: impl FnOnce() + std::panic::UnwindSafe) -> Option<String> {
    let payload = std::panic::catch_unwind(check).err()?;
    Some(
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default(),
    )
}

/// Parses `"123.45"` (exactly two decimals) into cents; panics otherwise.
pub fn cents(text: &str) -> i64 {
    let (whole, frac) = text
        .split_once('.')
        .unwrap_or_else(|| panic!("amount {text:?} has no decimals"));
    assert!(
        !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && frac.len() == 2
            && frac.bytes().all(|b| b.is_ascii_digit()),
        "amount {text:?} must have exactly two decimals"
    );
    whole.parse::<i64>().unwrap() * 100 + frac.parse::<i64>().unwrap()
}

fn is_sepa_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "/-?:().,'+ ".contains(c)
}

/// One credit transfer as read back from a SEPA file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SepaTx {
    pub execution_date: String,
    pub end_to_end_id: String,
    pub amount_eur_cents: i64,
    pub creditor_name: String,
    pub creditor_iban: String,
    pub creditor_bic: Option<String>,
    pub remittance: Option<String>,
}

/// Checks the SEPA rules the XSD does not: amounts with exactly two decimals and positive,
/// `Ccy="EUR"`, the SEPA character set in every text, names ≤ 70, references ≤ 35,
/// remittance ≤ 140, `NbOfTxs` and `CtrlSum` of the group and of each `PmtInf` equal to
/// the count and sum of its transfers, unique end-to-end ids. Returns `(msg_id, CtrlSum in
/// cents, transfers)`.
pub fn check_sepa_rules(xml: &str) -> (String, i64, Vec<SepaTx>) {
    // Every text node is in the SEPA set (after unescaping).
    for (i, line) in xml.lines().enumerate().skip(1) {
        let t = line.trim();
        if let (Some(open_end), Some(close)) = (t.find('>'), t.rfind("</"))
            && close > open_end
        {
            let text = unescape(&t[open_end + 1..close]);
            assert!(
                text.chars().all(is_sepa_char),
                "line {}: {text:?} leaves the SEPA character set",
                i + 1
            );
        }
    }
    let group = element(xml, "GrpHdr");
    let msg_id = element(group, "MsgId").to_owned();
    assert!(msg_id.chars().count() <= 35, "MsgId {msg_id} too long");
    let group_sum = cents(element(group, "CtrlSum"));
    let group_count: usize = element(group, "NbOfTxs").parse().unwrap();
    assert!(
        unescape(element(element(group, "InitgPty"), "Nm"))
            .chars()
            .count()
            <= 70,
        "InitgPty name too long"
    );
    let mut txs = Vec::new();
    for info in elements(xml, "PmtInf") {
        let id = element(info, "PmtInfId");
        assert!(id.chars().count() <= 35, "PmtInfId {id} too long");
        let date = element(element(info, "ReqdExctnDt"), "Dt").to_owned();
        assert!(
            unescape(element(element(info, "Dbtr"), "Nm"))
                .chars()
                .count()
                <= 70,
            "debtor name too long"
        );
        let mut sum = 0;
        let transfers = elements(info, "CdtTrfTxInf");
        for t in &transfers {
            let amount_tag = elements(t, "InstdAmt");
            assert_eq!(amount_tag.len(), 1);
            assert!(
                t.contains(r#"<InstdAmt Ccy="EUR">"#),
                "transfers are in EUR"
            );
            let amount = cents(amount_tag[0]);
            assert!(amount > 0, "a transfer of {amount} cents");
            sum += amount;
            let e2e = element(t, "EndToEndId").to_owned();
            assert!(e2e.chars().count() <= 35, "EndToEndId {e2e} too long");
            let name = unescape(element(element(t, "Cdtr"), "Nm"));
            assert!(
                !name.is_empty() && name.chars().count() <= 70,
                "creditor name {name:?}"
            );
            let remittance = elements(t, "Ustrd").first().map(|u| unescape(u));
            if let Some(r) = &remittance {
                assert!(r.chars().count() <= 140, "remittance too long");
            }
            let bic = elements(t, "CdtrAgt")
                .first()
                .map(|a| element(a, "BICFI").to_owned());
            txs.push(SepaTx {
                execution_date: date.clone(),
                end_to_end_id: e2e,
                amount_eur_cents: amount,
                creditor_name: name,
                creditor_iban: element(element(t, "CdtrAcct"), "IBAN").to_owned(),
                creditor_bic: bic,
                remittance,
            });
        }
        assert_eq!(
            cents(element(info, "CtrlSum")),
            sum,
            "PmtInf CtrlSum = sum of its transfers"
        );
        assert_eq!(
            element(info, "NbOfTxs").parse::<usize>().unwrap(),
            transfers.len()
        );
    }
    assert_eq!(group_count, txs.len(), "GrpHdr NbOfTxs");
    assert_eq!(
        group_sum,
        txs.iter().map(|t| t.amount_eur_cents).sum::<i64>(),
        "GrpHdr CtrlSum = sum of InstdAmt"
    );
    let mut ids: Vec<&str> = txs.iter().map(|t| t.end_to_end_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), txs.len(), "end-to-end ids are unique");
    (msg_id, group_sum, txs)
}

/// The ABA check digit rule: 3-7-1 weights over the nine digits sum to a multiple of 10.
pub fn aba_ok(routing: &str) -> bool {
    routing.len() == 9
        && routing.bytes().all(|b| b.is_ascii_digit())
        && routing
            .bytes()
            .zip([3, 7, 1, 3, 7, 1, 3, 7, 1])
            .map(|(b, w)| u32::from(b - b'0') * w)
            .sum::<u32>()
            % 10
            == 0
}

/// One entry as read back from a NACHA file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AchEntry {
    pub sec: String,
    pub transaction_code: String,
    pub routing: String,
    pub account: String,
    pub amount_usd_cents: i64,
    pub individual_id: String,
    pub name: String,
    pub trace: String,
    pub effective_date: String,
}

fn num(s: &str) -> i64 {
    assert!(
        s.bytes().all(|b| b.is_ascii_digit()),
        "{s:?} is not numeric"
    );
    s.parse().unwrap()
}

/// An independent NACHA checker: 94-character records, each followed by `\n`; record
/// order 1 (5 6… 8)… 9 then `9`-filler; blocking factor 10; ABA check digits of the
/// destination and every RDFI; per batch and per file: counts, entry hash (sum of the
/// 8-digit RDFI ids, last 10 digits), totals (credits only); trace numbers ascending with
/// the ODFI prefix; block count. Returns the entries and the file's credit total.
pub fn check_nacha(text: &str) -> (Vec<AchEntry>, i64) {
    assert!(text.ends_with('\n'), "every record ends with a line feed");
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l.len(), 94, "record {} has {} characters", i + 1, l.len());
        assert!(l.is_ascii(), "record {} is not ASCII", i + 1);
    }
    assert_eq!(lines.len() % 10, 0, "blocking factor 10");
    let header = lines[0];
    assert_eq!(&header[0..1], "1", "file header first");
    assert_eq!(&header[1..3], "01", "priority code");
    assert_eq!(&header[3..4], " ");
    assert!(
        aba_ok(&header[4..13]),
        "immediate destination {}",
        &header[4..13]
    );
    assert_eq!(&header[34..37], "094", "record size");
    assert_eq!(&header[37..39], "10", "blocking factor");
    assert_eq!(&header[39..40], "1", "format code");

    let mut i = 1;
    let mut entries = Vec::new();
    let mut batches = 0i64;
    let mut file_hash = 0i64;
    let mut file_credit = 0i64;
    let mut last_trace = String::new();
    while lines[i].starts_with('5') {
        let bh = lines[i];
        batches += 1;
        assert_eq!(&bh[1..4], "220", "credits-only service class");
        let company_id = &bh[40..50];
        let sec = bh[50..53].to_owned();
        assert!(sec == "CCD" || sec == "PPD", "SEC code {sec}");
        let effective = bh[69..75].to_owned();
        assert_eq!(&bh[78..79], "1", "originator status code");
        let odfi = &bh[79..87];
        assert_eq!(num(&bh[87..94]), batches, "batch number");
        i += 1;
        let (mut count, mut hash, mut credit) = (0i64, 0i64, 0i64);
        while lines[i].starts_with('6') {
            let e = lines[i];
            let code = &e[1..3];
            assert!(
                code == "22" || code == "32",
                "credit transaction code {code}"
            );
            let routing = &e[3..12];
            assert!(aba_ok(routing), "RDFI routing {routing} check digit");
            let amount = num(&e[29..39]);
            assert!(amount > 0);
            assert_eq!(&e[78..79], "0", "no addenda");
            let trace = &e[79..94];
            assert_eq!(&trace[..8], odfi, "trace prefix is the ODFI");
            assert!(trace > last_trace.as_str(), "trace numbers ascend");
            last_trace = trace.to_owned();
            count += 1;
            hash += num(&routing[..8]);
            credit += amount;
            entries.push(AchEntry {
                sec: sec.clone(),
                transaction_code: code.to_owned(),
                routing: routing.to_owned(),
                account: e[12..29].trim_end().to_owned(),
                amount_usd_cents: amount,
                individual_id: e[39..54].trim_end().to_owned(),
                name: e[54..76].trim_end().to_owned(),
                trace: trace.to_owned(),
                effective_date: effective.clone(),
            });
            i += 1;
        }
        let bc = lines[i];
        assert_eq!(&bc[0..1], "8", "batch control after the entries");
        assert_eq!(&bc[1..4], "220");
        assert_eq!(num(&bc[4..10]), count, "batch entry count");
        assert_eq!(num(&bc[10..20]), hash % 10_000_000_000, "batch entry hash");
        assert_eq!(num(&bc[20..32]), 0, "no debits");
        assert_eq!(num(&bc[32..44]), credit, "batch credit total");
        assert_eq!(&bc[44..54], company_id, "company id");
        assert_eq!(&bc[79..87], odfi);
        assert_eq!(num(&bc[87..94]), batches);
        file_hash += hash;
        file_credit += credit;
        i += 1;
    }
    let fc = lines[i];
    assert_eq!(&fc[0..1], "9", "file control");
    assert_eq!(num(&fc[1..7]), batches, "file batch count");
    assert_eq!(num(&fc[7..13]) as usize, lines.len() / 10, "block count");
    assert_eq!(num(&fc[13..21]) as usize, entries.len(), "file entry count");
    assert_eq!(
        num(&fc[21..31]),
        file_hash % 10_000_000_000,
        "file entry hash"
    );
    assert_eq!(num(&fc[31..43]), 0, "file debit total");
    assert_eq!(num(&fc[43..55]), file_credit, "file credit total");
    for filler in &lines[i + 1..] {
        assert_eq!(*filler, "9".repeat(94), "filler records");
    }
    (entries, file_credit)
}

/// SHA-256 hex of a file's bytes.
pub fn sha256_file(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(
        std::fs::read(path).expect("read file"),
    ))
}
