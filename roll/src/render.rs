//! Output formats: hroller's text (byte for byte) and JSON.

use serde::Serialize;

use crate::cluster::Cluster;
use crate::schedule::Plan;

#[derive(Debug, Clone, Copy, Default)]
pub struct TextOptions {
    pub no_headers: bool,
    pub one_step_only: bool,
    pub print_moves: bool,
}

/// The groups (and moves) as hroller prints them.
pub fn text(cluster: &Cluster, plan: &Plan, o: TextOptions) -> String {
    let name = |n: usize| cluster.nodes[n].name.as_str();
    let mut out = String::new();
    let groups = if o.one_step_only {
        &plan.groups[..plan.groups.len().min(1)]
    } else {
        &plan.groups[..]
    };
    if !o.no_headers {
        out.push_str(if o.one_step_only {
            "'First Reboot Group'\n"
        } else {
            "'Node Reboot Groups'\n"
        });
    }
    for g in groups {
        if o.one_step_only {
            for &n in &g.nodes {
                out.push_str(name(n));
                out.push('\n');
            }
        } else {
            let names: Vec<&str> = g.nodes.iter().map(|&n| name(n)).collect();
            out.push_str(&names.join(","));
            out.push('\n');
        }
        if o.print_moves {
            for m in &g.moves {
                out.push_str("  ");
                out.push_str(&cluster.instances[m.instance].name);
                out.push(' ');
                out.push_str(name(m.primary));
                if let Some(s) = m.secondary {
                    out.push(' ');
                    out.push_str(name(s));
                }
                out.push('\n');
            }
        }
    }
    out
}

#[derive(Debug, Serialize)]
struct JsonMove<'a> {
    instance: &'a str,
    primary: &'a str,
    secondary: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct JsonGroup<'a> {
    nodes: Vec<&'a str>,
    moves: Vec<JsonMove<'a>>,
}

#[derive(Debug, Serialize)]
struct JsonPlan<'a> {
    groups: Vec<JsonGroup<'a>>,
    strategy: &'a str,
    htools_algorithm_groups: Option<usize>,
    warnings: &'a [String],
}

/// A JSON document for programs: `{"groups":[{"nodes":[…],"moves":[…]}],…}`.
pub fn json(cluster: &Cluster, plan: &Plan, one_step_only: bool, warnings: &[String]) -> String {
    let name = |n: usize| cluster.nodes[n].name.as_str();
    let groups = if one_step_only {
        &plan.groups[..plan.groups.len().min(1)]
    } else {
        &plan.groups[..]
    };
    let doc = JsonPlan {
        groups: groups
            .iter()
            .map(|g| JsonGroup {
                nodes: g.nodes.iter().map(|&n| name(n)).collect(),
                moves: g
                    .moves
                    .iter()
                    .map(|m| JsonMove {
                        instance: &cluster.instances[m.instance].name,
                        primary: name(m.primary),
                        secondary: m.secondary.map(name),
                    })
                    .collect(),
            })
            .collect(),
        strategy: &plan.strategy,
        htools_algorithm_groups: plan.htools_algorithm_groups,
        warnings,
    };
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{}".to_owned());
    s.push('\n');
    s
}
