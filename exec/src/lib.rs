//! The executor: the one place that carries out what the gate admitted. A duty records its
//! actions as ledger entries ([`ledger::Entry`]) before anything is submitted; the executor
//! submits those whose predecessors allow it (Ganeti jobs chained with `depends`), follows
//! every job to its outcome (the one place job outcomes are read), times out, cancels a
//! holder's jobs not yet started, and after a crash adopts the jobs Ganeti shows with an
//! entry's reason trail (`nodecare incident=<holder> intent=<key>`).
//!
//! Free of SQLite and HTTP: it sees the ledger through [`ledger::Ledger`] and Ganeti through
//! [`Ganeti`].

pub use nodecare_core::ledger;

pub mod instance_repair;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use ledger::{Entry, Ledger, LedgerError, State};
use nodecare_core::gate::Holder;
use nodecare_ganeti::{Ganeti, GanetiError, Job, JobId, JobStatus, Reason};

/// What becomes of an entry whose submission is uncertain (recorded, ready, no job known) and
/// that Ganeti's job list does not show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unadopted {
    /// It failed (`never submitted`); the entries after it never run.
    Fail,
    /// It is submitted again (the job list is complete, so it was not submitted).
    Retry,
    /// It is submitted again when its holder has begun (an entry of it has a job, or was
    /// asked for without one): it continues what the gate admitted. When nothing of its holder
    /// reached Ganeti it is canceled (`never submitted`), and what comes after it never runs:
    /// its duty proposes the work again, planned from the cluster as it is now, and the gate
    /// judges it again (as a new disruption, never a continuation).
    JudgeAgain,
}

/// An entry whose state the executor changed, with the job read (when one was).
#[derive(Debug, Clone, PartialEq)]
pub struct Changed {
    /// The entry as it is now.
    pub entry: Entry,
    /// Its job as Ganeti showed it (for a duty that judges a failure against the cluster).
    pub job: Option<Job>,
}

/// Ganeti's answer to the cancel of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelAnswer {
    /// The job.
    pub job: JobId,
    /// The entry's key.
    pub key: String,
    /// Whether Ganeti canceled it (or will).
    pub canceled: bool,
    /// Ganeti's message, or why it could not be asked.
    pub message: String,
}

/// What became of the submission of one entry ([`Executor::submit_entry`]).
#[derive(Debug)]
pub enum EntrySubmission {
    /// Ganeti created the job; the entry is marked submitted.
    Submitted(JobId),
    /// Uncertain: the job may exist. The entry stays recorded and is not submitted again
    /// before adoption finds its job by its reason trail, or a complete job list shows it was
    /// never submitted.
    Uncertain(GanetiError),
    /// Not sent, why: the job certainly does not exist (Ganeti's job list could not be read,
    /// an earlier submission of the entry is still uncertain, or the write was held back before
    /// it reached Ganeti). The entry stays recorded.
    NotSent(String),
    /// Ganeti refused it (no job exists); the entry is marked failed.
    Refused(GanetiError),
}

/// Jobs Ganeti was asked to cancel, shared by everyone who may ask (each job is asked once,
/// unless the ask failed transiently).
pub type CancelsAsked = Arc<Mutex<BTreeSet<JobId>>>;

/// What one [`Executor::submit_reporting`] did.
#[derive(Debug, Default)]
pub struct Submission {
    /// The entries submitted.
    pub submitted: Vec<Entry>,
    /// The entries Ganeti did not accept (their jobs may exist), with its answer.
    pub refused: Vec<(Entry, GanetiError)>,
}

/// The executor over one ledger.
#[derive(Debug)]
pub struct Executor {
    ledger: Arc<dyn Ledger>,
    /// Jobs Ganeti was asked to cancel.
    cancels_asked: CancelsAsked,
    /// The entries whose submission may have reached Ganeti without the ledger knowing.
    unsure: Mutex<Unsure>,
    /// The change tickets of approved holders, by holder id: added to their jobs' reasons.
    tickets: Mutex<BTreeMap<uuid::Uuid, String>>,
}

/// The entries whose submission may have reached Ganeti although they are recorded without a
/// job, kept in memory: none of them is submitted before [`Executor::adopt_of`] has found its
/// job in Ganeti's job list or read a complete list without it.
///
/// After a start (or a takeover of the state), every Ganeti entry then recorded is one of
/// them: a process before this one may have submitted it and lost the answer or the mark. In
/// this process an entry becomes one when its submission's answer is lost
/// ([`GanetiError::may_have_submitted`]). A failed read of the job list holds back every
/// submission until a read succeeds.
#[derive(Debug, Default)]
struct Unsure {
    /// Whether the entries recorded before this process's first look were added.
    seeded: bool,
    /// (holder, key) of the entries whose submission is uncertain.
    entries: BTreeSet<(Holder, String)>,
    /// Why the last adoption could not read Ganeti's job list (nothing is submitted while it
    /// is set).
    unread: Option<String>,
}

impl Executor {
    /// An executor over `ledger`. The Ganeti entries `ledger` holds recorded are uncertain
    /// (a process before may have submitted them): not submitted before adoption decides.
    pub fn new(ledger: Arc<dyn Ledger>) -> Self {
        let executor = Self {
            ledger,
            cancels_asked: Arc::new(Mutex::new(BTreeSet::new())),
            unsure: Mutex::new(Unsure::default()),
            tickets: Mutex::new(BTreeMap::new()),
        };
        // Unreadable now: at the first look.
        drop(executor.unsure());
        executor
    }

    /// The ledger was replaced (the state taken over from the master candidates): as at a
    /// start, every entry recorded in it is uncertain until adoption has read Ganeti's job list.
    pub fn ledger_replaced(&self) {
        *self.unsure_lock() = Unsure::default();
        drop(self.unsure());
    }

    fn unsure_lock(&self) -> std::sync::MutexGuard<'_, Unsure> {
        self.unsure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The uncertain submissions, with the entries recorded before this process's first look
    /// added at that look.
    fn unsure(&self) -> Result<std::sync::MutexGuard<'_, Unsure>, LedgerError> {
        if !self.unsure_lock().seeded {
            let recorded: Vec<(Holder, String)> = self
                .ledger
                .shared_unfinished()?
                .iter()
                .filter(|e| e.state == State::Recorded && e.action.op().is_some())
                .map(|e| (e.holder.clone(), e.key.clone()))
                .collect();
            let mut unsure = self.unsure_lock();
            if !unsure.seeded {
                unsure.seeded = true;
                unsure.entries.extend(recorded);
            }
        }
        Ok(self.unsure_lock())
    }

    /// Why `entry` may not be submitted now (its earlier submission uncertain, or Ganeti's job
    /// list unread), if so.
    fn held_back(&self, entry: &Entry) -> Result<Option<String>, LedgerError> {
        let unsure = self.unsure()?;
        Ok(if let Some(why) = &unsure.unread {
            Some(format!(
                "Ganeti's job list could not be read ({why}): nothing is submitted before it is"
            ))
        } else if unsure
            .entries
            .contains(&(entry.holder.clone(), entry.key.clone()))
        {
            Some(
                "its earlier submission is uncertain: not submitted again before Ganeti's job \
                 list shows whether its job exists"
                    .to_owned(),
            )
        } else {
            None
        })
    }

    /// Notes the answer to the submission of `entry`: uncertain, or settled (a job, or none).
    fn note_answer(&self, entry: &Entry, uncertain: bool) {
        let mut unsure = self.unsure_lock();
        let id = (entry.holder.clone(), entry.key.clone());
        if uncertain {
            unsure.entries.insert(id);
        } else {
            unsure.entries.remove(&id);
        }
    }

    /// Sets the change tickets of the approved holders (by holder id): every job of theirs
    /// submitted from now on says `(ticket <ticket>)` in its reason.
    pub fn set_tickets(&self, tickets: BTreeMap<uuid::Uuid, String>) {
        *self
            .tickets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tickets;
    }

    /// `text`, with the change ticket of `entry`'s holder when it has one.
    fn with_ticket(&self, entry: &Entry, text: &str) -> String {
        let tickets = self
            .tickets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match entry.holder.approval_id().and_then(|id| tickets.get(&id)) {
            Some(ticket) => format!("{text} (ticket {ticket})"),
            None => text.to_owned(),
        }
    }

    /// The same executor asking Ganeti to cancel a job only if nobody sharing `asked` did.
    #[must_use]
    pub fn with_cancels_asked(mut self, asked: CancelsAsked) -> Self {
        self.cancels_asked = asked;
        self
    }

    /// Submits recorded `entry` now, as one Ganeti job chained after `depends`, with `text` as
    /// its reason (for a duty that chains by job ids it knows and words its reasons itself),
    /// and marks it: submitted with its job, failed when Ganeti refused it, left recorded when
    /// the answer is uncertain (submitted without a job, for one whose job carries no reason
    /// trail: adoption fails it).
    pub async fn submit_entry(
        &self,
        ganeti: &dyn Ganeti,
        entry: &Entry,
        text: &str,
        depends: Vec<JobId>,
        now_ms: u64,
    ) -> Result<EntrySubmission, LedgerError> {
        let (Some(op), Some(trail)) = (entry.action.op(), entry.trail()) else {
            return Err(LedgerError::NotAnOwner(format!(
                "{} (entry {}: not a Ganeti job with a reason trail)",
                entry.holder, entry.key
            )));
        };
        if let Some(why) = self.held_back(entry)? {
            tracing::info!(holder = %entry.holder, key = %entry.key, %why, "not submitted");
            return Ok(EntrySubmission::NotSent(why));
        }
        let reason =
            Reason::new(trail, entry.key.clone(), self.with_ticket(entry, text)).after(depends);
        let answer = self.submit_one(ganeti, entry, op, &reason).await?;
        self.note_answer(
            entry,
            answer.as_ref().is_err_and(GanetiError::may_have_submitted),
        );
        match answer {
            Ok(job) => Ok(EntrySubmission::Submitted(job)),
            Err(error) if error.may_have_submitted() => {
                tracing::warn!(holder = %entry.holder, key = %entry.key, %error, "submission uncertain");
                Ok(EntrySubmission::Uncertain(error))
            }
            Err(error) if error.is_transient() => {
                tracing::warn!(holder = %entry.holder, key = %entry.key, %error, "not submitted");
                Ok(EntrySubmission::NotSent(error.to_string()))
            }
            Err(error) => {
                let mut entry = entry.clone();
                entry.state = State::Failed {
                    why: format!("Ganeti refused it: {error}"),
                };
                entry.finished_ms = Some(now_ms);
                tracing::warn!(holder = %entry.holder, key = %entry.key, %error, "submission refused");
                self.mark(&entry)?;
                Ok(EntrySubmission::Refused(error))
            }
        }
    }

    /// The one place a recorded entry becomes a Ganeti job: `op` submitted with `reason`, the
    /// entry marked submitted with its job. One whose job carries no reason trail is marked
    /// submitted (without a job) first, so that it is never submitted again (adoption fails it
    /// if the answer is lost).
    async fn submit_one(
        &self,
        ganeti: &dyn Ganeti,
        entry: &Entry,
        op: &nodecare_ganeti::Op,
        reason: &Reason,
    ) -> Result<Result<JobId, GanetiError>, LedgerError> {
        let answer = self.submit_unmarked(ganeti, entry, op, reason).await?;
        Ok(match answer {
            Ok((job, submitted)) => {
                self.mark(&submitted)?;
                Ok(job)
            }
            Err(error) => Err(error),
        })
    }

    /// [`Executor::submit_one`] without the mark of its job: returns the entry submitted, with
    /// its job, for the caller to mark (several at once, [`Ledger::mark_all`]). Until then a
    /// crash leaves it recorded, and [`Executor::adopt`] finds its job by its reason trail;
    /// one whose job carries none is marked submitted before Ganeti is asked, as ever.
    async fn submit_unmarked(
        &self,
        ganeti: &dyn Ganeti,
        entry: &Entry,
        op: &nodecare_ganeti::Op,
        reason: &Reason,
    ) -> Result<Result<(JobId, Entry), GanetiError>, LedgerError> {
        if !op.carries_reason() {
            let mut attempted = entry.clone();
            attempted.state = State::Submitted;
            self.mark(&attempted)?;
        }
        #[allow(clippy::disallowed_methods)]
        let answer = ganeti.submit(op, reason).await;
        if let Err(error) = &answer
            && !op.carries_reason()
            && !error.may_have_submitted()
        {
            // No job was created: it is recorded again, as it was.
            self.mark(entry)?;
        }
        Ok(answer.map(|job| {
            let mut entry = entry.clone();
            entry.state = State::Submitted;
            entry.job = Some(job);
            tracing::info!(holder = %entry.holder, key = %entry.key, job, "job submitted");
            (job, entry)
        }))
    }

    /// The ledger.
    pub fn ledger(&self) -> &dyn Ledger {
        &*self.ledger
    }

    /// Records `entries` (durable before anything of theirs is submitted).
    pub fn record(&self, entries: &[Entry]) -> Result<Vec<Entry>, LedgerError> {
        // The entries recorded before are known first: these are not uncertain.
        drop(self.unsure()?);
        self.ledger.record(entries)
    }

    fn mark(&self, entry: &Entry) -> Result<(), LedgerError> {
        self.ledger.mark(entry)
    }

    /// Submits the ready Ganeti entries (of `holder`, or of every holder), each chained after
    /// the jobs of the entries it comes after that have not succeeded yet; marks the entries
    /// that can never run. A failed submission leaves its entry recorded (its job may exist:
    /// [`Executor::adopt`] finds it), and what comes after it waits. Returns the entries
    /// submitted.
    pub async fn submit(
        &self,
        ganeti: &dyn Ganeti,
        holder: Option<&Holder>,
        now_ms: u64,
    ) -> Result<Vec<Entry>, LedgerError> {
        self.submit_of(ganeti, |h| holder.is_none_or(|x| x == h), now_ms)
            .await
    }

    /// [`Executor::submit`], for the entries of the holders `which` says.
    pub async fn submit_of(
        &self,
        ganeti: &dyn Ganeti,
        which: impl Fn(&Holder) -> bool,
        now_ms: u64,
    ) -> Result<Vec<Entry>, LedgerError> {
        Ok(self.submit_which(ganeti, which, now_ms).await?.submitted)
    }

    /// [`Executor::submit`], with the submissions Ganeti did not accept (for a duty that
    /// reports them).
    pub async fn submit_reporting(
        &self,
        ganeti: &dyn Ganeti,
        holder: Option<&Holder>,
        now_ms: u64,
    ) -> Result<Submission, LedgerError> {
        self.submit_which(ganeti, |h| holder.is_none_or(|x| x == h), now_ms)
            .await
    }

    /// Submits the ready entries of the holders `which` says.
    ///
    /// An operation whose job carries no reason trail ([`nodecare_ganeti::Op::carries_reason`]:
    /// RAPI's reinstall) cannot be found again by [`Executor::adopt`]: its entry is marked
    /// submitted (without a job) before Ganeti is asked, so that a crash or a lost answer
    /// leaves it uncertain, never submitted again ([`Executor::adopt`] holds it while a job
    /// that may be its own is unfinished, then fails it).
    ///
    /// Nothing is submitted while Ganeti's job list could not be read at the last adoption,
    /// and no entry whose earlier submission is uncertain (see [`Unsure`]); an entry Ganeti
    /// refused (HTTP 4xx: no job was created) fails.
    async fn submit_which(
        &self,
        ganeti: &dyn Ganeti,
        which: impl Fn(&Holder) -> bool,
        now_ms: u64,
    ) -> Result<Submission, LedgerError> {
        let (unread, unsure) = {
            let unsure = self.unsure()?;
            (unsure.unread.clone(), unsure.entries.clone())
        };
        if let Some(why) = unread {
            tracing::info!(%why, "Ganeti's job list could not be read: nothing is submitted");
            return Ok(Submission::default());
        }
        let mut refused = Vec::new();
        let holders: BTreeSet<Holder> = self
            .ledger
            .shared_unfinished()?
            .iter()
            .filter(|e| e.state == State::Recorded && which(&e.holder))
            .map(|e| e.holder.clone())
            .collect();
        let mut submitted = Vec::new();
        // Submitted, their jobs not marked yet: marked in one write per holder (or per
        // `MARK_BATCH`), not one durable write each.
        let mut marks = Marks::new(&*self.ledger);
        for holder in holders {
            let entries = self.ledger.shared_of_holder(&holder)?;
            let plan = ledger::ready(&entries);
            for (id, why) in &plan.never {
                if let Some(shared) = entries.iter().find(|e| e.id == *id) {
                    let mut e = Entry::clone(shared);
                    e.state = State::Canceled { why: why.clone() };
                    e.finished_ms = Some(now_ms);
                    tracing::info!(%holder, key = %e.key, %why, "entry never runs");
                    self.mark(&e)?;
                }
            }
            let Some(trail) = ledger::holder_uuid(&holder) else {
                continue;
            };
            // The holder's jobs by key (kept as this pass submits) and its entries by id, so
            // that a pass over thousands of entries stays linear.
            let jobs: BTreeMap<String, JobId> = entries
                .iter()
                .filter_map(|e| e.job.map(|job| (e.key.clone(), job)))
                .collect();
            let by_id: BTreeMap<u64, &Entry> = entries.iter().map(|e| (e.id, &**e)).collect();
            let mut pass = Pass {
                jobs,
                marks: &mut marks,
                submitted: &mut submitted,
                refused: &mut refused,
            };
            // The entries of one layer (none chained after another of the same layer: `ready`
            // gives them layer by layer) go to Ganeti side by side, at most
            // `SUBMIT_CONCURRENCY` at once, their answers taken in order.
            let mut layer: Vec<(Entry, Reason)> = Vec::new();
            let mut in_layer: BTreeSet<String> = BTreeSet::new();
            for (id, chained) in plan.submit {
                if chained.iter().any(|key| in_layer.contains(key.as_str())) {
                    in_layer.clear();
                    let layer = std::mem::take(&mut layer);
                    self.submit_layer(ganeti, &holder, layer, now_ms, &mut pass)
                        .await?;
                }
                let depends: Vec<JobId> = chained
                    .iter()
                    .filter_map(|key| pass.jobs.get(key.as_str()).copied())
                    .collect();
                if depends.len() != chained.len() {
                    // A predecessor of this pass was not submitted: wait for the next pass.
                    continue;
                }
                let Some(entry) = by_id.get(&id).map(|e| Entry::clone(e)) else {
                    continue;
                };
                if entry.action.op().is_none() {
                    // Agent actions are carried out by their duty's agent client.
                    continue;
                }
                if unsure.contains(&(entry.holder.clone(), entry.key.clone())) {
                    // Its job may exist: adoption looks for it first. What comes after it
                    // waits.
                    tracing::debug!(%holder, key = %entry.key, "submission uncertain: not submitted again");
                    continue;
                }
                let reason = Reason::new(
                    trail,
                    entry.key.clone(),
                    self.with_ticket(&entry, &entry.description),
                )
                .after(depends);
                in_layer.insert(entry.key.clone());
                layer.push((entry, reason));
            }
            self.submit_layer(ganeti, &holder, layer, now_ms, &mut pass)
                .await?;
            marks.flush()?;
        }
        Ok(Submission { submitted, refused })
    }

    /// Submits one layer of `holder`'s ready entries (with their reasons; none chained after
    /// another of the layer) side by side, at most [`SUBMIT_CONCURRENCY`] at once, and takes
    /// their answers in the layer's order: each job kept by its entry's key (for the next
    /// layer's `depends`), the entry queued to be marked; a submission Ganeti did not accept is
    /// reported, and what comes after it waits: an uncertain one stays recorded (not submitted
    /// again before adoption decides), one Ganeti refused fails.
    async fn submit_layer(
        &self,
        ganeti: &dyn Ganeti,
        holder: &Holder,
        layer: Vec<(Entry, Reason)>,
        now_ms: u64,
        pass: &mut Pass<'_, '_>,
    ) -> Result<(), LedgerError> {
        use futures_util::StreamExt as _;
        let answers: Vec<_> = futures_util::stream::iter(layer)
            .map(|(entry, reason)| async move {
                let answer = match entry.action.op() {
                    Some(op) => Some(self.submit_unmarked(ganeti, &entry, op, &reason).await),
                    None => None,
                };
                (entry, answer)
            })
            .buffered(SUBMIT_CONCURRENCY)
            .collect()
            .await;
        for (entry, answer) in answers {
            match answer.transpose()? {
                Some(Ok((job, entry))) => {
                    self.note_answer(&entry, false);
                    pass.jobs.insert(entry.key.clone(), job);
                    pass.marks.push(entry.clone())?;
                    pass.submitted.push(entry);
                }
                Some(Err(error)) if error.may_have_submitted() => {
                    // Uncertain: the job may exist. Adoption finds it by its reason (or,
                    // without one, fails it); until then it is not submitted again, and what
                    // comes after it waits.
                    tracing::warn!(%holder, key = %entry.key, %error, "submission uncertain");
                    self.note_answer(&entry, true);
                    pass.refused.push((entry, error));
                }
                Some(Err(error)) if error.is_transient() => {
                    // Held back before it reached Ganeti: no job; tried again later.
                    tracing::warn!(%holder, key = %entry.key, %error, "not submitted");
                    pass.refused.push((entry, error));
                }
                Some(Err(error)) => {
                    // Refused: no job exists, and asking again gets the same answer.
                    let mut failed = entry.clone();
                    failed.state = State::Failed {
                        why: format!("Ganeti refused it: {error}"),
                    };
                    failed.finished_ms = Some(now_ms);
                    tracing::warn!(%holder, key = %entry.key, %error, "submission refused");
                    self.note_answer(&entry, false);
                    pass.marks.push(failed)?;
                    pass.refused.push((entry, error));
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Adopts the jobs of entries whose submission is uncertain (recorded, every entry they
    /// come after submitted or succeeded (succeeded, for an unchained one), no job known: a crash or a failed answer came between
    /// the submission and its mark) from Ganeti's job list by their reason trail; those it
    /// does not show fail or are submitted again, as `unadopted` says for their holder.
    /// Returns the entries changed; `None` when Ganeti's job list could not be read: nothing
    /// was decided, and nothing is submitted before a later adoption reads it.
    pub async fn adopt(
        &self,
        ganeti: &dyn Ganeti,
        unadopted: impl Fn(&Holder) -> Unadopted,
        now_ms: u64,
    ) -> Result<Option<Vec<Entry>>, LedgerError> {
        self.adopt_of(ganeti, |_| true, unadopted, now_ms).await
    }

    /// [`Executor::adopt`], for the entries of the holders `which` says; `None` when Ganeti's
    /// job list could not be read (nothing more was decided, and nothing is submitted, for any
    /// holder, before a later adoption reads it). An entry marked submitted
    /// without a job (one whose job carries no reason trail, asked for with no answer
    /// recorded) stays unfinished, holding what it holds, while the job list shows an
    /// unfinished job that may be its own ([`nodecare_ganeti::Op::may_be_job`]: a reinstall of
    /// its instance) or cannot be read; once a complete list shows none it fails, never
    /// submitted again (whether its job ran cannot be known).
    pub async fn adopt_of(
        &self,
        ganeti: &dyn Ganeti,
        which: impl Fn(&Holder) -> bool,
        unadopted: impl Fn(&Holder) -> Unadopted,
        now_ms: u64,
    ) -> Result<Option<Vec<Entry>>, LedgerError> {
        // The entries recorded before this process's first look are uncertain from here on.
        drop(self.unsure()?);
        let entries: Vec<Arc<Entry>> = self
            .ledger
            .shared_unfinished()?
            .into_iter()
            .filter(|e| which(&e.holder))
            .collect();
        let mut changed = Vec::new();
        // Marked submitted without a job: asked for, its job carrying no reason trail to find
        // it by. Uncertainty holds: the entry stays unfinished (its nodes held) while Ganeti's
        // job list shows an unfinished job that may be its own, or cannot be read.
        let untraced: Vec<&Arc<Entry>> = entries
            .iter()
            .filter(|e| e.state == State::Submitted && e.job.is_none() && e.action.op().is_some())
            .collect();
        let mut listed: Option<Vec<nodecare_ganeti::JobSummary>> = None;
        if !untraced.is_empty() {
            match ganeti.jobs().await {
                Ok(jobs) => listed = Some(jobs),
                Err(error) => {
                    tracing::warn!(%error, "cannot list jobs to look for uncertain submissions: nothing is submitted");
                    self.unsure_lock().unread = Some(error.to_string());
                    return Ok(None);
                }
            }
        }
        for e in untraced {
            let Some(op) = e.action.op() else { continue };
            let running = listed
                .iter()
                .flatten()
                .find(|job| !job.status.is_final() && op.may_be_job(job));
            if let Some(job) = running {
                tracing::info!(holder = %e.holder, key = %e.key, job = job.id,
                    "uncertain submission: a job that may be its own is unfinished; still held");
                continue;
            }
            let mut e = Entry::clone(e);
            e.state = State::Failed {
                why: format!(
                    "the submission of its {} job is uncertain (no answer recorded) and that \
                     job carries no reason trail to find it by; Ganeti's job list shows no \
                     unfinished job that may be it: not submitted again",
                    op.name()
                ),
            };
            e.finished_ms = Some(now_ms);
            tracing::warn!(holder = %e.holder, key = %e.key, "uncertain submission failed");
            self.mark(&e)?;
            changed.push(e);
        }
        let holders: BTreeSet<&Holder> = entries
            .iter()
            .filter(|e| e.state == State::Recorded && which(&e.holder))
            .map(|e| &e.holder)
            .collect();
        // Their holders' entries (those an entry comes after may have finished).
        let mut entries: Vec<Entry> = Vec::new();
        for holder in holders {
            entries.extend(self.ledger.of_holder(holder)?);
        }
        let uncertain_in = |entries: &[Entry]| -> Vec<usize> {
            entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.state == State::Recorded && e.action.op().is_some())
                .filter(|(_, e)| {
                    e.after.iter().all(|key| {
                        entries.iter().any(|b| {
                            b.holder == e.holder
                                && &b.key == key
                                && (b.state == State::Succeeded
                                    || (!e.unchained && b.job.is_some()))
                        })
                    })
                })
                .map(|(at, _)| at)
                .collect()
        };
        // Once Ganeti's job list is read (or nothing could have been submitted), every recorded
        // entry of these holders is decided: its job adopted, or proved absent (an entry not
        // ready now could not have been submitted: its predecessors have no job, and adoption
        // looks again after each one adopted).
        let decided_all = |entries: &[Entry]| {
            let mut unsure = self.unsure_lock();
            unsure.unread = None;
            for e in entries.iter().filter(|e| e.state == State::Recorded) {
                unsure.entries.remove(&(e.holder.clone(), e.key.clone()));
            }
        };
        let mut uncertain = uncertain_in(&entries);
        if uncertain.is_empty() {
            decided_all(&entries);
            return Ok(Some(changed));
        }
        let jobs = match listed {
            Some(jobs) => jobs,
            None => match ganeti.jobs().await {
                Ok(jobs) => jobs,
                Err(error) => {
                    tracing::warn!(%error, "cannot list jobs to adopt them: nothing is submitted");
                    self.unsure_lock().unread = Some(error.to_string());
                    return Ok(None);
                }
            },
        };
        decided_all(&entries);
        let mut by_reason: BTreeMap<(Uuid, String), JobId> = BTreeMap::new();
        for job in &jobs {
            if let Some(reason) = job.nodecare_reason() {
                by_reason
                    .entry((reason.incident, reason.intent))
                    .or_insert(job.id);
            }
        }
        // A recorded entry whose job Ganeti shows is adopted whatever the entries before it
        // show: the job of one it came after may have left the list (archived, lost) while its
        // own is still there, and it must never be submitted a second time.
        let shown: Vec<usize> = entries
            .iter()
            .enumerate()
            .filter(|(at, e)| {
                e.state == State::Recorded
                    && e.action.op().is_some()
                    && !uncertain.contains(at)
                    && e.trail()
                        .is_some_and(|trail| by_reason.contains_key(&(trail, e.key.clone())))
            })
            .map(|(at, _)| at)
            .collect();
        uncertain.extend(shown);
        // A chain submitted whole before a crash (its marks written together, after the
        // submissions) is adopted whole: each adoption may make the entries after it
        // uncertain in turn, and they are looked for too before anything is submitted again.
        // An entry after an adopted one that Ganeti does not show was not submitted yet: it
        // stays recorded for the submission pass, whatever `unadopted` says.
        let mut decided: BTreeSet<usize> = BTreeSet::new();
        let mut first = true;
        while !uncertain.is_empty() {
            let mut adopted = false;
            for at in uncertain {
                decided.insert(at);
                let Some(e) = entries.get(at) else { continue };
                let found = e
                    .trail()
                    .and_then(|trail| by_reason.get(&(trail, e.key.clone())).copied());
                let begun = begun(&entries, &e.holder);
                let mut e = e.clone();
                match (found, unadopted(&e.holder)) {
                    (Some(job), _) => {
                        e.state = State::Submitted;
                        e.job = Some(job);
                        adopted = true;
                        tracing::info!(holder = %e.holder, key = %e.key, job, "adopted the job of a submission that was uncertain (a lost answer or a restart)");
                    }
                    (None, Unadopted::Fail) if first => {
                        e.state = State::Failed {
                            why: "never submitted".into(),
                        };
                        e.finished_ms = Some(now_ms);
                    }
                    (None, Unadopted::JudgeAgain) if !begun => {
                        e.state = State::Canceled {
                            why: "never submitted: nothing of its holder reached Ganeti, its \
                                  work is judged again"
                                .into(),
                        };
                        e.finished_ms = Some(now_ms);
                        tracing::info!(holder = %e.holder, key = %e.key, "uncertain submission never reached Ganeti: canceled, judged again");
                    }
                    (None, _) => continue,
                }
                self.mark(&e)?;
                if let Some(stored) = entries.get_mut(at) {
                    *stored = e.clone();
                }
                changed.push(e);
            }
            if !adopted {
                break;
            }
            first = false;
            uncertain = uncertain_in(&entries)
                .into_iter()
                .filter(|at| !decided.contains(at))
                .collect();
        }
        Ok(Some(changed))
    }

    /// Follows every submitted (or timed-out) Ganeti entry's job: its outcome when it ended,
    /// timed out when it is still not done at its entry's deadline. Entries after one that
    /// did not succeed never run. Returns the entries changed, in job order.
    pub async fn poll(
        &self,
        ganeti: &dyn Ganeti,
        now_ms: u64,
    ) -> Result<Vec<Changed>, LedgerError> {
        self.poll_of(ganeti, |_| true, now_ms).await
    }

    /// [`Executor::poll`], for the entries of the holders `which` says (the others are
    /// followed by their duty's own code).
    pub async fn poll_of(
        &self,
        ganeti: &dyn Ganeti,
        which: impl Fn(&Holder) -> bool,
        now_ms: u64,
    ) -> Result<Vec<Changed>, LedgerError> {
        let mut following: Vec<Entry> = self
            .ledger
            .shared_unfinished()?
            .into_iter()
            .filter(|e| which(&e.holder))
            .filter(|e| matches!(e.state, State::Submitted | State::TimedOut))
            .filter(|e| e.action.op().is_some() && e.job.is_some())
            .map(Arc::unwrap_or_clone)
            .collect();
        // In job order: the first job of a chain that failed is seen first.
        following.sort_by_key(|e| e.job);
        // Many jobs followed (a campaign's group moves thousands of instances): one read of
        // Ganeti's job list tells which still run as submitted and which succeeded, and only
        // the others are read one by one (for their errors).
        let listed: BTreeMap<JobId, nodecare_ganeti::JobSummary> = if following.len() > BULK_POLL {
            let ids: BTreeSet<JobId> = following.iter().filter_map(|e| e.job).collect();
            match ganeti.jobs_among(&ids).await {
                Ok(jobs) => jobs.into_iter().map(|j| (j.id, j)).collect(),
                Err(error) => {
                    tracing::warn!(%error, "cannot list jobs; reading each");
                    BTreeMap::new()
                }
            }
        } else {
            BTreeMap::new()
        };
        let mut changed = Vec::new();
        let mut ended: BTreeSet<Holder> = BTreeSet::new();
        let mut marks = Marks::new(&*self.ledger);
        for mut e in following {
            let Some(job_id) = e.job else { continue };
            let summary = listed.get(&job_id);
            if let Some(summary) = summary
                && still_running(&e, summary, now_ms)
            {
                continue;
            }
            // The list shows this entry's job succeeded: nothing more to read of it (only a
            // job that did not succeed is read whole, for its errors).
            let succeeded =
                summary.is_some_and(|s| s.status == JobStatus::Success && listed_as(&e, s));
            let (state, job) = if succeeded {
                (Some(State::Succeeded), None)
            } else {
                match ganeti.job(job_id).await {
                    Ok(job) => {
                        let state = outcome(&e, &job, now_ms);
                        (state, Some(job))
                    }
                    Err(GanetiError::NotFound(_)) => (
                        Some(State::Failed {
                            why: format!("job {job_id} vanished from Ganeti's queue"),
                        }),
                        None,
                    ),
                    Err(error) => {
                        tracing::warn!(job = job_id, %error, "cannot read job status");
                        continue;
                    }
                }
            };
            let Some(state) = state else { continue };
            if state == e.state {
                continue;
            }
            if !state.is_unfinished() {
                e.finished_ms = Some(now_ms);
                ended.insert(e.holder.clone());
            }
            match &state {
                State::Succeeded => {
                    tracing::info!(holder = %e.holder, key = %e.key, job = job_id, "job succeeded")
                }
                State::TimedOut => {
                    tracing::warn!(holder = %e.holder, key = %e.key, job = job_id, "job timed out")
                }
                other => {
                    tracing::warn!(holder = %e.holder, key = %e.key, job = job_id, why = other.why().unwrap_or(""), "job did not succeed")
                }
            }
            e.state = state;
            marks.push(e.clone())?;
            changed.push(Changed { entry: e, job });
        }
        marks.flush()?;
        // What comes after an entry that did not succeed (here, or failed in adoption) never
        // runs.
        ended.extend(
            self.ledger
                .shared_unfinished()?
                .iter()
                .filter(|e| which(&e.holder))
                .filter(|e| e.state == State::Recorded && !e.after.is_empty())
                .map(|e| e.holder.clone()),
        );
        for holder in ended {
            let entries = self.ledger.shared_of_holder(&holder)?;
            for (id, why) in ledger::ready(&entries).never {
                if let Some(mut e) = entries.iter().find(|e| e.id == id).map(|e| Entry::clone(e)) {
                    e.state = State::Canceled { why };
                    e.finished_ms = Some(now_ms);
                    self.mark(&e)?;
                    changed.push(Changed {
                        entry: e,
                        job: None,
                    });
                }
            }
        }
        Ok(changed)
    }

    /// Cancels what `holder` has not started: recorded entries are canceled, and Ganeti is
    /// asked to cancel its submitted jobs, those that have not started first, each once
    /// ([`Executor::cancel_jobs`]). A running job ends on its own; each job's end is what
    /// [`Executor::poll`] reads.
    pub async fn cancel(
        &self,
        ganeti: &dyn Ganeti,
        holder: &Holder,
        why: &str,
        now_ms: u64,
    ) -> Result<Vec<CancelAnswer>, LedgerError> {
        let entries = self.ledger.of_holder(holder)?;
        for e in entries.iter().filter(|e| e.state == State::Recorded) {
            let mut e = e.clone();
            e.state = State::Canceled { why: why.into() };
            e.finished_ms = Some(now_ms);
            self.mark(&e)?;
        }
        self.cancel_jobs(ganeti, holder).await
    }

    /// Asks Ganeti to cancel `holder`'s submitted jobs, each once; its recorded entries are
    /// left as they are (a duty that adopts them after a crash).
    ///
    /// Ganeti cancels a job that has not started, and then itself cancels the jobs depending
    /// on it; it cannot cancel one that runs, and one canceled call takes its time (a job
    /// waiting for locks). So that no job that had not started when the cancel was asked
    /// starts meanwhile (the running job of its chain ending between two calls), the jobs
    /// Ganeti's job list shows not started are asked first, the first of each chain among them
    /// (those none of whose predecessors is among them) side by side, then the others, in
    /// submission order; the jobs that started (or that the list does not show) last. Without
    /// the job list, every job in submission order (a chain's first job first).
    pub async fn cancel_jobs(
        &self,
        ganeti: &dyn Ganeti,
        holder: &Holder,
    ) -> Result<Vec<CancelAnswer>, LedgerError> {
        use futures_util::StreamExt as _;
        let entries = self.ledger.of_holder(holder)?;
        let submitted: Vec<&Entry> = entries
            .iter()
            .filter(|e| matches!(e.state, State::Submitted | State::TimedOut))
            .filter(|e| e.action.op().is_some() && e.job.is_some())
            .collect();
        let ids: BTreeSet<JobId> = submitted.iter().filter_map(|e| e.job).collect();
        let statuses: Option<BTreeMap<JobId, JobStatus>> = if ids.is_empty() {
            None
        } else {
            match ganeti.jobs_among(&ids).await {
                Ok(jobs) => Some(jobs.into_iter().map(|j| (j.id, j.status)).collect()),
                Err(error) => {
                    tracing::warn!(%holder, %error, "cannot list jobs to cancel them: in submission order");
                    None
                }
            }
        };
        let order = cancel_order(&submitted, statuses.as_ref());
        let mut answers = Vec::new();
        for phase in order {
            let asked: Vec<(JobId, String)> = phase
                .into_iter()
                .filter(|(job, _)| {
                    self.cancels_asked
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(*job)
                })
                .collect();
            let phase_answers: Vec<CancelAnswer> = futures_util::stream::iter(asked)
                .map(|(job, key)| async move {
                    let (canceled, message) = match ganeti.cancel_job(job).await {
                        Ok(answer) => (answer.canceled, answer.message),
                        Err(error) => {
                            if error.is_transient() {
                                self.cancels_asked
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                                    .remove(&job);
                            }
                            (false, format!("cannot ask Ganeti to cancel it: {error}"))
                        }
                    };
                    tracing::info!(%holder, job, key = %key, canceled, %message, "job cancel");
                    CancelAnswer {
                        job,
                        key,
                        canceled,
                        message,
                    }
                })
                .buffered(SUBMIT_CONCURRENCY)
                .collect()
                .await;
            answers.extend(phase_answers);
        }
        Ok(answers)
    }

    /// What the ledger holds in force, from the entries of the holders `open` says are still
    /// open.
    pub fn in_force(&self, open: impl Fn(&Holder) -> bool) -> Result<ledger::Held, LedgerError> {
        let entries: Vec<Arc<Entry>> = self
            .ledger
            .shared_entries()?
            .into_iter()
            .filter(|e| open(&e.holder))
            .collect();
        Ok(ledger::in_force(&entries))
    }
}

/// One holder's submission pass: its jobs by key, and what the pass submitted (to mark) or
/// could not submit.
struct Pass<'m, 'l> {
    jobs: BTreeMap<String, JobId>,
    marks: &'m mut Marks<'l>,
    submitted: &'m mut Vec<Entry>,
    refused: &'m mut Vec<(Entry, GanetiError)>,
}

/// Most submissions of one layer sent to Ganeti at once ([`Executor::submit`]): a group's
/// hundreds of jobs do not wait for each other's answers one by one, and Ganeti's RAPI daemon
/// is not asked for more than a few at a time.
const SUBMIT_CONCURRENCY: usize = 8;

/// Above this many jobs followed, [`Executor::poll`] reads Ganeti's job list first.
const BULK_POLL: usize = 8;

/// Most submissions or job ends marked in one durable write: a group's hundreds of jobs (a
/// campaign moving thousands of instances) cost one write for their submissions and one for
/// their ends, each an fsync on the round's path.
const MARK_BATCH: usize = 4096;

/// Entries to mark, written in one durable write per [`MARK_BATCH`] ([`Ledger::mark_all`])
/// instead of one each; what is not flushed yet is lost with a crash, as the answer of a
/// submission can be (adoption and the next poll find it again).
struct Marks<'a> {
    ledger: &'a dyn Ledger,
    pending: Vec<Entry>,
}

impl<'a> Marks<'a> {
    fn new(ledger: &'a dyn Ledger) -> Self {
        Self {
            ledger,
            pending: Vec::new(),
        }
    }

    /// Adds `entry`; writes the batch once it is full.
    fn push(&mut self, entry: Entry) -> Result<(), LedgerError> {
        self.pending.push(entry);
        if self.pending.len() >= MARK_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes what is pending.
    fn flush(&mut self) -> Result<(), LedgerError> {
        self.ledger.mark_all(&self.pending)?;
        self.pending.clear();
        Ok(())
    }
}

/// The order in which [`Executor::cancel_jobs`] asks Ganeti to cancel the jobs of `submitted`
/// (one holder's entries with a job), in phases whose jobs are asked side by side: with
/// `statuses` (Ganeti's job list), first the jobs not started whose predecessors (the entries
/// they come after) are not among the jobs not started, then the other jobs not started, then
/// the rest; without it, every job in one phase, in submission order. Each phase in job order.
fn cancel_order(
    submitted: &[&Entry],
    statuses: Option<&BTreeMap<JobId, JobStatus>>,
) -> Vec<Vec<(JobId, String)>> {
    let mut by_job: Vec<(JobId, &Entry)> = submitted
        .iter()
        .filter_map(|e| e.job.map(|job| (job, *e)))
        .collect();
    by_job.sort_by_key(|(job, _)| *job);
    let Some(statuses) = statuses else {
        return vec![
            by_job
                .into_iter()
                .map(|(job, e)| (job, e.key.clone()))
                .collect(),
        ];
    };
    let not_started = |job: &JobId| {
        statuses
            .get(job)
            .is_some_and(|s| matches!(s, JobStatus::Queued | JobStatus::Waiting))
    };
    let waiting: BTreeSet<&str> = by_job
        .iter()
        .filter(|(job, _)| not_started(job))
        .map(|(_, e)| e.key.as_str())
        .collect();
    let mut phases: [Vec<(JobId, String)>; 3] = Default::default();
    for (job, e) in by_job {
        let phase = if !not_started(&job) {
            2
        } else if e.after.iter().any(|key| waiting.contains(key.as_str())) {
            1
        } else {
            0
        };
        if let Some(phase) = phases.get_mut(phase) {
            phase.push((job, e.key.clone()));
        }
    }
    phases.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Whether any of `holder`'s `entries` reached Ganeti: it has a job, or was asked for without
/// one (a job carrying no reason trail).
fn begun(entries: &[Entry], holder: &Holder) -> bool {
    entries.iter().any(|e| {
        &e.holder == holder
            && (e.job.is_some()
                || matches!(
                    e.state,
                    State::Submitted | State::Succeeded | State::TimedOut
                ))
    })
}

/// Whether the listed job of entry `e` still runs with `e`'s reason trail and leaves `e` as
/// it is (before its deadline, or timed out already): reading it alone would change nothing.
fn still_running(e: &Entry, summary: &nodecare_ganeti::JobSummary, now_ms: u64) -> bool {
    listed_as(e, summary)
        && !summary.status.is_final()
        && (now_ms <= e.deadline_ms || e.state == State::TimedOut)
}

/// Whether the listed job carries `e`'s reason trail (it is `e`'s job, not another job that
/// took its id after a queue was lost).
fn listed_as(e: &Entry, summary: &nodecare_ganeti::JobSummary) -> bool {
    summary
        .nodecare_reason()
        .is_some_and(|r| Some(r.incident) == e.trail() && r.intent == e.key)
}

/// The state `job` puts entry `e` in: its outcome when it ended, timed out at the deadline,
/// `None` while it runs. A job whose reason names another entry (an id reused after the queue
/// was lost) fails the entry.
pub fn outcome(e: &Entry, job: &Job, now_ms: u64) -> Option<State> {
    let job_id = job.id;
    let other = job
        .reasons
        .iter()
        .find_map(|entry| Reason::parse_text(&entry.text))
        .filter(|r| Some(r.incident) != e.trail() || r.intent != e.key);
    if let Some(other) = other {
        return Some(State::Failed {
            why: format!(
                "job {job_id} in Ganeti's queue is another job (incident {} intent {})",
                other.incident, other.intent
            ),
        });
    }
    if job.status.is_final() {
        let errors = if job.errors.is_empty() {
            job.status.as_str().to_owned()
        } else {
            job.errors.join("; ")
        };
        let why = format!("job {job_id} {}: {errors}", job.status.as_str());
        return Some(match job.status {
            JobStatus::Success => State::Succeeded,
            JobStatus::Canceled => State::Canceled { why },
            _ => State::Failed { why },
        });
    }
    (now_ms > e.deadline_ms).then_some(State::TimedOut)
}

#[cfg(test)]
mod tests;
