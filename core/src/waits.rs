//! Holders that wait on each other (pure): each current wait (a refused proposal, an incident's
//! `blocked_by`) names the nodes it waits for; the holders of those nodes are whom it waits
//! for. A set of holders each waiting, through the others, for itself never moves on by itself:
//! [`cycles`] finds them and [`cycle_line`] says the way out.

use std::collections::{BTreeMap, BTreeSet};

/// Who waits for whom: holder → the holders it waits for. `waits` are `(holder, why)` (the
/// holder for people, `incident <uuid>`; why in words, naming nodes); `held` is node → its
/// holder. A wait waits for the holder of every node its words name (a whole word: `node3`
/// is not named by `node30`), never for itself.
pub fn graph(
    waits: &[(String, String)],
    held: &BTreeMap<String, String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (holder, why) in waits {
        let words: BTreeSet<&str> = why
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_'))
            .map(|w| w.trim_end_matches('.'))
            .filter(|w| !w.is_empty())
            .collect();
        for (node, other) in held {
            if other != holder && words.contains(node.as_str()) {
                graph
                    .entry(holder.clone())
                    .or_default()
                    .insert(other.clone());
            }
        }
    }
    graph
}

/// The groups of two or more holders that wait for each other (the strongly connected parts
/// of `graph`), each sorted, in order.
pub fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Reachability by search from each holder: the graphs are small (a few waits).
    let reach = |from: &String| {
        let mut seen: BTreeSet<&String> = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(next) = stack.pop() {
            for to in graph.get(next).into_iter().flatten() {
                if seen.insert(to) {
                    stack.push(to);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<&String>> =
        graph.keys().map(|holder| (holder, reach(holder))).collect();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for (holder, from) in &reached {
        if !from.contains(holder) {
            continue;
        }
        let group: Vec<String> = from
            .iter()
            .filter(|other| reached.get(*other).is_some_and(|r| r.contains(holder)))
            .map(|other| (*other).clone())
            .collect();
        if group.len() >= 2 {
            found.insert(group);
        }
    }
    found.into_iter().collect()
}

/// A cycle for people, with the way out: cancel one of its holders (the command for an
/// incident, abort for a campaign) or raise the cap.
pub fn cycle_line(cycle: &[String]) -> String {
    let names = match cycle {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    };
    let ways: Vec<String> = cycle
        .iter()
        .filter_map(|holder| {
            if let Some(id) = holder.strip_prefix("incident ") {
                Some(format!("`nodecare cancel {id}`"))
            } else {
                holder
                    .strip_prefix("maintenance campaign ")
                    .map(|id| format!("`nodecare roll abort {id}`"))
            }
        })
        .collect();
    let way = if ways.is_empty() {
        "end one".to_owned()
    } else {
        format!("end one ({})", ways.join(" or "))
    };
    format!("{names} wait for each other: {way} or raise max_disrupted_nodes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, h)| ((*n).to_owned(), (*h).to_owned()))
            .collect()
    }

    fn waits(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(h, w)| ((*h).to_owned(), (*w).to_owned()))
            .collect()
    }

    #[test]
    fn waits_on_each_other_are_found_and_others_are_not() {
        let a = "incident a";
        let b = "incident b";
        let c = "maintenance campaign c";
        for (what, waits, held, expected) in [
            (
                "two incidents, each waiting for the other's node",
                waits(&[
                    (
                        a,
                        "waiting to move inst1 (its secondary node3 has an active incident)",
                    ),
                    (b, "cap on disrupted nodes: node2: incident a"),
                ]),
                held(&[("node2", a), ("node3", b)]),
                vec![vec![a, b]],
            ),
            (
                "a campaign and an incident",
                waits(&[
                    (c, "failure domain rack:a is disrupted (node2: incident a)"),
                    (a, "its secondary node5 is drained or evacuating"),
                ]),
                held(&[("node2", a), ("node5", c)]),
                vec![vec![a, c]],
            ),
            (
                "one waits, the other does not",
                waits(&[(a, "node3 is busy")]),
                held(&[("node2", a), ("node3", b)]),
                vec![],
            ),
            (
                "its own node is no wait",
                waits(&[(a, "node2 is busy")]),
                held(&[("node2", a)]),
                vec![],
            ),
            (
                "node3 is not node30",
                waits(&[(a, "node30 is busy"), (b, "node2 is busy")]),
                held(&[("node2", a), ("node3", b)]),
                vec![],
            ),
            (
                "three in a ring, a fourth waiting on them",
                waits(&[
                    (a, "node3 is busy."),
                    (b, "node4 is busy"),
                    (c, "node2 is busy"),
                    ("incident d", "node2 is busy"),
                ]),
                held(&[
                    ("node2", a),
                    ("node3", b),
                    ("node4", c),
                    ("node9", "incident d"),
                ]),
                vec![vec![a, b, c]],
            ),
        ] {
            let expected: Vec<Vec<String>> = expected
                .into_iter()
                .map(|c| c.into_iter().map(str::to_owned).collect())
                .collect();
            assert_eq!(cycles(&graph(&waits, &held)), expected, "{what}");
        }
    }

    #[test]
    fn a_cycle_says_the_way_out() {
        assert_eq!(
            cycle_line(&["incident a".into(), "incident b".into()]),
            "incident a and incident b wait for each other: end one (`nodecare cancel a` or `nodecare cancel b`) or raise max_disrupted_nodes"
        );
        assert_eq!(
            cycle_line(&[
                "admission g of kured".into(),
                "incident a".into(),
                "maintenance campaign c".into()
            ]),
            "admission g of kured, incident a and maintenance campaign c wait for each other: end one (`nodecare cancel a` or `nodecare roll abort c`) or raise max_disrupted_nodes"
        );
    }
}
