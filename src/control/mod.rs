//! Dual control (SPEC §9): which commands wait for a second operator, and executing them
//! once approved.
//!
//! Gated when enforced ([`enforced`]: always on a real-clock ledger), judged by the ledger's
//! policy in force ([`effective`]), per [`request_for`]:
//! - an `adjustment` at or above the adjustment threshold, or one that brings its provider's
//!   adjustments of the window to it;
//! - a `provider.register` or `provider.update` that sets a payout method (an operator
//!   redirecting money; the provider's own change is out of this engine's reach), or an
//!   update that changes the tier (the tier decides the fee); a provider's erasure;
//! - a `fee_schedule.set`; a `rate.set` outside its band around the price book; a void at
//!   or above its threshold;
//! - an `fx.rate_set` outside the FX bounds, or moving too far from the latest rate
//!   (`domain::bands::fx_check`) or from a rate in force within the last 7 days;
//! - the release of a held payout at or above its threshold ([`submit_release`]);
//! - a new policy ([`submit_policy`]), an operator change ([`submit_operator_change`], always
//!   a request) and an `admin` or `metering` token ([`submit_token`]).
//!
//! A gated command is booked as a request (`ledger::approvals`) and answers
//! `pending_approval` with its approval id; the same command sent again finds the same
//! request. An operator other than the requester approves it ([`approve`]: the command runs,
//! its events naming both, and the decision is booked in the command's own transaction, so
//! both or neither) or rejects it ([`reject_request`]). On a ledger with operators every
//! request and decision carries its operator's checked Ed25519 signature ([`Sign`]: the
//! CLI's key file, or a [`GivenSignature`] from the API's headers); the server never holds
//! an operator's private key. A bank's notification of change is always a request
//! ([`propose`]). [`Importer`] applies import lines in order, each through [`submit`].

use serde_json::{Value, json};

use crate::config::{ControlConfig, Enforce, RunConfig};
use crate::domain::DomainError;
use crate::domain::event::ApprovalStatus;
use crate::domain::money::format_micro_usdc;
use crate::domain::operator::{
    OperatorKey, OperatorName, Operators, Signed, decision_message, request_message,
};
use crate::domain::policy::Policy;
use crate::domain::time::format_ms;
use crate::ledger::approvals::{DecisionToBook, NewRequest};
use crate::ledger::operators::OperatorChange;
use crate::ledger::{Actor, Applied, Ledger, LedgerError, reject};
use crate::store::ClockMode;
use crate::store::read::ApprovalRow;
use crate::wire::import::{Command, apply, parse_line};

mod importer;
mod requests;

pub use importer::Importer;
pub use requests::request_for;

/// An operator's signing of what a command needs (SPEC §9): the CLI's key
/// (`--operator-key`), or a signature an API client sent with its request. The ledger never
/// holds an operator's private key.
pub trait Sign: Send + Sync {
    /// The operator's name.
    fn operator(&self) -> &str;
    /// Its base58 Ed25519 signature of `message`.
    fn sign(&self, message: &[u8]) -> String;
}

/// A signature made elsewhere (an API client's): it is what it is, whatever the message;
/// the ledger checks it against the message it expects.
pub struct GivenSignature(pub Signed);

impl Sign for GivenSignature {
    fn operator(&self) -> &str {
        &self.0.operator
    }

    fn sign(&self, _message: &[u8]) -> String {
        self.0.signature.clone()
    }
}

/// The operator's checked signature of `message`, on a ledger with operators (`None` on
/// one without: labels decide there, as before control was provable). `what` names the
/// message for the refusal that asks for it.
fn operator_proof(
    operators: &Operators,
    signer: Option<&dyn Sign>,
    message: &[u8],
) -> Result<Option<Signed>, LedgerError> {
    if operators.is_empty() {
        return Ok(None);
    }
    let Some(signer) = signer else {
        return reject(
            "operator_signature_required",
            format!(
                "this ledger has operators: sign `{}` with your operator key (CLI \
                 --operator-key FILE; API headers Settle-Operator and Settle-Operator-Signature)",
                String::from_utf8_lossy(message)
            ),
        );
    };
    let given = Signed {
        operator: signer.operator().to_owned(),
        signature: signer.sign(message),
    };
    let operator = operators
        .check(&given, message)
        .map_err(LedgerError::Rejected)?;
    Ok(Some(Signed {
        operator: operator.name.as_str().to_owned(),
        signature: given.signature,
    }))
}

/// The operators who request and decide on this ledger. A real-clock ledger without any
/// is refused (`no_operators`): there, `--actor` and token names are labels, never
/// identities (SPEC §9), and only keys tell two people apart. A simulated-clock ledger
/// without operators (a replay, a test) tells actors apart by their labels.
async fn identities(ledger: &Ledger) -> Result<Operators, LedgerError> {
    let operators = ledger.operators().await?;
    if operators.is_empty() && ledger.store.clock_mode().await? == Some(ClockMode::Real) {
        return reject(
            "no_operators",
            "this real-clock ledger has no operators: put the first two in force with \
             `settle operator bootstrap`; gated commands are requested and approved by them",
        );
    }
    Ok(operators)
}

/// What became of a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Executed now (accepted or a duplicate).
    Applied(Applied),
    /// Waiting for a second actor: the request (pending, booked now or earlier).
    Pending(Box<ApprovalRow>),
}

/// Whether dual control applies to this ledger: always on a real-clock ledger, whatever
/// any configuration says (SPEC §9); on a simulated-clock one (replays, demos, tests) when
/// the policy says `always`.
pub async fn enforced(ledger: &Ledger, config: &ControlConfig) -> Result<bool, LedgerError> {
    Ok(ledger.store.clock_mode().await? == Some(ClockMode::Real)
        || config.enforce == Enforce::Always)
}

/// `config` with the ledger's policy (`control.policy_set`) in place of its policy values:
/// the thresholds and bands a gated command is judged by are the ledger's, read now, not a
/// process's (a server started before a policy change judges by the new one).
pub async fn effective(
    ledger: &Ledger,
    config: &ControlConfig,
) -> Result<ControlConfig, LedgerError> {
    let mut config = config.clone();
    if let Some(in_force) = ledger.policy().await? {
        config.apply_policy(&in_force.policy);
    }
    Ok(config)
}

/// Runs a command, or books the request it needs (see the module docs).
pub async fn submit(
    ledger: &Ledger,
    config: &ControlConfig,
    command: &Command,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<Submitted, LedgerError> {
    let config = &effective(ledger, config).await?;
    if enforced(ledger, config).await?
        && let Some(request) = request_for(ledger, config, command).await?
    {
        return pending_or_done(ledger, &request, actor, signer).await;
    }
    apply(ledger, command, actor).await.map(Submitted::Applied)
}

/// Books the request of a gated command whatever the ledger's enforcement: a proposal
/// (a bank's notification of change of a provider's bank details) that a second actor
/// approves or rejects, never a change made at once. Re-proposing the same command finds
/// its request. `not_gated` for a command that needs no approval.
pub async fn propose(
    ledger: &Ledger,
    config: &ControlConfig,
    command: &Command,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<Submitted, LedgerError> {
    let config = &effective(ledger, config).await?;
    match request_for(ledger, config, command).await? {
        Some(request) => pending_or_done(ledger, &request, actor, signer).await,
        None => reject(
            "not_gated",
            "this command needs no approval: it cannot be proposed",
        ),
    }
}

/// Releases a held payout, or books the request it needs.
pub(crate) async fn submit_release(
    ledger: &Ledger,
    config: &ControlConfig,
    runs: &RunConfig,
    payout_id: &str,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<Submitted, LedgerError> {
    let config = &effective(ledger, config).await?;
    if enforced(ledger, config).await? {
        let payout = crate::ledger::payouts::payout(&ledger.store, payout_id).await?;
        if let Some(p) = payout
            && p.status == crate::domain::payout::PayoutStatus::Held
            && p.amount_micro_usdc >= config.release_approval_micro_usdc
        {
            let request = NewRequest {
                kind: "payout_release",
                command: json!({"type": "payout.release", "payout_id": payout_id}).to_string(),
                summary: format!(
                    "release held payout {payout_id} of {} USDC to {}",
                    format_micro_usdc(p.amount_micro_usdc),
                    p.provider_id
                ),
                provider_id: Some(p.provider_id.clone()),
                amount_micro_usdc: Some(p.amount_micro_usdc),
            };
            return pending_or_done(ledger, &request, actor, signer).await;
        }
    }
    ledger
        .release_payout(payout_id, runs, actor)
        .await
        .map(Submitted::Applied)
}

/// Books the request, or reports how an earlier identical one stands: still pending, or
/// approved (the command ran then: a duplicate now); a rejected one refuses the command.
///
/// On a ledger with operators the request carries its requester's signature of
/// [`request_message`] (`operator_signature_required`, `unknown_operator`,
/// `invalid_signature` otherwise).
async fn pending_or_done(
    ledger: &Ledger,
    request: &NewRequest,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<Submitted, LedgerError> {
    let generation = match current_request(ledger, request).await? {
        Current::Open(row) => return Ok(Submitted::Pending(Box::new(row))),
        Current::Done(row) => return done(row),
        Current::Next(generation) => generation,
    };
    let operators = identities(ledger).await?;
    let signed = operator_proof(
        &operators,
        signer,
        &request_message(&request.content_hash_hex()),
    )?;
    let (row, _) = ledger
        .request_approval(request, generation, actor, signed.as_ref())
        .await?;
    match row.status {
        ApprovalStatus::Approved | ApprovalStatus::Rejected => done(row),
        _ => Ok(Submitted::Pending(Box::new(row))),
    }
}

/// How the requests of a command stand.
enum Current {
    /// A pending request that has not expired: the same command finds it.
    Open(ApprovalRow),
    /// A decided request that answers the command: rejected (refused for good), or approved
    /// for a command with its own idempotency key (a replay: a duplicate).
    Done(ApprovalRow),
    /// The generation of the next request: none yet (0), or the latest was used (approved,
    /// for a command without its own key, which ran under that approval's id) or expired.
    Next(u32),
}

/// Requests of one command, each generation after the last used or expired one
/// (`NewRequest::approval_id_at`): an approval is used once.
async fn current_request(ledger: &Ledger, request: &NewRequest) -> Result<Current, LedgerError> {
    let keyed = has_own_key(&request.command);
    for generation in 0..REQUEST_GENERATIONS_MAX {
        let Some(row) = ledger
            .find_approval(&request.approval_id_at(generation))
            .await?
        else {
            return Ok(Current::Next(generation));
        };
        match row.status {
            ApprovalStatus::Pending if ledger.check_not_expired(&row, ledger.now_ms()).is_ok() => {
                return Ok(Current::Open(row));
            }
            ApprovalStatus::Rejected => return Ok(Current::Done(row)),
            ApprovalStatus::Approved if keyed => return Ok(Current::Done(row)),
            _ => {}
        }
    }
    reject(
        "too_many_requests_for_command",
        format!(
            "this command was requested {REQUEST_GENERATIONS_MAX} times; give it its own key \
             (update_id, fx_id)"
        ),
    )
}

/// Requests of one identical command at most (each used or expired before the next).
const REQUEST_GENERATIONS_MAX: u32 = 1_000;

/// Whether a command carries its own idempotency key, so running it again is a duplicate:
/// an adjustment (`adjustment_id`), an update with `update_id`, an FX rate with `fx_id`, a
/// registration (`provider_id`), a release (the payout).
fn has_own_key(command: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(command) else {
        return false;
    };
    matches!(
        v["type"].as_str(),
        Some("adjustment" | "provider.register" | "payout.release")
    ) || v.get("update_id").is_some()
        || v.get("fx_id").is_some()
}

/// The answer of a decided request to its command sent again.
fn done(row: ApprovalRow) -> Result<Submitted, LedgerError> {
    match row.status.as_str() {
        "approved" => Ok(Submitted::Applied(Applied::Duplicate)),
        _ => reject(
            "approval_rejected",
            format!(
                "this command was rejected by {} (approval {}): {}",
                row.decided_by.as_deref().unwrap_or("?"),
                row.approval_id,
                row.reason.as_deref().unwrap_or("")
            ),
        ),
    }
}

/// Approves a pending request: a different actor runs its command (the events name
/// `{requester} approved by {approver}`) and the decision is booked in the command's own
/// transaction (`Ledger::book_decision_in`): both or neither. An approval racing a
/// rejection finds the request decided under the platform stream's lock and books
/// nothing. A command that writes nothing (booked already) gets its decision alone.
pub async fn approve(
    ledger: &Ledger,
    runs: &RunConfig,
    approval_id: &str,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<(ApprovalRow, Applied), LedgerError> {
    let row = ledger.approval(approval_id).await?;
    // A decided request answers so before any signature is asked for.
    Ledger::check_pending(&row)?;
    let signed = decider_proof(ledger, &row, true, signer).await?;
    Ledger::check_decider(&row, actor, signed.as_ref())?;
    ledger.check_not_expired(&row, ledger.now_ms())?;
    let on_behalf = Actor(format!("{} approved by {}", row.requested_by, actor.0));
    // What the approver looked at may lie outside a band (that is why it waited).
    let mut approved = ledger.clone();
    approved.config.lift_bands();
    approved.config.approval_id = Some(row.approval_id.clone());
    let decision = std::sync::Arc::new(DecisionToBook::new(
        row.approval_id.clone(),
        actor.clone(),
        signed.clone(),
    ));
    approved.decision = Some(decision.clone());
    let applied = execute(&approved, runs, &row, &on_behalf).await?;
    if !decision.committed() {
        ledger
            .decide_approval(approval_id, true, None, actor, signed.as_ref())
            .await?;
    }
    Ok((ledger.approval(approval_id).await?, applied))
}

/// The deciding operator's checked signature of the decision, on a ledger with operators:
/// a request booked there without its requester's signature (before the operators were
/// put in force) cannot be decided by signature and must be requested again
/// (`request_not_signed`).
async fn decider_proof(
    ledger: &Ledger,
    row: &ApprovalRow,
    approved: bool,
    signer: Option<&dyn Sign>,
) -> Result<Option<Signed>, LedgerError> {
    let operators = identities(ledger).await?;
    if operators.is_empty() {
        return Ok(None);
    }
    let Some(content_hash) = &row.content_hash else {
        return reject(
            "request_not_signed",
            format!(
                "approval {} was requested before this ledger had operators: request the \
                 command again as an operator",
                row.approval_id
            ),
        );
    };
    operator_proof(
        &operators,
        signer,
        &decision_message(approved, &row.approval_id, content_hash),
    )
}

/// Rejects a pending request: nothing of its command happens.
pub async fn reject_request(
    ledger: &Ledger,
    approval_id: &str,
    reason: &str,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<ApprovalRow, LedgerError> {
    let row = ledger.approval(approval_id).await?;
    Ledger::check_pending(&row)?;
    let signed = decider_proof(ledger, &row, false, signer).await?;
    ledger
        .decide_approval(approval_id, false, Some(reason), actor, signed.as_ref())
        .await
}

async fn execute(
    ledger: &Ledger,
    runs: &RunConfig,
    row: &ApprovalRow,
    actor: &Actor,
) -> Result<Applied, LedgerError> {
    // The command with its provider's personal values opened: the registry seals them
    // again in the events it books.
    let mut opened = [row.clone()];
    ledger.open_approvals(&mut opened).await?;
    let [row] = &opened;
    let value: Value = serde_json::from_str(&row.command).map_err(|e| {
        crate::ledger::LedgerError::Rejected(crate::domain::DomainError::new(
            "invalid_approval",
            format!(
                "approval {} holds an unreadable command: {e}",
                row.approval_id
            ),
        ))
    })?;
    if value["type"] == "payout.release" {
        let payout_id = value["payout_id"].as_str().unwrap_or_default();
        return ledger.release_payout(payout_id, runs, actor).await;
    }
    if value["type"] == "token.activate" {
        let text = |key: &str| value[key].as_str().unwrap_or_default();
        return ledger
            .activate_token(text("name"), text("scope"), actor)
            .await;
    }
    if value["type"] == "control.policy_set" {
        let policy: Policy = serde_json::from_value(value["policy"].clone()).map_err(|e| {
            LedgerError::Rejected(DomainError::new(
                "invalid_approval",
                format!("approval {} holds no policy: {e}", row.approval_id),
            ))
        })?;
        return ledger.set_policy(&policy, actor).await;
    }
    if let Some(change) = operator_change_of(&value).map_err(LedgerError::Rejected)? {
        return ledger
            .change_operator(&change, &row.approval_id, actor)
            .await;
    }
    // An update or FX rate without its own key is keyed by the approval, so executing it
    // twice (a crash before the decision was booked) books it once.
    let mut value = value;
    match value["type"].as_str() {
        Some("provider.update") if value.get("update_id").is_none() => {
            value["update_id"] = json!(row.approval_id);
        }
        Some("fx.rate_set") if value.get("fx_id").is_none() => {
            value["fx_id"] = json!(row.approval_id);
        }
        _ => {}
    }
    let command = parse_line(&value.to_string()).map_err(LedgerError::Rejected)?;
    apply(ledger, &command, actor).await
}

/// Requests a change of the operators in force: always a request, on a ledger with
/// operators (`no_operators` before `settle operator bootstrap`), signed by the requesting
/// operator and executed when a different one approves it.
pub(crate) async fn submit_operator_change(
    ledger: &Ledger,
    change: &OperatorChange,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<Submitted, LedgerError> {
    if ledger.operators().await?.is_empty() {
        return reject(
            "no_operators",
            "this ledger has no operators yet: put the first ones in force with `operator bootstrap`",
        );
    }
    let (command, summary) = match change {
        OperatorChange::Add { name, key } => (
            json!({"type": "operator.add", "operator": name.as_str(), "public_key": key.to_base58()}),
            format!(
                "add operator {} with key {}",
                name.as_str(),
                key.to_base58()
            ),
        ),
        OperatorChange::RotateKey { name, key } => (
            json!({"type": "operator.rotate_key", "operator": name.as_str(), "public_key": key.to_base58()}),
            format!(
                "replace operator {}'s key by {}",
                name.as_str(),
                key.to_base58()
            ),
        ),
        OperatorChange::Remove { name } => (
            json!({"type": "operator.remove", "operator": name.as_str()}),
            format!("remove operator {}", name.as_str()),
        ),
    };
    let request = NewRequest {
        kind: "operator",
        command: command.to_string(),
        summary,
        provider_id: None,
        amount_micro_usdc: None,
    };
    pending_or_done(ledger, &request, actor, signer).await
}

/// Requests a new control policy: gated wherever control is enforced (a real-clock ledger
/// always), run at once elsewhere. The approver sees every value that changes beside the
/// value in force.
pub(crate) async fn submit_policy(
    ledger: &Ledger,
    config: &ControlConfig,
    policy: &Policy,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<Submitted, LedgerError> {
    ledger.check_policy(policy).await?;
    let config = &effective(ledger, config).await?;
    if !enforced(ledger, config).await? {
        return ledger
            .set_policy(policy, actor)
            .await
            .map(Submitted::Applied);
    }
    let current = ledger.policy().await?;
    let changes: Vec<String> = match &current {
        Some(c) => c
            .policy
            .values()
            .into_iter()
            .zip(policy.values())
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, b)| format!("{} {} (in force: {})", a.0, b.1, a.1))
            .collect(),
        None => vec!["the first policy".to_owned()],
    };
    if changes.is_empty() {
        return Ok(Submitted::Applied(Applied::Duplicate));
    }
    let request = NewRequest {
        kind: "policy",
        command: json!({"type": "control.policy_set", "policy": policy}).to_string(),
        summary: format!(
            "control policy version {}: {}",
            current.map_or(1, |c| c.version + 1),
            changes.join(", ")
        ),
        provider_id: None,
        amount_micro_usdc: None,
    };
    pending_or_done(ledger, &request, actor, signer).await
}

/// Creates an API token; one of scope `admin` or `metering` on a controlled ledger is
/// created waiting for a second operator (SPEC §9): its secret goes to its requester now,
/// and it authenticates nothing (`token_pending_approval`) until a different operator
/// approves the request returned beside it.
pub(crate) async fn submit_token(
    ledger: &Ledger,
    config: &ControlConfig,
    new: &crate::auth::NewToken,
    policy: &crate::config::AuthConfig,
    actor: &Actor,
    signer: Option<&dyn Sign>,
) -> Result<(crate::auth::CreatedToken, Option<ApprovalRow>), LedgerError> {
    use crate::auth::Scope;
    let config = &effective(ledger, config).await?;
    let gated =
        matches!(new.scope, Scope::Admin | Scope::Metering) && enforced(ledger, config).await?;
    if gated {
        // Refused before anything is created (`no_operators`,
        // `operator_signature_required`).
        let operators = identities(ledger).await?;
        if !operators.is_empty() && signer.is_none() {
            operator_proof(&operators, signer, b"token")?;
        }
    }
    let mut new = new.clone();
    new.needs_approval = gated;
    let created = crate::auth::create_token(&ledger.store, &new, policy, ledger.now_ms())
        .await
        .map_err(|e| match e {
            crate::auth::TokenError::Rejected(d) => LedgerError::Rejected(d),
            crate::auth::TokenError::Database(e) => LedgerError::Store(e.into()),
        })?;
    if !gated {
        return Ok((created, None));
    }
    let i = &created.info;
    let mut request = token_request(&i.name, i.scope);
    request.summary = format!(
        "activate the {} token {:?} ({}) created by {}{}",
        i.scope.as_str(),
        i.name,
        i.token_id,
        i.created_by,
        i.expires_at_ms.map_or_else(
            || ", never expiring".to_owned(),
            |e| format!(", expiring {}", format_ms(e))
        )
    );
    match pending_or_done(ledger, &request, actor, signer).await? {
        Submitted::Pending(row) => Ok((created, Some(*row))),
        Submitted::Applied(_) => Ok((created, None)),
    }
}

/// The request that activates the token named `name` of `scope` once approved: keyed by
/// the name (unique among live tokens), so its first approval id is known before the token
/// exists (the demo prints the approving line).
pub(crate) fn token_request(name: &str, scope: crate::auth::Scope) -> NewRequest {
    NewRequest {
        kind: "token",
        command: json!({"type": "token.activate", "name": name, "scope": scope.as_str()})
            .to_string(),
        summary: format!("activate the {} token {name:?}", scope.as_str()),
        provider_id: None,
        amount_micro_usdc: None,
    }
}

/// The operator change an approved command holds (`operator.add`, `operator.rotate_key`,
/// `operator.remove`), `None` for any other command.
fn operator_change_of(value: &Value) -> Result<Option<OperatorChange>, DomainError> {
    let text = |key: &str| value[key].as_str().unwrap_or_default();
    Ok(Some(match value["type"].as_str() {
        Some("operator.add") => OperatorChange::Add {
            name: OperatorName::parse(text("operator"))?,
            key: OperatorKey::parse(text("public_key"))?,
        },
        Some("operator.rotate_key") => OperatorChange::RotateKey {
            name: OperatorName::parse(text("operator"))?,
            key: OperatorKey::parse(text("public_key"))?,
        },
        Some("operator.remove") => OperatorChange::Remove {
            name: OperatorName::parse(text("operator"))?,
        },
        _ => return Ok(None),
    }))
}
