//! The control policy (SPEC §9): thresholds, bands, cooling-off, hold limit and enforcement,
//! booked on the ledger (`control.policy_set`). A process's configuration seeds a new
//! ledger's policy and nothing more: afterwards the ledger's policy decides, and changing
//! it is itself a gated command.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::DomainError;

/// Where dual control and the bands apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforce {
    /// On every ledger.
    Always,
    /// On real-clock ledgers (production); a simulated-clock ledger replays history for
    /// demos and tests without approvals.
    #[default]
    RealClock,
    /// No approvals on a simulated-clock ledger (the bands still hold there, an FX rate
    /// outside its band is rejected). A real-clock ledger is controlled whatever this says:
    /// a policy with `never` is refused there (`control_required`).
    Never,
}

impl Enforce {
    pub fn as_str(self) -> &'static str {
        match self {
            Enforce::Always => "always",
            Enforce::RealClock => "real_clock",
            Enforce::Never => "never",
        }
    }
}

/// The policy in force: every value a decision about control reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub enforce: Enforce,
    /// An adjustment whose absolute amount is at or above this waits for approval, and so
    /// does one that brings a provider's adjustments of the last `adjustment_window_hours`
    /// (absolute amounts added up) to it.
    pub adjustment_approval_micro_usdc: i64,
    pub adjustment_window_hours: i64,
    /// A void of a usage event whose amount is at or above this waits for approval.
    pub void_approval_micro_usdc: i64,
    /// A release of a held payout at or above this waits for approval (0: every release).
    pub release_approval_micro_usdc: i64,
    /// An FX rate (EUR per USD) outside `min..=max`, or moving more than `fx_step_max_pct`
    /// from the latest rate or more than `fx_week_step_max_pct` from the rate in force
    /// 7 days earlier, waits for approval.
    pub fx_eur_per_usd_min: Decimal,
    pub fx_eur_per_usd_max: Decimal,
    pub fx_step_max_pct: u32,
    pub fx_week_step_max_pct: u32,
    /// A `rate.set` outside `rate_set_band_min_pct..=rate_set_band_max_pct` percent of the
    /// price book (the provider's rate for the model in force at its `effective_from`, or
    /// else the platform's median rate of the model) waits for approval; so does a first
    /// rate of a model nobody prices yet.
    pub rate_set_band_min_pct: u32,
    pub rate_set_band_max_pct: u32,
    /// The band of rates sent with usage events, in percent of the price book.
    pub usage_rate_band_min_pct: u32,
    pub usage_rate_band_max_pct: u32,
    /// A request not decided within this many hours expires.
    pub approval_expiry_hours: i64,
    /// The largest payout created without a release; above it, held.
    pub payout_limit_micro_usdc: i64,
    /// A payout method set less than this many hours before a run is not paid to.
    pub cooling_off_hours: i64,
}

impl Policy {
    /// Refuses a policy no ledger should run under (`invalid_policy`).
    pub fn check(&self) -> Result<(), DomainError> {
        let bad = |m: String| Err(DomainError::new("invalid_policy", m));
        if self.adjustment_approval_micro_usdc <= 0 {
            return bad("adjustment_approval_micro_usdc must be positive".into());
        }
        if self.adjustment_window_hours < 0 || self.adjustment_window_hours > 24 * 31 {
            return bad("adjustment_window_hours must lie in 0..=744".into());
        }
        if self.void_approval_micro_usdc <= 0 || self.release_approval_micro_usdc < 0 {
            return bad(
                "void_approval_micro_usdc must be positive, release_approval_micro_usdc \
                 not negative"
                    .into(),
            );
        }
        if self.fx_eur_per_usd_min <= Decimal::ZERO
            || self.fx_eur_per_usd_min > self.fx_eur_per_usd_max
        {
            return bad(
                "fx_eur_per_usd_min must be positive and at most fx_eur_per_usd_max".into(),
            );
        }
        if self.rate_set_band_min_pct > 100 || self.rate_set_band_max_pct < 100 {
            return bad("the rate.set band must contain 100 %".into());
        }
        if self.usage_rate_band_min_pct > 100 || self.usage_rate_band_max_pct < 100 {
            return bad("the usage rate band must contain 100 %".into());
        }
        if self.approval_expiry_hours <= 0 || self.payout_limit_micro_usdc <= 0 {
            return bad(
                "approval_expiry_hours and payout_limit_micro_usdc must be positive".into(),
            );
        }
        if self.cooling_off_hours < 0 {
            return bad("cooling_off_hours must not be negative".into());
        }
        Ok(())
    }

    /// Each value by name, as text, in declaration order (the CLI's table, the differences
    /// a process reports).
    pub fn values(&self) -> Vec<(&'static str, String)> {
        vec![
            ("enforce", self.enforce.as_str().to_owned()),
            (
                "adjustment_approval_micro_usdc",
                self.adjustment_approval_micro_usdc.to_string(),
            ),
            (
                "adjustment_window_hours",
                self.adjustment_window_hours.to_string(),
            ),
            (
                "void_approval_micro_usdc",
                self.void_approval_micro_usdc.to_string(),
            ),
            (
                "release_approval_micro_usdc",
                self.release_approval_micro_usdc.to_string(),
            ),
            ("fx_eur_per_usd_min", self.fx_eur_per_usd_min.to_string()),
            ("fx_eur_per_usd_max", self.fx_eur_per_usd_max.to_string()),
            ("fx_step_max_pct", self.fx_step_max_pct.to_string()),
            (
                "fx_week_step_max_pct",
                self.fx_week_step_max_pct.to_string(),
            ),
            (
                "rate_set_band_min_pct",
                self.rate_set_band_min_pct.to_string(),
            ),
            (
                "rate_set_band_max_pct",
                self.rate_set_band_max_pct.to_string(),
            ),
            (
                "usage_rate_band_min_pct",
                self.usage_rate_band_min_pct.to_string(),
            ),
            (
                "usage_rate_band_max_pct",
                self.usage_rate_band_max_pct.to_string(),
            ),
            (
                "approval_expiry_hours",
                self.approval_expiry_hours.to_string(),
            ),
            (
                "payout_limit_micro_usdc",
                self.payout_limit_micro_usdc.to_string(),
            ),
            ("cooling_off_hours", self.cooling_off_hours.to_string()),
        ]
    }

    /// The names of the values where `other` differs from this policy.
    pub fn differences(&self, other: &Policy) -> Vec<&'static str> {
        self.values()
            .into_iter()
            .zip(other.values())
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a.0)
            .collect()
    }

    /// This policy with `name` set to `value` (`settle control set-policy NAME=VALUE`).
    pub fn with(&self, name: &str, value: &str) -> Result<Policy, DomainError> {
        let mut json = serde_json::to_value(self).map_err(|e| {
            DomainError::new("invalid_policy", format!("policy does not serialize: {e}"))
        })?;
        let Some(slot) = json.get_mut(name) else {
            return Err(DomainError::new(
                "invalid_policy",
                format!(
                    "no policy value {name}; the values are {}",
                    self.values()
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        *slot = match slot {
            serde_json::Value::Number(_) => {
                serde_json::Value::Number(value.parse().map_err(|_| {
                    DomainError::new("invalid_policy", format!("{name} takes an integer"))
                })?)
            }
            _ => serde_json::Value::String(value.to_owned()),
        };
        let policy: Policy = serde_json::from_value(json)
            .map_err(|e| DomainError::new("invalid_policy", format!("{name}={value}: {e}")))?;
        policy.check()?;
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            enforce: Enforce::RealClock,
            adjustment_approval_micro_usdc: 1_000_000_000,
            adjustment_window_hours: 24,
            void_approval_micro_usdc: 1_000_000_000,
            release_approval_micro_usdc: 0,
            fx_eur_per_usd_min: Decimal::new(5, 1),
            fx_eur_per_usd_max: Decimal::new(2, 0),
            fx_step_max_pct: 10,
            fx_week_step_max_pct: 10,
            rate_set_band_min_pct: 50,
            rate_set_band_max_pct: 200,
            usage_rate_band_min_pct: 50,
            usage_rate_band_max_pct: 200,
            approval_expiry_hours: 72,
            payout_limit_micro_usdc: 100_000_000_000,
            cooling_off_hours: 72,
        }
    }

    #[test]
    fn a_value_is_changed_by_name_and_checked() {
        let p = policy();
        let q = p.with("cooling_off_hours", "24").unwrap();
        assert_eq!(q.cooling_off_hours, 24);
        assert_eq!(p.differences(&q), vec!["cooling_off_hours"]);
        let q = p.with("fx_eur_per_usd_max", "1.5").unwrap();
        assert_eq!(q.fx_eur_per_usd_max, Decimal::new(15, 1));
        assert_eq!(
            q.with("enforce", "always").unwrap().enforce,
            Enforce::Always
        );
        assert_eq!(
            p.with("cooling_off_hours", "-1").unwrap_err().code,
            "invalid_policy"
        );
        assert_eq!(p.with("no_such", "1").unwrap_err().code, "invalid_policy");
        assert_eq!(
            p.with("enforce", "sometimes").unwrap_err().code,
            "invalid_policy"
        );
        assert_eq!(
            p.with("rate_set_band_max_pct", "90").unwrap_err().code,
            "invalid_policy"
        );
    }

    #[test]
    fn a_policy_reads_back_what_it_wrote() {
        let p = policy();
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Policy>(&text).unwrap(), p);
        assert!(text.contains("\"fx_eur_per_usd_min\":\"0.5\""), "{text}");
    }
}
