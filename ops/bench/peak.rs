//! Peak memory of a benchmark process, shared by the benchmarks (`#[path]` module).

/// Peak resident memory of this process so far (`VmHWM` of `/proc/self/status`), in KiB;
/// 0 where the file does not say.
pub fn vmhwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}
