//! Benchmark consistency: the latest benchmark against the first.

use settle_reliability::{BenchmarkMetrics, Config, Metric, Ratio, Reason, render_en, score};

use crate::support::{DAY, always_gpu, at, bench, metrics};

fn now() -> i64 {
    at("2026-12-06T00:00:00Z")
}

fn benchmark_part(benchmarks: Vec<settle_reliability::Benchmark>) -> settle_reliability::PartScore {
    let gpu = always_gpu("g").benchmarks(benchmarks).build();
    score(&gpu, &Config::default(), now()).score.benchmark
}

#[test]
fn a_first_benchmark_alone_is_the_prior() {
    // Nothing to compare yet: no measurement, value = prior 9000.
    let p = benchmark_part(vec![bench(now() - DAY, metrics())]);
    assert_eq!((p.measured, p.value_bps, p.evidence_bps), (None, 9_000, 0));
    assert_eq!(
        p.reasons,
        vec![Reason::LimitedHistory {
            evidence_bps: 0,
            prior_bps: 9_000
        }]
    );
}

#[test]
fn an_unchanged_benchmark_is_full() {
    let p = benchmark_part(vec![
        bench(now() - 90 * DAY, metrics()),
        bench(now() - DAY, metrics()),
    ]);
    assert_eq!(
        (p.value_bps, p.evidence_bps, p.reasons.len()),
        (10_000, 10_000, 0)
    );
    // A faster metric is capped at 100 %: storage 2000 -> 2400 MB/s, the rest equal: 10000.
    let faster = BenchmarkMetrics {
        storage_mb_s: 2_400,
        ..metrics()
    };
    let p = benchmark_part(vec![
        bench(now() - 90 * DAY, metrics()),
        bench(now() - DAY, faster),
    ]);
    assert_eq!(p.measured_bps(), Some(10_000));
    assert_eq!((p.value_bps, p.reasons.len()), (10_000, 0));
}

#[test]
fn a_degraded_benchmark_takes_the_weakest_metric() {
    // FP16 100 -> 91 TFLOPS (9100), network 1000 -> 940 Mbit/s (9400), storage 2000 -> 2100
    // MB/s (capped at 10000), the rest unchanged. Minimum: 9100.
    let latest = BenchmarkMetrics {
        fp16_milli_tflops: 91_000,
        network_mbit_s: 940,
        storage_mb_s: 2_100,
        ..metrics()
    };
    let p = benchmark_part(vec![
        bench(now() - 90 * DAY, metrics()),
        bench(now() - DAY, latest),
    ]);
    assert_eq!(
        p.measured,
        Some(Ratio {
            numerator: 91_000,
            denominator: 100_000
        })
    );
    assert_eq!(p.value_bps, 9_100);
    let want = vec![
        Reason::BenchmarkDegraded {
            metric: Metric::Fp16,
            first: 100_000,
            latest: 91_000,
        },
        Reason::BenchmarkDegraded {
            metric: Metric::Network,
            first: 1_000,
            latest: 940,
        },
    ];
    assert_eq!(p.reasons, want);
    assert_eq!(
        render_en(&p.reasons[0]),
        "FP16 at 91 TFLOPS, 91% of the first benchmark's 100 TFLOPS"
    );
    assert_eq!(
        render_en(&p.reasons[1]),
        "network at 940 Mbit/s, 94% of the first benchmark's 1000 Mbit/s"
    );
}

#[test]
fn only_the_latest_counts_and_rounding_is_half_even() {
    // A degraded benchmark in between, then a recovered one: 10000.
    let bad = BenchmarkMetrics {
        fp32_milli_tflops: 1,
        ..metrics()
    };
    let p = benchmark_part(vec![
        bench(now() - 90 * DAY, metrics()),
        bench(now() - 9 * DAY, bad),
        bench(now() - DAY, metrics()),
    ]);
    assert_eq!(p.value_bps, 10_000);
    // Memory 3350 -> 2233: 2233/3350 = 0.666567.. -> 6665.67.. -> 6666.
    let slow = BenchmarkMetrics {
        memory_gb_s: 2_233,
        ..metrics()
    };
    let p = benchmark_part(vec![
        bench(now() - 90 * DAY, metrics()),
        bench(now() - DAY, slow),
    ]);
    assert_eq!(p.value_bps, 6_666);
    // Storage 20 000 -> 19 999 MB/s: 9999.5 bps, a tie: to the even 10000.
    let first = BenchmarkMetrics {
        storage_mb_s: 20_000,
        ..metrics()
    };
    let tie = BenchmarkMetrics {
        storage_mb_s: 19_999,
        ..metrics()
    };
    let p = benchmark_part(vec![
        bench(now() - 90 * DAY, first),
        bench(now() - DAY, tie),
    ]);
    assert_eq!(p.value_bps, 10_000);
    // 19 997 / 20 000: 9998.5 bps, a tie: to the even 9998.
    let tie = BenchmarkMetrics {
        storage_mb_s: 19_997,
        ..metrics()
    };
    let p = benchmark_part(vec![
        bench(now() - 90 * DAY, first),
        bench(now() - DAY, tie),
    ]);
    assert_eq!(p.value_bps, 9_998);
}

#[test]
fn a_benchmark_at_now_is_not_yet_in_the_score() {
    let bad = BenchmarkMetrics {
        fp16_milli_tflops: 50_000,
        ..metrics()
    };
    let p = benchmark_part(vec![
        bench(now() - 90 * DAY, metrics()),
        bench(now() - DAY, metrics()),
        bench(now(), bad),
    ]);
    assert_eq!(p.value_bps, 10_000);
}
