//! A provider's registry record with its personal values opened for the provider and
//! admins, and its erasure (SPEC §11).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::admin::{operator_signature, submitted_response};
use super::extract::Auth;
use super::problem::Problem;
use crate::auth::Scope;
use crate::domain::ids::ProviderId;

/// A provider's record. Its personal values (name, email, and in the payout method the
/// wallet, IBAN, holder, routing and account numbers) read `erased` once it is erased.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[schema(example = json!({"provider_id": "prv_42", "name": "erased", "email": "erased",
    "tier": "community", "schedule": "weekly", "status": "active", "payout_method": null,
    "erased": true}))]
pub struct ProviderProfile {
    pub provider_id: String,
    pub name: String,
    pub email: String,
    /// `community` or `enterprise`.
    pub tier: String,
    /// `weekly` or `monthly`.
    pub schedule: String,
    /// `active`, `on_hold` or `suspended`.
    pub status: String,
    /// `{"kind": "solana", "wallet"}`, `{"kind": "sepa", "iban", "bic"?, "holder"}` or
    /// `{"kind": "ach", "routing", "account", "account_type", "holder", "entity"}`; null
    /// when none is set (or the provider is erased).
    #[schema(value_type = Option<Object>)]
    pub payout_method: Option<serde_json::Value>,
    /// The provider's personal data is erased.
    pub erased: bool,
}

/// A provider's record, its personal values opened (the provider's own token or admin).
#[utoipa::path(
    get,
    path = "/v1/providers/{id}",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id")),
    responses(
        (status = 200, body = ProviderProfile),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json", description = "no_master_key: the server holds no master key to open personal values"),
    ),
    security(("bearer" = []))
)]
pub async fn show(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<ProviderProfile>, Problem> {
    auth.read_provider(&state, &id).await?;
    let Some(record) = state.ledger.provider_record(&id).await? else {
        return Err(Problem::rejected(&crate::domain::DomainError::new(
            "unknown_provider",
            format!("no provider {id}"),
        )));
    };
    let erased = match state.ledger.privacy.vault() {
        Some(vault) => vault
            .is_erased(&id)
            .await
            .map_err(crate::ledger::LedgerError::from)?,
        None => record.name == crate::privacy::ERASED,
    };
    Ok(Json(ProviderProfile {
        erased,
        payout_method: record.payout_method.as_ref().map(|m| serde_json::json!(m)),
        tier: record.tier.as_str().to_owned(),
        schedule: record.schedule.as_str().to_owned(),
        status: record.status.as_str().to_owned(),
        provider_id: record.provider_id.into(),
        name: record.name,
        email: record.email,
    }))
}

/// Erase a provider's personal data: a gated command (SPEC §9, §11). From its booking on
/// every read shows `erased`; the provider's data key is destroyed when
/// `privacy.retention_days` after its last payout have passed.
#[utoipa::path(
    post,
    path = "/v1/admin/providers/{id}/erase",
    tag = "admin",
    params(
        ("id" = String, Path, description = "Provider id"),
        ("Settle-Operator" = Option<String>, Header, description = "The operator whose signature comes with the request (a ledger with operators; with Settle-Operator-Signature)"),
        ("Settle-Operator-Signature" = Option<String>, Header, description = "Base58 Ed25519 signature of the text a 428 operator_signature_required names"),
    ),
    responses(
        (status = 200, body = super::admin::CommandResult, description = "erased now (`accepted`) or before (`duplicate`): a ledger that does not enforce control"),
        (status = 202, body = super::admin::PendingApproval, description = "booked as a request that waits for a second operator"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_operator_headers: one of the two operator headers alone"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_provider"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "payout_in_flight: a payout was sent and its rail has not answered"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 428, body = Problem, content_type = "application/problem+json", description = "operator_signature_required"),
    ),
    security(("bearer" = []))
)]
pub async fn erase(
    State(state): State<AppState>,
    auth: Auth,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<axum::response::Response, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let provider_id = ProviderId::parse(&id).map_err(|e| Problem::rejected(&e))?;
    let signature = operator_signature(&headers)?;
    let submitted = crate::control::submit(
        &state.ledger,
        &state.control,
        &crate::wire::import::Command::EraseProvider { provider_id },
        &principal.actor(),
        signature.as_ref().map(|s| s as &dyn crate::control::Sign),
    )
    .await?;
    submitted_response(&state.ledger, id, submitted).await
}
