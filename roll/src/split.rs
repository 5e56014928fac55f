//! Splitting colour classes into reboot groups whose evacuation fits the
//! remaining capacity: htools' greedy scheme, and an improved packer.

use std::collections::HashSet;

use crate::capacity::{Conf, Diff};
use crate::cluster::Redundancy;

/// Which instances the planner acts on, so that the same algorithms serve
/// the htools-compatible mode and nodecare's semantics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Semantics {
    /// nodecare's view: down instances stay put; shared storage is redundant.
    pub real_redundancy: bool,
    /// Relocate instances without a DRBD secondary (unless ignored).
    pub relocate_non_redundant: bool,
    /// Reproduce htools' secondary-replacement record overwrite.
    pub htools_replace_defect: bool,
}

impl Semantics {
    /// Instances that must be relocated off a node before its reboot.
    pub(crate) fn relocates(&self, conf: &Conf<'_>, i: usize) -> bool {
        let inst = &conf.cluster.instances[i];
        if !self.real_redundancy {
            return !inst.template.has_secondary() && self.relocate_non_redundant;
        }
        if inst.status.is_down() {
            return false;
        }
        match inst.template.redundancy() {
            // Shared storage can be live-migrated anywhere in the group, so
            // it is moved, unless the operator accepts that instances without
            // a DRBD secondary go down with their node (hroller's meaning of
            // `--ignore-non-redundant`).
            Redundancy::Shared | Redundancy::Local => self.relocate_non_redundant,
            Redundancy::Mirrored => conf.degraded[i] && self.relocate_non_redundant,
        }
    }

    /// Mirrored instances migrated (full evacuation) and re-mirrored.
    pub(crate) fn evacuates_mirror(&self, conf: &Conf<'_>, i: usize) -> bool {
        let inst = &conf.cluster.instances[i];
        inst.template.has_secondary()
            && !(self.real_redundancy && (inst.status.is_down() || conf.degraded[i]))
    }

    /// Whether any work exists at all for the non-redundant stage.
    pub(crate) fn any_relocation(&self, conf: &Conf<'_>) -> bool {
        (0..conf.cluster.instances.len()).any(|i| self.relocates(conf, i))
    }
}

/// One reboot group and the configuration it needs, relative to the original.
#[derive(Debug, Clone)]
pub(crate) struct SubGroup {
    pub nodes: Vec<usize>,
    pub diff: Diff,
}

/// Why a split failed; mirrors htools' three capacity errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitFailure {
    NonRedundant,
    Migrate,
    Secondaries,
}

/// Targets of `ndx`'s relocations: the given targets minus `ndx`, in
/// `ndx`'s node group.
fn same_group_targets(conf: &Conf<'_>, ndx: usize, targets: &[usize]) -> Vec<usize> {
    let grp = conf.nodes[ndx].group;
    targets
        .iter()
        .copied()
        .filter(|&t| t != ndx && conf.nodes[t].group == grp)
        .collect()
}

/// htools' greedy pass: scan `ndxs` in order; a node joins when all its
/// instances (as chosen by `clear_one`) find room, first fit, among the
/// remaining targets of its group. Returns the nodes taken.
fn greedy_pass(
    conf: &mut Conf<'_>,
    ndxs: &[usize],
    all_targets: &[usize],
    clear_one: &dyn Fn(&mut Conf<'_>, usize, &[usize]) -> bool,
) -> Vec<usize> {
    let mut targets: Vec<usize> = all_targets.to_vec();
    let mut taken = Vec::new();
    for &ndx in ndxs {
        let cp = conf.checkpoint();
        let others: Vec<usize> = match targets.iter().position(|&t| t == ndx) {
            Some(p) => {
                let mut o = targets.clone();
                o.remove(p);
                o
            }
            None => targets.clone(),
        };
        let same = same_group_targets(conf, ndx, &others);
        if clear_one(conf, ndx, &same) {
            taken.push(ndx);
            targets = others;
        } else {
            conf.rollback(cp);
        }
    }
    taken
}

fn relocate_first_fit(sem: Semantics) -> impl Fn(&mut Conf<'_>, usize, &[usize]) -> bool {
    move |conf, ndx, same| {
        relocated_primaries(conf, sem, ndx)
            .into_iter()
            .all(|i| same.iter().any(|&t| conf.move_primary(i, t)))
    }
}

fn secondaries_first_fit(sem: Semantics) -> impl Fn(&mut Conf<'_>, usize, &[usize]) -> bool {
    move |conf, ndx, same| {
        let insts: Vec<usize> = conf.nodes[ndx]
            .s_list
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| {
                // htools tries every listed secondary; nodecare only the
                // mirrored instances it evacuates.
                !sem.real_redundancy || sem.evacuates_mirror(conf, i)
            })
            .collect();
        insts.into_iter().all(|i| {
            same.iter()
                .any(|&t| conf.replace_secondary(i, t, sem.htools_replace_defect))
        })
    }
}

/// Repeats greedy passes, each from the configuration at `base`, until
/// every node is placed. Each group's diff is relative to `base_cp`.
fn partition(
    conf: &mut Conf<'_>,
    ndxs: &[usize],
    all_targets: &[usize],
    base_cp: usize,
    clear_one: &dyn Fn(&mut Conf<'_>, usize, &[usize]) -> bool,
) -> Option<Vec<SubGroup>> {
    let mut remaining: Vec<usize> = ndxs.to_vec();
    let mut out = Vec::new();
    while !remaining.is_empty() {
        let cp = conf.checkpoint();
        let taken = greedy_pass(conf, &remaining, all_targets, clear_one);
        let diff = conf.diff_since(base_cp);
        conf.rollback(cp);
        if taken.is_empty() {
            return None;
        }
        let set: HashSet<usize> = taken.iter().copied().collect();
        remaining.retain(|n| !set.contains(n));
        out.push(SubGroup { nodes: taken, diff });
    }
    Some(out)
}

fn migrate_off(conf: &mut Conf<'_>, sem: Semantics, nodes: &[usize]) -> bool {
    let insts: Vec<usize> = nodes
        .iter()
        .flat_map(|&n| conf.nodes[n].p_list.clone())
        .map(|i| i as usize)
        .filter(|&i| sem.evacuates_mirror(conf, i))
        .collect();
    insts.into_iter().all(|i| conf.migrate(i))
}

/// htools' algorithm for every colour class: greedy non-redundant split,
/// then (full evacuation) migration and greedy secondary split.
pub(crate) fn htools_split(
    conf: &mut Conf<'_>,
    classes: &[Vec<usize>],
    targets: &[usize],
    sem: Semantics,
    full_evacuation: bool,
) -> Result<Vec<SubGroup>, SplitFailure> {
    let base = conf.checkpoint();
    let mut groups = Vec::new();
    let relocation_needed = sem.any_relocation(conf);
    for class in classes {
        if relocation_needed {
            let clear = relocate_first_fit(sem);
            let parts =
                partition(conf, class, targets, base, &clear).ok_or(SplitFailure::NonRedundant)?;
            groups.extend(parts);
        } else {
            groups.push(SubGroup {
                nodes: class.clone(),
                diff: Diff::default(),
            });
        }
    }
    if !full_evacuation {
        return Ok(groups);
    }
    let mut migrated = Vec::new();
    for g in &groups {
        conf.apply(&g.diff);
        let ok = migrate_off(conf, sem, &g.nodes);
        let diff = conf.diff_since(base);
        conf.rollback(base);
        if !ok {
            return Err(SplitFailure::Migrate);
        }
        migrated.push(SubGroup {
            nodes: g.nodes.clone(),
            diff,
        });
    }
    let mut out = Vec::new();
    for g in &migrated {
        conf.apply(&g.diff);
        let clear = secondaries_first_fit(sem);
        let parts = partition(conf, &g.nodes, targets, base, &clear);
        conf.rollback(base);
        out.extend(parts.ok_or(SplitFailure::Secondaries)?);
    }
    Ok(out)
}

impl SplitFailure {
    /// The later of two failing stages (relocation, migration, secondaries).
    fn max_stage(self, other: Self) -> Self {
        let rank = |f: Self| match f {
            Self::NonRedundant => 0,
            Self::Migrate => 1,
            Self::Secondaries => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// Per-run knobs of the improved packer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackParams {
    pub full_evacuation: bool,
    /// Work units for the exhaustive search of a node that greedy packing
    /// cannot clear on its own.
    pub search_budget: u64,
}

/// Worst fit: the allowed target that keeps the most room after taking
/// the instance, trying them in that order.
fn ranked_targets(
    conf: &Conf<'_>,
    inst: usize,
    from: usize,
    excluded: &HashSet<usize>,
    online: &[Vec<usize>],
    secondary: bool,
) -> Vec<usize> {
    let grp = conf.nodes[from].group;
    let cur = conf.insts[inst];
    let Some(same_group) = online.get(grp) else {
        return Vec::new();
    };
    let mut cands: Vec<(i64, i64, usize)> = same_group
        .iter()
        .copied()
        .filter(|&t| {
            !excluded.contains(&t)
                && conf.nodes[t].group == grp
                && t != from
                && (!secondary || t != cur.pnode)
        })
        .filter_map(|t| {
            let n = &conf.nodes[t];
            let (f_dsk, free_mem, _) = if secondary {
                conf.sec_room(n, inst)
            } else {
                conf.pri_room(n, inst)
            }?;
            Some((f_dsk, free_mem, t))
        })
        .collect();
    let local = conf.cluster.instances[inst].template.uses_local_storage();
    if local {
        cands.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    } else {
        cands.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)).then(a.2.cmp(&b.2)));
    }
    cands.into_iter().map(|c| c.2).collect()
}

/// The primary instances on `node` that must move off it.
fn relocated_primaries(conf: &Conf<'_>, sem: Semantics, node: usize) -> Vec<usize> {
    conf.nodes[node]
        .p_list
        .iter()
        .map(|&i| i as usize)
        .filter(|&i| sem.relocates(conf, i))
        .collect()
}

/// Work items to clear `node` given the nodes already rebooting together.
fn relocation_items(conf: &Conf<'_>, sem: Semantics, node: usize) -> Vec<usize> {
    let mut items = relocated_primaries(conf, sem, node);
    let size = |i: &usize| {
        let inst = &conf.cluster.instances[*i];
        (inst.dsk, inst.mem)
    };
    items.sort_by_key(|i| std::cmp::Reverse(size(i)));
    items
}

fn secondary_items(conf: &Conf<'_>, sem: Semantics, node: usize) -> Vec<usize> {
    let mut items: Vec<usize> = conf.nodes[node]
        .s_list
        .iter()
        .map(|&i| i as usize)
        .filter(|&i| sem.evacuates_mirror(conf, i))
        .collect();
    items.sort_by_key(|&i| std::cmp::Reverse(conf.cluster.instances[i].dsk));
    items
}

/// Places `items` (relocations or new secondaries) off `from` greedily,
/// worst fit first.
fn place_greedy(
    conf: &mut Conf<'_>,
    items: &[usize],
    from: usize,
    excluded: &HashSet<usize>,
    online: &[Vec<usize>],
    secondary: bool,
) -> bool {
    items.iter().all(|&i| {
        let ranked = ranked_targets(conf, i, from, excluded, online, secondary);
        ranked.into_iter().any(|t| {
            if secondary {
                conf.replace_secondary(i, t, false)
            } else {
                conf.move_primary(i, t)
            }
        })
    })
}

type Continuation<'k, 'c> = &'k mut dyn FnMut(&mut Conf<'c>, &mut u64) -> bool;

/// Exhaustive placement by backtracking; `then` must also succeed on the
/// resulting configuration.
#[allow(clippy::too_many_arguments)]
fn place_search<'c>(
    conf: &mut Conf<'c>,
    items: &[usize],
    from: usize,
    excluded: &HashSet<usize>,
    online: &[Vec<usize>],
    secondary: bool,
    budget: &mut u64,
    then: Continuation<'_, 'c>,
) -> bool {
    let Some((&first, rest)) = items.split_first() else {
        return then(conf, budget);
    };
    let ranked = ranked_targets(conf, first, from, excluded, online, secondary);
    for t in ranked {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        let cp = conf.checkpoint();
        let ok = if secondary {
            conf.replace_secondary(first, t, false)
        } else {
            conf.move_primary(first, t)
        };
        if ok && place_search(conf, rest, from, excluded, online, secondary, budget, then) {
            return true;
        }
        conf.rollback(cp);
    }
    false
}

/// Adds `node` to the group being built (whose members are `excluded`,
/// `node` included): relocates its instances and, for full evacuation,
/// migrates its mirrored primaries and re-mirrors every instance that
/// loses its secondary. Also re-homes anything earlier members parked on it.
fn add_member(
    conf: &mut Conf<'_>,
    sem: Semantics,
    node: usize,
    excluded: &HashSet<usize>,
    online: &[Vec<usize>],
    p: PackParams,
) -> Result<(), SplitFailure> {
    let items = relocation_items(conf, sem, node);
    if !place_greedy(conf, &items, node, excluded, online, false) {
        return Err(SplitFailure::NonRedundant);
    }
    if p.full_evacuation {
        if !migrate_off(conf, sem, &[node]) {
            return Err(SplitFailure::Migrate);
        }
        let items = secondary_items(conf, sem, node);
        if !place_greedy(conf, &items, node, excluded, online, true) {
            return Err(SplitFailure::Secondaries);
        }
    }
    Ok(())
}

/// [`add_member`] by exhaustive search over every placement, within budget.
fn add_member_search(
    conf: &mut Conf<'_>,
    sem: Semantics,
    node: usize,
    excluded: &HashSet<usize>,
    online: &[Vec<usize>],
    p: PackParams,
    budget: &mut u64,
) -> Result<(), SplitFailure> {
    let items = relocation_items(conf, sem, node);
    let mut failure = SplitFailure::NonRedundant;
    let mut after_relocation = |conf: &mut Conf<'_>, budget: &mut u64| {
        if !p.full_evacuation {
            return true;
        }
        let cp = conf.checkpoint();
        if !migrate_off(conf, sem, &[node]) {
            conf.rollback(cp);
            failure = failure.max_stage(SplitFailure::Migrate);
            return false;
        }
        let sitems = secondary_items(conf, sem, node);
        let ok = place_search(
            conf,
            &sitems,
            node,
            excluded,
            online,
            true,
            budget,
            &mut |_, _| true,
        );
        if !ok {
            conf.rollback(cp);
            failure = failure.max_stage(SplitFailure::Secondaries);
        }
        ok
    };
    if place_search(
        conf,
        &items,
        node,
        excluded,
        online,
        false,
        budget,
        &mut after_relocation,
    ) {
        Ok(())
    } else {
        Err(failure)
    }
}

/// The improved split of one class: nodes ordered by decreasing demand,
/// next-fit into groups with worst-fit placement; a node that cannot be
/// cleared alone greedily is searched exhaustively (within budget).
pub(crate) fn improved_split(
    conf: &mut Conf<'_>,
    class: &[usize],
    online: &[usize],
    sem: Semantics,
    p: PackParams,
    budget: &mut u64,
) -> Result<Vec<SubGroup>, SplitFailure> {
    let groups = conf.nodes.iter().map(|n| n.group + 1).max().unwrap_or(0);
    let mut by_group: Vec<Vec<usize>> = vec![Vec::new(); groups];
    for &t in online {
        by_group[conf.nodes[t].group].push(t);
    }
    let online = &by_group[..];
    let base = conf.checkpoint();
    if !sem.any_relocation(conf) && !p.full_evacuation {
        return Ok(vec![SubGroup {
            nodes: class.to_vec(),
            diff: Diff::default(),
        }]);
    }
    let demand = |n: usize| {
        let r = relocation_items(conf, sem, n).len();
        let s = if p.full_evacuation {
            secondary_items(conf, sem, n).len()
                + conf.nodes[n]
                    .p_list
                    .iter()
                    .filter(|&&i| sem.evacuates_mirror(conf, i as usize))
                    .count()
        } else {
            0
        };
        r + s
    };
    let mut remaining: Vec<usize> = class.to_vec();
    remaining.sort_by_key(|&n| (std::cmp::Reverse(demand(n)), n));
    let mut out = Vec::new();
    while !remaining.is_empty() {
        let mut members: Vec<usize> = Vec::new();
        let mut excluded: HashSet<usize> = HashSet::new();
        let mut left = Vec::new();
        for &n in &remaining {
            let cp = conf.checkpoint();
            excluded.insert(n);
            let res = add_member(conf, sem, n, &excluded, online, p);
            let res = match res {
                Err(_) if members.is_empty() => {
                    conf.rollback(cp);
                    let mut b = (*budget).min(p.search_budget);
                    let before = b;
                    let r = add_member_search(conf, sem, n, &excluded, online, p, &mut b);
                    *budget -= before - b;
                    r
                }
                r => r,
            };
            match res {
                Ok(()) => members.push(n),
                Err(e) => {
                    conf.rollback(cp);
                    excluded.remove(&n);
                    if members.is_empty() {
                        conf.rollback(base);
                        return Err(e);
                    }
                    left.push(n);
                }
            }
        }
        let diff = conf.diff_since(base);
        conf.rollback(base);
        members.sort_unstable();
        out.push(SubGroup {
            nodes: members,
            diff,
        });
        remaining = left;
    }
    Ok(out)
}
