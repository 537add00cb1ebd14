//! `settle verify` and `settle rebuild`: check the hash chains, the balance of every event's
//! lines and that the projections equal a fresh fold of the events; or rewrite them from it.
//!
//! Both walk the streams of one `store::snapshot` a page of streams at a time, each stream
//! checked and folded (`StreamCheck`) as its events go by, each page's fold written into the
//! snapshot's copies of the projection tables: memory holds one page, whatever the ledger.
//!
//! `verify` first folds the projector's backlog (`Store::catch_up_all`), so what it compares
//! is the ledger folded twice, never a lag; in the snapshot a stream's aggregates are folded
//! up to its checkpoint there and its other ops whole, so it may run while `serve` books.
//! What it reports, by `kind`:
//! - per event: `sequence_gap`, `chain_broken`, `hash_mismatch` (the chain), `unbalanced`,
//!   `invalid_lines`, `lines_mismatch` (the lines), `invalid_payload`;
//! - per stream: `aggregate_mismatch` (the typed aggregates the commands decide on,
//!   `domain::projection::StreamAggregates`, against the read models) and
//!   `checkpoint_ahead`; per table: `projection_mismatch`;
//! - with an anchor log: `anchor_mismatch` and `anchor_truncated` (each chain recomputed
//!   from the events' contents must pass through its anchored heads), and the log against
//!   the roots the ledger recorded ([`VerifyReport::check_anchor_log`]);
//! - [`VerifyReport::check_clock`]: `booked_ahead_of_clock` on a real-clock ledger;
//!   [`VerifyReport::check_control`]: the operators' signatures and a verified approval
//!   behind every gated event (`ledger::proof`).
//!
//! `rebuild` folds every stream whole and swaps the copies in for the tables
//! (`Snapshot::replace_tables`), refusing if events were booked meanwhile.

use crate::anchor::Heads;
use crate::domain::event::{EventBody, lines_from_json};
use crate::domain::projection::{Projections, StreamAggregates, ops};
use crate::store::snapshot::{Snapshot, StreamPosition};
use crate::store::{GENESIS_HASH, Store, StoreError, StoredEvent, canonical_bytes, event_hash};

/// Events read per statement while folding (a page of streams takes as many statements as
/// its events need).
const PAGE_EVENTS: i64 = 5_000;
/// Problems listed at most per report (the count is always exact).
const PROBLEMS_LISTED_MAX: usize = 100;

/// One thing wrong with the ledger.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub stream: String,
    pub seq: Option<i64>,
    pub kind: &'static str,
    pub detail: String,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VerifyReport {
    pub streams: usize,
    pub events: i64,
    /// Streams checked against an anchor file (`verify --anchors`); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchored_streams: Option<usize>,
    pub problems_total: usize,
    pub problems: Vec<Problem>,
    /// The ledger's clock mode (`real`, `simulated`; absent while undecided).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<crate::store::ClockMode>,
    /// Gated events booked before the ledger had operators ([`VerifyReport::check_control`]):
    /// control was not provable then; listed for the auditor, not a problem.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub before_control: Vec<BeforeControl>,
    /// How many there are (the first 100 are listed).
    #[serde(skip_serializing_if = "is_zero")]
    pub before_control_total: usize,
    /// The anchor log checked against the ledger (`verify --anchors`); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor_log: Option<AnchorLogStatus>,
}

/// The anchor log as `verify --anchors` found it, and the tail it does not cover yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AnchorLogStatus {
    /// Anchors in the log.
    pub anchors: usize,
    /// Anchors written before roots were signed.
    pub unsigned: usize,
    /// The newest anchor's number and root (hex).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newest_n: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newest_root: Option<String>,
    /// The newest anchor published on Solana, and its transaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_n: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_signature: Option<String>,
    /// Events booked after their stream's anchored head (not covered by any anchor yet).
    pub unanchored_events: i64,
    /// Seconds since the newest anchor (absent before the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unanchored_seconds: Option<i64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A gated event booked before control was provable.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BeforeControl {
    pub stream: String,
    pub seq: i64,
    pub event_type: &'static str,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems_total == 0
    }

    /// On a real-clock ledger: every event booked later than `limit_ms` (the real clock plus
    /// the allowed skew) is a problem, `booked_ahead_of_clock`.
    pub(crate) async fn check_clock(
        &mut self,
        store: &Store,
        real_now_ms: i64,
        skew_ms: i64,
    ) -> Result<(), StoreError> {
        self.clock = store.clock_mode().await?;
        if self.clock != Some(crate::store::ClockMode::Real) {
            return Ok(());
        }
        let (count, listed) = store
            .booked_after(real_now_ms + skew_ms, PROBLEMS_LISTED_MAX as i64)
            .await?;
        let unlisted = usize::try_from(count)
            .unwrap_or(0)
            .saturating_sub(listed.len());
        for (stream, seq, recorded_at_ms) in listed {
            self.push(Problem {
                stream,
                seq: Some(seq),
                kind: "booked_ahead_of_clock",
                detail: format!(
                    "recorded_at {} is ahead of the real clock {} on a real-clock ledger",
                    crate::domain::time::format_ms(recorded_at_ms),
                    crate::domain::time::format_ms(real_now_ms)
                ),
            });
        }
        self.problems_total += unlisted;
        Ok(())
    }

    /// Dual control on the chain (`ledger::proof`): once the ledger has operators, every
    /// request and decision carries a valid signature of a distinct operator in force; and
    /// where control is enforced, every gated event booked since the first operator ran
    /// under a verified approval listing it (`unapproved_gated_event`): an event a database
    /// writer inserts is named. Gated events booked before the first operator are listed
    /// apart (`before_control`), not as problems.
    pub(crate) async fn check_control(
        &mut self,
        store: &Store,
    ) -> Result<(), crate::ledger::LedgerError> {
        use crate::domain::event::PLATFORM_STREAM;
        let findings = crate::ledger::proof::control_findings(store).await?;
        for p in &findings.problems {
            self.push(Problem {
                stream: PLATFORM_STREAM.to_owned(),
                seq: Some(p.seq),
                kind: p.kind,
                detail: p.detail.clone(),
            });
        }
        for u in findings.unproven {
            self.push(Problem {
                stream: u.stream,
                seq: Some(u.seq),
                kind: "unapproved_gated_event",
                detail: u.detail,
            });
        }
        self.before_control_total = findings.before_control.len();
        self.before_control = findings
            .before_control
            .into_iter()
            .take(PROBLEMS_LISTED_MAX)
            .map(|u| BeforeControl {
                stream: u.stream,
                seq: u.seq,
                event_type: u.event_type,
            })
            .collect();
        Ok(())
    }

    /// Checks the anchor log against what the ledger recorded of it: a root the ledger
    /// recorded (written or published) that the log lacks is `anchor_log_truncated`, one it
    /// holds otherwise `anchor_log_rewritten`; an anchor signed by another key than
    /// `expected_key` is `anchor_key_unknown`. Then measures the tail no anchor covers yet.
    pub(crate) async fn check_anchor_log(
        &mut self,
        store: &Store,
        log: &crate::anchor::Anchors,
        expected_key: Option<&str>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let recorded = crate::store::anchors::anchors(store).await?;
        let published = crate::store::anchors::publications(store).await?;
        let claims = recorded
            .iter()
            .map(|r| (r.n, r.root.as_str(), "recorded"))
            .chain(
                published
                    .iter()
                    .map(|p| (p.n, p.root.as_str(), "published")),
            );
        for (n, root, how) in claims {
            let held = usize::try_from(n - 1).ok().and_then(|i| log.entries.get(i));
            let (kind, detail) = match held {
                None => (
                    "anchor_log_truncated",
                    format!(
                        "the ledger {how} anchor {n} but the log holds {} anchors: the log was cut short",
                        log.entries.len()
                    ),
                ),
                Some(e) if hex::encode(e.root) != root => (
                    "anchor_log_rewritten",
                    format!("the log's anchor {n} has another root than the one the ledger {how}"),
                ),
                Some(_) => continue,
            };
            self.push(Problem {
                stream: "anchors".into(),
                seq: Some(n),
                kind,
                detail,
            });
        }
        let mut status = AnchorLogStatus {
            anchors: log.entries.len(),
            ..AnchorLogStatus::default()
        };
        for e in &log.entries {
            match (&e.signed_by, expected_key) {
                (None, _) => status.unsigned += 1,
                (Some((key, _)), Some(expected)) if key != expected => self.push(Problem {
                    stream: "anchors".into(),
                    seq: Some(e.n),
                    kind: "anchor_key_unknown",
                    detail: format!("signed by {key}, not by the anchor key {expected}"),
                }),
                _ => {}
            }
        }
        if let Some(newest) = log.entries.last() {
            status.newest_n = Some(newest.n);
            status.newest_root = Some(hex::encode(newest.root));
            status.unanchored_seconds = crate::domain::time::parse_rfc3339_ms(&newest.at)
                .ok()
                .map(|at| (now_ms - at).max(0) / 1000);
        }
        if let Some(p) = published.iter().max_by_key(|p| p.n) {
            status.published_n = Some(p.n);
            status.published_signature = Some(p.signature.clone());
        }
        status.unanchored_events = store
            .stream_heads()
            .await?
            .iter()
            .map(|(stream, (seq, _))| seq - log.heads.get(stream).map_or(0, |(a, _)| *a))
            .filter(|n| *n > 0)
            .sum();
        self.anchor_log = Some(status);
        Ok(())
    }

    fn push(&mut self, p: Problem) {
        self.problems_total += 1;
        if self.problems.len() < PROBLEMS_LISTED_MAX {
            self.problems.push(p);
        }
    }
}

/// What a [`Walk`] folds of each stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fold {
    /// Every event, whole.
    Whole,
    /// What the snapshot's tables must hold: every event's state, and its aggregates up
    /// to the stream's projector checkpoint.
    AsStored,
}

/// The streams of a snapshot, read, checked and folded a page at a time; with anchors, each stream's chain recomputed from the events' contents alone must
/// pass through its head in `anchors` (src/anchor.rs). Every event is checked either way.
struct Walk<'a> {
    anchors: Option<&'a Heads>,
    fold: Fold,
    streams_per_page: usize,
    /// The last stream read.
    after: String,
    done: bool,
    /// The anchored streams met so far.
    anchored_seen: std::collections::HashSet<&'a str>,
}

impl<'a> Walk<'a> {
    fn new(anchors: Option<&'a Heads>, fold: Fold, streams_per_page: usize) -> Self {
        Walk {
            anchors,
            fold,
            streams_per_page: streams_per_page.max(1),
            after: String::new(),
            done: false,
            anchored_seen: Default::default(),
        }
    }

    /// Opens a snapshot and walks all of it, writing each page's fold into the snapshot's
    /// copies of the tables; returns the snapshot for the comparison or the swap.
    async fn fold_into_copies(
        &mut self,
        store: &Store,
        report: &mut VerifyReport,
        progress: &(dyn Fn(i64) + Sync),
    ) -> Result<Snapshot, StoreError> {
        let mut snapshot = store.snapshot().await?;
        while let Some(page) = self.next_page(&mut snapshot, report, progress).await? {
            snapshot.record_fold(&page).await?;
        }
        Ok(snapshot)
    }

    /// The fold of the next page of streams; `None` after the last.
    async fn next_page(
        &mut self,
        snapshot: &mut Snapshot,
        report: &mut VerifyReport,
        progress: &(dyn Fn(i64) + Sync),
    ) -> Result<Option<Projections>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let limit = i64::try_from(self.streams_per_page).unwrap_or(i64::MAX);
        let page = snapshot.streams_after(&self.after, limit).await?;
        self.done = page.len() < self.streams_per_page;
        let Some(last) = page.last() else {
            return Ok(None);
        };
        let page_after = std::mem::replace(&mut self.after, last.stream.clone());
        let mut projections = Projections::default();
        // The page's events in one range of the primary key, a statement per
        // `PAGE_EVENTS`; each stream checked and folded as its events go by.
        let mut positions = page.iter();
        let mut current: Option<StreamCheck> = None;
        let mut cursor = (page_after, i64::MAX);
        loop {
            let events = snapshot
                .events_between((&cursor.0, cursor.1), &last.stream, PAGE_EVENTS)
                .await?;
            let Some(tail) = events.last() else { break };
            cursor = (tail.stream.clone(), tail.seq);
            for e in &events {
                if current.as_ref().is_none_or(|c| c.stream != e.stream) {
                    if let Some(done) = current.take() {
                        done.finish(report, &projections);
                    }
                    // Up to the event's stream: a stream of the page without events
                    // (none, in one snapshot) is checked as empty.
                    loop {
                        let Some(position) = positions.next() else {
                            return Err(StoreError::Corrupt(format!(
                                "event {}#{} lies outside the page of streams read with it",
                                e.stream, e.seq
                            )));
                        };
                        let check = self.start(position, report);
                        if position.stream == e.stream {
                            current = Some(check);
                            break;
                        }
                        check.finish(report, &projections);
                    }
                }
                if let Some(check) = current.as_mut() {
                    check.feed(report, &mut projections, e);
                }
            }
            progress(report.events);
        }
        if let Some(done) = current.take() {
            done.finish(report, &projections);
        }
        for position in positions {
            self.start(position, report).finish(report, &projections);
        }
        Ok(Some(projections))
    }

    /// Begins the check of one stream of the page: counted, its checkpoint against its
    /// head, its anchor looked up.
    fn start<'p>(
        &mut self,
        position: &'p StreamPosition,
        report: &mut VerifyReport,
    ) -> StreamCheck<'p>
    where
        'a: 'p,
    {
        report.streams += 1;
        if self.fold == Fold::AsStored && position.checkpoint > position.head {
            report.push(checkpoint_ahead(
                &position.stream,
                position.checkpoint,
                position.head,
            ));
        }
        let anchor = match self.anchors.and_then(|a| a.get_key_value(&position.stream)) {
            Some((stream, head)) => {
                self.anchored_seen.insert(stream.as_str());
                Some(head)
            }
            None => None,
        };
        let folded_to = (self.fold == Fold::AsStored).then_some(position.checkpoint);
        StreamCheck::new(&position.stream, anchor, folded_to)
    }

    /// Reports every anchored stream the ledger no longer has (`anchor_truncated`), once
    /// every page was read.
    fn report_gone_streams(&self, report: &mut VerifyReport) {
        let Some(anchors) = self.anchors else {
            return;
        };
        report.anchored_streams = Some(anchors.len());
        for (stream, (seq, _)) in anchors {
            if !self.anchored_seen.contains(stream.as_str()) {
                report.push(Problem {
                    stream: stream.clone(),
                    seq: Some(*seq),
                    kind: "anchor_truncated",
                    detail: format!("the stream is gone; it was anchored at seq {seq}"),
                });
            }
        }
    }
}

fn checkpoint_ahead(stream: &str, checkpoint: i64, head: i64) -> Problem {
    Problem {
        stream: stream.to_owned(),
        seq: Some(checkpoint),
        kind: "checkpoint_ahead",
        detail: format!(
            "the aggregates claim events up to seq {checkpoint}; the stream ends at seq {head}"
        ),
    }
}

/// One stream being checked and folded as its events go by, in sequence order: into
/// `projections` all of it, or with `folded_to` its aggregates only up to that seq.
struct StreamCheck<'a> {
    stream: &'a str,
    anchor: Option<&'a (i64, Vec<u8>)>,
    folded_to: Option<i64>,
    expected_seq: i64,
    prev_hash: Vec<u8>,
    /// The chain as the contents alone give it, whatever the stored hashes say.
    recomputed: [u8; 32],
    last_seq: i64,
    aggregates: StreamAggregates,
}

impl<'a> StreamCheck<'a> {
    fn new(stream: &'a str, anchor: Option<&'a (i64, Vec<u8>)>, folded_to: Option<i64>) -> Self {
        StreamCheck {
            stream,
            anchor,
            folded_to,
            expected_seq: 1,
            prev_hash: GENESIS_HASH.to_vec(),
            recomputed: GENESIS_HASH,
            last_seq: 0,
            aggregates: StreamAggregates::default(),
        }
    }

    /// Checks the stream's next event and folds it.
    fn feed(&mut self, report: &mut VerifyReport, projections: &mut Projections, e: &StoredEvent) {
        report.events += 1;
        check_chain(
            report,
            self.stream,
            e,
            self.expected_seq,
            &self.prev_hash,
            &mut self.recomputed,
            self.anchor,
        );
        self.last_seq = e.seq;
        check_and_fold(
            report,
            projections,
            &mut self.aggregates,
            self.stream,
            e,
            self.folded_to,
        );
        self.expected_seq = e.seq + 1;
        self.prev_hash.clone_from(&e.hash);
    }

    /// After the stream's last event: its typed aggregates against the fold, and its end
    /// against its anchor.
    fn finish(self, report: &mut VerifyReport, projections: &Projections) {
        // The price book and the platform's fees and FX rates are rows of their events:
        // the typed aggregates the commands decide on agree with them. (The `providers` and
        // `payouts` rows are the typed records themselves, folded afresh by `fold`.)
        for detail in self.aggregates.mismatches(projections) {
            report.push(Problem {
                stream: self.stream.to_owned(),
                seq: None,
                kind: "aggregate_mismatch",
                detail,
            });
        }
        if let Some((anchored_seq, _)) = self.anchor
            && self.last_seq < *anchored_seq
        {
            report.push(Problem {
                stream: self.stream.to_owned(),
                seq: Some(*anchored_seq),
                kind: "anchor_truncated",
                detail: format!(
                    "the stream ends at seq {}; it was anchored at seq {anchored_seq}",
                    self.last_seq
                ),
            });
        }
    }
}

/// Checks an event's place in its chain: its seq, its link to the previous event, the
/// chain recomputed from the contents against the anchor, and its stored hash.
fn check_chain(
    report: &mut VerifyReport,
    stream: &str,
    e: &StoredEvent,
    expected_seq: i64,
    prev_hash: &[u8],
    recomputed: &mut [u8; 32],
    anchor: Option<&(i64, Vec<u8>)>,
) {
    let problem = |kind: &'static str, detail: String| Problem {
        stream: stream.to_owned(),
        seq: Some(e.seq),
        kind,
        detail,
    };
    if e.seq != expected_seq {
        report.push(problem(
            "sequence_gap",
            format!("expected seq {expected_seq}, found {}", e.seq),
        ));
    }
    if e.prev_hash != prev_hash {
        report.push(problem(
            "chain_broken",
            "prev_hash does not match the previous event's hash".into(),
        ));
    }
    let canonical = canonical_bytes(e);
    *recomputed = event_hash(recomputed.as_slice(), &canonical);
    if let Some((anchored_seq, anchored_hash)) = anchor
        && e.seq == *anchored_seq
        && recomputed.as_slice() != anchored_hash.as_slice()
    {
        report.push(problem(
            "anchor_mismatch",
            "the chain recomputed from the events differs from the anchored head \
             at this position: an event at or before it was altered, inserted, \
             removed or moved"
                .into(),
        ));
    }
    if e.hash != event_hash(&e.prev_hash, &canonical) {
        report.push(problem(
            "hash_mismatch",
            "stored hash does not match the event's content: the event was altered".into(),
        ));
    }
}

/// Checks an event's lines (balanced, the ones its payload posts) and folds its payload:
/// all of it without `folded_to`, else its aggregates only up to that seq.
fn check_and_fold(
    report: &mut VerifyReport,
    projections: &mut Projections,
    aggregates: &mut StreamAggregates,
    stream: &str,
    e: &StoredEvent,
    folded_to: Option<i64>,
) {
    let problem = |kind: &'static str, detail: String| Problem {
        stream: stream.to_owned(),
        seq: Some(e.seq),
        kind,
        detail,
    };
    match lines_from_json(&e.lines) {
        Ok(lines) => {
            let sum: i128 = lines.iter().map(|l| i128::from(l.amount_micro_usdc)).sum();
            if sum != 0 {
                report.push(problem("unbalanced", format!("lines sum to {sum} µUSDC")));
            }
        }
        Err(err) => report.push(problem("invalid_lines", err.message)),
    }
    match EventBody::from_json(&e.event_type, e.version as u32, &e.payload) {
        Ok(body) => {
            if crate::domain::event::lines_to_json(&body.lines()) != e.lines {
                report.push(problem(
                    "lines_mismatch",
                    "stored lines differ from the lines the event posts".into(),
                ));
            }
            aggregates.apply(e.recorded_at_ms, &body);
            match folded_to {
                None => projections.fold(&e.stream, e.seq, e.recorded_at_ms, &body),
                Some(folded_to) => {
                    for op in ops(&e.stream, e.seq, e.recorded_at_ms, &body) {
                        if e.seq <= folded_to || !op.is_deferred() {
                            projections.apply(&op);
                        }
                    }
                    projections.fold_typed(&e.stream, e.recorded_at_ms, &body);
                }
            }
        }
        Err(err) => report.push(problem("invalid_payload", err.message)),
    }
}

/// Verifies the whole ledger.
pub async fn verify(
    store: &Store,
    progress: &(dyn Fn(i64) + Sync),
) -> Result<VerifyReport, StoreError> {
    let per_page = crate::config::StoreConfig::default().verify_streams_per_page;
    verify_anchored(store, None, per_page, progress).await
}

/// Verifies the whole ledger, and with `anchors` that every chain passes through its
/// anchored head (`settle verify --anchors FILE`), holding `streams_per_page` streams'
/// fold in memory at a time.
pub async fn verify_anchored(
    store: &Store,
    anchors: Option<&Heads>,
    streams_per_page: usize,
    progress: &(dyn Fn(i64) + Sync),
) -> Result<VerifyReport, StoreError> {
    // The aggregates the projector has not folded yet are folded first: what is compared
    // is the ledger folded twice, never a lag. An event that cannot be folded (altered
    // beyond decoding) is a finding, reported with the rest, not a failure of `verify`.
    let mut report = VerifyReport::default();
    match store.catch_up_all().await {
        Ok(_) => {}
        Err(StoreError::Corrupt(detail)) => report.push(Problem {
            stream: "*".into(),
            seq: None,
            kind: "fold_failed",
            detail,
        }),
        Err(e) => return Err(e),
    }
    // Writers may go on meanwhile: the events, the checkpoints and the tables are read in
    // one snapshot, and the fold compared is the one that snapshot must hold. The fold goes
    // into the snapshot's copies of the tables a page of streams at a time, so memory holds
    // one page, whatever the size of the ledger.
    let mut walk = Walk::new(anchors, Fold::AsStored, streams_per_page);
    let mut snapshot = walk.fold_into_copies(store, &mut report, progress).await?;
    walk.report_gone_streams(&mut report);
    for (stream, checkpoint) in snapshot.checkpoints_without_events().await? {
        report.push(checkpoint_ahead(&stream, checkpoint, 0));
    }
    for difference in snapshot.differences().await? {
        report.push(Problem {
            stream: "*".into(),
            seq: None,
            kind: "projection_mismatch",
            detail: format!(
                "{}: {} rows differ from a fresh fold; e.g. {}",
                difference.table, difference.rows, difference.example
            ),
        });
    }
    Ok(report)
}

/// Rebuilds every projection from the events alone: one snapshot read `streams_per_page`
/// streams at a time (chains and lines checked as `verify` does), each page's fold written
/// into the snapshot's temporary copies of the tables, which then replace the tables in one
/// short write transaction ([`Snapshot::replace_tables`]). Memory holds one page, not the
/// fold; writers wait for the copy only. Refuses, changing nothing, if events were booked
/// meanwhile.
pub async fn rebuild(
    store: &Store,
    streams_per_page: usize,
    progress: &(dyn Fn(i64) + Sync),
) -> Result<VerifyReport, StoreError> {
    let mut report = VerifyReport::default();
    let snapshot = Walk::new(None, Fold::Whole, streams_per_page)
        .fold_into_copies(store, &mut report, progress)
        .await?;
    snapshot.replace_tables(report.events).await?;
    Ok(report)
}
