//! The reboot graph and its colourings.
//!
//! Vertices are node indices; an edge means two nodes must not be rebooted
//! together. The graph keeps htools' exact shape (vertex range, multi-edges,
//! self-loops, adjacency order) so that the three htools colourings give
//! the same classes, and adds an exact colouring under a work budget.

use std::collections::{BinaryHeap, HashSet};

/// Adjacency over the contiguous node-index range `lo..lo+adj.len()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootGraph {
    pub lo: usize,
    /// Neighbours of each vertex as offsets from `lo`, with duplicates and
    /// self-loops, in htools order (most recently added edge first).
    pub adj: Vec<Vec<u32>>,
}

/// Which instances create which edges.
#[derive(Debug, Clone, Copy)]
pub struct EdgeSources<'a> {
    /// `(primary, secondary)` pairs of the instances whose primary and
    /// secondary must not go down together, in instance order.
    pub mirrored: &'a [(usize, usize)],
    /// For every node, the primaries of the instances that would migrate
    /// onto it (its secondaries), in htools list order. `None` disables
    /// the shared-secondary edges (offline maintenance).
    pub shared_secondary: Option<&'a [Vec<usize>]>,
}

impl RebootGraph {
    /// Builds the graph over `selected` (ascending node indices). Returns
    /// `None` when nothing is selected.
    pub fn build(selected: &[usize], src: EdgeSources<'_>) -> Option<Self> {
        let lo = *selected.first()?;
        let hi = *selected.last()?;
        let n = hi - lo + 1;
        let mut member = vec![false; n];
        for &s in selected {
            member[s - lo] = true;
        }
        let valid = |x: usize, y: usize| {
            x >= lo && y >= lo && x <= hi && y <= hi && member[x - lo] && member[y - lo]
        };
        let key = |x: usize, y: usize| ((x as u64) << 32) | (y as u64);
        let mut adj: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut mirrored_set: HashSet<u64> = HashSet::new();
        for &(p, s) in src.mirrored {
            mirrored_set.insert(key(p, s));
            mirrored_set.insert(key(s, p));
            if valid(p, s) {
                adj[p - lo].push((s - lo) as u32);
                adj[s - lo].push((p - lo) as u32);
            }
        }
        if let Some(per_node) = src.shared_secondary {
            let mut seen: HashSet<u64> = HashSet::new();
            for prims in per_node {
                for &x in prims {
                    for &y in prims {
                        let k = key(x, y);
                        if mirrored_set.contains(&k) || !seen.insert(k) {
                            continue;
                        }
                        if valid(x, y) {
                            adj[x - lo].push((y - lo) as u32);
                        }
                    }
                }
            }
        }
        for a in &mut adj {
            a.reverse();
        }
        Some(Self { lo, adj })
    }

    /// The subgraph induced by `members` (ascending node indices, all
    /// inside this graph's range), over their own index range. Identical to
    /// building the graph for `members` directly.
    pub fn induced(&self, members: &[usize]) -> Option<Self> {
        let lo = *members.first()?;
        let hi = *members.last()?;
        if lo < self.lo || hi >= self.lo + self.adj.len() {
            return None;
        }
        let mut member = vec![false; hi - lo + 1];
        for &m in members {
            member[m - lo] = true;
        }
        let keep = |u: usize| u >= lo && u <= hi && member[u - lo];
        let adj = (lo..=hi)
            .map(|v| {
                if !member[v - lo] {
                    return Vec::new();
                }
                self.adj[v - self.lo]
                    .iter()
                    .map(|&u| u as usize + self.lo)
                    .filter(|&u| keep(u))
                    .map(|u| (u - lo) as u32)
                    .collect()
            })
            .collect();
        Some(Self { lo, adj })
    }

    pub fn len(&self) -> usize {
        self.adj.len()
    }

    pub fn is_empty(&self) -> bool {
        self.adj.is_empty()
    }

    /// The Haskell `show` of the adjacency array, as `hroller -v -v` prints it.
    pub fn show_haskell(&self) -> String {
        let hi = self.lo + self.adj.len() - 1;
        let mut s = format!("array ({},{hi}) [", self.lo);
        for (v, a) in self.adj.iter().enumerate() {
            if v > 0 {
                s.push(',');
            }
            s.push_str(&format!("({},[", v + self.lo));
            for (j, u) in a.iter().enumerate() {
                if j > 0 {
                    s.push(',');
                }
                s.push_str(&(*u as usize + self.lo).to_string());
            }
            s.push_str("])");
        }
        s.push(']');
        s
    }
}

/// A colour per vertex (offset from `lo`).
pub type Colouring = Vec<u32>;

/// Smallest colour not used by an already coloured neighbour.
fn smallest_free(adj: &[u32], colour: &[u32], mark: &mut Vec<usize>, stamp: usize) -> u32 {
    for &u in adj {
        let c = colour[u as usize];
        if c != u32::MAX {
            let c = c as usize;
            if c >= mark.len() {
                mark.resize(c + 1, 0);
            }
            mark[c] = stamp;
        }
    }
    let mut c = 0;
    while c < mark.len() && mark[c] == stamp {
        c += 1;
    }
    c as u32
}

/// Largest-first greedy colouring, htools order: descending degree, ties
/// to the higher vertex.
pub fn colour_lf(g: &RebootGraph) -> Colouring {
    let n = g.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&v| g.adj[v].len());
    let mut colour = vec![u32::MAX; n];
    let mut mark = Vec::new();
    for (stamp, &v) in order.iter().rev().enumerate() {
        colour[v] = smallest_free(&g.adj[v], &colour, &mut mark, stamp + 1);
    }
    colour
}

/// Dynamic-order greedy colouring: repeatedly colours the uncoloured vertex
/// with the largest `(key, degree)`, ties to the higher vertex. With
/// `saturation` the key is the number of distinct neighbour colours (DSatur),
/// otherwise the number of coloured neighbour entries (htools "Dcolor").
fn colour_dynamic(g: &RebootGraph, saturation: bool) -> Colouring {
    let n = g.len();
    let mut colour = vec![u32::MAX; n];
    let mut key = vec![0usize; n];
    let mut neigh_colours: Vec<Vec<u32>> = vec![Vec::new(); if saturation { n } else { 0 }];
    let mut heap: BinaryHeap<(usize, usize, usize)> =
        (0..n).map(|v| (0, g.adj[v].len(), v)).collect();
    let mut mark = Vec::new();
    let mut stamp = 0;
    while let Some((k, _, v)) = heap.pop() {
        if colour[v] != u32::MAX || k != key[v] {
            continue;
        }
        stamp += 1;
        let c = smallest_free(&g.adj[v], &colour, &mut mark, stamp);
        colour[v] = c;
        for &u in &g.adj[v] {
            let u = u as usize;
            if colour[u] != u32::MAX {
                continue;
            }
            let changed = if saturation {
                if neigh_colours[u].contains(&c) {
                    false
                } else {
                    neigh_colours[u].push(c);
                    key[u] += 1;
                    true
                }
            } else {
                key[u] += 1;
                true
            };
            if changed {
                heap.push((key[u], g.adj[u].len(), u));
            }
        }
    }
    colour
}

pub fn colour_dsatur(g: &RebootGraph) -> Colouring {
    colour_dynamic(g, true)
}

pub fn colour_dcolor(g: &RebootGraph) -> Colouring {
    colour_dynamic(g, false)
}

/// Colour classes as ascending node-index lists, colours ascending.
pub fn classes(g: &RebootGraph, colouring: &Colouring) -> Vec<Vec<usize>> {
    let k = colouring.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
    let mut out = vec![Vec::new(); k];
    for (v, &c) in colouring.iter().enumerate() {
        out[c as usize].push(v + g.lo);
    }
    out.retain(|c| !c.is_empty());
    out
}

/// Number of distinct colours among the vertices for which `keep` holds.
pub fn colour_count(colouring: &Colouring) -> usize {
    let mut seen: Vec<u32> = colouring.clone();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// Exact (or improved) colouring of the vertices in `active`, by DSatur
/// branch and bound per connected component, within `budget` work units.
/// Returns a colouring of the whole range (inactive vertices get colour 0)
/// and whether it is proven optimal.
pub fn colour_exact(
    g: &RebootGraph,
    active: &[bool],
    start: &Colouring,
    budget: &mut u64,
) -> (Colouring, bool) {
    let n = g.len();
    // Simple adjacency: active neighbours, no loops, no duplicates.
    let simple: Vec<Vec<u32>> = (0..n)
        .map(|v| {
            if !active[v] {
                return Vec::new();
            }
            let mut a: Vec<u32> = g.adj[v]
                .iter()
                .copied()
                .filter(|&u| u as usize != v && active[u as usize])
                .collect();
            a.sort_unstable();
            a.dedup();
            a
        })
        .collect();
    let mut comp = vec![usize::MAX; n];
    let mut comps: Vec<Vec<usize>> = Vec::new();
    for v in 0..n {
        if !active[v] || comp[v] != usize::MAX {
            continue;
        }
        let id = comps.len();
        let mut stack = vec![v];
        comp[v] = id;
        let mut members = Vec::new();
        while let Some(x) = stack.pop() {
            members.push(x);
            for &u in &simple[x] {
                let u = u as usize;
                if comp[u] == usize::MAX {
                    comp[u] = id;
                    stack.push(u);
                }
            }
        }
        members.sort_unstable();
        comps.push(members);
    }
    let mut out = vec![0u32; n];
    let mut optimal = true;
    for members in &comps {
        // Start from the given colouring restricted to the component.
        let mut local: Vec<u32> = members.iter().map(|&v| start[v]).collect();
        let mut palette: Vec<u32> = local.clone();
        palette.sort_unstable();
        palette.dedup();
        for c in &mut local {
            *c = palette.iter().position(|p| p == c).unwrap_or(0) as u32;
        }
        let ub = palette.len();
        let lb = clique_bound(members, &simple);
        if ub > lb {
            let mut bb = BranchBound::new(members, &simple, ub, lb, local.clone());
            let proven = bb.run(budget);
            local = bb.best;
            optimal &= proven;
        }
        for (i, &v) in members.iter().enumerate() {
            out[v] = local[i];
        }
    }
    (out, optimal)
}

/// Size of a greedily grown clique: a lower bound on the colours needed.
fn clique_bound(members: &[usize], simple: &[Vec<u32>]) -> usize {
    let mut by_degree: Vec<usize> = members.to_vec();
    by_degree.sort_by_key(|&v| std::cmp::Reverse(simple[v].len()));
    let mut best = usize::from(!members.is_empty());
    for &seed in by_degree.iter().take(64) {
        let mut clique = vec![seed as u32];
        let mut cands: Vec<u32> = simple[seed].clone();
        cands.sort_by_key(|&u| std::cmp::Reverse(simple[u as usize].len()));
        for u in cands {
            if clique
                .iter()
                .all(|&c| simple[u as usize].binary_search(&c).is_ok())
            {
                clique.push(u);
            }
        }
        best = best.max(clique.len());
    }
    best
}

struct BranchBound<'a> {
    members: &'a [usize],
    simple: &'a [Vec<u32>],
    /// Position of a graph vertex inside `members`.
    pos: std::collections::HashMap<usize, usize>,
    colour: Vec<u32>,
    /// For each member, how many neighbours hold each colour.
    counts: Vec<Vec<u16>>,
    best: Vec<u32>,
    best_k: usize,
    lb: usize,
    exhausted: bool,
}

impl<'a> BranchBound<'a> {
    fn new(
        members: &'a [usize],
        simple: &'a [Vec<u32>],
        ub: usize,
        lb: usize,
        start: Vec<u32>,
    ) -> Self {
        let pos = members.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let m = members.len();
        Self {
            members,
            simple,
            pos,
            colour: vec![u32::MAX; m],
            counts: vec![vec![0; ub]; m],
            best: start,
            best_k: ub,
            lb,
            exhausted: false,
        }
    }

    /// Returns true when the search finished (the result is optimal).
    fn run(&mut self, budget: &mut u64) -> bool {
        self.search(0, 0, budget);
        !self.exhausted
    }

    fn search(&mut self, coloured: usize, used: usize, budget: &mut u64) {
        if self.exhausted || self.best_k <= self.lb {
            return;
        }
        let m = self.members.len();
        if coloured == m {
            self.best_k = used;
            self.best = self.colour.clone();
            return;
        }
        let cost = m as u64;
        if *budget < cost {
            self.exhausted = true;
            return;
        }
        *budget -= cost;
        // Most saturated uncoloured vertex, then most neighbours.
        let mut pick = usize::MAX;
        let mut pick_key = (0usize, 0usize);
        for i in 0..m {
            if self.colour[i] != u32::MAX {
                continue;
            }
            let sat = self.counts[i].iter().filter(|&&c| c > 0).count();
            let k = (sat, self.simple[self.members[i]].len());
            if pick == usize::MAX || k > pick_key {
                pick = i;
                pick_key = k;
            }
        }
        let limit = (used + 1).min(self.best_k - 1);
        for c in 0..limit {
            if self.counts[pick][c] > 0 {
                continue;
            }
            self.set(pick, c as u32, true);
            self.search(coloured + 1, used.max(c + 1), budget);
            self.set(pick, c as u32, false);
            if self.exhausted || self.best_k <= self.lb || self.best_k <= used.max(c + 1) {
                break;
            }
        }
    }

    fn set(&mut self, i: usize, c: u32, on: bool) {
        self.colour[i] = if on { c } else { u32::MAX };
        let v = self.members[i];
        for &u in &self.simple[v] {
            if let Some(&j) = self.pos.get(&(u as usize)) {
                let cell = &mut self.counts[j][c as usize];
                if on {
                    *cell += 1;
                } else {
                    *cell -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycle(n: usize) -> RebootGraph {
        let pairs: Vec<(usize, usize)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
        let sel: Vec<usize> = (0..n).collect();
        RebootGraph::build(
            &sel,
            EdgeSources {
                mirrored: &pairs,
                shared_secondary: None,
            },
        )
        .unwrap()
    }

    #[test]
    fn odd_cycle_needs_three() {
        let g = cycle(5);
        for c in [colour_lf(&g), colour_dsatur(&g), colour_dcolor(&g)] {
            assert_eq!(colour_count(&c), 3);
        }
    }

    #[test]
    fn exact_beats_greedy_on_crown() {
        // Crown graph: a_i ~ b_j for i != j. Interleaved numbering makes
        // greedy orders use many colours; two suffice.
        let k = 6;
        let mut pairs = Vec::new();
        for i in 0..k {
            for j in 0..k {
                if i != j {
                    pairs.push((2 * i, 2 * j + 1));
                }
            }
        }
        let sel: Vec<usize> = (0..2 * k).collect();
        let g = RebootGraph::build(
            &sel,
            EdgeSources {
                mirrored: &pairs,
                shared_secondary: None,
            },
        )
        .unwrap();
        let order: Vec<usize> = (0..2 * k).collect();
        let mut colour = vec![u32::MAX; 2 * k];
        let mut mark = Vec::new();
        for (s, &v) in order.iter().enumerate() {
            colour[v] = smallest_free(&g.adj[v], &colour, &mut mark, s + 1);
        }
        assert_eq!(colour_count(&colour), k);
        let mut budget = 1_000_000;
        let (best, optimal) = colour_exact(&g, &vec![true; 2 * k], &colour, &mut budget);
        assert!(optimal);
        assert_eq!(colour_count(&best), 2);
        for (v, a) in g.adj.iter().enumerate() {
            for &u in a {
                assert_ne!(best[v], best[u as usize]);
            }
        }
    }

    #[test]
    fn induced_subgraph_equals_direct_build() {
        let pairs = [(0, 3), (3, 5), (1, 2), (2, 5), (0, 5), (4, 1), (0, 3)];
        let shared = vec![vec![], vec![], vec![], vec![0, 2], vec![], vec![3, 2, 0]];
        let src = EdgeSources {
            mirrored: &pairs,
            shared_secondary: Some(&shared),
        };
        let all = RebootGraph::build(&[0, 1, 2, 3, 4, 5], src).unwrap();
        for subset in [vec![0, 3, 5], vec![2, 5], vec![1, 2, 4], vec![3]] {
            assert_eq!(
                all.induced(&subset),
                RebootGraph::build(&subset, src),
                "{subset:?}"
            );
        }
    }

    #[test]
    fn haskell_show_matches_htools() {
        // unique-reboot-order: new-0 (0,1), new-1 (1,2); node 1 is the
        // secondary of new-0 (primary 0), node 2 of new-1 (primary 1).
        let pairs = [(0, 1), (1, 2)];
        let shared = vec![vec![], vec![0], vec![1]];
        let g = RebootGraph::build(
            &[0, 1, 2],
            EdgeSources {
                mirrored: &pairs,
                shared_secondary: Some(&shared),
            },
        )
        .unwrap();
        assert_eq!(
            g.show_haskell(),
            "array (0,2) [(0,[0,1]),(1,[1,2,0]),(2,[1])]"
        );
    }
}
