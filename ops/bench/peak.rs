//! Peak memory of a benchmark process, shared by the benchmarks (`#[path]` module).

/// A `… kB` field of `/proc/self/status`, in KiB; 0 where the file does not say.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.split(':').next() == Some(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Peak resident memory of this process so far (`VmHWM` of `/proc/self/status`), in KiB;
/// 0 where the file does not say.
pub fn vmhwm_kib() -> u64 {
    status_kib("VmHWM")
}

/// Resets this process's peak resident memory to what is resident now (writing 5 to
/// `/proc/self/clear_refs`, Linux 4.0 and later), so that a later [`vmhwm_kib`] reports the
/// peak of what ran after the reset; returns the resident memory at the reset (`VmRSS`,
/// KiB), or 0 where it cannot be reset.
#[allow(dead_code)] // not every benchmark measures a phase of its own
pub fn reset_vmhwm() -> u64 {
    match std::fs::write("/proc/self/clear_refs", "5") {
        Ok(()) => status_kib("VmRSS"),
        Err(_) => 0,
    }
}
