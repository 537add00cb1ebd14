//! What usage booking keeps in memory between batches (`store::usage::StreamViews`: each
//! provider's GPUs, their latest booked end, the tier and rate history) is decided on only
//! at the stream head it was read at, and never after `settle rebuild` rewrote the tables:
//! another process's bookings and rate changes, and a rebuild, are seen by the next batch;
//! and the views are kept and used at the same head, up to `store.usage_views_streams_max`;
//! the segments they read are folded up to the heads first, unless the tables hold them
//! already (a GPU new to a view begun on such a fold) or the view kept the segments booked
//! since the last fold (a late event, probed on the tables and those).
//! Both stores (PostgreSQL when `SETTLE_TEST_PG_URL` is set).

use crate::common::Tables;
use crate::common::TestDb;
use crate::ingest::{NOW, import_lines, outcomes, payable, price, provider, rate_line, usage};

use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::{Actor, Ledger};

const FEE_BPS: i64 = 2000;
const HOUR: i64 = 3_600_000;

async fn book(ledger: &Ledger, id: &str, provider: &str, started: &str, ended: &str) -> String {
    let gpu = format!("{provider}-g0");
    send(ledger, &[usage(id, provider, &gpu, started, ended, None)])
        .await
        .remove(0)
}

/// Sends `inputs` as one metering batch: the outcome of each (`outcomes`).
pub(crate) async fn send(ledger: &Ledger, inputs: &[UsageInput]) -> Vec<String> {
    let results = ledger
        .ingest_usage(inputs, &SenderScope::Metering, &Actor::operator("test"))
        .await
        .expect("ingest");
    outcomes(&results)
}

#[tokio::test]
async fn a_batch_sees_what_another_process_booked_on_its_streams_since_the_last_batch() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    let (b, _) = db.ledger_at(NOW).await;
    provider(&a, "prv_v", 1).await;
    // `a` books and keeps what it read of the stream.
    assert_eq!(
        book(
            &a,
            "v-1",
            "prv_v",
            "2026-11-22T08:00:00Z",
            "2026-11-22T09:00:00Z"
        )
        .await,
        "accepted"
    );
    // Another process books the next hour of the GPU and raises the rate from 10:00.
    assert_eq!(
        book(
            &b,
            "v-2",
            "prv_v",
            "2026-11-22T09:00:00Z",
            "2026-11-22T10:00:00Z"
        )
        .await,
        "accepted"
    );
    import_lines(
        &b,
        &[rate_line(
            "prv_v",
            "H100-80GB",
            "3.10",
            "2026-11-22T10:00:00Z",
        )],
    )
    .await;
    // `a` again: the half hour the other process booked is an overlap, and the next hour is
    // priced at the new rate.
    let gpu = "prv_v-g0";
    let results = send(
        &a,
        &[
            usage(
                "v-3",
                "prv_v",
                gpu,
                "2026-11-22T09:30:00Z",
                "2026-11-22T10:30:00Z",
                None,
            ),
            usage(
                "v-4",
                "prv_v",
                gpu,
                "2026-11-22T10:00:00Z",
                "2026-11-22T11:00:00Z",
                None,
            ),
        ],
    )
    .await;
    assert_eq!(results, ["rejected:overlapping_usage", "accepted"]);
    let expected = 2 * price(2_490_000, HOUR, FEE_BPS).2 + price(3_100_000, HOUR, FEE_BPS).2;
    assert_eq!(payable(&a, "prv_v").await, expected);
}

/// Booked segments of `provider`'s GPU on the tables (the projector folds them behind the
/// append).
async fn segments_on_tables(ledger: &Ledger, provider: &str) -> i64 {
    let row = sqlx::query("SELECT COUNT(*) FROM usage_segments WHERE provider_id = $1")
        .bind(provider)
        .fetch_one(ledger.store.pool())
        .await
        .expect("count segments");
    sqlx::Row::get::<i64, _>(&row, 0)
}

/// A usage event's segments are folded behind its append, like the aggregates: an event
/// overlapping usage the projector has not folded yet is still rejected, whether the batch
/// decides on a view it kept (only a late event is probed) or reads the stream's GPUs
/// afresh (another process).
#[tokio::test]
async fn an_overlap_with_usage_the_projector_has_not_folded_is_rejected() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    let (b, _) = db.ledger_at(NOW).await;
    for p in ["prv_kept", "prv_fresh"] {
        provider(&a, p, 1).await;
        assert_eq!(
            book(
                &a,
                &format!("{p}-1"),
                p,
                "2026-11-22T08:00:00Z",
                "2026-11-22T09:00:00Z"
            )
            .await,
            "accepted"
        );
        assert_eq!(segments_on_tables(&a, p).await, 0, "{p}: not folded yet");
    }
    // `a` kept its view of the stream: the late event is probed.
    assert_eq!(
        book(
            &a,
            "prv_kept-2",
            "prv_kept",
            "2026-11-22T08:30:00Z",
            "2026-11-22T08:45:00Z"
        )
        .await,
        "rejected:overlapping_usage"
    );
    // `b` has no view: it reads the GPU's latest booked end.
    assert_eq!(
        book(
            &b,
            "prv_fresh-2",
            "prv_fresh",
            "2026-11-22T08:15:00Z",
            "2026-11-22T08:20:00Z"
        )
        .await,
        "rejected:overlapping_usage"
    );
    // The next hour is free on both.
    for (ledger, p) in [(&a, "prv_kept"), (&b, "prv_fresh")] {
        assert_eq!(
            book(
                ledger,
                &format!("{p}-3"),
                p,
                "2026-11-22T09:00:00Z",
                "2026-11-22T10:00:00Z"
            )
            .await,
            "accepted"
        );
        assert_eq!(
            payable(ledger, p).await,
            2 * price(2_490_000, HOUR, FEE_BPS).2,
            "{p}: two hours"
        );
    }
}

/// A batch folds only the streams whose GPUs it reads (a provider's agent sends a provider
/// at a time, re-sending the last one's events: the stream it locked for them stays with the
/// projector instead of being folded inside the booking), and what it reads is exact.
#[tokio::test]
async fn a_batch_folds_only_the_streams_whose_gpus_it_reads() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    for p in ["prv_last", "prv_next"] {
        provider(&a, p, 1).await;
    }
    let (started, ended) = ("2026-11-22T08:00:00Z", "2026-11-22T09:00:00Z");
    let last = usage("last-1", "prv_last", "prv_last-g0", started, ended, None);
    assert_eq!(send(&a, std::slice::from_ref(&last)).await, ["accepted"]);
    // The next provider's first event with a re-send of the last one's: `a` kept its view
    // of prv_last, so only prv_next's GPU is read (and its stream folded first).
    let next = usage("next-1", "prv_next", "prv_next-g0", started, ended, None);
    assert_eq!(send(&a, &[last, next]).await, ["duplicate", "accepted"]);
    assert_eq!(
        segments_on_tables(&a, "prv_last").await,
        0,
        "prv_last was locked for its re-send only: left to the projector"
    );
    // The next provider's next batch overlaps its first event: rejected, the hour after
    // accepted, and each provider's payable is its one and two hours.
    let results = send(
        &a,
        &[
            usage(
                "next-2",
                "prv_next",
                "prv_next-g0",
                "2026-11-22T08:30:00Z",
                "2026-11-22T09:30:00Z",
                None,
            ),
            usage(
                "next-3",
                "prv_next",
                "prv_next-g0",
                "2026-11-22T09:00:00Z",
                "2026-11-22T10:00:00Z",
                None,
            ),
        ],
    )
    .await;
    assert_eq!(results, ["rejected:overlapping_usage", "accepted"]);
    let hour_net = price(2_490_000, HOUR, FEE_BPS).2;
    assert_eq!(payable(&a, "prv_last").await, hour_net);
    assert_eq!(payable(&a, "prv_next").await, 2 * hour_net);
}

/// A provider's agent sends its GPUs one after another: a batch that meets a GPU its kept
/// view of the provider does not know reads that GPU without folding the stream (the view
/// was begun on a fold up to its head, and every event booked on it since names a GPU it
/// knows), and the GPU's usage booked before the view still counts.
#[tokio::test]
async fn a_gpu_new_to_a_kept_view_is_read_without_folding_its_stream() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    let (b, _) = db.ledger_at(NOW).await;
    provider(&a, "prv_g", 3).await;
    let at = |id: &str, gpu: &str, started: &str, ended: &str| {
        usage(id, "prv_g", &format!("prv_g-{gpu}"), started, ended, None)
    };
    let (eight, nine, ten) = (
        "2026-11-22T08:00:00Z",
        "2026-11-22T09:00:00Z",
        "2026-11-22T10:00:00Z",
    );
    // Segments on the tables after each of `a`'s batches.
    let mut folded = Vec::new();
    // Another process books an hour of g1 and of g2 (left to its projector, not running).
    let before = [at("g-1", "g1", eight, nine), at("g-2", "g2", eight, nine)];
    assert_eq!(send(&b, &before).await, ["accepted", "accepted"]);
    // `a` begins its view of the stream on g0, folding the stream up to its head first,
    // and carries on with g0.
    assert_eq!(
        send(&a, &[at("g-3", "g0", eight, nine)]).await,
        ["accepted"]
    );
    folded.push(segments_on_tables(&a, "prv_g").await);
    assert_eq!(send(&a, &[at("g-4", "g0", nine, ten)]).await, ["accepted"]);
    folded.push(segments_on_tables(&a, "prv_g").await);
    // g1, new to the view, after its booked hour: read without folding the stream.
    assert_eq!(send(&a, &[at("g-5", "g1", nine, ten)]).await, ["accepted"]);
    folded.push(segments_on_tables(&a, "prv_g").await);
    // g2, new to the view, overlapping the hour `b` booked: its latest end is read, the
    // event is late and probed (its stream folded first), and rejected.
    let late = at("g-6", "g2", "2026-11-22T08:30:00Z", "2026-11-22T09:30:00Z");
    assert_eq!(send(&a, &[late]).await, ["rejected:overlapping_usage"]);
    let hour_net = price(2_490_000, HOUR, FEE_BPS).2;
    assert_eq!(payable(&a, "prv_g").await, 5 * hour_net);
    assert_eq!(
        folded,
        [2, 2, 2],
        "the view began on a fold; g0's hours left to the projector, g1 read without a fold"
    );
}

/// A late event (one starting before its GPU's latest booked end) is checked against the
/// segments its process booked since the stream was last folded, kept with the view
/// (`StreamView::unfolded`), and the segments on the tables, without folding the stream
/// inside the booking. Every answer, message included, is the one a process that folds
/// first gives (`store.usage_views_segments_max = 0`): in the gaps between hours, against
/// either segment of an event across midnight, after the GPU's latest end, and across an
/// hour another process booked (on the tables since the view began) and one booked since.
#[tokio::test]
async fn a_late_event_is_checked_against_the_segments_booked_since_the_last_fold() {
    let db = TestDb::new().await;
    let (kept, _) = db.ledger_at(NOW).await;
    let folds = settle::store::StoreOptions {
        usage_views_segments_max: 0,
        ..Default::default()
    };
    let (folding, _) = db.ledger_with(&folds, NOW).await;
    let mut answers = Vec::new();
    for (ledger, other, p) in [(&kept, &folding, "prv_mem"), (&folding, &kept, "prv_fold")] {
        provider(ledger, p, 1).await;
        let gpu = format!("{p}-g0");
        let at = |n: u32, started: &str, ended: &str| {
            usage(&format!("{p}-{n}"), p, &gpu, started, ended, None)
        };
        let before = at(0, "2026-11-21T06:00:00Z", "2026-11-21T07:00:00Z");
        assert_eq!(send(other, &[before]).await, ["accepted"]);
        let first = [
            at(1, "2026-11-21T08:00:00Z", "2026-11-21T09:00:00Z"),
            at(2, "2026-11-21T10:00:00Z", "2026-11-21T11:00:00Z"),
            at(3, "2026-11-21T23:00:00Z", "2026-11-22T01:00:00Z"),
        ];
        assert_eq!(send(ledger, &first).await, ["accepted"; 3]);
        // Each before the GPU's latest booked end (01:00 on the 22nd).
        let late = [
            at(4, "2026-11-21T09:30:00Z", "2026-11-21T10:30:00Z"),
            at(5, "2026-11-21T09:00:00Z", "2026-11-21T10:00:00Z"),
            at(6, "2026-11-21T08:30:00Z", "2026-11-21T08:45:00Z"),
            at(7, "2026-11-22T00:30:00Z", "2026-11-22T00:45:00Z"),
            at(8, "2026-11-21T23:30:00Z", "2026-11-21T23:45:00Z"),
            at(9, "2026-11-21T11:00:00Z", "2026-11-21T12:00:00Z"),
            at(10, "2026-11-21T06:30:00Z", "2026-11-21T08:30:00Z"),
        ];
        let results = ledger
            .ingest_usage(&late, &SenderScope::Metering, &Actor::operator("test"))
            .await
            .expect("ingest");
        let said: Vec<String> = results
            .iter()
            .map(|r| match r {
                UsageResult::Rejected { code, message, .. } => format!("{code}: {message}"),
                other => other.status().to_owned(),
            })
            .map(|answer| answer.replace(p, "P"))
            .collect();
        answers.push(said);
    }
    let overlap = |from: &str, to: &str| {
        format!("overlapping_usage: GPU P-g0 already has usage booked in [{from}, {to})")
    };
    assert_eq!(
        answers[0],
        [
            overlap("2026-11-21T10:00:00.000Z", "2026-11-21T11:00:00.000Z"),
            "accepted".to_owned(),
            overlap("2026-11-21T08:00:00.000Z", "2026-11-21T09:00:00.000Z"),
            overlap("2026-11-22T00:00:00.000Z", "2026-11-22T01:00:00.000Z"),
            overlap("2026-11-21T23:00:00.000Z", "2026-11-22T00:00:00.000Z"),
            "accepted".to_owned(),
            overlap("2026-11-21T08:00:00.000Z", "2026-11-21T09:00:00.000Z"),
        ]
    );
    assert_eq!(answers[0], answers[1], "as a process that folds first");
    assert_eq!(
        segments_on_tables(&kept, "prv_mem").await,
        1,
        "only the other process's hour, folded when the view began"
    );
    assert_eq!(
        segments_on_tables(&folding, "prv_fold").await,
        5,
        "folded for the probe"
    );
    let hour_net = price(2_490_000, HOUR, FEE_BPS).2;
    for (ledger, p) in [(&kept, "prv_mem"), (&folding, "prv_fold")] {
        assert_eq!(payable(ledger, p).await, 7 * hour_net, "{p}: seven hours");
    }
}

#[tokio::test]
async fn nothing_read_before_a_rebuild_prices_usage_after_it() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    provider(&a, "prv_r", 1).await;
    // The rate table says what no event said (as after a faulty release) ...
    sqlx::query("UPDATE rates SET rate_usdc_per_hour = '9.99' WHERE provider_id = 'prv_r'")
        .execute(a.store.pool())
        .await
        .unwrap();
    // ... and a batch priced by it keeps what it read.
    assert_eq!(
        book(
            &a,
            "r-1",
            "prv_r",
            "2026-11-22T08:00:00Z",
            "2026-11-22T09:00:00Z"
        )
        .await,
        "accepted"
    );
    let before = payable(&a, "prv_r").await;
    assert_eq!(before, price(9_990_000, HOUR, FEE_BPS).2);
    // Another process rebuilds the tables from the events: the rate is 2.49 again.
    let b = db.owner_store().await;
    let report = settle::verify::rebuild(&b, 1_000, &|_| {})
        .await
        .expect("rebuild");
    assert!(report.ok(), "{:?}", report.problems);
    books_an_hour_at_the_price_book(
        &a,
        "r-2",
        "prv_r",
        ("2026-11-22T09:00:00Z", "2026-11-22T10:00:00Z"),
        before,
    )
    .await;
}

/// Books the hour `(started, ended)` on `provider`'s GPU as event `id` and checks that it was
/// accepted and priced at the price book's 2.49 USDC/h: payable rose from `before` by its net.
async fn books_an_hour_at_the_price_book(
    ledger: &Ledger,
    id: &str,
    provider: &str,
    (started, ended): (&str, &str),
    before: i64,
) {
    assert_eq!(book(ledger, id, provider, started, ended).await, "accepted");
    assert_eq!(
        payable(ledger, provider).await - before,
        price(2_490_000, HOUR, FEE_BPS).2
    );
}

/// Sets every rate row of `provider` to 9.99 USDC/h in the table only, behind the engine (no
/// event, so the stream's head stays): a batch that reads the table prices at 9.99, one
/// that decides on a view kept from before prices at the booked 2.49.
async fn alter_rates(ledger: &Ledger, provider: &str) {
    sqlx::query("UPDATE rates SET rate_usdc_per_hour = '9.99' WHERE provider_id = $1")
        .bind(provider)
        .execute(ledger.store.pool())
        .await
        .unwrap();
}

/// The hour `n` of 2026-11-22 as `(started, ended)`.
fn hour(n: u32) -> (String, String) {
    (
        format!("2026-11-22T{n:02}:00:00Z"),
        format!("2026-11-22T{:02}:00:00Z", n + 1),
    )
}

/// What one more booked hour of `provider` added to its payable balance.
async fn next_hour_net(ledger: &Ledger, provider: &str, id: &str, n: u32) -> i64 {
    let before = payable(ledger, provider).await;
    let (started, ended) = hour(n);
    assert_eq!(
        book(ledger, id, provider, &started, &ended).await,
        "accepted"
    );
    payable(ledger, provider).await - before
}

/// A process keeps what a batch read of a provider's stream and decides the next batch on
/// it while the head is the same, reading it again only past `store.usage_views_streams_max`
/// streams (where every view kept is dropped). The rate table is altered behind the engine,
/// so the price of each booking shows whether it was decided on a kept view (2.49) or on a
/// fresh read (9.99).
#[tokio::test]
async fn a_batch_decides_on_the_views_kept_and_past_the_limit_reads_them_again() {
    let db = TestDb::new().await;
    let options = settle::store::StoreOptions {
        usage_views_streams_max: 2,
        ..Default::default()
    };
    let (a, _) = db.ledger_with(&options, NOW).await;
    for p in ["prv_k1", "prv_k2", "prv_k3"] {
        provider(&a, p, 1).await;
    }
    let kept = price(2_490_000, HOUR, FEE_BPS).2;
    let fresh = price(9_990_000, HOUR, FEE_BPS).2;
    // Two views kept: the limit.
    assert_eq!(next_hour_net(&a, "prv_k1", "k1-1", 8).await, kept);
    assert_eq!(next_hour_net(&a, "prv_k2", "k2-1", 8).await, kept);
    for p in ["prv_k1", "prv_k2", "prv_k3"] {
        alter_rates(&a, p).await;
    }
    // At the same head, the kept view decides: the rate the events set.
    assert_eq!(next_hour_net(&a, "prv_k1", "k1-2", 9).await, kept);
    // A third stream is past the limit: the kept views are dropped and it is read.
    assert_eq!(next_hour_net(&a, "prv_k3", "k3-1", 8).await, fresh);
    // So prv_k2's view is read again too.
    assert_eq!(next_hour_net(&a, "prv_k2", "k2-2", 9).await, fresh);
}

/// A batch begun on the heads a process kept (`Store::begin_usage`: no lock, no read of the
/// heads) is checked at commit even where it appends nothing: a rejection decided on a view
/// another process made stale is decided again on the stream as it is. Here the other
/// process raised the price book, so the event's own rate, out of the band around the old
/// price, is inside the band around the new one.
#[tokio::test]
async fn a_rejection_decided_on_a_stale_kept_view_is_decided_again() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    let (b, _) = db.ledger_at(NOW).await;
    provider(&a, "prv_s", 1).await;
    assert_eq!(
        book(
            &a,
            "s-1",
            "prv_s",
            "2026-11-22T08:00:00Z",
            "2026-11-22T09:00:00Z"
        )
        .await,
        "accepted"
    );
    let before = payable(&a, "prv_s").await;
    import_lines(
        &b,
        &[rate_line(
            "prv_s",
            "H100-80GB",
            "6.00",
            "2026-11-22T10:00:00Z",
        )],
    )
    .await;
    let results = send(
        &a,
        &[usage(
            "s-2",
            "prv_s",
            "prv_s-g0",
            "2026-11-22T10:00:00Z",
            "2026-11-22T11:00:00Z",
            Some("6.00"),
        )],
    )
    .await;
    assert_eq!(results, ["accepted"]);
    assert_eq!(
        payable(&a, "prv_s").await - before,
        price(6_000_000, HOUR, FEE_BPS).2
    );
}

/// A stream whose answers in a batch were all decided by its booked keys (re-sends: a
/// `duplicate`, or a `conflict` for changed content) relies on nothing of its head: the
/// batch commits without checking the head it kept, even when another process moved the
/// stream, and answers from the keys as they are (including one the other process booked).
/// The view it keeps at that stale head is not trusted by the next batch: its append at the
/// stale head is refused and retried, and books once.
#[tokio::test]
async fn re_sends_on_a_stream_another_process_moved_are_answered_from_its_keys() {
    let db = TestDb::new().await;
    let (a, _) = db.ledger_at(NOW).await;
    let (b, _) = db.ledger_at(NOW).await;
    provider(&a, "prv_k", 1).await;
    let (first, second) = (
        ("2026-11-22T08:00:00Z", "2026-11-22T09:00:00Z"),
        ("2026-11-22T09:00:00Z", "2026-11-22T10:00:00Z"),
    );
    assert_eq!(book(&a, "k-1", "prv_k", first.0, first.1).await, "accepted");
    assert_eq!(
        book(&b, "k-2", "prv_k", second.0, second.1).await,
        "accepted"
    );
    let before = payable(&a, "prv_k").await;
    let gpu = "prv_k-g0";
    let results = send(
        &a,
        &[
            usage("k-1", "prv_k", gpu, first.0, first.1, None),
            usage("k-2", "prv_k", gpu, second.0, second.1, None),
            usage("k-2", "prv_k", gpu, second.0, "2026-11-22T09:30:00Z", None),
        ],
    )
    .await;
    assert_eq!(results, ["duplicate", "duplicate", "rejected:conflict"]);
    assert_eq!(payable(&a, "prv_k").await, before);
    // The next hour, from `a`, whose kept head is the one before `b`'s booking.
    let third = ("2026-11-22T10:00:00Z", "2026-11-22T11:00:00Z");
    books_an_hour_at_the_price_book(&a, "k-3", "prv_k", third, before).await;
    assert_eq!(
        book(&a, "k-4", "prv_k", second.0, "2026-11-22T09:30:00Z").await,
        "rejected:overlapping_usage",
        "b's booking is known to a's next batch"
    );
}
