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

use nodecare_coordinator::replica::{
    PushOutcome, PushReply, TakeoverPlan, judge_push, plan_takeover, read_quorum, takeover_epoch,
    write_quorum,
};
use nodecare_protocol::replica::{
    Generation, PushDecision, ReadDecision, ReplicaHeader, decide_push, decide_read,
};

use crate::explorer::{Expectation, Model, Property};

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
        }
    }

    /// The rules before the fixes of the model check's findings: reads name no epoch (so no
    /// keeper promises anything), `ensure` admits a write without a push when the state is
    /// unchanged, the change counter is read after the snapshot.
    pub fn before() -> Self {
        Self {
            name: "before",
            push_needed: push_needed_before,
            changes_before_snapshot: false,
            promise_on_read: false,
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
    fn sha256(&self) -> String {
        format!(
            "{:016x}{:016x}{:032x}",
            self.generation.epoch, self.generation.number, self.actions
        )
    }

    fn header(&self, keeper: usize, coordinator: usize) -> ReplicaHeader {
        ReplicaHeader {
            node: format!("k{keeper}"),
            coordinator: format!("c{coordinator}"),
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
        /// A majority already kept a later epoch when the push was sent.
        fenced: bool,
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
    /// The takeover's reads end (the rest timed out).
    FinishRead(u8),
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

/// The model: rules and bounds.
#[derive(Debug, Clone, Copy)]
pub struct Replication {
    /// The decisions.
    pub rules: Rules,
    /// The bounds.
    pub bounds: Bounds,
}

const NAMES: [&str; KEEPERS] = ["k0", "k1", "k2"];

fn bit(generation: Generation) -> u64 {
    if generation.epoch < 8 && generation.number < 8 {
        1 << (generation.epoch * 8 + generation.number)
    } else {
        0
    }
}

impl Replication {
    /// The model of `rules` within `bounds`.
    pub fn new(rules: Rules, bounds: Bounds) -> Self {
        Self { rules, bounds }
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

    /// A write admitted at `generation`; `superseded`: the coordinator's epoch was left behind
    /// by a majority when it decided (for a write confirmed by a push: when the push was sent;
    /// a push that reaches a majority does so before any later epoch does, as keepers never go
    /// back, so what happens between that and the coordinator reading the answers is the window
    /// no confirmation closes: the write's state is in every later takeover's, `docs/RELIABILITY.md`).
    fn admit(state: &mut State, coordinator: usize, generation: Generation, superseded: bool) {
        let ghost = &mut state.ghost;
        ghost.any_write = true;
        ghost.admitted[coordinator] |= bit(generation);
        if superseded {
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
        let fenced = generation.epoch < state.ghost.established;
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
            fenced,
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

    fn finish_read(&self, state: &mut State, coordinator: usize) {
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
        let copies: Vec<(String, Generation)> = answers
            .iter()
            .enumerate()
            .filter_map(|(keeper, answer)| {
                answer
                    .flatten()
                    .map(|copy| (NAMES[keeper].to_owned(), copy.generation))
            })
            .collect();
        let local = state.coordinators[coordinator].store.generation;
        let plan = (self.rules.plan_takeover)(local, epoch, &copies);
        if let Some((node, generation)) = plan.restore_from
            && let Some(copy) = NAMES
                .iter()
                .position(|name| *name == node)
                .and_then(|keeper| answers[keeper].flatten())
                .filter(|copy| copy.generation == generation)
        {
            state.coordinators[coordinator].store = copy;
        }
        self.start_push(state, coordinator, plan.start, true, false);
    }

    fn finish_push(&self, state: &mut State, coordinator: usize) {
        let Phase::Pushing {
            takeover,
            snapshot,
            replies,
            write,
            changed,
            fenced,
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
                if write {
                    Self::admit(state, coordinator, generation, fenced);
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
                {
                    match refused {
                        None if answers[from as usize].is_none() => {
                            answers[from as usize] = Some(held);
                        }
                        None => {}
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
                    replies[from as usize] = Some(reply);
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
                // A fresh nonce per read: the takeovers left count down.
                let nonce = me.takeovers_left;
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
            Action::FinishRead(c) => self.finish_read(state, c as usize),
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
                        let superseded = generation.epoch < state.ghost.established;
                        Self::admit(state, coordinator, generation, superseded);
                    }
                    return;
                }
                let next = Generation {
                    epoch: generation.epoch,
                    number: generation.number + 1,
                };
                self.start_push(state, coordinator, next, false, write);
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
    fn forget_useless(state: &mut State) {
        let coordinators = state.coordinators;
        let keepers = state.keepers;
        let reading = |c: u8, n: u8| matches!(coordinators[c as usize].phase, Phase::Reading { nonce, .. } if nonce == n);
        let pushing = |c: u8, g: Generation| matches!(coordinators[c as usize].phase, Phase::Pushing { snapshot, .. } if snapshot.generation == g);
        state.network.retain(|message| match *message {
            Message::Read { from, nonce, .. }
            | Message::Answer {
                to: from, nonce, ..
            } => reading(from, nonce),
            Message::Pushed { to, pushed, .. } => pushing(to, pushed),
            Message::Push { from, to, snapshot } => {
                pushing(from, snapshot.generation)
                    || keepers[to as usize]
                        .held
                        .is_none_or(|held| held.generation < snapshot.generation)
            }
        });
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
                Phase::Reading { .. } => self.apply(&mut state, Action::FinishRead(master as u8)),
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
    /// No write admitted by a coordinator whose epoch a majority had already left behind (when
    /// it decided: for a write confirmed by a push, when the push was sent).
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
                Phase::Reading { .. } => actions.push(Action::FinishRead(c)),
                Phase::Pushing {
                    takeover, counted, ..
                } => {
                    if counted {
                        actions.push(Action::FinishPush(c));
                    } else {
                        actions.push(Action::CountChanges(c));
                    }
                    if !takeover {
                        for action in 0..self.bounds.actions {
                            if state.unissued & (1 << action) != 0 {
                                actions.push(Action::Operator(c, action));
                            }
                        }
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
        self.apply(&mut next, *action);
        Self::forget_useless(&mut next);
        (next != *state).then_some(next)
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
                                && model.progresses(state, master, down, true)
                        })
                    })
                },
            });
        }
        properties
    }
}
