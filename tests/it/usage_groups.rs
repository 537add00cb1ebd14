//! Group commit of usage batches (`ledger::group`, behind `POST /v1/usage`), on both stores:
//! batches booked together are answered and booked exactly as if booked one after another,
//! batches that wait while another books are booked together in one transaction, and a
//! group whose transaction fails books its batches one by one, so one batch's failure is
//! that batch's alone.

use crate::common::Tables;
use crate::common::TestDb;
use crate::ingest::{
    NOW, assert_verified, booked_usage_ids, ms, outcomes, payable, price, provider, usage,
};

use std::collections::BTreeSet;
use std::time::Duration;

use settle::domain::time::format_ms;
use settle::ledger::group::{GroupStats, UsageGroups};
use settle::ledger::ingest::{SenderScope, UsageInput, UsageRequest, UsageResult};
use settle::ledger::{Actor, Ledger};
use sqlx::Row;

/// Three batches of three senders, with everything a batch can meet of the batches before
/// it: a re-send with the same content (`duplicate`), with other content (`conflict`), an
/// interval overlapping one booked just before on the same GPU, an ingest token's event for
/// another provider, and a malformed one.
fn three_batches() -> Vec<(Vec<UsageInput>, SenderScope, Actor)> {
    let u = |id: &str, p: &str, g: &str, s: &str, e: &str| usage(id, p, g, s, e, None);
    vec![
        (
            vec![
                u(
                    "e1",
                    "prv_a",
                    "prv_a-g0",
                    "2026-11-22T10:00:00Z",
                    "2026-11-22T10:10:00Z",
                ),
                u(
                    "e2",
                    "prv_b",
                    "prv_b-g0",
                    "2026-11-22T10:00:00Z",
                    "2026-11-22T10:30:00Z",
                ),
                u(
                    "e3",
                    "prv_a",
                    "prv_a-g1",
                    "2026-11-22T09:00:00Z",
                    "2026-11-22T11:00:00Z",
                ),
            ],
            SenderScope::Metering,
            Actor::token("metering"),
        ),
        (
            vec![
                // Same content as the first batch's e3: a duplicate.
                u(
                    "e3",
                    "prv_a",
                    "prv_a-g1",
                    "2026-11-22T09:00:00Z",
                    "2026-11-22T11:00:00Z",
                ),
                // An agent of prv_a reporting prv_b's GPU.
                u(
                    "e4",
                    "prv_b",
                    "prv_b-g0",
                    "2026-11-22T11:00:00Z",
                    "2026-11-22T11:10:00Z",
                ),
                // Overlaps e1 on prv_a-g0.
                u(
                    "e5",
                    "prv_a",
                    "prv_a-g0",
                    "2026-11-22T10:05:00Z",
                    "2026-11-22T10:15:00Z",
                ),
                // Right after e1: booked.
                u(
                    "e6",
                    "prv_a",
                    "prv_a-g0",
                    "2026-11-22T10:10:00Z",
                    "2026-11-22T10:20:00Z",
                ),
                UsageInput::default(),
            ],
            SenderScope::Ingest {
                provider_id: "prv_a".parse().unwrap(),
            },
            Actor::token("agent-a"),
        ),
        (
            vec![
                // e2 again with another end: a conflict.
                u(
                    "e2",
                    "prv_b",
                    "prv_b-g0",
                    "2026-11-22T10:00:00Z",
                    "2026-11-22T10:40:00Z",
                ),
                u(
                    "e7",
                    "prv_b",
                    "prv_b-g1",
                    "2026-11-22T10:00:00Z",
                    "2026-11-22T12:00:00Z",
                ),
                // Re-sent within this batch with the same content.
                u(
                    "e7",
                    "prv_b",
                    "prv_b-g1",
                    "2026-11-22T10:00:00Z",
                    "2026-11-22T12:00:00Z",
                ),
            ],
            SenderScope::Metering,
            Actor::token("metering-2"),
        ),
    ]
}

async fn marketplace(db: &TestDb) -> Ledger {
    let (ledger, _) = db.ledger_at(NOW).await;
    // Sealed values differ by their random nonces: two ledgers compared in clear.
    let ledger = ledger.with_privacy(settle::privacy::vault::Privacy::Clear);
    for p in ["prv_a", "prv_b", "prv_c", "prv_d"] {
        provider(&ledger, p, 2).await;
    }
    ledger
}

/// The ledger of [`marketplace`] with one booker (`config` changed as given) and its queue.
async fn one_booker(
    db: &TestDb,
    config: impl FnOnce(&mut settle::config::LedgerConfig),
) -> (Ledger, UsageGroups) {
    let mut ledger = marketplace(db).await;
    ledger.config.usage_group_bookers_max = 1;
    config(&mut ledger.config);
    let groups = UsageGroups::new(ledger.clone());
    (ledger, groups)
}

/// An hour of `p`'s first GPU from `hour` o'clock on 2026-11-22.
fn slice_at(id: &str, p: &str, hour: u32) -> UsageInput {
    let (s, e) = (
        format!("2026-11-22T{hour:02}:00:00Z"),
        format!("2026-11-22T{:02}:00:00Z", hour + 1),
    );
    usage(id, p, &format!("{p}-g0"), &s, &e, None)
}

/// An hour of `p`'s first GPU from 08:00 on 2026-11-22.
fn slice(id: &str, p: &str) -> UsageInput {
    slice_at(id, p, 8)
}

/// Every usage event as stored, stream by stream: what the booking decided, who caused it,
/// and the chain.
async fn usage_rows(ledger: &Ledger) -> Vec<(String, i64, String, String, Vec<u8>)> {
    sqlx::query(
        "SELECT stream, seq, payload, actor, hash FROM events \
         WHERE event_type = 'usage.recorded' ORDER BY stream, seq",
    )
    .fetch_all(ledger.store.pool())
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

#[tokio::test]
async fn batches_booked_together_are_answered_and_booked_as_one_after_another() {
    let batches = three_batches();

    let one_by_one = TestDb::new().await;
    let ledger = marketplace(&one_by_one).await;
    let mut expected = Vec::new();
    for (inputs, scope, actor) in &batches {
        let results = ledger.ingest_usage(inputs, scope, actor).await.unwrap();
        expected.push(outcomes(&results));
    }
    let expected_rows = usage_rows(&ledger).await;

    let together = TestDb::new().await;
    let grouped = marketplace(&together).await;
    let requests: Vec<UsageRequest<'_>> = batches
        .iter()
        .map(|(inputs, scope, actor)| UsageRequest {
            inputs,
            scope,
            actor,
        })
        .collect();
    let results = grouped.ingest_requests(&requests).await.unwrap();
    let got: Vec<Vec<String>> = results.iter().map(|r| outcomes(r)).collect();

    assert_eq!(
        expected,
        vec![
            vec!["accepted", "accepted", "accepted"],
            vec![
                "duplicate",
                "rejected:forbidden_provider",
                "rejected:overlapping_usage",
                "accepted",
                "rejected:missing_field"
            ],
            vec!["rejected:conflict", "accepted", "duplicate"],
        ],
        "the batches one after another"
    );
    assert_eq!(got, expected, "the same batches booked as one group");
    // Each event's id comes back in its own batch's answer.
    assert_eq!(results[1][3].event_id(), Some("e6"));
    assert_eq!(results[2][1].event_id(), Some("e7"));
    // Same events on the same streams in the same order, each naming its own sender, and the
    // same chain.
    let rows = usage_rows(&grouped).await;
    assert_eq!(rows, expected_rows);
    let actors: Vec<(&str, &str)> = rows
        .iter()
        .map(|(_, _, payload, actor, _)| {
            let id = if payload.contains("\"e6\"") { "e6" } else { "" };
            (id, actor.as_str())
        })
        .filter(|(id, _)| !id.is_empty())
        .collect();
    assert_eq!(actors, vec![("e6", "token:agent-a")]);
    assert_verified(&grouped).await;
}

/// Starts `batches` senders of one batch each on `groups`, each in its own task.
fn send_all(
    groups: &UsageGroups,
    batches: Vec<Vec<UsageInput>>,
) -> Vec<tokio::task::JoinHandle<Vec<UsageResult>>> {
    batches
        .into_iter()
        .enumerate()
        .map(|(n, batch)| {
            let groups = groups.clone();
            tokio::spawn(async move {
                groups
                    .ingest(
                        batch,
                        SenderScope::Metering,
                        Actor::token(&format!("sender-{n}")),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("sender {n}: {e}"))
            })
        })
        .collect()
}

/// Waits until `n` batches wait in the queue (the first one is held by its booker).
async fn until_waiting(groups: &UsageGroups, n: usize) {
    for _ in 0..2_000 {
        if groups.waiting() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{} batches waiting, expected {n}", groups.waiting());
}

/// Waits until a booker has taken the first batch and nothing else waits.
async fn until_booking(groups: &UsageGroups) {
    for _ in 0..2_000 {
        if groups.bookers() == 1 && groups.waiting() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no booker took the first batch");
}

/// One sender's batch, answered as the queue answers it.
type Answer = tokio::task::JoinHandle<Result<Vec<UsageResult>, settle::ledger::LedgerError>>;

/// Sends `batches` one at a time, so the queue keeps their order: the first is taken by its
/// booker (which waits for whatever stream the test holds), the others wait behind it.
async fn queue_in_order(groups: &UsageGroups, batches: Vec<Vec<UsageInput>>) -> Vec<Answer> {
    let mut answers = Vec::new();
    for (n, batch) in batches.into_iter().enumerate() {
        let sender = groups.clone();
        answers.push(tokio::spawn(async move {
            sender
                .ingest(batch, SenderScope::Metering, Actor::token("m"))
                .await
        }));
        if n == 0 {
            until_booking(groups).await;
        } else {
            until_waiting(groups, n).await;
        }
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_waiting_for_a_booker_are_booked_together_exactly_once() {
    const SENDERS: usize = 40;
    const PER_BATCH: usize = 20;
    let db = TestDb::new().await;
    let (ledger, groups) = one_booker(&db, |_| {}).await;

    // Sender n sends 20 ten-minute slices of one GPU of prv_c or prv_d; every sender also
    // re-sends the first slice of the sender before it (same content): each of those is
    // booked once and answered `duplicate` to the other.
    let start = ms("2026-11-21T00:00:00Z");
    let slice = |n: usize, k: usize| {
        let (p, g) = (["prv_c", "prv_d"][n % 2], (n / 2) % 2);
        let at = start + ((n / 4) * PER_BATCH + k) as i64 * 600_000;
        usage(
            &format!("s{n}-{k}"),
            p,
            &format!("{p}-g{g}"),
            &format_ms(at),
            &format_ms(at + 600_000),
            None,
        )
    };
    let batches: Vec<Vec<UsageInput>> = (0..SENDERS)
        .map(|n| {
            let mut batch: Vec<UsageInput> = (0..PER_BATCH - 1).map(|k| slice(n, k)).collect();
            batch.push(slice((n + SENDERS - 1) % SENDERS, 0));
            batch
        })
        .collect();
    let unique: BTreeSet<String> = batches
        .iter()
        .flatten()
        .map(|e| e.event_id.clone().unwrap())
        .collect();
    assert_eq!(unique.len(), SENDERS * (PER_BATCH - 1));

    // Hold prv_c's stream (on SQLite: the one writer) so the first batch's booker waits and
    // the other 39 batches queue behind it.
    let held = ledger.store.begin("provider:prv_c").await.unwrap();
    let first = send_all(&groups, batches[..1].to_vec());
    until_booking(&groups).await;
    let rest = send_all(&groups, batches[1..].to_vec());
    until_waiting(&groups, SENDERS - 1).await;
    drop(held);

    let mut accepted = Vec::new();
    let mut duplicates = 0;
    for task in first.into_iter().chain(rest) {
        for r in task.await.unwrap() {
            match r {
                UsageResult::Accepted { event_id } => accepted.push(event_id),
                UsageResult::Duplicate { .. } => duplicates += 1,
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(
        groups.stats(),
        GroupStats {
            groups_committed: 1,
            batches_grouped: SENDERS as u64 - 1,
            groups_failed: 0,
        },
        "the first batch alone, then the 39 that waited in one transaction"
    );
    assert_eq!(accepted.len(), unique.len(), "each event accepted once");
    assert_eq!(duplicates, SENDERS, "each re-send answered duplicate");
    let booked: Vec<String> = booked_usage_ids(&ledger).await;
    assert_eq!(booked.len(), unique.len(), "nothing booked twice");
    assert_eq!(booked.into_iter().collect::<BTreeSet<_>>(), unique);
    let net = price(2_490_000, 600_000, 2000).2;
    let per_provider = (SENDERS / 2 * (PER_BATCH - 1)) as i64 * net;
    assert_eq!(payable(&ledger, "prv_c").await, per_provider);
    assert_eq!(payable(&ledger, "prv_d").await, per_provider);
    assert_verified(&ledger).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_batch_in_a_group_fails_alone() {
    let db = TestDb::new().await;
    let (ledger, groups) = one_booker(&db, |_| {}).await;
    // The database refuses prv_b's events (a trigger, as a full disk or a broken page of
    // one provider's data would).
    let refuse = if db.is_postgres() {
        vec![
            "CREATE FUNCTION refuse_prv_b() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.stream = 'provider:prv_b' THEN RAISE EXCEPTION 'refused for the test'; END IF; \
             RETURN NEW; END $$",
            "CREATE TRIGGER refuse_prv_b BEFORE INSERT ON events FOR EACH ROW \
             EXECUTE FUNCTION refuse_prv_b()",
        ]
    } else {
        vec![
            "CREATE TRIGGER refuse_prv_b BEFORE INSERT ON events \
             WHEN NEW.stream = 'provider:prv_b' BEGIN SELECT RAISE(ABORT, 'refused for the test'); END",
        ]
    };
    // Installed by the owner (the runtime role creates no function or trigger).
    let owner = db.owner_store().await;
    for statement in refuse {
        sqlx::query(statement).execute(owner.pool()).await.unwrap();
    }
    owner.close().await;
    let batches = vec![
        vec![slice("held", "prv_c")],
        vec![slice("a1", "prv_a")],
        vec![slice("b1", "prv_b")],
        vec![slice("d1", "prv_d")],
    ];
    let held = ledger.store.begin("provider:prv_c").await.unwrap();
    let tasks = queue_in_order(&groups, batches).await;
    drop(held);
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(match t.await.unwrap() {
            Ok(results) => outcomes(&results).join(","),
            Err(e) => format!("error:{}", e.code()),
        });
    }
    assert_eq!(
        answers,
        vec![
            "accepted",
            "accepted",
            "error:storage_unavailable",
            "accepted"
        ]
    );
    assert_eq!(groups.stats().groups_failed, 1, "the group of three failed");
    let booked: BTreeSet<String> = booked_usage_ids(&ledger).await.into_iter().collect();
    assert_eq!(
        booked,
        ["a1", "d1", "held"]
            .map(str::to_owned)
            .into_iter()
            .collect()
    );
    assert_eq!(payable(&ledger, "prv_b").await, 0);
    assert_verified(&ledger).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_whose_request_went_away_before_the_commit_books_nothing() {
    let db = TestDb::new().await;
    let (ledger, groups) = one_booker(&db, |_| {}).await;
    // The second round's slices come an hour after the first's.
    let slice = |id: &str, p: &str| slice_at(id, p, if id.ends_with('2') { 9 } else { 8 });
    // The first batch's booker waits for prv_c's stream; two batches queue behind it, and
    // the request of one of them goes away (its client gone, or its request timeout).
    let held = ledger.store.begin("provider:prv_c").await.unwrap();
    let [first, gone, stays]: [Answer; 3] = queue_in_order(
        &groups,
        vec![
            vec![slice("c1", "prv_c")],
            vec![slice("a1", "prv_a")],
            vec![slice("d1", "prv_d")],
        ],
    )
    .await
    .try_into()
    .unwrap();
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    drop(held);
    assert_eq!(outcomes(&first.await.unwrap().unwrap()), ["accepted"]);
    assert_eq!(outcomes(&stays.await.unwrap().unwrap()), ["accepted"]);

    let mut expected: BTreeSet<String> = ["c1", "d1"].map(str::to_owned).into();
    if db.is_postgres() {
        // Gone while its group's transaction waits for a stream (prv_b's lock, held here):
        // the transaction is rolled back and begun again without it.
        let held_c = ledger.store.begin("provider:prv_c").await.unwrap();
        let held_b = ledger.store.begin("provider:prv_b").await.unwrap();
        let [first, gone, stays]: [Answer; 3] = queue_in_order(
            &groups,
            vec![
                vec![slice("c2", "prv_c")],
                vec![slice("a2", "prv_a")],
                vec![slice("b2", "prv_b")],
            ],
        )
        .await
        .try_into()
        .unwrap();
        drop(held_c);
        assert_eq!(outcomes(&first.await.unwrap().unwrap()), ["accepted"]);
        until_waiting(&groups, 0).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(held_b);
        assert_eq!(outcomes(&stays.await.unwrap().unwrap()), ["accepted"]);
        expected.extend(["c2", "b2"].map(str::to_owned));
    }
    let booked: BTreeSet<String> = booked_usage_ids(&ledger).await.into_iter().collect();
    assert_eq!(booked, expected, "the abandoned batches booked nothing");
    assert_verified(&ledger).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_spans_no_more_providers_than_one_transaction_takes() {
    let db = TestDb::new().await;
    // Two providers per transaction: a group that spanned three would commit in two
    // transactions, and could be half booked.
    let (ledger, groups) = one_booker(&db, |c| c.ingest_streams_per_tx_max = 2).await;
    let held = ledger.store.begin("provider:prv_c").await.unwrap();
    // Queued behind c1: prv_a, prv_a again (no new provider), prv_b, then prv_d (a third
    // provider).
    let tasks = queue_in_order(
        &groups,
        vec![
            vec![slice("c1", "prv_c")],
            vec![slice("a1", "prv_a")],
            vec![slice_at("a2", "prv_a", 9)],
            vec![slice("b1", "prv_b")],
            vec![slice("d1", "prv_d")],
        ],
    )
    .await;
    drop(held);
    for task in tasks {
        assert_eq!(outcomes(&task.await.unwrap().unwrap()), ["accepted"]);
    }
    assert_eq!(
        groups.stats(),
        GroupStats {
            groups_committed: 1,
            batches_grouped: 3,
            groups_failed: 0,
        },
        "c1 alone, then a1, a2 and b1 together, then d1 alone"
    );
    assert_verified(&ledger).await;
}

/// The usage events of `stream` in chain order, by event id.
async fn stream_order(ledger: &Ledger, stream: &str) -> Vec<String> {
    usage_rows(ledger)
        .await
        .into_iter()
        .filter(|(s, ..)| s == stream)
        .map(|(_, _, payload, ..)| {
            let payload: serde_json::Value = serde_json::from_str(&payload).unwrap();
            payload["event_id"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Waits until `bookers` bookers run and `waiting` batches wait.
async fn until_queue(groups: &UsageGroups, bookers: usize, waiting: usize) {
    for _ in 0..2_000 {
        if groups.bookers() == bookers && groups.waiting() == waiting {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "{} bookers and {} batches waiting, expected {bookers} and {waiting}",
        groups.bookers(),
        groups.waiting()
    );
}

/// With two bookers (the default), a batch sharing a provider with the group being booked
/// is not given to the second booker, which would wait for the first one's stream locks and
/// could book the provider's later batch before its earlier one: it waits for the first
/// booker's next group, and the provider's events are booked in the order they were sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_of_a_provider_being_booked_waits_for_that_booker() {
    let db = TestDb::new().await;
    let ledger = marketplace(&db).await;
    assert_eq!(ledger.config.usage_group_bookers_max, 2);
    let groups = UsageGroups::new(ledger.clone());
    // The first batch's booker waits for prv_a's stream with prv_b in its group too.
    let held = ledger.store.begin("provider:prv_a").await.unwrap();
    let first = send_all(
        &groups,
        vec![vec![slice("a1", "prv_a"), slice("b1", "prv_b")]],
    );
    until_booking(&groups).await;
    // prv_b's next hour, sent after: the second booker must leave it (and, in queue order,
    // the batch of prv_d behind it) to the first.
    let later = send_all(
        &groups,
        vec![vec![slice_at("b2", "prv_b", 9), slice("c1", "prv_c")]],
    );
    until_waiting(&groups, 1).await;
    let last = send_all(&groups, vec![vec![slice("d1", "prv_d")]]);
    until_waiting(&groups, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (groups.bookers(), groups.waiting()),
        (1, 2),
        "no second booker took a batch of prv_b while prv_b's first batch was being booked"
    );
    drop(held);
    for task in first.into_iter().chain(later).chain(last) {
        let answered = outcomes(&task.await.unwrap());
        assert!(answered.iter().all(|o| o == "accepted"), "{answered:?}");
    }
    assert_eq!(
        stream_order(&ledger, "provider:prv_b").await,
        ["b1", "b2"],
        "prv_b's hours booked in the order they were sent"
    );
    assert_eq!(
        groups.stats(),
        GroupStats {
            groups_committed: 1,
            batches_grouped: 2,
            groups_failed: 0,
        },
        "the first batch alone, then the two that waited for its booker in one transaction"
    );
    let net = price(2_490_000, 3_600_000, 2000).2;
    assert_eq!(payable(&ledger, "prv_b").await, 2 * net);
    assert_verified(&ledger).await;
}

/// A batch of providers no booker is booking gets the second booker: on PostgreSQL it is
/// booked and answered while the first booker still waits for a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_of_other_providers_is_booked_beside_the_group_being_booked() {
    let db = TestDb::new().await;
    let ledger = marketplace(&db).await;
    let groups = UsageGroups::new(ledger.clone());
    let held = ledger.store.begin("provider:prv_a").await.unwrap();
    let first = send_all(&groups, vec![vec![slice("a1", "prv_a")]]);
    until_booking(&groups).await;
    let mut other = send_all(&groups, vec![vec![slice("d1", "prv_d")]]);
    if db.is_postgres() {
        let answered = tokio::time::timeout(Duration::from_secs(10), other.pop().unwrap())
            .await
            .expect("prv_d's batch answered while prv_a's stream is held")
            .unwrap();
        assert_eq!(outcomes(&answered), ["accepted"]);
    } else {
        // SQLite has one writer, which the test holds: the second booker waits for it.
        until_queue(&groups, 2, 0).await;
    }
    drop(held);
    for task in first.into_iter().chain(other) {
        assert_eq!(outcomes(&task.await.unwrap()), ["accepted"]);
    }
    let net = price(2_490_000, 3_600_000, 2000).2;
    assert_eq!(payable(&ledger, "prv_d").await, net);
    assert_verified(&ledger).await;
}

/// Backpressure (`ledger.usage_projection_lag_max_ms`): while the aggregates this process
/// booked have waited longer than the bound for the projector that follows the ledger, a
/// booker waits for the projector's next pass before it books, and a stalled projector
/// delays a booking by `usage_projection_wait_max_ms` at most; with no projector following
/// (a process that folds at its reads), nothing waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_booker_waits_for_the_projector_while_the_lag_exceeds_its_bound() {
    let db = TestDb::new().await;
    let (ledger, groups) = one_booker(&db, |c| {
        c.usage_projection_lag_max_ms = 100;
        c.usage_projection_wait_max_ms = 60_000;
    })
    .await;
    let lagging = Duration::from_millis(250);
    let book = |groups: &UsageGroups, input: UsageInput| {
        let groups = groups.clone();
        async move {
            let results = groups
                .ingest(vec![input], SenderScope::Metering, Actor::token("metering"))
                .await
                .unwrap();
            assert_eq!(outcomes(&results), ["accepted"]);
            std::time::Instant::now()
        }
    };

    // No projector follows: the lag passes the bound and the next batch is booked at once.
    book(&groups, slice_at("w1", "prv_a", 8)).await;
    tokio::time::sleep(lagging).await;
    assert!(ledger.store.projection_lag() > Duration::from_millis(100));
    let sent = std::time::Instant::now();
    let answered = book(&groups, slice_at("w2", "prv_b", 8)).await;
    assert!(
        answered - sent < Duration::from_secs(30),
        "waited for no projector"
    );

    // A projector follows, and its next pass comes 300 ms later: the booking waits for it.
    ledger.store.projector_follows();
    let store = ledger.store.clone();
    let pass = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let folded = store.fold_dirty().await.unwrap();
        (folded, std::time::Instant::now())
    });
    let answered = book(&groups, slice_at("w3", "prv_c", 8)).await;
    let (folded, passed) = pass.await.unwrap();
    assert_eq!(folded, 2, "the pass folded w1 and w2");
    assert!(
        answered >= passed,
        "w3 was booked before the projector's pass"
    );

    // The projector stalls: the booking waits its longest wait, then books.
    let mut stalled = ledger.clone();
    stalled.config.usage_projection_wait_max_ms = 400;
    let groups = UsageGroups::new(stalled);
    tokio::time::sleep(lagging).await;
    let sent = std::time::Instant::now();
    let answered = tokio::time::timeout(
        Duration::from_secs(30),
        book(&groups, slice_at("w4", "prv_d", 8)),
    )
    .await
    .expect("a stalled projector delays a booking, it does not stop it");
    assert!(answered - sent >= Duration::from_millis(400));
    let mut booked = booked_usage_ids(&ledger).await;
    booked.sort();
    assert_eq!(booked, ["w1", "w2", "w3", "w4"]);
    // An hour at the price book (2.49 USDC/h), the community fee (20 %).
    let net = price(2_490_000, 3_600_000, 2000).2;
    for p in ["prv_a", "prv_b", "prv_c", "prv_d"] {
        assert_eq!(payable(&ledger, p).await, net, "{p}");
    }
    assert_verified(&ledger).await;
}
