//! `nodecare-model`: explores the model of the replication and prints what it found.
//!
//! `cargo run -p nodecare-model -- [full|complete|bounded] [code|before|minority|unleased]
//! [--no-liveness] [--max-states=N] [--actions=N] [--takeovers=N] [--crashes=N]
//! [--max-number=N] [--steady|--empty] [--no-symmetry] [--unreduced]`

use nodecare_model::explorer::{Limits, explore};
use nodecare_model::replication::{Bounds, Reductions, Replication, Rules};

fn number<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    args.iter()
        .find_map(|arg| arg.strip_prefix(name)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
}

/// The peak resident memory of this process, from `/proc/self/status` (Linux), in MiB.
fn peak_memory_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|arg| arg == name);
    let bounds = if flag("bounded") {
        nodecare_model::BOUNDED
    } else if flag("complete") {
        nodecare_model::COMPLETE
    } else {
        nodecare_model::FULL
    };
    let bounds = Bounds {
        liveness: !flag("--no-liveness"),
        actions: number(&args, "--actions").unwrap_or(bounds.actions),
        takeovers: number(&args, "--takeovers").unwrap_or(bounds.takeovers),
        crashes: number(&args, "--crashes").unwrap_or(bounds.crashes),
        max_number: number(&args, "--max-number").unwrap_or(bounds.max_number),
        steady: (bounds.steady || flag("--steady")) && !flag("--empty"),
    };
    let rules = if flag("before") {
        Rules::before()
    } else if flag("minority") {
        Rules::minority()
    } else if flag("unleased") {
        Rules::unleased()
    } else {
        Rules::code()
    };
    let reductions = Reductions {
        symmetry: !flag("--no-symmetry") && !flag("--unreduced"),
        forget: !flag("--unreduced"),
    };
    let model = Replication::new(rules, bounds).with_reductions(reductions);
    let started = std::time::Instant::now();
    let report = explore(
        &model,
        Limits {
            max_states: number(&args, "--max-states"),
            ..Limits::default()
        },
    );
    println!(
        "rules {:?}, {bounds:?}, {reductions:?}: {} states, {} transitions, depth {}, complete {}, \
         {:.1} s, peak memory {} MiB",
        model.rules.name,
        report.states,
        report.transitions,
        report.depth,
        report.complete,
        started.elapsed().as_secs_f64(),
        peak_memory_mib().map_or_else(|| "?".to_owned(), |mib| mib.to_string()),
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
