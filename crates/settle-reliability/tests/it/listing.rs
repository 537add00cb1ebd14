//! Listing: inside the schedule, outside announced maintenance, benchmark at the minimum.

use settle_reliability::{
    BenchmarkMetrics, BenchmarkMinimum, Config, GpuModel, Listing, Metric, ModelMinimums,
    NotListedReason, listing, render_not_listed_en,
};

use crate::support::{Gpu, at, bench, maintenance, metrics, schedule};

fn minimums() -> ModelMinimums {
    // H100: tensor at least 500 TFLOPS.
    let h100 = BenchmarkMinimum::default().with(Metric::Tensor, 500_000);
    ModelMinimums::new().with(GpuModel::parse("H100").unwrap(), h100)
}

fn tensor(milli_tflops: u64) -> BenchmarkMetrics {
    BenchmarkMetrics {
        tensor_milli_tflops: milli_tflops,
        ..metrics()
    }
}

/// Mon-Fri 09:00-18:00 Europe/Berlin (December: CET, 08:00Z-17:00Z), a passing benchmark
/// on 1 Dec.
fn berlin() -> Gpu {
    Gpu::new(
        "g",
        at("2026-11-01T00:00:00Z"),
        schedule("Europe/Berlin", "Mon-Fri 09:00-18:00"),
    )
    .benchmarks(vec![bench(at("2026-12-01T12:00:00Z"), tensor(600_000))])
}

fn not_listed(reasons: Vec<NotListedReason>, next: Option<&str>) -> Listing {
    Listing::NotListed {
        reasons,
        next_listed_ms: next.map(at),
    }
}

#[test]
fn listed_inside_the_schedule() {
    let gpu = berlin().build();
    let l = |t: &str| listing(&gpu, &minimums(), &Config::default(), at(t));
    assert_eq!(l("2026-12-02T09:00:00Z"), Listing::Listed);
    // Wed 21:00 local: outside, next listed Thu 09:00 local = 08:00Z.
    let outside = vec![NotListedReason::OutsideSchedule];
    assert_eq!(
        l("2026-12-02T20:00:00Z"),
        not_listed(outside.clone(), Some("2026-12-03T08:00:00Z"))
    );
    // Fri 19:00 local: next Mon 7 Dec 08:00Z. 18:00 local (17:00Z) is already outside.
    assert_eq!(
        l("2026-12-04T18:00:00Z"),
        not_listed(outside.clone(), Some("2026-12-07T08:00:00Z"))
    );
    assert_eq!(
        l("2026-12-04T17:00:00Z"),
        not_listed(outside.clone(), Some("2026-12-07T08:00:00Z"))
    );
    assert_eq!(l("2026-12-04T16:59:59Z"), Listing::Listed);
}

#[test]
fn next_listed_across_the_dst_change() {
    // Fri 27 Mar 2026 20:00Z; Monday 30 Mar is CEST: 09:00 local = 07:00Z.
    let gpu = Gpu::new(
        "g",
        at("2026-01-01T00:00:00Z"),
        schedule("Europe/Berlin", "Mon-Fri 09:00-18:00"),
    )
    .benchmarks(vec![bench(at("2026-03-01T00:00:00Z"), tensor(600_000))])
    .build();
    let got = listing(
        &gpu,
        &minimums(),
        &Config::default(),
        at("2026-03-27T20:00:00Z"),
    );
    assert_eq!(
        got,
        not_listed(
            vec![NotListedReason::OutsideSchedule],
            Some("2026-03-30T07:00:00Z")
        )
    );
}

#[test]
fn delisted_under_the_minimum_until_a_benchmark_passes() {
    let bad_at = at("2026-12-02T08:30:00Z");
    let gpu = berlin()
        .benchmarks(vec![
            bench(bad_at, tensor(450_000)),
            bench(at("2026-12-02T12:00:00Z"), tensor(520_000)),
        ])
        .build();
    let l = |t: &str| listing(&gpu, &minimums(), &Config::default(), at(t));
    let below = NotListedReason::BenchmarkBelowMinimum {
        metric: Metric::Tensor,
        minimum: 500_000,
        measured: 450_000,
        at_ms: bad_at,
    };
    assert_eq!(
        l("2026-12-02T09:00:00Z"),
        not_listed(vec![below.clone()], None)
    );
    assert_eq!(
        render_not_listed_en(&below),
        "delisted: the benchmark of 2026-12-02 08:30 UTC measured tensor 450 TFLOPS, under the \
         model's minimum of 500 TFLOPS; listed again after a benchmark that passes"
    );
    // Before the bad benchmark: listed. From the passing one (at or before now): listed again.
    assert_eq!(l("2026-12-02T08:29:59Z"), Listing::Listed);
    assert_eq!(l("2026-12-02T12:00:00Z"), Listing::Listed);
    assert_eq!(l("2026-12-02T11:59:59Z"), not_listed(vec![below], None));
}

#[test]
fn every_reason_that_applies() {
    // A bad benchmark outside the schedule: both reasons, no next instant.
    let bad_at = at("2026-12-02T08:30:00Z");
    let gpu = berlin().benchmarks(vec![bench(bad_at, tensor(1))]).build();
    let got = listing(
        &gpu,
        &minimums(),
        &Config::default(),
        at("2026-12-02T20:00:00Z"),
    );
    let below = NotListedReason::BenchmarkBelowMinimum {
        metric: Metric::Tensor,
        minimum: 500_000,
        measured: 1,
        at_ms: bad_at,
    };
    assert_eq!(
        got,
        not_listed(vec![below, NotListedReason::OutsideSchedule], None)
    );
}

#[test]
fn announced_maintenance_hides_the_gpu() {
    // Thu 3 Dec 08:00-10:00Z announced on 1 Dec; Fri 4 Dec 08:00-09:00Z announced Fri 08:30Z.
    let thu = maintenance(
        at("2026-12-01T00:00:00Z"),
        at("2026-12-03T08:00:00Z"),
        at("2026-12-03T10:00:00Z"),
    );
    let fri = maintenance(
        at("2026-12-04T08:30:00Z"),
        at("2026-12-04T08:00:00Z"),
        at("2026-12-04T09:00:00Z"),
    );
    let gpu = berlin().maintenance(vec![thu, fri]).build();
    let l = |t: &str| listing(&gpu, &minimums(), &Config::default(), at(t));
    let in_thu = NotListedReason::InMaintenance {
        start_ms: thu.interval().start_ms(),
        end_ms: thu.interval().end_ms(),
    };
    assert_eq!(
        l("2026-12-03T09:00:00Z"),
        not_listed(vec![in_thu], Some("2026-12-03T10:00:00Z"))
    );
    // Wed evening: the next listed instant skips the maintenance at Thursday's start.
    let outside = vec![NotListedReason::OutsideSchedule];
    assert_eq!(
        l("2026-12-02T20:00:00Z"),
        not_listed(outside, Some("2026-12-03T10:00:00Z"))
    );
    // Friday's window is unknown before it is announced, then hides the GPU.
    assert_eq!(l("2026-12-04T08:15:00Z"), Listing::Listed);
    let in_fri = NotListedReason::InMaintenance {
        start_ms: fri.interval().start_ms(),
        end_ms: fri.interval().end_ms(),
    };
    assert_eq!(
        l("2026-12-04T08:45:00Z"),
        not_listed(vec![in_fri], Some("2026-12-04T09:00:00Z"))
    );
}

#[test]
fn no_benchmark_and_models_without_minimum() {
    let fresh = Gpu::new("g", at("2026-11-01T00:00:00Z"), schedule("UTC", "24/7")).build();
    let got = listing(
        &fresh,
        &minimums(),
        &Config::default(),
        at("2026-12-02T09:00:00Z"),
    );
    assert_eq!(got, not_listed(vec![NotListedReason::NoBenchmark], None));
    // An A100 has no minimum in the table: any benchmark lists it.
    let a100 = Gpu::new("g", at("2026-11-01T00:00:00Z"), schedule("UTC", "24/7"))
        .model("A100")
        .benchmarks(vec![bench(at("2026-12-01T00:00:00Z"), tensor(1))])
        .build();
    assert_eq!(
        listing(
            &a100,
            &minimums(),
            &Config::default(),
            at("2026-12-02T09:00:00Z")
        ),
        Listing::Listed
    );
}
