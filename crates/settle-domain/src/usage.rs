//! The usage aggregate's decision (SPEC §2, §4): whether one metered usage event, new and
//! inside the booking window, is booked, and how it is priced. Pure: the ledger reads the
//! state ([`UsageState`]) inside the booking's transaction, calls [`decide`], and appends
//! what it returns. Duplicates and the booking window are decided before, by the ledger.

use super::DomainError;
use super::bands::{RateBand, rate_check};
use super::event::{Segment, UsageRecorded, UsageVoided};
use super::ids::{EventId, GpuId, ProviderId, RentalId};
use super::money::Rate;
use super::pricing::{FeeBook, PriceBook, TierHistory, price_interval};
use super::time::format_ms;

/// A usage event to book, validated field by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordUsage<'a> {
    pub event_id: &'a EventId,
    pub provider_id: &'a ProviderId,
    pub gpu_id: &'a GpuId,
    pub rental_id: Option<&'a RentalId>,
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    /// The agreed rate sent with the event (the metering pipeline only), else the price
    /// book's.
    pub rate: Option<Rate>,
}

/// What the ledger knows that the decision needs, as of the booking's chain heads.
#[derive(Clone, Copy, Debug)]
pub struct UsageState<'a> {
    /// The GPU's owner and model; `None` when no such GPU is registered.
    pub gpu: Option<(&'a str, &'a str)>,
    /// Booked, not voided usage of the GPU overlapping the event (`[started, ended)`),
    /// booked before or earlier in the same batch.
    pub overlap: Option<(i64, i64)>,
    /// The provider's tier history (empty: no such provider).
    pub tiers: &'a TierHistory,
    pub prices: &'a PriceBook,
    pub fees: &'a FeeBook,
    pub band: &'a RateBand,
}

/// Books `cmd` against `state`: the `usage.recorded` event, priced per UTC day at the fee
/// of the provider's tier in force at each segment's start; or the first refusal, in this
/// order: `unknown_gpu`, `gpu_provider_mismatch`, `overlapping_usage`, the sent rate's band
/// (`rate_out_of_band`, `rate_without_price_book`), `no_rate`, `unknown_provider`.
pub fn decide(state: &UsageState, cmd: &RecordUsage) -> Result<UsageRecorded, DomainError> {
    let Some((owner, model)) = state.gpu else {
        return Err(DomainError::new(
            "unknown_gpu",
            format!("no GPU {}", cmd.gpu_id),
        ));
    };
    if owner != cmd.provider_id {
        return Err(DomainError::new(
            "gpu_provider_mismatch",
            format!(
                "GPU {} does not belong to provider {}",
                cmd.gpu_id, cmd.provider_id
            ),
        ));
    }
    if let Some((s, t)) = state.overlap {
        return Err(DomainError::new(
            "overlapping_usage",
            format!(
                "GPU {} already has usage booked in [{}, {})",
                cmd.gpu_id,
                format_ms(s),
                format_ms(t)
            ),
        ));
    }
    let book = state.prices.rate_at(model, cmd.started_at_ms);
    let (rate, rate_source) = match (cmd.rate, book) {
        (Some(rate), book) => {
            // Usage cannot mint money: the sent rate stays near the price book.
            rate_check(rate, book, state.band)?;
            (rate, "event")
        }
        (None, Some(rate)) => (rate, "price_book"),
        (None, None) => {
            return Err(DomainError::new(
                "no_rate",
                format!(
                    "no rate for model {model} of provider {} at {}",
                    cmd.provider_id,
                    format_ms(cmd.started_at_ms)
                ),
            ));
        }
    };
    if state.tiers.tier_at(cmd.started_at_ms).is_none() {
        return Err(DomainError::new(
            "unknown_provider",
            format!("no provider {}", cmd.provider_id),
        ));
    }
    let segments = price_interval(cmd.started_at_ms, cmd.ended_at_ms, rate, |at| {
        let tier = state.tiers.tier_at(at).expect("a tier from started_at on");
        state.fees.fee_at(tier, at)
    });
    Ok(UsageRecorded {
        event_id: cmd.event_id.clone(),
        provider_id: cmd.provider_id.clone(),
        gpu_id: cmd.gpu_id.clone(),
        model: model.to_owned(),
        rental_id: cmd.rental_id.cloned(),
        started_at_ms: cmd.started_at_ms,
        ended_at_ms: cmd.ended_at_ms,
        rate_usdc_per_hour: rate.to_canonical(),
        rate_source: rate_source.to_owned(),
        segments: segments
            .iter()
            .map(|s| Segment {
                started_at_ms: s.started_at_ms,
                ended_at_ms: s.ended_at_ms,
                fee_bps: s.fee_bps,
                gross_micro_usdc: s.gross_micro_usdc,
                fee_micro_usdc: s.fee_micro_usdc,
                net_micro_usdc: s.net_micro_usdc,
            })
            .collect(),
    })
}

/// The exact reversal of a booked usage event (a correction, SPEC §3): its segments with
/// the same business time, so every line it booked is undone on the same days.
pub fn void(usage: &UsageRecorded, reason: &str) -> UsageVoided {
    UsageVoided {
        event_id: usage.event_id.clone(),
        provider_id: usage.provider_id.clone(),
        gpu_id: usage.gpu_id.clone(),
        model: usage.model.clone(),
        reason: reason.trim().to_owned(),
        segments: usage.segments.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bands::WithoutPriceBook;
    use crate::event::Tier;
    use crate::money::FeeBps;
    use crate::time::parse_rfc3339_ms;

    fn ms(t: &str) -> i64 {
        parse_rfc3339_ms(t).unwrap()
    }

    /// Given: what the ledger holds. Each field is one fact; `None` leaves it out.
    #[derive(Clone, Copy)]
    struct Given {
        gpu: Option<(&'static str, &'static str)>,
        overlap: Option<(&'static str, &'static str)>,
        /// The provider's tier from 2026-01-01, and a change to it at an instant.
        tier: Option<Tier>,
        tier_change: Option<(&'static str, Tier)>,
        /// The price book's rate for the model from 2026-01-01, and a change.
        book: Option<&'static str>,
        book_change: Option<(&'static str, &'static str)>,
        /// A fee change of the community tier at an instant (bps).
        fee_change: Option<(&'static str, i64)>,
        without_price_book: WithoutPriceBook,
    }

    const GIVEN: Given = Given {
        gpu: Some(("prv_a", "h100")),
        overlap: None,
        tier: Some(Tier::Community),
        tier_change: None,
        book: Some("2.00"),
        book_change: None,
        fee_change: None,
        without_price_book: WithoutPriceBook::Reject,
    };

    /// Then: the segments booked (start, end, fee bps, gross, fee, net) and the rate, or
    /// the refusal's code.
    enum Then {
        Booked(
            &'static str,
            &'static str,
            &'static [(&'static str, &'static str, u16, i64, i64, i64)],
        ),
        Refused(&'static str),
    }

    fn run(given: Given, when: RecordUsage) -> Result<UsageRecorded, DomainError> {
        let mut tiers = TierHistory::default();
        if let Some(t) = given.tier {
            tiers.set(ms("2026-01-01T00:00:00Z"), 1, t);
        }
        if let Some((at, t)) = given.tier_change {
            tiers.set(ms(at), 2, t);
        }
        let mut prices = PriceBook::default();
        if let Some(r) = given.book {
            prices.set("h100", ms("2026-01-01T00:00:00Z"), Rate::parse(r).unwrap());
        }
        if let Some((at, r)) = given.book_change {
            prices.set("h100", ms(at), Rate::parse(r).unwrap());
        }
        let mut fees = FeeBook::default();
        if let Some((at, bps)) = given.fee_change {
            fees.set(Tier::Community, ms(at), FeeBps::new(bps).unwrap());
        }
        let band = RateBand {
            min_pct: 50,
            max_pct: 200,
            without_price_book: given.without_price_book,
        };
        let state = UsageState {
            gpu: given.gpu,
            overlap: given.overlap.map(|(s, t)| (ms(s), ms(t))),
            tiers: &tiers,
            prices: &prices,
            fees: &fees,
            band: &band,
        };
        decide(&state, &when)
    }

    fn when(from: &str, to: &str, rate: Option<&str>) -> RecordUsage<'static> {
        // The table's ids, for the whole test run (a command borrows its ids).
        fn id<T: std::str::FromStr>(text: &str) -> &'static T
        where
            T::Err: std::fmt::Debug,
        {
            Box::leak(Box::new(text.parse().unwrap()))
        }
        RecordUsage {
            event_id: id("ev1"),
            provider_id: id("prv_a"),
            gpu_id: id("gpu_1"),
            rental_id: None,
            started_at_ms: ms(from),
            ended_at_ms: ms(to),
            rate: rate.map(|r| Rate::parse(r).unwrap()),
        }
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "a given/when/then table: each row is one usage case with the booking or rejection it must give, read as one table with the loop that checks it"
    )]
    fn given_when_then() {
        use Then::*;
        let h = |t: &str| format!("2026-11-10T{t}Z");
        let rows: Vec<(&str, Given, RecordUsage, Then)> = vec![
            (
                "one hour at the book rate, community fee 20%",
                GIVEN,
                when(&h("10:00:00"), &h("11:00:00"), None),
                Booked(
                    "2.000000",
                    "price_book",
                    &[(
                        "2026-11-10T10:00:00Z",
                        "2026-11-10T11:00:00Z",
                        2000,
                        2_000_000,
                        400_000,
                        1_600_000,
                    )],
                ),
            ),
            (
                "split at UTC midnight, each day its own line",
                GIVEN,
                when("2026-11-10T23:30:00Z", "2026-11-11T00:30:00Z", None),
                Booked(
                    "2.000000",
                    "price_book",
                    &[
                        (
                            "2026-11-10T23:30:00Z",
                            "2026-11-11T00:00:00Z",
                            2000,
                            1_000_000,
                            200_000,
                            800_000,
                        ),
                        (
                            "2026-11-11T00:00:00Z",
                            "2026-11-11T00:30:00Z",
                            2000,
                            1_000_000,
                            200_000,
                            800_000,
                        ),
                    ],
                ),
            ),
            (
                "the rate in force at started_at, not a later change",
                Given {
                    book_change: Some(("2026-11-10T10:30:00Z", "3.00")),
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), None),
                Booked(
                    "2.000000",
                    "price_book",
                    &[(
                        "2026-11-10T10:00:00Z",
                        "2026-11-10T11:00:00Z",
                        2000,
                        2_000_000,
                        400_000,
                        1_600_000,
                    )],
                ),
            ),
            (
                "enterprise from the day's start: fee 15% on the next day's segment",
                Given {
                    tier_change: Some(("2026-11-11T00:00:00Z", Tier::Enterprise)),
                    ..GIVEN
                },
                when("2026-11-10T23:00:00Z", "2026-11-11T01:00:00Z", None),
                Booked(
                    "2.000000",
                    "price_book",
                    &[
                        (
                            "2026-11-10T23:00:00Z",
                            "2026-11-11T00:00:00Z",
                            2000,
                            2_000_000,
                            400_000,
                            1_600_000,
                        ),
                        (
                            "2026-11-11T00:00:00Z",
                            "2026-11-11T01:00:00Z",
                            1500,
                            2_000_000,
                            300_000,
                            1_700_000,
                        ),
                    ],
                ),
            ),
            (
                "a fee change in force at the segment's start",
                Given {
                    fee_change: Some(("2026-11-01T00:00:00Z", 1000)),
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), None),
                Booked(
                    "2.000000",
                    "price_book",
                    &[(
                        "2026-11-10T10:00:00Z",
                        "2026-11-10T11:00:00Z",
                        1000,
                        2_000_000,
                        200_000,
                        1_800_000,
                    )],
                ),
            ),
            (
                "the metering pipeline's agreed rate, inside the band",
                GIVEN,
                when(&h("10:00:00"), &h("10:20:00"), Some("3.00")),
                Booked(
                    "3.000000",
                    "event",
                    &[(
                        "2026-11-10T10:00:00Z",
                        "2026-11-10T10:20:00Z",
                        2000,
                        1_000_000,
                        200_000,
                        800_000,
                    )],
                ),
            ),
            (
                "an agreed rate at the band's upper end (200%) is booked",
                GIVEN,
                when(&h("10:00:00"), &h("11:00:00"), Some("4.00")),
                Booked(
                    "4.000000",
                    "event",
                    &[(
                        "2026-11-10T10:00:00Z",
                        "2026-11-10T11:00:00Z",
                        2000,
                        4_000_000,
                        800_000,
                        3_200_000,
                    )],
                ),
            ),
            (
                "an agreed rate one micro-USDC above the band",
                GIVEN,
                when(&h("10:00:00"), &h("11:00:00"), Some("4.000001")),
                Refused("rate_out_of_band"),
            ),
            (
                "an agreed rate without a price book, policy reject",
                Given {
                    book: None,
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), Some("2.00")),
                Refused("rate_without_price_book"),
            ),
            (
                "an agreed rate without a price book, policy accept",
                Given {
                    book: None,
                    without_price_book: WithoutPriceBook::Accept,
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), Some("2.00")),
                Booked(
                    "2.000000",
                    "event",
                    &[(
                        "2026-11-10T10:00:00Z",
                        "2026-11-10T11:00:00Z",
                        2000,
                        2_000_000,
                        400_000,
                        1_600_000,
                    )],
                ),
            ),
            (
                "no rate sent and none in the book",
                Given {
                    book: None,
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), None),
                Refused("no_rate"),
            ),
            (
                "a GPU nobody registered",
                Given { gpu: None, ..GIVEN },
                when(&h("10:00:00"), &h("11:00:00"), None),
                Refused("unknown_gpu"),
            ),
            (
                "another provider's GPU",
                Given {
                    gpu: Some(("prv_b", "h100")),
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), None),
                Refused("gpu_provider_mismatch"),
            ),
            (
                "booked usage of the GPU overlapping it",
                Given {
                    overlap: Some(("2026-11-10T10:59:00Z", "2026-11-10T12:00:00Z")),
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), None),
                Refused("overlapping_usage"),
            ),
            (
                "the overlap is refused before the rate is looked at",
                Given {
                    overlap: Some(("2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z")),
                    book: None,
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), None),
                Refused("overlapping_usage"),
            ),
            (
                "a provider without a tier at started_at",
                Given {
                    tier: None,
                    ..GIVEN
                },
                when(&h("10:00:00"), &h("11:00:00"), None),
                Refused("unknown_provider"),
            ),
        ];
        for (name, given, cmd, then) in rows {
            let got = run(given, cmd.clone());
            match then {
                Booked(rate, source, segments) => {
                    let e = got.unwrap_or_else(|e| panic!("{name}: refused {e}"));
                    assert_eq!(e.rate_usdc_per_hour, rate, "{name}");
                    assert_eq!(e.rate_source, source, "{name}");
                    assert_eq!(
                        (e.model.as_str(), e.gpu_id.as_str()),
                        ("h100", "gpu_1"),
                        "{name}"
                    );
                    let got: Vec<_> = e
                        .segments
                        .iter()
                        .map(|s| {
                            (
                                s.started_at_ms,
                                s.ended_at_ms,
                                s.fee_bps,
                                s.gross_micro_usdc,
                                s.fee_micro_usdc,
                                s.net_micro_usdc,
                            )
                        })
                        .collect();
                    let want: Vec<_> = segments
                        .iter()
                        .map(|(a, b, f, g, fee, n)| (ms(a), ms(b), *f, *g, *fee, *n))
                        .collect();
                    assert_eq!(got, want, "{name}");
                }
                Refused(code) => {
                    let e = got.err().unwrap_or_else(|| panic!("{name}: booked"));
                    assert_eq!(e.code, code, "{name}: {}", e.message);
                }
            }
        }
    }
}
