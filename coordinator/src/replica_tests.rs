#![allow(
    clippy::disallowed_methods,
    reason = "the test submits through the fencing wrapper itself"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeMap;

use super::*;
use nodecare_ganeti::NodeRole;

/// Agents kept in memory, each judging pushes and reads as the real agent does (`decide_push`,
/// `decide_read`): for tests of takeovers, fencing and lost agents without HTTP.
#[derive(Debug, Default)]
struct MemoryPeers {
    key: Option<HmacKey>,
    kept: std::sync::Mutex<BTreeMap<String, Vec<u8>>>,
    promised: std::sync::Mutex<BTreeMap<String, u64>>,
    down: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// How long each push takes.
    delay: std::sync::Mutex<Duration>,
}

impl MemoryPeers {
    /// Agents verifying with `key`.
    fn new(key: HmacKey) -> Self {
        Self {
            key: Some(key),
            ..Self::default()
        }
    }

    /// Makes `node`'s agent unreachable (or reachable again).
    fn set_down(&self, node: &str, down: bool) {
        if let Ok(mut set) = self.down.lock() {
            if down {
                set.insert(node.to_owned());
            } else {
                set.remove(node);
            }
        }
    }

    /// The generation `node` keeps.
    fn held(&self, node: &str) -> Option<Generation> {
        let key = self.key.clone()?;
        let kept = self.kept.lock().ok()?;
        let frame = kept.get(node)?;
        nodecare_protocol::replica::open_kept(&KeyRing::single(key), frame, node)
            .ok()
            .map(|(header, _)| header.generation)
    }

    /// Makes every push take `delay`.
    fn set_delay(&self, delay: Duration) {
        if let Ok(mut slot) = self.delay.lock() {
            *slot = delay;
        }
    }

    fn is_down(&self, node: &str) -> bool {
        self.down.lock().is_ok_and(|set| set.contains(node))
    }

    /// The epoch `node` promised (0: none).
    fn promised(&self, node: &str) -> u64 {
        self.promised
            .lock()
            .ok()
            .and_then(|promised| promised.get(node).copied())
            .unwrap_or(0)
    }
}

impl ReplicaPeers for MemoryPeers {
    fn push<'a>(&'a self, peer: &'a Peer, frame: Vec<u8>) -> PeerFuture<'a, PushReply> {
        Box::pin(async move {
            let delay = self.delay.lock().map(|delay| *delay).unwrap_or_default();
            tokio::time::sleep(delay).await;
            if self.is_down(&peer.node) {
                return Err("connection refused".to_owned());
            }
            let key = self.key.clone().ok_or("no key")?;
            let ring = KeyRing::single(key);
            let (header, _) = nodecare_protocol::replica::open_push(
                &ring,
                &frame,
                now_ms(),
                VerifyPolicy::default(),
                &peer.node,
            )
            .map_err(|error| error.to_string())?;
            let mut kept = self.kept.lock().map_err(|error| error.to_string())?;
            let held = kept.get(&peer.node).and_then(|frame| {
                nodecare_protocol::replica::open_kept(&ring, frame, &peer.node)
                    .ok()
                    .map(|(header, _)| header)
            });
            let promised = self.promised(&peer.node);
            match nodecare_protocol::replica::decide_push(held.as_ref(), promised, &header) {
                nodecare_protocol::replica::PushDecision::Keep => {
                    kept.insert(peer.node.clone(), frame);
                    Ok(PushReply::Accepted(header.generation))
                }
                nodecare_protocol::replica::PushDecision::Same => {
                    Ok(PushReply::Accepted(header.generation))
                }
                nodecare_protocol::replica::PushDecision::Refuse { held } => {
                    Ok(PushReply::Refused(held))
                }
                nodecare_protocol::replica::PushDecision::Promised { epoch } => {
                    Ok(PushReply::Promised(epoch))
                }
            }
        })
    }

    fn read<'a>(&'a self, peer: &'a Peer, body: Vec<u8>) -> PeerFuture<'a, Vec<u8>> {
        Box::pin(async move {
            if self.is_down(&peer.node) {
                return Err("connection refused".to_owned());
            }
            let key = self.key.clone().ok_or("no key")?;
            let ring = KeyRing::single(key.clone());
            let read = nodecare_protocol::replica::open_read(
                &ring,
                &body,
                now_ms(),
                VerifyPolicy::default(),
                &peer.node,
            )
            .map_err(|error| error.to_string())?;
            let kept = self.kept.lock().map_err(|error| error.to_string())?;
            let held = kept.get(&peer.node).and_then(|frame| {
                nodecare_protocol::replica::open_kept(&ring, frame, &peer.node)
                    .ok()
                    .map(|(header, _)| (header, frame.clone()))
            });
            let decision = nodecare_protocol::replica::decide_read(
                held.as_ref().map(|(header, _)| header),
                self.promised(&peer.node),
                read.epoch,
            );
            if let nodecare_protocol::replica::ReadDecision::Promise(epoch) = decision {
                self.promised
                    .lock()
                    .map_err(|error| error.to_string())?
                    .insert(peer.node.clone(), epoch);
            }
            nodecare_protocol::replica::sign_answer(
                &Signer::new(key, peer.node.clone()),
                &read.read_nonce,
                decision,
                held.as_ref()
                    .map(|(header, frame)| (header, frame.as_slice())),
                now_ms(),
                REQUEST_TTL_MS,
            )
            .map_err(|error| error.to_string())
        })
    }
}

fn generation(epoch: u64, number: u64) -> Generation {
    Generation { epoch, number }
}

#[test]
fn quorums_intersect() {
    let table = [
        (1, 1, 1),
        (2, 2, 1),
        (3, 2, 2),
        (4, 3, 2),
        (5, 3, 3),
        (10, 6, 5),
    ];
    for (candidates, write, read) in table {
        assert_eq!(write_quorum(candidates), write, "{candidates}");
        assert_eq!(read_quorum(candidates), read, "{candidates}");
        assert!(
            write + read > candidates,
            "{candidates}: the sets must share a node"
        );
    }
}

#[test]
fn push_judgements() {
    let ours = generation(2, 3);
    let reply = |node: &str, reply: PushReply| (node.to_owned(), reply);
    // A majority keeps it; a node holding the same generation with other bytes does not count.
    assert_eq!(
        judge_push(
            ours,
            3,
            &[
                reply("b", PushReply::Accepted(ours)),
                reply("a", PushReply::Accepted(ours)),
                reply("c", PushReply::Refused(ours)),
            ]
        ),
        PushOutcome::Kept(vec!["a".into(), "b".into()])
    );
    assert_eq!(
        judge_push(
            ours,
            3,
            &[
                reply("a", PushReply::Accepted(ours)),
                reply("c", PushReply::Refused(ours))
            ]
        ),
        PushOutcome::NoQuorum(vec!["a".into()])
    );
    // One node holding a newer generation supersedes, even beside a majority.
    assert_eq!(
        judge_push(
            ours,
            3,
            &[
                reply("a", PushReply::Accepted(ours)),
                reply("b", PushReply::Accepted(ours)),
                reply("c", PushReply::Refused(generation(3, 0))),
            ]
        ),
        PushOutcome::Superseded {
            node: "c".into(),
            held: generation(3, 0)
        }
    );
    // A node that promised a later epoch to a takeover supersedes too.
    assert_eq!(
        judge_push(
            ours,
            3,
            &[
                reply("a", PushReply::Accepted(ours)),
                reply("b", PushReply::Accepted(ours)),
                reply("c", PushReply::Promised(3)),
            ]
        ),
        PushOutcome::Superseded {
            node: "c".into(),
            held: generation(3, 0)
        }
    );
}

#[test]
fn takeover_epochs() {
    assert_eq!(takeover_epoch(Generation::default(), 0), 1);
    assert_eq!(takeover_epoch(generation(2, 7), 0), 3);
    assert_eq!(takeover_epoch(generation(2, 7), 5), 6);
    assert_eq!(takeover_epoch(generation(6, 0), 5), 7);
}

#[test]
fn takeover_plans() {
    let local = generation(2, 7);
    // Nothing newer anywhere: own state, next epoch above every epoch seen.
    let plan = plan_takeover(
        local,
        0,
        &[
            ("b".into(), generation(2, 7)),
            ("c".into(), generation(1, 9)),
        ],
    );
    assert_eq!(plan.restore_from, None);
    assert_eq!(plan.start, generation(3, 0));
    // The epoch the reads named and the nodes promised.
    let plan = plan_takeover(local, 5, &[("b".into(), generation(2, 7))]);
    assert_eq!(plan.start, generation(5, 0));
    // A newer copy: restored, the newest one (ties: the first node by name).
    let plan = plan_takeover(
        local,
        3,
        &[
            ("c".into(), generation(2, 9)),
            ("b".into(), generation(2, 9)),
            ("d".into(), generation(2, 8)),
        ],
    );
    assert_eq!(plan.restore_from, Some(("b".into(), generation(2, 9))));
    assert_eq!(plan.start, generation(3, 0));
    // A later epoch wins over a higher number.
    let plan = plan_takeover(
        local,
        0,
        &[
            ("b".into(), generation(4, 0)),
            ("c".into(), generation(3, 99)),
        ],
    );
    assert_eq!(plan.restore_from, Some(("b".into(), generation(4, 0))));
    assert_eq!(plan.start, generation(5, 0));
    // A fresh cluster.
    let plan = plan_takeover(Generation::default(), 1, &[]);
    assert_eq!(plan.restore_from, None);
    assert_eq!(plan.start, generation(1, 0));
}

fn node(name: &str, candidate: bool, master: bool) -> Node {
    let mut node: Node = serde_json::from_value(serde_json::json!({
        "name": name,
        "uuid": format!("uuid-{name}"),
        "role": if master { "M" } else if candidate { "C" } else { "R" },
        "drained": false,
        "offline": false,
        "master_candidate": candidate || master,
        "vm_capable": true,
        "primary_ip": "192.0.2.1",
        "secondary_ip": "192.0.2.1",
        "tags": [],
        "group": "default",
        "primary_instances": [],
        "secondary_instances": [],
    }))
    .unwrap();
    node.role = if master {
        NodeRole::Master
    } else if candidate {
        NodeRole::MasterCandidate
    } else {
        NodeRole::Regular
    };
    node
}

fn cluster(master: &str) -> Vec<Node> {
    ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|name| node(name, *name != "n4", *name == master))
        .collect()
}

fn urls() -> AgentUrls {
    AgentUrls {
        template: "http://{name}:1815".into(),
        overrides: std::sync::Arc::default(),
    }
}

fn key() -> HmacKey {
    HmacKey::new(b"replicator test key".to_vec())
}

fn replicator(
    dir: &std::path::Path,
    name: &str,
    peers: &Arc<MemoryPeers>,
) -> (Arc<Store>, Replicator) {
    let store = Arc::new(Store::open(&dir.join(format!("{name}.db"))).unwrap());
    let replicator = Replicator::new(
        Arc::clone(&store),
        Arc::clone(peers) as Arc<dyn ReplicaPeers>,
        key(),
        name.into(),
        urls(),
        LEASE,
    );
    (store, replicator)
}

/// The lease of the tests' replicators: a takeover waits 330 ms.
const LEASE: Lease = Lease {
    duration: Duration::from_millis(200),
    call_bound: Duration::from_millis(100),
};

/// A new master waits out the old master's lease between its read and its push: meanwhile the
/// master candidates still hold the old master's state (the promises already refuse its
/// pushes), and the new epoch is pushed only once every write the old master started under its
/// last confirmation is over.
#[tokio::test]
async fn a_takeover_waits_out_the_old_masters_lease_before_it_pushes() {
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (_, old) = replicator(dir.path(), "n1", &peers);
    let (_, new) = replicator(dir.path(), "n2", &peers);
    old.take_over(&cluster("n1")).await.unwrap();
    old.confirm_write().await.unwrap();
    let confirmed = tokio::time::Instant::now();
    let held = peers.held("n1").unwrap();
    assert_eq!(held, generation(1, 1));
    let new = Arc::new(new);
    let taking_over = tokio::spawn({
        let new = Arc::clone(&new);
        async move { new.take_over(&cluster("n2")).await }
    });
    // Read and promised, not pushed: the old master is fenced, nothing of the new one is kept.
    tokio::time::sleep(LEASE.takeover_wait() / 2).await;
    assert_eq!(peers.promised("n3"), 2);
    assert!(matches!(
        old.confirm_write().await,
        Err(ReplicaError::Superseded { .. })
    ));
    for node in ["n1", "n2", "n3"] {
        assert_eq!(peers.held(node), Some(held), "{node}");
    }
    assert!(!new.has_taken_over().await);
    taking_over.await.unwrap().unwrap();
    // The old master's last write started within its lease of the push before the read and
    // ended within call_bound: the new epoch comes after both.
    assert!(
        confirmed.elapsed() >= LEASE.takeover_wait(),
        "{:?}",
        confirmed.elapsed()
    );
    assert!(confirmed.elapsed() >= LEASE.validity() + LEASE.call_bound);
    assert_eq!(peers.held("n2"), Some(generation(2, 0)));
    assert!(new.has_taken_over().await);
}

/// A push that takes longer than the lease admits writes after it confirms nothing a write
/// could start under: the write is held back (pushed again first, once), and Ganeti gets no job.
#[tokio::test]
async fn a_write_is_not_started_when_its_confirmation_outlasted_the_lease() {
    use nodecare_ganeti::{Op, Reason};
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (_, replicator) = replicator(dir.path(), "n1", &peers);
    let replicator = Arc::new(replicator);
    let sim = nodecare_ganeti_sim::Simulation::new(
        nodecare_ganeti_sim::model::SimConfig::from_spec(4, "", "sim.test").unwrap(),
    )
    .unwrap();
    let ganeti = ReplicatedGaneti::new(Arc::new(sim.client()), Arc::clone(&replicator));
    let nodes = ganeti.nodes().await.unwrap();
    replicator.take_over(&nodes).await.unwrap();
    let reason = Reason::new(uuid::Uuid::new_v4(), "drain", "test");
    let node = nodes[1].name.clone();
    peers.set_delay(LEASE.validity() + Duration::from_millis(20));
    let error = ganeti
        .submit(&Op::drain(node.clone()), &reason)
        .await
        .unwrap_err();
    assert!(
        matches!(error, GanetiError::NotSubmitted(ref message) if message.contains("lease")),
        "{error}"
    );
    assert!(error.is_transient());
    assert!(matches!(
        replicator.confirm_write().await,
        Err(ReplicaError::LeaseExpired { .. })
    ));
    assert_eq!(sim.submissions().len(), 0, "no job");
    // A push within the lease: the job is submitted.
    peers.set_delay(Duration::ZERO);
    ganeti.submit(&Op::drain(node), &reason).await.unwrap();
    assert_eq!(sim.submissions().len(), 1);
}

#[tokio::test]
async fn writes_wait_for_a_takeover_and_a_majority() {
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (store, first) = replicator(dir.path(), "n1", &peers);
    assert_eq!(first.ensure().await, Err(ReplicaError::NotTakenOver));
    first.take_over(&cluster("n1")).await.unwrap();
    // Every master candidate (n1..n3, not n4) holds epoch 1.
    for name in ["n1", "n2", "n3"] {
        assert_eq!(peers.held(name), Some(generation(1, 0)), "{name}");
    }
    assert_eq!(peers.held("n4"), None);
    // Unchanged state: pushed all the same (the check that the epoch is still current).
    first.ensure().await.unwrap();
    assert_eq!(peers.held("n2"), Some(generation(1, 1)));
    // A change: the next write pushes it.
    store.save_document("example", &1).unwrap();
    first.ensure().await.unwrap();
    assert_eq!(peers.held("n2"), Some(generation(1, 2)));
    // One candidate down: 2 of 3 still a majority.
    peers.set_down("n3", true);
    store.save_document("example", &2).unwrap();
    first.ensure().await.unwrap();
    assert_eq!(peers.held("n3"), Some(generation(1, 2)));
    // Two down: writes wait, visibly.
    peers.set_down("n2", true);
    store.save_document("example", &3).unwrap();
    let error = first.ensure().await.unwrap_err();
    assert!(
        matches!(
            error,
            ReplicaError::WriteQuorum {
                acked: 1,
                needed: 2,
                ..
            }
        ),
        "{error}"
    );
    assert!(first.status().error.is_some());
    // And go on once one is back, carrying the change.
    peers.set_down("n2", false);
    first.ensure().await.unwrap();
    assert!(peers.held("n2").unwrap() > generation(1, 2));
    assert_eq!(first.status().error, None);
}

#[tokio::test]
async fn a_new_master_continues_from_the_newest_copy_and_fences_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (old_store, old) = replicator(dir.path(), "n1", &peers);
    let (new_store, new) = replicator(dir.path(), "n2", &peers);
    // n2's own database holds something stale from long ago.
    new_store.save_document("decision", &"stale").unwrap();
    old.take_over(&cluster("n1")).await.unwrap();
    old_store.save_document("decision", &"canceled").unwrap();
    old.ensure().await.unwrap();

    // The master fails over to n2; n1's agent is gone with its node.
    peers.set_down("n1", true);
    new.take_over(&cluster("n2")).await.unwrap();
    assert_eq!(
        new_store.document::<String>("decision").unwrap().as_deref(),
        Some("canceled"),
        "the operator's decision survived the failover"
    );
    let status = new.status();
    assert_eq!(status.generation, Some(generation(2, 0)));
    assert_eq!(
        status.restored_from.map(|(_, generation)| generation),
        Some(generation(1, 1))
    );

    // The old coordinator wakes up believing it is the master: its writes are refused.
    peers.set_down("n1", false);
    old_store.save_document("decision", &"revived").unwrap();
    let error = old.ensure().await.unwrap_err();
    assert!(matches!(error, ReplicaError::Superseded { .. }), "{error}");
    assert!(!old.has_taken_over().await);
    assert_eq!(
        new_store.document::<String>("decision").unwrap().as_deref(),
        Some("canceled")
    );
    // The new master goes on writing.
    new_store
        .save_document("decision", &"acknowledged")
        .unwrap();
    new.ensure().await.unwrap();
    assert_eq!(peers.held("n3"), Some(generation(2, 1)));
}

#[tokio::test]
async fn a_takeover_without_enough_answers_waits() {
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (_, first) = replicator(dir.path(), "n1", &peers);
    first.take_over(&cluster("n1")).await.unwrap();
    let (_, second) = replicator(dir.path(), "n2", &peers);
    peers.set_down("n1", true);
    peers.set_down("n3", true);
    let error = second.take_over(&cluster("n2")).await.unwrap_err();
    assert!(
        matches!(
            error,
            ReplicaError::ReadQuorum {
                answered: 1,
                needed: 2,
                ..
            }
        ),
        "{error}"
    );
    assert!(!second.has_taken_over().await);
    assert_eq!(second.ensure().await, Err(ReplicaError::NotTakenOver));
    peers.set_down("n3", false);
    second.take_over(&cluster("n2")).await.unwrap();
    // n2 promised epoch 2 to the read that waited: this takeover reads again above it.
    assert_eq!(second.status().generation, Some(generation(3, 0)));
    assert_eq!(peers.promised("n2"), 3);
}

/// The model check's second finding: a superseded master whose state is unchanged since its
/// last push that reached a majority admitted a Ganeti write without asking any master
/// candidate. `ensure` pushes every time, so it learns that it is superseded first.
#[tokio::test]
async fn a_superseded_master_with_unchanged_state_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (_, old) = replicator(dir.path(), "n1", &peers);
    let (_, new) = replicator(dir.path(), "n2", &peers);
    old.take_over(&cluster("n1")).await.unwrap();
    old.ensure().await.unwrap();
    new.take_over(&cluster("n2")).await.unwrap();
    let error = old.ensure().await.unwrap_err();
    assert!(matches!(error, ReplicaError::Superseded { .. }), "{error}");
    assert!(!old.has_taken_over().await);
}

/// The model check's first finding: between a takeover's read and its push, the old master's
/// push reached a majority (and its operator action was acknowledged), then the new master's
/// push overwrote it with the older state it had read. The read's promise refuses that push.
#[tokio::test]
async fn the_old_masters_push_after_a_takeovers_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (old_store, old) = replicator(dir.path(), "n1", &peers);
    let (new_store, new) = replicator(dir.path(), "n2", &peers);
    old.take_over(&cluster("n1")).await.unwrap();
    // The new master's read (epoch 2) reaches every master candidate ...
    let candidates = candidates(&cluster("n2"), &urls());
    let round = new.read_copies(&candidates, 2).await;
    assert_eq!(round.promised, 3, "{:?}", round.errors);
    // ... then the old master's API writes a cancel and pushes it: refused, not acknowledged.
    old_store.save_document("decision", &"canceled").unwrap();
    let error = old.ensure().await.unwrap_err();
    assert!(
        matches!(error, ReplicaError::Superseded { held, .. } if held == generation(2, 0)),
        "{error}"
    );
    assert_eq!(peers.held("n3"), Some(generation(1, 0)));
    // The new master takes over (above the epoch it promised itself) from the state it read.
    new.take_over(&cluster("n2")).await.unwrap();
    assert_eq!(new_store.document::<String>("decision").unwrap(), None);
    assert_eq!(new.status().generation, Some(generation(3, 0)));
}

#[tokio::test]
async fn ganeti_writes_wait_for_the_state() {
    use nodecare_ganeti::{Op, Reason};
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (_, replicator) = replicator(dir.path(), "n1", &peers);
    let replicator = Arc::new(replicator);
    let sim = nodecare_ganeti_sim::Simulation::new(
        nodecare_ganeti_sim::model::SimConfig::from_spec(4, "", "sim.test").unwrap(),
    )
    .unwrap();
    let ganeti = ReplicatedGaneti::new(Arc::new(sim.client()), Arc::clone(&replicator));
    let reason = Reason::new(uuid::Uuid::new_v4(), "drain", "test");
    let node = ganeti.nodes().await.unwrap()[1].name.clone();
    // Reads pass; a write before the takeover is held back, transiently.
    let error = ganeti
        .submit(&Op::drain(node.clone()), &reason)
        .await
        .unwrap_err();
    assert!(
        matches!(error, GanetiError::NotSubmitted(_)) && error.is_transient(),
        "{error}"
    );
    let nodes = ganeti.nodes().await.unwrap();
    replicator.take_over(&nodes).await.unwrap();
    ganeti
        .submit(&Op::drain(node.clone()), &reason)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_takeover_passes_over_a_copy_that_does_not_restore() {
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(MemoryPeers::new(key()));
    let (old_store, old) = replicator(dir.path(), "n1", &peers);
    let (new_store, new) = replicator(dir.path(), "n2", &peers);
    old.take_over(&cluster("n1")).await.unwrap();
    old_store.save_document("decision", &"canceled").unwrap();
    old.ensure().await.unwrap();
    // A holder of the cluster key pushes a garbage snapshot of a high generation to n3.
    let garbage = b"not a database".repeat(100);
    let header = nodecare_protocol::replica::ReplicaHeader::describe(
        "n3",
        "n1",
        generation(9, 0),
        &garbage,
        now_ms(),
    );
    let frame = nodecare_protocol::replica::sign_push(
        &Signer::new(key(), "n3".to_owned()),
        &header,
        &garbage,
        1,
        now_ms(),
        REQUEST_TTL_MS,
    )
    .unwrap();
    let n3 = Peer {
        node: "n3".into(),
        base_url: "http://n3:1815".into(),
    };
    assert_eq!(
        peers.push(&n3, frame).await.unwrap(),
        PushReply::Accepted(generation(9, 0))
    );
    // The master fails over to n2: it takes over from the newest copy that restores.
    peers.set_down("n1", true);
    new.take_over(&cluster("n2")).await.unwrap();
    assert_eq!(
        new_store.document::<String>("decision").unwrap().as_deref(),
        Some("canceled")
    );
    let status = new.status();
    assert_eq!(
        status.restored_from,
        Some(("n2".to_owned(), generation(1, 1)))
    );
    // Its epoch is above the bad copy's, which the next push replaces.
    assert_eq!(status.generation, Some(generation(10, 0)));
    assert_eq!(peers.held("n3"), Some(generation(10, 0)));
}
