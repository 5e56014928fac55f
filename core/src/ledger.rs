//! The ledger (pure): every action a duty means to take or has taken on the cluster, one
//! [`Entry`] each, owned by the duty record that holds it ([`Holder`]). The executor records an
//! entry before it submits anything, and marks it as the job goes; what is in force for the
//! gate comes from the unfinished entries ([`in_force`]).
//!
//! [`Ledger`] is the storage: SQLite in the coordinator's store (`store::ledger`, replicated with
//! the rest of the state), or [`MemoryLedger`] for one-shot runs without a database.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ganeti::JobId;
pub use crate::ganeti::Op;
use crate::gate::Holder;

/// An action of the agent on a node (not a Ganeti job): its outcome comes from the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "agent", rename_all = "kebab-case")]
pub enum AgentOp {
    /// A live repair command (node repair without evacuation).
    Repair {
        /// Node.
        node: String,
        /// Repair command.
        command: String,
    },
    /// A campaign's hook (the reboot or update command) on a node.
    Hook {
        /// Node.
        node: String,
        /// Hook command.
        command: String,
    },
    /// Run the node's diagnose scripts now and wait for a fresh verdict.
    Check {
        /// Node.
        node: String,
    },
}

/// What an entry does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "kebab-case")]
pub enum Action {
    /// One Ganeti job.
    Ganeti {
        /// The operation.
        op: Op,
    },
    /// One agent request.
    Agent {
        /// The operation.
        op: AgentOp,
    },
}

impl Action {
    /// A Ganeti operation.
    pub const fn ganeti(op: Op) -> Self {
        Self::Ganeti { op }
    }

    /// The Ganeti operation, if it is one.
    pub const fn op(&self) -> Option<&Op> {
        match self {
            Self::Ganeti { op } => Some(op),
            Self::Agent { .. } => None,
        }
    }
}

/// What an entry disrupts while it is in force.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "hold", rename_all = "kebab-case")]
pub enum Hold {
    /// The node is drained (held until a [`Hold::Release`] of the same holder succeeds).
    Drained {
        /// Node.
        node: String,
    },
    /// The node is offline (held until released).
    Offline {
        /// Node.
        node: String,
    },
    /// The node is rebooting or being repaired (held until released).
    Rebooting {
        /// Node.
        node: String,
    },
    /// A live repair runs on the node: held without being disrupted (its instances keep
    /// running; the gate's `touched`), while the entry is unfinished.
    Repairing {
        /// Node.
        node: String,
    },
    /// The node receives its instances back (touched, not disrupted, while the entry is
    /// unfinished).
    Receiving {
        /// Node.
        node: String,
    },
    /// An instance moves (the nodes it leaves and goes to are touched while the entry is
    /// unfinished; nothing is disrupted).
    Moving {
        /// Instance.
        instance: String,
        /// Nodes it is on (primary, then DRBD secondary).
        from: Vec<String>,
        /// Nodes it goes to (empty: its DRBD secondary, or the allocator's choice).
        to: Vec<String>,
    },
    /// Once this entry succeeds, the holder no longer holds the node.
    Release {
        /// Node.
        node: String,
    },
}

/// Where an entry is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum State {
    /// Recorded; its submission may or may not have happened (unknown after a crash, found
    /// again in Ganeti's job list by its reason trail).
    Recorded,
    /// Submitted; outcome pending.
    Submitted,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully, or never submitted.
    Failed {
        /// Why.
        why: String,
    },
    /// Never ran: canceled before it started, or a job it came after did not succeed.
    Canceled {
        /// Why.
        why: String,
    },
    /// Still not finished at its deadline; its job is still followed and its outcome replaces
    /// this state.
    TimedOut,
}

impl State {
    /// Whether it may still do something (recorded, submitted, or timed out).
    pub const fn is_unfinished(&self) -> bool {
        matches!(self, Self::Recorded | Self::Submitted | Self::TimedOut)
    }

    /// Short name (`recorded`, `submitted`, …).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Recorded => "recorded",
            Self::Submitted => "submitted",
            Self::Succeeded => "succeeded",
            Self::Failed { .. } => "failed",
            Self::Canceled { .. } => "canceled",
            Self::TimedOut => "timed-out",
        }
    }

    /// Why it failed or never ran.
    pub fn why(&self) -> Option<&str> {
        match self {
            Self::Failed { why } | Self::Canceled { why } => Some(why),
            _ => None,
        }
    }
}

/// One action of a duty record, as the executor keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Assigned by the ledger when recorded; increasing in recording order.
    pub id: u64,
    /// The duty record that owns it (its uuid is the reason trail's `incident=`).
    pub holder: Holder,
    /// Unique within the holder; the reason trail's `intent=` (no whitespace or `:`).
    pub key: String,
    /// What it does.
    pub action: Action,
    /// Keys of the holder's entries that must succeed first (Ganeti jobs chained with
    /// `depends`, other entries submitted once those succeeded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Submitted only once every entry it comes after has succeeded, never chained after their
    /// jobs with `depends` (instance repair: RAPI's reinstall cannot carry `depends`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchained: bool,
    /// What it disrupts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<Hold>,
    /// What it does, for people (the reason trail's text).
    pub description: String,
    /// The duty's own facts about it, for people (balancing: node group, proposal).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub about: BTreeMap<String, String>,
    /// Where it is.
    #[serde(flatten)]
    pub state: State,
    /// The Ganeti job, once known (kept once it ended).
    pub job: Option<JobId>,
    /// Unix ms when recorded.
    pub recorded_ms: u64,
    /// Unix ms after which a submitted entry times out.
    pub deadline_ms: u64,
    /// Unix ms when it finished.
    pub finished_ms: Option<u64>,
}

impl Entry {
    /// A new entry to record (`id` is assigned by the ledger).
    pub fn new(
        holder: Holder,
        key: impl Into<String>,
        action: Action,
        description: impl Into<String>,
        recorded_ms: u64,
        deadline_ms: u64,
    ) -> Self {
        Self {
            id: 0,
            holder,
            key: trail_key(&key.into()),
            action,
            after: Vec::new(),
            unchained: false,
            holds: Vec::new(),
            description: description.into(),
            about: BTreeMap::new(),
            state: State::Recorded,
            job: None,
            recorded_ms,
            deadline_ms,
            finished_ms: None,
        }
    }

    /// The same entry, after the holder's entries `keys`.
    #[must_use]
    pub fn after(mut self, keys: impl IntoIterator<Item = String>) -> Self {
        self.after = keys.into_iter().map(|k| trail_key(&k)).collect();
        self
    }

    /// The same entry, submitted only once the entries it comes after have succeeded.
    #[must_use]
    pub const fn unchained(mut self) -> Self {
        self.unchained = true;
        self
    }

    /// The same entry, holding `holds`.
    #[must_use]
    pub fn holding(mut self, holds: impl IntoIterator<Item = Hold>) -> Self {
        self.holds = holds.into_iter().collect();
        self
    }

    /// The reason trail's uuid: the holder's.
    pub fn trail(&self) -> Option<Uuid> {
        holder_uuid(&self.holder)
    }
}

/// A key as the reason trail writes it (`Reason::new`): whitespace and `:` become `_`.
pub fn trail_key(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_whitespace() || c == ':' {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// The uuid of a holder that owns ledger entries (not a grant or someone else).
pub const fn holder_uuid(holder: &Holder) -> Option<Uuid> {
    match holder {
        Holder::Incident { id }
        | Holder::InstanceRepair { id }
        | Holder::Campaign { id }
        | Holder::Balancing { id } => Some(*id),
        Holder::Grant { .. } | Holder::Someone { .. } => None,
    }
}

/// A holder as stored (`incident:<uuid>`, `balancing:<uuid>`, …); `None` for holders that own
/// no entries.
pub fn holder_text(holder: &Holder) -> Option<String> {
    let kind = match holder {
        Holder::Incident { .. } => "incident",
        Holder::InstanceRepair { .. } => "instance-repair",
        Holder::Campaign { .. } => "campaign",
        Holder::Balancing { .. } => "balancing",
        Holder::Grant { .. } | Holder::Someone { .. } => return None,
    };
    holder_uuid(holder).map(|id| format!("{kind}:{id}"))
}

/// What the ledger holds in force, in the gate's terms ([`crate::gate::InForce`]): the nodes
/// its holders disrupt, the nodes they hold without disrupting them, and the nodes instances
/// are moving between.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Held {
    /// Node → the holder disrupting it (the first recorded, should two): `InForce::nodes`.
    pub nodes: BTreeMap<String, Holder>,
    /// Node → the holder holding it without disruption (a live repair): `InForce::touched`.
    pub touched: BTreeMap<String, Holder>,
    /// Node → the holders moving instances from or to it.
    pub moving: BTreeMap<String, BTreeSet<Holder>>,
}

impl Held {
    /// The disruptions in force of a round, from what the duties say they hold (`duties`) and
    /// what this ledger holds. A holder whose duty gives its own account (`own_account`:
    /// incidents and campaigns) has its ledger holds counted as a safety net under that
    /// account: where both name a node, the duty's holder is the one shown. The other holders
    /// (balancing, instance repair) hold what their entries hold, over any duty's account. The
    /// nodes drained or offline by someone else are named by who left them so, from the flags
    /// the duties left and `more_left` (those recorded apart, the store's).
    pub fn in_force_with(
        &self,
        view: &crate::gate::View,
        duties: crate::gate::Holds,
        own_account: impl Fn(&Holder) -> bool,
        more_left: impl IntoIterator<Item = crate::gate::FlagChange>,
    ) -> crate::gate::InForce {
        let (net_touched, ledger_touched): (Vec<_>, Vec<_>) =
            self.touching().partition(|(_, h)| own_account(h));
        let (net_nodes, ledger_nodes): (Vec<_>, Vec<_>) = self
            .nodes
            .iter()
            .map(|(node, holder)| (node.clone(), holder.clone()))
            .partition(|(_, h)| own_account(h));
        crate::gate::InForce::new(
            view,
            net_nodes
                .into_iter()
                .chain(duties.disrupted)
                .chain(ledger_nodes),
        )
        .with_touched(
            view,
            net_touched
                .into_iter()
                .chain(duties.touched)
                .chain(ledger_touched),
        )
        .with_left_by(&crate::gate::left_by(
            view,
            duties.left.into_iter().chain(more_left),
        ))
    }

    /// The nodes held without being disrupted, for [`crate::gate::InForce::touched`]: those of
    /// a live repair, and those an instance moves off or onto while its job is unfinished (a
    /// balancing move in flight: no other holder drains, grants or moves there meanwhile). A
    /// node several holders move instances on is named once for each.
    pub fn touching(&self) -> impl Iterator<Item = (String, Holder)> + '_ {
        self.touched
            .iter()
            .map(|(node, holder)| (node.clone(), holder.clone()))
            .chain(self.moving.iter().flat_map(|(node, holders)| {
                holders
                    .iter()
                    .map(move |holder| (node.clone(), holder.clone()))
            }))
    }
}

/// Whether an entry's hold may be (or is) in effect: it is unfinished, it succeeded, or it
/// timed out (uncertain). A failed or canceled entry did not take its hold.
fn took_hold(state: &State) -> bool {
    matches!(
        state,
        State::Recorded | State::Submitted | State::Succeeded | State::TimedOut
    )
}

/// What `entries` (those of holders still open: a finished duty record holds nothing) hold in
/// force. A node hold (drained, offline, rebooting) lasts from its entry's recording until an
/// entry of the same holder releasing the node, recorded after it, has succeeded; a hold of a
/// failed or canceled entry never took effect, and a release ends no hold whose entry is still
/// unfinished (it may still take effect). Receiving, repairing and moving holds last while
/// their entry is unfinished and touch their nodes without disrupting them: a node its
/// instances migrate back onto counts against no cap (as the campaign's own account says,
/// [`crate::campaign::Record::touched`]). Uncertainty holds: a timed-out entry holds as if it
/// ran.
pub fn in_force<E: Borrow<Entry>>(entries: &[E]) -> Held {
    let mut sorted: Vec<&Entry> = entries.iter().map(Borrow::borrow).collect();
    sorted.sort_by_key(|e| e.id);
    // (holder, node) → held since the entry of this id.
    let mut held: BTreeMap<(&Holder, &str), u64> = BTreeMap::new();
    // (holder, node) → its holding entries not finished yet: a release cannot end what they
    // may still do.
    let mut running: BTreeMap<(&Holder, &str), usize> = BTreeMap::new();
    let mut out = Held::default();
    for entry in &sorted {
        for hold in &entry.holds {
            match hold {
                Hold::Drained { node } | Hold::Offline { node } | Hold::Rebooting { node } => {
                    if took_hold(&entry.state) {
                        held.entry((&entry.holder, node)).or_insert(entry.id);
                    }
                    if entry.state.is_unfinished() {
                        *running.entry((&entry.holder, node)).or_default() += 1;
                    }
                }
                Hold::Release { node } => {
                    let key = (&entry.holder, node.as_str());
                    if entry.state == State::Succeeded && !running.contains_key(&key) {
                        held.remove(&key);
                    }
                }
                Hold::Receiving { node } | Hold::Repairing { node } => {
                    if entry.state.is_unfinished() {
                        out.touched
                            .entry(node.clone())
                            .or_insert_with(|| entry.holder.clone());
                    }
                }
                Hold::Moving { from, to, .. } => {
                    if entry.state.is_unfinished() {
                        for node in from.iter().chain(to) {
                            out.moving
                                .entry(node.clone())
                                .or_default()
                                .insert(entry.holder.clone());
                        }
                    }
                }
            }
        }
    }
    let mut first: Vec<((&Holder, &str), u64)> = held.into_iter().collect();
    first.sort_by_key(|(_, id)| *id);
    for ((holder, node), _) in first {
        out.nodes
            .entry(node.to_owned())
            .or_insert_with(|| holder.clone());
    }
    // A node disrupted is not also merely touched.
    out.touched.retain(|node, _| !out.nodes.contains_key(node));
    out
}

/// Which of a holder's recorded entries may be submitted now, and which can never run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ready {
    /// Entries to submit, in order, each with the keys of the entries whose jobs it is chained
    /// after (`depends`): submitted already, or earlier in this list.
    pub submit: Vec<(u64, Vec<String>)>,
    /// Entries that can never run (an entry they come after did not succeed), with why.
    pub never: Vec<(u64, String)>,
}

/// The recorded entries of `entries` (one holder's) that may be submitted now. An entry is
/// ready when each entry it comes after has succeeded, or, for a Ganeti job after another Ganeti
/// job (unless it is [`Entry::unchained`]), is submitted or ready itself (then chained with `depends` on its job), so that a chain
/// of jobs is submitted at once.
pub fn ready<E: Borrow<Entry>>(entries: &[E]) -> Ready {
    let entries: Vec<&Entry> = entries.iter().map(Borrow::borrow).collect();
    let by_key: BTreeMap<&str, &Entry> = entries.iter().map(|&e| (e.key.as_str(), e)).collect();
    let mut sorted = entries;
    sorted.sort_by_key(|e| e.id);
    let mut out = Ready::default();
    let mut will_submit: BTreeSet<&str> = BTreeSet::new();
    let mut never: BTreeSet<&str> = BTreeSet::new();
    // Of each entry to submit: how many entries of this pass its chain has before it.
    let mut depth: BTreeMap<&str, usize> = BTreeMap::new();
    let mut submit: Vec<(usize, u64, Vec<String>)> = Vec::new();
    for entry in sorted.iter().filter(|e| e.state == State::Recorded) {
        let mut chained = Vec::new();
        let mut wait = false;
        let mut dead: Option<String> = None;
        for key in &entry.after {
            let Some(before) = by_key.get(key.as_str()) else {
                dead = Some(format!("it comes after {key}, which is not recorded"));
                break;
            };
            if never.contains(key.as_str()) {
                dead = Some(format!("{key} never ran"));
                break;
            }
            let chainable =
                !entry.unchained && entry.action.op().is_some() && before.action.op().is_some();
            match &before.state {
                State::Succeeded => {}
                State::Failed { .. } | State::Canceled { .. } => {
                    dead = Some(format!("{key} did not succeed"));
                    break;
                }
                State::Submitted | State::TimedOut if chainable && before.job.is_some() => {
                    chained.push(key.clone());
                }
                State::Recorded if chainable && will_submit.contains(key.as_str()) => {
                    chained.push(key.clone());
                }
                _ => wait = true,
            }
        }
        if let Some(why) = dead {
            never.insert(entry.key.as_str());
            out.never.push((entry.id, why));
        } else if !wait {
            let after = chained
                .iter()
                .filter_map(|key| depth.get(key.as_str()).map(|d| d + 1))
                .max()
                .unwrap_or(0);
            will_submit.insert(entry.key.as_str());
            depth.insert(entry.key.as_str(), after);
            submit.push((after, entry.id, chained));
        }
    }
    // The first job of every chain first, then the second of each, and so on (in recording
    // order within each): a group's undrains all start before the migrations back that wait
    // for them, and each job still comes after those it is chained to.
    submit.sort_by_key(|(after, id, _)| (*after, *id));
    out.submit = submit
        .into_iter()
        .map(|(_, id, chained)| (id, chained))
        .collect();
    out
}

/// A ledger failure.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The storage failed.
    #[error("ledger: {0}")]
    Storage(String),
    /// An entry of the same holder and key is recorded already.
    #[error("ledger: {holder} already has an entry {key}")]
    Duplicate {
        /// The holder.
        holder: String,
        /// The key.
        key: String,
    },
    /// No entry has this id.
    #[error("ledger: no entry {0}")]
    Unknown(u64),
    /// The holder owns no entries (a grant, someone else).
    #[error("ledger: {0} cannot own entries")]
    NotAnOwner(String),
}

/// Where the entries are kept.
pub trait Ledger: Send + Sync + std::fmt::Debug {
    /// Records `entries` (all or none, durable before this returns); returns them with their
    /// ids. Refuses a key its holder already has.
    fn record(&self, entries: &[Entry]) -> Result<Vec<Entry>, LedgerError>;

    /// Stores where `entry` is now (its state, job and finish time), by its id.
    fn mark(&self, entry: &Entry) -> Result<(), LedgerError>;

    /// [`Ledger::mark`] for each of `entries`, all or none (one durable write for many: a
    /// group's thousands of submissions or job ends).
    fn mark_all(&self, entries: &[Entry]) -> Result<(), LedgerError> {
        entries.iter().try_for_each(|entry| self.mark(entry))
    }

    /// Every entry, in recording order.
    fn entries(&self) -> Result<Vec<Entry>, LedgerError>;

    /// The unfinished entries, in recording order.
    fn unfinished(&self) -> Result<Vec<Entry>, LedgerError> {
        Ok(self
            .entries()?
            .into_iter()
            .filter(|e| e.state.is_unfinished())
            .collect())
    }

    /// The entries of `holder`, in recording order.
    fn of_holder(&self, holder: &Holder) -> Result<Vec<Entry>, LedgerError> {
        Ok(self
            .entries()?
            .into_iter()
            .filter(|e| &e.holder == holder)
            .collect())
    }

    /// [`Ledger::entries`], shared: for reading, without a copy of each entry (a campaign
    /// keeps thousands).
    fn shared_entries(&self) -> Result<Vec<Arc<Entry>>, LedgerError> {
        Ok(self.entries()?.into_iter().map(Arc::new).collect())
    }

    /// [`Ledger::unfinished`], shared: for reading, without a copy of each entry.
    fn shared_unfinished(&self) -> Result<Vec<Arc<Entry>>, LedgerError> {
        Ok(self.unfinished()?.into_iter().map(Arc::new).collect())
    }

    /// [`Ledger::of_holder`], shared: for reading, without a copy of each entry.
    fn shared_of_holder(&self, holder: &Holder) -> Result<Vec<Arc<Entry>>, LedgerError> {
        Ok(self.of_holder(holder)?.into_iter().map(Arc::new).collect())
    }

    /// The entry of `holder` under `key`, if one is recorded.
    fn entry(&self, holder: &Holder, key: &str) -> Result<Option<Entry>, LedgerError> {
        Ok(self.of_holder(holder)?.into_iter().find(|e| e.key == key))
    }

    /// Forgets the entries of `holder` (its record is gone).
    fn forget(&self, holder: &Holder) -> Result<usize, LedgerError>;

    /// Forgets the entries of the holders of kind `of` (the `kind` of [`holder_text`]) whose
    /// entries are all finished and were all recorded before `before_ms`; returns how many
    /// entries were forgotten.
    fn prune(&self, of: &str, before_ms: u64) -> Result<usize, LedgerError> {
        let entries = self.entries()?;
        let mut holders: BTreeMap<&Holder, bool> = BTreeMap::new();
        for e in &entries {
            let of_kind = holder_text(&e.holder).is_some_and(|t| t.starts_with(&format!("{of}:")));
            let old_and_done = of_kind && e.recorded_ms < before_ms && !e.state.is_unfinished();
            let prune = holders.entry(&e.holder).or_insert(true);
            *prune = *prune && old_and_done;
        }
        let mut forgotten = 0;
        for (holder, _) in holders.into_iter().filter(|(_, prune)| *prune) {
            forgotten += self.forget(holder)?;
        }
        Ok(forgotten)
    }
}

/// A ledger in memory (one-shot runs: `nodecare harep`).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    entries: Mutex<Vec<Entry>>,
}

impl MemoryLedger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Checks `new` against `existing` and assigns ids after `last`.
pub fn assign_ids(
    existing: &[Entry],
    new: &[Entry],
    mut last: u64,
) -> Result<Vec<Entry>, LedgerError> {
    let mut keys: BTreeSet<(&Holder, &str)> = existing
        .iter()
        .map(|e| (&e.holder, e.key.as_str()))
        .collect();
    let mut out = Vec::with_capacity(new.len());
    for entry in new {
        let holder = holder_text(&entry.holder)
            .ok_or_else(|| LedgerError::NotAnOwner(entry.holder.to_string()))?;
        if !keys.insert((&entry.holder, entry.key.as_str())) {
            return Err(LedgerError::Duplicate {
                holder,
                key: entry.key.clone(),
            });
        }
        last += 1;
        let mut entry = entry.clone();
        entry.id = last;
        out.push(entry);
    }
    Ok(out)
}

impl Ledger for MemoryLedger {
    fn record(&self, entries: &[Entry]) -> Result<Vec<Entry>, LedgerError> {
        let mut all = self.lock();
        let last = all.iter().map(|e| e.id).max().unwrap_or(0);
        let recorded = assign_ids(&all, entries, last)?;
        all.extend(recorded.iter().cloned());
        Ok(recorded)
    }

    fn mark(&self, entry: &Entry) -> Result<(), LedgerError> {
        let mut all = self.lock();
        let stored = all
            .iter_mut()
            .find(|e| e.id == entry.id)
            .ok_or(LedgerError::Unknown(entry.id))?;
        stored.state = entry.state.clone();
        stored.job = entry.job;
        stored.finished_ms = entry.finished_ms;
        Ok(())
    }

    fn entries(&self) -> Result<Vec<Entry>, LedgerError> {
        Ok(self.lock().clone())
    }

    fn forget(&self, holder: &Holder) -> Result<usize, LedgerError> {
        let mut all = self.lock();
        let before = all.len();
        all.retain(|e| &e.holder != holder);
        Ok(before - all.len())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use proptest::prelude::*;

    fn incident(n: u128) -> Holder {
        Holder::Incident {
            id: Uuid::from_u128(n),
        }
    }

    /// The round's disruptions in force: an incident's own account wins over its ledger hold
    /// of the same node (a safety net under it, still counted where the duty said nothing);
    /// balancing's ledger holds count as they are; a node drained by hand is someone's, named
    /// by the record whose job left it drained.
    #[test]
    fn what_is_in_force_joins_the_duties_account_and_the_ledger() {
        use crate::gate::{FlagChange, Holds, NodeFacts, View};
        let facts = |name: &str, drained: bool| NodeFacts {
            name: name.to_owned(),
            group: "g".into(),
            domain: format!("rack:{name}"),
            vm_capable: true,
            drained,
            offline: false,
            master: false,
            memory_free: Some(1 << 20),
            primary_memory: Some(0),
            primaries: 0,
        };
        let view = View {
            nodes: [
                facts("a", true),
                facts("b", false),
                facts("c", false),
                facts("d", true),
                facts("e", false),
            ]
            .into_iter()
            .map(|f| (f.name.clone(), f))
            .collect(),
            storage: Vec::new(),
            now_ms: 1_000,
        };
        let balancing = Holder::Balancing {
            id: Uuid::from_u128(9),
        };
        let ledger = Held {
            nodes: [
                ("a".to_owned(), incident(1)),
                ("b".to_owned(), incident(2)),
                ("c".to_owned(), balancing.clone()),
            ]
            .into_iter()
            .collect(),
            touched: BTreeMap::new(),
            moving: [("e".to_owned(), BTreeSet::from([balancing.clone()]))]
                .into_iter()
                .collect(),
        };
        let duties = Holds {
            disrupted: vec![("a".to_owned(), incident(3))],
            touched: Vec::new(),
            left: Vec::new(),
        };
        let own = |h: &Holder| matches!(h, Holder::Incident { .. });
        let left = FlagChange {
            node: "d".into(),
            flag: "drained".into(),
            set: true,
            at_ms: 10,
            by: "incident 5 (canceled)".into(),
        };
        let in_force = ledger.in_force_with(&view, duties, own, [left]);
        assert_eq!(in_force.nodes.get("a"), Some(&incident(3)));
        assert_eq!(in_force.nodes.get("b"), Some(&incident(2)));
        assert_eq!(in_force.nodes.get("c"), Some(&balancing));
        assert_eq!(
            in_force.nodes.get("d"),
            Some(&Holder::Someone {
                flag: "drained".into(),
                left_by: Some("incident 5 (canceled)".into()),
            })
        );
        assert_eq!(in_force.touched.get("e"), Some(&balancing));
        assert!(!in_force.nodes.contains_key("e"));
    }

    fn entry(id: u64, holder: &Holder, key: &str, state: State, holds: Vec<Hold>) -> Entry {
        let mut e = Entry::new(
            holder.clone(),
            key,
            Action::ganeti(Op::drain("n1")),
            key,
            0,
            1,
        )
        .holding(holds);
        e.id = id;
        e.state = state;
        e
    }

    fn drained(node: &str) -> Hold {
        Hold::Drained { node: node.into() }
    }

    fn release(node: &str) -> Hold {
        Hold::Release { node: node.into() }
    }

    fn failed() -> State {
        State::Failed { why: "x".into() }
    }

    /// Table: which node holds are in force for one holder's entries.
    #[test]
    fn node_holds_last_until_released() {
        let h = incident(1);
        let table: Vec<(Vec<Entry>, Vec<&str>)> = vec![
            // Recorded, submitted, succeeded, timed out: held.
            (
                vec![entry(1, &h, "d", State::Recorded, vec![drained("n1")])],
                vec!["n1"],
            ),
            (
                vec![entry(1, &h, "d", State::Submitted, vec![drained("n1")])],
                vec!["n1"],
            ),
            (
                vec![entry(1, &h, "d", State::Succeeded, vec![drained("n1")])],
                vec!["n1"],
            ),
            (
                vec![entry(1, &h, "d", State::TimedOut, vec![drained("n1")])],
                vec!["n1"],
            ),
            // A failed or canceled drain never drained.
            (
                vec![entry(1, &h, "d", failed(), vec![drained("n1")])],
                vec![],
            ),
            (
                vec![entry(
                    1,
                    &h,
                    "d",
                    State::Canceled { why: "x".into() },
                    vec![drained("n1")],
                )],
                vec![],
            ),
            // Released once the undrain succeeded, not before.
            (
                vec![
                    entry(1, &h, "d", State::Succeeded, vec![drained("n1")]),
                    entry(2, &h, "u", State::Submitted, vec![release("n1")]),
                ],
                vec!["n1"],
            ),
            (
                vec![
                    entry(1, &h, "d", State::Succeeded, vec![drained("n1")]),
                    entry(2, &h, "u", State::Succeeded, vec![release("n1")]),
                ],
                vec![],
            ),
            // A release recorded before a new hold does not end it.
            (
                vec![
                    entry(1, &h, "u", State::Succeeded, vec![release("n1")]),
                    entry(2, &h, "d", State::Submitted, vec![drained("n1")]),
                ],
                vec!["n1"],
            ),
            // A release that succeeded while the drain it follows still runs (a campaign
            // giving up a node whose drain job is stuck) ends nothing: the drain may still
            // take effect.
            (
                vec![
                    entry(1, &h, "d", State::Submitted, vec![drained("n1")]),
                    entry(2, &h, "t", State::Succeeded, vec![release("n1")]),
                ],
                vec!["n1"],
            ),
            (
                vec![
                    entry(1, &h, "d", State::TimedOut, vec![drained("n1")]),
                    entry(2, &h, "t", State::Succeeded, vec![release("n1")]),
                ],
                vec!["n1"],
            ),
        ];
        for (entries, want) in table {
            let held = in_force(&entries);
            assert!(held.touched.is_empty());
            let nodes: Vec<&str> = held.nodes.keys().map(String::as_str).collect();
            assert_eq!(nodes, want, "{entries:#?}");
            assert!(held.nodes.values().all(|holder| holder == &h));
        }
    }

    /// A node its instances migrate back onto (a campaign's node after its reboot) is held
    /// while the migration runs, without being disrupted: it counts against no cap, so the
    /// next group may start meanwhile (the campaign's own account says the same).
    #[test]
    fn a_node_receiving_its_instances_back_is_touched_not_disrupted() {
        let h = Holder::Campaign {
            id: Uuid::from_u128(5),
        };
        let receiving = Hold::Receiving { node: "n2".into() };
        let held = in_force(&[entry(1, &h, "b", State::Submitted, vec![receiving.clone()])]);
        assert!(held.nodes.is_empty(), "{held:?}");
        assert_eq!(held.touched.get("n2"), Some(&h));
        assert_eq!(
            in_force(&[entry(1, &h, "b", State::Succeeded, vec![receiving.clone()])]),
            Held::default()
        );
        // Still drained by the same holder (its undrain not ended): disrupted, not touched.
        let held = in_force(&[
            entry(1, &h, "d", State::Succeeded, vec![drained("n2")]),
            entry(2, &h, "u", State::Submitted, vec![release("n2")]),
            entry(3, &h, "b", State::Submitted, vec![receiving]),
        ]);
        assert_eq!(held.nodes.get("n2"), Some(&h));
        assert!(held.touched.is_empty(), "{held:?}");
    }

    #[test]
    fn moves_touch_both_nodes_while_unfinished_and_disrupt_nothing() {
        let h = Holder::Balancing {
            id: Uuid::from_u128(9),
        };
        let moving = Hold::Moving {
            instance: "web".into(),
            from: vec!["n1".into()],
            to: vec!["n2".into()],
        };
        let held = in_force(&[entry(1, &h, "m", State::Submitted, vec![moving.clone()])]);
        assert!(held.nodes.is_empty());
        assert!(held.touched.is_empty());
        assert_eq!(
            held.moving.keys().map(String::as_str).collect::<Vec<_>>(),
            ["n1", "n2"]
        );
        // Held without disruption while in flight: the gate's touched.
        let touching: Vec<(String, Holder)> = held.touching().collect();
        assert_eq!(
            touching,
            [("n1".to_owned(), h.clone()), ("n2".to_owned(), h.clone())]
        );
        let done = in_force(&[entry(1, &h, "m", State::Succeeded, vec![moving])]);
        assert_eq!(done, Held::default());
        assert_eq!(done.touching().count(), 0);
    }

    #[test]
    fn a_live_repair_touches_its_node_while_it_runs() {
        let h = incident(3);
        let repairing = Hold::Repairing { node: "n1".into() };
        let held = in_force(&[entry(1, &h, "r", State::Submitted, vec![repairing.clone()])]);
        assert!(held.nodes.is_empty());
        assert_eq!(held.touched.get("n1"), Some(&h));
        assert_eq!(
            in_force(&[entry(1, &h, "r", State::Succeeded, vec![repairing.clone()])]),
            Held::default()
        );
        // Escalated to an evacuation: the drain disrupts the node, it is not merely touched.
        let held = in_force(&[
            entry(1, &h, "r", State::Submitted, vec![repairing]),
            entry(2, &h, "d", State::Submitted, vec![drained("n1")]),
        ]);
        assert_eq!(held.nodes.get("n1"), Some(&h));
        assert!(held.touched.is_empty());
    }

    #[test]
    fn the_first_holder_recorded_holds_a_node_two_hold() {
        let (a, b) = (incident(1), incident(2));
        let held = in_force(&[
            entry(2, &a, "d", State::Submitted, vec![drained("n1")]),
            entry(1, &b, "d", State::Submitted, vec![drained("n1")]),
        ]);
        assert_eq!(held.nodes["n1"], b);
    }

    #[test]
    fn ready_chains_ganeti_jobs_and_waits_for_agent_outcomes() {
        let h = incident(1);
        let mut drain = entry(1, &h, "drain", State::Recorded, vec![]);
        let mut migrate = entry(2, &h, "migrate", State::Recorded, vec![]).after(["drain".into()]);
        migrate.action = Action::ganeti(Op::MigrateInstance {
            instance: "web".into(),
            target: None,
        });
        let mut repair = entry(3, &h, "repair", State::Recorded, vec![]).after(["migrate".into()]);
        repair.action = Action::Agent {
            op: AgentOp::Repair {
                node: "n1".into(),
                command: "fix".into(),
            },
        };
        // One pass submits the Ganeti chain; the agent's waits for success.
        let out = ready(&[drain.clone(), migrate.clone(), repair.clone()]);
        assert_eq!(out.submit, vec![(1, vec![]), (2, vec!["drain".to_owned()])]);
        assert!(out.never.is_empty());
        drain.state = State::Submitted;
        drain.job = Some(7);
        migrate.state = State::Recorded;
        let out = ready(&[drain.clone(), migrate.clone(), repair.clone()]);
        assert_eq!(out.submit, vec![(2, vec!["drain".to_owned()])]);
        migrate.state = State::Submitted;
        migrate.job = Some(8);
        assert_eq!(
            ready(&[drain.clone(), migrate.clone(), repair.clone()]),
            Ready::default()
        );
        migrate.state = State::Succeeded;
        assert_eq!(
            ready(&[drain.clone(), migrate.clone(), repair.clone()]).submit,
            vec![(3, vec![])]
        );
        migrate.state = failed();
        let out = ready(&[drain, migrate, repair]);
        assert_eq!(out.never, vec![(3, "migrate did not succeed".into())]);
    }

    /// Two chains (undrain → migrate back, per node) recorded one after the other are
    /// submitted heads first: both undrains, then the migrations back, each still after the
    /// job it is chained to.
    #[test]
    fn the_first_job_of_every_chain_is_submitted_first() {
        let h = incident(1);
        let entries = vec![
            entry(1, &h, "u1", State::Recorded, vec![]),
            entry(2, &h, "b1", State::Recorded, vec![]).after(["u1".into()]),
            entry(3, &h, "c1", State::Recorded, vec![]).after(["b1".into()]),
            entry(4, &h, "u2", State::Recorded, vec![]),
            entry(5, &h, "b2", State::Recorded, vec![]).after(["u2".into()]),
            entry(6, &h, "x", State::Submitted, vec![]),
            entry(7, &h, "after-x", State::Recorded, vec![]).after(["x".into()]),
        ];
        let mut entries = entries;
        entries[5].job = Some(9);
        let out = ready(&entries);
        assert_eq!(
            out.submit,
            vec![
                (1, vec![]),
                (4, vec![]),
                (7, vec!["x".to_owned()]),
                (2, vec!["u1".to_owned()]),
                (5, vec!["u2".to_owned()]),
                (3, vec!["b1".to_owned()]),
            ]
        );
    }

    /// An unchained Ganeti job (instance repair: RAPI's reinstall cannot carry `depends`)
    /// waits for the job it comes after to succeed.
    #[test]
    fn an_unchained_job_waits_for_success() {
        let h = incident(1);
        let mut first = entry(1, &h, "failover-0", State::Recorded, vec![]);
        let second = entry(2, &h, "failover-1", State::Recorded, vec![])
            .after(["failover-0".into()])
            .unchained();
        assert!(second.unchained);
        let out = ready(&[first.clone(), second.clone()]);
        assert_eq!(out.submit, vec![(1, vec![])]);
        first.state = State::Submitted;
        first.job = Some(7);
        assert_eq!(ready(&[first.clone(), second.clone()]), Ready::default());
        first.state = State::Succeeded;
        assert_eq!(
            ready(&[first.clone(), second.clone()]).submit,
            vec![(2, vec![])]
        );
        first.state = failed();
        let out = ready(&[first, second]);
        assert_eq!(out.never, vec![(2, "failover-0 did not succeed".into())]);
    }

    #[test]
    fn an_entry_after_one_that_never_runs_never_runs_and_unknown_keys_are_said() {
        let h = incident(1);
        let a = entry(1, &h, "a", failed(), vec![]);
        let b = entry(2, &h, "b", State::Recorded, vec![]).after(["a".into()]);
        let c = entry(3, &h, "c", State::Recorded, vec![]).after(["b".into()]);
        let d = entry(4, &h, "d", State::Recorded, vec![]).after(["zz".into()]);
        let out = ready(&[a, b, c, d]);
        assert!(out.submit.is_empty());
        assert_eq!(
            out.never,
            vec![
                (2, "a did not succeed".into()),
                (3, "b never ran".into()),
                (4, "it comes after zz, which is not recorded".into())
            ]
        );
    }

    #[test]
    fn memory_ledger_records_marks_refuses_duplicates_and_prunes() {
        let ledger = MemoryLedger::default();
        let h = Holder::Balancing {
            id: Uuid::from_u128(1),
        };
        let recorded = ledger
            .record(&[
                entry(0, &h, "a-1", State::Recorded, vec![]),
                entry(0, &h, "a-2", State::Recorded, vec![]),
            ])
            .unwrap();
        assert_eq!(recorded.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
        assert!(matches!(
            ledger.record(&[entry(0, &h, "a-1", State::Recorded, vec![])]),
            Err(LedgerError::Duplicate { .. })
        ));
        let grant = Holder::Grant {
            id: Uuid::from_u128(2),
            requester: "x".into(),
        };
        assert!(matches!(
            ledger.record(&[entry(0, &grant, "k", State::Recorded, vec![])]),
            Err(LedgerError::NotAnOwner(_))
        ));
        let mut first = recorded[0].clone();
        first.state = State::Succeeded;
        first.job = Some(4);
        ledger.mark(&first).unwrap();
        assert_eq!(ledger.unfinished().unwrap().len(), 1);
        // Not pruned while one entry is unfinished, nor while recent.
        assert_eq!(ledger.prune("balancing", 100).unwrap(), 0);
        let mut second = recorded[1].clone();
        second.state = failed();
        ledger.mark(&second).unwrap();
        assert_eq!(ledger.prune("incident", 100).unwrap(), 0);
        assert_eq!(ledger.prune("balancing", 0).unwrap(), 0);
        assert_eq!(ledger.prune("balancing", 100).unwrap(), 2);
        assert!(ledger.entries().unwrap().is_empty());
        let mut unknown = first;
        unknown.id = 99;
        assert!(matches!(
            ledger.mark(&unknown),
            Err(LedgerError::Unknown(99))
        ));
    }

    fn arb_state() -> impl Strategy<Value = State> {
        prop_oneof![
            Just(State::Recorded),
            Just(State::Submitted),
            Just(State::Succeeded),
            Just(State::TimedOut),
            Just(State::Failed { why: "x".into() }),
            Just(State::Canceled { why: "x".into() }),
        ]
    }

    fn arb_hold() -> impl Strategy<Value = Hold> {
        let node = prop_oneof![Just("n1"), Just("n2"), Just("n3")].prop_map(str::to_owned);
        prop_oneof![
            node.clone().prop_map(|node| Hold::Drained { node }),
            node.clone().prop_map(|node| Hold::Rebooting { node }),
            node.clone().prop_map(|node| Hold::Release { node }),
            node.clone().prop_map(|node| Hold::Receiving { node }),
            node.clone().prop_map(|node| Hold::Repairing { node }),
            (node.clone(), node).prop_map(|(from, to)| Hold::Moving {
                instance: "i".into(),
                from: vec![from],
                to: vec![to],
            }),
        ]
    }

    proptest! {
        /// Every node in force is held by an entry that took a hold on it and is unfinished or
        /// not released after; a holder whose entries are all finished holds nothing but what succeeded.
        #[test]
        fn in_force_is_explained_by_the_entries(
            raw in proptest::collection::vec((0u128..3, arb_state(), arb_hold()), 0..12)
        ) {
            let entries: Vec<Entry> = raw
                .iter()
                .enumerate()
                .map(|(n, (h, state, hold))| {
                    entry(n as u64 + 1, &incident(*h), &format!("k{n}"), state.clone(), vec![hold.clone()])
                })
                .collect();
            let held = in_force(&entries);
            for (node, holder) in &held.nodes {
                let holding = entries.iter().filter(|e| &e.holder == holder).any(|e| {
                    e.holds.iter().any(|h| match h {
                        Hold::Drained { node: n } | Hold::Rebooting { node: n } => {
                            // A release ends no hold whose entry is unfinished.
                            n == node && took_hold(&e.state)
                                && (e.state.is_unfinished()
                                || !entries.iter().any(|r| r.holder == *holder && r.id > e.id
                                    && r.state == State::Succeeded
                                    && r.holds.contains(&Hold::Release { node: node.clone() })))
                        }
                        _ => false,
                    })
                });
                prop_assert!(holding, "{node} held by {holder} without cause: {entries:#?}");
            }
            // Removing every entry of a holder removes its holds and touches.
            for h in 0..3 {
                let holder = incident(h);
                let rest: Vec<Entry> = entries.iter().filter(|e| e.holder != holder).cloned().collect();
                let without = in_force(&rest);
                prop_assert!(without.nodes.values().all(|x| x != &holder));
                prop_assert!(without.touched.values().all(|x| x != &holder));
                prop_assert!(without.moving.values().all(|x| !x.contains(&holder)));
            }
        }
    }
}
