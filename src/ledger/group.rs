//! Group commit of usage batches: batches that arrive while others are being booked wait in
//! one queue, and the next free booker books everything waiting (up to
//! `ledger.usage_group_events_max` events) in one transaction over all their providers'
//! streams, then answers each batch with its own results.
//!
//! Nothing waits for a group to fill: a batch arriving at an idle server is booked at once,
//! alone. Under load, a transaction's fixed costs (the stream locks and heads, one statement
//! per read and per table, the commit's flush) are paid once per group instead of once per
//! batch. Each batch is still answered only after the transaction that booked its events has
//! committed (acknowledged means durable), and each event is decided exactly as if its batch
//! had been booked alone after the batches before it in the queue: a key sent twice in one
//! group is booked once (the first in queue order), the second answered `duplicate` or
//! `conflict`.
//!
//! Bookers run side by side (`ledger.usage_group_bookers_max`) only on disjoint providers: a
//! booker takes a group only while none of its providers is in a group another booker is
//! booking. Otherwise the second booker would wait for the first one's stream locks and then
//! find the streams moved under the heads it keeps, and the batch is better booked in the
//! first booker's next group. Batches of one provider are so booked in queue order.
//!
//! A group whose transaction fails is booked again batch by batch, so one batch's failure
//! (e.g. a provider whose projections are corrupt) answers that batch with the error and
//! books the others. A batch whose request went away before its group committed (client
//! gone, `http.request_timeout_ms`) books nothing: it is left out of the group, and a
//! transaction already begun is rolled back and begun again without it. The bookers are
//! spawned tasks, so no request's end cancels another's booking. The queue is bounded by
//! the HTTP gate (`http.concurrency_max` requests run at once).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::ingest::{SenderScope, UsageInput, UsageRequest, UsageResult};
use super::{Actor, Ledger, LedgerError};

/// The queue of usage batches waiting for a booker (see the module documentation).
#[derive(Clone)]
pub struct UsageGroups {
    inner: Arc<Inner>,
}

struct Inner {
    ledger: Ledger,
    queue: Mutex<Queue>,
    /// Transactions that booked two or more batches together and committed.
    groups_committed: AtomicU64,
    /// Batches booked in those transactions.
    batches_grouped: AtomicU64,
    /// Groups whose transaction failed (their batches were then booked one by one).
    groups_failed: AtomicU64,
}

/// What a [`UsageGroups`] has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Transactions that booked two or more batches together and committed.
    pub groups_committed: u64,
    /// Batches booked in those transactions.
    pub batches_grouped: u64,
    /// Groups whose transaction failed; their batches were booked again one by one.
    pub groups_failed: u64,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    /// Bookers running now (at most `ledger.usage_group_bookers_max`).
    bookers: usize,
    /// The providers of the groups being booked now.
    busy: HashSet<String>,
}

/// A batch in the queue and where its answer goes.
struct Waiting {
    inputs: Vec<UsageInput>,
    scope: SenderScope,
    actor: Actor,
    reply: oneshot::Sender<Result<Vec<UsageResult>, LedgerError>>,
}

impl Queue {
    /// Frees the providers of a group (`held`, emptied) for any booker.
    fn release(&mut self, held: &mut HashSet<String>) {
        for p in held.drain() {
            self.busy.remove(&p);
        }
    }
}

impl Waiting {
    /// The providers whose streams booking this batch locks.
    fn providers(&self) -> impl Iterator<Item = &str> {
        self.inputs.iter().filter_map(|i| i.provider_id.as_deref())
    }
}

impl UsageGroups {
    pub fn new(ledger: Ledger) -> UsageGroups {
        UsageGroups {
            inner: Arc::new(Inner {
                ledger,
                queue: Mutex::new(Queue::default()),
                groups_committed: AtomicU64::new(0),
                batches_grouped: AtomicU64::new(0),
                groups_failed: AtomicU64::new(0),
            }),
        }
    }

    /// Batches waiting for a booker now.
    pub fn waiting(&self) -> usize {
        self.inner.lock().waiting.len()
    }

    /// Bookers running now.
    pub fn bookers(&self) -> usize {
        self.inner.lock().bookers
    }

    pub fn stats(&self) -> GroupStats {
        GroupStats {
            groups_committed: self.inner.groups_committed.load(Ordering::Relaxed),
            batches_grouped: self.inner.batches_grouped.load(Ordering::Relaxed),
            groups_failed: self.inner.groups_failed.load(Ordering::Relaxed),
        }
    }

    /// Books a batch with the batches waiting beside it; one result per input, in input
    /// order, as [`Ledger::ingest_usage`] answers.
    pub async fn ingest(
        &self,
        inputs: Vec<UsageInput>,
        scope: SenderScope,
        actor: Actor,
    ) -> Result<Vec<UsageResult>, LedgerError> {
        let (reply, answer) = oneshot::channel();
        let start_booker = {
            let mut queue = self.inner.lock();
            queue.waiting.push_back(Waiting {
                inputs,
                scope,
                actor,
                reply,
            });
            let start = queue.bookers < self.inner.ledger.config.usage_group_bookers_max.max(1);
            if start {
                queue.bookers += 1;
            }
            start
        };
        if start_booker {
            tokio::spawn(book_while_waiting(self.inner.clone()));
        }
        answer.await.unwrap_or_else(|_| {
            Err(LedgerError::Store(crate::store::StoreError::Unavailable(
                "the usage booker stopped before answering".into(),
            )))
        })
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A booker never panics while holding the lock (it only moves batches), so a
        // poisoned lock still holds a consistent queue.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Frees the providers of a booker's group once its transaction is over.
    fn release(&self, held: &mut HashSet<String>) {
        self.lock().release(held);
    }

    /// Takes the next group: the oldest batch, then the following ones while the group stays
    /// within `usage_group_events_max` events and `ingest_streams_per_tx_max` providers (so
    /// a group is one transaction: it commits or fails whole, and an abandoned batch is
    /// never half booked), none of them with a provider another booker is booking. The new
    /// group's providers are put in `held` (empty: its last group's were released). `None`
    /// (and this booker leaves) when nothing waits, or when the oldest batch has a provider
    /// in another booker's group: that booker takes it next.
    fn next_group(&self, held: &mut HashSet<String>) -> Option<Vec<Waiting>> {
        let events_max = self.ledger.config.usage_group_events_max;
        let providers_max = self.ledger.config.ingest_streams_per_tx_max.max(1);
        let mut queue = self.lock();
        let queue = &mut *queue;
        let free = |w: &Waiting, busy: &HashSet<String>| w.providers().all(|p| !busy.contains(p));
        let first_free = queue.waiting.front().is_some_and(|w| free(w, &queue.busy));
        let Some(first) = first_free.then(|| queue.waiting.pop_front()).flatten() else {
            queue.bookers -= 1;
            return None;
        };
        held.extend(first.providers().map(str::to_owned));
        let mut events = first.inputs.len();
        let mut group = vec![first];
        while let Some(next) = queue.waiting.front() {
            let new: HashSet<&str> = next.providers().filter(|p| !held.contains(*p)).collect();
            if events + next.inputs.len() > events_max
                || held.len() + new.len() > providers_max
                || !free(next, &queue.busy)
            {
                break;
            }
            events += next.inputs.len();
            held.extend(new.into_iter().map(str::to_owned));
            group.extend(queue.waiting.pop_front());
        }
        queue.busy.extend(held.iter().cloned());
        Some(group)
    }
}

/// A booker: books groups until the queue is empty.
async fn book_while_waiting(inner: Arc<Inner>) {
    // If booking panics, the batches of the group get "stopped before answering" (their
    // reply senders drop), the count of bookers must still go down and the group's
    // providers be free again.
    struct Leave(Arc<Inner>, bool, HashSet<String>);
    impl Drop for Leave {
        fn drop(&mut self) {
            if self.1 {
                let mut queue = self.0.lock();
                queue.release(&mut self.2);
                queue.bookers -= 1;
                let orphans: Vec<Waiting> = if queue.bookers == 0 {
                    queue.waiting.drain(..).collect()
                } else {
                    Vec::new()
                };
                drop(queue);
                // With no booker left nothing would answer them: they get the error.
                for w in orphans {
                    let _ = w.reply.send(Err(LedgerError::Store(
                        crate::store::StoreError::Unavailable("the usage booker failed".into()),
                    )));
                }
            }
        }
    }
    let mut leave = Leave(inner.clone(), true, HashSet::new());
    let config = &inner.ledger.config;
    let lag_max = Duration::from_millis(config.usage_projection_lag_max_ms);
    let wait_max = Duration::from_millis(config.usage_projection_wait_max_ms);
    loop {
        // Batches arriving meanwhile join the group taken after the wait.
        let waited = inner
            .ledger
            .store
            .wait_for_projector(lag_max, wait_max)
            .await;
        if !waited.is_zero() {
            crate::metrics::record_projection_wait(waited);
        }
        let Some(group) = inner.next_group(&mut leave.2) else {
            break;
        };
        book_group(&inner, group).await;
        // Its transaction is over: its providers' next batches may go to either booker.
        inner.release(&mut leave.2);
    }
    leave.1 = false;
}

/// Books one group and answers each of its batches.
async fn book_group(inner: &Inner, mut group: Vec<Waiting>) {
    if group.len() > 1 {
        match book_unless_abandoned(&inner.ledger, &mut group).await {
            None => return,
            Some(Ok(results)) => {
                crate::metrics::record_usage_group(group.len(), true);
                inner.groups_committed.fetch_add(1, Ordering::Relaxed);
                inner
                    .batches_grouped
                    .fetch_add(group.len() as u64, Ordering::Relaxed);
                for (w, results) in group.into_iter().zip(results) {
                    let _ = w.reply.send(Ok(results));
                }
                return;
            }
            Some(Err(_)) => {
                crate::metrics::record_usage_group(group.len(), false);
                inner.groups_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    batches = group.len(),
                    "a usage group failed to book; booking its batches one by one"
                );
            }
        }
    }
    for w in group {
        let mut alone = vec![w];
        let booked = book_unless_abandoned(&inner.ledger, &mut alone).await;
        if let (Some(booked), Some(w)) = (booked, alone.pop()) {
            crate::metrics::record_usage_group(1, booked.is_ok());
            let _ = w
                .reply
                .send(booked.map(|mut r| r.pop().unwrap_or_default()));
        }
    }
}

/// Books `group` in one transaction, unless its requests went away: a batch whose request
/// was dropped (its client gone, the request timeout) before the commit is taken out and
/// the transaction, rolled back by the drop, is begun again without it, so an abandoned
/// request books nothing, as it did when each request booked in its own transaction
/// (`http_server.rs::a_request_timed_out_inside_its_booking_books_nothing_and_once_when_resent`).
/// `None` when every batch was abandoned.
async fn book_unless_abandoned(
    ledger: &Ledger,
    group: &mut Vec<Waiting>,
) -> Option<Result<Vec<Vec<UsageResult>>, LedgerError>> {
    loop {
        group.retain(|w| !w.reply.is_closed());
        if group.is_empty() {
            return None;
        }
        let (batches, replies): (Vec<_>, Vec<_>) = group
            .iter_mut()
            .map(|w| {
                (
                    UsageRequest {
                        inputs: &w.inputs,
                        scope: &w.scope,
                        actor: &w.actor,
                    },
                    &mut w.reply,
                )
            })
            .unzip();
        let abandoned =
            futures::future::select_all(replies.into_iter().map(|reply| Box::pin(reply.closed())));
        tokio::select! {
            booked = ledger.ingest_requests(&batches) => return Some(booked),
            _ = abandoned => continue,
        }
    }
}
