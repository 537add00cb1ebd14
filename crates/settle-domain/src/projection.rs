//! Projections: the read models folded from events.
//!
//! [`ops`] is the single source of truth for what an event does to the projections, as
//! [`ProjOp`]s on the tables [`TABLES`] declares. The store applies them in SQL: the
//! append's transaction writes the ops that are not deferred ([`immediate_ops`]); the
//! deferred ones ([`ProjOp::is_deferred`]: the additive [`AGGREGATES`], changed only by
//! `ProjOp::Add`, and a usage event's segments) are folded behind the append by the
//! projector, under a checkpoint per stream. `verify` and `rebuild` apply the same ops to an
//! in-memory [`Projections`], a page of streams at a time, and compare it with the tables or
//! write it in their place.
//!
//! Every projection row depends only on the events of its own stream, so no write touches
//! another provider's rows, pages of streams fold into disjoint rows, and platform totals
//! are sums over providers.
//!
//! The typed aggregates the commands decide on are folded from the same events by their
//! own `apply` ([`StreamAggregates`]), and `settle verify` reports any difference from the
//! read models (`aggregate_mismatch`); the `providers` and `payouts` rows a registration
//! and a creation put are the typed records' rows ([`provider_row`], [`payout_row`]).

use std::collections::BTreeMap;

use super::event::*;
use super::payout::{PayoutRecord, lifecycle_step};
use super::platform::PlatformState;
use super::provider::{ProviderRecord, ProviderState, apply_to_record, changes_record};
use super::time::day_number;

/// A projection cell (serialised as JSON null, number or string).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(untagged)]
pub enum Val {
    Null,
    Int(i64),
    Text(String),
}

impl Val {
    pub fn int(&self) -> i64 {
        match self {
            Val::Int(v) => *v,
            _ => 0,
        }
    }
    pub fn text(&self) -> Option<&str> {
        match self {
            Val::Text(t) => Some(t),
            _ => None,
        }
    }
}

impl From<i64> for Val {
    fn from(v: i64) -> Val {
        Val::Int(v)
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Val {
        Val::Text(v.to_owned())
    }
}
impl From<String> for Val {
    fn from(v: String) -> Val {
        Val::Text(v)
    }
}
impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Val {
        v.map(Val::Text).unwrap_or(Val::Null)
    }
}
impl From<Option<i64>> for Val {
    fn from(v: Option<i64>) -> Val {
        v.map(Val::Int).unwrap_or(Val::Null)
    }
}

/// A projection table: its key columns and value columns, in SQL column order, and which
/// of them hold integers (`BIGINT` in the schema; every other column is `TEXT`). A test
/// checks these declarations against the migrated schema of both databases.
pub struct TableSpec {
    pub name: &'static str,
    pub key: &'static [&'static str],
    pub vals: &'static [&'static str],
    pub ints: &'static [&'static str],
}

impl TableSpec {
    /// Whether `column` holds integers (micro-USDC, cents, milliseconds, days, counts).
    pub fn is_int(&self, column: &str) -> bool {
        self.ints.contains(&column)
    }

    /// The key columns, then the value columns: the SQL column order.
    pub fn columns(&self) -> impl Iterator<Item = &'static str> {
        self.key.iter().chain(self.vals.iter()).copied()
    }

    /// [`TableSpec::columns`] as an SQL list (`a, b, c`).
    pub fn column_list(&self) -> String {
        self.columns().collect::<Vec<_>>().join(", ")
    }
}

/// The key column that names the stream a per-provider row belongs to (`provider:{id}`): the
/// last key column of every table whose rows one provider's events write, so that a
/// distributed database can keep them beside that stream's events.
pub const STREAM_COLUMN: &str = "stream";

/// Every projection table. Column names double as the SQL schema's.
pub const TABLES: &[TableSpec] = &[
    TableSpec {
        name: "account_balances",
        key: &["owner", "account"],
        vals: &["balance_micro_usdc"],
        ints: &["balance_micro_usdc"],
    },
    TableSpec {
        name: "earnings_daily",
        key: &["provider_id", "gpu_id", "day", "stream"],
        vals: &[
            "model",
            "gross_micro_usdc",
            "fee_micro_usdc",
            "net_micro_usdc",
            "duration_ms",
        ],
        ints: &[
            "day",
            "gross_micro_usdc",
            "fee_micro_usdc",
            "net_micro_usdc",
            "duration_ms",
        ],
    },
    TableSpec {
        name: "usage_segments",
        key: &["gpu_id", "started_at_ms", "stream"],
        vals: &[
            "ended_at_ms",
            "event_id",
            "provider_id",
            "model",
            "gross_micro_usdc",
            "fee_micro_usdc",
            "net_micro_usdc",
        ],
        ints: &[
            "started_at_ms",
            "ended_at_ms",
            "gross_micro_usdc",
            "fee_micro_usdc",
            "net_micro_usdc",
        ],
    },
    TableSpec {
        name: "payable_recorded",
        key: &["provider_id", "day", "stream"],
        vals: &["amount_micro_usdc"],
        ints: &["day", "amount_micro_usdc"],
    },
    TableSpec {
        name: "providers",
        key: &["provider_id", "stream"],
        vals: &[
            "name",
            "email",
            "tier",
            "schedule",
            "status",
            "payout_method",
            "method_set_at_ms",
            "method_invalid",
            "registered_at_ms",
        ],
        ints: &["method_set_at_ms", "method_invalid", "registered_at_ms"],
    },
    TableSpec {
        name: "provider_tiers",
        // `seq`: the event's position in the provider's stream, so that tier changes
        // booked in the same millisecond all stay in the history, in booking order.
        key: &["provider_id", "from_ms", "seq", "stream"],
        vals: &["tier"],
        ints: &["from_ms", "seq"],
    },
    TableSpec {
        name: "gpus",
        key: &["gpu_id", "stream"],
        vals: &["provider_id", "model", "registered_at_ms"],
        ints: &["registered_at_ms"],
    },
    TableSpec {
        name: "rates",
        key: &["provider_id", "model", "effective_from_ms", "stream"],
        vals: &["rate_usdc_per_hour"],
        ints: &["effective_from_ms"],
    },
    TableSpec {
        name: "fee_schedules",
        key: &["tier", "effective_from_ms"],
        vals: &["fee_bps"],
        ints: &["effective_from_ms", "fee_bps"],
    },
    TableSpec {
        name: "payouts",
        key: &["payout_id", "stream"],
        vals: &[
            "provider_id",
            "run_kind",
            "run_key",
            "rail",
            "amount_micro_usdc",
            "amount_eur_cents",
            "eur_per_usd",
            "method",
            "status",
            "hold_reason",
            "failure_reason",
            "reference",
            "end_to_end_id",
            "created_at_ms",
            "updated_at_ms",
        ],
        ints: &[
            "amount_micro_usdc",
            "amount_eur_cents",
            "created_at_ms",
            "updated_at_ms",
        ],
    },
    TableSpec {
        name: "run_decisions",
        key: &["run_kind", "run_key", "provider_id", "stream"],
        vals: &[
            "decision",
            "available_micro_usdc",
            "amount_micro_usdc",
            "payout_id",
            "decided_at_ms",
        ],
        ints: &["available_micro_usdc", "amount_micro_usdc", "decided_at_ms"],
    },
    TableSpec {
        name: "payout_runs",
        key: &["run_kind", "run_key"],
        vals: &["cutoff_ms", "candidates", "totals", "completed_at_ms"],
        ints: &["cutoff_ms", "candidates", "completed_at_ms"],
    },
    TableSpec {
        name: "fx_rates",
        key: &["recorded_at_ms"],
        vals: &["eur_per_usd"],
        ints: &["recorded_at_ms"],
    },
    TableSpec {
        name: "bank_batches",
        key: &["batch_id"],
        vals: &[
            "rail",
            "file_name",
            "sha256",
            "payout_ids",
            "total_cents",
            "currency",
            "status",
            "generated_at_ms",
            "updated_at_ms",
        ],
        ints: &["total_cents", "generated_at_ms", "updated_at_ms"],
    },
    TableSpec {
        name: "solana_attempts",
        key: &["attempt_id"],
        vals: &[
            "payout_ids",
            "signature",
            "blockhash",
            "last_valid_block_height",
            "tx_base64",
            "transfers",
            "outcome",
            "slot",
            "reason",
            "signed_at_ms",
            "resolved_at_ms",
            "signed_seq",
        ],
        ints: &[
            "last_valid_block_height",
            "slot",
            "signed_at_ms",
            "resolved_at_ms",
            "signed_seq",
        ],
    },
    // Which batch holds a payout: a bank generation's look-up of the payouts in no batch.
    TableSpec {
        name: "bank_batch_payouts",
        key: &["payout_id"],
        vals: &["batch_id"],
        ints: &[],
    },
    // Which attempts name a payout: the per-payout look-up of a signed attempt's checks.
    TableSpec {
        name: "solana_attempt_payouts",
        key: &["payout_id", "attempt_id"],
        vals: &["signed_at_ms"],
        ints: &["signed_at_ms"],
    },
    // A bank's answer files, once each (`bank answer` reads which were booked).
    TableSpec {
        name: "bank_answer_files",
        key: &["kind", "message_id"],
        vals: &[
            "sha256",
            "entries",
            "matched",
            "exceptions",
            "imported_at_ms",
        ],
        ints: &["entries", "matched", "exceptions", "imported_at_ms"],
    },
    // The entries of the bank's answers that booked nothing, once each by their reference.
    TableSpec {
        name: "bank_answer_exceptions",
        key: &["entry_key"],
        vals: &[
            "problem",
            "reference",
            "batch_id",
            "amount_cents",
            "currency",
            "expected_cents",
            "detail",
            "kind",
            "message_id",
            "recorded_at_ms",
        ],
        ints: &["amount_cents", "expected_cents", "recorded_at_ms"],
    },
    TableSpec {
        name: "approvals",
        key: &["approval_id"],
        vals: &[
            "kind",
            "command",
            "summary",
            "provider_id",
            "amount_micro_usdc",
            "requested_by",
            "requested_at_ms",
            "status",
            "decided_by",
            "decided_at_ms",
            "reason",
            "content_hash",
            "requester_operator",
            "decider_operator",
        ],
        ints: &["amount_micro_usdc", "requested_at_ms", "decided_at_ms"],
    },
];

pub fn table(name: &str) -> &'static TableSpec {
    TABLES
        .iter()
        .find(|t| t.name == name)
        .expect("known projection table")
}

/// One change to the projections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjOp {
    /// Add `delta` to a column of a row, creating the row with `init` values when missing.
    Add {
        table: &'static str,
        key: Vec<Val>,
        init: Vec<Val>,
        /// `(value column index, delta)`.
        deltas: Vec<(usize, i64)>,
    },
    /// Insert or replace a whole row.
    Put {
        table: &'static str,
        key: Vec<Val>,
        vals: Vec<Val>,
    },
    /// Set some value columns of an existing row (missing row: no-op).
    Patch {
        table: &'static str,
        key: Vec<Val>,
        /// `(value column index, value)`.
        set: Vec<(usize, Val)>,
    },
    /// Delete the usage segments of one event on one GPU.
    RemoveSegments {
        stream: String,
        gpu_id: String,
        event_id: String,
    },
}

/// The additive aggregates: only ever changed by [`ProjOp::Add`], so their rows are sums
/// over events and may be folded after the append, in any grouping, as long as each event
/// is folded exactly once (the projector, `store::fold`). Every other table is written in
/// the append's transaction.
pub const AGGREGATES: &[&str] = &["account_balances", "earnings_daily", "payable_recorded"];

impl ProjOp {
    /// Whether this op changes an additive aggregate (see [`AGGREGATES`]).
    pub fn is_aggregate(&self) -> bool {
        matches!(self, ProjOp::Add { table, .. } if AGGREGATES.contains(table))
    }

    /// Whether the projector folds this op behind the append (`store::fold`) instead of the
    /// append's transaction writing it: the additive aggregates, and the segments of a usage
    /// event (the ledger is the only synchronous write of a usage event, for booking speed). A
    /// segment row is keyed by its GPU and start, a GPU lies on its owner's stream only, and
    /// a stream is folded in sequence order, so folding later writes the same rows. What
    /// reads segments to decide (the overlap check, a GPU's latest booked end) first folds
    /// the streams it reads up to their heads (`ledger::ingest`); every other command folds
    /// its stream when it begins (`Store::begin`).
    pub fn is_deferred(&self) -> bool {
        self.is_aggregate()
            || matches!(
                self,
                ProjOp::Put {
                    table: "usage_segments",
                    ..
                }
            )
    }
}

fn col(table_name: &str, column: &str) -> usize {
    table(table_name)
        .vals
        .iter()
        .position(|c| *c == column)
        .expect("known column")
}

fn patch(table_name: &'static str, key: Vec<Val>, set: Vec<(&str, Val)>) -> ProjOp {
    ProjOp::Patch {
        table: table_name,
        key,
        set: set
            .into_iter()
            .map(|(c, v)| (col(table_name, c), v))
            .collect(),
    }
}

fn json<T: serde::Serialize>(value: &T) -> Val {
    Val::Text(serde_json::to_string(value).expect("serializes"))
}

/// The projection changes of one event that its append writes in its own transaction: the
/// ops of [`ops`] that are not [deferred](ProjOp::is_deferred). A usage event has none (all of
/// its ops are aggregates or segments), so they are not built for it: on the booking path that
/// was about a tenth of the process's CPU (measured in `ops/bench/ingest.md`). The unit test
/// `a_usage_event_has_only_deferred_ops` holds the shortcut to [`ops`].
pub fn immediate_ops(stream: &str, seq: i64, recorded_at_ms: i64, body: &EventBody) -> Vec<ProjOp> {
    if matches!(body, EventBody::UsageRecorded(_)) {
        return Vec::new();
    }
    let mut out = ops(stream, seq, recorded_at_ms, body);
    out.retain(|op| !op.is_deferred());
    out
}

/// The projection changes of one event appended to `stream` as its `seq`-th event at
/// `recorded_at_ms`: its lines' balances, then what its kind does (one function per family
/// of events; this match names every kind, so a new one must be given a place).
pub fn ops(stream: &str, seq: i64, recorded_at_ms: i64, body: &EventBody) -> Vec<ProjOp> {
    let mut out = Vec::new();
    for line in body.lines() {
        out.push(ProjOp::Add {
            table: "account_balances",
            key: vec![stream.into(), line.account.clone().into()],
            init: vec![Val::Int(0)],
            deltas: vec![(0, line.amount_micro_usdc)],
        });
    }
    match body {
        EventBody::UsageRecorded(_)
        | EventBody::UsageVoided(_)
        | EventBody::AdjustmentPosted(_) => {
            usage_family_ops(&mut out, stream, recorded_at_ms, body);
        }
        EventBody::ProviderRegistered(_)
        | EventBody::ProviderUpdated(_)
        | EventBody::GpuRegistered(_)
        | EventBody::RateSet(_)
        | EventBody::FeeScheduleSet(_)
        | EventBody::FxRateSet(_) => {
            registry_ops(&mut out, stream, seq, recorded_at_ms, body);
        }
        EventBody::PayoutRunDecided(_) | EventBody::PayoutRunCompleted(_) => {
            run_ops(&mut out, stream, recorded_at_ms, body);
        }
        // A payout's row, and its provider's when a rail proved the bank details wrong, are
        // written from the typed records ([`TypedFold`]).
        EventBody::PayoutCreated(_)
        | EventBody::PayoutHeld(_)
        | EventBody::PayoutReleased(_)
        | EventBody::PayoutCancelled(_)
        | EventBody::PayoutSubmitted(_)
        | EventBody::PayoutSettled(_)
        | EventBody::PayoutFailed(_)
        | EventBody::PayoutReturned(_) => {}
        EventBody::BankBatchGenerated(_)
        | EventBody::BankBatchStatusChanged(_)
        | EventBody::SolanaTxSigned(_)
        | EventBody::SolanaTxResolved(_) => {
            rail_ops(&mut out, seq, recorded_at_ms, body);
        }
        EventBody::ApprovalRequested(_) | EventBody::ApprovalDecided(_) => {
            approval_ops(&mut out, recorded_at_ms, body);
        }
        EventBody::BankAnswerImported(a) => bank_answer_ops(&mut out, recorded_at_ms, a),
        // Operators are few: read as a fold of their events (`Ledger::operators`), no table.
        EventBody::OperatorAdded(_)
        | EventBody::OperatorKeyRotated(_)
        | EventBody::OperatorRemoved(_) => {}
        // Read from the chain where needed (`Ledger::policy`, `Store::clock_mode`): one
        // event each, no table a writer could change beside the chain.
        EventBody::PolicySet(_) | EventBody::ClockSet(_) => {}
        // Read from the chain by the reliability view (`ledger::reliability`).
        EventBody::GpuListingChanged(_) => {}
        // The personal values leave the `providers` row (the events keep them sealed):
        // written from the typed record ([`TypedFold`]).
        EventBody::ProviderErased(_) => {}
    }
    out
}

/// What usage, its voids and adjustments do: earnings by day, payable by booking day, the
/// GPU's usage segments.
fn usage_family_ops(out: &mut Vec<ProjOp>, stream: &str, recorded_at_ms: i64, body: &EventBody) {
    match body {
        EventBody::UsageRecorded(u) => {
            usage_ops(
                out,
                &UsageOf {
                    stream,
                    provider_id: &u.provider_id,
                    gpu_id: &u.gpu_id,
                    model: &u.model,
                },
                &u.segments,
                1,
                recorded_at_ms,
            );
            for s in &u.segments {
                out.push(ProjOp::Put {
                    table: "usage_segments",
                    key: vec![
                        u.gpu_id.as_str().into(),
                        s.started_at_ms.into(),
                        stream.into(),
                    ],
                    vals: vec![
                        s.ended_at_ms.into(),
                        u.event_id.as_str().into(),
                        u.provider_id.as_str().into(),
                        u.model.as_str().into(),
                        s.gross_micro_usdc.into(),
                        s.fee_micro_usdc.into(),
                        s.net_micro_usdc.into(),
                    ],
                });
            }
        }
        EventBody::UsageVoided(v) => {
            usage_ops(
                out,
                &UsageOf {
                    stream,
                    provider_id: &v.provider_id,
                    gpu_id: &v.gpu_id,
                    model: &v.model,
                },
                &v.segments,
                -1,
                recorded_at_ms,
            );
            out.push(ProjOp::RemoveSegments {
                stream: stream.to_owned(),
                gpu_id: v.gpu_id.to_string(),
                event_id: v.event_id.to_string(),
            });
        }
        EventBody::AdjustmentPosted(a) => out.push(payable_recorded(
            stream,
            &a.provider_id,
            recorded_at_ms,
            a.amount_micro_usdc,
        )),
        // Every other event is dispatched elsewhere by [`ops`].
        _ => {}
    }
}

/// What the registry does: providers and their tier history, GPUs, rates, fee schedules and
/// FX rates.
fn registry_ops(
    out: &mut Vec<ProjOp>,
    stream: &str,
    seq: i64,
    recorded_at_ms: i64,
    body: &EventBody,
) {
    match body {
        EventBody::ProviderRegistered(p) => {
            // Its `providers` row is written from the typed record ([`TypedFold`]).
            out.push(tier_put(
                stream,
                &p.provider_id,
                recorded_at_ms,
                seq,
                p.tier,
            ));
        }
        EventBody::ProviderUpdated(p) => provider_updated_ops(out, stream, seq, recorded_at_ms, p),
        EventBody::GpuRegistered(g) => out.push(ProjOp::Put {
            table: "gpus",
            key: vec![g.gpu_id.as_str().into(), stream.into()],
            vals: vec![
                g.provider_id.as_str().into(),
                g.model.as_str().into(),
                recorded_at_ms.into(),
            ],
        }),
        EventBody::RateSet(r) => {
            let (key, vals) = rate_row(
                &r.provider_id,
                &r.model,
                r.effective_from_ms,
                &r.rate_usdc_per_hour,
            );
            out.push(ProjOp::Put {
                table: "rates",
                key,
                vals,
            });
        }
        EventBody::FeeScheduleSet(f) => {
            let (key, vals) = fee_row(f.tier, f.effective_from_ms, f.fee_bps);
            out.push(ProjOp::Put {
                table: "fee_schedules",
                key,
                vals,
            });
        }
        EventBody::FxRateSet(f) => out.push(ProjOp::Put {
            table: "fx_rates",
            key: vec![recorded_at_ms.into()],
            vals: vec![f.eur_per_usd.as_str().into()],
        }),
        // Every other event is dispatched elsewhere by [`ops`].
        _ => {}
    }
}

/// What a provider's update does beside its `providers` row (written from the typed
/// record, [`TypedFold`]): a tier change's history row.
fn provider_updated_ops(
    out: &mut Vec<ProjOp>,
    stream: &str,
    seq: i64,
    recorded_at_ms: i64,
    p: &ProviderUpdated,
) {
    if let Some(tier) = p.tier {
        out.push(tier_put(stream, &p.provider_id, recorded_at_ms, seq, tier));
    }
}

/// What a payout run records: each candidate's decision and the run's completion.
fn run_ops(out: &mut Vec<ProjOp>, stream: &str, recorded_at_ms: i64, body: &EventBody) {
    match body {
        EventBody::PayoutRunDecided(d) => out.push(ProjOp::Put {
            table: "run_decisions",
            key: vec![
                d.run_kind.as_str().into(),
                d.run_key.as_str().into(),
                d.provider_id.as_str().into(),
                stream.into(),
            ],
            vals: vec![
                d.decision.as_str().into(),
                d.available_micro_usdc.into(),
                d.amount_micro_usdc.into(),
                d.payout_id.clone().map(String::from).into(),
                recorded_at_ms.into(),
            ],
        }),
        EventBody::PayoutRunCompleted(r) => out.push(ProjOp::Put {
            table: "payout_runs",
            key: vec![r.run_kind.as_str().into(), r.run_key.as_str().into()],
            vals: vec![
                r.cutoff_ms.into(),
                r.candidates.into(),
                json(&r.totals),
                recorded_at_ms.into(),
            ],
        }),
        // Every other event is dispatched elsewhere by [`ops`].
        _ => {}
    }
}

/// What the rails record: bank batches and Solana attempts.
fn rail_ops(out: &mut Vec<ProjOp>, seq: i64, recorded_at_ms: i64, body: &EventBody) {
    match body {
        EventBody::BankBatchGenerated(b) => {
            out.extend(b.payout_ids.iter().map(|payout_id| ProjOp::Put {
                table: "bank_batch_payouts",
                key: vec![payout_id.as_str().into()],
                vals: vec![b.batch_id.as_str().into()],
            }));
            out.push(bank_batch_put(b, recorded_at_ms));
        }
        EventBody::BankBatchStatusChanged(b) => out.push(patch(
            "bank_batches",
            vec![b.batch_id.as_str().into()],
            vec![
                ("status", b.status.as_str().into()),
                ("updated_at_ms", recorded_at_ms.into()),
            ],
        )),
        EventBody::SolanaTxSigned(s) => {
            out.extend(s.payout_ids.iter().map(|payout_id| ProjOp::Put {
                table: "solana_attempt_payouts",
                key: vec![payout_id.as_str().into(), s.attempt_id.as_str().into()],
                vals: vec![recorded_at_ms.into()],
            }));
            out.push(solana_attempt_put(s, seq, recorded_at_ms));
        }
        EventBody::SolanaTxResolved(r) => out.push(patch(
            "solana_attempts",
            vec![r.attempt_id.as_str().into()],
            vec![
                ("outcome", r.outcome.as_str().into()),
                ("slot", r.slot.map(|s| s as i64).into()),
                ("reason", r.reason.clone().into()),
                ("resolved_at_ms", recorded_at_ms.into()),
            ],
        )),
        // Every other event is dispatched elsewhere by [`ops`].
        _ => {}
    }
}

/// What dual control records: requests and their decisions.
fn approval_ops(out: &mut Vec<ProjOp>, recorded_at_ms: i64, body: &EventBody) {
    match body {
        EventBody::ApprovalRequested(a) => out.push(ProjOp::Put {
            table: "approvals",
            key: vec![a.approval_id.as_str().into()],
            vals: vec![
                a.kind.as_str().into(),
                a.command.as_str().into(),
                a.summary.as_str().into(),
                a.provider_id.clone().map(String::from).into(),
                a.amount_micro_usdc.into(),
                a.requested_by.as_str().into(),
                recorded_at_ms.into(),
                ApprovalStatus::Pending.as_str().into(),
                Val::Null,
                Val::Null,
                Val::Null,
                a.content_hash.clone().into(),
                a.requester_operator.clone().into(),
                Val::Null,
            ],
        }),
        EventBody::ApprovalDecided(d) => out.push(patch(
            "approvals",
            vec![d.approval_id.as_str().into()],
            vec![
                ("status", d.decision.as_str().into()),
                ("decided_by", d.decided_by.as_str().into()),
                ("decided_at_ms", recorded_at_ms.into()),
                ("reason", d.reason.clone().into()),
                ("decider_operator", d.decider_operator.clone().into()),
            ],
        )),
        // Every other event is dispatched elsewhere by [`ops`].
        _ => {}
    }
}

fn tier_put(stream: &str, provider_id: &str, from_ms: i64, seq: i64, tier: Tier) -> ProjOp {
    ProjOp::Put {
        table: "provider_tiers",
        key: vec![
            provider_id.into(),
            from_ms.into(),
            seq.into(),
            stream.into(),
        ],
        vals: vec![tier.as_str().into()],
    }
}

fn payable_recorded(stream: &str, provider_id: &str, recorded_at_ms: i64, delta: i64) -> ProjOp {
    ProjOp::Add {
        table: "payable_recorded",
        key: vec![
            provider_id.into(),
            day_number(recorded_at_ms).into(),
            stream.into(),
        ],
        init: vec![Val::Int(0)],
        deltas: vec![(0, delta)],
    }
}

/// Whose usage an event books: the stream it lies on, the provider, the GPU and its model.
#[derive(Clone, Copy)]
struct UsageOf<'a> {
    stream: &'a str,
    provider_id: &'a str,
    gpu_id: &'a str,
    model: &'a str,
}

fn usage_ops(
    out: &mut Vec<ProjOp>,
    of: &UsageOf<'_>,
    segments: &[Segment],
    sign: i64,
    recorded_at_ms: i64,
) {
    let UsageOf {
        stream,
        provider_id,
        gpu_id,
        model,
    } = *of;
    let mut net_total = 0;
    for s in segments {
        net_total += s.net_micro_usdc;
        out.push(ProjOp::Add {
            table: "earnings_daily",
            key: vec![
                provider_id.into(),
                gpu_id.into(),
                day_number(s.started_at_ms).into(),
                stream.into(),
            ],
            init: vec![model.into(), 0.into(), 0.into(), 0.into(), 0.into()],
            deltas: vec![
                (1, sign * s.gross_micro_usdc),
                (2, sign * s.fee_micro_usdc),
                (3, sign * s.net_micro_usdc),
                (4, sign * (s.ended_at_ms - s.started_at_ms)),
            ],
        });
    }
    out.push(payable_recorded(
        stream,
        provider_id,
        recorded_at_ms,
        sign * net_total,
    ));
}

/// A projection row: its key, and its values.
pub type Row = (Vec<Val>, Vec<Val>);

/// The `providers` row of a provider's registry record.
pub fn provider_row(p: &ProviderRecord) -> Row {
    (
        vec![
            p.provider_id.as_str().into(),
            provider_stream(&p.provider_id).into(),
        ],
        vec![
            p.name.as_str().into(),
            p.email.as_str().into(),
            p.tier.as_str().into(),
            p.schedule.as_str().into(),
            p.status.as_str().into(),
            p.payout_method.as_ref().map(json).unwrap_or(Val::Null),
            p.method_set_at_ms.into(),
            Val::Int(i64::from(p.method_invalid)),
            p.registered_at_ms.into(),
        ],
    )
}

/// The `rates` row of a provider's rate for a model from an instant.
fn rate_row(provider_id: &str, model: &str, from_ms: i64, rate: &str) -> Row {
    (
        vec![
            provider_id.into(),
            model.into(),
            from_ms.into(),
            provider_stream(provider_id).into(),
        ],
        vec![rate.into()],
    )
}

/// The `fee_schedules` row of a tier's fee from an instant.
fn fee_row(tier: Tier, from_ms: i64, fee_bps: u16) -> Row {
    (
        vec![tier.as_str().into(), from_ms.into()],
        vec![i64::from(fee_bps).into()],
    )
}

/// The `payouts` row of a payout.
pub fn payout_row(p: &PayoutRecord) -> Row {
    (
        vec![
            p.payout_id.as_str().into(),
            provider_stream(&p.provider_id).into(),
        ],
        vec![
            p.provider_id.as_str().into(),
            p.run_kind.as_str().into(),
            p.run_key.as_str().into(),
            p.rail.as_str().into(),
            p.amount_micro_usdc.into(),
            p.amount_eur_cents.into(),
            p.eur_per_usd.clone().into(),
            json(&p.method),
            p.status.as_str().into(),
            p.hold_reason.clone().into(),
            p.failure_reason.clone().into(),
            p.reference.clone().into(),
            p.end_to_end_id.clone().into(),
            p.created_at_ms.into(),
            p.updated_at_ms.into(),
        ],
    )
}

/// The typed fold of the `providers` and `payouts` rows: each event goes through the
/// aggregates' own `apply` (`provider::apply_to_record`, [`PayoutRecord::apply`]) and the
/// rows are written whole from the records ([`provider_row`], [`payout_row`]). The store
/// folds a transaction's events with it at commit, on the records as stored before
/// ([`TypedFold::hold_provider`], [`TypedFold::hold_payout`]: what [`TypedFold::needs`]
/// names); `verify` and `rebuild` fold every event of a stream from nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypedFold {
    /// By stream: the provider's record (`None`: not registered, or not loaded).
    providers: BTreeMap<String, Option<ProviderRecord>>,
    /// By payout id.
    payouts: BTreeMap<String, PayoutRecord>,
    changed_providers: std::collections::BTreeSet<String>,
    changed_payouts: std::collections::BTreeSet<String>,
}

/// The records a [`TypedFold`] needs before it folds some events: the provider of each
/// stream, and the payouts, that the events change without creating them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    pub streams: Vec<String>,
    pub payouts: Vec<String>,
}

impl TypedFold {
    /// Whether `body` changes a `providers` or `payouts` row.
    pub fn changes(body: &EventBody) -> bool {
        changes_record(body)
            || matches!(body, EventBody::PayoutCreated(_))
            || lifecycle_step(body).is_some()
    }

    /// The records `events` (stream, body), folded in order, need and this fold does not
    /// hold: created by none of them before.
    pub fn needs<'e>(&self, events: impl IntoIterator<Item = (&'e str, &'e EventBody)>) -> Needs {
        let mut streams = std::collections::BTreeSet::new();
        let mut payouts = std::collections::BTreeSet::new();
        let mut created = std::collections::BTreeSet::new();
        let mut registered = std::collections::BTreeSet::new();
        for (stream, body) in events {
            match body {
                EventBody::ProviderRegistered(_) => {
                    registered.insert(stream);
                }
                EventBody::PayoutCreated(p) => {
                    created.insert(p.payout_id.as_str());
                }
                _ => {}
            }
            if changes_record(body)
                && !registered.contains(stream)
                && !self.providers.contains_key(stream)
            {
                streams.insert(stream.to_owned());
            }
            if let Some((payout_id, _)) = lifecycle_step(body)
                && !created.contains(payout_id)
                && !self.payouts.contains_key(payout_id)
            {
                payouts.insert(payout_id.to_owned());
            }
        }
        Needs {
            streams: streams.into_iter().collect(),
            payouts: payouts.into_iter().collect(),
        }
    }

    /// Holds the record of `stream`'s provider as stored (`None`: none registered).
    pub fn hold_provider(&mut self, stream: &str, provider: Option<ProviderRecord>) {
        self.providers.insert(stream.to_owned(), provider);
    }

    /// Holds a payout's record as stored.
    pub fn hold_payout(&mut self, payout: PayoutRecord) {
        self.payouts.insert(payout.payout_id.to_string(), payout);
    }

    /// Folds one event of `stream` recorded at `recorded_at_ms`. An event of a payout the
    /// fold does not hold (none stored) changes nothing, as an update of a row that is not
    /// there.
    pub fn apply(&mut self, stream: &str, recorded_at_ms: i64, body: &EventBody) {
        if changes_record(body) {
            let provider = if matches!(body, EventBody::ProviderRegistered(_)) {
                Some(self.providers.entry(stream.to_owned()).or_default())
            } else {
                self.providers.get_mut(stream)
            };
            if let Some(provider) = provider {
                apply_to_record(provider, recorded_at_ms, body);
                if provider.is_some() {
                    self.changed_providers.insert(stream.to_owned());
                }
            }
        }
        if let EventBody::PayoutCreated(p) = body {
            self.payouts.insert(
                p.payout_id.to_string(),
                PayoutRecord::created(p, recorded_at_ms),
            );
            self.changed_payouts.insert(p.payout_id.to_string());
        } else if let Some((payout_id, _)) = lifecycle_step(body)
            && let Some(p) = self.payouts.get_mut(payout_id)
        {
            p.apply(recorded_at_ms, body);
            self.changed_payouts.insert(payout_id.to_owned());
        }
    }

    /// Folds one event ([`TypedFold::apply`]) and answers the rows it changed, whole.
    pub fn apply_rows(
        &mut self,
        stream: &str,
        recorded_at_ms: i64,
        body: &EventBody,
    ) -> Vec<ProjOp> {
        if !TypedFold::changes(body) {
            return Vec::new();
        }
        self.apply(stream, recorded_at_ms, body);
        let mut out = Vec::new();
        if changes_record(body)
            && let Some(Some(p)) = self.providers.get(stream)
        {
            out.push(put("providers", provider_row(p)));
        }
        let payout_id = match body {
            EventBody::PayoutCreated(p) => Some(p.payout_id.as_str()),
            _ => lifecycle_step(body).map(|(id, _)| id),
        };
        if let Some(p) = payout_id.and_then(|id| self.payouts.get(id)) {
            out.push(put("payouts", payout_row(p)));
        }
        out
    }

    /// The rows of the records the folded events changed, whole.
    pub fn puts(&self) -> Vec<ProjOp> {
        let providers = self
            .changed_providers
            .iter()
            .filter_map(|s| self.providers.get(s)?.as_ref())
            .map(|p| put("providers", provider_row(p)));
        let payouts = self
            .changed_payouts
            .iter()
            .filter_map(|id| self.payouts.get(id))
            .map(|p| put("payouts", payout_row(p)));
        providers.chain(payouts).collect()
    }
}

/// The op that writes `row` of `table` whole.
fn put(table: &'static str, (key, vals): Row) -> ProjOp {
    ProjOp::Put { table, key, vals }
}

/// The price book and the platform's fees and FX rate of one stream, each folded by its own
/// `apply`: what the commands decide on beside the `providers` and `payouts` rows (those are
/// the typed records themselves, [`TypedFold`]). Their read models are `Put` by [`ops`];
/// both come from the same events and must agree, which [`StreamAggregates::mismatches`]
/// checks (`settle verify`: `aggregate_mismatch`).
#[derive(Clone, Debug, Default)]
pub struct StreamAggregates {
    pub provider: ProviderState,
    pub platform: PlatformState,
}

impl StreamAggregates {
    pub fn apply(&mut self, recorded_at_ms: i64, body: &EventBody) {
        self.provider.apply(recorded_at_ms, body);
        self.platform.apply(body);
    }

    /// Where the read models in `projections` differ from these aggregates: the rows of
    /// `rates` and `fee_schedules` they hold, and the FX rate in force. Every such row
    /// belongs to this stream, so `projections` may hold other streams too.
    pub fn mismatches(&self, projections: &Projections) -> Vec<String> {
        let mut rows: Vec<(&str, Row)> = Vec::new();
        if let Some(p) = &self.provider.provider {
            for ((model, from), rate) in &self.provider.rates {
                rows.push(("rates", rate_row(&p.provider_id, model, *from, rate)));
            }
        }
        for ((tier, from), bps) in &self.platform.fees {
            rows.push(("fee_schedules", fee_row(*tier, *from, *bps)));
        }
        let mut out = Vec::new();
        for (table, (key, vals)) in rows {
            let held = projections.tables.get(table).and_then(|t| t.get(&key));
            if held != Some(&vals) {
                out.push(format!(
                    "{table} {key:?}: the aggregate holds {vals:?}, the read model {held:?}"
                ));
            }
        }
        if let Some(rate) = self.platform.fx_latest {
            let held = projections
                .tables
                .get("fx_rates")
                .and_then(|t| t.last_key_value())
                .and_then(|(_, v)| v.first()?.text()?.parse::<rust_decimal::Decimal>().ok());
            if held != Some(rate) {
                out.push(format!(
                    "fx_rates: the aggregate's rate in force is {rate}, the read model's {held:?}"
                ));
            }
        }
        out
    }
}

/// The projections held in memory: per table, key → values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Projections {
    pub tables: BTreeMap<&'static str, BTreeMap<Vec<Val>, Vec<Val>>>,
    /// The typed records of the `providers` and `payouts` rows folded so far.
    typed: TypedFold,
}

impl Projections {
    pub fn apply(&mut self, op: &ProjOp) {
        match op {
            ProjOp::Add {
                table,
                key,
                init,
                deltas,
            } => {
                let row = self
                    .tables
                    .entry(table)
                    .or_default()
                    .entry(key.clone())
                    .or_insert_with(|| init.clone());
                for (i, d) in deltas {
                    row[*i] = Val::Int(row[*i].int() + d);
                }
            }
            ProjOp::Put { table, key, vals } => {
                self.tables
                    .entry(table)
                    .or_default()
                    .insert(key.clone(), vals.clone());
            }
            ProjOp::Patch { table, key, set } => {
                if let Some(row) = self.tables.entry(table).or_default().get_mut(key) {
                    for (i, v) in set {
                        row[*i] = v.clone();
                    }
                }
            }
            ProjOp::RemoveSegments {
                stream,
                gpu_id,
                event_id,
            } => {
                let event_col = col("usage_segments", "event_id");
                if let Some(rows) = self.tables.get_mut("usage_segments") {
                    rows.retain(|k, v| {
                        !(k[0] == Val::Text(gpu_id.clone())
                            && k[2] == Val::Text(stream.clone())
                            && v[event_col] == Val::Text(event_id.clone()))
                    });
                }
            }
        }
    }

    /// Folds one event: its [`ops`], and its typed rows ([`Projections::fold_typed`]).
    pub fn fold(&mut self, stream: &str, seq: i64, recorded_at_ms: i64, body: &EventBody) {
        for op in ops(stream, seq, recorded_at_ms, body) {
            self.apply(&op);
        }
        self.fold_typed(stream, recorded_at_ms, body);
    }

    /// Folds one event into the `providers` and `payouts` rows through their typed records
    /// ([`TypedFold`]), as the store does at commit.
    pub fn fold_typed(&mut self, stream: &str, recorded_at_ms: i64, body: &EventBody) {
        for op in self.typed.apply_rows(stream, recorded_at_ms, body) {
            self.apply(&op);
        }
    }

    pub fn rows(&self, table: &str) -> impl Iterator<Item = (&Vec<Val>, &Vec<Val>)> {
        self.tables.get(table).into_iter().flat_map(|t| t.iter())
    }
}

/// A bank answer file's row, and a row per entry that booked nothing (the same entry in a
/// later file, a statement repeating a notification, replaces its row: kept once).
fn bank_answer_ops(out: &mut Vec<ProjOp>, recorded_at_ms: i64, a: &BankAnswerImported) {
    out.push(ProjOp::Put {
        table: "bank_answer_files",
        key: vec![a.kind.as_str().into(), a.message_id.as_str().into()],
        vals: vec![
            a.sha256.as_str().into(),
            a.entries.into(),
            a.matched.into(),
            i64::try_from(a.exceptions.len()).unwrap_or(i64::MAX).into(),
            recorded_at_ms.into(),
        ],
    });
    out.extend(a.exceptions.iter().map(|e| ProjOp::Put {
        table: "bank_answer_exceptions",
        key: vec![e.entry_key.as_str().into()],
        vals: vec![
            e.problem.as_str().into(),
            e.reference.as_str().into(),
            e.batch_id.clone().into(),
            e.amount_cents.into(),
            e.currency.as_str().into(),
            e.expected_cents.into(),
            e.detail.as_str().into(),
            a.kind.as_str().into(),
            a.message_id.as_str().into(),
            recorded_at_ms.into(),
        ],
    }));
}

/// The `bank_batches` row a generated batch puts.
fn bank_batch_put(b: &crate::event::BankBatchGenerated, recorded_at_ms: i64) -> ProjOp {
    ProjOp::Put {
        table: "bank_batches",
        key: vec![b.batch_id.as_str().into()],
        vals: vec![
            b.rail.as_str().into(),
            b.file_name.as_str().into(),
            b.sha256.as_str().into(),
            json(&b.payout_ids),
            b.total_cents.into(),
            b.currency.as_str().into(),
            crate::batch::BatchStatus::Generated.as_str().into(),
            recorded_at_ms.into(),
            recorded_at_ms.into(),
        ],
    }
}

/// The `solana_attempts` row a signed attempt puts.
/// An attempt's row; `seq` (its `solana_tx.signed` on the platform stream) orders the
/// attempts signed within one millisecond (a lookup table's extensions, in the order they
/// filled it).
fn solana_attempt_put(s: &crate::event::SolanaTxSigned, seq: i64, recorded_at_ms: i64) -> ProjOp {
    ProjOp::Put {
        table: "solana_attempts",
        key: vec![s.attempt_id.as_str().into()],
        vals: vec![
            json(&s.payout_ids),
            s.signature.as_str().into(),
            s.blockhash.as_str().into(),
            (s.last_valid_block_height as i64).into(),
            s.tx_base64.as_str().into(),
            json(&s.transfers),
            Val::Null,
            Val::Null,
            Val::Null,
            recorded_at_ms.into(),
            Val::Null,
            seq.into(),
        ],
    }
}

#[cfg(test)]
mod tests {
    //! Given events folded in order, then exactly these projection rows: every table's
    //! columns as the store and `verify` read them.
    use super::*;
    use crate::event::tests::seg;

    const DAY: i64 = 86_400_000;

    fn t(s: &str) -> Val {
        Val::from(s)
    }
    fn i(v: i64) -> Val {
        Val::Int(v)
    }

    /// The rows of one table, in key order.
    fn rows(p: &Projections, table: &str) -> Vec<(Vec<Val>, Vec<Val>)> {
        p.rows(table).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    fn usage(event_id: &str, gpu_id: &str, segments: Vec<Segment>) -> EventBody {
        EventBody::UsageRecorded(UsageRecorded {
            event_id: event_id.parse().unwrap(),
            provider_id: "p".parse().unwrap(),
            gpu_id: gpu_id.parse().unwrap(),
            model: "H100".into(),
            rental_id: None,
            started_at_ms: segments[0].started_at_ms,
            ended_at_ms: segments[segments.len() - 1].ended_at_ms,
            rate_usdc_per_hour: "3.600000".into(),
            rate_source: "event".into(),
            segments,
        })
    }

    fn method(wallet: &str) -> PayoutMethod {
        PayoutMethod::Solana {
            wallet: wallet.into(),
        }
    }

    fn method_json(wallet: &str) -> Val {
        t(&format!(r#"{{"kind":"solana","wallet":"{wallet}"}}"#))
    }

    /// A provider registered, paid, its payout submitted and failed for its bank details,
    /// its tier changed: the registration, the creation and the events at their times.
    fn typed_fold_events() -> (ProviderRegistered, PayoutCreated, Vec<(i64, EventBody)>) {
        let created = PayoutCreated {
            payout_id: "po".parse().unwrap(),
            provider_id: "p".parse().unwrap(),
            run_kind: "weekly".into(),
            run_key: "2026-11-30".into(),
            amount_micro_usdc: 400,
            method: method("w"),
            held: false,
            amount_eur_cents: None,
            eur_per_usd: None,
        };
        let registered = ProviderRegistered {
            provider_id: "p".parse().unwrap(),
            name: "P".into(),
            email: "p@x".into(),
            tier: Tier::Community,
            schedule: Schedule::Weekly,
            status: ProviderStatus::Active,
            payout_method: Some(method("w")),
        };
        let events: Vec<(i64, EventBody)> = vec![
            (100, EventBody::ProviderRegistered(registered.clone())),
            (200, EventBody::PayoutCreated(created.clone())),
            (
                300,
                EventBody::PayoutSubmitted(PayoutSubmitted {
                    payout_id: "po".parse().unwrap(),
                    provider_id: "p".parse().unwrap(),
                    rail: Rail::Solana,
                    reference: "sig".into(),
                    end_to_end_id: None,
                }),
            ),
            (
                400,
                EventBody::PayoutFailed(PayoutFailed {
                    payout_id: "po".parse().unwrap(),
                    provider_id: "p".parse().unwrap(),
                    rail: Rail::Solana,
                    amount_micro_usdc: 400,
                    reason: "closed".into(),
                    method_invalid: true,
                }),
            ),
            (
                500,
                EventBody::ProviderUpdated(ProviderUpdated {
                    tier: Some(Tier::Enterprise),
                    ..ProviderUpdated::nothing("p".parse().unwrap())
                }),
            ),
        ];
        (registered, created, events)
    }

    /// The store folds a transaction's events on the records as stored before it
    /// ([`TypedFold::needs`], then held); `verify` folds every event from the first. Both
    /// write the same `providers` and `payouts` rows, whatever the split into transactions.
    #[test]
    fn a_typed_fold_on_stored_records_writes_what_the_whole_fold_writes() {
        let s = "provider:p";
        let (registered, created, events) = typed_fold_events();
        let mut whole = Projections::default();
        for (seq, (at, body)) in (1..).zip(&events) {
            whole.fold(s, seq, *at, body);
        }
        assert_eq!(
            rows(&whole, "payouts")[0].1[8],
            t("failed"),
            "the whole fold moved the payout"
        );
        assert_eq!(rows(&whole, "providers")[0].1[7], i(1), "method blocked");

        // The same events in two transactions: the second folds on the stored records.
        let mut split = Projections::default();
        let (first, second) = events.split_at(2);
        let mut fold = TypedFold::default();
        assert_eq!(
            fold.needs(first.iter().map(|(_, b)| (s, b))),
            Needs::default(),
            "what the transaction creates is not read"
        );
        for (at, body) in first {
            fold.apply(s, *at, body);
        }
        fold.puts().iter().for_each(|op| split.apply(op));
        let mut fold = TypedFold::default();
        assert_eq!(
            fold.needs(second.iter().map(|(_, b)| (s, b))),
            Needs {
                streams: vec![s.into()],
                payouts: vec!["po".into()],
            }
        );
        fold.hold_provider(s, Some(ProviderRecord::registered(&registered, 100)));
        fold.hold_payout(PayoutRecord::created(&created, 200));
        for (at, body) in second {
            fold.apply(s, *at, body);
        }
        fold.puts().iter().for_each(|op| split.apply(op));
        for table in ["providers", "payouts"] {
            assert_eq!(rows(&split, table), rows(&whole, table), "{table}");
        }
    }

    /// [`immediate_ops`] builds nothing for a usage event: this holds only while every op
    /// [`ops`] gives it is deferred (a split day, two lines per segment, a rental).
    #[test]
    fn a_usage_event_has_only_deferred_ops() {
        let mut ev = usage(
            "ev-1",
            "g",
            vec![
                seg(DAY - 60_000, DAY, 10, 2, 8),
                seg(DAY, DAY + 60_000, 10, 2, 8),
            ],
        );
        if let EventBody::UsageRecorded(u) = &mut ev {
            u.rental_id = Some("r-1".parse().unwrap());
        }
        let all = ops("provider:p", 1, DAY + 5, &ev);
        assert!(
            all.len() >= 6,
            "balances, earnings, payable and segments: {all:?}"
        );
        assert!(all.iter().all(ProjOp::is_deferred), "{all:?}");
        assert!(immediate_ops("provider:p", 1, DAY + 5, &ev).is_empty());
        // Any other event goes through `ops`: a void removes its segments in its own transaction.
        let void = EventBody::UsageVoided(UsageVoided {
            event_id: "ev-1".parse().unwrap(),
            provider_id: "p".parse().unwrap(),
            gpu_id: "g".parse().unwrap(),
            model: "H100".into(),
            reason: "test".into(),
            segments: vec![seg(DAY - 60_000, DAY, 10, 2, 8)],
        });
        let immediate = immediate_ops("provider:p", 2, DAY + 6, &void);
        assert!(
            matches!(immediate.as_slice(), [ProjOp::RemoveSegments { .. }]),
            "{immediate:?}"
        );
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one given/when/then scenario read top to bottom: three usage events folded, then the void of one, each step followed by the segment, earnings and balance rows it must leave"
    )]
    fn usage_and_its_void_fold_into_earnings_segments_and_balances() {
        let mut p = Projections::default();
        // Day 1 10:00 to day 2 02:00, split at midnight; booked on day 3.
        let ev = usage(
            "ev-1",
            "g",
            vec![
                seg(DAY + 10 * 3_600_000, 2 * DAY, 1_000, 200, 800),
                seg(2 * DAY, 2 * DAY + 7_200_000, 300, 60, 240),
            ],
        );
        p.fold("provider:p", 1, 3 * DAY + 5, &ev);
        // Another event on the same GPU, and one with the same id on another GPU.
        p.fold(
            "provider:p",
            2,
            3 * DAY + 6,
            &usage(
                "ev-2",
                "g",
                vec![seg(2 * DAY + DAY / 2, 2 * DAY + DAY / 2 + 10, 5, 1, 4)],
            ),
        );
        p.fold(
            "provider:p",
            3,
            4 * DAY,
            &usage("ev-1", "h", vec![seg(DAY, DAY + 10, 7, 1, 6)]),
        );
        assert_eq!(
            rows(&p, "earnings_daily"),
            vec![
                (
                    vec![t("p"), t("g"), i(1), t("provider:p")],
                    vec![t("H100"), i(1_000), i(200), i(800), i(14 * 3_600_000)]
                ),
                (
                    vec![t("p"), t("g"), i(2), t("provider:p")],
                    vec![t("H100"), i(305), i(61), i(244), i(7_200_000 + 10)]
                ),
                (
                    vec![t("p"), t("h"), i(1), t("provider:p")],
                    vec![t("H100"), i(7), i(1), i(6), i(10)]
                ),
            ]
        );
        // Payable by booking day: the net of the whole event on the day it was recorded.
        assert_eq!(
            rows(&p, "payable_recorded"),
            vec![
                (vec![t("p"), i(3), t("provider:p")], vec![i(1_044)]),
                (vec![t("p"), i(4), t("provider:p")], vec![i(6)]),
            ]
        );
        assert_eq!(
            rows(&p, "usage_segments")[0],
            (
                vec![t("g"), i(DAY + 10 * 3_600_000), t("provider:p")],
                vec![
                    i(2 * DAY),
                    t("ev-1"),
                    t("p"),
                    t("H100"),
                    i(1_000),
                    i(200),
                    i(800)
                ]
            )
        );
        assert_eq!(rows(&p, "usage_segments").len(), 4);

        // The void reverses ev-1 on g exactly, on the day it is booked (day 5).
        let EventBody::UsageRecorded(u) = ev else {
            unreachable!()
        };
        p.fold(
            "provider:p",
            4,
            5 * DAY,
            &EventBody::UsageVoided(UsageVoided {
                event_id: u.event_id,
                provider_id: u.provider_id,
                gpu_id: u.gpu_id,
                model: u.model,
                reason: "refund".into(),
                segments: u.segments,
            }),
        );
        assert_eq!(
            rows(&p, "earnings_daily"),
            vec![
                (
                    vec![t("p"), t("g"), i(1), t("provider:p")],
                    vec![t("H100"), i(0), i(0), i(0), i(0)]
                ),
                (
                    vec![t("p"), t("g"), i(2), t("provider:p")],
                    vec![t("H100"), i(5), i(1), i(4), i(10)]
                ),
                (
                    vec![t("p"), t("h"), i(1), t("provider:p")],
                    vec![t("H100"), i(7), i(1), i(6), i(10)]
                ),
            ]
        );
        assert_eq!(
            rows(&p, "payable_recorded")[2],
            (vec![t("p"), i(5), t("provider:p")], vec![i(-1_040)])
        );
        let kept: Vec<(Val, Val)> = rows(&p, "usage_segments")
            .into_iter()
            .map(|(k, v)| (k[0].clone(), v[1].clone()))
            .collect();
        assert_eq!(kept, vec![(t("g"), t("ev-2")), (t("h"), t("ev-1"))]);
        // Balances are per stream and account: receivable, fees, payable.
        let balances = rows(&p, "account_balances");
        assert_eq!(
            balances,
            vec![
                (vec![t("provider:p"), t("platform:fees")], vec![i(2)]),
                (
                    vec![t("provider:p"), t("platform:receivable")],
                    vec![i(-12)]
                ),
                (vec![t("provider:p"), t("provider:p:payable")], vec![i(10)]),
            ]
        );
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one given/when/then scenario read top to bottom: a provider registered, its method marked by returns and cleared by an update, then its GPU, rate, fee and FX rows, each step followed by the rows it must leave"
    )]
    fn providers_tiers_gpus_rates_and_fees() {
        let mut p = Projections::default();
        p.fold(
            "provider:p",
            1,
            100,
            &EventBody::ProviderRegistered(ProviderRegistered {
                provider_id: "p".parse().unwrap(),
                name: "P".into(),
                email: "p@x".into(),
                tier: Tier::Community,
                schedule: Schedule::Weekly,
                status: ProviderStatus::Active,
                payout_method: Some(method("w1")),
            }),
        );
        assert_eq!(
            rows(&p, "providers"),
            vec![(
                vec![t("p"), t("provider:p")],
                vec![
                    t("P"),
                    t("p@x"),
                    t("community"),
                    t("weekly"),
                    t("active"),
                    method_json("w1"),
                    Val::Null,
                    i(0),
                    i(100)
                ]
            )]
        );
        // A returned payout that proves the method wrong marks it; an update clears it.
        let returned = |invalid| {
            EventBody::PayoutReturned(PayoutReturned {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                rail: Rail::Sepa,
                amount_micro_usdc: 0,
                reason_code: "AC04".into(),
                reason: "closed".into(),
                method_invalid: invalid,
            })
        };
        p.fold("provider:p", 2, 150, &returned(false));
        assert_eq!(rows(&p, "providers")[0].1[7], i(0));
        p.fold("provider:p", 3, 160, &returned(true));
        assert_eq!(rows(&p, "providers")[0].1[7], i(1));
        p.fold(
            "provider:p",
            4,
            200,
            &EventBody::ProviderUpdated(ProviderUpdated {
                provider_id: "p".parse().unwrap(),
                name: Some("Q".into()),
                email: Some("q@x".into()),
                tier: Some(Tier::Enterprise),
                schedule: Some(Schedule::Monthly),
                status: Some(ProviderStatus::OnHold),
                payout_method: Some(method("w2")),
            }),
        );
        assert_eq!(
            rows(&p, "providers"),
            vec![(
                vec![t("p"), t("provider:p")],
                vec![
                    t("Q"),
                    t("q@x"),
                    t("enterprise"),
                    t("monthly"),
                    t("on_hold"),
                    method_json("w2"),
                    i(200),
                    i(0),
                    i(100)
                ]
            )]
        );
        // An update that names nothing changes nothing; one of an unknown provider is a no-op.
        let before = p.clone();
        p.fold(
            "provider:p",
            5,
            300,
            &EventBody::ProviderUpdated(ProviderUpdated::nothing("p".parse().unwrap())),
        );
        p.fold(
            "provider:x",
            1,
            300,
            &EventBody::ProviderUpdated(ProviderUpdated {
                status: Some(ProviderStatus::Suspended),
                ..ProviderUpdated::nothing("x".parse().unwrap())
            }),
        );
        assert_eq!(p, before);
        assert_eq!(
            rows(&p, "provider_tiers"),
            vec![
                (
                    vec![t("p"), i(100), i(1), t("provider:p")],
                    vec![t("community")]
                ),
                (
                    vec![t("p"), i(200), i(4), t("provider:p")],
                    vec![t("enterprise")]
                ),
            ]
        );

        p.fold(
            "provider:p",
            6,
            400,
            &EventBody::GpuRegistered(GpuRegistered {
                gpu_id: "g".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                model: "H100".into(),
            }),
        );
        p.fold(
            "provider:p",
            7,
            500,
            &EventBody::RateSet(RateSet {
                provider_id: "p".parse().unwrap(),
                model: "H100".into(),
                rate_usdc_per_hour: "2.500000".into(),
                effective_from_ms: 450,
            }),
        );
        p.fold(
            "platform",
            1,
            600,
            &EventBody::FeeScheduleSet(FeeScheduleSet {
                tier: Tier::Enterprise,
                fee_bps: 1200,
                effective_from_ms: 550,
            }),
        );
        p.fold(
            "platform",
            2,
            700,
            &EventBody::FxRateSet(FxRateSet {
                eur_per_usd: "0.92".into(),
            }),
        );
        assert_eq!(
            rows(&p, "gpus"),
            vec![(
                vec![t("g"), t("provider:p")],
                vec![t("p"), t("H100"), i(400)]
            )]
        );
        assert_eq!(
            rows(&p, "rates"),
            vec![(
                vec![t("p"), t("H100"), i(450), t("provider:p")],
                vec![t("2.500000")]
            )]
        );
        assert_eq!(
            rows(&p, "fee_schedules"),
            vec![(vec![t("enterprise"), i(550)], vec![i(1200)])]
        );
        assert_eq!(rows(&p, "fx_rates"), vec![(vec![i(700)], vec![t("0.92")])]);
    }

    fn payout_row(p: &Projections) -> Vec<Val> {
        rows(p, "payouts")[0].1.clone()
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one given/when/then walk of a payout through every state in order (created, held, released, submitted, settled, failed, returned, cancelled), each step followed by the row it must leave; split, the walk loses its order"
    )]
    fn a_payout_and_its_run_through_every_state() {
        let mut p = Projections::default();
        let s = "provider:p";
        p.fold(
            s,
            1,
            10,
            &EventBody::AdjustmentPosted(AdjustmentPosted {
                adjustment_id: "a".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                amount_micro_usdc: 500,
                reason: "credit".into(),
                reference: None,
                approval_id: None,
            }),
        );
        assert_eq!(
            rows(&p, "payable_recorded"),
            vec![(vec![t("p"), i(0), t("provider:p")], vec![i(500)])]
        );
        p.fold(
            s,
            2,
            20,
            &EventBody::PayoutRunDecided(PayoutRunDecided {
                run_kind: "weekly".into(),
                run_key: "2026-11-30".into(),
                provider_id: "p".parse().unwrap(),
                decision: super::super::decision::Decision::Paid,
                available_micro_usdc: 500,
                amount_micro_usdc: 400,
                payout_id: Some("po".parse().unwrap()),
            }),
        );
        assert_eq!(
            rows(&p, "run_decisions"),
            vec![(
                vec![t("weekly"), t("2026-11-30"), t("p"), t("provider:p")],
                vec![t("paid"), i(500), i(400), t("po"), i(20)]
            )]
        );
        p.fold(
            s,
            3,
            30,
            &EventBody::PayoutCreated(PayoutCreated {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                run_kind: "weekly".into(),
                run_key: "2026-11-30".into(),
                amount_micro_usdc: 400,
                method: method("w"),
                held: true,
                amount_eur_cents: Some(3),
                eur_per_usd: None,
            }),
        );
        assert_eq!(
            payout_row(&p),
            vec![
                t("p"),
                t("weekly"),
                t("2026-11-30"),
                t("solana"),
                i(400),
                i(3),
                Val::Null,
                method_json("w"),
                t("held"),
                Val::Null,
                Val::Null,
                Val::Null,
                Val::Null,
                i(30),
                i(30)
            ]
        );
        p.fold(
            s,
            4,
            40,
            &EventBody::PayoutHeld(PayoutHeld {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                reason: "above limit".into(),
            }),
        );
        assert_eq!(payout_row(&p)[8..10], [t("held"), t("above limit")]);
        assert_eq!(payout_row(&p)[14], i(40));
        let resolved = |cents: Option<i64>, rate: Option<&str>| PayoutHoldResolved {
            payout_id: "po".parse().unwrap(),
            provider_id: "p".parse().unwrap(),
            amount_micro_usdc: 400,
            reason: None,
            amount_eur_cents: cents,
            eur_per_usd: rate.map(str::to_owned),
        };
        p.fold(s, 5, 50, &EventBody::PayoutReleased(resolved(None, None)));
        assert_eq!(
            payout_row(&p)[4..9],
            [i(400), i(3), Val::Null, method_json("w"), t("created")]
        );
        p.fold(
            s,
            6,
            55,
            &EventBody::PayoutReleased(resolved(Some(37), Some("0.92"))),
        );
        assert_eq!(payout_row(&p)[5..7], [i(37), t("0.92")]);
        p.fold(
            s,
            7,
            60,
            &EventBody::PayoutSubmitted(PayoutSubmitted {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                rail: Rail::Solana,
                reference: "sig".into(),
                end_to_end_id: Some("e2e".into()),
            }),
        );
        assert_eq!(payout_row(&p)[8], t("submitted"));
        assert_eq!(payout_row(&p)[11..15], [t("sig"), t("e2e"), i(30), i(60)]);
        p.fold(
            s,
            8,
            70,
            &EventBody::PayoutSettled(PayoutSettled {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                rail: Rail::Solana,
                amount_micro_usdc: 400,
                reference: "sig2".into(),
            }),
        );
        assert_eq!(payout_row(&p)[8], t("settled"));
        assert_eq!(payout_row(&p)[11], t("sig2"));
        p.fold(
            s,
            9,
            80,
            &EventBody::PayoutFailed(PayoutFailed {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                rail: Rail::Solana,
                amount_micro_usdc: 400,
                reason: "expired".into(),
                method_invalid: false,
            }),
        );
        assert_eq!(
            payout_row(&p)[8..11],
            [t("failed"), t("above limit"), t("expired")]
        );
        p.fold(
            s,
            10,
            90,
            &EventBody::PayoutReturned(PayoutReturned {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                rail: Rail::Solana,
                amount_micro_usdc: 400,
                reason_code: "R01".into(),
                reason: "insufficient funds".into(),
                method_invalid: false,
            }),
        );
        assert_eq!(
            payout_row(&p)[8..11],
            [
                t("returned"),
                t("above limit"),
                t("R01: insufficient funds")
            ]
        );
        p.fold(s, 11, 95, &EventBody::PayoutCancelled(resolved(None, None)));
        assert_eq!(payout_row(&p)[8], t("cancelled"));
        assert_eq!(payout_row(&p)[14], i(95));

        let mut totals = BTreeMap::new();
        totals.insert("paid".to_owned(), (1, 400));
        p.fold(
            "platform",
            1,
            99,
            &EventBody::PayoutRunCompleted(PayoutRunCompleted {
                run_kind: "weekly".into(),
                run_key: "2026-11-30".into(),
                cutoff_ms: 15,
                candidates: 2,
                totals,
                policy_version: None,
            }),
        );
        assert_eq!(
            rows(&p, "payout_runs"),
            vec![(
                vec![t("weekly"), t("2026-11-30")],
                vec![i(15), i(2), t(r#"{"paid":[1,400]}"#), i(99)]
            )]
        );
        // Every state change posted its lines (two releases of the same 400 included).
        let balances: BTreeMap<String, i64> = rows(&p, "account_balances")
            .into_iter()
            .map(|(k, v)| (k[1].text().unwrap().to_owned(), v[0].int()))
            .collect();
        assert_eq!(balances["provider:p:held"], 400 - 400 - 400 - 400);
        assert_eq!(balances["provider:p:in_transit"], 400 + 400 - 400 - 400);
        assert_eq!(balances["platform:treasury:usdc"], 400 - 400);
        assert_eq!(balances["provider:p:payable"], 500 - 400 + 400 + 400 + 400);
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one given/when/then scenario per read model (bank batches, Solana attempts, approvals), each event folded and followed by the rows it must leave, read top to bottom"
    )]
    fn bank_batches_solana_attempts_and_approvals() {
        let mut p = Projections::default();
        p.fold(
            "platform",
            1,
            10,
            &EventBody::BankBatchGenerated(BankBatchGenerated {
                batch_id: "b".into(),
                rail: Rail::Sepa,
                file_name: "b.xml".into(),
                sha256: "ab".into(),
                payout_ids: vec!["po1".into(), "po2".into()],
                total_cents: 1234,
                currency: "EUR".into(),
            }),
        );
        p.fold(
            "platform",
            2,
            20,
            &EventBody::BankBatchStatusChanged(BankBatchStatus {
                batch_id: "b".into(),
                status: crate::batch::BatchStatus::Submitted,
            }),
        );
        assert_eq!(
            rows(&p, "bank_batches"),
            vec![(
                vec![t("b")],
                vec![
                    t("sepa"),
                    t("b.xml"),
                    t("ab"),
                    t(r#"["po1","po2"]"#),
                    i(1234),
                    t("EUR"),
                    t("submitted"),
                    i(10),
                    i(20)
                ]
            )]
        );
        assert_eq!(
            rows(&p, "bank_batch_payouts"),
            vec![
                (vec![t("po1")], vec![t("b")]),
                (vec![t("po2")], vec![t("b")])
            ]
        );
        p.fold(
            "platform",
            3,
            30,
            &EventBody::SolanaTxSigned(SolanaTxSigned {
                attempt_id: "at".into(),
                payout_ids: vec!["po1".into()],
                signature: "sig".into(),
                blockhash: "bh".into(),
                last_valid_block_height: 77,
                tx_base64: "AA==".into(),
                transfers: vec![("po1".into(), "w".into(), 5)],
            }),
        );
        assert_eq!(
            rows(&p, "solana_attempts"),
            vec![(
                vec![t("at")],
                vec![
                    t(r#"["po1"]"#),
                    t("sig"),
                    t("bh"),
                    i(77),
                    t("AA=="),
                    t(r#"[["po1","w",5]]"#),
                    Val::Null,
                    Val::Null,
                    Val::Null,
                    i(30),
                    Val::Null,
                    i(3)
                ]
            )]
        );
        p.fold(
            "platform",
            4,
            40,
            &EventBody::SolanaTxResolved(SolanaTxResolved {
                attempt_id: "at".into(),
                outcome: "landed".into(),
                slot: Some(9),
                reason: Some("ok".into()),
            }),
        );
        assert_eq!(
            rows(&p, "solana_attempts")[0].1[6..],
            [t("landed"), i(9), t("ok"), i(30), i(40), i(3)]
        );
        p.fold(
            "platform",
            5,
            50,
            &EventBody::ApprovalRequested(ApprovalRequested {
                approval_id: "ap".into(),
                kind: "adjustment".into(),
                command: "{}".into(),
                summary: "credit p".into(),
                provider_id: Some("p".parse().unwrap()),
                amount_micro_usdc: Some(5),
                requested_by: "alice".into(),
                content_hash: Some("c0".into()),
                requester_operator: Some("alice".into()),
                requester_signature: Some("sig".into()),
            }),
        );
        assert_eq!(
            rows(&p, "approvals"),
            vec![(
                vec![t("ap")],
                vec![
                    t("adjustment"),
                    t("{}"),
                    t("credit p"),
                    t("p"),
                    i(5),
                    t("alice"),
                    i(50),
                    t("pending"),
                    Val::Null,
                    Val::Null,
                    Val::Null,
                    t("c0"),
                    t("alice"),
                    Val::Null
                ]
            )]
        );
        p.fold(
            "platform",
            6,
            60,
            &EventBody::ApprovalDecided(ApprovalDecided {
                approval_id: "ap".into(),
                decision: ApprovalDecision::Rejected,
                decided_by: "bob".into(),
                reason: Some("no".into()),
                decider_operator: Some("bob".into()),
                decider_signature: Some("sig".into()),
                executed: Vec::new(),
            }),
        );
        assert_eq!(
            rows(&p, "approvals")[0].1[7..],
            [
                t("rejected"),
                t("bob"),
                i(60),
                t("no"),
                t("c0"),
                t("alice"),
                t("bob")
            ]
        );
        // None of these tables is an additive aggregate; balances are.
        let first = ops(
            "platform",
            1,
            10,
            &EventBody::FxRateSet(FxRateSet {
                eur_per_usd: "1".into(),
            }),
        );
        assert!(!first[0].is_aggregate());
        let adj = ops(
            "provider:p",
            1,
            10,
            &EventBody::AdjustmentPosted(AdjustmentPosted {
                adjustment_id: "a".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                amount_micro_usdc: 1,
                reason: "r".into(),
                reference: None,
                approval_id: None,
            }),
        );
        assert_eq!(adj.len(), 3);
        assert!(adj.iter().all(ProjOp::is_aggregate));
    }

    #[test]
    fn cells_and_tables() {
        assert_eq!(Val::Int(-7).int(), -7);
        assert_eq!(Val::Null.int(), 0);
        assert_eq!(t("x").int(), 0);
        assert_eq!(t("x").text(), Some("x"));
        assert_eq!(Val::Int(1).text(), None);
        assert_eq!(Val::from(Some("a".to_owned())), t("a"));
        assert_eq!(Val::from(None::<String>), Val::Null);
        assert_eq!(Val::from(Some(3i64)), i(3));
        assert_eq!(Val::from(None::<i64>), Val::Null);
        assert_eq!(
            serde_json::to_string(&vec![Val::Null, i(1), t("a")]).unwrap(),
            r#"[null,1,"a"]"#
        );
        assert_eq!(table("gpus").key, ["gpu_id", "stream"]);
        assert_eq!(col("payouts", "status"), 8);
        assert_eq!(Projections::default().rows("gpus").count(), 0);
    }
}
