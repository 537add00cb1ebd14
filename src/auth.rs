//! API tokens (SPEC §7): bearer tokens stored hashed, scoped, expiring and revocable.
//!
//! A token reads `stl_{token_id}.{secret}`: the id locates the row, the secret (32 random
//! bytes, hex) is never stored; only its SHA-256 is, and it is compared in constant time.
//! `api_tokens` and `api_token_revocations` are append-only (database triggers): a token is
//! never changed, a revocation is a further row.
//!
//! Every token has a name (letters, digits and `. _ - @`, unique among live tokens) and
//! records who created it; a revocation records who revoked it. A revocation takes effect at
//! once and for good: any revocation row refuses the token, whatever its timestamp, and the
//! timestamp is never later than the real clock.
//!
//! Tokens are access control, not money: they live beside the ledger, not in it. The actor
//! recorded on the events a token causes is `token:{name}#{token_id}` (see
//! [`Principal::actor`]); the token's creator is on its row (`settle token list`).

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::AuthConfig;
use crate::domain::DomainError;
use crate::domain::ids::ProviderId;
use crate::domain::time::MS_PER_DAY;
use crate::ledger::{Actor, Applied};
use crate::store::Store;
use crate::store::tokens;

/// The prefix of every token (lets secret scanners recognise a leaked token).
pub const TOKEN_PREFIX: &str = "stl_";
/// Random bytes of a token's secret.
pub const SECRET_BYTES: usize = 32;
/// Random bytes of a token's id.
const ID_BYTES: usize = 8;
/// The longest accepted bearer token, in bytes.
pub const TOKEN_LEN_MAX: usize = 200;
/// The longest label.
pub const LABEL_LEN_MAX: usize = 200;
/// The longest token name (the same rule as an operator's `--actor`).
pub const NAME_LEN_MAX: usize = 64;
/// The longest lifetime given at creation.
pub const EXPIRES_IN_DAYS_MAX: i64 = 3650;

/// What a token may do (SPEC §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Everything, for operators.
    Admin,
    /// Reads its own provider's data only.
    Provider,
    /// An agent's token: reports usage of its provider's GPUs, without rates.
    Ingest,
    /// The platform's metering pipeline: reports usage of any GPU, may send the agreed rate.
    Metering,
}

impl Scope {
    pub const ALL: [Scope; 4] = [
        Scope::Admin,
        Scope::Provider,
        Scope::Ingest,
        Scope::Metering,
    ];

    pub fn parse(text: &str) -> Result<Scope, DomainError> {
        match text {
            "admin" => Ok(Scope::Admin),
            "provider" => Ok(Scope::Provider),
            "ingest" => Ok(Scope::Ingest),
            "metering" => Ok(Scope::Metering),
            _ => Err(DomainError::new(
                "invalid_scope",
                format!("scope must be admin, provider, ingest or metering, got {text:?}"),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Admin => "admin",
            Scope::Provider => "provider",
            Scope::Ingest => "ingest",
            Scope::Metering => "metering",
        }
    }

    /// Whether tokens of this scope are bound to one provider.
    pub(crate) fn needs_provider(self) -> bool {
        matches!(self, Scope::Provider | Scope::Ingest)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verified bearer of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub token_id: String,
    /// The token's name (its id for a token created before names existed).
    pub name: String,
    pub scope: Scope,
    /// Set for `provider` and `ingest` tokens.
    pub provider_id: Option<String>,
}

/// The actor of the events a token causes: `token:{name}#{token_id}`. Neither part can hold
/// `#` or `:`, so the string names one token and cannot pose as another kind of actor.
pub(crate) fn token_actor(name: &str, token_id: &str) -> Actor {
    Actor(format!("token:{name}#{token_id}"))
}

impl Principal {
    /// The actor recorded on the events this principal causes: the token's name and id.
    pub fn actor(&self) -> Actor {
        token_actor(&self.name, &self.token_id)
    }

    /// Whether this principal may read `provider_id`'s data.
    pub(crate) fn may_read_provider(&self, provider_id: &str) -> bool {
        match self.scope {
            Scope::Admin => true,
            Scope::Provider => self.provider_id.as_deref() == Some(provider_id),
            Scope::Ingest | Scope::Metering => false,
        }
    }
}

/// Why a bearer token was refused. The HTTP layer answers 401 for all of them alike.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("malformed token")]
    Malformed,
    #[error("unknown token or wrong secret")]
    Invalid,
    #[error("token expired")]
    Expired,
    #[error("token revoked")]
    Revoked,
    #[error("token waits for a second operator's approval")]
    PendingApproval,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A new token's parameters.
#[derive(Clone, Debug)]
pub struct NewToken {
    pub scope: Scope,
    pub provider_id: Option<ProviderId>,
    /// 1 to [`NAME_LEN_MAX`] letters, digits or `. _ - @`; unique among live tokens.
    pub name: String,
    pub label: String,
    /// The lifetime; `None` takes the scope's default (`[auth] *_token_days_default`).
    pub expires_in_days: Option<i64>,
    /// Who creates it (`operator:NAME` from the CLI).
    pub created_by: Actor,
    /// Created waiting for a second operator's approval (`control::submit_token`).
    pub needs_approval: bool,
}

/// A token as listed (never with its secret or hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    pub token_id: String,
    /// Its id for a token created before names existed.
    pub name: String,
    pub scope: Scope,
    pub provider_id: Option<String>,
    pub label: String,
    pub created_at_ms: i64,
    /// The creator's actor, `unknown` for a token created before creators were recorded.
    pub created_by: String,
    pub expires_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
    /// The revoker's actor when revoked (`unknown` for revocations of before).
    pub revoked_by: Option<String>,
    /// Waits for a second operator's approval: authenticates nothing yet.
    pub pending_approval: bool,
}

impl TokenInfo {
    /// `active`, `expired`, `revoked` or `pending_approval` at `now_ms`.
    pub fn status(&self, now_ms: i64) -> &'static str {
        if self.revoked_at_ms.is_some() {
            "revoked"
        } else if self.expires_at_ms.is_some_and(|e| e <= now_ms) {
            "expired"
        } else if self.pending_approval {
            "pending_approval"
        } else {
            "active"
        }
    }
}

/// A freshly created token: the only moment its secret exists outside its owner's hands.
pub struct CreatedToken {
    pub info: TokenInfo,
    /// The bearer token, `stl_{token_id}.{secret}`. Shown once, never stored.
    pub token: String,
}

fn secret_hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Splits a bearer token into its id and secret.
fn split_token(token: &str) -> Option<(&str, &str)> {
    if token.len() > TOKEN_LEN_MAX {
        return None;
    }
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_once('.')?;
    let id_ok = !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let secret_ok =
        secret.len() == SECRET_BYTES * 2 && secret.bytes().all(|b| b.is_ascii_hexdigit());
    (id_ok && secret_ok).then_some((id, secret))
}

/// A token name: 1 to [`NAME_LEN_MAX`] ASCII letters, digits or `. _ - @` (the charset of
/// an operator name), so the actor `token:{name}#{id}` reads one way only.
pub(crate) fn check_name(name: &str) -> Result<(), DomainError> {
    let valid = !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if valid {
        Ok(())
    } else {
        Err(DomainError::new(
            "invalid_token_name",
            format!("--name must be 1 to {NAME_LEN_MAX} letters, digits or . _ - @, got {name:?}"),
        ))
    }
}

/// The lifetime in days of a new `scope` token: `requested` (1 to [`EXPIRES_IN_DAYS_MAX`]),
/// else the scope's default from `policy`; `None`: no expiry (admin and metering only, when
/// their default is 0).
pub(crate) fn lifetime_days(
    scope: Scope,
    requested: Option<i64>,
    policy: &AuthConfig,
) -> Result<Option<i64>, DomainError> {
    if let Some(d) = requested {
        if !(1..=EXPIRES_IN_DAYS_MAX).contains(&d) {
            return Err(DomainError::new(
                "invalid_expiry",
                format!("expires-in-days must be 1..={EXPIRES_IN_DAYS_MAX}, got {d}"),
            ));
        }
        return Ok(Some(d));
    }
    let (key, days, may_be_unlimited) = match scope {
        Scope::Provider => (
            "provider_token_days_default",
            policy.provider_token_days_default,
            false,
        ),
        Scope::Ingest => (
            "ingest_token_days_default",
            policy.ingest_token_days_default,
            false,
        ),
        Scope::Admin => (
            "admin_token_days_default",
            policy.admin_token_days_default,
            true,
        ),
        Scope::Metering => (
            "metering_token_days_default",
            policy.metering_token_days_default,
            true,
        ),
    };
    match days {
        0 if may_be_unlimited => Ok(None),
        d if (1..=EXPIRES_IN_DAYS_MAX).contains(&d) => Ok(Some(d)),
        d => Err(DomainError::new(
            "invalid_auth_config",
            format!(
                "auth.{key} must be {}1..={EXPIRES_IN_DAYS_MAX}, got {d}",
                if may_be_unlimited {
                    "0 (no expiry) or "
                } else {
                    ""
                }
            ),
        )),
    }
}

/// The real clock, whatever clock the ledger runs on: a revocation is never dated later.
fn real_now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Whether a live token (not revoked, not expired at `now_ms`) is named `name`.
fn check_label(label: &str) -> Result<(), DomainError> {
    if label.chars().count() > LABEL_LEN_MAX || label.chars().any(char::is_control) {
        return Err(DomainError::new(
            "invalid_label",
            format!("label must be at most {LABEL_LEN_MAX} characters without control characters"),
        ));
    }
    Ok(())
}

/// The error of a token command: a rejection with a code, or the database.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Rejected(#[from] DomainError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Creates a token at `now_ms`, expiring after `new.expires_in_days` or the scope's default
/// lifetime under `policy`. `provider` and `ingest` tokens need an existing provider; the
/// others take none. The name must be free among live tokens (checked and inserted under one
/// write lock, so two creations cannot both take it).
pub async fn create_token(
    store: &Store,
    new: &NewToken,
    policy: &AuthConfig,
    now_ms: i64,
) -> Result<CreatedToken, TokenError> {
    check_name(&new.name)?;
    check_label(&new.label)?;
    match (&new.provider_id, new.scope.needs_provider()) {
        (None, true) => {
            return Err(DomainError::new(
                "provider_required",
                format!("a {} token needs --provider", new.scope),
            )
            .into());
        }
        (Some(_), false) => {
            return Err(DomainError::new(
                "provider_not_allowed",
                format!("a {} token is not bound to a provider", new.scope),
            )
            .into());
        }
        _ => {}
    }
    if let Some(p) = &new.provider_id
        && !crate::store::read::provider_exists(store, p.as_str()).await?
    {
        return Err(DomainError::new("unknown_provider", format!("no provider {p}")).into());
    }
    let expires_at_ms =
        lifetime_days(new.scope, new.expires_in_days, policy)?.map(|d| now_ms + d * MS_PER_DAY);
    let token_id = format!("tok_{}", hex::encode(rand::random::<[u8; ID_BYTES]>()));
    let secret = hex::encode(rand::random::<[u8; SECRET_BYTES]>());

    let hash = secret_hash(&secret);
    let insert = tokens::TokenInsert {
        token_id: &token_id,
        token_hash: &hash,
        scope: new.scope.as_str(),
        provider_id: new.provider_id.as_ref().map(|p| p.as_str()),
        label: &new.label,
        created_at_ms: now_ms,
        expires_at_ms,
        name: &new.name,
        created_by: &new.created_by.0,
        needs_approval: new.needs_approval,
    };
    if let Err(holder) = tokens::insert_named(store, &insert).await? {
        return Err(DomainError::new(
            "token_name_taken",
            format!(
                "the live token {holder} is named {:?}: pick another name, or revoke it first",
                new.name
            ),
        )
        .into());
    }
    Ok(CreatedToken {
        token: format!("{TOKEN_PREFIX}{token_id}.{secret}"),
        info: TokenInfo {
            token_id,
            name: new.name.clone(),
            scope: new.scope,
            provider_id: new.provider_id.as_ref().map(|p| p.to_string()),
            label: new.label.clone(),
            created_at_ms: now_ms,
            created_by: new.created_by.0.clone(),
            expires_at_ms,
            revoked_at_ms: None,
            revoked_by: None,
            pending_approval: new.needs_approval,
        },
    })
}

/// Revokes a token, at once and for good, on behalf of `revoked_by`; revoking it again is a
/// `duplicate`. The revocation is dated `now_ms` or the real clock, whichever is earlier (a
/// `--now` ahead of the clock cannot date it in the future), and [`verify`] refuses a
/// revoked token whatever that date.
pub async fn revoke_token(
    store: &Store,
    token_id: &str,
    revoked_by: &Actor,
    now_ms: i64,
) -> Result<Applied, TokenError> {
    let revoked_at_ms = now_ms.min(real_now_ms());
    if !tokens::exists(store, token_id).await? {
        return Err(DomainError::new("unknown_token", format!("no token {token_id}")).into());
    }
    Ok(
        if tokens::revoke(store, token_id, revoked_at_ms, &revoked_by.0).await? {
            Applied::Accepted
        } else {
            Applied::Duplicate
        },
    )
}

fn token_info(row: tokens::StoredToken) -> Result<TokenInfo, sqlx::Error> {
    Ok(TokenInfo {
        scope: Scope::parse(&row.scope).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        token_id: row.token_id,
        provider_id: row.provider_id,
        label: row.label,
        created_at_ms: row.created_at_ms,
        expires_at_ms: row.expires_at_ms,
        revoked_at_ms: row.revoked_at_ms,
        name: row.name,
        created_by: row.created_by,
        revoked_by: row.revoked_by,
        pending_approval: row.pending_approval != 0,
    })
}

/// Every token, oldest first (without secrets or hashes).
pub async fn list_tokens(store: &Store) -> Result<Vec<TokenInfo>, sqlx::Error> {
    tokens::list(store)
        .await?
        .into_iter()
        .map(token_info)
        .collect()
}

/// Verifies a bearer token at `now_ms`: known id, matching secret (constant time), never
/// revoked (a revocation counts whatever its date), not expired at `now_ms`.
pub async fn verify(store: &Store, token: &str, now_ms: i64) -> Result<Principal, AuthError> {
    let (token_id, secret) = split_token(token).ok_or(AuthError::Malformed)?;
    let row = tokens::with_hash(store, token_id).await?;
    let presented = secret_hash(secret);
    let Some((row, stored)) = row else {
        // Same work as a known id, so timing tells nothing about which ids exist.
        let _ = presented.as_slice().ct_eq(&[0u8; 32][..]);
        return Err(AuthError::Invalid);
    };
    if !bool::from(presented.as_slice().ct_eq(stored.as_slice())) {
        return Err(AuthError::Invalid);
    }
    let info = token_info(row)?;
    check_live(&info, now_ms)?;
    Ok(Principal {
        token_id: info.token_id,
        name: info.name,
        scope: info.scope,
        provider_id: info.provider_id,
    })
}

/// Whether the token `token_id`, already verified once (a live stream's), is still valid at
/// `now_ms`: not revoked, not expired.
pub(crate) async fn still_valid(
    store: &Store,
    token_id: &str,
    now_ms: i64,
) -> Result<(), AuthError> {
    let Some((row, _)) = tokens::with_hash(store, token_id).await? else {
        return Err(AuthError::Invalid);
    };
    check_live(&token_info(row)?, now_ms)
}

/// A token is live while never revoked (a revocation counts whatever its date), not
/// expired at `now_ms` and not waiting for its approval.
fn check_live(info: &TokenInfo, now_ms: i64) -> Result<(), AuthError> {
    if info.revoked_at_ms.is_some() {
        return Err(AuthError::Revoked);
    }
    if info.expires_at_ms.is_some_and(|e| e <= now_ms) {
        return Err(AuthError::Expired);
    }
    if info.pending_approval {
        return Err(AuthError::PendingApproval);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_grammar() {
        let secret = "ab".repeat(SECRET_BYTES);
        let token = format!("stl_tok_0011223344556677.{secret}");
        assert_eq!(
            split_token(&token),
            Some(("tok_0011223344556677", secret.as_str()))
        );
        assert_eq!(split_token("stl_tok_1.short"), None);
        assert_eq!(split_token(&format!("xyz_tok_1.{secret}")), None);
        assert_eq!(split_token(&format!("stl_.{secret}")), None);
        assert_eq!(split_token(&format!("stl_tok'1.{secret}")), None);
        assert_eq!(split_token(&format!("stl_tok_1.{}zz", &secret[2..])), None);
    }

    #[test]
    fn scopes_round_trip() {
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()).unwrap(), s);
        }
        assert!(Scope::parse("root").is_err());
    }

    #[test]
    fn names_and_actors() {
        for ok in [
            "ci-agent",
            "a",
            "alice@example.com",
            "node_7.eu-west",
            &"x".repeat(64),
        ] {
            check_name(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["", "two words", "a#b", "a:b", "tok\n", "é", &"x".repeat(65)] {
            assert_eq!(
                check_name(bad).unwrap_err().code,
                "invalid_token_name",
                "{bad:?}"
            );
        }
        assert_eq!(
            token_actor("ci-agent", "tok_00ff").0,
            "token:ci-agent#tok_00ff"
        );
    }

    #[test]
    fn default_lifetimes() {
        let policy = AuthConfig::default();
        assert_eq!(lifetime_days(Scope::Provider, None, &policy), Ok(Some(90)));
        assert_eq!(lifetime_days(Scope::Ingest, None, &policy), Ok(Some(365)));
        assert_eq!(lifetime_days(Scope::Admin, None, &policy), Ok(Some(365)));
        assert_eq!(lifetime_days(Scope::Metering, None, &policy), Ok(Some(365)));
        assert_eq!(
            lifetime_days(Scope::Provider, Some(7), &policy),
            Ok(Some(7))
        );
        assert_eq!(
            lifetime_days(Scope::Provider, Some(0), &policy)
                .unwrap_err()
                .code,
            "invalid_expiry"
        );
        let unlimited = AuthConfig {
            admin_token_days_default: 0,
            metering_token_days_default: 0,
            provider_token_days_default: 0,
            ingest_token_days_default: 4000,
        };
        assert_eq!(lifetime_days(Scope::Admin, None, &unlimited), Ok(None));
        assert_eq!(lifetime_days(Scope::Metering, None, &unlimited), Ok(None));
        // Provider and ingest tokens always expire.
        for scope in [Scope::Provider, Scope::Ingest] {
            assert_eq!(
                lifetime_days(scope, None, &unlimited).unwrap_err().code,
                "invalid_auth_config"
            );
        }
    }

    #[test]
    fn provider_reads() {
        let p = |scope, provider: Option<&str>| Principal {
            token_id: "t".into(),
            name: "n".into(),
            scope,
            provider_id: provider.map(str::to_owned),
        };
        assert!(p(Scope::Admin, None).may_read_provider("a"));
        assert!(p(Scope::Provider, Some("a")).may_read_provider("a"));
        assert!(!p(Scope::Provider, Some("a")).may_read_provider("b"));
        assert!(!p(Scope::Ingest, Some("a")).may_read_provider("a"));
        assert!(!p(Scope::Metering, None).may_read_provider("a"));
    }
}
