//! Planning entry points: node selection, graph, colourings, splitting and
//! the final ordering of reboot groups.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::capacity::{Conf, Diff, SimInst};
use crate::cluster::{Cluster, Redundancy};
use crate::graph::{self, Colouring, EdgeSources, RebootGraph};
use crate::split::{self, PackParams, Semantics, SplitFailure, SubGroup};

/// Planner flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// nodecare: real redundancy, down instances stay, better colourings
    /// and packing, never more groups than the htools algorithm.
    #[default]
    Improved,
    /// Reproduces hroller 3.0.2, defects included.
    HrollerCompat,
}

/// What may fail together: reboot groups never span two domains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureDomains {
    /// Ganeti node groups.
    NodeGroup,
    /// The node tag starting with this prefix (e.g. `rack:`).
    TagPrefix(String),
}

#[derive(Debug, Clone, Default)]
pub struct RollOptions {
    /// `-O` names, in command-line order.
    pub offline_nodes: Vec<String>,
    /// `-G` group name or UUID.
    pub group: Option<String>,
    /// `--node-tags`.
    pub node_tags: Option<Vec<String>>,
    pub offline_maintenance: bool,
    pub skip_non_redundant: bool,
    pub ignore_non_redundant: bool,
    pub full_evacuation: bool,
    pub force: bool,
    pub failure_domains: Option<FailureDomains>,
    pub mode: Mode,
    /// Work units for exact colouring (per planning run).
    pub colouring_budget: u64,
    /// Work units for exhaustive packing searches (per planning run).
    pub packing_budget: u64,
}

impl RollOptions {
    pub fn with_default_budgets(mut self) -> Self {
        self.colouring_budget = 20_000_000;
        self.packing_budget = 2_000_000;
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("No master node found (maybe not supported by backend).")]
    NoMaster,
    #[error("Found more than one master node: [{}]", .0.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(","))]
    MultipleMasters(Vec<String>),
    #[error("wrong node name(s) set as offline: {0}\n")]
    WrongOfflineNames(String),
    #[error("Cannot find target group.")]
    GroupNotFound,
    #[error("Cannot create node graph")]
    EmptyGraph,
    /// Nothing is selected because every candidate node was skipped for a
    /// reason hroller does not see (one message per node).
    #[error("Cannot create node graph: {}", .0.join("; "))]
    AllSkipped(Vec<String>),
    #[error("Not enough capacity to move non-redundant instances")]
    NonRedundantCapacity,
    #[error("Failed to migrate instances off nodes")]
    MigrationFailed,
    #[error("Not enough capacity to move secondaries")]
    SecondaryCapacity,
    #[error("node {node} has no tag starting with '{prefix}' (needed by --failure-domains)")]
    NoFailureDomain { node: String, prefix: String },
}

impl From<SplitFailure> for PlanError {
    fn from(f: SplitFailure) -> Self {
        match f {
            SplitFailure::NonRedundant => Self::NonRedundantCapacity,
            SplitFailure::Migrate => Self::MigrationFailed,
            SplitFailure::Secondaries => Self::SecondaryCapacity,
        }
    }
}

/// One instance relocation needed while a group reboots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub instance: usize,
    pub primary: usize,
    /// New secondary, for mirrored instances.
    pub secondary: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RebootGroup {
    /// Node indices, master last.
    pub nodes: Vec<usize>,
    /// Moves relative to the original layout, ascending instance index.
    pub moves: Vec<Move>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Groups in execution order.
    pub groups: Vec<RebootGroup>,
    /// hroller's `-v` line comparing its three colourings.
    pub stats_line: String,
    /// Which colouring and split produced the groups.
    pub strategy: String,
    /// Groups the htools algorithm produces under the same semantics, when
    /// it succeeds (improved mode only).
    pub htools_algorithm_groups: Option<usize>,
    /// Selected nodes left out of the plan (`--skip-non-redundant`): nodes
    /// hroller skips for stopped or shared-storage instances whose running
    /// instances cannot be moved anywhere, or that would need a group
    /// beyond those of the nodes hroller plans.
    pub skipped: Vec<usize>,
    /// Non-fatal messages about the plan (one per skipped node).
    pub warnings: Vec<String>,
}

/// Why `--skip-non-redundant` leaves out a node that hroller would skip too
/// (stopped or shared-storage instances) but nodecare could reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// Its running instances fit nowhere, even when it reboots alone.
    CannotMove,
    /// Rebooting it would add a group to the plan of hroller's nodes.
    ExtraGroup,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::CannotMove => "its running instances cannot be moved off it",
            Self::ExtraGroup => {
                "it would need a reboot group beyond hroller's plan \
                 (run without --skip-non-redundant to include it)"
            }
        })
    }
}

/// Reboot groups of one planning run, before the final ordering.
struct Solved {
    groups: Vec<RebootGroup>,
    strategy: String,
    htools_groups: Option<usize>,
}

/// Selection and graph, ready to solve.
#[derive(Debug)]
pub struct Prepared<'c> {
    cluster: &'c Cluster,
    opts: RollOptions,
    offline: Vec<bool>,
    selected: Vec<usize>,
    graph: RebootGraph,
    /// `--skip-non-redundant` (nodecare's semantics): selected nodes that
    /// hroller would skip, because they host instances without a DRBD
    /// secondary that are stopped or on shared storage (live-migratable).
    /// They are planned only where they fit into the others' groups without
    /// adding one (see [`Prepared::solve`]).
    extras: Vec<usize>,
    /// Non-fatal messages (e.g. a missing master with `--force`).
    pub warnings: Vec<String>,
    /// The messages of `warnings` that name a skipped node.
    skip_warnings: Vec<String>,
}

fn semantics(opts: &RollOptions) -> Semantics {
    let compat = opts.mode == Mode::HrollerCompat;
    Semantics {
        real_redundancy: !compat,
        relocate_non_redundant: !opts.ignore_non_redundant,
        htools_replace_defect: compat,
    }
}

/// hroller's first check: exactly one master node. With `force`, a missing
/// master is a warning (returned) instead of an error. [`prepare`] repeats
/// it; callers that print warnings as they go call it first.
pub fn check_masters(cluster: &Cluster, force: bool) -> Result<Vec<String>, PlanError> {
    let masters: Vec<String> = cluster
        .nodes
        .iter()
        .filter(|n| n.master)
        .map(|n| n.name.clone())
        .collect();
    match masters.len() {
        0 if force => Ok(vec![PlanError::NoMaster.to_string()]),
        0 => Err(PlanError::NoMaster),
        1 => Ok(Vec::new()),
        _ => Err(PlanError::MultipleMasters(masters)),
    }
}

/// Checks masters, applies `-O`, selects nodes and builds the reboot graph.
pub fn prepare<'c>(cluster: &'c Cluster, opts: &RollOptions) -> Result<Prepared<'c>, PlanError> {
    let warnings = check_masters(cluster, opts.force)?;
    let mut wrong = Vec::new();
    let mut offline_names = Vec::new();
    for name in opts.offline_nodes.iter().rev() {
        match cluster.lookup_node_name(name) {
            Some(n) => offline_names.push(n.to_owned()),
            None => wrong.push(name.clone()),
        }
    }
    if !wrong.is_empty() {
        return Err(PlanError::WrongOfflineNames(wrong.join(",")));
    }
    let offline: Vec<bool> = cluster
        .nodes
        .iter()
        .map(|n| n.offline || offline_names.contains(&n.name))
        .collect();
    let group = match &opts.group {
        Some(g) => Some(cluster.find_group(g).ok_or(PlanError::GroupNotFound)?),
        None => None,
    };
    let compat = opts.mode == Mode::HrollerCompat;
    let plists = cluster.primary_lists();
    let blocks_skip = |ni: usize| {
        plists[ni].iter().any(|&i| {
            let inst = &cluster.instances[i];
            if compat {
                !inst.template.has_secondary()
            } else {
                let degraded =
                    inst.template.has_secondary() && inst.snode.is_some_and(|s| offline[s]);
                (inst.template.redundancy() == Redundancy::Local || degraded)
                    && !inst.status.is_down()
            }
        })
    };
    let candidate = |ni: usize| {
        let n = &cluster.nodes[ni];
        !offline[ni]
            && opts
                .node_tags
                .as_ref()
                .is_none_or(|t| n.tags.iter().any(|x| t.contains(x)))
            && group.is_none_or(|g| n.group == g)
    };
    let mut warnings = warnings;
    let master_warnings = warnings.len();
    let selected: Vec<usize> = (0..cluster.nodes.len())
        .filter(|&ni| candidate(ni))
        .filter(|&ni| {
            let skipped = opts.skip_non_redundant && blocks_skip(ni);
            // hroller counts a DRBD instance whose secondary is offline as
            // redundant and would "migrate" it onto the offline node; say
            // why nodecare skips such a node.
            if skipped && !compat {
                let degraded = plists[ni].iter().map(|&i| &cluster.instances[i]).find(|i| {
                    i.template.has_secondary()
                        && !i.status.is_down()
                        && i.snode.is_some_and(|s| offline[s])
                });
                let only_drbd = plists[ni]
                    .iter()
                    .all(|&i| cluster.instances[i].template.has_secondary());
                if let (Some(inst), true) = (degraded, only_drbd) {
                    let sec = inst.snode.map_or("?", |s| cluster.nodes[s].name.as_str());
                    warnings.push(format!(
                        "node {} is skipped: its running instance {} cannot migrate \
                         (its DRBD secondary {sec} is offline)",
                        cluster.nodes[ni].name, inst.name
                    ));
                }
            }
            !skipped
        })
        .collect();
    if let Some(FailureDomains::TagPrefix(prefix)) = &opts.failure_domains {
        for &ni in &selected {
            let n = &cluster.nodes[ni];
            if !n.tags.iter().any(|t| t.starts_with(prefix.as_str())) {
                return Err(PlanError::NoFailureDomain {
                    node: n.name.clone(),
                    prefix: prefix.clone(),
                });
            }
        }
    }
    let mirrored: Vec<(usize, usize)> = cluster
        .instances
        .iter()
        .filter(|i| i.template.has_secondary())
        .filter_map(|i| i.snode.map(|s| (i.pnode, s)))
        .collect();
    let shared: Option<Vec<Vec<usize>>> = (!opts.offline_maintenance).then(|| {
        cluster
            .secondary_lists()
            .into_iter()
            .map(|sl| {
                sl.into_iter()
                    .map(|i| &cluster.instances[i])
                    .filter(|i| compat || (i.template.has_secondary() && !i.status.is_down()))
                    .map(|i| i.pnode)
                    .collect()
            })
            .collect()
    });
    let graph = RebootGraph::build(
        &selected,
        EdgeSources {
            mirrored: &mirrored,
            shared_secondary: shared.as_deref(),
        },
    )
    .ok_or_else(|| match warnings.len() - master_warnings {
        0 => PlanError::EmptyGraph,
        _ => PlanError::AllSkipped(warnings[master_warnings..].to_vec()),
    })?;
    let extras = if opts.skip_non_redundant && !compat {
        selected
            .iter()
            .copied()
            .filter(|&ni| {
                plists[ni]
                    .iter()
                    .any(|&i| !cluster.instances[i].template.has_secondary())
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(Prepared {
        cluster,
        opts: opts.clone(),
        offline,
        selected,
        graph,
        skip_warnings: warnings[master_warnings..].to_vec(),
        extras,
        warnings,
    })
}

struct Colourings {
    named: Vec<(&'static str, Colouring)>,
    /// Index into `named` of htools' choice.
    chosen: usize,
}

fn htools_colourings(g: &RebootGraph) -> Colourings {
    let named = vec![
        ("LF", graph::colour_lf(g)),
        ("Dsatur", graph::colour_dsatur(g)),
        ("Dcolor", graph::colour_dcolor(g)),
    ];
    let mut chosen = 0;
    for (i, (_, c)) in named.iter().enumerate() {
        if graph::colour_count(c) < graph::colour_count(&named[chosen].1) {
            chosen = i;
        }
    }
    Colourings { named, chosen }
}

/// hroller's `-v` statistics line.
fn stats_line(g: &RebootGraph, c: &Colourings) -> String {
    let mut entries: Vec<(usize, String)> = c
        .named
        .iter()
        .map(|(name, col)| {
            let cls = graph::classes(g, col);
            let sizes: Vec<String> = cls.iter().map(|x| x.len().to_string()).collect();
            (
                cls.len(),
                format!("{name}: {} ({})", cls.len(), sizes.join(",")),
            )
        })
        .collect();
    entries.reverse();
    entries.sort_by_key(|e| e.0);
    let mut s = String::new();
    let mut prev = 0;
    for (i, (k, text)) in entries.iter().enumerate() {
        if i > 0 {
            s.push_str(if *k == prev { " TIE " } else { " LOOSE " });
        }
        s.push_str(text);
        prev = *k;
    }
    s
}

impl<'c> Prepared<'c> {
    /// `Node Graph: …` as `hroller -v -v` prints it.
    pub fn graph_dump(&self) -> String {
        self.graph.show_haskell()
    }

    pub fn selected(&self) -> &[usize] {
        &self.selected
    }

    fn online(&self) -> Vec<usize> {
        (0..self.cluster.nodes.len())
            .filter(|&n| !self.offline[n])
            .collect()
    }

    /// The same preparation restricted to `members` (ascending, a subset
    /// of the selected nodes), with no extras of its own.
    fn restricted(&self, members: &[usize]) -> Result<Prepared<'c>, PlanError> {
        Ok(Prepared {
            cluster: self.cluster,
            opts: self.opts.clone(),
            offline: self.offline.clone(),
            selected: members.to_vec(),
            graph: self.graph.induced(members).ok_or(PlanError::EmptyGraph)?,
            extras: Vec::new(),
            warnings: Vec::new(),
            skip_warnings: Vec::new(),
        })
    }

    pub fn solve(&self) -> Result<Plan, PlanError> {
        let colourings = htools_colourings(&self.graph);
        let stats = stats_line(&self.graph, &colourings);
        let joint = self.solve_groups(&colourings);
        if self.extras.is_empty() {
            return Ok(self.finish(joint?, stats, Vec::new()));
        }
        // `--skip-non-redundant`: hroller plans only the core nodes. The
        // extras are rebooted only where they fit without adding a group
        // to the core's plan, so the plan never has more groups than
        // hroller's; the others are skipped with a warning.
        let core: Vec<usize> = self
            .selected
            .iter()
            .copied()
            .filter(|n| !self.extras.contains(n))
            .collect();
        let (base, bound) = if core.is_empty() {
            let base = Solved {
                groups: Vec::new(),
                strategy: String::new(),
                htools_groups: Some(0),
            };
            // hroller plans the nodes named in the skip warnings (at least
            // one group), or nothing at all (then it fails, and there is no
            // plan to stay within).
            let bound = (!self.skip_warnings.is_empty()).then_some(1);
            (base, bound)
        } else {
            let sub = self.restricted(&core)?;
            match sub.solve_groups(&htools_colourings(&sub.graph)) {
                Ok(c) => {
                    let n = c.groups.len();
                    (c, Some(n))
                }
                // The core alone fails (hroller has no plan either): the
                // joint plan, if there is one.
                Err(e) => return Ok(self.finish(joint.map_err(|_| e)?, stats, Vec::new())),
            }
        };
        if let Ok(j) = &joint
            && bound.is_none_or(|b| j.groups.len() <= b)
        {
            return Ok(self.finish(joint?, stats, Vec::new()));
        }
        let (solved, skipped) = match bound {
            Some(b) => self.fit_extras(&core, base, b),
            None => self.solve_extras(),
        };
        let plan = self.finish(solved, stats, skipped);
        if plan.groups.is_empty() {
            // Every node is skipped: say why, node by node.
            let mut msgs = self.skip_warnings.clone();
            msgs.extend(plan.warnings);
            return Err(match msgs.is_empty() {
                true => joint.err().unwrap_or(PlanError::EmptyGraph),
                false => PlanError::AllSkipped(msgs),
            });
        }
        Ok(plan)
    }

    /// Solves `members` (ascending) on their own.
    fn attempt(&self, members: &[usize]) -> Option<Solved> {
        let sub = self.restricted(members).ok()?;
        sub.solve_groups(&htools_colourings(&sub.graph)).ok()
    }

    /// Adds the extras one by one (ascending) to the core's plan `base`,
    /// keeping each that leaves the plan within `bound` groups; the others
    /// are skipped (returned second, with the reason).
    fn fit_extras(
        &self,
        core: &[usize],
        base: Solved,
        bound: usize,
    ) -> (Solved, Vec<(usize, Skip)>) {
        let mut members = core.to_vec();
        let mut current = base;
        let mut fitted = 0;
        let mut skipped = Vec::new();
        for &e in &self.extras {
            let mut trial = members.clone();
            trial.push(e);
            trial.sort_unstable();
            match self.attempt(&trial) {
                Some(s) if s.groups.len() <= bound => {
                    members = trial;
                    current = s;
                    fitted += 1;
                }
                // It can reboot with the others, only not without a group
                // more.
                Some(_) => skipped.push((e, Skip::ExtraGroup)),
                None => {
                    let why = match self.attempt(&[e]) {
                        Some(_) => Skip::ExtraGroup,
                        None => Skip::CannotMove,
                    };
                    skipped.push((e, why));
                }
            }
        }
        if fitted > 0 {
            current.strategy = format!(
                "{}; {fitted} of {} nodes with stopped or shared-storage instances \
                 fitted into those groups",
                current.strategy,
                self.extras.len()
            );
        }
        (current, skipped)
    }

    /// Plans the extras on their own (no core, and hroller plans nothing).
    /// Extras whose instances cannot be moved even when they reboot alone
    /// are skipped (returned second).
    fn solve_extras(&self) -> (Solved, Vec<(usize, Skip)>) {
        let cannot = |ns: Vec<usize>| ns.into_iter().map(|n| (n, Skip::CannotMove)).collect();
        let empty = || Solved {
            groups: Vec::new(),
            strategy: String::new(),
            htools_groups: Some(0),
        };
        if let Some(s) = self.attempt(&self.extras) {
            return (s, Vec::new());
        }
        let (kept, mut skipped): (Vec<usize>, Vec<usize>) = self
            .extras
            .iter()
            .partition(|&&n| self.attempt(&[n]).is_some());
        if kept.is_empty() {
            return (empty(), cannot(skipped));
        }
        match self.attempt(&kept) {
            Some(s) => (s, cannot(skipped)),
            None => {
                skipped.extend(kept);
                skipped.sort_unstable();
                (empty(), cannot(skipped))
            }
        }
    }

    /// Orders the groups (largest first, master last) and assembles the plan.
    fn finish(&self, solved: Solved, stats_line: String, skipped: Vec<(usize, Skip)>) -> Plan {
        let mut groups = solved.groups;
        groups.sort_by_key(|g| std::cmp::Reverse(g.nodes.len()));
        let is_master = |n: &usize| self.cluster.nodes[*n].master;
        for g in &mut groups {
            let (mut rest, masters): (Vec<usize>, Vec<usize>) =
                g.nodes.iter().partition(|n| !is_master(n));
            rest.extend(masters);
            g.nodes = rest;
        }
        let (mut out, with_master): (Vec<RebootGroup>, Vec<RebootGroup>) = groups
            .into_iter()
            .partition(|g| !g.nodes.iter().any(is_master));
        out.extend(with_master);
        let warnings = skipped
            .iter()
            .map(|&(n, why)| format!("node {} is skipped: {why}", self.cluster.nodes[n].name))
            .collect();
        let skipped = skipped.into_iter().map(|(n, _)| n).collect();
        Plan {
            groups: out,
            stats_line,
            strategy: solved.strategy,
            htools_algorithm_groups: solved.htools_groups,
            skipped,
            warnings,
        }
    }

    /// Colours and splits the selected nodes; groups are not yet ordered.
    fn solve_groups(&self, colourings: &Colourings) -> Result<Solved, PlanError> {
        let online = self.online();
        let sem = semantics(&self.opts);
        let mut conf = Conf::new(self.cluster, &self.offline);
        let (subgroups, strategy, htools_groups) = match self.opts.mode {
            Mode::HrollerCompat => {
                let classes = graph::classes(&self.graph, &colourings.named[colourings.chosen].1);
                let groups = split::htools_split(
                    &mut conf,
                    &classes,
                    &online,
                    sem,
                    self.opts.full_evacuation,
                )?;
                let name = colourings.named[colourings.chosen].0;
                (
                    groups,
                    format!("{name} colouring, htools greedy split"),
                    None,
                )
            }
            Mode::Improved => self.solve_improved(&mut conf, colourings, &online, sem)?,
        };
        let member: Vec<bool> = {
            let mut m = vec![false; self.cluster.nodes.len()];
            for &s in &self.selected {
                m[s] = true;
            }
            m
        };
        let mut groups: Vec<RebootGroup> = subgroups
            .iter()
            .map(|g| RebootGroup {
                nodes: g.nodes.iter().copied().filter(|&n| member[n]).collect(),
                moves: moves(&conf, &g.diff),
            })
            .collect();
        if self.opts.mode == Mode::Improved {
            groups.retain(|g| !g.nodes.is_empty());
        }
        Ok(Solved {
            groups,
            strategy,
            htools_groups,
        })
    }

    fn domains(&self) -> Vec<Vec<usize>> {
        let Some(fd) = &self.opts.failure_domains else {
            return vec![self.selected.clone()];
        };
        let mut by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for &n in &self.selected {
            let node = &self.cluster.nodes[n];
            let key = match fd {
                FailureDomains::NodeGroup => format!("{:08}", node.group),
                FailureDomains::TagPrefix(p) => node
                    .tags
                    .iter()
                    .filter(|t| t.starts_with(p.as_str()))
                    .min()
                    .cloned()
                    .unwrap_or_default(),
            };
            by.entry(key).or_default().push(n);
        }
        by.into_values().collect()
    }

    fn solve_improved(
        &self,
        conf: &mut Conf<'_>,
        global: &Colourings,
        online: &[usize],
        sem: Semantics,
    ) -> Result<(Vec<SubGroup>, String, Option<usize>), PlanError> {
        let mut colour_budget = self.opts.colouring_budget;
        let mut pack_budget = self.opts.packing_budget;
        let params = PackParams {
            full_evacuation: self.opts.full_evacuation,
            search_budget: (self.opts.packing_budget / 8).max(1),
        };
        let mut all = Vec::new();
        let mut strategies = Vec::new();
        let mut htools_total: Option<usize> = Some(0);
        let domains = self.domains();
        for dom in &domains {
            let own_graph;
            let (g, cols) = if domains.len() == 1 {
                (&self.graph, None)
            } else {
                own_graph = self.graph.induced(dom).ok_or(PlanError::EmptyGraph)?;
                (&own_graph, Some(htools_colourings(&own_graph)))
            };
            let cols = cols.as_ref().unwrap_or(global);
            let mut active = vec![false; g.len()];
            for &n in dom {
                active[n - g.lo] = true;
            }
            let restrict = |c: &Colouring| -> Vec<Vec<usize>> {
                graph::classes(g, c)
                    .into_iter()
                    .map(|cl| {
                        cl.into_iter()
                            .filter(|&n| active[n - g.lo])
                            .collect::<Vec<_>>()
                    })
                    .filter(|cl| !cl.is_empty())
                    .collect()
            };
            let htools_col = &cols.named[cols.chosen];
            let htools_classes = restrict(&htools_col.1);
            let (exact, optimal) =
                graph::colour_exact(g, &active, &htools_col.1, &mut colour_budget);
            let exact_classes = restrict(&exact);
            let exact_name = if optimal { "exact" } else { "branch-and-bound" };

            let mut best: Option<(Vec<SubGroup>, String)> = None;
            let mut first_err: Option<SplitFailure> = None;
            let mut consider = |res: Result<Vec<SubGroup>, SplitFailure>, name: String| match res {
                Ok(gs) => {
                    if best.as_ref().is_none_or(|(b, _)| gs.len() < b.len()) {
                        best = Some((gs, name));
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            };
            let baseline =
                split::htools_split(conf, &htools_classes, online, sem, params.full_evacuation);
            match (&baseline, htools_total.as_mut()) {
                (Ok(gs), Some(t)) => *t += gs.len(),
                _ => htools_total = None,
            }
            consider(
                baseline,
                format!("{} colouring, htools greedy split", htools_col.0),
            );
            let splits_needed = sem.any_relocation(conf) || params.full_evacuation;
            let distinct_exact = exact_classes.len() < htools_classes.len();
            if distinct_exact {
                consider(
                    split::htools_split(conf, &exact_classes, online, sem, params.full_evacuation),
                    format!("{exact_name} colouring, htools greedy split"),
                );
            }
            if splits_needed {
                for (classes, name) in [
                    (&htools_classes, htools_col.0),
                    (&exact_classes, exact_name),
                ] {
                    if !distinct_exact && name == exact_name {
                        continue;
                    }
                    let mut gs = Vec::new();
                    let mut res = Ok(());
                    for cl in classes {
                        match split::improved_split(conf, cl, online, sem, params, &mut pack_budget)
                        {
                            Ok(mut parts) => gs.append(&mut parts),
                            Err(e) => {
                                res = Err(e);
                                break;
                            }
                        }
                    }
                    consider(
                        res.map(|()| gs),
                        format!("{name} colouring, capacity-aware packing"),
                    );
                }
            }
            match best {
                Some((gs, name)) => {
                    all.extend(gs);
                    strategies.push(name);
                }
                None => return Err(first_err.unwrap_or(SplitFailure::NonRedundant).into()),
            }
        }
        let strategy = if domains.len() > 1 {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for s in &strategies {
                *counts.entry(s.as_str()).or_default() += 1;
            }
            let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{s} ({n})")).collect();
            format!("{} failure domains: {}", domains.len(), parts.join("; "))
        } else {
            strategies.join("; ")
        };
        Ok((all, strategy, htools_total))
    }
}

/// Instance moves of a group: every instance whose primary changed, or
/// (mirrored) whose secondary changed, except pure primary/secondary swaps.
fn moves(conf: &Conf<'_>, diff: &Diff) -> Vec<Move> {
    let node_ident: HashMap<usize, usize> = diff
        .nodes
        .iter()
        .map(|(slot, n)| (*slot, n.ident))
        .collect();
    let ident = |slot: usize| node_ident.get(&slot).copied().unwrap_or(slot);
    let mut changed: Vec<(usize, SimInst)> = diff.insts.clone();
    changed.sort_by_key(|c| c.0);
    let mut out = Vec::new();
    for (i, now) in changed {
        let inst = &conf.cluster.instances[i];
        let orig = SimInst {
            pnode: inst.pnode,
            snode: inst.snode,
        };
        let has_sec = inst.template.has_secondary();
        let moved = orig.pnode != now.pnode || (has_sec && orig.snode != now.snode);
        let swapped = Some(now.pnode) == orig.snode && now.snode == Some(orig.pnode);
        if moved && !swapped {
            out.push(Move {
                instance: i,
                primary: ident(now.pnode),
                secondary: if has_sec { now.snode.map(ident) } else { None },
            });
        }
    }
    out
}

/// Convenience: prepare and solve.
pub fn plan(cluster: &Cluster, opts: &RollOptions) -> Result<Plan, PlanError> {
    prepare(cluster, opts)?.solve()
}
