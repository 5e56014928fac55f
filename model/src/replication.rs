//! The model of the replication and takeover of the coordinator's state (`docs/ARCHITECTURE.md`,
//! "State across master failovers"; `docs/RELIABILITY.md`, "Model check of the replication").
//!
//! Two coordinators and three master candidates' keepers exchange messages through a network that
//! loses, duplicates and reorders them (a set of messages in flight: any of them can be delivered
//! and stay in flight, delivered once, or dropped, in any order). Each coordinator keeps its
//! SQLite state across a crash (the generation document and the operator actions it holds) and
//! loses everything else; any coordinator may believe at any time that it is the master (Ganeti's
//! mastership moves, and an old master notices only at its next round). The decisions are the
//! code's own ([`Rules::code`]): the keeper's [`decide_push`] and [`decide_read`], the
//! coordinator's [`read_quorum`], [`takeover_epoch`], [`plan_takeover`] and [`judge_push`];
//! [`Rules::before`] are the rules before the fixes of the findings (`docs/RELIABILITY.md`).
//! With [`Rules::lease`], time enters as far as the lease needs it ([`Lease`]): a write's call is
//! made only while its confirmation is valid, and a takeover waits out, before it pushes, the
//! confirmations whose pushes were sent before its read ended.

use nodecare_coordinator::replica::{
    PushOutcome, PushReply, TakeoverPlan, judge_push, plan_takeover, read_quorum, takeover_epoch,
    write_quorum,
};
use nodecare_protocol::replica::{
    Generation, PushDecision, ReadDecision, ReplicaHeader, decide_push, decide_read,
};

use crate::explorer::{Expectation, Model, Property, fingerprint};

/// Coordinators (master candidates that may believe they are the master).
pub const COORDINATORS: usize = 2;
/// Master candidates' keepers.
pub const KEEPERS: usize = 3;

/// The decision functions the model runs.
#[derive(Clone, Copy)]
pub struct Rules {
    /// A name for reports.
    pub name: &'static str,
    /// The keeper's judgement of a push (copy held, epoch promised, push).
    pub decide_push: fn(Option<&ReplicaHeader>, u64, &ReplicaHeader) -> PushDecision,
    /// The keeper's judgement of a read (copy held, epoch promised, the read's epoch).
    pub decide_read: fn(Option<&ReplicaHeader>, u64, Option<u64>) -> ReadDecision,
    /// Answers a takeover needs.
    pub read_quorum: fn(usize) -> usize,
    /// The epoch a takeover's read names (local generation, highest epoch a refusal named).
    pub takeover_epoch: fn(Generation, u64) -> u64,
    /// What a new master restores and the generation it starts with.
    pub plan_takeover: fn(Generation, u64, &[(String, Generation)]) -> TakeoverPlan,
    /// What a push's answers amount to.
    pub judge_push: fn(Generation, usize, &[(String, PushReply)]) -> PushOutcome,
    /// Whether `ensure` pushes (state changed since the last push that reached a majority,
    /// nodes keeping the current generation, candidates).
    pub push_needed: fn(bool, usize, usize) -> bool,
    /// Whether a push reads the store's change counter before its snapshot (`true`) or after
    /// it, leaving a window where a write is counted as pushed without being in the snapshot.
    pub changes_before_snapshot: bool,
    /// Whether a takeover's read names the epoch it will start ([`takeover_epoch`]), which a
    /// keeper answering it promises ([`decide_read`]); otherwise reads name none.
    pub promise_on_read: bool,
    /// Whether writes hold a lease ([`Lease`]): a write's Ganeti call is made only while the
    /// confirmation of its push is valid, and a takeover waits, before its push, until every
    /// confirmation whose push was sent before its read ended has expired.
    pub lease: bool,
}

/// `Replicator::ensure`: it pushes every time, changed or not (the push confirms with a
/// majority that the coordinator's epoch is still current).
pub const fn ensure_pushes(_changed: bool, _kept_by: usize, _candidates: usize) -> bool {
    true
}

/// `Replicator::ensure` before the fix: a push only when the state changed since the last push
/// that reached a majority or fewer than a majority keep the current generation (the model
/// check's second finding: a superseded master admits a write from its last push).
pub const fn push_needed_before(changed: bool, kept_by: usize, candidates: usize) -> bool {
    changed || kept_by < write_quorum(candidates)
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules").field("name", &self.name).finish()
    }
}

impl Rules {
    /// The code's rules: a takeover's read names its epoch and the keepers promise it, `ensure`
    /// pushes before every write, the change counter is read before the snapshot.
    pub fn code() -> Self {
        Self {
            name: "code",
            decide_push,
            decide_read,
            read_quorum,
            takeover_epoch,
            plan_takeover,
            judge_push,
            push_needed: ensure_pushes,
            changes_before_snapshot: true,
            promise_on_read: true,
            lease: true,
        }
    }

    /// The code's rules without the lease: a write confirmed just before a takeover can reach
    /// Ganeti after the new epoch is established.
    pub fn unleased() -> Self {
        Self {
            name: "code without the lease",
            lease: false,
            ..Self::code()
        }
    }

    /// The rules before the fixes of the model check's findings: reads name no epoch (so no
    /// keeper promises anything), `ensure` admits a write without a push when the state is
    /// unchanged, the change counter is read after the snapshot, writes hold no lease.
    pub fn before() -> Self {
        Self {
            name: "before",
            push_needed: push_needed_before,
            changes_before_snapshot: false,
            promise_on_read: false,
            lease: false,
            ..Self::code()
        }
    }

    /// A deliberately broken rule the checker must catch: a takeover from a single keeper's
    /// answer (a minority), the code's rules otherwise.
    pub fn minority() -> Self {
        Self {
            name: "code, read quorum 1",
            read_quorum: |_| 1,
            ..Self::code()
        }
    }
}

/// The bounds of the exploration.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Operator actions (each applied at most once, through the API of an acting coordinator).
    pub actions: u8,
    /// Takeovers each coordinator starts.
    pub takeovers: u8,
    /// Crashes (and restarts) of each coordinator.
    pub crashes: u8,
    /// Highest push number within an epoch.
    pub max_number: u64,
    /// Check progress under a stable majority from every state (costly).
    pub liveness: bool,
    /// Start with coordinator 0 acting at generation 1.0, kept by every keeper (a master
    /// failover from a steady state); otherwise from nothing (a new cluster).
    pub steady: bool,
}

/// A snapshot of the state: its generation (the generation document it holds) and the operator
/// actions it holds. Equal snapshots are equal bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Snapshot {
    /// The generation document.
    pub generation: Generation,
    /// Operator actions, one bit each.
    pub actions: u8,
}

impl Snapshot {
    /// Its digest: the generation and the actions, in hex, apart (equal snapshots, equal
    /// digests; different snapshots, different digests).
    fn sha256(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut digest = String::with_capacity(24);
        for value in [
            self.generation.epoch,
            self.generation.number,
            u64::from(self.actions),
        ] {
            let digits = (64 - value.leading_zeros()).div_ceil(4).max(1);
            for digit in (0..digits).rev() {
                digest.push(char::from(HEX[((value >> (digit * 4)) & 0xf) as usize]));
            }
            digest.push('.');
        }
        digest
    }

    fn header(&self, keeper: usize, coordinator: usize) -> ReplicaHeader {
        ReplicaHeader {
            node: NAMES[keeper % KEEPERS].to_owned(),
            coordinator: if coordinator == 0 { "c0" } else { "c1" }.to_owned(),
            generation: self.generation,
            size: 0,
            sha256: self.sha256(),
            created_ms: 0,
        }
    }
}

/// A push's answer, as the coordinator reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// 200.
    Accepted(Generation),
    /// 409.
    Refused(Generation),
    /// 409 for a promise.
    Promised(u64),
}

impl From<Reply> for PushReply {
    fn from(reply: Reply) -> Self {
        match reply {
            Reply::Accepted(held) => Self::Accepted(held),
            Reply::Refused(held) => Self::Refused(held),
            Reply::Promised(epoch) => Self::Promised(epoch),
        }
    }
}

/// A message in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Message {
    /// A takeover's read.
    Read {
        /// Coordinator.
        from: u8,
        /// Keeper.
        to: u8,
        /// The read's nonce.
        nonce: u8,
        /// The epoch the takeover will start ([`Rules::promise_on_read`]; 0 otherwise).
        epoch: u64,
    },
    /// Its answer.
    Answer {
        /// Keeper.
        from: u8,
        /// Coordinator.
        to: u8,
        /// The read's nonce.
        nonce: u8,
        /// The copy held.
        held: Option<Snapshot>,
        /// Refused: the keeper promised or holds this epoch, not below the read's.
        refused: Option<u64>,
    },
    /// A push.
    Push {
        /// Coordinator.
        from: u8,
        /// Keeper.
        to: u8,
        /// The snapshot pushed.
        snapshot: Snapshot,
    },
    /// Its answer.
    Pushed {
        /// Keeper.
        from: u8,
        /// Coordinator.
        to: u8,
        /// The generation pushed.
        pushed: Generation,
        /// The answer.
        reply: Reply,
    },
}

/// The lease of a write's push ([`Rules::lease`]), as time passes: a confirmation admits a
/// write for a while after its push was sent (`protocol::replica::Lease`). Time is abstract:
/// a lease expires at any step ([`Action::Expire`]), and a takeover's wait ends only once the
/// leases of the pushes sent before its read ended have expired ([`Action::LeaseWait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lease {
    /// Expired, or a push that carries no write (or the rules hold no lease).
    None,
    /// Valid.
    Valid,
    /// Valid, but sent before the other coordinator's takeover read ended: it expires before
    /// that takeover's wait does.
    Doomed,
}

/// What a coordinator is doing (volatile: lost by a crash).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not taken over (standing by, stood down, or restarted).
    Standby,
    /// A takeover reads the copies.
    Reading {
        /// The reads' nonce.
        nonce: u8,
        /// The epoch it will start ([`Rules::promise_on_read`]).
        epoch: u64,
        /// Answers so far: `Some(copy held)` per keeper that answered.
        answers: [Option<Option<Snapshot>>; KEEPERS],
    },
    /// A push is on its way (the replicator's lock held).
    Pushing {
        /// Part of a takeover (not taken over until it reaches a majority).
        takeover: bool,
        /// What is pushed.
        snapshot: Snapshot,
        /// Answers so far.
        replies: [Option<Reply>; KEEPERS],
        /// A Ganeti write waits for this push.
        write: bool,
        /// The change counter was read.
        counted: bool,
        /// The store changed after the counter was read.
        changed: bool,
        /// The lease of the write it confirms.
        lease: Lease,
    },
    /// A takeover read a quorum and restored the newest copy; it waits out the leases of the
    /// old master's confirmations before it pushes ([`Rules::lease`]).
    Waiting {
        /// The generation it will push.
        start: Generation,
    },
    /// Taken over: writes are admitted once a majority keeps the state.
    Acting {
        /// The generation acted on.
        generation: Generation,
        /// Nodes holding it.
        kept_by: u8,
        /// The store changed since the last push that reached a majority.
        changed: bool,
    },
}

/// One coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Coordinator {
    /// Its SQLite state (kept across a crash).
    pub store: Snapshot,
    /// What it is doing.
    pub phase: Phase,
    /// Operator actions applied whose answer waits for the replication.
    pub awaiting: u8,
    /// Takeovers it may still start.
    pub takeovers_left: u8,
    /// Crashes left.
    pub crashes_left: u8,
    /// The highest epoch a refused read named (volatile; [`Rules::promise_on_read`]).
    pub seen_epoch: u64,
    /// Takeovers refused for a too low epoch that may be tried again, not counted.
    pub retries_left: u8,
}

/// One master candidate's keeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Keeper {
    /// The copy it holds.
    pub held: Option<Snapshot>,
    /// The epoch it promised ([`Rules::promise_on_read`]; 0 otherwise).
    pub promised: u64,
}

/// The checked properties' ghost state: what happened, as far as the properties need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// Operator actions answered "kept by a majority".
    pub acknowledged: u8,
    /// Per coordinator, the generations at which it admitted a write (one bit each).
    pub admitted: [u64; COORDINATORS],
    /// The highest epoch a majority of keepers has held.
    pub established: u64,
    /// A write was admitted by a coordinator superseded by then.
    pub superseded_write: bool,
    /// A write was admitted, at least once.
    pub any_write: bool,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// Coordinators.
    pub coordinators: [Coordinator; COORDINATORS],
    /// The keepers.
    pub keepers: [Keeper; KEEPERS],
    /// Messages in flight, sorted, each once.
    pub network: Vec<Message>,
    /// Operator actions not issued yet.
    pub unissued: u8,
    /// What happened.
    pub ghost: Ghost,
}

/// A step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A coordinator that finds itself the master starts a takeover: reads every keeper.
    StartTakeover(u8),
    /// The takeover's reads end (the rest timed out); the keeper given the lowest node name
    /// (which `plan_takeover` prefers among equally new copies: the names are arbitrary, so each
    /// distinct such copy is a choice).
    FinishRead(u8, u8),
    /// The push reads the store's change counter (the code's order, see
    /// [`Rules::changes_before_snapshot`]).
    CountChanges(u8),
    /// The push ends (the rest timed out).
    FinishPush(u8),
    /// An operator action through the API of a coordinator that took over.
    Operator(u8, u8),
    /// The replicator's `ensure`: for an API write's answer or a settle.
    Ensure(u8),
    /// A Ganeti write (or a repair request) asks `ensure` first.
    GanetiWrite(u8),
    /// A coordinator crashes and restarts.
    Crash(u8),
    /// Time passes: the lease of a coordinator's push expires.
    Expire(u8),
    /// A takeover's wait ends (every lease it waits for has expired); it pushes its epoch.
    LeaseWait(u8),
    /// A request arrives; `duplicate`: a copy stays in flight; `answer_lost`: its answer is lost.
    Deliver {
        /// The request.
        message: Message,
        /// A copy stays in flight.
        duplicate: bool,
        /// Its answer is lost.
        answer_lost: bool,
    },
    /// A message is lost.
    Drop(Message),
}

/// The reductions of the state space (`docs/RELIABILITY.md`, "Model check of the replication"),
/// each sound for the checked properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reductions {
    /// States equal up to a renaming of the keepers and of the coordinators share a fingerprint
    /// ([`Replication::permuted`]).
    pub symmetry: bool,
    /// State that cannot affect what follows is dropped: a push no keeper will ever keep while
    /// no coordinator reads its answer, a push answer that counts neither for nor against the
    /// push (as if lost), the other answers of a push once one superseded it, the writes a
    /// coordinator admitted that the other can no longer admit too, and "a write was admitted"
    /// once the step that admitted it is past.
    pub forget: bool,
}

impl Reductions {
    /// Every reduction.
    pub const ALL: Self = Self {
        symmetry: true,
        forget: true,
    };
    /// None.
    pub const NONE: Self = Self {
        symmetry: false,
        forget: false,
    };
}

/// The model: rules and bounds.
#[derive(Debug, Clone, Copy)]
pub struct Replication {
    /// The decisions.
    pub rules: Rules,
    /// The bounds.
    pub bounds: Bounds,
    /// The reductions.
    pub reductions: Reductions,
}

/// Renamings of the keepers: keeper `k` becomes `PERMUTATIONS[i][k]`.
const PERMUTATIONS: [[usize; KEEPERS]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

const NAMES: [&str; KEEPERS] = ["k0", "k1", "k2"];

fn bit(generation: Generation) -> u64 {
    if generation.epoch < 8 && generation.number < 8 {
        1 << (generation.epoch * 8 + generation.number)
    } else {
        0
    }
}

impl Replication {
    /// The model of `rules` within `bounds`, every reduction on.
    pub fn new(rules: Rules, bounds: Bounds) -> Self {
        Self {
            rules,
            bounds,
            reductions: Reductions::ALL,
        }
    }

    /// The model with these reductions.
    #[must_use]
    pub fn with_reductions(self, reductions: Reductions) -> Self {
        Self { reductions, ..self }
    }

    /// `state` with keeper `k` renamed `keepers[k]` and the two coordinators swapped if `swap`.
    /// Keepers run the same code, and so do coordinators (with the same bounds each); the
    /// properties name none of them: a renamed state has renamed successors and the same
    /// properties ([`Reductions::symmetry`]).
    pub fn permuted(state: &State, keepers: [usize; KEEPERS], swap: bool) -> State {
        let c = |coordinator: u8| if swap { 1 - coordinator } else { coordinator };
        let k = |keeper: u8| keepers[keeper as usize] as u8;
        let mut next = state.clone();
        for (index, keeper) in state.keepers.iter().enumerate() {
            next.keepers[keepers[index]] = *keeper;
        }
        for (index, coordinator) in state.coordinators.iter().enumerate() {
            let mut renamed = *coordinator;
            match &mut renamed.phase {
                Phase::Reading { answers, .. } => {
                    let old = *answers;
                    for (keeper, answer) in old.iter().enumerate() {
                        answers[keepers[keeper]] = *answer;
                    }
                }
                Phase::Pushing { replies, .. } => {
                    let old = *replies;
                    for (keeper, reply) in old.iter().enumerate() {
                        replies[keepers[keeper]] = *reply;
                    }
                }
                Phase::Standby | Phase::Acting { .. } | Phase::Waiting { .. } => {}
            }
            let to = c(index as u8) as usize;
            next.coordinators[to] = renamed;
            next.ghost.admitted[to] = state.ghost.admitted[index];
        }
        for message in &mut next.network {
            *message = match *message {
                Message::Read {
                    from,
                    to,
                    nonce,
                    epoch,
                } => Message::Read {
                    from: c(from),
                    to: k(to),
                    nonce,
                    epoch,
                },
                Message::Answer {
                    from,
                    to,
                    nonce,
                    held,
                    refused,
                } => Message::Answer {
                    from: k(from),
                    to: c(to),
                    nonce,
                    held,
                    refused,
                },
                Message::Push { from, to, snapshot } => Message::Push {
                    from: c(from),
                    to: k(to),
                    snapshot,
                },
                Message::Pushed {
                    from,
                    to,
                    pushed,
                    reply,
                } => Message::Pushed {
                    from: k(from),
                    to: c(to),
                    pushed,
                    reply,
                },
            };
        }
        next.network.sort_unstable();
        next
    }

    /// Appends the bytes of `state` renamed as [`Replication::permuted`] does to `out`: equal
    /// bytes for equal renamed states, different bytes for different ones (every number the
    /// model reaches fits a byte; `u64::MAX`, the superseded answer's epoch, is 255).
    pub fn encode(state: &State, keepers: [usize; KEEPERS], swap: bool, out: &mut Vec<u8>) {
        fn byte(value: u64) -> u8 {
            u8::try_from(value).unwrap_or(u8::MAX)
        }
        fn generation(out: &mut Vec<u8>, generation: Generation) {
            out.push(byte(generation.epoch));
            out.push(byte(generation.number));
        }
        fn snapshot(out: &mut Vec<u8>, copy: Option<Snapshot>) {
            match copy {
                None => out.extend_from_slice(&[255, 255, 255]),
                Some(copy) => {
                    generation(out, copy.generation);
                    out.push(copy.actions);
                }
            }
        }
        fn reply(out: &mut Vec<u8>, reply: Option<Reply>) {
            match reply {
                None => out.push(0),
                Some(Reply::Accepted(held)) => {
                    out.push(1);
                    generation(out, held);
                }
                Some(Reply::Refused(held)) => {
                    out.push(2);
                    generation(out, held);
                }
                Some(Reply::Promised(epoch)) => {
                    out.push(3);
                    out.push(byte(epoch));
                }
            }
        }
        let mut old_keeper = [0usize; KEEPERS];
        for (old, new) in keepers.iter().enumerate() {
            old_keeper[*new] = old;
        }
        let c = |coordinator: u8| if swap { 1 - coordinator } else { coordinator };
        let k = |keeper: u8| keepers[keeper as usize % KEEPERS] as u8;
        for new in 0..COORDINATORS {
            let old = if swap { 1 - new } else { new };
            let me = &state.coordinators[old];
            snapshot(out, Some(me.store));
            match me.phase {
                Phase::Standby => out.push(0),
                Phase::Reading {
                    nonce,
                    epoch,
                    answers,
                } => {
                    out.extend_from_slice(&[1, nonce, byte(epoch)]);
                    for keeper in old_keeper {
                        match answers[keeper] {
                            None => out.push(0),
                            Some(held) => {
                                out.push(1);
                                snapshot(out, held);
                            }
                        }
                    }
                }
                Phase::Pushing {
                    takeover,
                    snapshot: pushed,
                    replies,
                    write,
                    counted,
                    changed,
                    lease,
                } => {
                    out.push(2);
                    snapshot(out, Some(pushed));
                    for keeper in old_keeper {
                        reply(out, replies[keeper]);
                    }
                    out.push(
                        u8::from(takeover)
                            | u8::from(write) << 1
                            | u8::from(counted) << 2
                            | u8::from(changed) << 3
                            | (lease as u8) << 4,
                    );
                }
                Phase::Waiting { start } => {
                    out.push(4);
                    generation(out, start);
                }
                Phase::Acting {
                    generation: acting,
                    kept_by,
                    changed,
                } => {
                    out.push(3);
                    generation(out, acting);
                    out.extend_from_slice(&[kept_by, u8::from(changed)]);
                }
            }
            out.extend_from_slice(&[
                me.awaiting,
                me.takeovers_left,
                me.crashes_left,
                byte(me.seen_epoch),
                me.retries_left,
            ]);
            out.extend_from_slice(&state.ghost.admitted[old].to_le_bytes());
        }
        for keeper in old_keeper {
            snapshot(out, state.keepers[keeper].held);
            out.push(byte(state.keepers[keeper].promised));
        }
        // Each message as 8 bytes (big-endian, so that sorting the numbers sorts the bytes).
        let mut inline = [0u64; 32];
        let mut spilled = Vec::new();
        let count = state.network.len();
        let messages = if count <= inline.len() {
            &mut inline[..count]
        } else {
            spilled.resize(count, 0);
            &mut spilled[..]
        };
        for (slot, message) in messages.iter_mut().zip(&state.network) {
            let bytes = match *message {
                Message::Read {
                    from,
                    to,
                    nonce,
                    epoch,
                } => [0, c(from), k(to), nonce, byte(epoch), 0, 0, 0],
                Message::Answer {
                    from,
                    to,
                    nonce,
                    held,
                    refused,
                } => {
                    let mut copy = Vec::with_capacity(3);
                    snapshot(&mut copy, held);
                    let refused = refused.map_or(255, byte);
                    [1, k(from), c(to), nonce, copy[0], copy[1], copy[2], refused]
                }
                Message::Push { from, to, snapshot } => [
                    2,
                    c(from),
                    k(to),
                    byte(snapshot.generation.epoch),
                    byte(snapshot.generation.number),
                    snapshot.actions,
                    0,
                    0,
                ],
                Message::Pushed {
                    from,
                    to,
                    pushed,
                    reply: answer,
                } => {
                    let mut bytes = Vec::with_capacity(4);
                    reply(&mut bytes, Some(answer));
                    bytes.resize(4, 0);
                    [
                        3,
                        k(from),
                        c(to),
                        byte(pushed.epoch),
                        byte(pushed.number),
                        bytes[0],
                        bytes[1],
                        bytes[2].max(bytes[3]),
                    ]
                }
            };
            *slot = u64::from_be_bytes(bytes);
        }
        messages.sort_unstable();
        out.push(byte(count as u64));
        for message in messages.iter() {
            out.extend_from_slice(&message.to_be_bytes());
        }
        out.push(state.unissued);
        out.push(state.ghost.acknowledged);
        out.push(byte(state.ghost.established));
        out.push(u8::from(state.ghost.superseded_write) | u8::from(state.ghost.any_write) << 1);
    }

    /// The renaming of the keepers that orders them by a hash of everything about each (its
    /// copy and promise, its answer to each coordinator, the requests sent to it), the
    /// coordinators swapped if `swap`: the same order for every renaming of the keepers, but for
    /// keepers alike (and for a collision of two hashes, which only costs a state seen twice).
    fn keeper_order(state: &State, swap: bool) -> [usize; KEEPERS] {
        let mut keys = [(0u64, 0usize); KEEPERS];
        let mut bytes: Vec<u8> = Vec::with_capacity(64);
        let mut sent: Vec<Message> = Vec::with_capacity(8);
        for (keeper, key) in keys.iter_mut().enumerate() {
            bytes.clear();
            let copy = state.keepers[keeper];
            bytes.extend_from_slice(&copy.held.map_or([255; 3], |held| {
                [
                    held.generation.epoch as u8,
                    held.generation.number as u8,
                    held.actions,
                ]
            }));
            bytes.extend_from_slice(&copy.promised.to_le_bytes());
            for new in 0..COORDINATORS {
                let old = if swap { 1 - new } else { new };
                match state.coordinators[old].phase {
                    Phase::Reading { answers, .. } => match answers[keeper] {
                        None => bytes.push(0),
                        Some(None) => bytes.push(1),
                        Some(Some(held)) => bytes.extend_from_slice(&[
                            2,
                            held.generation.epoch as u8,
                            held.generation.number as u8,
                            held.actions,
                        ]),
                    },
                    Phase::Pushing { replies, .. } => match replies[keeper] {
                        None => bytes.push(3),
                        Some(Reply::Accepted(held)) => {
                            bytes.extend_from_slice(&[4, held.epoch as u8, held.number as u8]);
                        }
                        Some(Reply::Refused(held)) => {
                            bytes.extend_from_slice(&[5, held.epoch as u8, held.number as u8]);
                        }
                        Some(Reply::Promised(epoch)) => {
                            bytes.push(6);
                            bytes.extend_from_slice(&epoch.to_le_bytes());
                        }
                    },
                    Phase::Standby | Phase::Acting { .. } | Phase::Waiting { .. } => {
                        bytes.push(7);
                    }
                }
            }
            // The requests sent to it, each named by its coordinator in the new order.
            sent.clear();
            for message in &state.network {
                let renamed = match *message {
                    Message::Read {
                        from,
                        to,
                        nonce,
                        epoch,
                    } if to as usize == keeper => Message::Read {
                        from: if swap { 1 - from } else { from },
                        to: 0,
                        nonce,
                        epoch,
                    },
                    Message::Push { from, to, snapshot } if to as usize == keeper => {
                        Message::Push {
                            from: if swap { 1 - from } else { from },
                            to: 0,
                            snapshot,
                        }
                    }
                    _ => continue,
                };
                sent.push(renamed);
            }
            sent.sort_unstable();
            *key = (fingerprint(&(&bytes, &sent)), keeper);
        }
        keys.sort_unstable();
        let mut order = [0; KEEPERS];
        for (new, (_, old)) in keys.iter().enumerate() {
            order[*old] = new;
        }
        order
    }

    /// Every renaming of `state` (the first is `state` itself).
    pub fn renamings(state: &State) -> impl Iterator<Item = State> + '_ {
        PERMUTATIONS.iter().flat_map(move |keepers| {
            [false, true]
                .into_iter()
                .map(move |swap| Self::permuted(state, *keepers, swap))
        })
    }

    fn send(state: &mut State, message: Message) {
        if let Err(at) = state.network.binary_search(&message) {
            state.network.insert(at, message);
        }
    }

    fn update_established(&self, state: &mut State) {
        // The highest epoch held by at least a majority: the (majority)-th highest epoch held.
        let mut epochs: Vec<u64> = state
            .keepers
            .iter()
            .map(|keeper| keeper.held.map_or(0, |copy| copy.generation.epoch))
            .collect();
        epochs.sort_unstable_by(|a, b| b.cmp(a));
        let majority = KEEPERS / 2 + 1;
        let epoch = epochs.get(majority - 1).copied().unwrap_or(0);
        state.ghost.established = state.ghost.established.max(epoch);
    }

    /// A write's Ganeti call, made at `generation`: superseded when a majority already left
    /// the coordinator's epoch behind as the call is made.
    fn admit(state: &mut State, coordinator: usize, generation: Generation) {
        let ghost = &mut state.ghost;
        ghost.any_write = true;
        ghost.admitted[coordinator] |= bit(generation);
        if generation.epoch < ghost.established {
            ghost.superseded_write = true;
        }
    }

    fn start_push(
        &self,
        state: &mut State,
        coordinator: usize,
        generation: Generation,
        takeover: bool,
        write: bool,
    ) {
        let lease = if write && self.rules.lease {
            Lease::Valid
        } else {
            Lease::None
        };
        let me = &mut state.coordinators[coordinator];
        // `push_locked`: the generation document is saved first, then the snapshot taken.
        me.store.generation = generation;
        let snapshot = me.store;
        me.phase = Phase::Pushing {
            takeover,
            snapshot,
            replies: [None; KEEPERS],
            write,
            counted: self.rules.changes_before_snapshot,
            changed: false,
            lease,
        };
        for keeper in 0..KEEPERS {
            Self::send(
                state,
                Message::Push {
                    from: coordinator as u8,
                    to: keeper as u8,
                    snapshot,
                },
            );
        }
    }

    fn stand_by(state: &mut State, coordinator: usize) {
        let me = &mut state.coordinators[coordinator];
        me.phase = Phase::Standby;
        me.awaiting = 0;
    }

    /// The keepers each given the lowest node name in a choice of [`Action::FinishRead`]: one
    /// per distinct copy among the newest copies answered (the node name `plan_takeover` prefers
    /// among equally new copies is arbitrary).
    fn read_choices(answers: &[Option<Option<Snapshot>>; KEEPERS], choices: &mut Vec<u8>) {
        let copies = || {
            answers
                .iter()
                .enumerate()
                .filter_map(|(k, a)| Some((k, (*a)?.as_ref().copied()?)))
        };
        let newest = copies().map(|(_, copy)| copy.generation).max();
        let mut distinct: Vec<Snapshot> = Vec::new();
        for (keeper, copy) in copies() {
            if Some(copy.generation) == newest && !distinct.contains(&copy) {
                distinct.push(copy);
                choices.push(keeper as u8);
            }
        }
        if choices.len() <= 1 {
            choices.clear();
            choices.push(0);
        }
    }

    fn finish_read(&self, state: &mut State, coordinator: usize, first: usize) {
        let Phase::Reading { answers, epoch, .. } = state.coordinators[coordinator].phase else {
            return;
        };
        let answered = answers.iter().filter(|answer| answer.is_some()).count();
        if answered < (self.rules.read_quorum)(KEEPERS) {
            let me = &mut state.coordinators[coordinator];
            if me.seen_epoch >= epoch && epoch > 0 && me.retries_left > 0 {
                // Refused for its epoch: tried again one above what the refusals named.
                me.retries_left -= 1;
                me.takeovers_left += 1;
            }
            Self::stand_by(state, coordinator);
            return;
        }
        // Keeper `first` is named "k0", the next "k1", ...
        let name = |keeper: usize| NAMES[(keeper + KEEPERS - first % KEEPERS) % KEEPERS];
        let copies: Vec<(String, Generation)> = answers
            .iter()
            .enumerate()
            .filter_map(|(keeper, answer)| {
                answer
                    .flatten()
                    .map(|copy| (name(keeper).to_owned(), copy.generation))
            })
            .collect();
        let local = state.coordinators[coordinator].store.generation;
        let plan = (self.rules.plan_takeover)(local, epoch, &copies);
        if let Some((node, generation)) = plan.restore_from
            && let Some(copy) = (0..KEEPERS)
                .find(|keeper| name(*keeper) == node)
                .and_then(|keeper| answers[keeper].flatten())
                .filter(|copy| copy.generation == generation)
        {
            state.coordinators[coordinator].store = copy;
        }
        if !self.rules.lease {
            self.start_push(state, coordinator, plan.start, true, false);
            return;
        }
        // The leases of the pushes sent until now (the read's end, after every promise) run out
        // before the wait does.
        if let Phase::Pushing { lease, .. } = &mut state.coordinators[1 - coordinator].phase
            && *lease == Lease::Valid
        {
            *lease = Lease::Doomed;
        }
        state.coordinators[coordinator].phase = Phase::Waiting { start: plan.start };
    }

    /// Whether `coordinator`'s takeover may end its wait: the other holds no lease of a push
    /// sent before the takeover's read ended.
    fn lease_waited(state: &State, coordinator: usize) -> bool {
        !matches!(
            state.coordinators[1 - coordinator].phase,
            Phase::Pushing {
                lease: Lease::Doomed,
                ..
            }
        )
    }

    fn finish_push(&self, state: &mut State, coordinator: usize) {
        let Phase::Pushing {
            takeover,
            snapshot,
            replies,
            write,
            changed,
            lease,
            ..
        } = state.coordinators[coordinator].phase
        else {
            return;
        };
        let answers: Vec<(String, PushReply)> = replies
            .iter()
            .enumerate()
            .filter_map(|(keeper, reply)| {
                reply.map(|reply| (NAMES[keeper].to_owned(), reply.into()))
            })
            .collect();
        let generation = snapshot.generation;
        match (self.rules.judge_push)(generation, KEEPERS, &answers) {
            PushOutcome::Kept(kept_by) => {
                let me = &mut state.coordinators[coordinator];
                me.phase = Phase::Acting {
                    generation,
                    kept_by: kept_by.len() as u8,
                    changed,
                };
                let answered = me.awaiting & snapshot.actions;
                me.awaiting &= !answered;
                state.ghost.acknowledged |= answered;
                // With the lease, the call is made only while the confirmation is valid (else
                // the next write pushes again).
                if write && (!self.rules.lease || lease != Lease::None) {
                    Self::admit(state, coordinator, generation);
                }
            }
            PushOutcome::Superseded { .. } => Self::stand_by(state, coordinator),
            PushOutcome::NoQuorum(_) if takeover => Self::stand_by(state, coordinator),
            PushOutcome::NoQuorum(_) => {
                let me = &mut state.coordinators[coordinator];
                // The API writes in this snapshot are answered "pending".
                me.awaiting &= !snapshot.actions;
                me.phase = Phase::Acting {
                    generation,
                    kept_by: 0,
                    changed: true,
                };
            }
        }
    }

    /// Delivers `message`; a request's answer reaches its coordinator at once unless
    /// `answer_lost` (an answer that would arrive later is one that arrives after the coordinator
    /// stopped waiting: lost).
    fn deliver(&self, state: &mut State, message: Message, answer_lost: bool) {
        match message {
            Message::Read {
                from,
                to,
                nonce,
                epoch,
            } => {
                let keeper = &mut state.keepers[to as usize];
                let header = keeper.held.map(|copy| copy.header(to as usize, 0));
                let decision = (self.rules.decide_read)(
                    header.as_ref(),
                    keeper.promised,
                    (epoch > 0).then_some(epoch),
                );
                let (held, refused) = match decision {
                    ReadDecision::Answer => (keeper.held, None),
                    ReadDecision::Promise(epoch) => {
                        keeper.promised = epoch;
                        (keeper.held, None)
                    }
                    ReadDecision::Refuse { highest } => (None, Some(highest)),
                };
                if !answer_lost {
                    let answer = Message::Answer {
                        from: to,
                        to: from,
                        nonce,
                        held,
                        refused,
                    };
                    self.deliver(state, answer, false);
                }
            }
            Message::Answer {
                from,
                to,
                nonce,
                held,
                refused,
            } => {
                let me = &mut state.coordinators[to as usize];
                if let Phase::Reading {
                    nonce: current,
                    answers,
                    ..
                } = &mut me.phase
                    && *current == nonce
                    // One answer per request: a copy's answer to a keeper already answered
                    // goes unread.
                    && answers[from as usize].is_none()
                {
                    match refused {
                        None => answers[from as usize] = Some(held),
                        Some(epoch) => me.seen_epoch = me.seen_epoch.max(epoch),
                    }
                }
            }
            Message::Push { from, to, snapshot } => {
                let keeper = to as usize;
                let held = state.keepers[keeper]
                    .held
                    .map(|copy| copy.header(keeper, 0));
                let incoming = snapshot.header(keeper, from as usize);
                let promised = state.keepers[keeper].promised;
                let decision = (self.rules.decide_push)(held.as_ref(), promised, &incoming);
                let reply = match decision {
                    PushDecision::Keep => {
                        state.keepers[keeper].held = Some(snapshot);
                        self.update_established(state);
                        Reply::Accepted(snapshot.generation)
                    }
                    PushDecision::Same => Reply::Accepted(snapshot.generation),
                    PushDecision::Refuse { held } => Reply::Refused(held),
                    PushDecision::Promised { epoch } => Reply::Promised(epoch),
                };
                if !answer_lost {
                    let answer = Message::Pushed {
                        from: to,
                        to: from,
                        pushed: snapshot.generation,
                        reply,
                    };
                    self.deliver(state, answer, false);
                }
            }
            Message::Pushed {
                from,
                to,
                pushed,
                reply,
            } => {
                if let Phase::Pushing {
                    snapshot, replies, ..
                } = &mut state.coordinators[to as usize].phase
                    && snapshot.generation == pushed
                    && replies[from as usize].is_none()
                {
                    if !self.reductions.forget {
                        replies[from as usize] = Some(reply);
                        return;
                    }
                    // What the answer counts for in `judge_push`, which judges each answer on its
                    // own: for the push, against it (superseded, whatever else answers), or
                    // neither (as if lost; a later copy's answer can only be lost or the same).
                    let alone = [(NAMES[from as usize].to_owned(), PushReply::from(reply))];
                    match (self.rules.judge_push)(pushed, 1, &alone) {
                        PushOutcome::Kept(_) => {
                            replies[from as usize] = Some(Reply::Accepted(pushed))
                        }
                        PushOutcome::Superseded { .. } => {
                            *replies = [Some(Reply::Promised(u64::MAX)); KEEPERS];
                        }
                        PushOutcome::NoQuorum(_) => {}
                    }
                }
            }
        }
    }

    /// Applies `action` to `state`.
    fn apply(&self, state: &mut State, action: Action) {
        match action {
            Action::StartTakeover(c) => {
                let coordinator = c as usize;
                let promise = self.rules.promise_on_read;
                let me = &mut state.coordinators[coordinator];
                me.takeovers_left = me.takeovers_left.saturating_sub(1);
                // A fresh nonce per read: the takeovers left count down. (The reads of an
                // earlier takeover are gone by now, dropped when it ended: with
                // `Reductions::forget` every read has the same nonce.)
                let nonce = if self.reductions.forget {
                    0
                } else {
                    me.takeovers_left
                };
                let epoch = if promise {
                    (self.rules.takeover_epoch)(me.store.generation, me.seen_epoch)
                } else {
                    0
                };
                me.phase = Phase::Reading {
                    nonce,
                    epoch,
                    answers: [None; KEEPERS],
                };
                for keeper in 0..KEEPERS {
                    Self::send(
                        state,
                        Message::Read {
                            from: c,
                            to: keeper as u8,
                            nonce,
                            epoch,
                        },
                    );
                }
            }
            Action::FinishRead(c, first) => self.finish_read(state, c as usize, first as usize),
            Action::CountChanges(c) => {
                if let Phase::Pushing { counted, .. } = &mut state.coordinators[c as usize].phase {
                    *counted = true;
                }
            }
            Action::FinishPush(c) => self.finish_push(state, c as usize),
            Action::Operator(c, action) => {
                let me = &mut state.coordinators[c as usize];
                let bit = 1 << action;
                state.unissued &= !bit;
                me.store.actions |= bit;
                me.awaiting |= bit;
                match &mut me.phase {
                    Phase::Acting { changed, .. } => *changed = true,
                    Phase::Pushing {
                        counted: true,
                        changed,
                        ..
                    } => *changed = true,
                    // Counted by the change counter read next, yet not in the snapshot.
                    _ => {}
                }
            }
            Action::Ensure(c) | Action::GanetiWrite(c) => {
                let coordinator = c as usize;
                let write = matches!(action, Action::GanetiWrite(_));
                let me = &mut state.coordinators[coordinator];
                let Phase::Acting {
                    generation,
                    kept_by,
                    changed,
                } = me.phase
                else {
                    return;
                };
                let needed = (self.rules.push_needed)(changed, kept_by as usize, KEEPERS);
                if !needed {
                    // Answered from what the last push reached.
                    state.ghost.acknowledged |= me.awaiting;
                    me.awaiting = 0;
                    if write {
                        Self::admit(state, coordinator, generation);
                    }
                    return;
                }
                let next = Generation {
                    epoch: generation.epoch,
                    number: generation.number + 1,
                };
                self.start_push(state, coordinator, next, false, write);
            }
            Action::Expire(c) => {
                if let Phase::Pushing { lease, .. } = &mut state.coordinators[c as usize].phase {
                    *lease = Lease::None;
                }
            }
            Action::LeaseWait(c) => {
                if let Phase::Waiting { start } = state.coordinators[c as usize].phase
                    && Self::lease_waited(state, c as usize)
                {
                    self.start_push(state, c as usize, start, true, false);
                }
            }
            Action::Crash(c) => {
                let me = &mut state.coordinators[c as usize];
                me.crashes_left = me.crashes_left.saturating_sub(1);
                me.seen_epoch = 0;
                Self::stand_by(state, c as usize);
            }
            Action::Deliver {
                message,
                duplicate,
                answer_lost,
            } => {
                if !duplicate && let Ok(at) = state.network.binary_search(&message) {
                    state.network.remove(at);
                }
                self.deliver(state, message, answer_lost);
            }
            Action::Drop(message) => {
                if let Ok(at) = state.network.binary_search(&message) {
                    state.network.remove(at);
                }
            }
        }
    }

    /// Drops the messages whose delivery can no longer change anything (as if lost): reads and
    /// answers of a read that is over, answers to a push that is over, and pushes that such a
    /// keeper would refuse or already holds while nobody waits for the answer.
    ///
    /// With [`Reductions::forget`], also a push whose answer nobody reads any more (the push is
    /// over, or its keeper's answer is in) that its keeper refuses now: a keeper's copy and
    /// promise only grow, so it refuses it for ever; and the writes a coordinator admitted below
    /// the other's generation (a coordinator's generation only grows and it admits writes at its
    /// generation or above, so the other can never admit those too); and of a coordinator that
    /// never acts again, its crashes left and (without the progress check) what it holds.
    fn forget_useless(&self, state: &mut State) {
        let coordinators = state.coordinators;
        let keepers = state.keepers;
        let forget = self.reductions.forget;
        let reading = |c: u8, n: u8| matches!(coordinators[c as usize].phase, Phase::Reading { nonce, .. } if nonce == n);
        // A read answered: a copy of it is refused (the keeper's promise only grows) and its
        // answer unread.
        let unanswered = |c: u8, k: u8| {
            !forget
                || matches!(coordinators[c as usize].phase, Phase::Reading { answers, .. } if answers[k as usize].is_none())
        };
        let pushing = |c: u8, g: Generation| matches!(coordinators[c as usize].phase, Phase::Pushing { snapshot, .. } if snapshot.generation == g);
        let waits = |c: u8, k: u8, g: Generation| matches!(coordinators[c as usize].phase, Phase::Pushing { snapshot, replies, .. } if snapshot.generation == g && replies[k as usize].is_none());
        let kept = |k: u8, snapshot: Snapshot, from: u8| {
            let keeper = keepers[k as usize];
            let held = keeper.held.map(|copy| copy.header(k as usize, 0));
            let incoming = snapshot.header(k as usize, from as usize);
            (self.rules.decide_push)(held.as_ref(), keeper.promised, &incoming)
                == PushDecision::Keep
        };
        state.network.retain(|message| match *message {
            Message::Read {
                from, to, nonce, ..
            } => reading(from, nonce) && unanswered(from, to),
            Message::Answer {
                to: from, nonce, ..
            } => reading(from, nonce),
            Message::Pushed { to, pushed, .. } => pushing(to, pushed),
            Message::Push { from, to, snapshot } if forget => {
                waits(from, to, snapshot.generation) || kept(to, snapshot, from)
            }
            Message::Push { from, to, snapshot } => {
                pushing(from, snapshot.generation)
                    || keepers[to as usize]
                        .held
                        .is_none_or(|held| held.generation < snapshot.generation)
            }
        });
        if forget {
            // A coordinator standing by with no takeover left never acts again: a takeover is
            // all that leaves standing by, a crash needs a takeover begun, and a takeover left
            // is only given back by a takeover's end.
            let retired = state
                .coordinators
                .map(|me| me.phase == Phase::Standby && me.takeovers_left == 0);
            let both = state.ghost.admitted[0] & state.ghost.admitted[1];
            for coordinator in 0..COORDINATORS {
                let other = 1 - coordinator;
                // The other admits writes at its generation or above from now on (or never).
                let at_or_above = match bit(state.coordinators[other].store.generation) {
                    _ if retired[other] => 0,
                    0 => u64::MAX,
                    other => !(other - 1),
                };
                state.ghost.admitted[coordinator] &= at_or_above | both;
            }
            for (me, retired) in state.coordinators.iter_mut().zip(retired) {
                if retired {
                    me.crashes_left = 0;
                    // What it holds is read again only by the progress check, which lifts the
                    // takeover bound (so not with it).
                    if !self.bounds.liveness {
                        me.store = Snapshot::default();
                        me.seen_epoch = 0;
                        me.retries_left = 0;
                    }
                }
            }
        }
    }

    /// Whether, from `state`, with `master` the only coordinator that believes it is the master
    /// (the other stands down at its next round), keeper `down` (if any) unreachable and no other
    /// fault, a write is admitted within a bounded number of rounds.
    pub fn progresses(
        &self,
        state: &State,
        master: usize,
        down: Option<usize>,
        lost: bool,
    ) -> bool {
        let mut state = state.clone();
        if lost {
            state.network.clear();
        }
        for other in 0..COORDINATORS {
            if other != master {
                Self::stand_by(&mut state, other);
            }
        }
        for _round in 0..12 {
            // Everything in flight arrives, except to and from the unreachable keeper.
            while let Some(message) = state.network.first().copied() {
                state.network.remove(0);
                let keeper = match message {
                    Message::Read { to, .. } | Message::Push { to, .. } => to,
                    Message::Answer { from, .. } | Message::Pushed { from, .. } => from,
                };
                if Some(keeper as usize) != down {
                    self.deliver(&mut state, message, false);
                }
            }
            state.ghost.any_write = false;
            match state.coordinators[master].phase {
                Phase::Standby => {
                    // Takeovers are not bounded here.
                    state.coordinators[master].takeovers_left = 2;
                    self.apply(&mut state, Action::StartTakeover(master as u8));
                }
                Phase::Reading { .. } => {
                    self.apply(&mut state, Action::FinishRead(master as u8, 0));
                }
                Phase::Waiting { .. } => {
                    self.apply(&mut state, Action::LeaseWait(master as u8));
                }
                Phase::Pushing { .. } => {
                    self.apply(&mut state, Action::CountChanges(master as u8));
                    self.apply(&mut state, Action::FinishPush(master as u8));
                }
                Phase::Acting { .. } => self.apply(&mut state, Action::GanetiWrite(master as u8)),
            }
            if state.ghost.any_write {
                return true;
            }
        }
        false
    }

    fn acknowledged_kept(&self, state: &State) -> bool {
        // Every read quorum's newest copies hold every acknowledged action.
        let quorum = read_quorum(KEEPERS);
        let acknowledged = state.ghost.acknowledged;
        if acknowledged == 0 {
            return true;
        }
        (0u32..(1 << KEEPERS))
            .filter(|subset| subset.count_ones() as usize == quorum)
            .all(|subset| {
                let held: Vec<Snapshot> = (0..KEEPERS)
                    .filter(|keeper| subset & (1 << keeper) != 0)
                    .filter_map(|keeper| state.keepers[keeper].held)
                    .collect();
                let Some(newest) = held.iter().map(|copy| copy.generation).max() else {
                    return false;
                };
                held.iter()
                    .filter(|copy| copy.generation == newest)
                    .all(|copy| copy.actions & acknowledged == acknowledged)
            })
    }
}

/// Names of the properties.
pub mod property {
    /// No two coordinators both get a write admitted for the same generation of the state.
    pub const ONE_WRITER: &str = "no two coordinators admit writes for the same state";
    /// No write admitted by a coordinator whose epoch a majority had already left behind when
    /// its Ganeti call is made (for a write confirmed by a push: when the coordinator reads the
    /// answers and calls, however late).
    pub const FENCED: &str = "no write admitted by a superseded coordinator";
    /// Every acknowledged operator action is in the newest copy of every read quorum.
    pub const KEPT: &str = "an acknowledged operator action is never lost";
    /// From every state, under a stable majority and without faults, a write is admitted.
    pub const PROGRESS: &str = "a write is eventually admitted under a stable majority";
    /// Some write is admitted at all (the model is not vacuous).
    pub const SOME_WRITE: &str = "some write is admitted";
    /// Some operator action is acknowledged (the model is not vacuous).
    pub const SOME_ACK: &str = "some operator action is acknowledged";
}

impl Model for Replication {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let coordinator = Coordinator {
            store: Snapshot::default(),
            phase: Phase::Standby,
            awaiting: 0,
            takeovers_left: self.bounds.takeovers,
            crashes_left: self.bounds.crashes,
            seen_epoch: 0,
            retries_left: 1,
        };
        let mut state = State {
            coordinators: [coordinator; COORDINATORS],
            keepers: [Keeper::default(); KEEPERS],
            network: Vec::new(),
            unissued: (1u8 << self.bounds.actions) - 1,
            ghost: Ghost::default(),
        };
        if self.bounds.steady {
            let generation = Generation {
                epoch: 1,
                number: 0,
            };
            let snapshot = Snapshot {
                generation,
                actions: 0,
            };
            state.coordinators[0].store = snapshot;
            state.coordinators[0].phase = Phase::Acting {
                generation,
                kept_by: KEEPERS as u8,
                changed: false,
            };
            state.keepers = [Keeper {
                held: Some(snapshot),
                promised: u64::from(self.rules.promise_on_read),
            }; KEEPERS];
            state.ghost.established = 1;
        }
        vec![state]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (index, me) in state.coordinators.iter().enumerate() {
            let c = index as u8;
            match me.phase {
                Phase::Standby => {
                    if me.takeovers_left > 0 {
                        actions.push(Action::StartTakeover(c));
                    }
                }
                Phase::Reading { answers, .. } => {
                    let mut choices = Vec::new();
                    Self::read_choices(&answers, &mut choices);
                    for first in choices {
                        actions.push(Action::FinishRead(c, first));
                    }
                }
                Phase::Pushing {
                    takeover,
                    counted,
                    lease,
                    ..
                } => {
                    if counted {
                        actions.push(Action::FinishPush(c));
                    } else {
                        actions.push(Action::CountChanges(c));
                    }
                    if lease != Lease::None {
                        actions.push(Action::Expire(c));
                    }
                    if !takeover {
                        for action in 0..self.bounds.actions {
                            if state.unissued & (1 << action) != 0 {
                                actions.push(Action::Operator(c, action));
                            }
                        }
                    }
                }
                Phase::Waiting { .. } => {
                    if Self::lease_waited(state, index) {
                        actions.push(Action::LeaseWait(c));
                    }
                }
                Phase::Acting {
                    generation,
                    kept_by,
                    changed,
                } => {
                    for action in 0..self.bounds.actions {
                        if state.unissued & (1 << action) != 0 {
                            actions.push(Action::Operator(c, action));
                        }
                    }
                    let needed = (self.rules.push_needed)(changed, kept_by as usize, KEEPERS);
                    let room = generation.number < self.bounds.max_number;
                    if room || !needed {
                        actions.push(Action::GanetiWrite(c));
                    }
                    // The code calls `ensure` for an API write's answer, and for a settle when the
                    // state changed or the last push reached no majority.
                    let due =
                        me.awaiting != 0 || changed || (kept_by as usize) < write_quorum(KEEPERS);
                    if (room || !needed) && due {
                        actions.push(Action::Ensure(c));
                    }
                }
            }
            if me.crashes_left > 0 && me.phase != Phase::Standby {
                actions.push(Action::Crash(c));
            }
        }
        // A request never delivered is a request lost (it is forgotten once its delivery can no
        // longer change anything), so loss needs no step of its own; an answer arrives with its
        // request or is lost. A request may also arrive twice (its duplicate stays in flight); a
        // coordinator reads one answer per request.
        for message in &state.network {
            for duplicate in [false, true] {
                for answer_lost in [false, true] {
                    actions.push(Action::Deliver {
                        message: *message,
                        duplicate,
                        answer_lost,
                    });
                }
            }
        }
    }

    fn next_state(&self, state: &State, action: &Action) -> Option<State> {
        let mut next = state.clone();
        if self.reductions.forget {
            // "A write was admitted" holds in the state its step leads to, for the property
            // that some write is admitted; it is not carried further.
            next.ghost.any_write = false;
        }
        self.apply(&mut next, *action);
        self.forget_useless(&mut next);
        (next != *state).then_some(next)
    }

    fn fingerprint(&self, state: &State) -> u64 {
        let mut bytes = Vec::with_capacity(160);
        let mut print = |keepers: [usize; KEEPERS], swap: bool| {
            bytes.clear();
            Self::encode(state, keepers, swap, &mut bytes);
            fingerprint(&bytes)
        };
        if self.reductions.symmetry {
            // The same for every renaming of `state`: for each order of the coordinators, the
            // keepers ordered by what each holds, is promised, was answered and is sent (all
            // there is of a keeper: keepers alike are interchangeable), and the least hash.
            [false, true]
                .map(|swap| print(Self::keeper_order(state, swap), swap))
                .into_iter()
                .min()
                .unwrap_or_default()
        } else {
            print(PERMUTATIONS[0], false)
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property {
                name: property::ONE_WRITER,
                expectation: Expectation::Always,
                condition: |_, state: &State| {
                    state.ghost.admitted[0] & state.ghost.admitted[1] == 0
                },
            },
            Property {
                name: property::FENCED,
                expectation: Expectation::Always,
                condition: |_, state: &State| !state.ghost.superseded_write,
            },
            Property {
                name: property::KEPT,
                expectation: Expectation::Always,
                condition: |model: &Self, state: &State| model.acknowledged_kept(state),
            },
            Property {
                name: property::SOME_WRITE,
                expectation: Expectation::Sometimes,
                condition: |_, state: &State| state.ghost.any_write,
            },
            Property {
                name: property::SOME_ACK,
                expectation: Expectation::Sometimes,
                condition: |_, state: &State| state.ghost.acknowledged != 0,
            },
        ];
        if self.bounds.liveness {
            properties.push(Property {
                name: property::PROGRESS,
                expectation: Expectation::Always,
                condition: |model: &Self, state: &State| {
                    (0..COORDINATORS).all(|master| {
                        [None, Some(0), Some(1), Some(2)].into_iter().all(|down| {
                            model.progresses(state, master, down, false)
                                && (state.network.is_empty()
                                    || model.progresses(state, master, down, true))
                        })
                    })
                },
            });
        }
        properties
    }
}
