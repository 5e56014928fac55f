//! The state's growth on a changing cluster at 1 000 nodes ([`nodecare_tests::state_growth`]):
//! every round decides anew, writers fill the audit log and the overrides with the longest
//! reasons, retention runs with the default policy; the snapshot replicated to the master
//! candidates stays well under the replica limit throughout. A short run here; the measured run
//! (10 000 rounds) is `bench/coordinator/state.sh`.

use nodecare_coordinator::store::retention::RetentionConfig;
use nodecare_coordinator::store::{AUDIT_BUDGET_BYTES, OVERRIDES_BUDGET_BYTES, Store};
use nodecare_protocol::replica::MAX_REPLICA_BYTES;
use nodecare_tests::state_growth::{Workload, grow, within_limit};

#[test]
fn the_replicated_state_stays_under_the_limit_while_the_recorder_grows() {
    let state = tempfile::tempdir().unwrap();
    let store = Store::open_dir(state.path()).unwrap();
    // 40 rounds of 1 000 nodes, retention every 10; the writers fill the audit log and the
    // overrides past their budgets (in memory: the fill is not what is measured).
    let memory = Store::open_memory().unwrap();
    let fill = Workload {
        nodes: 4,
        rounds: 10,
        audit_per_round: 900,
        overrides_per_round: 250,
        retention_every: 10,
    };
    let policy = RetentionConfig::default().policy();
    let filled = grow(&memory, &fill, &policy, 1).unwrap();
    assert!(filled.overrides_refused > 0, "{filled:?}");
    store.restore(&memory.snapshot().unwrap()).unwrap();
    let workload = Workload {
        nodes: 1000,
        rounds: 40,
        audit_per_round: 2,
        overrides_per_round: 1,
        retention_every: 10,
    };
    let figures = grow(&store, &workload, &policy, 5).unwrap();
    assert!(within_limit(&figures), "{figures:?}");
    assert!(
        figures.max_snapshot_bytes
            < (AUDIT_BUDGET_BYTES + OVERRIDES_BUDGET_BYTES) * 2 + MAX_REPLICA_BYTES / 16,
        "{figures:?}"
    );
    assert!(
        figures.recorded_bytes > 40 * 100_000,
        "every round decides anew: {figures:?}"
    );
    assert_eq!(figures.recorder_rounds, 40, "{figures:?}");
    assert!(figures.overrides_refused > 0, "{figures:?}");
}
