#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use nodecare_ganeti_sim::model::{JobFailureRule, SimConfig};
use nodecare_ganeti_sim::{HttpFaults, Simulation};

use super::ledger::{Action, AgentOp, Entry, Hold, MemoryLedger, Op, State};
use super::*;

const DAY_MS: u64 = 24 * 3600 * 1000;

struct World {
    sim: Simulation,
    ganeti: nodecare_ganeti::rapi::RapiClient,
    exec: Executor,
    node: String,
    instance: String,
}

async fn world() -> World {
    let sim = Simulation::new(SimConfig::from_spec(4, "a:drbd:2", "sim.test").unwrap()).unwrap();
    let ganeti = sim.client();
    let a = Ganeti::instances(&ganeti).await.unwrap()[0].clone();
    let (node, instance) = (a.primary_node, a.name);
    World {
        sim,
        ganeti,
        exec: Executor::new(Arc::new(MemoryLedger::default())),
        node,
        instance,
    }
}

fn holder(n: u128) -> Holder {
    Holder::Incident {
        id: Uuid::from_u128(n),
    }
}

/// drain → migrate (a chain of Ganeti jobs) → repair (the agent's).
fn chain(w: &World, h: &Holder) -> Vec<Entry> {
    let drain = Entry::new(
        h.clone(),
        "drain",
        Action::ganeti(Op::drain(&w.node)),
        "drain",
        0,
        DAY_MS,
    )
    .holding([Hold::Drained {
        node: w.node.clone(),
    }]);
    let migrate = Entry::new(
        h.clone(),
        "migrate a",
        Action::ganeti(Op::MigrateInstance {
            instance: w.instance.clone(),
            target: None,
        }),
        "migrate",
        0,
        DAY_MS,
    )
    .after(["drain".to_owned()]);
    let repair = Entry::new(
        h.clone(),
        "repair",
        Action::Agent {
            op: AgentOp::Repair {
                node: w.node.clone(),
                command: "fix".into(),
            },
        },
        "repair",
        0,
        DAY_MS,
    )
    .after(["migrate_a".to_owned()]);
    vec![drain, migrate, repair]
}

/// `n` independent tag jobs of `h` on the world's node.
fn tag_entries(w: &World, h: &Holder, n: usize) -> Vec<Entry> {
    (0..n)
        .map(|k| {
            Entry::new(
                h.clone(),
                format!("tag-{k}"),
                Action::ganeti(Op::add_node_tags(&w.node, vec![format!("t{k}")])),
                "tag",
                0,
                DAY_MS,
            )
        })
        .collect()
}

fn states(exec: &Executor) -> Vec<(String, String)> {
    exec.ledger()
        .entries()
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.state.as_str().to_owned()))
        .collect()
}

#[tokio::test]
async fn a_chain_is_recorded_submitted_with_depends_and_followed_to_its_end() {
    let w = world().await;
    let h = holder(1);
    w.exec.record(&chain(&w, &h)).unwrap();
    let submitted = w.exec.submit(&w.ganeti, None, 1).await.unwrap();
    assert_eq!(submitted.len(), 2, "the agent's entry is not a Ganeti job");
    let (drain, migrate) = (submitted[0].job.unwrap(), submitted[1].job.unwrap());
    let depends = w.sim.with_cluster(|c| c.jobs[&migrate].depends.clone());
    assert_eq!(
        depends.iter().map(|(job, _)| *job).collect::<Vec<_>>(),
        [drain]
    );
    // The reason trail names the holder and the key.
    let trails: Vec<Option<String>> = w.sim.submissions().into_iter().map(|s| s.intent).collect();
    assert_eq!(
        trails,
        [
            Some(format!("{}/drain", Uuid::from_u128(1))),
            Some(format!("{}/migrate_a", Uuid::from_u128(1)))
        ]
    );
    // Nothing is submitted twice.
    assert!(w.exec.submit(&w.ganeti, None, 2).await.unwrap().is_empty());
    // The drain holds the node while it may happen, and after.
    let held = w.exec.in_force(|_| true).unwrap();
    assert_eq!(held.nodes.get(&w.node), Some(&h));
    assert!(w.sim.settle(Duration::from_secs(10)).await);
    let changed = w.exec.poll(&w.ganeti, 3).await.unwrap();
    assert_eq!(changed.len(), 2, "{changed:#?}");
    assert!(changed.iter().all(|c| c.entry.state == State::Succeeded));
    assert_eq!(
        states(&w.exec),
        [
            ("drain".to_owned(), "succeeded".to_owned()),
            ("migrate_a".to_owned(), "succeeded".to_owned()),
            ("repair".to_owned(), "recorded".to_owned())
        ]
    );
    assert!(w.exec.poll(&w.ganeti, 4).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_failed_job_ends_its_chain() {
    let w = world().await;
    let h = holder(2);
    w.sim.fail_jobs(JobFailureRule {
        op_id: Some("OP_NODE_SET_PARAMS".into()),
        target: None,
        count: Some(1),
        message: "disk on fire".into(),
    });
    w.exec.record(&chain(&w, &h)).unwrap();
    w.exec.submit(&w.ganeti, None, 1).await.unwrap();
    assert!(w.sim.settle(Duration::from_secs(10)).await);
    let changed = w.exec.poll(&w.ganeti, 2).await.unwrap();
    let first = &changed[0].entry;
    assert_eq!(first.key, "drain");
    assert!(
        first.state.why().unwrap().contains("disk on fire"),
        "{first:#?}"
    );
    assert!(changed[0].job.is_some(), "the job read is handed on");
    let all = states(&w.exec);
    assert_eq!(all[0].1, "failed");
    assert_ne!(all[1].1, "succeeded", "{all:?}");
    assert_eq!(all[2].1, "canceled", "{all:?}");
    // A failed drain took no hold.
    assert!(w.exec.in_force(|_| true).unwrap().nodes.is_empty());
}

#[tokio::test]
async fn after_a_crash_jobs_are_adopted_by_their_trail_and_the_rest_fails_or_is_retried() {
    let w = world().await;
    let h = holder(3);
    let other = holder(4);
    let recorded = w.exec.record(&chain(&w, &h)).unwrap();
    w.exec.record(&chain(&w, &other)).unwrap();
    // The crash came after the drain was submitted and before its job id was recorded.
    let reason = Reason::new(Uuid::from_u128(3), "drain", "drain");
    let job = w
        .ganeti
        .submit(recorded[0].action.op().unwrap(), &reason)
        .await
        .unwrap();
    let changed = w
        .exec
        .adopt(
            &w.ganeti,
            |holder| {
                if holder == &h {
                    Unadopted::Fail
                } else {
                    Unadopted::Retry
                }
            },
            5,
        )
        .await
        .unwrap()
        .unwrap();
    // Only entries that could have been submitted are looked up: the migrate waits for the
    // drain, the other holder's drain is to be retried.
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert_eq!(changed[0].state, State::Submitted);
    assert_eq!(changed[0].job, Some(job));
    // The rest goes on: the migrate chained after the adopted drain, the other holder's drain
    // submitted again, once.
    let submitted = w.exec.submit(&w.ganeti, None, 6).await.unwrap();
    let keys: Vec<(Holder, String)> = submitted
        .iter()
        .map(|e| (e.holder.clone(), e.key.clone()))
        .collect();
    assert!(keys.contains(&(h.clone(), "migrate_a".into())), "{keys:?}");
    assert!(keys.contains(&(other.clone(), "drain".into())), "{keys:?}");
    assert!(w.sim.duplicate_intents().is_empty());
    // A holder whose drain Ganeti never saw fails it.
    let third = holder(5);
    w.exec.record(&chain(&w, &third)).unwrap();
    let changed = w
        .exec
        .adopt(&w.ganeti, |_| Unadopted::Fail, 7)
        .await
        .unwrap()
        .unwrap();
    let failed: Vec<&Entry> = changed.iter().filter(|e| e.holder == third).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].state.why(), Some("never submitted"));
}

#[tokio::test]
async fn a_job_still_running_at_its_deadline_times_out_and_is_still_followed() {
    let w = world().await;
    let h = holder(6);
    w.sim.stick_next_jobs(1);
    w.exec.record(&chain(&w, &h)[..1]).unwrap();
    w.exec.submit(&w.ganeti, None, 1).await.unwrap();
    assert!(w.exec.poll(&w.ganeti, 2).await.unwrap().is_empty());
    let changed = w.exec.poll(&w.ganeti, DAY_MS + 1).await.unwrap();
    assert_eq!(changed[0].entry.state, State::TimedOut);
    assert!(changed[0].entry.state.is_unfinished());
    // Uncertain: it holds its node.
    assert!(
        w.exec
            .in_force(|_| true)
            .unwrap()
            .nodes
            .contains_key(&w.node)
    );
    assert!(w.exec.poll(&w.ganeti, DAY_MS + 2).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_vanished_job_fails_its_entry() {
    let w = world().await;
    w.sim.vanish_next_jobs(1);
    w.exec.record(&chain(&w, &holder(7))[..1]).unwrap();
    w.exec.submit(&w.ganeti, None, 1).await.unwrap();
    let changed = w.exec.poll(&w.ganeti, 2).await.unwrap();
    assert_eq!(
        changed[0].entry.state.why().unwrap(),
        format!(
            "job {} vanished from Ganeti's queue",
            changed[0].entry.job.unwrap()
        )
    );
}

#[tokio::test]
async fn cancel_stops_what_has_not_started_and_asks_each_job_once() {
    let w = world().await;
    let h = holder(8);
    w.sim.set_job_delay(Duration::from_secs(3600));
    let entries = chain(&w, &h);
    w.exec.record(&entries).unwrap();
    w.exec.submit(&w.ganeti, Some(&h), 1).await.unwrap();
    let answers = w.exec.cancel(&w.ganeti, &h, "canceled", 2).await.unwrap();
    // Neither job has started (a long delay): the first of the chain first.
    let jobs: Vec<JobId> = answers.iter().map(|a| a.job).collect();
    let mut sorted = jobs.clone();
    sorted.sort();
    assert_eq!(jobs, sorted);
    assert_eq!(jobs.len(), 2);
    assert_eq!(
        states(&w.exec)[2].1,
        "canceled",
        "the agent's entry never runs"
    );
    assert!(
        w.exec
            .cancel(&w.ganeti, &h, "canceled", 3)
            .await
            .unwrap()
            .is_empty(),
        "each job is asked once"
    );
    let changed = w.exec.poll(&w.ganeti, 4).await.unwrap();
    assert!(
        changed
            .iter()
            .all(|c| matches!(c.entry.state, State::Canceled { .. })),
        "{changed:#?}"
    );
}

/// An unchained job (instance repair's next operation) is submitted once the job before it
/// succeeded, without `depends`; while that job runs, adoption neither looks for the unchained
/// one nor fails it.
#[tokio::test]
async fn an_unchained_job_waits_for_success_and_is_not_adopted_before() {
    let w = world().await;
    let h = holder(5);
    let first = Entry::new(
        h.clone(),
        "failover-0",
        Action::ganeti(Op::MigrateInstance {
            instance: w.instance.clone(),
            target: None,
        }),
        "migrate",
        0,
        DAY_MS,
    );
    let second = Entry::new(
        h.clone(),
        "failover-1",
        Action::ganeti(Op::AddTags {
            target: nodecare_ganeti::TagTarget::Instance(w.instance.clone()),
            tags: vec!["x".into()],
        }),
        "tag",
        0,
        DAY_MS,
    )
    .after(["failover-0".to_owned()])
    .unchained();
    w.exec.record(&[first, second]).unwrap();
    let submitted = w.exec.submit(&w.ganeti, None, 1).await.unwrap();
    assert_eq!(submitted.len(), 1);
    // The first job runs: the second is not uncertain, so not failed as never submitted.
    let adopted = w
        .exec
        .adopt(&w.ganeti, |_| Unadopted::Fail, 2)
        .await
        .unwrap()
        .unwrap();
    assert!(adopted.is_empty(), "{adopted:#?}");
    assert_eq!(
        states(&w.exec),
        [
            ("failover-0".to_owned(), "submitted".to_owned()),
            ("failover-1".to_owned(), "recorded".to_owned())
        ]
    );
    assert!(w.sim.settle(Duration::from_secs(10)).await);
    w.exec.poll(&w.ganeti, 3).await.unwrap();
    let submitted = w.exec.submit(&w.ganeti, None, 4).await.unwrap();
    assert_eq!(submitted.len(), 1);
    let job = submitted[0].job.unwrap();
    let depends = w.sim.with_cluster(|c| c.jobs[&job].depends.clone());
    assert!(depends.is_empty(), "{depends:?}");
}

/// A Ganeti client that counts the reads of single jobs and the submissions in flight at once
/// (each answered after a short wait, as over a network).
#[derive(Debug)]
struct Counting {
    inner: nodecare_ganeti::rapi::RapiClient,
    job_reads: std::sync::atomic::AtomicUsize,
    in_flight: std::sync::atomic::AtomicUsize,
    most_in_flight: std::sync::atomic::AtomicUsize,
}

impl Counting {
    fn new(inner: nodecare_ganeti::rapi::RapiClient) -> Self {
        Self {
            inner,
            job_reads: std::sync::atomic::AtomicUsize::new(0),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            most_in_flight: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

impl Ganeti for Counting {
    fn cluster_info(&self) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::ClusterInfo> {
        Ganeti::cluster_info(&self.inner)
    }
    fn nodes(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Node>> {
        Ganeti::nodes(&self.inner)
    }
    fn instances(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Instance>> {
        Ganeti::instances(&self.inner)
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "a wrapper passes on what it is given"
    )]
    fn submit<'a>(
        &'a self,
        op: &'a Op,
        reason: &'a Reason,
    ) -> nodecare_ganeti::GanetiFuture<'a, JobId> {
        use std::sync::atomic::Ordering::SeqCst;
        Box::pin(async move {
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most_in_flight.fetch_max(now, SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
            let answer = Ganeti::submit(&self.inner, op, reason).await;
            self.in_flight.fetch_sub(1, SeqCst);
            answer
        })
    }
    fn groups(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Group>> {
        Ganeti::groups(&self.inner)
    }
    fn tags<'a>(
        &'a self,
        target: &'a nodecare_ganeti::TagTarget,
    ) -> nodecare_ganeti::GanetiFuture<'a, Vec<String>> {
        Ganeti::tags(&self.inner, target)
    }
    fn job(&self, id: JobId) -> nodecare_ganeti::GanetiFuture<'_, Job> {
        self.job_reads
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ganeti::job(&self.inner, id)
    }
    fn jobs(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::JobSummary>> {
        Ganeti::jobs(&self.inner)
    }
    fn cancel_job(
        &self,
        id: JobId,
    ) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::JobCancel> {
        Ganeti::cancel_job(&self.inner, id)
    }
}

/// Many jobs running (a campaign's group moving its instances) are followed with one read of
/// Ganeti's job list, not one read each; at their deadline each is read and times out.
#[tokio::test]
async fn many_running_jobs_are_followed_with_one_read_of_the_job_list() {
    let w = world().await;
    let h = holder(9);
    let n = BULK_POLL + 2;
    w.sim.stick_next_jobs(u32::try_from(n).unwrap());
    let entries = tag_entries(&w, &h, n);
    w.exec.record(&entries).unwrap();
    let ganeti = Counting::new(w.sim.client());
    assert_eq!(w.exec.submit(&ganeti, None, 1).await.unwrap().len(), n);
    assert!(w.exec.poll(&ganeti, 2).await.unwrap().is_empty());
    assert_eq!(
        ganeti.job_reads.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    let changed = w.exec.poll(&ganeti, DAY_MS + 1).await.unwrap();
    assert_eq!(changed.len(), n);
    assert!(changed.iter().all(|c| c.entry.state == State::TimedOut));
    assert_eq!(
        ganeti.job_reads.load(std::sync::atomic::Ordering::SeqCst),
        n
    );
}

/// The ready entries of one layer (none chained after another) go to Ganeti side by side, at
/// most `SUBMIT_CONCURRENCY` at once; the next layer follows with each job chained after its
/// predecessor's, and the entries come back in their order.
#[tokio::test]
async fn a_layer_of_entries_is_submitted_side_by_side_and_the_next_chained_after_it() {
    let w = world().await;
    let h = holder(11);
    let n = 3 * SUBMIT_CONCURRENCY;
    w.sim.stick_next_jobs(u32::try_from(2 * n).unwrap());
    let mut entries = tag_entries(&w, &h, n);
    entries.extend((0..n).map(|k| {
        Entry::new(
            h.clone(),
            format!("then-{k}"),
            Action::ganeti(Op::add_node_tags(&w.node, vec![format!("u{k}")])),
            "then",
            0,
            DAY_MS,
        )
        .after([format!("tag-{k}")])
    }));
    w.exec.record(&entries).unwrap();
    let ganeti = Counting::new(w.sim.client());
    let submitted = w.exec.submit(&ganeti, None, 1).await.unwrap();
    let keys: Vec<&str> = submitted.iter().map(|e| e.key.as_str()).collect();
    let expected: Vec<String> = (0..n)
        .map(|k| format!("tag-{k}"))
        .chain((0..n).map(|k| format!("then-{k}")))
        .collect();
    assert_eq!(
        keys,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(
        ganeti
            .most_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        SUBMIT_CONCURRENCY
    );
    let job_of: BTreeMap<&str, JobId> = submitted
        .iter()
        .map(|e| (e.key.as_str(), e.job.unwrap()))
        .collect();
    for k in 0..n {
        let then = job_of[format!("then-{k}").as_str()];
        let depends = w.sim.with_cluster(|c| c.jobs[&then].depends.clone());
        let on: Vec<JobId> = depends.iter().map(|(job, _)| *job).collect();
        assert_eq!(on, [job_of[format!("tag-{k}").as_str()]], "then-{k}");
    }
    assert!(
        w.exec
            .ledger()
            .entries()
            .unwrap()
            .iter()
            .all(|e| e.state == State::Submitted && e.job.is_some())
    );
}

/// A ledger that counts its writes.
#[derive(Debug, Default)]
struct CountingLedger {
    inner: MemoryLedger,
    marks: std::sync::atomic::AtomicUsize,
    batches: std::sync::atomic::AtomicUsize,
    /// Batches fail (as a crash before their write would leave them).
    batches_fail: std::sync::atomic::AtomicBool,
}

impl CountingLedger {
    /// (single marks, batches) since the last call.
    fn writes(&self) -> (usize, usize) {
        (
            self.marks.swap(0, std::sync::atomic::Ordering::SeqCst),
            self.batches.swap(0, std::sync::atomic::Ordering::SeqCst),
        )
    }
}

impl Ledger for CountingLedger {
    fn record(&self, entries: &[Entry]) -> Result<Vec<Entry>, LedgerError> {
        self.inner.record(entries)
    }
    fn mark(&self, entry: &Entry) -> Result<(), LedgerError> {
        self.marks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.mark(entry)
    }
    fn mark_all(&self, entries: &[Entry]) -> Result<(), LedgerError> {
        if !entries.is_empty() {
            self.batches
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        if self.batches_fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(LedgerError::Unknown(0));
        }
        self.inner.mark_all(entries)
    }
    fn entries(&self) -> Result<Vec<Entry>, LedgerError> {
        self.inner.entries()
    }
    fn forget(&self, holder: &Holder) -> Result<usize, LedgerError> {
        self.inner.forget(holder)
    }
}

/// A group's many jobs (a campaign moving thousands of instances) cost one durable write for
/// their submissions and one for their ends, not one each, and the jobs the job list shows
/// succeeded are not read one by one.
#[tokio::test]
async fn many_jobs_are_marked_submitted_and_ended_in_one_write_each() {
    let w = world().await;
    let ledger = Arc::new(CountingLedger::default());
    let exec = Executor::new(ledger.clone());
    let h = holder(10);
    // A group's hundreds of jobs.
    let n = 600;
    let entries = tag_entries(&w, &h, n);
    exec.record(&entries).unwrap();
    let ganeti = Counting::new(w.sim.client());
    let submitted = exec.submit(&ganeti, None, 1).await.unwrap();
    assert_eq!(submitted.len(), n);
    assert_eq!(ledger.writes(), (0, 1));
    assert!(
        exec.ledger()
            .entries()
            .unwrap()
            .iter()
            .all(|e| e.state == State::Submitted && e.job.is_some())
    );
    assert!(w.sim.settle(Duration::from_secs(5)).await);
    let changed = exec.poll(&ganeti, 2).await.unwrap();
    assert_eq!(changed.len(), n);
    assert!(changed.iter().all(|c| c.entry.state == State::Succeeded));
    assert_eq!(ledger.writes(), (0, 1));
    assert_eq!(
        ganeti.job_reads.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert!(
        exec.ledger()
            .entries()
            .unwrap()
            .iter()
            .all(|e| e.state == State::Succeeded && e.finished_ms == Some(2))
    );
}

/// A chain submitted whole whose marks were lost (a crash before their one write) is adopted
/// whole after the restart: the entries after an adopted one are looked for in Ganeti's job list
/// too, and none is submitted again.
#[tokio::test]
async fn a_chain_whose_marks_were_lost_is_adopted_whole() {
    let w = world().await;
    let ledger = Arc::new(CountingLedger::default());
    let exec = Executor::new(ledger.clone());
    let h = holder(11);
    exec.record(&chain(&w, &h)).unwrap();
    ledger
        .batches_fail
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let first = exec.submit(&w.ganeti, None, 1).await;
    assert!(first.is_err(), "{first:?}");
    assert_eq!(w.sim.submissions().len(), 2);
    assert!(
        exec.ledger()
            .entries()
            .unwrap()
            .iter()
            .all(|e| e.state == State::Recorded && e.job.is_none())
    );
    ledger
        .batches_fail
        .store(false, std::sync::atomic::Ordering::SeqCst);
    // The restarted coordinator: adoption, then its submission pass.
    let restarted = Executor::new(ledger.clone());
    let adopted = restarted
        .adopt(&w.ganeti, |_| Unadopted::Retry, 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        adopted.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["drain", "migrate_a"]
    );
    assert!(
        restarted
            .submit(&w.ganeti, None, 3)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(w.sim.submissions().len(), 2);
    assert_eq!(w.sim.duplicate_intents(), Vec::<String>::new());
}

/// `poll_of` follows only the holders it is asked for: another duty's jobs are left to it.
#[tokio::test]
async fn poll_of_leaves_other_holders_jobs_alone() {
    let w = world().await;
    let (ours, theirs) = (
        Holder::Balancing {
            id: Uuid::from_u128(1),
        },
        holder(2),
    );
    let entry = |h: &Holder| {
        Entry::new(
            h.clone(),
            "drain",
            Action::ganeti(Op::drain(&w.node)),
            "drain",
            0,
            DAY_MS,
        )
    };
    w.exec.record(&[entry(&ours), entry(&theirs)]).unwrap();
    assert_eq!(w.exec.submit(&w.ganeti, None, 1).await.unwrap().len(), 2);
    assert!(w.sim.settle(Duration::from_secs(10)).await);
    let changed = w
        .exec
        .poll_of(&w.ganeti, |h| matches!(h, Holder::Balancing { .. }), 2)
        .await
        .unwrap();
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert_eq!(changed[0].entry.holder, ours);
    let left = w.exec.ledger().of_holder(&theirs).unwrap();
    assert_eq!(left[0].state, State::Submitted, "not polled");
    assert_eq!(w.exec.poll(&w.ganeti, 3).await.unwrap().len(), 1);
}

/// A Ganeti client whose answers to submissions are lost (the job is submitted, the answer
/// never arrives: a timeout, a crash).
#[derive(Debug)]
struct LostAnswers {
    inner: nodecare_ganeti::rapi::RapiClient,
}

impl Ganeti for LostAnswers {
    fn cluster_info(&self) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::ClusterInfo> {
        Ganeti::cluster_info(&self.inner)
    }
    fn nodes(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Node>> {
        Ganeti::nodes(&self.inner)
    }
    fn instances(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Instance>> {
        Ganeti::instances(&self.inner)
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "a wrapper passes on what it is given"
    )]
    fn submit<'a>(
        &'a self,
        op: &'a Op,
        reason: &'a Reason,
    ) -> nodecare_ganeti::GanetiFuture<'a, JobId> {
        Box::pin(async move {
            Ganeti::submit(&self.inner, op, reason).await?;
            Err(GanetiError::Transport("answer lost".into()))
        })
    }
    fn groups(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Group>> {
        Ganeti::groups(&self.inner)
    }
    fn tags<'a>(
        &'a self,
        target: &'a nodecare_ganeti::TagTarget,
    ) -> nodecare_ganeti::GanetiFuture<'a, Vec<String>> {
        Ganeti::tags(&self.inner, target)
    }
    fn job(&self, id: JobId) -> nodecare_ganeti::GanetiFuture<'_, Job> {
        Ganeti::job(&self.inner, id)
    }
    fn jobs(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::JobSummary>> {
        Ganeti::jobs(&self.inner)
    }
    fn cancel_job(
        &self,
        id: JobId,
    ) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::JobCancel> {
        Ganeti::cancel_job(&self.inner, id)
    }
}

/// A reinstall's job carries no reason trail, so adoption cannot find it: its submission
/// answer lost, once no reinstall of the instance is unfinished the entry fails with why (the
/// repair blocks visibly) and the reinstall is never submitted again, even where the holder's
/// other entries are retried.
#[tokio::test]
async fn a_reinstall_whose_answer_is_lost_fails_and_is_never_submitted_again() {
    let w = world().await;
    let lossy = LostAnswers {
        inner: w.sim.client(),
    };
    let h = Holder::InstanceRepair {
        id: Uuid::from_u128(6),
    };
    let reinstall = Entry::new(
        h.clone(),
        "instance-repair-reinstall-1",
        Action::ganeti(Op::ReinstallInstance {
            instance: w.instance.clone(),
            start: true,
        }),
        "reinstall",
        0,
        DAY_MS,
    );
    w.exec.record(&[reinstall]).unwrap();
    let first = w.exec.submit_reporting(&lossy, None, 1).await.unwrap();
    assert!(first.submitted.is_empty());
    assert_eq!(first.refused.len(), 1);
    assert!(w.sim.settle(Duration::from_secs(10)).await);
    for now in 2..5 {
        w.exec
            .adopt(&w.ganeti, |_| Unadopted::Retry, now)
            .await
            .unwrap()
            .unwrap();
        w.exec.submit(&w.ganeti, None, now).await.unwrap();
    }
    let reinstalls = w
        .sim
        .submissions()
        .iter()
        .filter(|s| s.op_id == "OP_INSTANCE_REINSTALL")
        .count();
    assert_eq!(reinstalls, 1);
    let entry = w.exec.ledger().of_holder(&h).unwrap().remove(0);
    assert_eq!(entry.state.as_str(), "failed");
    assert!(
        entry.state.why().unwrap().contains("no reason trail"),
        "{entry:?}"
    );
}

/// A reinstall whose submission's answer was lost may be running: its entry stays unfinished
/// (the instance's nodes held) while Ganeti's job list shows an unfinished reinstall of that
/// instance, and while the list cannot be read; once a complete list shows none, it fails and
/// is never submitted again.
#[tokio::test]
async fn an_uncertain_reinstall_holds_until_the_job_list_shows_none_unfinished() {
    let w = world().await;
    w.sim.set_job_delay(Duration::from_secs(3));
    let lossy = LostAnswers {
        inner: w.sim.client(),
    };
    let h = Holder::InstanceRepair {
        id: Uuid::from_u128(6),
    };
    let reinstall = Entry::new(
        h.clone(),
        "instance-repair-reinstall-1",
        Action::ganeti(Op::ReinstallInstance {
            instance: w.instance.clone(),
            start: true,
        }),
        "reinstall",
        0,
        DAY_MS,
    )
    .holding([Hold::Repairing {
        node: w.node.clone(),
    }]);
    w.exec.record(&[reinstall]).unwrap();
    let first = w.exec.submit_reporting(&lossy, None, 1).await.unwrap();
    assert_eq!(first.refused.len(), 1);
    let state = |w: &World| w.exec.ledger().of_holder(&h).unwrap().remove(0).state;
    let held = |w: &World| {
        w.exec
            .in_force(|_| true)
            .unwrap()
            .touching()
            .any(|(node, holder)| node == w.node && holder == h)
    };
    // The job runs: held.
    w.exec
        .adopt(&w.ganeti, |_| Unadopted::Retry, 2)
        .await
        .unwrap()
        .unwrap();
    assert!(state(&w).is_unfinished(), "{:?}", state(&w));
    assert!(held(&w));
    // The job list cannot be read: nothing is known, still held.
    fail_next_job_list(&w);
    assert!(
        w.exec
            .adopt(&w.ganeti, |_| Unadopted::Retry, 3)
            .await
            .unwrap()
            .is_none()
    );
    assert!(state(&w).is_unfinished(), "{:?}", state(&w));
    assert!(held(&w));
    // The job ended: the list shows no unfinished reinstall of the instance.
    assert!(w.sim.settle(Duration::from_secs(10)).await);
    w.exec
        .adopt(&w.ganeti, |_| Unadopted::Retry, 4)
        .await
        .unwrap()
        .unwrap();
    w.exec.submit(&w.ganeti, None, 4).await.unwrap();
    let ended = state(&w);
    assert_eq!(ended.as_str(), "failed");
    assert!(
        ended.why().unwrap().contains("no reason trail"),
        "{ended:?}"
    );
    assert!(!held(&w));
    let reinstalls = w
        .sim
        .submissions()
        .iter()
        .filter(|s| s.op_id == "OP_INSTANCE_REINSTALL")
        .count();
    assert_eq!(reinstalls, 1);
}

/// `n` entries of `h`, each an independent tag job on the world's node.
fn record_tags(w: &World, h: &Holder, n: usize) -> Vec<Entry> {
    w.exec.record(&tag_entries(w, h, n)).unwrap()
}

fn lose_next_answer(w: &World) {
    w.sim.set_http_faults(HttpFaults {
        lose_answer: 1,
        method: Some("PUT".into()),
        ..HttpFaults::default()
    });
}

fn fail_next_job_list(w: &World) {
    w.sim.set_http_faults(HttpFaults {
        fail_5xx: 1,
        method: Some("GET".into()),
        path_is: Some("/2/jobs".into()),
        ..HttpFaults::default()
    });
}

/// A submission whose job Ganeti created but whose answer was lost is not submitted again by a
/// second pass before adoption has read the job list; adoption then finds its job.
#[tokio::test]
async fn a_submission_whose_answer_is_lost_is_not_submitted_again_before_adoption() {
    let w = world().await;
    let h = holder(21);
    record_tags(&w, &h, 1);
    lose_next_answer(&w);
    let first = w.exec.submit_reporting(&w.ganeti, None, 1).await.unwrap();
    assert!(first.submitted.is_empty());
    assert_eq!(first.refused.len(), 1, "{first:?}");
    assert_eq!(w.sim.submissions().len(), 1, "the job exists");
    // A second pass in the same round (a campaign's own): not submitted again.
    w.exec.submit(&w.ganeti, None, 2).await.unwrap();
    assert_eq!(w.sim.duplicate_intents(), Vec::<String>::new());
    // Adoption finds it; nothing is submitted again after.
    let adopted = w
        .exec
        .adopt_of(&w.ganeti, |_| true, |_| Unadopted::Retry, 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(adopted.len(), 1, "{adopted:?}");
    assert!(adopted[0].job.is_some());
    assert!(w.exec.submit(&w.ganeti, None, 4).await.unwrap().is_empty());
    assert_eq!(w.sim.submissions().len(), 1);
}

/// A chain submitted whole before a crash, the job of its first entry gone from Ganeti's list
/// (archived, lost) while the second's is still there: the second is adopted, never submitted
/// again, whatever becomes of the first (found by the safety checker at seed 4634: an instance
/// repair's untag ran twice under one intent).
#[tokio::test]
async fn an_entry_whose_job_is_listed_is_adopted_though_the_one_before_left_the_list() {
    let w = world().await;
    let h = holder(41);
    // The holder has begun: an earlier entry of it ran.
    record_tags(&w, &h, 1);
    assert_eq!(w.exec.submit(&w.ganeti, None, 1).await.unwrap().len(), 1);
    let tag = |key: &str, tag: &str| {
        Entry::new(
            h.clone(),
            key,
            Action::ganeti(Op::add_node_tags(&w.node, vec![tag.to_owned()])),
            "tag",
            0,
            DAY_MS,
        )
    };
    let pair = vec![
        tag("first", "a"),
        tag("second", "b").after(["first".to_owned()]),
    ];
    // Before the crash: recorded and submitted whole, the first job vanishing at once; the
    // marks of the submissions never written (this ledger is the state before them).
    let crashed = Executor::new(Arc::new(MemoryLedger::default()));
    crashed.record(&pair).unwrap();
    w.sim.vanish_next_jobs(1);
    crashed.submit(&w.ganeti, None, 2).await.unwrap();
    let second_jobs = || {
        w.sim
            .submissions()
            .iter()
            .filter(|s| s.intent.as_deref().is_some_and(|i| i.ends_with("/second")))
            .count()
    };
    assert_eq!(second_jobs(), 1, "{:?}", w.sim.submissions());
    // After it: the same entries recorded, nothing known of their jobs.
    w.exec.record(&pair).unwrap();
    let changed = w
        .exec
        .adopt_of(&w.ganeti, |_| true, |_| Unadopted::JudgeAgain, 3)
        .await
        .unwrap()
        .unwrap();
    assert!(
        changed.iter().any(|e| e.key == "second" && e.job.is_some()),
        "{changed:#?}"
    );
    w.exec.submit(&w.ganeti, None, 4).await.unwrap();
    w.exec.poll(&w.ganeti, 5).await.unwrap();
    w.exec.submit(&w.ganeti, None, 6).await.unwrap();
    assert_eq!(second_jobs(), 1, "{:?}", w.sim.submissions());
}

/// A failed read of Ganeti's job list holds every submission back (of every holder) until a
/// read succeeds; a complete list that does not show an uncertain entry's job lets it be
/// submitted again.
#[tokio::test]
async fn a_failed_job_list_read_holds_every_submission_back() {
    let w = world().await;
    let (h, other) = (holder(22), holder(23));
    record_tags(&w, &h, 1);
    lose_next_answer(&w);
    w.exec.submit(&w.ganeti, None, 1).await.unwrap();
    assert_eq!(w.sim.submissions().len(), 1);
    fail_next_job_list(&w);
    let adopted = w
        .exec
        .adopt_of(&w.ganeti, |_| true, |_| Unadopted::Retry, 2)
        .await
        .unwrap();
    assert_eq!(adopted, None, "the job list could not be read");
    record_tags(&w, &other, 1);
    let submitted = w.exec.submit(&w.ganeti, None, 3).await.unwrap();
    assert!(submitted.is_empty(), "{submitted:?}");
    assert_eq!(w.sim.duplicate_intents(), Vec::<String>::new());
    assert_eq!(w.sim.submissions().len(), 1);
    // The next read adopts the job; the other holder's entry goes.
    let adopted = w
        .exec
        .adopt_of(&w.ganeti, |_| true, |_| Unadopted::Retry, 4)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(adopted.len(), 1);
    let submitted = w.exec.submit(&w.ganeti, None, 5).await.unwrap();
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0].holder, other);
    assert_eq!(w.sim.duplicate_intents(), Vec::<String>::new());
    // Its job vanished with the queue (not in a complete list): submitted again, once.
    let lost = record_tags(&w, &holder(24), 1);
    w.sim.vanish_next_jobs(1);
    lose_next_answer(&w);
    w.exec.submit(&w.ganeti, None, 6).await.unwrap();
    w.exec
        .adopt_of(&w.ganeti, |_| true, |_| Unadopted::Retry, 7)
        .await
        .unwrap()
        .unwrap();
    let again = w.exec.submit(&w.ganeti, None, 8).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].key, lost[0].key);
}

/// After a restart, the entries recorded are not submitted before a job list has been read:
/// a process before may have submitted them.
#[tokio::test]
async fn after_a_restart_nothing_is_submitted_before_the_job_list_is_read() {
    let w = world().await;
    let ledger = Arc::new(MemoryLedger::default());
    let before = Executor::new(ledger.clone());
    let h = holder(25);
    before.record(&tag_entries(&w, &h, 2)).unwrap();
    lose_next_answer(&w);
    before.submit(&w.ganeti, None, 1).await.unwrap();
    drop(before);
    let submitted = w.sim.submissions().len();
    assert_eq!(submitted, 2, "both created, one answer lost");
    // The restarted process: its first job list read fails.
    let restarted = Executor::new(ledger);
    fail_next_job_list(&w);
    let adopted = restarted
        .adopt_of(&w.ganeti, |_| true, |_| Unadopted::Retry, 2)
        .await
        .unwrap();
    assert_eq!(adopted, None);
    assert!(
        restarted
            .submit(&w.ganeti, None, 3)
            .await
            .unwrap()
            .is_empty()
    );
    // Without any adoption at all (a duty submitting first), neither.
    let fresh = Executor::new(restarted.ledger.clone());
    assert!(fresh.submit(&w.ganeti, None, 3).await.unwrap().is_empty());
    assert_eq!(w.sim.submissions().len(), submitted);
    assert_eq!(w.sim.duplicate_intents(), Vec::<String>::new());
}

/// Ganeti's refusal (HTTP 4xx: no job created) fails the entry: it is not asked again every
/// round.
#[tokio::test]
async fn a_refused_submission_fails_its_entry_and_is_not_asked_again() {
    let w = world().await;
    let ganeti = w.sim.client_on(&w.sim.master());
    let h = holder(26);
    let gone = Entry::new(
        h.clone(),
        "tag",
        Action::ganeti(Op::AddTags {
            target: nodecare_ganeti::TagTarget::Instance("no-such-instance".into()),
            tags: vec!["t".into()],
        }),
        "tag",
        0,
        DAY_MS,
    );
    let after = Entry::new(
        h.clone(),
        "then",
        Action::ganeti(Op::add_node_tags(&w.node, vec!["t".into()])),
        "then",
        0,
        DAY_MS,
    )
    .after(["tag".to_owned()]);
    w.exec.record(&[gone, after]).unwrap();
    let first = w.exec.submit_reporting(&ganeti, None, 1).await.unwrap();
    assert_eq!(first.refused.len(), 1);
    for now in 2..5 {
        w.exec
            .adopt_of(&ganeti, |_| true, |_| Unadopted::Retry, now)
            .await
            .unwrap();
        w.exec.submit(&ganeti, None, now).await.unwrap();
    }
    let writes = w.sim.writes();
    assert_eq!(writes.len(), 1, "asked once: {writes:?}");
    let entries = w.exec.ledger().of_holder(&h).unwrap();
    assert_eq!(entries[0].state.as_str(), "failed", "{entries:?}");
    assert!(
        entries[0].state.why().unwrap().contains("refused"),
        "{entries:?}"
    );
    assert_eq!(entries[1].state.as_str(), "canceled", "{entries:?}");
}

/// A Ganeti client whose cancels answer slowly (the cancel is carried out at once, its answer
/// comes `pause` later), and whose running job `ends` finishes once the first answer came.
#[derive(Debug)]
struct SlowCancels {
    sim: Simulation,
    inner: nodecare_ganeti::rapi::RapiClient,
    pause: Duration,
    ends: JobId,
}

impl Ganeti for SlowCancels {
    fn cluster_info(&self) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::ClusterInfo> {
        Ganeti::cluster_info(&self.inner)
    }
    fn nodes(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Node>> {
        Ganeti::nodes(&self.inner)
    }
    fn instances(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Instance>> {
        Ganeti::instances(&self.inner)
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "a wrapper passes on what it is given"
    )]
    fn submit<'a>(
        &'a self,
        op: &'a Op,
        reason: &'a Reason,
    ) -> nodecare_ganeti::GanetiFuture<'a, JobId> {
        Ganeti::submit(&self.inner, op, reason)
    }
    fn groups(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Group>> {
        Ganeti::groups(&self.inner)
    }
    fn tags<'a>(
        &'a self,
        target: &'a nodecare_ganeti::TagTarget,
    ) -> nodecare_ganeti::GanetiFuture<'a, Vec<String>> {
        Ganeti::tags(&self.inner, target)
    }
    fn job(&self, id: JobId) -> nodecare_ganeti::GanetiFuture<'_, Job> {
        Ganeti::job(&self.inner, id)
    }
    fn jobs(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::JobSummary>> {
        Ganeti::jobs(&self.inner)
    }
    fn cancel_job(
        &self,
        id: JobId,
    ) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::JobCancel> {
        Box::pin(async move {
            let answer = Ganeti::cancel_job(&self.inner, id).await;
            tokio::time::sleep(self.pause).await;
            self.sim.with_cluster(|c| c.stuck.remove(&self.ends));
            answer
        })
    }
}

/// A cancel asked while the first job of a chain runs and the others wait behind it: the jobs
/// that had not started are asked first (the first of each chain among them side by side), so
/// that none starts when the running job ends between two slow cancels; the jobs after them
/// end canceled by Ganeti's own rule.
#[tokio::test]
async fn a_cancel_lets_no_queued_job_of_its_chain_start() {
    let w = world().await;
    w.sim.set_job_delay(Duration::ZERO);
    let h = holder(27);
    let tag = |key: &str, after: &[&str]| {
        Entry::new(
            h.clone(),
            key,
            Action::ganeti(Op::add_node_tags(&w.node, vec![key.to_owned()])),
            key,
            0,
            DAY_MS,
        )
        .after(after.iter().map(|k| (*k).to_owned()))
    };
    let drain = Entry::new(
        h.clone(),
        "drain",
        Action::ganeti(Op::drain(&w.node)),
        "drain",
        0,
        DAY_MS,
    );
    w.exec
        .record(&[
            drain,
            tag("m1", &["drain"]),
            tag("m2", &["drain"]),
            tag("m3", &["m1"]),
        ])
        .unwrap();
    w.sim.stick_next_jobs(1);
    let submitted = w.exec.submit(&w.ganeti, None, 1).await.unwrap();
    assert_eq!(submitted.len(), 4);
    let job = |key: &str| {
        submitted
            .iter()
            .find(|e| e.key == key)
            .and_then(|e| e.job)
            .unwrap()
    };
    let status = |id: JobId| w.sim.peek(|c| c.jobs[&id].status);
    assert_eq!(status(job("drain")), JobStatus::Running);
    let queued = ["m1", "m2", "m3"].map(job);
    assert!(queued.iter().all(|id| status(*id) == JobStatus::Queued));
    let slow = SlowCancels {
        sim: w.sim.clone(),
        inner: w.sim.client(),
        pause: Duration::from_millis(30),
        ends: job("drain"),
    };
    w.exec.cancel(&slow, &h, "canceled", 2).await.unwrap();
    assert!(w.sim.settle(Duration::from_secs(10)).await);
    assert_eq!(status(job("drain")), JobStatus::Success, "it ran on");
    let after: Vec<(JobId, JobStatus)> = queued.iter().map(|id| (*id, status(*id))).collect();
    assert!(
        after.iter().all(|(_, s)| *s == JobStatus::Canceled),
        "queued at the cancel, then: {after:?}"
    );
}

/// Jobs that ended and were archived by Ganeti while nobody followed them (the coordinator
/// down longer than the watcher's archive age) are read with their outcome, one by one and
/// through the job query of many, not as vanished.
#[tokio::test]
async fn archived_jobs_are_read_with_their_outcome() {
    let w = world().await;
    let (few, many) = (holder(28), holder(29));
    record_tags(&w, &few, 1);
    record_tags(&w, &many, BULK_POLL + 2);
    w.exec.submit(&w.ganeti, None, 1).await.unwrap();
    assert!(w.sim.settle(Duration::from_secs(10)).await);
    let archived = w.sim.with_cluster(|c| c.archive(u64::MAX));
    assert_eq!(archived.len(), BULK_POLL + 3);
    assert!(
        Ganeti::jobs(&w.ganeti).await.unwrap().is_empty(),
        "not listed"
    );
    let changed = w.exec.poll_of(&w.ganeti, |h| *h == few, 2).await.unwrap();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].entry.state, State::Succeeded, "{changed:#?}");
    let changed = w.exec.poll(&w.ganeti, 3).await.unwrap();
    assert_eq!(changed.len(), BULK_POLL + 2);
    assert!(
        changed.iter().all(|c| c.entry.state == State::Succeeded),
        "{changed:#?}"
    );
}

/// With [`Unadopted::JudgeAgain`], an uncertain entry that a complete job list does not show
/// is canceled when nothing of its holder reached Ganeti (what comes after it never runs, and
/// nothing is submitted: its duty proposes the work again), and submitted again when its holder
/// has begun. Uncertainty still submits nothing before adoption.
#[tokio::test]
async fn an_unadopted_entry_of_a_holder_that_never_began_is_judged_again() {
    let w = world().await;
    let fresh = holder(31);
    let chain_of = |h: &Holder| -> Vec<Entry> { chain(&w, h).into_iter().take(2).collect() };
    w.exec.record(&chain_of(&fresh)).unwrap();
    // The drain's answer is lost and its job vanishes from the queue at once.
    lose_next_answer(&w);
    w.sim.vanish_next_jobs(1);
    let first = w.exec.submit_reporting(&w.ganeti, None, 1).await.unwrap();
    assert_eq!(first.refused.len(), 1, "{first:?}");
    w.exec.submit(&w.ganeti, None, 2).await.unwrap();
    assert_eq!(
        w.sim.submissions().len(),
        1,
        "not submitted again before adoption"
    );
    // A holder that began: its drain has a job; its migrate, recorded after, is uncertain.
    let begun = holder(32);
    let mut begun_chain = chain_of(&begun);
    let migrate = begun_chain.pop().unwrap();
    w.exec.record(&begun_chain).unwrap();
    assert_eq!(
        w.exec
            .submit(&w.ganeti, Some(&begun), 3)
            .await
            .unwrap()
            .len(),
        1
    );
    w.exec.record(&[migrate]).unwrap();
    let changed = w
        .exec
        .adopt_of(&w.ganeti, |_| true, |_| Unadopted::JudgeAgain, 4)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert_eq!(changed[0].holder, fresh);
    assert_eq!(changed[0].key, "drain");
    assert!(
        matches!(&changed[0].state, State::Canceled { why } if why.starts_with("never submitted")),
        "{changed:?}"
    );
    let submitted = w.exec.submit(&w.ganeti, None, 5).await.unwrap();
    let keys: Vec<(Holder, String)> = submitted
        .iter()
        .map(|e| (e.holder.clone(), e.key.clone()))
        .collect();
    assert_eq!(keys, vec![(begun.clone(), "migrate_a".to_owned())]);
    let of_fresh = w.exec.ledger().of_holder(&fresh).unwrap();
    assert!(
        of_fresh
            .iter()
            .all(|e| matches!(e.state, State::Canceled { .. })),
        "{of_fresh:?}"
    );
    assert!(w.sim.duplicate_intents().is_empty());
}
