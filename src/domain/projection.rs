//! Projections: the read models folded from events.
//!
//! `ops(event)` is the single source of truth for what an event does to the projections.
//! The store applies the ops in SQL in the same transaction as the append; `verify` and
//! `rebuild` apply the same ops to an in-memory [`Projections`] and compare or write it.
//! Every projection row depends only on the events of its own stream, so no write touches
//! another provider's rows, and platform totals are sums over providers.

use std::collections::BTreeMap;

use super::event::*;
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

/// A projection table: its key columns and value columns, in SQL column order.
pub struct TableSpec {
    pub name: &'static str,
    pub key: &'static [&'static str],
    pub vals: &'static [&'static str],
}

/// Every projection table. Column names double as the SQL schema's.
pub const TABLES: &[TableSpec] = &[
    TableSpec {
        name: "account_balances",
        key: &["owner", "account"],
        vals: &["balance_micro_usdc"],
    },
    TableSpec {
        name: "earnings_daily",
        key: &["provider_id", "gpu_id", "day"],
        vals: &[
            "model",
            "gross_micro_usdc",
            "fee_micro_usdc",
            "net_micro_usdc",
            "duration_ms",
        ],
    },
    TableSpec {
        name: "usage_segments",
        key: &["gpu_id", "started_at_ms"],
        vals: &[
            "ended_at_ms",
            "event_id",
            "provider_id",
            "model",
            "gross_micro_usdc",
            "fee_micro_usdc",
            "net_micro_usdc",
        ],
    },
    TableSpec {
        name: "payable_recorded",
        key: &["provider_id", "day"],
        vals: &["amount_micro_usdc"],
    },
    TableSpec {
        name: "providers",
        key: &["provider_id"],
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
    },
    TableSpec {
        name: "provider_tiers",
        // `seq`: the event's position in the provider's stream, so that tier changes
        // booked in the same millisecond all stay in the history, in booking order.
        key: &["provider_id", "from_ms", "seq"],
        vals: &["tier"],
    },
    TableSpec {
        name: "gpus",
        key: &["gpu_id"],
        vals: &["provider_id", "model", "registered_at_ms"],
    },
    TableSpec {
        name: "rates",
        key: &["provider_id", "model", "effective_from_ms"],
        vals: &["rate_usdc_per_hour"],
    },
    TableSpec {
        name: "fee_schedules",
        key: &["tier", "effective_from_ms"],
        vals: &["fee_bps"],
    },
    TableSpec {
        name: "payouts",
        key: &["payout_id"],
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
    },
    TableSpec {
        name: "run_decisions",
        key: &["run_kind", "run_key", "provider_id"],
        vals: &[
            "decision",
            "available_micro_usdc",
            "amount_micro_usdc",
            "payout_id",
            "decided_at_ms",
        ],
    },
    TableSpec {
        name: "payout_runs",
        key: &["run_kind", "run_key"],
        vals: &["cutoff_ms", "candidates", "totals", "completed_at_ms"],
    },
    TableSpec {
        name: "fx_rates",
        key: &["recorded_at_ms"],
        vals: &["eur_per_usd"],
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
        ],
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
        ],
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
    RemoveSegments { gpu_id: String, event_id: String },
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

/// The projection changes of one event appended to `stream` as its `seq`-th event at
/// `recorded_at_ms`.
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
        EventBody::UsageRecorded(u) => {
            usage_ops(
                &mut out,
                &u.provider_id,
                &u.gpu_id,
                &u.model,
                &u.segments,
                1,
                recorded_at_ms,
            );
            for s in &u.segments {
                out.push(ProjOp::Put {
                    table: "usage_segments",
                    key: vec![u.gpu_id.as_str().into(), s.started_at_ms.into()],
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
                &mut out,
                &v.provider_id,
                &v.gpu_id,
                &v.model,
                &v.segments,
                -1,
                recorded_at_ms,
            );
            out.push(ProjOp::RemoveSegments {
                gpu_id: v.gpu_id.clone(),
                event_id: v.event_id.clone(),
            });
        }
        EventBody::AdjustmentPosted(a) => out.push(payable_recorded(
            &a.provider_id,
            recorded_at_ms,
            a.amount_micro_usdc,
        )),
        EventBody::ProviderRegistered(p) => {
            out.push(ProjOp::Put {
                table: "providers",
                key: vec![p.provider_id.as_str().into()],
                vals: vec![
                    p.name.as_str().into(),
                    p.email.as_str().into(),
                    p.tier.as_str().into(),
                    p.schedule.as_str().into(),
                    p.status.as_str().into(),
                    p.payout_method.as_ref().map(json).unwrap_or(Val::Null),
                    Val::Null,
                    Val::Int(0),
                    recorded_at_ms.into(),
                ],
            });
            out.push(tier_put(&p.provider_id, recorded_at_ms, seq, p.tier));
        }
        EventBody::ProviderUpdated(p) => {
            let mut set: Vec<(&str, Val)> = Vec::new();
            if let Some(name) = &p.name {
                set.push(("name", name.as_str().into()));
            }
            if let Some(email) = &p.email {
                set.push(("email", email.as_str().into()));
            }
            if let Some(tier) = p.tier {
                set.push(("tier", tier.as_str().into()));
                out.push(tier_put(&p.provider_id, recorded_at_ms, seq, tier));
            }
            if let Some(schedule) = p.schedule {
                set.push(("schedule", schedule.as_str().into()));
            }
            if let Some(status) = p.status {
                set.push(("status", status.as_str().into()));
            }
            if let Some(method) = &p.payout_method {
                set.push(("payout_method", json(method)));
                set.push(("method_set_at_ms", recorded_at_ms.into()));
                set.push(("method_invalid", Val::Int(0)));
            }
            out.push(patch("providers", vec![p.provider_id.as_str().into()], set));
        }
        EventBody::GpuRegistered(g) => out.push(ProjOp::Put {
            table: "gpus",
            key: vec![g.gpu_id.as_str().into()],
            vals: vec![
                g.provider_id.as_str().into(),
                g.model.as_str().into(),
                recorded_at_ms.into(),
            ],
        }),
        EventBody::RateSet(r) => out.push(ProjOp::Put {
            table: "rates",
            key: vec![
                r.provider_id.as_str().into(),
                r.model.as_str().into(),
                r.effective_from_ms.into(),
            ],
            vals: vec![r.rate_usdc_per_hour.as_str().into()],
        }),
        EventBody::FeeScheduleSet(f) => out.push(ProjOp::Put {
            table: "fee_schedules",
            key: vec![f.tier.as_str().into(), f.effective_from_ms.into()],
            vals: vec![i64::from(f.fee_bps).into()],
        }),
        EventBody::PayoutRunDecided(d) => out.push(ProjOp::Put {
            table: "run_decisions",
            key: vec![
                d.run_kind.as_str().into(),
                d.run_key.as_str().into(),
                d.provider_id.as_str().into(),
            ],
            vals: vec![
                d.decision.as_str().into(),
                d.available_micro_usdc.into(),
                d.amount_micro_usdc.into(),
                d.payout_id.clone().into(),
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
        EventBody::PayoutCreated(p) => out.push(ProjOp::Put {
            table: "payouts",
            key: vec![p.payout_id.as_str().into()],
            vals: vec![
                p.provider_id.as_str().into(),
                p.run_kind.as_str().into(),
                p.run_key.as_str().into(),
                p.method.rail().as_str().into(),
                p.amount_micro_usdc.into(),
                p.amount_eur_cents.into(),
                p.eur_per_usd.clone().into(),
                json(&p.method),
                if p.held { "held" } else { "created" }.into(),
                Val::Null,
                Val::Null,
                Val::Null,
                Val::Null,
                recorded_at_ms.into(),
                recorded_at_ms.into(),
            ],
        }),
        EventBody::PayoutHeld(p) => out.push(payout_patch(
            &p.payout_id,
            recorded_at_ms,
            "held",
            vec![("hold_reason", p.reason.as_str().into())],
        )),
        EventBody::PayoutReleased(p) => {
            let mut set = Vec::new();
            if let Some(cents) = p.amount_eur_cents {
                set.push(("amount_eur_cents", cents.into()));
            }
            if let Some(rate) = &p.eur_per_usd {
                set.push(("eur_per_usd", rate.as_str().into()));
            }
            out.push(payout_patch(&p.payout_id, recorded_at_ms, "created", set))
        }
        EventBody::PayoutCancelled(p) => out.push(payout_patch(
            &p.payout_id,
            recorded_at_ms,
            "cancelled",
            vec![],
        )),
        EventBody::PayoutSubmitted(p) => out.push(payout_patch(
            &p.payout_id,
            recorded_at_ms,
            "submitted",
            vec![
                ("reference", p.reference.as_str().into()),
                ("end_to_end_id", p.end_to_end_id.clone().into()),
            ],
        )),
        EventBody::PayoutSettled(p) => out.push(payout_patch(
            &p.payout_id,
            recorded_at_ms,
            "settled",
            vec![("reference", p.reference.as_str().into())],
        )),
        EventBody::PayoutFailed(p) => out.push(payout_patch(
            &p.payout_id,
            recorded_at_ms,
            "failed",
            vec![("failure_reason", p.reason.as_str().into())],
        )),
        EventBody::PayoutReturned(p) => {
            out.push(payout_patch(
                &p.payout_id,
                recorded_at_ms,
                "returned",
                vec![(
                    "failure_reason",
                    format!("{}: {}", p.reason_code, p.reason).into(),
                )],
            ));
            if p.method_invalid {
                out.push(patch(
                    "providers",
                    vec![p.provider_id.as_str().into()],
                    vec![("method_invalid", Val::Int(1))],
                ));
            }
        }
        EventBody::BankBatchGenerated(b) => out.push(ProjOp::Put {
            table: "bank_batches",
            key: vec![b.batch_id.as_str().into()],
            vals: vec![
                b.rail.as_str().into(),
                b.file_name.as_str().into(),
                b.sha256.as_str().into(),
                json(&b.payout_ids),
                b.total_cents.into(),
                b.currency.as_str().into(),
                "generated".into(),
                recorded_at_ms.into(),
                recorded_at_ms.into(),
            ],
        }),
        EventBody::BankBatchStatusChanged(b) => out.push(patch(
            "bank_batches",
            vec![b.batch_id.as_str().into()],
            vec![
                ("status", b.status.as_str().into()),
                ("updated_at_ms", recorded_at_ms.into()),
            ],
        )),
        EventBody::FxRateSet(f) => out.push(ProjOp::Put {
            table: "fx_rates",
            key: vec![recorded_at_ms.into()],
            vals: vec![f.eur_per_usd.as_str().into()],
        }),
        EventBody::SolanaTxSigned(s) => out.push(ProjOp::Put {
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
            ],
        }),
        EventBody::ApprovalRequested(a) => out.push(ProjOp::Put {
            table: "approvals",
            key: vec![a.approval_id.as_str().into()],
            vals: vec![
                a.kind.as_str().into(),
                a.command.as_str().into(),
                a.summary.as_str().into(),
                a.provider_id.clone().into(),
                a.amount_micro_usdc.into(),
                a.requested_by.as_str().into(),
                recorded_at_ms.into(),
                "pending".into(),
                Val::Null,
                Val::Null,
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
            ],
        )),
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
    }
    out
}

fn tier_put(provider_id: &str, from_ms: i64, seq: i64, tier: Tier) -> ProjOp {
    ProjOp::Put {
        table: "provider_tiers",
        key: vec![provider_id.into(), from_ms.into(), seq.into()],
        vals: vec![tier.as_str().into()],
    }
}

fn payable_recorded(provider_id: &str, recorded_at_ms: i64, delta: i64) -> ProjOp {
    ProjOp::Add {
        table: "payable_recorded",
        key: vec![provider_id.into(), day_number(recorded_at_ms).into()],
        init: vec![Val::Int(0)],
        deltas: vec![(0, delta)],
    }
}

fn payout_patch(payout_id: &str, at_ms: i64, status: &str, mut set: Vec<(&str, Val)>) -> ProjOp {
    set.push(("status", status.into()));
    set.push(("updated_at_ms", at_ms.into()));
    patch("payouts", vec![payout_id.into()], set)
}

fn usage_ops(
    out: &mut Vec<ProjOp>,
    provider_id: &str,
    gpu_id: &str,
    model: &str,
    segments: &[Segment],
    sign: i64,
    recorded_at_ms: i64,
) {
    let mut net_total = 0;
    for s in segments {
        net_total += s.net_micro_usdc;
        out.push(ProjOp::Add {
            table: "earnings_daily",
            key: vec![
                provider_id.into(),
                gpu_id.into(),
                day_number(s.started_at_ms).into(),
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
        provider_id,
        recorded_at_ms,
        sign * net_total,
    ));
}

/// The projections held in memory: per table, key → values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Projections {
    pub tables: BTreeMap<&'static str, BTreeMap<Vec<Val>, Vec<Val>>>,
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
            ProjOp::RemoveSegments { gpu_id, event_id } => {
                let event_col = col("usage_segments", "event_id");
                if let Some(rows) = self.tables.get_mut("usage_segments") {
                    rows.retain(|k, v| {
                        !(k[0] == Val::Text(gpu_id.clone())
                            && v[event_col] == Val::Text(event_id.clone()))
                    });
                }
            }
        }
    }

    /// Folds one event.
    pub fn fold(&mut self, stream: &str, seq: i64, recorded_at_ms: i64, body: &EventBody) {
        for op in ops(stream, seq, recorded_at_ms, body) {
            self.apply(&op);
        }
    }

    pub fn rows(&self, table: &str) -> impl Iterator<Item = (&Vec<Val>, &Vec<Val>)> {
        self.tables.get(table).into_iter().flat_map(|t| t.iter())
    }
}
