//! The payout lifecycle after a run (SPEC §3 postings) on both stores: submit, settle,
//! fail, return; idempotency per payout and step; wrong states; the effect on later runs.

use crate::common::Tables;
use crate::runs_support;

use runs_support::*;
use settle::ledger::Applied;

/// A world with three weekly providers paid 40 USDC each by the run of 2026-11-23:
/// `s` on Solana, `e` on SEPA (with a fresh FX rate), `u` on ACH. Returns their payout ids.
async fn paid_world() -> (World, String, String, String) {
    let w = World::new("2026-11-16T00:00:00Z").await;
    w.provider("s", "weekly", Some(SOLANA)).await;
    w.provider("e", "weekly", Some(SEPA)).await;
    w.provider("u", "weekly", Some(ACH)).await;
    w.at("2026-11-18T00:00:00Z");
    for p in ["s", "e", "u"] {
        w.earn(p, 50_000_000, "2026-11-17T01:00:00Z").await;
    }
    w.at("2026-11-22T12:00:00Z");
    w.fx("0.9").await;
    w.at("2026-11-23T00:05:00Z");
    let run = w.weekly("2026-11-23").await;
    let id = |p: &str| candidate(&run, p).payout_id.clone().unwrap();
    let (s, e, u) = (id("s"), id("e"), id("u"));
    (w, s, e, u)
}

#[tokio::test]
async fn submitted_then_settled_moves_the_money_to_the_treasury() {
    let (w, s, e, u) = paid_world().await;
    let a = w.actor();
    assert_eq!(
        w.ledger
            .submit_payout(&s, "5sigSolana", None, &a)
            .await
            .unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        w.ledger
            .submit_payout(&s, "5sigSolana", None, &a)
            .await
            .unwrap(),
        Applied::Duplicate
    );
    assert_eq!(
        w.ledger
            .submit_payout(&s, "otherSig", None, &a)
            .await
            .unwrap_err()
            .code(),
        "conflict"
    );
    let p = w.payout(&s).await;
    assert_eq!(
        (p.status.as_str(), p.reference.as_deref()),
        ("submitted", Some("5sigSolana"))
    );
    assert_eq!(
        w.ledger.settle_payout(&s, "5sigSolana", &a).await.unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        w.ledger.settle_payout(&s, "5sigSolana", &a).await.unwrap(),
        Applied::Duplicate
    );
    assert_eq!(w.payout(&s).await.status.as_str(), "settled");
    assert_eq!(w.balances("s").await, (0, 0, 0, 40 * USDC));

    let e2e = e.clone();
    assert_eq!(
        w.ledger
            .submit_payout(&e, "batch-1", Some(&e2e), &a)
            .await
            .unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        w.payout(&e).await.end_to_end_id.as_deref(),
        Some(e.as_str())
    );
    w.ledger.settle_payout(&e, "batch-1", &a).await.unwrap();
    // A rail may settle without a separate submit (created → settled).
    w.ledger.settle_payout(&u, "nacha-1", &a).await.unwrap();
    let treasury = |account: &str| {
        let store = w.ledger.store.clone();
        let pool = w.ledger.store.pool().clone();
        let account = account.to_owned();
        async move {
            store.catch_up_all().await.unwrap();
            let v: i64 = sqlx::query_scalar("SELECT CAST(COALESCE(SUM(balance_micro_usdc), 0) AS BIGINT) FROM account_balances WHERE account = $1")
                .bind(account)
                .fetch_one(&pool)
                .await
                .unwrap();
            v
        }
    };
    assert_eq!(treasury("platform:treasury:usdc").await, 40 * USDC);
    assert_eq!(treasury("platform:treasury:bank").await, 80 * USDC);
    w.check_invariants().await;
}

#[tokio::test]
async fn a_failed_payout_returns_the_funds_and_the_next_run_pays_them_again() {
    let (w, s, _, _) = paid_world().await;
    let a = w.actor();
    w.ledger.submit_payout(&s, "sig-1", None, &a).await.unwrap();
    assert_eq!(
        w.ledger
            .fail_payout(&s, "InstructionError: insufficient funds", &a)
            .await
            .unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        w.ledger
            .fail_payout(&s, "InstructionError: insufficient funds", &a)
            .await
            .unwrap(),
        Applied::Duplicate
    );
    let p = w.payout(&s).await;
    assert_eq!(
        (p.status.as_str(), p.failure_reason.as_deref()),
        ("failed", Some("InstructionError: insufficient funds"))
    );
    assert_eq!(w.balances("s").await, (40 * USDC, 0, 0, 0));
    assert_eq!(
        w.ledger
            .settle_payout(&s, "sig-1", &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    w.check_invariants().await;
    w.at("2026-11-30T00:05:00Z");
    let next = w.weekly("2026-11-30").await;
    let c = candidate(&next, "s");
    assert_eq!(
        (
            c.decision.as_str(),
            c.available_micro_usdc,
            c.amount_micro_usdc
        ),
        ("paid", 40 * USDC, 40 * USDC)
    );
    assert_ne!(c.payout_id.as_deref(), Some(s.as_str()));
}

#[tokio::test]
async fn a_returned_payout_returns_the_funds_and_blocks_the_bank_details_until_updated() {
    let (w, _, e, _) = paid_world().await;
    let a = w.actor();
    assert_eq!(
        w.ledger
            .return_payout(&e, "AC04", "account closed", true, &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    w.ledger
        .submit_payout(&e, "batch-1", Some(&e), &a)
        .await
        .unwrap();
    w.ledger.settle_payout(&e, "batch-1", &a).await.unwrap();
    assert_eq!(
        w.ledger
            .return_payout(&e, "AC04", "account closed", true, &a)
            .await
            .unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        w.ledger
            .return_payout(&e, "AC04", "account closed", true, &a)
            .await
            .unwrap(),
        Applied::Duplicate
    );
    assert_eq!(
        w.ledger
            .return_payout(&e, "AC01", "wrong", true, &a)
            .await
            .unwrap_err()
            .code(),
        "conflict"
    );
    let p = w.payout(&e).await;
    assert_eq!(
        (p.status.as_str(), p.failure_reason.as_deref()),
        ("returned", Some("AC04: account closed"))
    );
    assert_eq!(w.balances("e").await, (40 * USDC, 0, 0, 0));
    assert_eq!(
        w.ledger
            .fail_payout(&e, "late", &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    w.check_invariants().await;

    w.at("2026-11-29T12:00:00Z");
    w.fx("0.9").await;
    w.at("2026-11-30T00:05:00Z");
    let next = w.weekly("2026-11-30").await;
    assert_eq!(
        decision(&next, "e"),
        "no_method",
        "bank details marked invalid by the return"
    );
    w.at("2026-12-01T00:00:00Z");
    w.update("e", r#""payout_method":{"kind":"sepa","iban":"FR1420041010050500013M02606","holder":"Bee SARL"}"#).await;
    w.at("2026-12-05T12:00:00Z");
    w.fx("0.9").await;
    w.at("2026-12-07T00:05:00Z");
    let later = w.weekly("2026-12-07").await;
    let c = candidate(&later, "e");
    assert_eq!(
        (c.decision.as_str(), c.amount_micro_usdc),
        ("paid", 40 * USDC),
        "paid again to the new account"
    );
}

#[tokio::test]
async fn wrong_states_unknown_payouts_and_bad_input_are_rejected_with_stable_codes() {
    let (w, s, _, _) = paid_world().await;
    let a = w.actor();
    assert_eq!(
        w.ledger
            .release_payout(&s, &Default::default(), &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    assert_eq!(
        w.ledger
            .cancel_payout(&s, "no", &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    assert_eq!(
        w.ledger
            .return_payout(&s, "R01", "nsf", false, &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    for code in [
        w.ledger
            .settle_payout("po_missing", "x", &a)
            .await
            .unwrap_err()
            .code(),
        w.ledger
            .submit_payout("po_missing", "x", None, &a)
            .await
            .unwrap_err()
            .code(),
        w.ledger
            .fail_payout("po_missing", "x", &a)
            .await
            .unwrap_err()
            .code(),
        w.ledger
            .cancel_payout("po_missing", "x", &a)
            .await
            .unwrap_err()
            .code(),
    ] {
        assert_eq!(code, "unknown_payout");
    }
    assert_eq!(
        w.ledger
            .cancel_payout(&s, "  ", &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_text"
    );
    assert_eq!(
        w.ledger
            .submit_payout(
                &s,
                "batch",
                Some("E2E-ID-THAT-IS-FAR-TOO-LONG-FOR-SEPA-1234"),
                &a
            )
            .await
            .unwrap_err()
            .code(),
        "invalid_text"
    );
    w.ledger.settle_payout(&s, "sig", &a).await.unwrap();
    assert_eq!(
        w.ledger
            .submit_payout(&s, "sig", None, &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    assert_eq!(
        w.ledger
            .fail_payout(&s, "too late", &a)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    w.check_invariants().await;
}

/// Payouts a caller read before (a bank answer's matcher) are settled without reading them
/// again before the locks: under the providers their records name, and a record that names
/// the wrong provider refuses the whole batch before anything is booked.
#[tokio::test]
async fn payouts_read_before_settle_only_under_the_providers_they_name() {
    let (w, _, e, u) = paid_world().await;
    let a = w.actor();
    let (pe, pu) = (w.payout(&e).await, w.payout(&u).await);
    let mut forged = pu.clone();
    forged.provider_id.clone_from(&pe.provider_id);
    let refused = w
        .ledger
        .settle_payouts_read(&[&pe, &forged], "batch-9", &a)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "invalid_batch");
    assert_eq!(w.payout(&e).await.status, pe.status, "nothing booked");
    assert_eq!(w.payout(&u).await.status, pu.status, "nothing booked");

    let answers = w
        .ledger
        .settle_payouts_read(&[&pe, &pu], "batch-9", &a)
        .await
        .unwrap();
    assert!(
        answers.iter().all(|r| matches!(r, Ok(Applied::Accepted))),
        "{answers:?}"
    );
    assert_eq!(w.payout(&u).await.reference.as_deref(), Some("batch-9"));
    assert_eq!(w.balances("u").await, (0, 0, 0, 40 * USDC));
    w.check_invariants().await;
}

/// Lifecycle commands booked together (a Solana transaction's payouts, a bank batch's):
/// each payout gets its own answer and its own event on its own stream; a refused one
/// leaves the others booked; a re-send answers `duplicate` per payout.
#[tokio::test]
async fn payouts_settled_together_get_one_answer_and_one_event_each() {
    let (w, s, e, u) = paid_world().await;
    let a = w.actor();
    w.ledger.fail_payout(&s, "chain said no", &a).await.unwrap();
    w.ledger.settle_payout(&e, "sig-e", &a).await.unwrap();
    let codes = |answers: Vec<Result<Applied, settle::ledger::LedgerError>>| {
        answers
            .into_iter()
            .map(|r| match r {
                Ok(applied) => applied.as_str().to_owned(),
                Err(e) => e.code().to_owned(),
            })
            .collect::<Vec<_>>()
    };
    let batch = [s.as_str(), e.as_str(), "po_missing", u.as_str()];
    let answers = w
        .ledger
        .settle_payouts(&batch, "batch-7", &a)
        .await
        .unwrap();
    assert_eq!(
        codes(answers),
        [
            "invalid_payout_state",
            "conflict",
            "unknown_payout",
            "accepted"
        ],
        "s failed; e was settled under another reference"
    );
    let p = w.payout(&u).await;
    assert_eq!(
        (p.status.as_str(), p.reference.as_deref()),
        ("settled", Some("batch-7"))
    );
    assert_eq!(w.balances("u").await, (0, 0, 0, 40 * USDC));
    assert_eq!(w.payout(&s).await.status.as_str(), "failed");
    assert_eq!(w.payout(&e).await.reference.as_deref(), Some("sig-e"));
    let again = w
        .ledger
        .settle_payouts(&batch, "batch-7", &a)
        .await
        .unwrap();
    assert_eq!(
        codes(again),
        [
            "invalid_payout_state",
            "conflict",
            "unknown_payout",
            "duplicate"
        ]
    );
    let twice = w
        .ledger
        .fail_payouts(&[u.as_str(), u.as_str()], "twice", &a)
        .await
        .unwrap_err();
    assert_eq!(twice.code(), "invalid_batch");
    assert_eq!(w.payout(&u).await.status.as_str(), "settled");
    w.check_invariants().await;
}

/// The `payouts` rows are the typed records: a payout moved through several commands, each
/// its own transaction, holds what the records' own fold gives, which `verify` folds again
/// from the events and compares with the row; a row changed behind the engine is named.
#[tokio::test]
async fn verify_finds_a_payout_row_the_typed_fold_disagrees_with() {
    let (w, s, _, u) = paid_world().await;
    let a = w.actor();
    w.ledger
        .submit_payout(&s, "5sigSolana", None, &a)
        .await
        .unwrap();
    w.ledger
        .settle_payouts(&[&s], "5sigSolana", &a)
        .await
        .unwrap();
    w.ledger
        .fail_payouts(&[&u], "bank closed the account", &a)
        .await
        .unwrap();
    let settled = w.payout(&s).await;
    assert_eq!(
        (settled.status.as_str(), settled.reference.as_deref()),
        ("settled", Some("5sigSolana"))
    );
    let failed = w.payout(&u).await;
    assert_eq!(
        (failed.status.as_str(), failed.failure_reason.as_deref()),
        ("failed", Some("bank closed the account"))
    );
    let report = settle::verify::verify(&w.ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);

    sqlx::query("UPDATE payouts SET reference = 'forged' WHERE payout_id = $1")
        .bind(&s)
        .execute(w.ledger.store.pool())
        .await
        .unwrap();
    let report = settle::verify::verify(&w.ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == "projection_mismatch" && p.detail.starts_with("payouts: 1 rows")),
        "{:?}",
        report.problems
    );
}
