//! The idempotency keys a process remembers (`store::usage::RecentKeys`): a batch answers the
//! re-sends it finds among them without reading, takes the keys it does not find for new
//! without reading them either, and the database's unique index on `events (idem_key,
//! stream)` checks that: an attempt that took a booked key for new fails and is retried
//! reading its keys, and the next batches read theirs for a while (`store.usage_recent_keys_max`).
//! Both stores (PostgreSQL when `SETTLE_TEST_PG_URL` is set).

use crate::common::Tables;
use crate::common::TestDb;
use crate::ingest::{NOW, assert_verified, booked_usage_ids, payable, price, provider, usage};
use crate::usage_views::send;

use settle::ledger::ingest::UsageInput;

const FEE_BPS: i64 = 2000;
const HOUR: i64 = 3_600_000;

/// Hour `n` of 2026-11-22 on `provider`'s first GPU, as event `id`.
fn hour(id: &str, provider: &str, n: u32) -> UsageInput {
    let gpu = format!("{provider}-g0");
    let started = format!("2026-11-22T{n:02}:00:00Z");
    let ended = format!("2026-11-22T{:02}:00:00Z", n + 1);
    usage(id, provider, &gpu, &started, &ended, None)
}

/// Another process (a fresh store: it remembers no key) re-sends events booked before it
/// started, mixed with new ones. Its batches take the keys they do not know for new:
/// - a re-send rejected on that assumption (it overlaps itself) has its key read after all
///   and is answered as a duplicate or a conflict;
/// - a re-send accepted on it (another hour: no overlap) is refused by the unique index,
///   and the attempt is retried reading its keys.
/// Either failed assumption makes the next batches read their keys (two, then four in a
/// row). Nothing is booked twice.
#[tokio::test]
async fn keys_booked_before_the_process_started_are_never_booked_again() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    provider(&a, "prv_r", 1).await;
    let first: Vec<UsageInput> = (0..4)
        .map(|n| hour(&format!("r-{n}"), "prv_r", n))
        .collect();
    assert_eq!(send(&a, &first).await, ["accepted"; 4]);

    let (b, _) = db.ledger_at(NOW).await;
    let mut changed = hour("r-1", "prv_r", 1);
    changed.ended_at = Some("2026-11-22T01:30:00Z".into());
    let batch = [hour("r-0", "prv_r", 0), changed, hour("r-4", "prv_r", 4)];
    assert_eq!(
        send(&b, &batch).await,
        ["duplicate", "rejected:conflict", "accepted"]
    );
    assert_eq!(b.store.usage_key_assumptions_failed(), 1);
    // Backing off: two batches read their keys, so an old re-send fails no assumption.
    assert_eq!(
        send(&b, &[hour("r-2", "prv_r", 2), hour("r-5", "prv_r", 5)]).await,
        ["duplicate", "accepted"]
    );
    assert_eq!(
        send(&b, &[hour("r-3", "prv_r", 3), hour("r-6", "prv_r", 6)]).await,
        ["duplicate", "accepted"]
    );
    assert_eq!(
        b.store.usage_key_assumptions_failed(),
        1,
        "the batches read"
    );
    // The backoff is over. `r-7`, booked by `a`, is re-sent for another hour: nothing
    // overlaps it, the append is refused and the retry answers the conflict.
    // (`b` books an hour first, so that it knows the head `a` moved: an append on the head
    // it kept would be refused by the primary key before the key is.)
    assert_eq!(send(&a, &[hour("r-7", "prv_r", 7)]).await, ["accepted"]);
    assert_eq!(send(&b, &[hour("r-8", "prv_r", 8)]).await, ["accepted"]);
    assert_eq!(
        send(&b, &[hour("r-7", "prv_r", 12), hour("r-9", "prv_r", 9)]).await,
        ["rejected:conflict", "accepted"]
    );
    assert_eq!(b.store.usage_key_assumptions_failed(), 2);
    // The second failure in a row: the next four batches read their keys, so four
    // re-sends of hours `a` booked fail no assumption.
    let later: Vec<UsageInput> = (10..14)
        .map(|n| hour(&format!("r-{n}"), "prv_r", n + 3))
        .collect();
    assert_eq!(send(&a, &later).await, ["accepted"; 4]);
    for event in later {
        assert_eq!(send(&b, &[event]).await, ["duplicate"]);
    }
    assert_eq!(b.store.usage_key_assumptions_failed(), 2);

    let mut booked = booked_usage_ids(&b).await;
    booked.sort_by_key(|id| id[2..].parse::<u32>().unwrap());
    let expected: Vec<String> = (0..14).map(|n| format!("r-{n}")).collect();
    assert_eq!(booked, expected, "each event booked once");
    assert_eq!(
        payable(&b, "prv_r").await,
        14 * price(2_490_000, HOUR, FEE_BPS).2
    );
    assert_eq!(a.store.usage_key_assumptions_failed(), 0);
    assert_verified(&b).await;
}

/// A process answers a re-send of a key it booked from memory, without reading the ledger:
/// shown by moving the stored keys behind the engine, after which the ledger no longer says
/// the events are booked. With `usage_recent_keys_max = 0` a process remembers no key and
/// reads every one, so it decides its re-send on what the ledger says: its hour overlaps the
/// booked one.
#[tokio::test]
async fn a_re_send_is_answered_from_the_keys_remembered_and_0_remembers_none() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    let none = settle::store::StoreOptions {
        usage_recent_keys_max: 0,
        ..Default::default()
    };
    let (c, _) = db.ledger_with(&none, NOW).await;
    provider(&a, "prv_m", 1).await;
    provider(&a, "prv_n", 1).await;
    assert_eq!(send(&a, &[hour("m-1", "prv_m", 8)]).await, ["accepted"]);
    assert_eq!(send(&c, &[hour("n-1", "prv_n", 8)]).await, ["accepted"]);
    let unguard = if db.is_postgres() {
        "DROP TRIGGER events_refuse_update_delete ON events"
    } else {
        "DROP TRIGGER events_refuse_update"
    };
    for sql in [
        unguard,
        "UPDATE events SET idem_key = idem_key || ':moved' WHERE event_type = 'usage.recorded'",
    ] {
        // Behind the engine, with the owner's rights.
        let owner = db.owner_store().await;
        sqlx::query(sql).execute(owner.pool()).await.unwrap();
        owner.close().await;
    }
    assert_eq!(send(&a, &[hour("m-1", "prv_m", 8)]).await, ["duplicate"]);
    assert_eq!(
        send(&c, &[hour("n-1", "prv_n", 8)]).await,
        ["rejected:overlapping_usage"]
    );
    // Nothing is booked twice either way.
    assert_eq!(booked_usage_ids(&c).await.len(), 2);
    assert_eq!(a.store.usage_key_assumptions_failed(), 0);
    assert_eq!(c.store.usage_key_assumptions_failed(), 0);
}
