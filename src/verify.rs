//! `settle verify` and `settle rebuild`: check the hash chains, the balance of every event's
//! lines and that the projections equal a fresh fold of the events; or rewrite them from it.

use crate::anchor::Heads;
use crate::domain::event::{EventBody, lines_from_json};
use crate::domain::projection::{Projections, StreamAggregates, TABLES, ops};
use crate::store::{
    GENESIS_HASH, ProjectionSnapshot, Store, StoreError, StoredEvent, canonical_bytes, event_hash,
};

/// Events read per page while folding.
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
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems_total == 0
    }

    /// On a real-clock ledger: every event booked later than `limit_ms` (the real clock plus
    /// the allowed skew) is a problem, `booked_ahead_of_clock`.
    pub async fn check_clock(
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

    fn push(&mut self, p: Problem) {
        self.problems_total += 1;
        if self.problems.len() < PROBLEMS_LISTED_MAX {
            self.problems.push(p);
        }
    }
}

/// Reads every stream, checks its chain and lines, and folds it. `progress` is told the
/// number of events read so far.
pub async fn fold_ledger(
    store: &Store,
    report: &mut VerifyReport,
    progress: &(dyn Fn(i64) + Sync),
) -> Result<Projections, StoreError> {
    fold_checked(store, report, None, None, progress).await
}

/// [`fold_ledger`], and each stream's chain recomputed from the events' contents alone
/// must pass through its head in `anchors` (src/anchor.rs). With `at`, the fold is the one
/// that snapshot must hold: each stream's events up to its head there, their aggregate
/// changes up to its checkpoint there. Every event is checked either way.
async fn fold_checked(
    store: &Store,
    report: &mut VerifyReport,
    anchors: Option<&Heads>,
    at: Option<&ProjectionSnapshot>,
    progress: &(dyn Fn(i64) + Sync),
) -> Result<Projections, StoreError> {
    let mut projections = Projections::default();
    let streams = store.streams().await?;
    report.streams = streams.len();
    if let Some(anchors) = anchors {
        report_gone_streams(report, anchors, &streams);
    }
    for stream in streams {
        let anchor = anchors.and_then(|a| a.get(&stream));
        fold_stream(
            store,
            report,
            &mut projections,
            &stream,
            anchor,
            at,
            progress,
        )
        .await?;
    }
    Ok(projections)
}

/// Reports every anchored stream the ledger no longer has (`anchor_truncated`).
fn report_gone_streams(report: &mut VerifyReport, anchors: &Heads, streams: &[String]) {
    report.anchored_streams = Some(anchors.len());
    let present: std::collections::BTreeSet<&String> = streams.iter().collect();
    for (stream, (seq, _)) in anchors {
        if !present.contains(stream) {
            report.push(Problem {
                stream: stream.clone(),
                seq: Some(*seq),
                kind: "anchor_truncated",
                detail: format!("the stream is gone; it was anchored at seq {seq}"),
            });
        }
    }
}

/// Reads one stream page by page, checks each event, and folds it into `projections`
/// (all of it, or what the snapshot `at` must hold of it).
async fn fold_stream(
    store: &Store,
    report: &mut VerifyReport,
    projections: &mut Projections,
    stream: &str,
    anchor: Option<&(i64, Vec<u8>)>,
    at: Option<&ProjectionSnapshot>,
    progress: &(dyn Fn(i64) + Sync),
) -> Result<(), StoreError> {
    let mut expected_seq = 1;
    let mut prev_hash = GENESIS_HASH.to_vec();
    // The chain as the contents alone give it, whatever the stored hashes say.
    let mut recomputed = GENESIS_HASH;
    let mut last_seq = 0;
    let mut aggregates = StreamAggregates::default();
    loop {
        let page = store
            .stream_events(stream, expected_seq - 1, PAGE_EVENTS)
            .await?;
        if page.is_empty() {
            break;
        }
        for e in &page {
            report.events += 1;
            check_chain(
                report,
                stream,
                e,
                expected_seq,
                &prev_hash,
                &mut recomputed,
                anchor,
            );
            last_seq = e.seq;
            check_and_fold(report, projections, &mut aggregates, stream, e, at);
            expected_seq = e.seq + 1;
            prev_hash = e.hash.clone();
        }
        progress(report.events);
    }
    // The typed aggregates the commands decide on agree with the read models.
    for detail in aggregates.mismatches(projections) {
        report.push(Problem {
            stream: stream.to_owned(),
            seq: None,
            kind: "aggregate_mismatch",
            detail,
        });
    }
    if let Some((anchored_seq, _)) = anchor
        && last_seq < *anchored_seq
    {
        report.push(Problem {
            stream: stream.to_owned(),
            seq: Some(*anchored_seq),
            kind: "anchor_truncated",
            detail: format!(
                "the stream ends at seq {last_seq}; it was anchored at seq {anchored_seq}"
            ),
        });
    }
    Ok(())
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
/// all of it without `at`, else only what the snapshot `at` holds of this stream.
fn check_and_fold(
    report: &mut VerifyReport,
    projections: &mut Projections,
    aggregates: &mut StreamAggregates,
    stream: &str,
    e: &StoredEvent,
    at: Option<&ProjectionSnapshot>,
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
            match at {
                None => {
                    projections.fold(&e.stream, e.seq, e.recorded_at_ms, &body);
                    aggregates.apply(e.recorded_at_ms, &body);
                }
                Some(at) if e.seq <= at.heads.get(stream).copied().unwrap_or(0) => {
                    aggregates.apply(e.recorded_at_ms, &body);
                    let folded_to = at.checkpoints.get(stream).copied().unwrap_or(0);
                    for op in ops(&e.stream, e.seq, e.recorded_at_ms, &body) {
                        if e.seq <= folded_to || !op.is_aggregate() {
                            projections.apply(&op);
                        }
                    }
                }
                Some(_) => {}
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
    verify_anchored(store, None, progress).await
}

/// Verifies the whole ledger, and with `anchors` that every chain passes through its
/// anchored head (`settle verify --anchors FILE`).
pub async fn verify_anchored(
    store: &Store,
    anchors: Option<&Heads>,
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
    // Writers may go on meanwhile: the stored side is one snapshot, and the fold is the
    // one that snapshot must hold.
    let snapshot = store.projection_snapshot().await?;
    for (stream, checkpoint) in &snapshot.checkpoints {
        let head = snapshot.heads.get(stream).copied().unwrap_or(0);
        if *checkpoint > head {
            report.push(Problem {
                stream: stream.clone(),
                seq: Some(*checkpoint),
                kind: "checkpoint_ahead",
                detail: format!(
                    "the aggregates claim events up to seq {checkpoint}; the stream ends at seq {head}"
                ),
            });
        }
    }
    let fresh = fold_checked(store, &mut report, anchors, Some(&snapshot), progress).await?;
    for spec in TABLES {
        let stored = &snapshot.tables[spec.name];
        let empty = Default::default();
        let folded = fresh.tables.get(spec.name).unwrap_or(&empty);
        if stored == folded {
            continue;
        }
        let mut differing = 0;
        let mut example = None;
        for (k, v) in folded {
            if stored.get(k) != Some(v) {
                differing += 1;
                example.get_or_insert_with(|| {
                    format!("key {k:?}: folded {v:?}, stored {:?}", stored.get(k))
                });
            }
        }
        for k in stored.keys() {
            if !folded.contains_key(k) {
                differing += 1;
                example.get_or_insert_with(|| format!("key {k:?}: stored but not in the fold"));
            }
        }
        report.push(Problem {
            stream: "*".into(),
            seq: None,
            kind: "projection_mismatch",
            detail: format!(
                "{}: {differing} rows differ from a fresh fold; e.g. {}",
                spec.name,
                example.unwrap_or_default()
            ),
        });
    }
    Ok(report)
}

/// Rebuilds every projection from the events alone.
pub async fn rebuild(
    store: &Store,
    progress: &(dyn Fn(i64) + Sync),
) -> Result<VerifyReport, StoreError> {
    let mut report = VerifyReport::default();
    let count_before = store.event_count().await?;
    let fresh = fold_ledger(store, &mut report, progress).await?;
    store.replace_projections(&fresh, count_before).await?;
    Ok(report)
}
