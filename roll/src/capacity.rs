//! Capacity simulation with htools' forced add/remove semantics, on a
//! working copy of the cluster with an undo log (cheap checkpoints).

use crate::cluster::{Cluster, Instance};

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SimNode {
    /// The node whose identity (name) this record carries. htools'
    /// secondary-replacement defect can copy one node's record into
    /// another node's slot; the compatibility mode reproduces that.
    pub ident: usize,
    pub group: usize,
    /// `trunc(t_mem) - n_mem`.
    base_mem: i64,
    /// Memory missing at load time, if positive (fixed during the run).
    x_mem: i64,
    i_mem: i64,
    pub f_dsk: i64,
    f_spindles: i64,
    excl_stor: bool,
    /// Primary instances, most recently added first.
    pub p_list: Vec<u32>,
    /// Secondary instances, most recently added first.
    pub s_list: Vec<u32>,
}

impl SimNode {
    pub(crate) fn free_mem(&self) -> i64 {
        self.base_mem - self.i_mem - self.x_mem
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SimInst {
    pub pnode: usize,
    pub snode: Option<usize>,
}

#[derive(Debug)]
enum Undo {
    Node(usize, SimNode),
    Inst(usize, SimInst),
}

/// Changes of one reboot group relative to the original configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct Diff {
    pub nodes: Vec<(usize, SimNode)>,
    pub insts: Vec<(usize, SimInst)>,
}

#[derive(Debug)]
pub(crate) struct Conf<'c> {
    pub cluster: &'c Cluster,
    pub nodes: Vec<SimNode>,
    pub insts: Vec<SimInst>,
    /// Mirrored instances whose secondary node is offline: they cannot
    /// migrate, so nodecare treats them as non-redundant.
    pub degraded: Vec<bool>,
    undo: Vec<Undo>,
}

fn new_free_spindles(n: &SimNode, inst: &Instance, add: bool) -> i64 {
    if !n.excl_stor {
        return 0;
    }
    match inst.spindles {
        None if add => -1,
        None => n.f_spindles,
        Some(s) if add => n.f_spindles - s,
        Some(s) => n.f_spindles + s,
    }
}

impl<'c> Conf<'c> {
    pub(crate) fn new(cluster: &'c Cluster, offline: &[bool]) -> Self {
        let plists = cluster.primary_lists();
        let slists = cluster.secondary_lists();
        let nodes = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(ni, n)| {
                let i_mem: i64 = plists[ni]
                    .iter()
                    .map(|&i| &cluster.instances[i])
                    .filter(|i| !i.forthcoming && i.status.uses_memory())
                    .map(|i| i.mem)
                    .sum();
                let base_mem = n.t_mem.trunc() as i64 - n.n_mem;
                let missing = base_mem - i_mem - n.f_mem;
                SimNode {
                    ident: ni,
                    group: n.group,
                    base_mem,
                    x_mem: missing.max(0),
                    i_mem,
                    f_dsk: n.f_dsk,
                    f_spindles: n.free_spindles,
                    excl_stor: n.excl_stor,
                    p_list: plists[ni].iter().map(|&i| i as u32).collect(),
                    s_list: slists[ni].iter().map(|&i| i as u32).collect(),
                }
            })
            .collect();
        let insts = cluster
            .instances
            .iter()
            .map(|i| SimInst {
                pnode: i.pnode,
                snode: i.snode,
            })
            .collect();
        let degraded = cluster
            .instances
            .iter()
            .map(|i| {
                i.template.has_secondary()
                    && i.snode
                        .is_some_and(|s| offline.get(s).copied().unwrap_or(true))
            })
            .collect();
        Self {
            cluster,
            nodes,
            insts,
            degraded,
            undo: Vec::new(),
        }
    }

    pub(crate) fn checkpoint(&self) -> usize {
        self.undo.len()
    }

    pub(crate) fn rollback(&mut self, cp: usize) {
        while self.undo.len() > cp {
            match self.undo.pop() {
                Some(Undo::Node(i, n)) => self.nodes[i] = n,
                Some(Undo::Inst(i, s)) => self.insts[i] = s,
                None => break,
            }
        }
    }

    /// Current values of everything changed since `cp`.
    pub(crate) fn diff_since(&self, cp: usize) -> Diff {
        let mut d = Diff::default();
        let mut seen_n = std::collections::HashSet::new();
        let mut seen_i = std::collections::HashSet::new();
        for u in &self.undo[cp..] {
            match u {
                Undo::Node(i, _) if seen_n.insert(*i) => d.nodes.push((*i, self.nodes[*i].clone())),
                Undo::Inst(i, _) if seen_i.insert(*i) => d.insts.push((*i, self.insts[*i])),
                _ => {}
            }
        }
        d
    }

    pub(crate) fn apply(&mut self, d: &Diff) {
        for (i, n) in &d.nodes {
            self.set_node(*i, n.clone());
        }
        for (i, s) in &d.insts {
            self.set_inst(*i, *s);
        }
    }

    fn set_node(&mut self, i: usize, n: SimNode) {
        let old = std::mem::replace(&mut self.nodes[i], n);
        self.undo.push(Undo::Node(i, old));
    }

    fn set_inst(&mut self, i: usize, s: SimInst) {
        let old = std::mem::replace(&mut self.insts[i], s);
        self.undo.push(Undo::Inst(i, old));
    }

    fn inst(&self, i: usize) -> &'c Instance {
        &self.cluster.instances[i]
    }

    /// Room left on `n` after adding instance `i` as a primary, as
    /// `(free disk, free memory, free spindles)`; `None` when memory, local
    /// disk or exclusive spindles run out (htools' forced checks).
    pub(crate) fn pri_room(&self, n: &SimNode, i: usize) -> Option<(i64, i64, i64)> {
        let inst = self.inst(i);
        if inst.forthcoming {
            return Some((n.f_dsk, n.free_mem(), n.f_spindles));
        }
        let mem = if inst.status.uses_memory() {
            inst.mem
        } else {
            0
        };
        let local = inst.template.uses_local_storage();
        let f_dsk = if local { n.f_dsk - inst.dsk } else { n.f_dsk };
        let f_sp = new_free_spindles(n, inst, true);
        let free_mem = n.free_mem() - mem;
        if free_mem <= 0 || (local && f_dsk <= 0) || (local && n.excl_stor && f_sp < 0) {
            return None;
        }
        Some((f_dsk, free_mem, f_sp))
    }

    /// Forced primary addition: `None` when memory, local disk or exclusive
    /// spindles run out.
    pub(crate) fn add_pri(&self, n: &SimNode, i: usize) -> Option<SimNode> {
        let (f_dsk, _, f_sp) = self.pri_room(n, i)?;
        let inst = self.inst(i);
        let mut out = n.clone();
        if inst.forthcoming {
            return Some(out);
        }
        if inst.status.uses_memory() {
            out.i_mem += inst.mem;
        }
        out.f_dsk = f_dsk;
        out.f_spindles = f_sp;
        out.p_list.insert(0, i as u32);
        Some(out)
    }

    pub(crate) fn remove_pri(&self, n: &SimNode, i: usize) -> SimNode {
        let inst = self.inst(i);
        let mut out = n.clone();
        if inst.forthcoming {
            return out;
        }
        if let Some(p) = out.p_list.iter().position(|&x| x as usize == i) {
            out.p_list.remove(p);
        }
        if inst.status.uses_memory() {
            out.i_mem -= inst.mem;
        }
        if inst.template.uses_local_storage() {
            out.f_dsk += inst.dsk;
        }
        out.f_spindles = new_free_spindles(n, inst, false);
        out
    }

    /// Room left on `n` after adding instance `i` as a secondary, as
    /// `(free disk, free memory, free spindles)`; `None` when it does not fit.
    pub(crate) fn sec_room(&self, n: &SimNode, i: usize) -> Option<(i64, i64, i64)> {
        let inst = self.inst(i);
        if !inst.template.has_secondary() {
            return None;
        }
        if inst.forthcoming {
            return Some((n.f_dsk, n.free_mem(), n.f_spindles));
        }
        let f_dsk = n.f_dsk - inst.dsk;
        let f_sp = new_free_spindles(n, inst, true);
        if f_dsk <= 0 || (n.excl_stor && f_sp < 0) {
            return None;
        }
        Some((f_dsk, n.free_mem(), f_sp))
    }

    /// Forced secondary addition (disk and exclusive spindles only).
    pub(crate) fn add_sec(&self, n: &SimNode, i: usize) -> Option<SimNode> {
        let (f_dsk, _, f_sp) = self.sec_room(n, i)?;
        let mut out = n.clone();
        if self.inst(i).forthcoming {
            return Some(out);
        }
        out.f_dsk = f_dsk;
        out.f_spindles = f_sp;
        out.s_list.insert(0, i as u32);
        Some(out)
    }

    pub(crate) fn remove_sec(&self, n: &SimNode, i: usize) -> SimNode {
        let inst = self.inst(i);
        let mut out = n.clone();
        if inst.forthcoming {
            return out;
        }
        if let Some(p) = out.s_list.iter().position(|&x| x as usize == i) {
            out.s_list.remove(p);
        }
        if inst.template.uses_local_storage() {
            out.f_dsk += inst.dsk;
        }
        out.f_spindles = new_free_spindles(n, inst, false);
        out
    }

    /// Moves instance `i` to a new primary node.
    pub(crate) fn move_primary(&mut self, i: usize, new: usize) -> bool {
        let old = self.insts[i].pnode;
        let Some(new_node) = self.add_pri(&self.nodes[new], i) else {
            return false;
        };
        let old_node = self.remove_pri(&self.nodes[old], i);
        self.set_node(new, new_node);
        self.set_node(old, old_node);
        let s = self.insts[i];
        self.set_inst(i, SimInst { pnode: new, ..s });
        true
    }

    /// Swaps primary and secondary of a mirrored instance.
    pub(crate) fn migrate(&mut self, i: usize) -> bool {
        let SimInst { pnode: p, snode } = self.insts[i];
        let Some(s) = snode else { return false };
        let p1 = self.remove_pri(&self.nodes[p], i);
        let s1 = self.remove_sec(&self.nodes[s], i);
        let Some(s2) = self.add_pri(&s1, i) else {
            return false;
        };
        let Some(p2) = self.add_sec(&p1, i) else {
            return false;
        };
        self.set_node(s, s2);
        self.set_node(p, p2);
        self.set_inst(
            i,
            SimInst {
                pnode: s,
                snode: Some(p),
            },
        );
        true
    }

    /// Gives instance `i` a new secondary node. With `htools_defect` the old
    /// secondary's slot receives a copy of the primary's record, as htools
    /// 3.0 does.
    pub(crate) fn replace_secondary(&mut self, i: usize, new: usize, htools_defect: bool) -> bool {
        let SimInst { pnode: p, snode } = self.insts[i];
        let Some(old) = snode else { return false };
        if p == new {
            return false;
        }
        let Some(new_node) = self.add_sec(&self.nodes[new], i) else {
            return false;
        };
        let source = if htools_defect { p } else { old };
        let old_node = self.remove_sec(&self.nodes[source], i);
        self.set_node(new, new_node);
        self.set_node(old, old_node);
        self.set_inst(
            i,
            SimInst {
                pnode: p,
                snode: Some(new),
            },
        );
        true
    }
}
