//! What if, against the simulated Ganeti: a what-if predicts the jobs, in order, that the
//! daemon's rounds then really submit for the same change, and the waits; it changes neither
//! the live state nor the cluster; bad questions get clear answers.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]
#![allow(
    clippy::disallowed_methods,
    reason = "the test changes the simulated cluster as another tool would"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nodecare_coordinator::board::Board;
use nodecare_coordinator::config::Config;
use nodecare_coordinator::daemon::reconcile_settings;
use nodecare_coordinator::reconcile::{ReconcileSettings, Reconciler};
use nodecare_coordinator::repair::RepairClient;
use nodecare_coordinator::round::agents::{AgentFuture, AgentReader};
use nodecare_coordinator::scrape::{
    AgentOutcome, AgentResult, AgentTarget, AgentUrls, Observation, StorageHealth,
};
use nodecare_coordinator::store::Store;
use nodecare_coordinator::what_if::{self, Live, WhatIfContext, WhatIfError};
use nodecare_ganeti::{Instance, Node};
use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_protocol::what_if::{Ending, Query, WhatIf};
use nodecare_protocol::{CanonicalJson, DiagnoseStatus, NodeVerdict, ScriptVerdict};

const MASTER: &str = "node1.sim.test";

fn node(i: usize) -> String {
    format!("node{i}.sim.test")
}

/// Five nodes; DRBD instances on nodes 2 and 3 (secondaries on the next node), a diskless
/// one on node 4.
fn cluster() -> Simulation {
    let sim = Simulation::new(
        SimConfig::from_spec(
            5,
            "a:drbd:2,b:drbd:2,c:drbd:3,d:diskless:4,e:drbd:5",
            "sim.test",
        )
        .unwrap(),
    )
    .unwrap();
    sim.set_job_delay(Duration::from_millis(4));
    sim
}

fn settings(max_disrupted_nodes: usize) -> ReconcileSettings {
    let config = Config {
        max_disrupted_nodes,
        ..Config::default()
    };
    let mut settings = reconcile_settings(&config, MASTER.to_owned());
    settings.ssconf_dir = None;
    settings.record_rounds = true;
    settings
}

/// The agents as the daemon would read them: a disk script's verdict per node (Ok elsewhere).
#[derive(Debug)]
struct Agents(BTreeMap<String, DiagnoseStatus>);

impl AgentReader for Agents {
    fn diagnose<'a>(
        &'a self,
        targets: Vec<AgentTarget>,
        _sequences: &'a BTreeMap<String, u64>,
        now_ms: u64,
    ) -> AgentFuture<'a, Vec<AgentResult>> {
        Box::pin(async move {
            targets
                .into_iter()
                .map(|t| {
                    let status = self.0.get(&t.node).copied().unwrap_or(DiagnoseStatus::Ok);
                    let script = ScriptVerdict {
                        status,
                        command: None,
                        details: serde_json::json!({"smart": "reallocated sectors"}),
                        fingerprint: None,
                        reason: None,
                    };
                    let verdict =
                        NodeVerdict::merge(BTreeMap::from([("disk".to_owned(), script)])).unwrap();
                    let original =
                        CanonicalJson::new(&serde_json::to_value(&verdict).unwrap()).unwrap();
                    AgentResult {
                        outcome: AgentOutcome::Verified(Observation {
                            verdict: std::sync::Arc::new(verdict),
                            original: std::sync::Arc::new(original),
                            sequence: now_ms,
                            collected_at_ms: now_ms,
                            expires_at_ms: now_ms + 600_000,
                            stale_reason: None,
                            boot_id: None,
                            reboot_required: None,
                        }),
                        node: t.node,
                        node_uuid: t.node_uuid,
                        elapsed: Duration::ZERO,
                    }
                })
                .collect()
        })
    }

    fn storage<'a>(
        &'a self,
        _nodes: &'a [Node],
        _instances: &'a [Instance],
        _urls: &'a AgentUrls,
        sequences: &'a BTreeMap<String, u64>,
        _now_ms: u64,
    ) -> AgentFuture<'a, StorageHealth> {
        Box::pin(async move {
            StorageHealth {
                sequences: sequences.clone(),
                ..StorageHealth::default()
            }
        })
    }
}

/// `(opcode, target, operation)` of a job.
type Job = (String, String, String);

/// A case: the what-if's query, the verdicts made real, a node drained by someone else, the
/// cap, whether the gate refuses something.
type Case<'a> = (
    &'a str,
    &'a [(usize, DiagnoseStatus)],
    Option<usize>,
    usize,
    bool,
);

/// The daemon's rounds against `sim` with these verdicts, until a round submits nothing and
/// every job ended: the jobs Ganeti received, in order, and the incidents' `blocked_by`.
async fn daemon_runs(
    sim: &Simulation,
    store: &Arc<Store>,
    verdicts: &[(usize, DiagnoseStatus)],
    settings: ReconcileSettings,
) -> (Vec<Job>, BTreeMap<String, Option<String>>) {
    let agents = Agents(verdicts.iter().map(|(i, s)| (node(*i), *s)).collect());
    let mut reconciler = Reconciler::with_agents(
        Arc::new(sim.client()),
        Arc::clone(store),
        Arc::new(agents),
        RepairClient::simulated(),
        settings,
        Arc::new(Board::default()),
        Arc::new(tokio::sync::Mutex::new(())),
    );
    let mut quiet = 0;
    for _ in 0..40 {
        let before = sim.submissions().len();
        reconciler.round().await.unwrap();
        assert!(sim.settle(Duration::from_secs(5)).await);
        quiet = if sim.submissions().len() == before {
            quiet + 1
        } else {
            0
        };
        if quiet == 3 {
            break;
        }
    }
    assert_eq!(quiet, 3, "the daemon's rounds never settled");
    let jobs = sim
        .submissions()
        .into_iter()
        .filter(|s| !s.internal)
        .map(|s| {
            let operation = s.operation().unwrap_or_default().to_owned();
            (s.op_id, s.target, operation)
        })
        .collect();
    let blocked = store
        .incidents()
        .unwrap()
        .into_iter()
        .map(|i| (i.node, i.blocked_by.as_deref().map(without_uuids)))
        .collect();
    (jobs, blocked)
}

/// `text` with each uuid written `<uuid>` (a what-if's incidents are its own).
fn without_uuids(text: &str) -> String {
    text.split(' ')
        .map(|word| {
            let bare = word.trim_end_matches([',', ')', ':', ';']);
            if uuid::Uuid::parse_str(bare).is_ok() {
                word.replace(bare, "<uuid>")
            } else {
                word.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn predicted(what_if: &WhatIf) -> Vec<Job> {
    what_if
        .jobs
        .iter()
        .map(|j| (j.opcode.clone(), j.target.clone(), j.operation.clone()))
        .collect()
}

async fn ask(
    sim: &Simulation,
    store: &Store,
    settings: ReconcileSettings,
    query: &str,
) -> Result<WhatIf, WhatIfError> {
    let context = WhatIfContext::new(settings, Duration::from_secs(30));
    ask_in(sim, store, &context, query).await
}

/// [`ask`] in `context`.
async fn ask_in(
    sim: &Simulation,
    store: &Store,
    context: &WhatIfContext,
    query: &str,
) -> Result<WhatIf, WhatIfError> {
    // The master's RAPI daemon: every write sent to it is recorded (`Simulation::writes`).
    let ganeti = sim.client_on(MASTER);
    let live = Live {
        store,
        ganeti: &ganeti,
        context,
        caller: what_if::Caller::Local,
    };
    what_if::run(live, &Query::parse(Some(query)).unwrap()).await
}

#[tokio::test]
async fn a_what_if_predicts_the_jobs_the_daemon_then_runs() {
    use DiagnoseStatus::{Evacuate, EvacuateFailover};
    // (what the operator asks, the same change made real: verdicts, a node drained by
    // someone else, the cap; whether something waits)
    let cases: [Case<'_>; 5] = [
        (
            "verdict=node2.sim.test:evacuate",
            &[(2, Evacuate)],
            None,
            1,
            false,
        ),
        // Two nodes sharing DRBD instances: node 2's evacuation gives the instances whose
        // secondary node 3 is a new secondary, moves them there and completes; node 3 waits
        // for the cap (the gate refuses it: node 2 holds it, then the cap is reached).
        (
            "verdict=node2.sim.test:evacuate&verdict=node3.sim.test:evacuate",
            &[(2, Evacuate), (3, Evacuate)],
            None,
            1,
            true,
        ),
        // The same with the cap raised to two: both go, with equal verdicts or not.
        (
            "verdict=node2.sim.test:evacuate&verdict=node3.sim.test:evacuate&policy=max_disrupted_nodes:2",
            &[(2, Evacuate), (3, Evacuate)],
            None,
            1,
            false,
        ),
        (
            "verdict=node2.sim.test:evacuate&verdict=node3.sim.test:evacuate-failover&policy=max_disrupted_nodes:2",
            &[(2, Evacuate), (3, EvacuateFailover)],
            None,
            1,
            false,
        ),
        // Another node is disrupted (drained by someone else): the evacuation waits.
        (
            "drain=node5.sim.test&verdict=node3.sim.test:evacuate",
            &[(3, Evacuate)],
            Some(5),
            1,
            true,
        ),
    ];
    for (query, verdicts, drained, cap, waits) in cases {
        let sim = cluster();
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_dir(dir.path()).unwrap());
        let before = store.snapshot().unwrap();

        let what_if = ask(&sim, &store, settings(cap), query).await.unwrap();
        // Nothing of the live state or the cluster changed.
        assert_eq!(store.snapshot().unwrap(), before, "{query}");
        assert!(sim.submissions().is_empty(), "{query}");
        assert!(
            matches!(what_if.ending, Ending::Settled { .. }),
            "{query}: {:?}",
            what_if.ending
        );
        let refused = what_if
            .rounds
            .iter()
            .flat_map(|r| &r.waits)
            .any(|w| w.blocked_by.is_some());
        assert_eq!(refused, waits, "{query}");
        if query.contains("max_disrupted_nodes:2") {
            // Both evacuations end.
            assert!(
                what_if.incidents.iter().all(|i| i.status == "completed"),
                "{query}: {:?}",
                what_if.incidents
            );
        }

        // The same change, made real.
        if let Some(i) = drained {
            sim.with_cluster(|c| c.nodes.get_mut(&node(i)).unwrap().drained = true);
        }
        let real = if query.contains("max_disrupted_nodes:2") {
            settings(2)
        } else {
            settings(cap)
        };
        let (ran, blocked) = daemon_runs(&sim, &store, verdicts, real).await;
        assert!(!ran.is_empty() || waits, "{query}: nothing ran");
        assert_eq!(predicted(&what_if), ran, "{query}");
        let predicted_blocked: BTreeMap<_, _> = what_if
            .incidents
            .iter()
            .map(|i| (i.node.clone(), i.blocked_by.as_deref().map(without_uuids)))
            .collect();
        assert_eq!(predicted_blocked, blocked, "{query}");

        // A what-if on a state with incidents, jobs and a ledger changes nothing either.
        let before = store.snapshot().unwrap();
        let submitted = sim.submissions().len();
        let again = ask(
            &sim,
            &store,
            settings(cap),
            "verdict=node4.sim.test:evacuate",
        )
        .await
        .unwrap();
        assert!(!again.rounds.is_empty());
        // It starts from the daemon's last recorded round: its incidents are there, not new.
        assert!(again.start.recorded_round.is_some(), "{query}");
        assert!(
            again.incidents.iter().any(|i| !i.new) || blocked.is_empty(),
            "{query}"
        );
        assert_eq!(store.snapshot().unwrap(), before, "{query}");
        assert_eq!(sim.submissions().len(), submitted, "{query}");
        assert!(sim.writes().is_empty(), "{query}: {:?}", sim.writes());
    }
}

#[tokio::test]
async fn bad_questions_get_clear_answers() {
    let sim = cluster();
    let store = Store::open_memory().unwrap();
    for (query, says) in [
        (
            "verdict=node9.sim.test:evacuate",
            "unknown node node9.sim.test",
        ),
        ("drain=nowhere", "unknown node nowhere"),
        (
            "campaign=node1.sim.test,node7.sim.test",
            "unknown node node7",
        ),
        ("at=5", "no round is recorded"),
    ] {
        let error = ask(&sim, &store, settings(1), query).await.unwrap_err();
        assert!(matches!(error, WhatIfError::Input(_)), "{query}: {error:?}");
        assert!(error.to_string().contains(says), "{query}: {error}");
    }
    // One at a time: the next one waits its turn, here at most 50 ms.
    let context = WhatIfContext::new(settings(1), Duration::from_secs(30))
        .with_queue_wait(Duration::from_millis(50));
    let _held = context.permit().unwrap();
    let ganeti = sim.client();
    let live = Live {
        store: &store,
        ganeti: &ganeti,
        context: &context,
        caller: what_if::Caller::Local,
    };
    assert!(matches!(
        what_if::run(live, &Query::default()).await,
        Err(WhatIfError::Busy(_))
    ));
}

/// One what-if runs at a time; the others wait their turn first come, first served, one per
/// caller: a caller asking again while its what-if waits is refused at once, another caller
/// waits and runs once the running one ends.
#[tokio::test]
async fn what_ifs_wait_their_turn_one_per_caller() {
    use nodecare_coordinator::what_if::Caller;
    let sim = cluster();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let context = WhatIfContext::new(settings(1), Duration::from_secs(30))
        .with_queue_wait(Duration::from_secs(10));
    let held = context.permit().unwrap();
    let ganeti = sim.client();
    let a = Caller::Address("192.0.2.1".parse().unwrap());
    let b = Caller::Address("192.0.2.2".parse().unwrap());
    let query = Query::default();
    let ask = |caller| {
        what_if::run(
            Live {
                store: &store,
                ganeti: &ganeti,
                context: &context,
                caller,
            },
            &query,
        )
    };
    let first_a = ask(a);
    let first_b = ask(b);
    let again_a = async {
        // Asked while a's first one waits.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let answer = ask(a).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        answer
    };
    let (first_a, first_b, again_a) = tokio::join!(first_a, first_b, again_a);
    assert!(
        matches!(&again_a, Err(WhatIfError::Busy(why)) if why.contains("your earlier what-if")),
        "{again_a:?}"
    );
    assert!(first_a.is_ok(), "{first_a:?}");
    assert!(first_b.is_ok(), "{first_b:?}");
    // Their turns ended: a asks again and runs.
    assert!(ask(a).await.is_ok());
}

#[tokio::test]
async fn the_endpoint_answers_what_it_can() {
    use axum::http::StatusCode;
    use nodecare_coordinator::api::ApiState;
    let sim = cluster();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_dir(dir.path()).unwrap());
    let context = Arc::new(
        WhatIfContext::new(settings(1), Duration::from_secs(30))
            .with_queue_wait(Duration::from_millis(50)),
    );
    let state = ApiState {
        store: Arc::clone(&store),
        board: Arc::new(Board::default()),
        incident_lock: Arc::new(tokio::sync::Mutex::new(())),
        node_name: MASTER.into(),
        users: None,
        csrf_key: Arc::new([0; 32]),
        max_disrupted_nodes: 1,
        ganeti: Some(Arc::new(sim.client_on(MASTER))),
        agents: None,
        gate_view_max_age: Duration::from_secs(60),
        replicator: None,
        failure_domains: nodecare_core::gate::DomainSource::default(),
        what_if: Some(Arc::clone(&context)),
        calendar: Arc::default(),
        approval_hook: None,
    };
    let answer = nodecare_coordinator::what_if_api::what_if(
        &state,
        Some("verdict=node4.sim.test:evacuate&rounds=10"),
    )
    .await
    .unwrap();
    assert_eq!(answer.jobs[0].opcode, "OP_NODE_SET_PARAMS");
    assert_eq!(answer.jobs[0].target, node(4));
    for (query, status) in [
        ("verdict=node4.sim.test:reboot", StatusCode::BAD_REQUEST),
        ("drain=node9.sim.test", StatusCode::BAD_REQUEST),
        ("rounds=500", StatusCode::BAD_REQUEST),
    ] {
        let (got, message) = nodecare_coordinator::what_if_api::what_if(&state, Some(query))
            .await
            .unwrap_err();
        assert_eq!(got, status, "{query}: {message}");
    }
    let held = context.permit().unwrap();
    let (got, _) = nodecare_coordinator::what_if_api::what_if(&state, Some("drain=node2.sim.test"))
        .await
        .unwrap_err();
    assert_eq!(got, StatusCode::TOO_MANY_REQUESTS);
    drop(held);
    let off = ApiState {
        what_if: None,
        calendar: Arc::default(),
        approval_hook: None,
        ..state.clone()
    };
    let (got, _) = nodecare_coordinator::what_if_api::what_if(&off, Some("drain=node2.sim.test"))
        .await
        .unwrap_err();
    assert_eq!(got, StatusCode::SERVICE_UNAVAILABLE);
    assert!(sim.submissions().is_empty());
    assert!(sim.writes().is_empty());
}

#[tokio::test]
async fn a_campaign_is_tried_on_the_copy() {
    let sim = cluster();
    let store = Store::open_memory().unwrap();
    let what_if = ask(
        &sim,
        &store,
        settings(1),
        "campaign=node4.sim.test,node5.sim.test&rounds=20",
    )
    .await
    .unwrap();
    assert!(sim.submissions().is_empty());
    assert!(store.campaigns().unwrap().is_empty());
    assert!(
        matches!(what_if.ending, Ending::Settled { .. }),
        "{:?}",
        what_if.ending
    );
    // Each node in turn: drained, its primaries moved, the hook (a reboot), undrained, its
    // instances migrated back.
    let steps: Vec<(String, String)> = what_if
        .jobs
        .iter()
        .map(|j| (j.opcode.clone(), j.target.clone()))
        .collect();
    let drain4 = steps
        .iter()
        .position(|s| *s == ("OP_NODE_SET_PARAMS".to_owned(), node(4)))
        .expect("node 4 drained");
    let drains = steps
        .iter()
        .filter(|(op, target)| op == "OP_NODE_SET_PARAMS" && *target == node(4))
        .count();
    assert_eq!(drains, 2, "drained and undrained: {steps:?}");
    assert_eq!(what_if.campaigns.len(), 1);
    assert!(what_if.campaigns[0].new);
    assert!(
        steps[drain4..]
            .iter()
            .any(|s| *s == ("OP_NODE_SET_PARAMS".to_owned(), node(5))),
        "node 5 after node 4: {steps:?}"
    );
}

/// Maintenance windows in a what-if: asked while no window is open, the campaign waits (no
/// job); asked `from` the next window's opening, its groups go through.
#[tokio::test]
async fn a_what_if_from_a_window_s_opening_lets_the_campaign_through() {
    let sim = cluster();
    let store = Store::open_memory().unwrap();
    // A window three days from today (UTC), an hour long: closed now, whatever the day.
    let now = nodecare_protocol::now_ms();
    let days = now / 86_400_000;
    let names = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let day = names[usize::try_from((days + 3) % 7).unwrap()];
    let config = nodecare_core::calendar::CalendarConfig {
        windows: vec![format!("{day} 02:00-06:00")],
        ..Default::default()
    };
    let calendar = config
        .calendar(jiff::tz::TimeZone::UTC, "UTC", &[])
        .unwrap();
    let opens = calendar
        .at(now)
        .window
        .and_then(|w| w.next_ms)
        .expect("the next window");
    let mut windowed = settings(1);
    windowed.gate.calendar = calendar;
    let closed = ask(
        &sim,
        &store,
        windowed.clone(),
        "campaign=node4.sim.test,node5.sim.test&rounds=5",
    )
    .await
    .unwrap();
    assert!(closed.jobs.is_empty(), "{:?}", predicted(&closed));
    let open = ask(
        &sim,
        &store,
        windowed,
        &format!("campaign=node4.sim.test,node5.sim.test&rounds=20&from={opens}"),
    )
    .await
    .unwrap();
    assert!(
        open.jobs
            .iter()
            .any(|j| j.opcode == "OP_NODE_SET_PARAMS" && j.target == node(4)),
        "{:?}",
        predicted(&open)
    );
    assert!(sim.submissions().is_empty());
}

/// A what-if yields to the daemon's rounds: while one runs, it neither reads the cluster nor
/// runs a simulated round; it goes on once the round ended.
#[tokio::test]
async fn a_what_if_waits_while_a_daemon_round_runs() {
    let sim = cluster();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let (running, rounds) = tokio::sync::watch::channel(true);
    let context = WhatIfContext::new(settings(1), Duration::from_secs(30)).with_rounds(rounds);
    let asked = ask_in(&sim, &store, &context, "verdict=node2.sim.test:evacuate");
    tokio::pin!(asked);
    // The round runs: nothing is answered (nor read).
    let early = tokio::time::timeout(Duration::from_millis(500), asked.as_mut()).await;
    assert!(early.is_err(), "answered while a round ran: {early:?}");
    running.send_replace(false);
    let answer = tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .unwrap()
        .unwrap();
    assert!(!answer.jobs.is_empty(), "{answer:?}");
}

/// A what-if whose work budget runs out answers with the rounds it ran, and says it was cut.
#[tokio::test]
async fn a_what_if_past_its_work_budget_is_cut_and_says_so() {
    let sim = cluster();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let context =
        WhatIfContext::new(settings(1), Duration::from_secs(30)).with_budget(Duration::ZERO);
    let answer = ask_in(&sim, &store, &context, "verdict=node2.sim.test:evacuate")
        .await
        .unwrap();
    assert_eq!(
        answer.ending,
        nodecare_protocol::what_if::Ending::Cut {
            rounds: 1,
            budget_s: 0,
            by: nodecare_protocol::what_if::CutBy::Cpu,
        }
    );
    assert_eq!(answer.rounds.len(), 1);
    // On a machine so busy that the rounds (at their lowered priority) take long, the time
    // they take cuts them too.
    let context =
        WhatIfContext::new(settings(1), Duration::from_secs(30)).with_wall_budget(Duration::ZERO);
    let answer = ask_in(&sim, &store, &context, "verdict=node2.sim.test:evacuate")
        .await
        .unwrap();
    assert_eq!(
        answer.ending,
        nodecare_protocol::what_if::Ending::Cut {
            rounds: 1,
            budget_s: 0,
            by: nodecare_protocol::what_if::CutBy::Wall,
        }
    );
}
