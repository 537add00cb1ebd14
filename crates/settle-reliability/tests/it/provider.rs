//! A provider's score: the combination over its GPUs.

use settle_reliability::InterruptionCause::Provider;
use settle_reliability::{BenchmarkMetrics, GpuReason, Part, Ratio, Reason, provider_score, score};

use crate::support::{
    DAY, Gpu, HOUR, always_gpu, at, bench, completed, config_window, date, interrupted, iv,
    metrics, schedule,
};

#[test]
fn provider_combination() {
    // Window: the UTC day Wed 2 Dec 2026.
    let (start, now) = (at("2026-12-02T00:00:00Z"), at("2026-12-03T00:00:00Z"));
    let cfg = config_window(DAY);
    // A: 24/7, online 18 of 24 h -> 7500; 10 completed jobs -> 10000; one benchmark -> 9000.
    let a = always_gpu("a")
        .online(vec![iv(start, start + 18 * HOUR)])
        .jobs((1..=10).map(|i| completed(start + i * HOUR)).collect())
        .benchmarks(vec![bench(start - 60 * DAY, metrics())])
        .build();
    // B: Mon-Fri 09:00-18:00 UTC, online all 9 h -> 10000; 20 jobs, 4 by the provider -> 8000;
    // benchmark FP16 at 95 % of the first -> 9500.
    let mut jobs: Vec<_> = (1..=16).map(|i| completed(start + i * HOUR)).collect();
    jobs.extend((1..=4).map(|i| interrupted(start + i * HOUR, Provider)));
    let slower = BenchmarkMetrics {
        fp16_milli_tflops: 95_000,
        ..metrics()
    };
    let b = Gpu::new(
        "b",
        at("2026-01-01T00:00:00Z"),
        schedule("UTC", "Mon-Fri 09:00-18:00"),
    )
    .online(vec![iv(start, now)])
    .jobs(jobs)
    .benchmarks(vec![
        bench(start - 60 * DAY, metrics()),
        bench(start, slower),
    ])
    .build();
    let gpus = [score(&a, &cfg, now), score(&b, &cfg, now)];
    assert_eq!(gpus[0].score.uptime.value_bps, 7_500);
    assert_eq!(gpus[1].score.jobs.value_bps, 8_000);
    let p = provider_score(&gpus);
    // uptime weighted by scheduled time: (24 h * 7500 + 9 h * 10000) / 33 h
    //   = (180 000 + 90 000) / 33 = 8181.81.. -> 8182; pooled measurement 27 h / 33 h.
    assert_eq!(p.score.uptime.value_bps, 8_182);
    let pooled = Ratio {
        numerator: (27 * HOUR) as u64,
        denominator: (33 * HOUR) as u64,
    };
    assert_eq!(p.score.uptime.measured, Some(pooled));
    // jobs weighted by job count: (10 * 10000 + 20 * 8000) / 30 = 260 000 / 30 = 8666.67 -> 8667.
    assert_eq!(p.score.jobs.value_bps, 8_667);
    assert_eq!(
        p.score.jobs.measured,
        Some(Ratio {
            numerator: 26,
            denominator: 30
        })
    );
    // benchmark: plain mean (9000 + 9500) / 2 = 9250.
    assert_eq!(p.score.benchmark.value_bps, 9_250);
    // combined: (5000*8182 + 3000*8667 + 2000*9250)/10000 = (40.91M + 26.001M + 18.5M)/10000
    //   = 8541.1 -> 8541.
    assert_eq!(p.score.combined_bps, 8_541);
    assert_eq!(p.gpu_count, 2);
    // The reasons name their GPU.
    let gpu_a = gpus[0].gpu_id.clone();
    let offline = Reason::OfflineInSchedule {
        day: date(2026, 12, 2),
        offline_ms: 6 * HOUR,
    };
    assert_eq!(
        p.reasons[0],
        GpuReason {
            gpu_id: gpu_a,
            part: Part::Uptime,
            reason: offline
        }
    );
    assert!(
        p.reasons
            .iter()
            .any(|r| r.gpu_id.as_str() == "b" && r.part == Part::Jobs)
    );
}

#[test]
fn a_provider_of_new_gpus_is_at_the_prior() {
    let now = at("2026-12-03T00:00:00Z");
    let fresh = |id| Gpu::new(id, now, schedule("UTC", "24/7")).build();
    let cfg = config_window(DAY);
    let p = provider_score(&[score(&fresh("x"), &cfg, now), score(&fresh("y"), &cfg, now)]);
    assert_eq!(p.score.combined_bps, 9_000);
    assert_eq!(p.score.uptime.measured, None);
    let empty = provider_score(&[]);
    assert_eq!((empty.score.combined_bps, empty.gpu_count), (9_000, 0));
}
