//! Every refusal has a stable code.

use settle_reliability::{
    Config, GpuEvents, GpuHistory, GpuId, GpuModel, InterruptionCause, Interval, Maintenance,
    ReliabilityError, parse_tz,
};

#[test]
fn codes() {
    let code = |e: ReliabilityError| e.code();
    assert_eq!(code(Interval::new(5, 5).unwrap_err()), "invalid_interval");
    assert_eq!(
        code(Interval::new(-1, 5).unwrap_err()),
        "instant_out_of_range"
    );
    assert_eq!(
        code(Maintenance::new(-5, 0, 1).unwrap_err()),
        "instant_out_of_range"
    );
    assert_eq!(code(GpuId::parse("").unwrap_err()), "invalid_gpu_id");
    assert_eq!(code(GpuId::parse("a\nb").unwrap_err()), "invalid_gpu_id");
    assert_eq!(
        code(GpuModel::parse(&"x".repeat(129)).unwrap_err()),
        "invalid_gpu_model"
    );
    assert_eq!(
        code(InterruptionCause::parse("Provider").unwrap_err()),
        "invalid_cause"
    );
    assert_eq!(
        InterruptionCause::parse("customer"),
        Ok(InterruptionCause::Customer)
    );
    assert_eq!(
        code(parse_tz("europe/berlin").unwrap_err()),
        "unknown_time_zone"
    );
    assert_eq!(
        code(Config::default().with_grace_ms(-1).unwrap_err()),
        "invalid_config"
    );
    assert_eq!(
        code(Config::default().with_window_ms(0).unwrap_err()),
        "invalid_config"
    );
    assert_eq!(
        code(Config::default().with_jobs_full_evidence(0).unwrap_err()),
        "invalid_config"
    );
    let no_schedule = GpuHistory::new(
        GpuId::parse("g").unwrap(),
        GpuModel::parse("H100").unwrap(),
        GpuEvents::default(),
    );
    assert_eq!(code(no_schedule.unwrap_err()), "no_schedule");
}
