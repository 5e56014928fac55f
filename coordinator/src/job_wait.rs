//! Waking the round loop when a Ganeti job ends, so that the step after it starts when Ganeti
//! finishes, not at the next round.
//!
//! One task ([`JobWaits::spawn`]) follows the jobs in flight on the executor's ledger (entries
//! submitted or timed out, with a job id) with RAPI's job wait (`GET /2/jobs/<id>/wait`, which
//! blocks until the job's status changes, up to Ganeti's wait period). It waits on at most
//! [`JobWaitSettings::max_waits`] jobs at once: the oldest job in flight of each duty record
//! (holder), oldest first, since a record's jobs end in the order they run (a chain) or
//! together (a group's moves). When one of them ends (or vanished from Ganeti's queue) it
//! wakes the round loop ([`crate::board::Board::wake`]) and waits for the end of a round
//! before it looks again, so that a thousand jobs ending together cost one round and a
//! handful of waits, not a thousand. The round decides everything from its input, as always:
//! the waiter only wakes it, and the rounds at the interval stay the fallback.
//!
//! Errors (RAPI unreachable, a master failover) are logged and retried with back-off (1 s
//! doubling to 30 s); they never wake a round by themselves and never act. The waiter waits
//! only while this coordinator is acting (a standby follows no job) and ends with the round
//! loop (the handle aborts it on drop, its waits with it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nodecare_ganeti::{Ganeti, GanetiError, JobId, JobStatus};
use tokio::task::{AbortHandle, JoinSet};

use crate::board::Board;
use nodecare_exec::ledger::{Entry, Ledger, State};

/// How the waiter waits.
#[derive(Debug, Clone, Copy)]
pub struct JobWaitSettings {
    /// Most job waits open at once.
    pub max_waits: usize,
    /// First pause after an error; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest pause after errors.
    pub backoff_max: Duration,
    /// Shortest time between two waits on the same job that told nothing new (a Ganeti that
    /// answers at once instead of holding the request is read at this pace).
    pub pace: Duration,
    /// Longest wait for the round a wake-up asked for; then the waiter looks again.
    pub round_wait: Duration,
    /// Longest time the end of a holder's oldest job waits for its youngest before it wakes
    /// the round ([`batch_ends`]).
    pub batch_grace: Duration,
}

impl Default for JobWaitSettings {
    fn default() -> Self {
        Self {
            max_waits: 4,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            pace: Duration::from_secs(1),
            round_wait: Duration::from_secs(30),
            batch_grace: Duration::from_millis(150),
        }
    }
}

/// The jobs to wait on: the oldest job in flight of each holder, then the youngest of each, at
/// most `max`, leaving out those already seen ended (`ended`, until a round records them) and
/// those chained after an entry still in flight (Ganeti runs them only after it). The oldest
/// wakes the round as soon as the first of a holder's jobs ends (or, with [`batch_ends`], once
/// the rest of its batch has had a moment to end too); the youngest once a batch submitted
/// together has ended, or a straggler submitted after the chains that an older chained job
/// would have hidden. Pure.
pub fn to_wait_on(in_flight: &[Entry], ended: &BTreeSet<JobId>, max: usize) -> Vec<JobId> {
    waits_of(&spans(in_flight, ended), max)
}

/// [`to_wait_on`] from the holders' spans.
fn waits_of(spans: &[(JobId, JobId)], max: usize) -> Vec<JobId> {
    let mut oldest: Vec<JobId> = spans.iter().map(|(oldest, _)| *oldest).collect();
    oldest.sort_unstable();
    let mut youngest: Vec<JobId> = spans
        .iter()
        .filter(|(oldest, youngest)| youngest != oldest)
        .map(|(_, youngest)| *youngest)
        .collect();
    youngest.sort_unstable();
    let mut jobs = oldest;
    jobs.extend(youngest);
    jobs.truncate(max);
    jobs
}

/// For each holder with more than one job to wait on: its oldest job, and its youngest. When
/// the oldest ends, the jobs submitted with it (a group's drains and moves, its undrains) are
/// ending too: the waiter gives the youngest up to [`JobWaitSettings::batch_grace`] before it
/// wakes the round, so that a batch that ends together is seen by one round, not by one round
/// for most of it and another for the last few. Pure.
pub fn batch_ends(in_flight: &[Entry], ended: &BTreeSet<JobId>) -> BTreeMap<JobId, JobId> {
    batches_of(&spans(in_flight, ended))
}

/// [`batch_ends`] from the holders' spans.
fn batches_of(spans: &[(JobId, JobId)]) -> BTreeMap<JobId, JobId> {
    spans
        .iter()
        .copied()
        .filter(|(oldest, youngest)| youngest != oldest)
        .collect()
}

/// The oldest and youngest job to wait on of each holder (see [`to_wait_on`]).
fn spans(in_flight: &[Entry], ended: &BTreeSet<JobId>) -> Vec<(JobId, JobId)> {
    let unfinished: BTreeSet<(&nodecare_core::gate::Holder, &str)> = in_flight
        .iter()
        .filter(|e| e.state.is_unfinished() && !e.job.is_some_and(|job| ended.contains(&job)))
        .map(|e| (&e.holder, e.key.as_str()))
        .collect();
    let mut span: BTreeMap<&nodecare_core::gate::Holder, (JobId, JobId)> = BTreeMap::new();
    for e in in_flight {
        let Some(job) = following(e) else { continue };
        if ended.contains(&job)
            || e.after
                .iter()
                .any(|key| unfinished.contains(&(&e.holder, key.as_str())))
        {
            continue;
        }
        span.entry(&e.holder)
            .and_modify(|(oldest, youngest)| {
                *oldest = (*oldest).min(job);
                *youngest = (*youngest).max(job);
            })
            .or_insert((job, job));
    }
    span.into_values().collect()
}

/// The job of an entry the executor follows (submitted or timed out, a Ganeti operation).
fn following(e: &Entry) -> Option<JobId> {
    (matches!(e.state, State::Submitted | State::TimedOut) && e.action.op().is_some())
        .then_some(e.job)
        .flatten()
}

/// How one job wait ended.
#[derive(Debug)]
enum Waited {
    /// The job reached a final status, or Ganeti no longer knows it.
    Ended(&'static str),
    /// Ganeti could not be asked.
    Failed(GanetiError),
}

/// Waits until job `id` ends (or Ganeti cannot be asked).
async fn wait_for_end(ganeti: Arc<dyn Ganeti>, id: JobId, pace: Duration) -> Waited {
    let mut previous: Option<JobStatus> = None;
    loop {
        let asked = tokio::time::Instant::now();
        match ganeti.wait_job_change(id, previous).await {
            Ok(Some(status)) if status.is_final() => return Waited::Ended(status.as_str()),
            Ok(Some(status)) if Some(status) != previous => {
                previous = Some(status);
                continue;
            }
            Ok(_) => {}
            Err(GanetiError::NotFound(_)) => return Waited::Ended("gone from the queue"),
            Err(error) => return Waited::Failed(error),
        }
        // Nothing new: no faster than `pace` (RAPI holds the request; another Ganeti may not).
        tokio::time::sleep_until(asked + pace).await;
    }
}

/// The running waiter; dropping it stops it and its waits.
#[derive(Debug)]
pub struct JobWaits(tokio::task::JoinHandle<()>);

impl Drop for JobWaits {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl JobWaits {
    /// Starts waiting on the jobs in flight on `ledger`, waking `board`'s round loop.
    pub fn spawn(
        ganeti: Arc<dyn Ganeti>,
        ledger: Arc<dyn Ledger>,
        board: Arc<Board>,
        settings: JobWaitSettings,
    ) -> Self {
        Self(tokio::spawn(run(ganeti, ledger, board, settings)))
    }
}

async fn run(
    ganeti: Arc<dyn Ganeti>,
    ledger: Arc<dyn Ledger>,
    board: Arc<Board>,
    settings: JobWaitSettings,
) {
    let mut waits: JoinSet<(JobId, Waited)> = JoinSet::new();
    let mut open: BTreeMap<JobId, AbortHandle> = BTreeMap::new();
    // Jobs seen ended that the ledger still shows in flight (until a round records them).
    let mut ended: BTreeSet<JobId> = BTreeSet::new();
    // Each holder's oldest job waited on, and its youngest (`batch_ends`).
    let mut batches: BTreeMap<JobId, JobId> = BTreeMap::new();
    let mut backoff: Option<Duration> = None;
    loop {
        // Armed before the ledger is read: a round ending meanwhile is not missed.
        let round_done = board.round_done.notified();
        tokio::pin!(round_done);
        round_done.as_mut().enable();
        let wanted = if board.acting.load(Ordering::Relaxed) {
            match ledger.unfinished() {
                Ok(in_flight) => {
                    let following: BTreeSet<JobId> =
                        in_flight.iter().filter_map(following).collect();
                    ended.retain(|job| following.contains(job));
                    let spans = spans(&in_flight, &ended);
                    batches = batches_of(&spans);
                    waits_of(&spans, settings.max_waits)
                }
                Err(error) => {
                    tracing::warn!(%error, "job waits: cannot read the ledger; looking again after the next round");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        open.retain(|job, handle| {
            let keep = wanted.contains(job);
            if !keep {
                handle.abort();
            }
            keep
        });
        for job in wanted {
            if let std::collections::btree_map::Entry::Vacant(slot) = open.entry(job) {
                let ganeti = Arc::clone(&ganeti);
                slot.insert(
                    waits.spawn(
                        async move { (job, wait_for_end(ganeti, job, settings.pace).await) },
                    ),
                );
            }
        }
        tokio::select! {
            Some(joined) = waits.join_next(), if !waits.is_empty() => {
                let Ok((job, waited)) = joined else {
                    // Aborted (no longer wanted) or panicked: looked at again below.
                    continue;
                };
                open.remove(&job);
                match waited {
                    Waited::Ended(how) => {
                        backoff = None;
                        ended.insert(job);
                        if let Some(&youngest) = batches.get(&job)
                            && open.contains_key(&youngest)
                        {
                            let grace = tokio::time::Instant::now() + settings.batch_grace;
                            await_batch(&mut waits, &mut open, &mut ended, youngest, grace).await;
                        }
                        tracing::debug!(job, status = how, "job ended: round now");
                        let next_round = board.round_done.notified();
                        tokio::pin!(next_round);
                        next_round.as_mut().enable();
                        board.wake.notify_one();
                        // One round for every job that ended meanwhile.
                        if tokio::time::timeout(settings.round_wait, next_round).await.is_err() {
                            tracing::debug!(job, "job waits: no round after the wake-up; looking again");
                        }
                    }
                    Waited::Failed(error) => {
                        let pause = backoff.map_or(settings.backoff_min, |b| {
                            (b * 2).min(settings.backoff_max)
                        });
                        backoff = Some(pause);
                        tracing::warn!(job, %error, pause_s = pause.as_secs_f64(), "job waits: cannot wait on a job; retrying after a pause");
                        for (_, handle) in std::mem::take(&mut open) {
                            handle.abort();
                        }
                        tokio::time::sleep(pause).await;
                    }
                }
            }
            () = &mut round_done => {}
        }
    }
}

/// Collects the waits that end until `youngest` has ended or `until` has passed (those that
/// fail are left to be asked again after the round).
async fn await_batch(
    waits: &mut JoinSet<(JobId, Waited)>,
    open: &mut BTreeMap<JobId, AbortHandle>,
    ended: &mut BTreeSet<JobId>,
    youngest: JobId,
    until: tokio::time::Instant,
) {
    while let Ok(Some(joined)) = tokio::time::timeout_at(until, waits.join_next()).await {
        let Ok((job, waited)) = joined else { continue };
        open.remove(&job);
        if let Waited::Ended(_) = waited {
            ended.insert(job);
            if job == youngest {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_core::gate::Holder;
    use nodecare_exec::ledger::{Action, Entry};
    use nodecare_ganeti::Op;

    fn entry(holder: u128, key: &str, job: Option<JobId>, state: State) -> Entry {
        let mut e = Entry::new(
            Holder::Campaign {
                id: uuid::Uuid::from_u128(holder),
            },
            key,
            Action::ganeti(Op::SetNodeDrained {
                node: "n1".into(),
                drained: true,
            }),
            key,
            0,
            60_000,
        );
        e.job = job;
        e.state = state;
        e
    }

    #[test]
    fn waits_on_the_oldest_job_of_each_holder_oldest_first_capped() {
        let entries = vec![
            entry(1, "a", Some(7), State::Submitted),
            entry(1, "b", Some(5), State::Submitted),
            entry(2, "c", Some(9), State::TimedOut),
            entry(3, "d", Some(3), State::Recorded),
            entry(3, "e", None, State::Submitted),
            entry(4, "f", Some(2), State::Succeeded),
            entry(5, "g", Some(11), State::Submitted),
        ];
        // Each holder's oldest first, then the youngest of those with more than one.
        assert_eq!(to_wait_on(&entries, &BTreeSet::new(), 4), vec![5, 9, 11, 7]);
        assert_eq!(to_wait_on(&entries, &BTreeSet::new(), 2), vec![5, 9]);
        // A job seen ended is not waited on again; its holder's next one is.
        assert_eq!(
            to_wait_on(&entries, &BTreeSet::from([5]), 4),
            vec![7, 9, 11]
        );
        assert!(to_wait_on(&entries, &BTreeSet::new(), 0).is_empty());
    }

    /// A job chained after an entry still in flight is not waited on; the youngest job chained
    /// after nothing in flight is, beside the oldest: a straggler undrain submitted after a
    /// group's chains wakes the round when it ends, not when the older migrations back do.
    #[test]
    fn waits_on_the_straggler_not_on_jobs_chained_after_one_in_flight() {
        let chained = |key: &str, job, after: &str| {
            let mut e = entry(1, key, Some(job), State::Submitted);
            e.after = vec![after.to_owned()];
            e
        };
        let mut undrain_a = entry(1, "undrain-a", Some(10), State::Submitted);
        let entries = vec![
            undrain_a.clone(),
            chained("back-a", 11, "undrain-a"),
            entry(1, "undrain-b", Some(12), State::Submitted),
            chained("back-b", 13, "undrain-b"),
        ];
        // The migrations back wait for their undrains: the undrains are waited on.
        assert_eq!(to_wait_on(&entries, &BTreeSet::new(), 4), vec![10, 12]);
        // Undrain a succeeded: its migration back is older than the straggler, both waited on.
        undrain_a.state = State::Succeeded;
        let entries = vec![
            undrain_a,
            chained("back-a", 11, "undrain-a"),
            entry(1, "undrain-b", Some(12), State::Submitted),
            chained("back-b", 13, "undrain-b"),
        ];
        assert_eq!(to_wait_on(&entries, &BTreeSet::new(), 4), vec![11, 12]);
        // Seen ended (not recorded yet) counts as ended for the chain after it.
        assert_eq!(to_wait_on(&entries, &BTreeSet::from([12]), 4), vec![11, 13]);
    }

    /// Each holder with more than one job to wait on pairs its oldest with its youngest.
    #[test]
    fn a_batch_is_its_holders_oldest_and_youngest_job() {
        let entries = vec![
            entry(1, "a", Some(7), State::Submitted),
            entry(1, "b", Some(5), State::Submitted),
            entry(1, "c", Some(6), State::Submitted),
            entry(2, "d", Some(9), State::Submitted),
            entry(3, "e", Some(3), State::Succeeded),
        ];
        assert_eq!(
            batch_ends(&entries, &BTreeSet::new()),
            BTreeMap::from([(5, 7)])
        );
        // Once the oldest was seen ended, the next oldest pairs with the youngest.
        assert_eq!(
            batch_ends(&entries, &BTreeSet::from([5])),
            BTreeMap::from([(6, 7)])
        );
        // A holder left with one job has no batch.
        assert!(batch_ends(&entries, &BTreeSet::from([5, 6])).is_empty());
    }

    /// A simulated Ganeti whose jobs take `delay`, an executor on a ledger in memory, and a
    /// waiter with `settings` on that ledger, waking the returned board (acting).
    fn waiting(
        delay: Duration,
        settings: JobWaitSettings,
    ) -> (
        nodecare_ganeti_sim::Simulation,
        Arc<dyn Ganeti>,
        nodecare_exec::Executor,
        Arc<Board>,
        JobWaits,
    ) {
        let sim = nodecare_ganeti_sim::Simulation::new(
            nodecare_ganeti_sim::model::SimConfig::from_spec(3, "a:drbd:1", "sim.test").unwrap(),
        )
        .unwrap();
        sim.set_job_delay(delay);
        let ganeti: Arc<dyn Ganeti> = Arc::new(sim.client());
        let ledger: Arc<dyn Ledger> = Arc::new(nodecare_exec::ledger::MemoryLedger::default());
        let executor = nodecare_exec::Executor::new(Arc::clone(&ledger));
        let board = Arc::new(Board::default());
        board.acting.store(true, Ordering::Relaxed);
        let waits = JobWaits::spawn(Arc::clone(&ganeti), ledger, Arc::clone(&board), settings);
        (sim, ganeti, executor, board, waits)
    }

    /// Whether `board`'s round loop is woken within `limit`.
    async fn woken(board: &Board, limit: Duration) -> bool {
        tokio::time::timeout(limit, board.wake.notified())
            .await
            .is_ok()
    }

    /// A job in flight that ends wakes the round loop as soon as Ganeti ends it (RAPI's job
    /// wait, served by the simulation), not at the next round; once per round, and not while
    /// this coordinator stands by.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_that_ends_wakes_the_round_loop_at_once() {
        let (_sim, ganeti, executor, board, _waits) =
            waiting(Duration::from_millis(600), JobWaitSettings::default());
        let mut drain = entry(1, "drain", None, State::Recorded);
        drain.action = Action::ganeti(Op::SetNodeDrained {
            node: "node2.sim.test".into(),
            drained: true,
        });
        drain.deadline_ms = u64::MAX;
        executor.record(&[drain]).unwrap();
        let submitted = executor
            .submit(ganeti.as_ref(), None, nodecare_protocol::now_ms())
            .await
            .unwrap();
        assert_eq!(submitted.len(), 1);
        let started = std::time::Instant::now();
        // The waiter looks at the ledger after a round.
        board.round_done.notify_waiters();
        assert!(
            !woken(&board, Duration::from_millis(200)).await,
            "woken before the job ended"
        );
        assert!(
            woken(&board, Duration::from_secs(3)).await,
            "not woken when the job ended"
        );
        let after = started.elapsed();
        assert!(
            after >= Duration::from_millis(350) && after < Duration::from_millis(1500),
            "woken {after:?} after the submission (the job takes 600 ms)"
        );
        // Until a round has recorded the outcome, the same job does not wake it again.
        assert!(
            !woken(&board, Duration::from_millis(300)).await,
            "woken twice"
        );

        // A standby waits on nothing.
        board.acting.store(false, Ordering::Relaxed);
        let mut second = entry(1, "second", None, State::Recorded);
        second.deadline_ms = u64::MAX;
        executor.record(&[second]).unwrap();
        executor
            .submit(ganeti.as_ref(), None, nodecare_protocol::now_ms())
            .await
            .unwrap();
        board.round_done.notify_waiters();
        assert!(
            !woken(&board, Duration::from_secs(2)).await,
            "a standby was woken by a job"
        );
    }

    /// Two jobs of one holder submitted 150 ms apart: the end of the first waits for the
    /// second (within the grace), so one wake-up follows both; with a shorter grace the first
    /// wakes the round alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_that_ends_together_wakes_one_round() {
        for (grace, woken_after_second) in
            [(Duration::from_millis(400), true), (Duration::ZERO, false)]
        {
            let (_sim, ganeti, executor, board, _waits) = waiting(
                Duration::from_millis(500),
                JobWaitSettings {
                    batch_grace: grace,
                    ..JobWaitSettings::default()
                },
            );
            let started = std::time::Instant::now();
            for (key, node) in [("first", "node2.sim.test"), ("second", "node3.sim.test")] {
                let mut e = entry(1, key, None, State::Recorded);
                e.action = Action::ganeti(Op::SetNodeDrained {
                    node: node.into(),
                    drained: true,
                });
                e.deadline_ms = u64::MAX;
                executor.record(&[e]).unwrap();
                executor
                    .submit(ganeti.as_ref(), None, nodecare_protocol::now_ms())
                    .await
                    .unwrap();
                if key == "first" {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
            }
            // The waiter looks at the ledger after a round.
            board.round_done.notify_waiters();
            assert!(
                woken(&board, Duration::from_secs(3)).await,
                "not woken when the jobs ended"
            );
            let after = started.elapsed();
            // The first ends at about 500 ms, the second at about 650 ms.
            assert_eq!(
                after >= Duration::from_millis(620),
                woken_after_second,
                "grace {grace:?}: woken {after:?} after the first submission"
            );
        }
    }
}
