//! The store's errors, and which database errors are conflicts a writer retries.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another writer appended to the stream, or a unique key was taken: retry the command.
    #[error("concurrent write conflict: {0}")]
    Conflict(String),
    #[error("database unavailable or failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database url {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    /// A stored value the code cannot read.
    #[error("corrupt ledger setting: {0}")]
    Corrupt(String),
    /// A projection row the code cannot read (`corrupt_projection`).
    #[error("corrupt projection row: {0}")]
    CorruptRow(String),
    /// A component between the caller and the database stopped (e.g. the usage booker).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The schema is behind this binary and the connected role may not migrate it (the
    /// runtime role: [`roles`]).
    #[error(
        "schema_outdated: the database schema is at version {at}, this binary needs {needs}: run `settle migrate` as the owner role (--owner-database or SETTLE_DATABASE_OWNER_URL)"
    )]
    SchemaOutdated { at: i64, needs: i64 },
    /// The database records migrations this binary does not have or has otherwise, and the
    /// connected role may not run the migrator that would say which.
    #[error(
        "schema_foreign: the database records migrations this binary does not have or has otherwise (a newer or a changed release): run this release's `settle migrate` as the owner role to see which"
    )]
    SchemaForeign,
    /// `settle migrate --print-grants` on SQLite.
    #[error(
        "grants_need_postgres: the runtime role's grants are PostgreSQL's; a SQLite ledger is guarded by its file's owner and mode"
    )]
    GrantsNeedPostgres,
    /// A role name the grants cannot name.
    #[error(
        "invalid_role: {0:?} is not a plain role name (lower-case letters, digits and _, at most 63, not a reserved word)"
    )]
    InvalidRole(String),
    /// An operation only the owner of the tables may run, attempted as another role.
    #[error(
        "needs_owner: {0} needs the owner role of the tables: run it with --owner-database or SETTLE_DATABASE_OWNER_URL"
    )]
    NeedsOwner(&'static str),
}

impl StoreError {
    /// Whether retrying the whole transaction may succeed.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            StoreError::Conflict(_) => true,
            StoreError::Database(e) => is_transient(e),
            _ => false,
        }
    }
}

/// Classifies a database error as a conflict the writer should retry.
pub(super) fn classify(e: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &e
        && is_unique_violation(db.as_ref())
    {
        return StoreError::Conflict(db.message().to_owned());
    }
    if is_transient(&e) {
        return StoreError::Conflict(e.to_string());
    }
    StoreError::Database(e)
}

/// Whether `e` is the unique index on `events (idem_key, stream)` refusing a key booked
/// already (PostgreSQL names the index, SQLite the columns).
pub(super) fn is_key_taken(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db)
        if is_unique_violation(db.as_ref()) && db.message().contains("idem_key"))
}

/// Whether a unique index refused a row. Citus reports a refusal met by a multi-row `COPY`
/// into a shard as an internal error (`XX000`) with PostgreSQL's message.
pub(super) fn is_unique_violation(db: &dyn sqlx::error::DatabaseError) -> bool {
    db.kind() == sqlx::error::ErrorKind::UniqueViolation
        || (db.code().as_deref() == Some("XX000")
            && db
                .message()
                .starts_with("duplicate key value violates unique constraint"))
}

pub(super) fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.to_string()).unwrap_or_default();
            // SQLite BUSY (5), BUSY_SNAPSHOT (517), LOCKED (6); PostgreSQL serialization
            // failure, deadlock, and a full lock table (advisory stream locks of concurrent
            // ingest transactions: retrying after they commit succeeds).
            matches!(
                code.as_str(),
                "5" | "517" | "6" | "262" | "40001" | "40P01" | "53200"
            )
        }
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) => true,
        _ => false,
    }
}
