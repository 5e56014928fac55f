//! scratch: prints some states at a depth
use nodecare_model::explorer::Model;
use nodecare_model::replication::Replication;
use std::collections::HashSet;
fn main() {
    let depth: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let model = Replication::new(nodecare_model::replication::Rules::code(), nodecare_model::BOUNDED);
    let mut seen = HashSet::new();
    let mut level: Vec<_> = model.init_states();
    for s in &level { seen.insert(model.fingerprint(s)); }
    let mut actions = Vec::new();
    for _ in 0..depth {
        let mut next = Vec::new();
        for s in &level {
            actions.clear();
            model.actions(s, &mut actions);
            for a in &actions {
                if let Some(n) = model.next_state(s, a) {
                    if seen.insert(model.fingerprint(&n)) { next.push(n); }
                }
            }
        }
        level = next;
    }
    eprintln!("{} states at depth {depth}", level.len());
    let mut nets = std::collections::BTreeMap::new();
    for s in &level { *nets.entry(s.network.len()).or_insert(0) += 1; }
    eprintln!("network sizes {nets:?}");
    for s in level.iter().step_by(level.len() / 8 + 1) { println!("{s:?}\n"); }
}
