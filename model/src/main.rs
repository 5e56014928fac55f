//! `nodecare-model`: explores the model of the replication and prints what it found.
//!
//! `cargo run -p nodecare-model --release -- [full|bounded] [code|before] [--no-liveness]
//! [--max-states=N]`

use nodecare_model::explorer::{Limits, explore};
use nodecare_model::replication::{Bounds, Replication, Rules};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let liveness = !args.iter().any(|arg| arg == "--no-liveness");
    let bounds = if args.iter().any(|arg| arg == "bounded") {
        nodecare_model::BOUNDED
    } else {
        nodecare_model::FULL
    };
    let bounds = Bounds { liveness, ..bounds };
    let rules = if args.iter().any(|arg| arg == "before") {
        Rules::before()
    } else {
        Rules::code()
    };
    let max_states = args
        .iter()
        .find_map(|arg| arg.strip_prefix("--max-states="))
        .and_then(|value| value.parse().ok());
    let model = Replication::new(rules, bounds);
    let started = std::time::Instant::now();
    let report = explore(
        &model,
        Limits {
            max_states,
            ..Limits::default()
        },
    );
    println!(
        "rules {:?}, bounds {bounds:?}: {} states, {} transitions, depth {}, complete {}, {:.1} s",
        model.rules.name,
        report.states,
        report.transitions,
        report.depth,
        report.complete,
        started.elapsed().as_secs_f64()
    );
    for (name, _) in &report.properties {
        println!(
            "  {} {name}",
            if report.holds(name) {
                "holds:"
            } else {
                "FAILS:"
            }
        );
    }
    for discovery in &report.discoveries {
        if !report.holds(discovery.property) {
            println!("{discovery}");
        }
    }
}
