//! The error type of the crate.

/// Everything that can be refused when parsing the inputs of the score.
///
/// Every variant has a stable machine-readable [`code`](ReliabilityError::code); the
/// `Display` text is for humans and may change. The computations themselves
/// ([`score`](crate::score), [`trend`](crate::trend), [`listing`](crate::listing)) take
/// parsed inputs and cannot fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReliabilityError {
    /// An instant outside `0..=INSTANT_MAX_MS` (1970 to the end of 9999).
    #[error("instant {ms} ms is outside 1970-01-01 to 9999-12-31")]
    InstantOutOfRange {
        /// The instant that was given, in UTC milliseconds.
        ms: i64,
    },
    /// An interval whose end is not after its start.
    #[error("interval [{start_ms}, {end_ms}) is empty or reversed")]
    InvalidInterval {
        /// The start that was given.
        start_ms: i64,
        /// The end that was given.
        end_ms: i64,
    },
    /// A time zone name that is not in the IANA database (names are case-sensitive).
    #[error("unknown time zone {name:?}")]
    UnknownTimeZone {
        /// The name that was given.
        name: String,
    },
    /// A clock time that is not `HH:MM` in `00:00..=24:00`.
    #[error("invalid clock time {text:?} (expected HH:MM, 00:00 to 24:00)")]
    InvalidClockTime {
        /// The text that was given.
        text: String,
    },
    /// A weekly schedule that cannot be parsed or built.
    #[error("invalid schedule: {message}")]
    InvalidSchedule {
        /// What is wrong.
        message: String,
    },
    /// A GPU without any schedule version.
    #[error("a GPU needs at least one schedule version")]
    NoSchedule,
    /// A GPU id that is empty, too long or has control characters.
    #[error("invalid GPU id {text:?}")]
    InvalidGpuId {
        /// The text that was given.
        text: String,
    },
    /// A GPU model name that is empty, too long or has control characters.
    #[error("invalid GPU model {text:?}")]
    InvalidGpuModel {
        /// The text that was given.
        text: String,
    },
    /// An interruption cause other than `provider`, `customer` or `platform`.
    #[error("invalid interruption cause {text:?} (expected provider, customer or platform)")]
    InvalidCause {
        /// The text that was given.
        text: String,
    },
    /// A configuration value outside its allowed range.
    #[error("invalid config {field}: {message}")]
    InvalidConfig {
        /// The config field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl ReliabilityError {
    /// The stable, machine-readable code of the error: one of `instant_out_of_range`,
    /// `invalid_interval`, `unknown_time_zone`, `invalid_clock_time`,
    /// `invalid_schedule`, `no_schedule`, `invalid_gpu_id`, `invalid_gpu_model`,
    /// `invalid_cause`, `invalid_config`.
    pub fn code(&self) -> &'static str {
        match self {
            ReliabilityError::InstantOutOfRange { .. } => "instant_out_of_range",
            ReliabilityError::InvalidInterval { .. } => "invalid_interval",
            ReliabilityError::UnknownTimeZone { .. } => "unknown_time_zone",
            ReliabilityError::InvalidClockTime { .. } => "invalid_clock_time",
            ReliabilityError::InvalidSchedule { .. } => "invalid_schedule",
            ReliabilityError::NoSchedule => "no_schedule",
            ReliabilityError::InvalidGpuId { .. } => "invalid_gpu_id",
            ReliabilityError::InvalidGpuModel { .. } => "invalid_gpu_model",
            ReliabilityError::InvalidCause { .. } => "invalid_cause",
            ReliabilityError::InvalidConfig { .. } => "invalid_config",
        }
    }
}
