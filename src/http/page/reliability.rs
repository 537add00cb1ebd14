//! The dashboard's reliability card (SPEC §12): the provider's score, its three parts each
//! with what lowered it, the 30-day trend (SVG and table) and whether each GPU is listed,
//! all worded here in the page's language from the core's data (`settle_reliability`'s
//! reasons), never from the API's English sentences.

use std::fmt::Write as _;

use settle_reliability as rel;

use super::chart::{self, Point};
use super::i18n::Lang;
use super::render::escape;
use crate::domain::time::date_of_ms;
use crate::ledger::reliability::{PartView, ProviderReliability};

/// Reasons shown per part; the rest are counted ("and 3 more"), the JSON API has them all.
pub const REASONS_SHOWN_MAX: usize = 5;

/// The card: a section of the panel, carrying the reports' mark it shows.
pub fn section(out: &mut String, lang: Lang, r: &ProviderReliability) {
    let _ = write!(
        out,
        "<section id=\"reliability\" aria-labelledby=\"h-reliability\" data-reports-mark=\"{mark}\">\
         <h2 id=\"h-reliability\">{title}</h2><div class=\"cards\">\
         <article class=\"card\"><h3>{score_title}</h3><p class=\"big\" id=\"reliability-score\">{score}</p>\
         <p class=\"label\">{formula}</p></article>",
        mark = escape(&r.reports_mark),
        title = escape(lang.t("reliability_title")),
        score_title = escape(lang.t("reliability_score")),
        score = bps_data(lang, r.score.score_bps),
        formula = escape(&lang.tf(
            "reliability_formula",
            &[
                ("uptime", &lang.share(rel::WEIGHT_UPTIME_BPS)),
                ("jobs", &lang.share(rel::WEIGHT_JOBS_BPS)),
                ("benchmark", &lang.share(rel::WEIGHT_BENCHMARK_BPS)),
            ]
        )),
    );
    let parts = [
        (rel::Part::Uptime, &r.score.uptime),
        (rel::Part::Jobs, &r.score.jobs),
        (rel::Part::Benchmark, &r.score.benchmark),
    ];
    for (part, view) in parts {
        part_card(out, lang, r, part, view);
    }
    out.push_str("</div>");
    if r.gpus.is_empty() {
        let _ = write!(
            out,
            "<p>{}</p>",
            escape(&lang.tf(
                "reliability_no_gpus",
                &[("prior", &lang.percent(rel::PRIOR_BPS))]
            ))
        );
    }
    trend_figure(out, lang, r);
    listing_table(out, lang, r);
    out.push_str("</section>");
}

/// A score in basis points: the local percentage, the basis points as its machine value.
fn bps_data(lang: Lang, bps: u16) -> String {
    format!(
        "<data value=\"{bps}\">{}</data>",
        escape(&lang.percent(bps))
    )
}

fn part_card(
    out: &mut String,
    lang: Lang,
    r: &ProviderReliability,
    part: rel::Part,
    view: &PartView,
) {
    let code = part.code();
    let _ = write!(
        out,
        "<article class=\"card\" id=\"reliability-{code}\"><h3>{title}</h3><p class=\"big\">{value}</p>\
         <p class=\"label\">{help}</p><h4>{lowered}</h4>",
        title = escape(lang.t(&format!("reliability_part_{code}"))),
        value = bps_data(lang, view.value_bps),
        help = escape(lang.t(&format!("reliability_help_{code}"))),
        lowered = escape(lang.t("reliability_lowered")),
    );
    let reasons: Vec<&rel::GpuReason> = r.lowered.iter().filter(|g| g.part == part).collect();
    if reasons.is_empty() {
        let _ = write!(
            out,
            "<p class=\"none\">{}</p></article>",
            escape(lang.t("reliability_nothing_lowered"))
        );
        return;
    }
    out.push_str("<ul class=\"reasons\">");
    for g in reasons.iter().take(REASONS_SHOWN_MAX) {
        let _ = write!(
            out,
            "<li><span class=\"gpu\">{}</span>: {}</li>",
            escape(g.gpu_id.as_str()),
            escape(&reason(lang, &g.reason))
        );
    }
    if reasons.len() > REASONS_SHOWN_MAX {
        let _ = write!(
            out,
            "<li>{}</li>",
            escape(&lang.tf(
                "reliability_more_reasons",
                &[("count", &(reasons.len() - REASONS_SHOWN_MAX).to_string())]
            ))
        );
    }
    out.push_str("</ul></article>");
}

fn trend_figure(out: &mut String, lang: Lang, r: &ProviderReliability) {
    let title = lang.t("reliability_trend");
    let points: Vec<Point> = r
        .trend
        .iter()
        .map(|p| Point {
            label: lang.short_date(date_of_ms(p.at_ms)),
            bps: p.score_bps,
        })
        .collect();
    let _ = write!(
        out,
        "<figure class=\"chart\" aria-labelledby=\"chart-reliability\"><figcaption id=\"chart-reliability\">{}</figcaption>{}\
         <details><summary>{}</summary><div class=\"scroll\"><table id=\"reliability-trend\"><caption>{}</caption><thead><tr>\
         <th scope=\"col\">{}</th><th scope=\"col\">{}</th></tr></thead><tbody>",
        escape(title),
        chart::line(&points, lang, title),
        escape(lang.t("chart_table")),
        escape(title),
        escape(lang.t("reliability_day")),
        escape(lang.t("reliability_score_col")),
    );
    for p in &r.trend {
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td></tr>",
            escape(&lang.date_of_ms(p.at_ms)),
            bps_data(lang, p.score_bps)
        );
    }
    out.push_str("</tbody></table></div></details></figure>");
}

fn listing_table(out: &mut String, lang: Lang, r: &ProviderReliability) {
    if r.gpus.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<h3>{}</h3><div class=\"scroll\"><table id=\"listing\"><thead><tr><th scope=\"col\">{}</th>\
         <th scope=\"col\">{}</th><th scope=\"col\">{}</th><th scope=\"col\">{}</th></tr></thead><tbody>",
        escape(lang.t("reliability_gpus")),
        escape(lang.t("gpu")),
        escape(lang.t("model")),
        escape(lang.t("reliability_score_col")),
        escape(lang.t("reliability_listing")),
    );
    for g in r.gpus.iter().take(super::PAGE_GPUS_MAX as usize) {
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td class=\"why\">{}</td></tr>",
            escape(&g.gpu_id),
            escape(&g.model),
            bps_data(lang, g.score.score_bps),
            escape(&listing(lang, &g.listing)),
        );
    }
    out.push_str("</tbody></table></div>");
}

/// Whether a GPU is listed, and why not, in the page's language.
pub fn listing(lang: Lang, listing: &rel::Listing) -> String {
    match listing {
        rel::Listing::Listed => lang.t("reliability_listed").to_owned(),
        rel::Listing::NotListed {
            reasons,
            next_listed_ms,
        } => {
            let why: Vec<String> = reasons.iter().map(|r| not_listed(lang, r)).collect();
            let why = why.join(lang.t("list_separator"));
            let mut text = lang.tf("reliability_not_listed", &[("why", &why)]);
            if let Some(at) = next_listed_ms {
                text.push_str(
                    &lang.tf("reliability_next_listed", &[("time", &lang.date_time(*at))]),
                );
            }
            text
        }
    }
}

/// What lowered a part, in the page's language (`settle_reliability::render_en` is the
/// API's English).
pub fn reason(lang: Lang, reason: &rel::Reason) -> String {
    match *reason {
        rel::Reason::OfflineInSchedule { day, offline_ms } => lang.tf(
            "rel_offline",
            &[
                ("duration", &lang.duration(offline_ms)),
                ("date", &lang.date(day)),
            ],
        ),
        rel::Reason::MaintenanceAnnouncedLate {
            start_ms,
            end_ms,
            notice_ms,
            notice_min_ms,
            offline_ms,
        } => lang.tf(
            if notice_ms <= 0 {
                "rel_maintenance_after"
            } else {
                "rel_maintenance_late"
            },
            &[
                ("start", &lang.date_time(start_ms)),
                ("end", &lang.date_time(end_ms)),
                ("notice", &lang.duration(notice_ms)),
                ("needed", &lang.duration(notice_min_ms)),
                ("offline", &lang.duration(offline_ms)),
            ],
        ),
        rel::Reason::InterruptedByProvider { at_ms, count } => lang.tf(
            if count == 1 {
                "rel_interrupted_one"
            } else {
                "rel_interrupted"
            },
            &[
                ("count", &count.to_string()),
                ("time", &lang.date_time(at_ms)),
            ],
        ),
        rel::Reason::BenchmarkDegraded {
            metric,
            first,
            latest,
        } => {
            let share = if first == 0 {
                rel::BPS_FULL
            } else {
                let bps = rel::div_half_even(
                    u128::from(latest.min(first)) * u128::from(rel::BPS_FULL),
                    u128::from(first),
                );
                u16::try_from(bps).unwrap_or(rel::BPS_FULL)
            };
            lang.tf(
                "rel_benchmark",
                &[
                    ("metric", metric_name(lang, metric)),
                    ("latest", &metric_value(lang, metric, latest)),
                    ("percent", &lang.percent(share)),
                    ("first", &metric_value(lang, metric, first)),
                ],
            )
        }
        rel::Reason::LimitedHistory {
            evidence_bps,
            prior_bps,
        } => lang.tf(
            "rel_limited",
            &[
                ("evidence", &lang.percent(evidence_bps)),
                ("prior", &lang.percent(prior_bps)),
            ],
        ),
    }
}

/// Why a GPU is not listed, in the page's language.
pub fn not_listed(lang: Lang, reason: &rel::NotListedReason) -> String {
    match *reason {
        rel::NotListedReason::OutsideSchedule => lang.t("rel_outside_schedule").to_owned(),
        rel::NotListedReason::InMaintenance { start_ms, end_ms } => lang.tf(
            "rel_in_maintenance",
            &[
                ("start", &lang.date_time(start_ms)),
                ("end", &lang.date_time(end_ms)),
            ],
        ),
        rel::NotListedReason::NoBenchmark => lang.t("rel_no_benchmark").to_owned(),
        rel::NotListedReason::BenchmarkBelowMinimum {
            metric,
            minimum,
            measured,
            at_ms,
        } => lang.tf(
            "rel_below_minimum",
            &[
                ("time", &lang.date_time(at_ms)),
                ("metric", metric_name(lang, metric)),
                ("measured", &metric_value(lang, metric, measured)),
                ("minimum", &metric_value(lang, metric, minimum)),
            ],
        ),
    }
}

fn metric_name(lang: Lang, metric: rel::Metric) -> &'static str {
    lang.t(&format!("metric_{}", metric.code()))
}

/// A metric value with its unit, in the page's number format: `95,5 TFLOPS` in German.
fn metric_value(lang: Lang, metric: rel::Metric, value: u64) -> String {
    let value = i64::try_from(value).unwrap_or(i64::MAX);
    match metric {
        rel::Metric::Fp16 | rel::Metric::Fp32 | rel::Metric::Tensor => {
            format!("{} TFLOPS", lang.number(value, 3))
        }
        rel::Metric::MemoryBandwidth => format!("{} GB/s", lang.number(value, 0)),
        rel::Metric::Network => format!("{} Mbit/s", lang.number(value, 0)),
        rel::Metric::Storage => format!("{} MB/s", lang.number(value, 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    #[test]
    fn every_reason_and_listing_is_worded_in_each_language() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 2).unwrap();
        let offline = rel::Reason::OfflineInSchedule {
            day,
            offline_ms: 11_400_000,
        };
        assert_eq!(
            reason(Lang::En, &offline),
            "offline 3 h 10 min inside your schedule on Dec 2, 2026"
        );
        assert_eq!(
            reason(Lang::De, &offline),
            "am 02.12.2026 3 Std. 10 Min. offline innerhalb Ihres Plans"
        );
        assert_eq!(
            reason(Lang::Zh, &offline),
            "2026年12月2日 在您的时间表内离线 3 小时 10 分钟"
        );
        let degraded = rel::Reason::BenchmarkDegraded {
            metric: rel::Metric::Fp16,
            first: 1_000_000,
            latest: 955_500,
        };
        assert_eq!(
            reason(Lang::De, &degraded),
            "FP16 bei 955,5 TFLOPS, 95,55 % der 1.000 TFLOPS des ersten Benchmarks"
        );
        let at = 1_796_083_200_000; // 2026-12-01 00:00 UTC
        let one = rel::Reason::InterruptedByProvider {
            at_ms: at,
            count: 1,
        };
        assert_eq!(
            reason(Lang::En, &one),
            "1 job interrupted by your side at Dec 1, 2026 00:00 UTC"
        );
        assert_eq!(
            not_listed(Lang::Zh, &rel::NotListedReason::OutsideSchedule),
            "不在您的可用时间表内"
        );
        assert_eq!(listing(Lang::De, &rel::Listing::Listed), "gelistet");
    }

    #[test]
    fn no_reason_or_listing_leaves_a_placeholder_in_any_language() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 2).unwrap();
        let at = 1_796_083_200_000; // 2026-12-01 00:00 UTC
        let all = [
            rel::Reason::OfflineInSchedule {
                day,
                offline_ms: 40_000,
            },
            rel::Reason::BenchmarkDegraded {
                metric: rel::Metric::Network,
                first: 0,
                latest: 10,
            },
            rel::Reason::MaintenanceAnnouncedLate {
                start_ms: at,
                end_ms: at + 7_200_000,
                notice_ms: 3_600_000,
                notice_min_ms: 86_400_000,
                offline_ms: 7_200_000,
            },
            rel::Reason::MaintenanceAnnouncedLate {
                start_ms: at,
                end_ms: at + 7_200_000,
                notice_ms: -60_000,
                notice_min_ms: 86_400_000,
                offline_ms: 60_000,
            },
            rel::Reason::InterruptedByProvider {
                at_ms: at,
                count: 1,
            },
            rel::Reason::InterruptedByProvider {
                at_ms: at,
                count: 3,
            },
            rel::Reason::LimitedHistory {
                evidence_bps: 8_333,
                prior_bps: 9_000,
            },
        ];
        let listings = [
            rel::NotListedReason::OutsideSchedule,
            rel::NotListedReason::InMaintenance {
                start_ms: at,
                end_ms: at + 1,
            },
            rel::NotListedReason::NoBenchmark,
            rel::NotListedReason::BenchmarkBelowMinimum {
                metric: rel::Metric::MemoryBandwidth,
                minimum: 3_000,
                measured: 2_900,
                at_ms: at,
            },
        ];
        for lang in Lang::ALL {
            for r in &all {
                let text = reason(lang, r);
                assert!(!text.contains('{') && !text.is_empty(), "{lang:?} {text}");
            }
            for r in &listings {
                let text = not_listed(lang, r);
                assert!(!text.contains('{') && !text.is_empty(), "{lang:?} {text}");
            }
            let text = listing(
                lang,
                &rel::Listing::NotListed {
                    reasons: listings.to_vec(),
                    next_listed_ms: Some(at),
                },
            );
            assert!(!text.contains('{'), "{text}");
        }
    }
}
