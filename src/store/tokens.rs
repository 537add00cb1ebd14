//! API tokens as stored: hashed secrets, never the secrets (`auth` creates and checks them).
//! Rows are plain columns here; `auth` reads the scope.

use super::on;
use super::{Dialect, Store, TxConn};

/// A token's columns; a token of before migration 0004 has no stored name and reads as its
/// id.
const TOKEN_COLUMNS: &str = "t.token_id, t.scope, t.provider_id, t.label, t.created_at_ms, t.expires_at_ms, r.revoked_at_ms, COALESCE(t.name, t.token_id) AS name, t.created_by, r.revoked_by, CASE WHEN t.needs_approval <> 0 AND a.token_id IS NULL THEN 1 ELSE 0 END AS pending_approval";

/// The tables [`TOKEN_COLUMNS`] reads: a token, its revocation and its activation.
const TOKEN_TABLES: &str = "api_tokens t LEFT JOIN api_token_revocations r ON r.token_id = t.token_id LEFT JOIN api_token_activations a ON a.token_id = t.token_id";

/// The live token holding a name at an instant: not revoked, not expired.
const LIVE_NAME_SQL: &str = "SELECT t.token_id FROM api_tokens t LEFT JOIN api_token_revocations r ON r.token_id = t.token_id WHERE COALESCE(t.name, t.token_id) = $1 AND r.token_id IS NULL AND (t.expires_at_ms IS NULL OR t.expires_at_ms > $2)";

/// A token row with its revocation, if any ([`TOKEN_COLUMNS`], read by name).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredToken {
    pub token_id: String,
    pub scope: String,
    pub provider_id: Option<String>,
    pub label: String,
    pub created_at_ms: i64,
    pub expires_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
    pub name: String,
    pub created_by: String,
    pub revoked_by: Option<String>,
    /// 1 while a token that needs a second operator's approval (scope `admin` or `metering`
    /// on a controlled ledger) waits for it: it authenticates nothing.
    pub pending_approval: i32,
}

/// A token with its stored secret hash.
#[derive(sqlx::FromRow)]
struct TokenWithHash {
    #[sqlx(flatten)]
    token: StoredToken,
    token_hash: Vec<u8>,
}

/// A token to insert.
#[derive(Clone, Debug)]
pub struct TokenInsert<'a> {
    pub token_id: &'a str,
    pub token_hash: &'a [u8],
    pub scope: &'a str,
    pub provider_id: Option<&'a str>,
    pub label: &'a str,
    pub created_at_ms: i64,
    pub expires_at_ms: Option<i64>,
    pub name: &'a str,
    pub created_by: &'a str,
    /// Created waiting for a second operator's approval (`activate_in`).
    pub needs_approval: bool,
}

/// Inserts `token` unless a live token holds its name at its `created_at_ms`: then
/// `Ok(Err(holder))`. The check and the insert run under one write lock (SQLite's
/// `BEGIN IMMEDIATE`; an advisory lock on PostgreSQL), so two creations cannot both take
/// a name.
pub(crate) async fn insert_named(
    store: &Store,
    token: &TokenInsert<'_>,
) -> Result<Result<(), String>, sqlx::Error> {
    let pool = store.db();
    let dialect = store.dialect();
    let mut tx = TxConn::begin(pool).await?;
    if dialect == Dialect::Postgres {
        on!(&mut *tx, |c| {
            sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtextextended('api_tokens:names', 0))) AS l")
            .execute(c)
            .await.map(|r| r.rows_affected())
        })?;
    }
    if let Some(holder) = on!(&mut *tx, |c| sqlx::query_scalar(LIVE_NAME_SQL)
        .bind(token.name)
        .bind(token.created_at_ms)
        .fetch_optional(c)
        .await)?
    {
        return Ok(Err(holder));
    }
    on!(&mut *tx, |c| {
        sqlx::query(
        "INSERT INTO api_tokens (token_id, token_hash, scope, provider_id, label, created_at_ms, expires_at_ms, name, created_by, needs_approval) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(token.token_id)
    .bind(token.token_hash.to_vec())
    .bind(token.scope)
    .bind(token.provider_id)
    .bind(token.label)
    .bind(token.created_at_ms)
    .bind(token.expires_at_ms)
    .bind(token.name)
    .bind(token.created_by)
    .bind(i32::from(token.needs_approval))
    .execute(c)
    .await.map(|r| r.rows_affected())
    })?;
    tx.commit().await?;
    Ok(Ok(()))
}

/// Activates a token created waiting for approval, inside the approval's transaction
/// (`conn` of the ledger's write): the approval and the activation commit together. `false`
/// when it was active already.
pub(crate) async fn activate_in(
    conn: &mut super::Conn,
    token_id: &str,
    approval_id: &str,
    at_ms: i64,
    by: &str,
) -> Result<bool, super::StoreError> {
    let inserted = on!(&mut *conn, |c| {
        sqlx::query(
        "INSERT INTO api_token_activations (token_id, approval_id, activated_at_ms, activated_by) VALUES ($1, $2, $3, $4) ON CONFLICT (token_id) DO NOTHING",
    )
    .bind(token_id)
    .bind(approval_id)
    .bind(at_ms)
    .bind(by)
    .execute(c)
    .await
    .map(|r| r.rows_affected())
    })?;
    Ok(inserted == 1)
}

/// The tokens named `name` of `scope` that wait for their approval (not revoked, not
/// activated), read in the approval's transaction.
pub(crate) async fn pending_named_in(
    conn: &mut super::Conn,
    name: &str,
    scope: &str,
) -> Result<Vec<String>, super::StoreError> {
    Ok(on!(&mut *conn, |c| {
        sqlx::query_scalar(&format!(
        "SELECT t.token_id FROM {TOKEN_TABLES} WHERE COALESCE(t.name, t.token_id) = $1 AND t.scope = $2 AND t.needs_approval <> 0 AND a.token_id IS NULL AND r.token_id IS NULL"
    ))
    .bind(name)
    .bind(scope)
    .fetch_all(c)
    .await
    })?)
}

/// Whether a token id was ever issued.
pub async fn exists(store: &Store, token_id: &str) -> Result<bool, sqlx::Error> {
    super::row_exists(
        store.db(),
        "SELECT 1 FROM api_tokens WHERE token_id = $1",
        token_id,
    )
    .await
}

/// Records a token's revocation; `false` when it was revoked already (the first stands).
pub async fn revoke(
    store: &Store,
    token_id: &str,
    revoked_at_ms: i64,
    revoked_by: &str,
) -> Result<bool, sqlx::Error> {
    let pool = store.db();
    let inserted = on!(pool, |c| {
        sqlx::query(
        "INSERT INTO api_token_revocations (token_id, revoked_at_ms, revoked_by) VALUES ($1, $2, $3) ON CONFLICT (token_id) DO NOTHING",
    )
    .bind(token_id)
    .bind(revoked_at_ms)
    .bind(revoked_by)
    .execute(c)
    .await.map(|r| r.rows_affected())
    })?;
    Ok(inserted == 1)
}

/// Every token, oldest first.
pub async fn list(store: &Store) -> Result<Vec<StoredToken>, sqlx::Error> {
    let pool = store.db();
    on!(pool, |c| {
        sqlx::query_as(&format!(
            "SELECT {TOKEN_COLUMNS} FROM {TOKEN_TABLES} ORDER BY t.created_at_ms, t.token_id"
        ))
        .fetch_all(c)
        .await
    })
}

/// One token with its stored secret hash.
pub(crate) async fn with_hash(
    store: &Store,
    token_id: &str,
) -> Result<Option<(StoredToken, Vec<u8>)>, sqlx::Error> {
    let pool = store.db();
    let row: Option<TokenWithHash> = on!(pool, |c| {
        sqlx::query_as(&format!(
            "SELECT {TOKEN_COLUMNS}, t.token_hash FROM {TOKEN_TABLES} WHERE t.token_id = $1"
        ))
        .bind(token_id)
        .fetch_optional(c)
        .await
    })?;
    Ok(row.map(|r| (r.token, r.token_hash)))
}
