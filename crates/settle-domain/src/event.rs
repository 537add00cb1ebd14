//! The ledger's events (SPEC §3) and the double-entry lines each one posts.
//!
//! An event's payload is its persisted, versioned schema (`ledger-schemas/{type}.v{n}.json`).
//! Amounts are integers of micro-USDC (`*_micro_usdc`), instants integers of UTC
//! milliseconds (`*_ms`), rates canonical decimal strings with six fractional digits.

use serde::{Deserialize, Serialize};

use super::DomainError;
use super::ids::{AdjustmentId, EventId, GpuId, PayoutId, ProviderId, RentalId};

/// A provider's tier, which selects its platform fee.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Community,
    Enterprise,
}

impl Tier {
    pub fn parse(text: &str) -> Result<Tier, DomainError> {
        match text {
            "community" => Ok(Tier::Community),
            "enterprise" => Ok(Tier::Enterprise),
            _ => Err(DomainError::new(
                "invalid_tier",
                format!("tier must be community or enterprise, got {text:?}"),
            )),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Community => "community",
            Tier::Enterprise => "enterprise",
        }
    }
    /// The fee in force from 1970-01-01 until a `fee_schedule.set` changes it.
    pub fn default_fee_bps(self) -> i64 {
        match self {
            Tier::Community => 2000,
            Tier::Enterprise => 1500,
        }
    }
}

/// When a provider is paid: every Monday above the threshold, or monthly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    Weekly,
    Monthly,
}

impl Schedule {
    pub fn parse(text: &str) -> Result<Schedule, DomainError> {
        match text {
            "weekly" => Ok(Schedule::Weekly),
            "monthly" => Ok(Schedule::Monthly),
            _ => Err(DomainError::new(
                "invalid_schedule",
                format!("schedule must be weekly or monthly, got {text:?}"),
            )),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Schedule::Weekly => "weekly",
            Schedule::Monthly => "monthly",
        }
    }
}

/// `active`; `on_hold` (payouts are created held); `suspended` (earns, is no run candidate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderStatus {
    Active,
    OnHold,
    Suspended,
}

impl ProviderStatus {
    pub fn parse(text: &str) -> Result<ProviderStatus, DomainError> {
        match text {
            "active" => Ok(ProviderStatus::Active),
            "on_hold" => Ok(ProviderStatus::OnHold),
            "suspended" => Ok(ProviderStatus::Suspended),
            _ => Err(DomainError::new(
                "invalid_status",
                format!("status must be active, on_hold or suspended, got {text:?}"),
            )),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderStatus::Active => "active",
            ProviderStatus::OnHold => "on_hold",
            ProviderStatus::Suspended => "suspended",
        }
    }
}

/// How a provider is paid. Validated at the edge (wallet on curve, IBAN mod 97, ABA check
/// digit) before it reaches an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PayoutMethod {
    Solana {
        wallet: String,
    },
    Sepa {
        iban: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bic: Option<String>,
        holder: String,
    },
    Ach {
        routing: String,
        account: String,
        account_type: String,
        holder: String,
        entity: String,
    },
}

/// The rail a payout travels on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rail {
    Solana,
    Sepa,
    Ach,
}

impl Rail {
    pub fn as_str(self) -> &'static str {
        match self {
            Rail::Solana => "solana",
            Rail::Sepa => "sepa",
            Rail::Ach => "ach",
        }
    }
    pub fn parse(text: &str) -> Result<Rail, DomainError> {
        match text {
            "solana" => Ok(Rail::Solana),
            "sepa" => Ok(Rail::Sepa),
            "ach" => Ok(Rail::Ach),
            _ => Err(DomainError::new(
                "invalid_rail",
                format!("unknown rail {text:?}"),
            )),
        }
    }
    /// Bank rails pay whole cents; the remainder stays available.
    pub fn is_bank(self) -> bool {
        !matches!(self, Rail::Solana)
    }
    /// The treasury account the money leaves from.
    pub fn treasury_account(self) -> &'static str {
        if self.is_bank() {
            accounts::TREASURY_BANK
        } else {
            accounts::TREASURY_USDC
        }
    }
}

impl PayoutMethod {
    pub fn rail(&self) -> Rail {
        match self {
            PayoutMethod::Solana { .. } => Rail::Solana,
            PayoutMethod::Sepa { .. } => Rail::Sepa,
            PayoutMethod::Ach { .. } => Rail::Ach,
        }
    }
}

/// Account names of the chart of accounts (SPEC §3).
pub mod accounts {
    pub const FEES: &str = "platform:fees";
    pub const RECEIVABLE: &str = "platform:receivable";
    pub const TREASURY_USDC: &str = "platform:treasury:usdc";
    pub const TREASURY_BANK: &str = "platform:treasury:bank";
    pub const ADJUSTMENTS: &str = "platform:adjustments";

    pub fn payable(provider_id: &str) -> String {
        format!("provider:{provider_id}:payable")
    }
    pub fn in_transit(provider_id: &str) -> String {
        format!("provider:{provider_id}:in_transit")
    }
    pub fn held(provider_id: &str) -> String {
        format!("provider:{provider_id}:held")
    }
}

/// One signed ledger line: credit positive, debit negative.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub account: String,
    pub amount_micro_usdc: i64,
}

impl Line {
    fn new(account: impl Into<String>, amount_micro_usdc: i64) -> Line {
        Line {
            account: account.into(),
            amount_micro_usdc,
        }
    }
}

/// The name of the stream that holds a provider's events.
pub fn provider_stream(provider_id: &str) -> String {
    format!("{PROVIDER_STREAM_PREFIX}{provider_id}")
}

/// What a provider's stream name starts with, before the provider's id.
pub const PROVIDER_STREAM_PREFIX: &str = "provider:";

/// The platform's own stream (fee schedules, FX rates, run reports, bank batches).
pub const PLATFORM_STREAM: &str = "platform";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderRegistered {
    pub provider_id: ProviderId,
    pub name: String,
    pub email: String,
    pub tier: Tier,
    pub schedule: Schedule,
    pub status: ProviderStatus,
    pub payout_method: Option<PayoutMethod>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderUpdated {
    pub provider_id: ProviderId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ProviderStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payout_method: Option<PayoutMethod>,
}

impl ProviderUpdated {
    /// An update of `provider_id` that changes nothing yet (set the fields it changes).
    pub fn nothing(provider_id: ProviderId) -> ProviderUpdated {
        ProviderUpdated {
            provider_id,
            name: None,
            email: None,
            tier: None,
            schedule: None,
            status: None,
            payout_method: None,
        }
    }
}

/// A provider's personal data erased (SPEC §11): from this event on every read shows its
/// name, email and payout method as `erased`, and its payout method is gone (a run decides
/// `no_method`); its data key is destroyed from `destroy_after_ms` on, when the retention
/// of its payment records ends. Its money history stays as it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderErased {
    pub provider_id: ProviderId,
    pub destroy_after_ms: i64,
    /// The approval it ran under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuRegistered {
    pub gpu_id: GpuId,
    pub provider_id: ProviderId,
    pub model: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSet {
    pub provider_id: ProviderId,
    pub model: String,
    pub rate_usdc_per_hour: String,
    pub effective_from_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeeScheduleSet {
    pub tier: Tier,
    pub fee_bps: u16,
    pub effective_from_ms: i64,
}

/// One priced day segment of a usage event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    pub fee_bps: u16,
    pub gross_micro_usdc: i64,
    pub fee_micro_usdc: i64,
    pub net_micro_usdc: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageRecorded {
    pub event_id: EventId,
    pub provider_id: ProviderId,
    pub gpu_id: GpuId,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rental_id: Option<RentalId>,
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    pub rate_usdc_per_hour: String,
    /// `event` (the agreed rate sent with the event) or `price_book`.
    pub rate_source: String,
    pub segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageVoided {
    pub event_id: EventId,
    pub provider_id: ProviderId,
    pub gpu_id: GpuId,
    pub model: String,
    pub reason: String,
    /// The voided event's segments, reversed exactly (same business time).
    pub segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentPosted {
    pub adjustment_id: AdjustmentId,
    pub provider_id: ProviderId,
    pub amount_micro_usdc: i64,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The approval it was booked under (a gated adjustment, SPEC §9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// One candidate's decision in a payout run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutRunDecided {
    pub run_kind: String,
    pub run_key: String,
    pub provider_id: ProviderId,
    pub decision: super::decision::Decision,
    pub available_micro_usdc: i64,
    pub amount_micro_usdc: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payout_id: Option<PayoutId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutCreated {
    pub payout_id: PayoutId,
    pub provider_id: ProviderId,
    pub run_kind: String,
    pub run_key: String,
    pub amount_micro_usdc: i64,
    pub method: PayoutMethod,
    /// Created held (`payout.held` follows with the reason): the amount waits in `held`.
    pub held: bool,
    /// For EUR payouts: the amount in EUR cents and the rate used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_eur_cents: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eur_per_usd: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutHeld {
    pub payout_id: PayoutId,
    pub provider_id: ProviderId,
    pub reason: String,
}

/// A held payout released (held → in transit) or cancelled (held → payable).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutHoldResolved {
    pub payout_id: PayoutId,
    pub provider_id: ProviderId,
    pub amount_micro_usdc: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A release of a EUR payout held without an EUR amount: the amount converted at the
    /// release with `eur_per_usd`, the latest fresh rate then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_eur_cents: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eur_per_usd: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutSubmitted {
    pub payout_id: PayoutId,
    pub provider_id: ProviderId,
    pub rail: Rail,
    /// Solana: the transaction signature. Bank: the batch id.
    pub reference: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_to_end_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutSettled {
    pub payout_id: PayoutId,
    pub provider_id: ProviderId,
    pub rail: Rail,
    pub amount_micro_usdc: i64,
    pub reference: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutFailed {
    pub payout_id: PayoutId,
    pub provider_id: ProviderId,
    pub rail: Rail,
    pub amount_micro_usdc: i64,
    pub reason: String,
    /// The bank rejected the payment for its details: they are blocked until updated
    /// (absent, false, on every other failure).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub method_invalid: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutReturned {
    pub payout_id: PayoutId,
    pub provider_id: ProviderId,
    pub rail: Rail,
    pub amount_micro_usdc: i64,
    pub reason_code: String,
    pub reason: String,
    /// The return proves the bank details wrong: they are blocked until updated.
    pub method_invalid: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutRunCompleted {
    pub run_kind: String,
    pub run_key: String,
    pub cutoff_ms: i64,
    pub candidates: i64,
    /// Per decision: `[count, amount_micro_usdc]`.
    pub totals: std::collections::BTreeMap<String, (i64, i64)>,
    /// The version of the control policy the run decided under (`control.policy_set`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BankBatchGenerated {
    pub batch_id: String,
    pub rail: Rail,
    pub file_name: String,
    pub sha256: String,
    pub payout_ids: Vec<String>,
    pub total_cents: i64,
    pub currency: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BankBatchStatus {
    pub batch_id: String,
    pub status: super::batch::BatchStatus,
}

/// One entry of a bank's answer that booked nothing: it matched no payout or batch, or
/// matched one with another amount. Kept, keyed by the entry's own reference, so a file
/// read again or a statement repeating a notification keeps it once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BankAnswerException {
    /// The entry's identity: the bank's reference of it, else the file's message id and
    /// the entry's place in the file.
    pub entry_key: String,
    /// `unmatched`, `amount_mismatch`, `unknown_batch` or `state_conflict` (a payout the
    /// bank booked after it said otherwise).
    pub problem: String,
    /// What the entry named: an end-to-end id, a payment information id, a trace number.
    pub reference: String,
    /// The batch it was matched to, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// The entry's amount in cents of `currency`.
    pub amount_cents: i64,
    pub currency: String,
    /// The amount the engine sent, in cents, when it matched something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_cents: Option<i64>,
    pub detail: String,
}

/// A bank's answer file was read and booked (status report, notification, statement,
/// NACHA returns): once per file, keyed by its kind and message id, after its entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BankAnswerImported {
    /// `pain.002`, `camt.054`, `camt.053` or `nacha_returns`.
    pub kind: String,
    pub message_id: String,
    /// Lower-case hex SHA-256 of the file's bytes.
    pub sha256: String,
    pub entries: i64,
    /// Entries that matched a payout or a batch (booked now or before).
    pub matched: i64,
    /// Entries that booked nothing.
    pub exceptions: Vec<BankAnswerException>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FxRateSet {
    /// EUR per 1 USD, a decimal string.
    pub eur_per_usd: String,
}

/// A signed Solana transaction persisted before it is sent (exactly-once protocol).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolanaTxSigned {
    pub attempt_id: String,
    pub payout_ids: Vec<String>,
    pub signature: String,
    pub blockhash: String,
    pub last_valid_block_height: u64,
    pub tx_base64: String,
    /// The transfers, `[payout_id, wallet, amount_micro_usdc]`.
    pub transfers: Vec<(String, String, u64)>,
}

/// The outcome of a signed Solana transaction: `landed`, `failed` or `expired`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolanaTxResolved {
    pub attempt_id: String,
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A command that moves or redirects money, waiting for a second actor (dual control).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequested {
    pub approval_id: String,
    /// `adjustment`, `payout_method`, `tier`, `fee_schedule`, `fx_rate`, `rate`, `void`,
    /// `payout_release`, `operator`, `policy` or `token`.
    pub kind: String,
    /// The command as an import line (SPEC §8; `payout.release` for a release), canonical
    /// JSON: what is executed on approval.
    pub command: String,
    /// One line for the approver.
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<ProviderId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_micro_usdc: Option<i64>,
    pub requested_by: String,
    /// Hex SHA-256 of the kind and command (`domain::operator::content_hash`): what both
    /// signatures cover. Set on a ledger with operators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// The requesting operator and its signature of the request (`domain::operator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester_operator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester_signature: Option<String>,
}

/// An approval's decision, spelled `approved` or `rejected` on the wire and in rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    Approved,
    Rejected,
}

/// Where an approval stands: waiting for a second person, or decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Rejected,
}

impl ApprovalDecision {
    pub fn as_str(self) -> &'static str {
        ApprovalStatus::from(self).as_str()
    }
}

impl From<ApprovalDecision> for ApprovalStatus {
    fn from(d: ApprovalDecision) -> ApprovalStatus {
        match d {
            ApprovalDecision::Approved => ApprovalStatus::Approved,
            ApprovalDecision::Rejected => ApprovalStatus::Rejected,
        }
    }
}

impl ApprovalStatus {
    pub const ALL: [ApprovalStatus; 3] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
        }
    }

    pub fn parse(text: &str) -> Option<ApprovalStatus> {
        ApprovalStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// A stored status's text (`sqlx`'s `try_from` decodes a column through it).
impl TryFrom<String> for ApprovalStatus {
    type Error = DomainError;

    fn try_from(text: String) -> Result<ApprovalStatus, DomainError> {
        ApprovalStatus::parse(&text).ok_or_else(|| {
            DomainError::new(
                "invalid_approval_status",
                format!("unknown approval status {text:?}"),
            )
        })
    }
}

/// A stored rail's text (`sqlx`'s `try_from` decodes a column through it).
impl TryFrom<String> for Rail {
    type Error = DomainError;

    fn try_from(text: String) -> Result<Rail, DomainError> {
        Rail::parse(&text)
    }
}

/// A request approved (and its command executed) or rejected by a different actor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecided {
    pub approval_id: String,
    pub decision: ApprovalDecision,
    pub decided_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The deciding operator and its signature of the decision (`domain::operator`), on a
    /// ledger with operators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decider_operator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decider_signature: Option<String>,
    /// The events an approval's command appended, booked in the same transaction as this
    /// decision: how `verify` ties a gated event to the approval that ran it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executed: Vec<ExecutedEvent>,
}

/// An event an approved command appended: its position and hash (hex).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutedEvent {
    pub stream: String,
    pub seq: i64,
    pub hash: String,
}

/// An operator put in force: one of the first ones (`settle operator bootstrap`), or added
/// later by an approved request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorAdded {
    pub operator: String,
    /// The Ed25519 public key, base58.
    pub public_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// An operator's key replaced, by an approved request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorKeyRotated {
    pub operator: String,
    /// The new Ed25519 public key, base58.
    pub public_key: String,
    pub approval_id: String,
}

/// An operator taken out of force, by an approved request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorRemoved {
    pub operator: String,
    pub approval_id: String,
}

/// The control policy put in force (`domain::policy`): the seed of a new ledger (version
/// 1, from its creator's configuration), or a change approved by two operators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySet {
    /// 1 for the seed, one more for each change.
    pub version: i64,
    pub policy: super::policy::Policy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// The ledger's clock mode, booked once when the ledger is created: `real` (bookings carry
/// the real clock) or `simulated` (replays and demos at `--now`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockSet {
    pub mode: String,
}

/// A GPU delisted by a benchmark under its model's minimum, or listed again by one that
/// passes (SPEC §12), on its provider's stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuListingChanged {
    pub gpu_id: GpuId,
    pub provider_id: ProviderId,
    pub listed: bool,
    /// The benchmark that decided it.
    pub benchmark_id: String,
    /// Why it is delisted (`fp16 989.5 TFLOPS under the minimum 1000 TFLOPS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Every event the ledger knows, by type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventBody {
    ProviderRegistered(ProviderRegistered),
    ProviderUpdated(ProviderUpdated),
    GpuRegistered(GpuRegistered),
    RateSet(RateSet),
    FeeScheduleSet(FeeScheduleSet),
    UsageRecorded(UsageRecorded),
    UsageVoided(UsageVoided),
    AdjustmentPosted(AdjustmentPosted),
    PayoutRunDecided(PayoutRunDecided),
    PayoutRunCompleted(PayoutRunCompleted),
    PayoutCreated(PayoutCreated),
    PayoutHeld(PayoutHeld),
    PayoutReleased(PayoutHoldResolved),
    PayoutCancelled(PayoutHoldResolved),
    PayoutSubmitted(PayoutSubmitted),
    PayoutSettled(PayoutSettled),
    PayoutFailed(PayoutFailed),
    PayoutReturned(PayoutReturned),
    BankBatchGenerated(BankBatchGenerated),
    BankBatchStatusChanged(BankBatchStatus),
    BankAnswerImported(BankAnswerImported),
    FxRateSet(FxRateSet),
    SolanaTxSigned(SolanaTxSigned),
    SolanaTxResolved(SolanaTxResolved),
    ApprovalRequested(ApprovalRequested),
    ApprovalDecided(ApprovalDecided),
    OperatorAdded(OperatorAdded),
    OperatorKeyRotated(OperatorKeyRotated),
    OperatorRemoved(OperatorRemoved),
    PolicySet(PolicySet),
    ClockSet(ClockSet),
    GpuListingChanged(GpuListingChanged),
    ProviderErased(ProviderErased),
}

/// Every event type with its current schema version.
pub const EVENT_TYPES: &[(&str, u32)] = &[
    ("provider.registered", 1),
    ("provider.updated", 1),
    ("gpu.registered", 1),
    ("rate.set", 1),
    ("fee_schedule.set", 1),
    ("usage.recorded", 1),
    ("usage.voided", 1),
    ("adjustment.posted", 1),
    ("payout_run.decided", 1),
    ("payout_run.completed", 1),
    ("payout.created", 1),
    ("payout.held", 1),
    ("payout.released", 1),
    ("payout.cancelled", 1),
    ("payout.submitted", 1),
    ("payout.settled", 1),
    ("payout.failed", 1),
    ("payout.returned", 1),
    ("bank_batch.generated", 1),
    ("bank_batch.status_changed", 1),
    ("bank_answer.imported", 1),
    ("fx.rate_set", 1),
    ("solana_tx.signed", 1),
    ("solana_tx.resolved", 1),
    ("approval.requested", 1),
    ("approval.decided", 1),
    ("operator.added", 1),
    ("operator.key_rotated", 1),
    ("operator.removed", 1),
    ("control.policy_set", 1),
    ("ledger.clock_set", 1),
    ("gpu.listing_changed", 1),
    ("provider.erased", 1),
];

macro_rules! body_dispatch {
    ($($variant:ident => $name:literal),* $(,)?) => {
        impl EventBody {
            /// The event type, e.g. `usage.recorded`.
            pub fn event_type(&self) -> &'static str {
                match self { $(EventBody::$variant(_) => $name,)* }
            }

            /// The payload as JSON text (the bytes the hash chain covers).
            pub fn to_json(&self) -> String {
                let result = match self { $(EventBody::$variant(p) => serde_json::to_string(p),)* };
                result.expect("event payloads always serialize")
            }

            /// Parses a stored payload of a known type and version.
            pub fn from_json(event_type: &str, version: u32, payload: &str) -> Result<EventBody, DomainError> {
                if version != 1 {
                    return Err(DomainError::new("unknown_event_version", format!("{event_type} v{version}")));
                }
                let bad = |e: serde_json::Error| DomainError::new("invalid_event_payload", format!("{event_type}: {e}"));
                match event_type {
                    $($name => serde_json::from_str(payload).map(EventBody::$variant).map_err(bad),)*
                    other => Err(DomainError::new("unknown_event_type", other.to_string())),
                }
            }
        }
    };
}

body_dispatch! {
    ProviderRegistered => "provider.registered",
    ProviderUpdated => "provider.updated",
    GpuRegistered => "gpu.registered",
    RateSet => "rate.set",
    FeeScheduleSet => "fee_schedule.set",
    UsageRecorded => "usage.recorded",
    UsageVoided => "usage.voided",
    AdjustmentPosted => "adjustment.posted",
    PayoutRunDecided => "payout_run.decided",
    PayoutRunCompleted => "payout_run.completed",
    PayoutCreated => "payout.created",
    PayoutHeld => "payout.held",
    PayoutReleased => "payout.released",
    PayoutCancelled => "payout.cancelled",
    PayoutSubmitted => "payout.submitted",
    PayoutSettled => "payout.settled",
    PayoutFailed => "payout.failed",
    PayoutReturned => "payout.returned",
    BankBatchGenerated => "bank_batch.generated",
    BankBatchStatusChanged => "bank_batch.status_changed",
    BankAnswerImported => "bank_answer.imported",
    FxRateSet => "fx.rate_set",
    SolanaTxSigned => "solana_tx.signed",
    SolanaTxResolved => "solana_tx.resolved",
    ApprovalRequested => "approval.requested",
    ApprovalDecided => "approval.decided",
    OperatorAdded => "operator.added",
    OperatorKeyRotated => "operator.key_rotated",
    OperatorRemoved => "operator.removed",
    PolicySet => "control.policy_set",
    ClockSet => "ledger.clock_set",
    GpuListingChanged => "gpu.listing_changed",
    ProviderErased => "provider.erased",
}

impl EventBody {
    /// The schema version this code writes.
    pub fn version(&self) -> u32 {
        1
    }

    /// The double-entry lines this event posts (SPEC §3). Each set sums to zero.
    pub fn lines(&self) -> Vec<Line> {
        use accounts::*;
        let lines = match self {
            EventBody::UsageRecorded(u) => usage_lines(&u.provider_id, &u.segments, 1),
            EventBody::UsageVoided(v) => usage_lines(&v.provider_id, &v.segments, -1),
            EventBody::AdjustmentPosted(a) => vec![
                Line::new(payable(&a.provider_id), a.amount_micro_usdc),
                Line::new(ADJUSTMENTS, -a.amount_micro_usdc),
            ],
            EventBody::PayoutCreated(p) => {
                let to = if p.held {
                    held(&p.provider_id)
                } else {
                    in_transit(&p.provider_id)
                };
                vec![
                    Line::new(payable(&p.provider_id), -p.amount_micro_usdc),
                    Line::new(to, p.amount_micro_usdc),
                ]
            }
            EventBody::PayoutReleased(p) => vec![
                Line::new(held(&p.provider_id), -p.amount_micro_usdc),
                Line::new(in_transit(&p.provider_id), p.amount_micro_usdc),
            ],
            EventBody::PayoutCancelled(p) => vec![
                Line::new(held(&p.provider_id), -p.amount_micro_usdc),
                Line::new(payable(&p.provider_id), p.amount_micro_usdc),
            ],
            EventBody::PayoutSettled(p) => vec![
                Line::new(in_transit(&p.provider_id), -p.amount_micro_usdc),
                Line::new(p.rail.treasury_account(), p.amount_micro_usdc),
            ],
            EventBody::PayoutFailed(p) => vec![
                Line::new(in_transit(&p.provider_id), -p.amount_micro_usdc),
                Line::new(payable(&p.provider_id), p.amount_micro_usdc),
            ],
            EventBody::PayoutReturned(p) => vec![
                Line::new(p.rail.treasury_account(), -p.amount_micro_usdc),
                Line::new(payable(&p.provider_id), p.amount_micro_usdc),
            ],
            _ => Vec::new(),
        };
        // Balanced by construction for every event this code writes; `verify` checks the
        // stored lines of every event, including ones altered behind the engine's back.
        lines
    }
}

fn usage_lines(provider_id: &str, segments: &[Segment], sign: i64) -> Vec<Line> {
    let mut lines = Vec::with_capacity(segments.len() * 3);
    for s in segments {
        if s.gross_micro_usdc != 0 {
            lines.push(Line::new(accounts::RECEIVABLE, -sign * s.gross_micro_usdc));
        }
        if s.net_micro_usdc != 0 {
            lines.push(Line::new(
                accounts::payable(provider_id),
                sign * s.net_micro_usdc,
            ));
        }
        if s.fee_micro_usdc != 0 {
            lines.push(Line::new(accounts::FEES, sign * s.fee_micro_usdc));
        }
    }
    lines
}

/// Serializes lines as the compact JSON the ledger stores: `[["account",amount],…]`.
pub fn lines_to_json(lines: &[Line]) -> String {
    let pairs: Vec<(&str, i64)> = lines
        .iter()
        .map(|l| (l.account.as_str(), l.amount_micro_usdc))
        .collect();
    serde_json::to_string(&pairs).expect("lines serialize")
}

/// Parses stored lines.
pub fn lines_from_json(text: &str) -> Result<Vec<Line>, DomainError> {
    let pairs: Vec<(String, i64)> =
        serde_json::from_str(text).map_err(|e| DomainError::new("invalid_lines", e.to_string()))?;
    Ok(pairs
        .into_iter()
        .map(|(account, amount_micro_usdc)| Line {
            account,
            amount_micro_usdc,
        })
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    //! Given one event, then exactly these postings: every SPEC §3 posting rule as a table,
    //! and the names, codes and stored forms the ledger's bytes depend on.
    use super::*;

    fn l(account: &str, amount: i64) -> Line {
        Line::new(account, amount)
    }

    /// A day segment at the community fee (2000 bps) with the amounts given.
    pub(crate) fn seg(
        started_at_ms: i64,
        ended_at_ms: i64,
        gross: i64,
        fee: i64,
        net: i64,
    ) -> Segment {
        Segment {
            started_at_ms,
            ended_at_ms,
            fee_bps: 2000,
            gross_micro_usdc: gross,
            fee_micro_usdc: fee,
            net_micro_usdc: net,
        }
    }

    fn usage(segments: Vec<Segment>) -> UsageRecorded {
        UsageRecorded {
            event_id: "ev-1".parse().unwrap(),
            provider_id: "p".parse().unwrap(),
            gpu_id: "g".parse().unwrap(),
            model: "H100".into(),
            rental_id: None,
            started_at_ms: 0,
            ended_at_ms: 10,
            rate_usdc_per_hour: "3.600000".into(),
            rate_source: "event".into(),
            segments,
        }
    }

    fn hold(amount: i64) -> PayoutHoldResolved {
        PayoutHoldResolved {
            payout_id: "po".parse().unwrap(),
            provider_id: "p".parse().unwrap(),
            amount_micro_usdc: amount,
            reason: None,
            amount_eur_cents: None,
            eur_per_usd: None,
        }
    }

    fn created(held: bool, method: PayoutMethod) -> PayoutCreated {
        PayoutCreated {
            payout_id: "po".parse().unwrap(),
            provider_id: "p".parse().unwrap(),
            run_kind: "weekly".into(),
            run_key: "2026-W48".into(),
            amount_micro_usdc: 70,
            method,
            held,
            amount_eur_cents: None,
            eur_per_usd: None,
        }
    }

    fn solana() -> PayoutMethod {
        PayoutMethod::Solana { wallet: "w".into() }
    }

    fn sepa() -> PayoutMethod {
        PayoutMethod::Sepa {
            iban: "DE89370400440532013000".into(),
            bic: None,
            holder: "H".into(),
        }
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "a table of (event, expected lines) rows, one per event kind and rail that moves money, read as one table with the loop that checks it"
    )]
    fn each_event_posts_its_lines() {
        let settled = |rail| {
            EventBody::PayoutSettled(PayoutSettled {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                rail,
                amount_micro_usdc: 70,
                reference: "r".into(),
            })
        };
        let returned = |rail| {
            EventBody::PayoutReturned(PayoutReturned {
                payout_id: "po".parse().unwrap(),
                provider_id: "p".parse().unwrap(),
                rail,
                amount_micro_usdc: 70,
                reason_code: "R01".into(),
                reason: "insufficient funds".into(),
                method_invalid: false,
            })
        };
        let cases: Vec<(EventBody, Vec<Line>)> = vec![
            (
                EventBody::UsageRecorded(usage(vec![
                    seg(0, 5, 100, 20, 80),
                    seg(5, 10, 50, 10, 40),
                ])),
                vec![
                    l("platform:receivable", -100),
                    l("provider:p:payable", 80),
                    l("platform:fees", 20),
                    l("platform:receivable", -50),
                    l("provider:p:payable", 40),
                    l("platform:fees", 10),
                ],
            ),
            (
                EventBody::UsageVoided(UsageVoided {
                    event_id: "ev-1".parse().unwrap(),
                    provider_id: "p".parse().unwrap(),
                    gpu_id: "g".parse().unwrap(),
                    model: "H100".into(),
                    reason: "refund".into(),
                    segments: vec![seg(0, 5, 100, 20, 80)],
                }),
                vec![
                    l("platform:receivable", 100),
                    l("provider:p:payable", -80),
                    l("platform:fees", -20),
                ],
            ),
            // A zero amount posts no line; a zero fee (a 0 bps tier) only the fee line.
            (
                EventBody::UsageRecorded(usage(vec![seg(0, 1, 0, 0, 0), seg(1, 2, 7, 0, 7)])),
                vec![l("platform:receivable", -7), l("provider:p:payable", 7)],
            ),
            (
                EventBody::UsageRecorded(usage(vec![seg(0, 1, 5, 5, 0)])),
                vec![l("platform:receivable", -5), l("platform:fees", 5)],
            ),
            (
                EventBody::AdjustmentPosted(AdjustmentPosted {
                    adjustment_id: "a".parse().unwrap(),
                    provider_id: "p".parse().unwrap(),
                    amount_micro_usdc: -30,
                    reason: "r".into(),
                    reference: None,
                    approval_id: None,
                }),
                vec![l("provider:p:payable", -30), l("platform:adjustments", 30)],
            ),
            (
                EventBody::PayoutCreated(created(false, solana())),
                vec![l("provider:p:payable", -70), l("provider:p:in_transit", 70)],
            ),
            (
                EventBody::PayoutCreated(created(true, sepa())),
                vec![l("provider:p:payable", -70), l("provider:p:held", 70)],
            ),
            (
                EventBody::PayoutReleased(hold(70)),
                vec![l("provider:p:held", -70), l("provider:p:in_transit", 70)],
            ),
            (
                EventBody::PayoutCancelled(hold(70)),
                vec![l("provider:p:held", -70), l("provider:p:payable", 70)],
            ),
            (
                settled(Rail::Solana),
                vec![
                    l("provider:p:in_transit", -70),
                    l("platform:treasury:usdc", 70),
                ],
            ),
            (
                settled(Rail::Ach),
                vec![
                    l("provider:p:in_transit", -70),
                    l("platform:treasury:bank", 70),
                ],
            ),
            (
                EventBody::PayoutFailed(PayoutFailed {
                    payout_id: "po".parse().unwrap(),
                    provider_id: "p".parse().unwrap(),
                    rail: Rail::Solana,
                    amount_micro_usdc: 70,
                    reason: "expired".into(),
                    method_invalid: false,
                }),
                vec![l("provider:p:in_transit", -70), l("provider:p:payable", 70)],
            ),
            (
                returned(Rail::Sepa),
                vec![
                    l("platform:treasury:bank", -70),
                    l("provider:p:payable", 70),
                ],
            ),
            (
                returned(Rail::Solana),
                vec![
                    l("platform:treasury:usdc", -70),
                    l("provider:p:payable", 70),
                ],
            ),
            // Events that move no money post nothing.
            (
                EventBody::PayoutHeld(PayoutHeld {
                    payout_id: "po".parse().unwrap(),
                    provider_id: "p".parse().unwrap(),
                    reason: "limit".into(),
                }),
                vec![],
            ),
            (
                EventBody::FxRateSet(FxRateSet {
                    eur_per_usd: "0.92".into(),
                }),
                vec![],
            ),
        ];
        for (body, expected) in cases {
            let lines = body.lines();
            assert_eq!(lines, expected, "{}", body.event_type());
            assert_eq!(
                lines.iter().map(|l| l.amount_micro_usdc).sum::<i64>(),
                0,
                "{} balances",
                body.event_type()
            );
        }
    }

    #[test]
    fn names_codes_and_fees() {
        for tier in [Tier::Community, Tier::Enterprise] {
            assert_eq!(Tier::parse(tier.as_str()), Ok(tier));
        }
        assert_eq!(Tier::Community.as_str(), "community");
        assert_eq!(Tier::Enterprise.as_str(), "enterprise");
        assert_eq!(Tier::Community.default_fee_bps(), 2000);
        assert_eq!(Tier::Enterprise.default_fee_bps(), 1500);
        assert_eq!(Tier::parse("gold").unwrap_err().code, "invalid_tier");

        for s in [Schedule::Weekly, Schedule::Monthly] {
            assert_eq!(Schedule::parse(s.as_str()), Ok(s));
        }
        assert_eq!(Schedule::Weekly.as_str(), "weekly");
        assert_eq!(Schedule::Monthly.as_str(), "monthly");
        assert_eq!(
            Schedule::parse("daily").unwrap_err().code,
            "invalid_schedule"
        );

        for s in [
            ProviderStatus::Active,
            ProviderStatus::OnHold,
            ProviderStatus::Suspended,
        ] {
            assert_eq!(ProviderStatus::parse(s.as_str()), Ok(s));
        }
        assert_eq!(ProviderStatus::Active.as_str(), "active");
        assert_eq!(ProviderStatus::OnHold.as_str(), "on_hold");
        assert_eq!(ProviderStatus::Suspended.as_str(), "suspended");
        assert_eq!(
            ProviderStatus::parse("closed").unwrap_err().code,
            "invalid_status"
        );

        for r in [Rail::Solana, Rail::Sepa, Rail::Ach] {
            assert_eq!(Rail::parse(r.as_str()), Ok(r));
        }
        assert_eq!(Rail::Solana.as_str(), "solana");
        assert_eq!(Rail::Sepa.as_str(), "sepa");
        assert_eq!(Rail::Ach.as_str(), "ach");
        assert_eq!(Rail::parse("swift").unwrap_err().code, "invalid_rail");
        assert!(!Rail::Solana.is_bank());
        assert!(Rail::Sepa.is_bank() && Rail::Ach.is_bank());
        assert_eq!(Rail::Solana.treasury_account(), "platform:treasury:usdc");
        assert_eq!(Rail::Sepa.treasury_account(), "platform:treasury:bank");

        assert_eq!(solana().rail(), Rail::Solana);
        assert_eq!(sepa().rail(), Rail::Sepa);
        let ach = PayoutMethod::Ach {
            routing: "011000015".into(),
            account: "1".into(),
            account_type: "checking".into(),
            holder: "H".into(),
            entity: "individual".into(),
        };
        assert_eq!(ach.rail(), Rail::Ach);

        assert_eq!(accounts::payable("p"), "provider:p:payable");
        assert_eq!(accounts::in_transit("p"), "provider:p:in_transit");
        assert_eq!(accounts::held("p"), "provider:p:held");
        assert_eq!(provider_stream("p"), "provider:p");
    }

    #[test]
    fn payloads_round_trip_and_bad_ones_are_named() {
        let bodies = [
            EventBody::UsageRecorded(usage(vec![seg(0, 10, 100, 20, 80)])),
            EventBody::PayoutCreated(created(true, sepa())),
            EventBody::PayoutReleased(hold(5)),
            EventBody::PayoutCancelled(hold(5)),
            EventBody::FxRateSet(FxRateSet {
                eur_per_usd: "0.92".into(),
            }),
        ];
        let names = [
            "usage.recorded",
            "payout.created",
            "payout.released",
            "payout.cancelled",
            "fx.rate_set",
        ];
        for (body, name) in bodies.iter().zip(names) {
            assert_eq!(body.event_type(), name);
            assert_eq!(body.version(), 1);
            assert!(EVENT_TYPES.contains(&(name, 1)), "{name} listed");
            let back = EventBody::from_json(name, 1, &body.to_json()).unwrap();
            assert_eq!(&back, body);
        }
        assert_eq!(
            EventBody::FxRateSet(FxRateSet {
                eur_per_usd: "0.92".into()
            })
            .to_json(),
            r#"{"eur_per_usd":"0.92"}"#
        );
        let fx = r#"{"eur_per_usd":"0.92"}"#;
        assert_eq!(
            EventBody::from_json("fx.rate_set", 2, fx).unwrap_err().code,
            "unknown_event_version"
        );
        assert_eq!(
            EventBody::from_json("fx.rate_moved", 1, fx)
                .unwrap_err()
                .code,
            "unknown_event_type"
        );
        assert_eq!(
            EventBody::from_json("fx.rate_set", 1, r#"{"eur_per_usd":"0.92","x":1}"#)
                .unwrap_err()
                .code,
            "invalid_event_payload"
        );
    }

    #[test]
    fn stored_lines_keep_their_form() {
        let lines = vec![l("provider:p:payable", -70), l("provider:p:held", 70)];
        let text = lines_to_json(&lines);
        assert_eq!(
            text,
            r#"[["provider:p:payable",-70],["provider:p:held",70]]"#
        );
        assert_eq!(lines_from_json(&text).unwrap(), lines);
        assert_eq!(
            lines_from_json("[[1,2]]").unwrap_err().code,
            "invalid_lines"
        );
    }
}
