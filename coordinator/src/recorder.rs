//! The flight recorder (`nodecare explain`): each round whose gate judged anything is recorded
//! in the state database ([`crate::store`]), what it saw and what it decided; a round deciding
//! what the last recorded one did, from the same input, only counts as its repeat.
//!
//! The records and the explanations are pure ([`nodecare_core::recorder`]); this module keeps
//! the last recorded round in memory and writes to the store.

pub use nodecare_core::recorder::*;

use crate::round::RoundInput;
use crate::scrape::AgentOutcome;
use crate::store::{Store, StoreError, Written};
use nodecare_core::gate::GateSnapshot;

/// How long repeats of a recorded round may go unwritten (they are written at once when a
/// different round is recorded).
pub const REPEATS_WRITTEN_EVERY_MS: u64 = 60_000;

/// The verdicts of a round's agents, for people.
pub fn verdicts(input: &RoundInput) -> SeenVerdicts {
    input
        .agents
        .iter()
        .map(|agent| {
            let seen = match &agent.outcome {
                AgentOutcome::Verified(observation) => {
                    observation.verdict.status.as_str().to_owned()
                }
                AgentOutcome::Stale(observation) => format!(
                    "unknown (stale: {})",
                    observation
                        .stale_reason
                        .as_deref()
                        .unwrap_or("the report is not current")
                ),
                AgentOutcome::Unreachable(why) => format!("unknown (unreachable: {why})"),
                AgentOutcome::Unverifiable(why) => format!("unknown (unverifiable: {why})"),
            };
            (agent.node.clone(), seen)
        })
        .collect()
}

#[derive(Debug)]
struct Last {
    round: u64,
    record: RoundRecord,
    repeats: u64,
    last_ms: u64,
    written_repeats: u64,
    written_ms: u64,
}

/// The recorder of one coordinator: remembers the last round it recorded. It records what it is
/// given: the round records a round that judged anything or planned an operation.
#[derive(Debug, Default)]
pub struct FlightRecorder {
    last: Option<Last>,
}

/// What recording a round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recording {
    /// The same as the last recorded round: counted as its repeat.
    Repeat {
        /// The recorded round.
        round: u64,
    },
    /// Recorded as a new round.
    New(Written),
}

impl FlightRecorder {
    /// Records `record` in `store` (or counts it as the last one's repeat).
    /// The caller records a round that judged nothing only when it planned an operation.
    pub fn record(&mut self, store: &Store, record: RoundRecord) -> Result<Recording, StoreError> {
        if self
            .last
            .as_ref()
            .is_some_and(|last| record.same_as(&last.record))
        {
            return self.count_repeat(store, record.now_ms);
        }
        self.flush(store)?;
        let written = store.record_round(&record)?;
        self.last = Some(Last {
            round: written.round,
            repeats: 0,
            last_ms: record.now_ms,
            written_repeats: 0,
            written_ms: record.now_ms,
            record,
        });
        Ok(Recording::New(written))
    }

    /// Records a round from its gate snapshot, compared in place with the last recorded round
    /// and copied only when it decided anew.
    pub fn observe(
        &mut self,
        store: &Store,
        now_ms: u64,
        coordinator: &str,
        gate: &GateSnapshot,
        verdicts: SeenVerdicts,
    ) -> Result<Recording, StoreError> {
        if self.is_repeat(coordinator, gate, &verdicts) {
            return self.count_repeat(store, now_ms);
        }
        self.record(
            store,
            RoundRecord {
                now_ms,
                coordinator: coordinator.to_owned(),
                gate: gate.clone(),
                verdicts,
            },
        )
    }

    /// Whether a round (its coordinator, gate snapshot and verdicts) decided what the last
    /// recorded round did: then [`FlightRecorder::count_repeat`] counts it without a record.
    pub fn is_repeat(
        &self,
        coordinator: &str,
        gate: &GateSnapshot,
        verdicts: &SeenVerdicts,
    ) -> bool {
        self.last
            .as_ref()
            .is_some_and(|last| last.record.decided_as(coordinator, gate, verdicts))
    }

    /// Counts a round at `now_ms` as a repeat of the last recorded one (written at most every
    /// [`REPEATS_WRITTEN_EVERY_MS`]).
    pub fn count_repeat(&mut self, store: &Store, now_ms: u64) -> Result<Recording, StoreError> {
        let Some(last) = &mut self.last else {
            return Err(StoreError::Corrupt("recorder: no round to repeat".into()));
        };
        last.repeats += 1;
        last.last_ms = now_ms;
        if now_ms.saturating_sub(last.written_ms) >= REPEATS_WRITTEN_EVERY_MS {
            store.note_round_repeats(last.round, last.last_ms, last.repeats)?;
            last.written_repeats = last.repeats;
            last.written_ms = now_ms;
        }
        Ok(Recording::Repeat { round: last.round })
    }

    /// Writes the repeats of the last recorded round not written yet.
    pub fn flush(&mut self, store: &Store) -> Result<(), StoreError> {
        if let Some(last) = &mut self.last
            && last.repeats != last.written_repeats
        {
            store.note_round_repeats(last.round, last.last_ms, last.repeats)?;
            last.written_repeats = last.repeats;
            last.written_ms = last.last_ms;
        }
        Ok(())
    }

    /// Forgets the last recorded round (after a takeover: the store was replaced).
    pub fn forget(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use crate::store::retention::RetentionPolicy;
    use nodecare_core::recorder::tests_support::round as record;

    #[test]
    fn rounds_are_recorded_once_their_repeats_counted_and_their_parts_shared() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let mut recorder = FlightRecorder::default();
        let Recording::New(first) = recorder.record(&store, record(1_000, 1, 50)).unwrap() else {
            panic!("a new round");
        };
        assert!(first.new_bytes > 0);
        // Compared in place (the round's board snapshot, not yet a record).
        let later = record(5_000, 1, 50);
        assert!(recorder.is_repeat(&later.coordinator, &later.gate, &later.verdicts));
        let other = record(5_000, 2, 50);
        assert!(!recorder.is_repeat(&other.coordinator, &other.gate, &other.verdicts));
        assert!(!recorder.is_repeat("node9", &later.gate, &later.verdicts));
        assert!(
            FlightRecorder::default()
                .count_repeat(&store, 5_000)
                .is_err()
        );
        // The same decision 10 s and 70 s later: repeats, the second written (a minute passed).
        assert_eq!(
            recorder.record(&store, record(11_000, 1, 50)).unwrap(),
            Recording::Repeat { round: first.round }
        );
        assert_eq!(store.recorded_rounds(None, 10).unwrap()[0].repeats, 0);
        recorder.record(&store, record(71_000, 1, 50)).unwrap();
        let rounds = store.recorded_rounds(None, 10).unwrap();
        assert_eq!((rounds[0].repeats, rounds[0].last_ms), (2, 71_000));
        // Another cap: a new round, which shares the view and the verdicts with the first.
        recorder.record(&store, record(72_000, 1, 50)).unwrap();
        let Recording::New(second) = recorder.record(&store, record(80_000, 2, 50)).unwrap() else {
            panic!("a new round");
        };
        assert!(second.round > first.round);
        assert!(
            second.new_bytes * 4 < first.new_bytes,
            "{second:?} vs {first:?}: the view is shared"
        );
        let rounds = store.recorded_rounds(None, 10).unwrap();
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[0].round, second.round);
        assert_eq!(rounds[0].record, record(80_000, 2, 50));
        // The first round's third repeat was written when the second was recorded.
        assert_eq!((rounds[1].repeats, rounds[1].last_ms), (3, 72_000));
        assert!(rounds.iter().all(|r| r.record.replays()));
        assert_eq!(store.recorded_rounds(Some(79_999), 10).unwrap().len(), 1);
        assert_eq!(store.recorded_rounds(None, 1).unwrap().len(), 1);
        assert_eq!(store.recorder_size().unwrap().0, 2);
    }

    #[test]
    fn retention_forgets_old_rounds_and_the_parts_only_they_used() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let mut recorder = FlightRecorder::default();
        for (n, at) in [1_000_u64, 2_000, 3_000, 4_000].into_iter().enumerate() {
            // Each with its own view (node count) and cap.
            recorder.record(&store, record(at, n + 1, 10 + n)).unwrap();
        }
        let (rounds, parts, _) = store.recorder_size().unwrap();
        assert_eq!(rounds, 4);
        let policy = RetentionPolicy {
            incidents_ms: u64::MAX,
            audit_ms: u64::MAX,
            audit_rows: 100,
            rounds_ms: 10_000,
            rounds_kept: 2,
        };
        // At 12 500: the round of 1 000 is older than 10 s; of the others only 2 are kept.
        let pruned = store.apply_retention(&policy, 12_500).unwrap();
        assert_eq!(pruned.rounds, 2);
        let (rounds, left, _) = store.recorder_size().unwrap();
        assert_eq!(rounds, 2);
        assert!(left < parts, "{left} of {parts} parts kept");
        let kept = store.recorded_rounds(None, 10).unwrap();
        assert_eq!(
            kept.iter().map(|r| r.record.now_ms).collect::<Vec<_>>(),
            vec![4_000, 3_000]
        );
        assert!(kept.iter().all(|r| r.record.replays()));
    }
}
