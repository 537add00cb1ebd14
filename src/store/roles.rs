//! Who may change what on PostgreSQL: the schema's version as the database records it, and
//! the grants of the role the engine runs as.
//!
//! Two roles serve a production ledger. The **owner** owns the tables and runs the
//! migrations (`settle migrate --owner-database URL`); the **runtime** role, the one
//! `settle serve` and every booking command connect as, may read and insert everywhere,
//! rewrite the projections, and nothing else: it cannot update, delete or truncate an
//! append-only table ([`APPEND_ONLY_TABLES`]), drop or disable a trigger, or change the
//! schema. The engine then never needs the owner's rights at run time: [`Store::migrate`]
//! does nothing on a schema that is current, and reports `schema_outdated` on one that is
//! behind when the connected role cannot migrate it.

use sqlx::migrate::Migrator;

use super::{Db, Dialect, Store, StoreError, on};

/// The migrations of each dialect, embedded in the binary.
pub(crate) static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");
pub(crate) static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("migrations/postgres");

/// The ledger's append-only tables: the runtime role may read and insert their rows and
/// never update, delete or truncate them (the database's triggers refuse that too, to any
/// role that has not dropped them; only the owner may drop them). Every other table is a
/// projection or a worker's state, rewritten by the engine.
pub const APPEND_ONLY_TABLES: &[&str] = &[
    "events",
    "api_tokens",
    "api_token_revocations",
    "gpu_reports",
    "anchors",
    "anchor_publications",
];

/// The table where sqlx records the applied migrations: read by the runtime role (to know
/// the schema is current), written by the owner only.
pub const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

/// The runtime role `settle migrate --print-grants` names when it is given no role.
pub const RUNTIME_ROLE: &str = "settle_runtime";

/// A migration the database records (`_sqlx_migrations`).
#[derive(sqlx::FromRow)]
struct Applied {
    version: i64,
    checksum: Vec<u8>,
    success: bool,
}

/// How the database's schema stands against the migrations of this binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaState {
    /// Every migration of this binary is applied, as this binary has it.
    Current,
    /// Some are not: the highest applied version (0: none) and the one this binary needs.
    Behind { at: i64, needs: i64 },
    /// The database records a migration this binary does not have, one that differs from
    /// this binary's, or one that failed: the migrator reports which.
    Foreign,
}

/// Compares the recorded migrations with `migrator`'s.
fn compare(migrator: &Migrator, applied: &[Applied]) -> SchemaState {
    let embedded: Vec<_> = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .collect();
    let foreign = applied.iter().any(|a| {
        !a.success
            || !embedded
                .iter()
                .any(|m| m.version == a.version && *m.checksum == *a.checksum)
    });
    if foreign {
        return SchemaState::Foreign;
    }
    let needs = embedded.iter().map(|m| m.version).max().unwrap_or(0);
    let missing = embedded
        .iter()
        .any(|m| !applied.iter().any(|a| a.version == m.version));
    if missing {
        let at = applied.iter().map(|a| a.version).max().unwrap_or(0);
        SchemaState::Behind { at, needs }
    } else {
        SchemaState::Current
    }
}

/// The facts of a PostgreSQL ledger the grants are written for.
#[derive(sqlx::FromRow)]
struct GrantFacts {
    database: String,
    schema: String,
    owner: String,
}

impl Store {
    /// Applies the schema migrations of this dialect. Writes no ledger event.
    ///
    /// On PostgreSQL it first reads which are applied: on a current schema it does nothing,
    /// so a role without the right to change the schema (the runtime role) opens the ledger;
    /// on a schema behind this binary it migrates when the connected role may create in the
    /// schema, and otherwise fails with [`StoreError::SchemaOutdated`] instead of trying.
    /// SQLite (one file, one owner) always runs the migrator.
    ///
    /// On a Citus coordinator it then distributes the tables not yet distributed
    /// ([`Store::distribute`]) and returns what it did.
    pub async fn migrate(&self) -> Result<Option<super::citus::Distribution>, StoreError> {
        match &self.db {
            Db::Sqlite(pool) => SQLITE_MIGRATOR.run(pool).await?,
            Db::Postgres(pool) => match self.schema_state().await? {
                SchemaState::Current => {}
                SchemaState::Behind { at, needs } if !self.may_change_schema().await? => {
                    return Err(StoreError::SchemaOutdated { at, needs });
                }
                SchemaState::Foreign if !self.may_change_schema().await? => {
                    return Err(StoreError::SchemaForeign);
                }
                _ => POSTGRES_MIGRATOR.run(pool).await?,
            },
        }
        self.distribute().await
    }

    /// How the database's schema stands against this binary's migrations.
    pub(crate) async fn schema_state(&self) -> Result<SchemaState, StoreError> {
        let migrator = match self.dialect() {
            Dialect::Sqlite => &SQLITE_MIGRATOR,
            Dialect::Postgres => &POSTGRES_MIGRATOR,
        };
        let exists: bool = match self.dialect() {
            Dialect::Sqlite => on!(&self.db, |c| sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1)"
            )
            .bind(MIGRATIONS_TABLE)
            .fetch_one(c)
            .await)?,
            Dialect::Postgres => on!(&self.db, |c| sqlx::query_scalar(
                "SELECT to_regclass($1) IS NOT NULL"
            )
            .bind(MIGRATIONS_TABLE)
            .fetch_one(c)
            .await)?,
        };
        let applied: Vec<Applied> = if exists {
            on!(&self.db, |c| sqlx::query_as(&format!(
                "SELECT version, checksum, success FROM {MIGRATIONS_TABLE} ORDER BY version"
            ))
            .fetch_all(c)
            .await)?
        } else {
            Vec::new()
        };
        Ok(compare(migrator, &applied))
    }

    /// Whether the connected role may create tables in the schema the ledger lives in
    /// (PostgreSQL; always on SQLite): whether it can run a migration.
    async fn may_change_schema(&self) -> Result<bool, StoreError> {
        Ok(match &self.db {
            Db::Sqlite(_) => true,
            Db::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT COALESCE(has_schema_privilege(current_schema(), 'CREATE'), false)",
                )
                .fetch_one(pool)
                .await?
            }
        })
    }

    /// The statements that give `role` what the engine needs at run time on this
    /// PostgreSQL ledger (migrated), and nothing more; printed by `settle migrate
    /// --print-grants`, run by the owner of the tables. Re-runnable: each grant is followed
    /// by the revocations that bound it, so running them again (after every migration)
    /// yields the same rights.
    ///
    /// - the database: `CONNECT` and `TEMPORARY` (`verify` and `rebuild` fold into
    ///   temporary copies); the schema: `USAGE`, never `CREATE`;
    /// - every table: `SELECT, INSERT, UPDATE, DELETE` (the projections are rewritten by
    ///   the engine); then the append-only tables ([`APPEND_ONLY_TABLES`]) lose `UPDATE`
    ///   and `DELETE`, and the migrations table everything but `SELECT`;
    /// - no table: `TRUNCATE`, `REFERENCES`, `TRIGGER`, nor ownership (so no `DROP
    ///   TRIGGER`, no `ALTER TABLE … DISABLE TRIGGER`, no DDL);
    /// - sequences: `USAGE, SELECT`;
    /// - tables and sequences the owner creates later (a migration of a later release):
    ///   `SELECT, INSERT` only, until these statements are run again: a new table is
    ///   append-only until named otherwise, never rewritable by default.
    ///
    /// # Errors
    /// `grants_need_postgres` on SQLite, `invalid_role` for a role name that is not a plain
    /// identifier, `schema_outdated` on a database without the ledger's tables.
    pub async fn runtime_grants(&self, role: &str) -> Result<Vec<String>, StoreError> {
        let Db::Postgres(pool) = &self.db else {
            return Err(StoreError::GrantsNeedPostgres);
        };
        check_role(role)?;
        let facts: Option<GrantFacts> = sqlx::query_as(
            "SELECT current_database() AS database, schemaname AS schema, tableowner AS owner \
             FROM pg_tables WHERE tablename = 'events' AND schemaname = current_schema()",
        )
        .fetch_optional(pool)
        .await?;
        let Some(facts) = facts else {
            let needs = POSTGRES_MIGRATOR.iter().map(|m| m.version).max();
            return Err(StoreError::SchemaOutdated {
                at: 0,
                needs: needs.unwrap_or(0),
            });
        };
        Ok(grant_statements(&facts, role))
    }

    /// Runs the statements of [`Store::runtime_grants`] for `role`, in one transaction, as
    /// the connected role (the owner of the tables).
    pub async fn grant_runtime(&self, role: &str) -> Result<(), StoreError> {
        let statements = self.runtime_grants(role).await?;
        let Db::Postgres(pool) = &self.db else {
            return Err(StoreError::GrantsNeedPostgres);
        };
        let mut tx = pool.begin().await?;
        for statement in &statements {
            sqlx::query(statement).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// The statements of [`Store::runtime_grants`] for `facts`.
fn grant_statements(facts: &GrantFacts, role: &str) -> Vec<String> {
    let database = quote(&facts.database);
    let schema = quote(&facts.schema);
    let owner = quote(&facts.owner);
    let append_only: Vec<String> = APPEND_ONLY_TABLES
        .iter()
        .map(|t| format!("{schema}.{}", quote(t)))
        .collect();
    let append_only = append_only.join(", ");
    let migrations = format!("{schema}.{}", quote(MIGRATIONS_TABLE));
    let defaults = format!("ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema}");
    vec![
        format!("GRANT CONNECT, TEMPORARY ON DATABASE {database} TO {role}"),
        format!("GRANT USAGE ON SCHEMA {schema} TO {role}"),
        format!("REVOKE CREATE ON SCHEMA {schema} FROM {role}"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"),
        format!(
            "REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA {schema} FROM {role}"
        ),
        format!("REVOKE UPDATE, DELETE ON {append_only} FROM {role}"),
        format!("REVOKE INSERT, UPDATE, DELETE ON {migrations} FROM {role}"),
        format!("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}"),
        format!("{defaults} GRANT SELECT, INSERT ON TABLES TO {role}"),
        format!(
            "{defaults} REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON TABLES FROM {role}"
        ),
        format!("{defaults} GRANT USAGE, SELECT ON SEQUENCES TO {role}"),
    ]
}

/// A role name the grants may name unquoted: a lower-case identifier, as PostgreSQL folds
/// one, at most 63 bytes.
fn check_role(role: &str) -> Result<(), StoreError> {
    let mut chars = role.chars();
    let first = chars.next();
    let valid = role.len() <= 63
        && first.is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid
        && !matches!(
            role,
            "public" | "all" | "user" | "current_user" | "session_user"
        )
    {
        Ok(())
    } else {
        Err(StoreError::InvalidRole(role.to_owned()))
    }
}

/// `name` as a quoted SQL identifier.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(version: i64, checksum: &[u8]) -> Applied {
        Applied {
            version,
            checksum: checksum.to_vec(),
            success: true,
        }
    }

    fn all_applied() -> Vec<Applied> {
        POSTGRES_MIGRATOR
            .iter()
            .map(|m| applied(m.version, &m.checksum))
            .collect()
    }

    #[test]
    fn a_schema_with_every_migration_is_current() {
        assert_eq!(
            compare(&POSTGRES_MIGRATOR, &all_applied()),
            SchemaState::Current
        );
    }

    #[test]
    fn a_schema_missing_the_last_migration_is_behind() {
        let mut rows = all_applied();
        let last = rows.pop().unwrap().version;
        assert_eq!(
            compare(&POSTGRES_MIGRATOR, &rows),
            SchemaState::Behind {
                at: last - 1,
                needs: last
            }
        );
        assert_eq!(
            compare(&POSTGRES_MIGRATOR, &[]),
            SchemaState::Behind { at: 0, needs: last }
        );
    }

    #[test]
    fn a_changed_or_unknown_or_failed_migration_is_foreign() {
        let mut rows = all_applied();
        rows[0].checksum = vec![0; 48];
        assert_eq!(compare(&POSTGRES_MIGRATOR, &rows), SchemaState::Foreign);
        let mut rows = all_applied();
        rows.push(applied(99_999, b"later"));
        assert_eq!(compare(&POSTGRES_MIGRATOR, &rows), SchemaState::Foreign);
        let mut rows = all_applied();
        rows[1].success = false;
        assert_eq!(compare(&POSTGRES_MIGRATOR, &rows), SchemaState::Foreign);
    }

    #[test]
    fn the_grants_never_give_truncate_ownership_or_rewrites_of_the_append_only_tables() {
        let facts = GrantFacts {
            database: "ledger".into(),
            schema: "public".into(),
            owner: "settle_owner".into(),
        };
        let statements = grant_statements(&facts, "settle_runtime");
        for s in &statements {
            let grants = s.split(" TO ").next().unwrap();
            if grants.contains("GRANT ") && !grants.contains("REVOKE") {
                for word in [
                    "TRUNCATE",
                    "TRIGGER",
                    "REFERENCES",
                    "CREATE",
                    "ALL PRIVILEGES",
                    "OWNER",
                ] {
                    assert!(!grants.contains(word), "{s}");
                }
            }
        }
        let revoke = statements
            .iter()
            .position(|s| s.starts_with("REVOKE UPDATE, DELETE ON") && s.contains("\"events\""))
            .expect("the append-only tables lose their rewrites");
        let grant = statements
            .iter()
            .position(|s| s.contains("UPDATE, DELETE ON ALL TABLES"))
            .unwrap();
        assert!(
            grant < revoke,
            "the revocation must follow the grant it bounds"
        );
    }

    #[test]
    fn every_table_the_migrations_guard_with_a_refusal_trigger_is_append_only() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
        let mut guarded = std::collections::BTreeSet::new();
        for file in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            for line in text
                .lines()
                .filter(|l| l.contains("EXECUTE FUNCTION settle_refuse_mutation"))
            {
                let table = line
                    .split(" ON ")
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap();
                guarded.insert(table.to_owned());
            }
        }
        let listed: std::collections::BTreeSet<String> =
            APPEND_ONLY_TABLES.iter().map(|t| (*t).to_owned()).collect();
        assert_eq!(guarded, listed);
    }

    #[test]
    fn a_role_is_a_plain_identifier() {
        assert!(check_role("settle_runtime").is_ok());
        for bad in [
            "",
            "Settle",
            "a;DROP TABLE events",
            "public",
            "1x",
            &"x".repeat(64),
        ] {
            assert!(check_role(bad).is_err(), "{bad}");
        }
    }
}
