//! Instance auto-repair: harep's duty, pure (no IO).
//!
//! Each round, for every instance, this module does what Ganeti's `harep` does, tag for tag:
//!
//! 1. **Policy** ([`resolve_policy`]): the `ganeti:watcher:autorepair:<type>` and
//!    `ganeti:watcher:autorepair:suspend[:<ts>]` tags of the instance, else of its primary
//!    node's group, else of the cluster (the nearest scope with any such tag wins; within one
//!    scope a forever-suspend beats a future suspend beats the least destructive enabled type).
//! 2. **State** ([`initial_state`]): the `pending:` and `result:` tags, grouped by repair uuid,
//!    folded oldest first with harep's precedence (the earliest failure sticks; a newer repair
//!    replaces a healthy one and its tag is removed when the state next changes).
//! 3. **Pending repairs** ([`process_pending`]): once every job of a pending repair is final,
//!    its tag becomes a `result:` tag (`success` when every job succeeded, else `failure`).
//! 4. **Detection** ([`detect`]): what is broken and which repair fixes it, with harep's
//!    opcodes, plus what harep never did (Ganeti issues 982 and 983): a DRBD instance degraded
//!    while both its nodes are online (`fix-storage`), and an instance whose primary is drained
//!    but online (`migrate`, live, instead of harep's failover).
//! 5. **Repair** ([`assess`]): within the permitted type a [`PlannedRepair`] (a
//!    [`gate::Proposal`] and the [`RepairPlan`] the executor runs once the gate admits it);
//!    beyond it an `enoperm` result tag.
//!
//! Differences from harep, all on the side of doing less: an unfinished repair found beside a
//! newer one is waited for (harep aborts its whole run); a repair is never started in the
//! round that closed the previous one (the instance data may predate the jobs); an `enoperm`
//! result is not rewritten every round while nothing changes; a `plain` instance on a drained
//! (online) primary is left alone (harep reinstalls it, destroying its data); expired
//! `suspend:<ts>` tags are removed (the design asks for it, harep never does). The full list
//! is in `docs/harep.md`.
//!
//! What a repair disrupts, for the gate: `migrate` and `failover` disrupt the instance's
//! primary (the node it leaves, already drained or offline) and touch its DRBD secondary (the
//! node it moves onto, never one another holder disrupts); `reinstall` disrupts the primary
//! and, for DRBD, the secondary; `fix-storage` disrupts the secondary it replaces when that is
//! offline or drained, and otherwise (degraded with both nodes online) disrupts nothing and
//! touches both nodes. Moves count the instance's memory for the gate's N+1 check. Repairs that disrupt the same nodes share one holder (the first
//! one's uuid) and are judged as one proposal, as harep repairs every instance of an offline
//! node in one run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ganeti::{
    DiskTemplate, Group, Instance, JobId, JobStatus, Node, Op, Redundancy, ReplaceDisksMode,
    TagTarget,
};
use crate::gate::{Duty, Holder, Proposal};

/// Prefix of every auto-repair tag.
pub const TAG_PREFIX: &str = "ganeti:watcher:autorepair:";
/// Prefix of a pending repair's tag.
pub const TAG_PENDING: &str = "ganeti:watcher:autorepair:pending:";
/// Prefix of a finished repair's tag.
pub const TAG_RESULT: &str = "ganeti:watcher:autorepair:result:";
/// Prefix of a suspend tag (`...suspend:` alone, or `...suspend` without the colon, suspends
/// forever: harep's `chompPrefix` takes a prefix without its final colon as matching).
pub const TAG_SUSPEND: &str = "ganeti:watcher:autorepair:suspend:";
/// Ganeti's limit on the length of a tag.
pub const MAX_TAG_LEN: usize = 128;
/// The allocator harep names in its opcodes.
pub const ALLOCATOR: &str = "hail";
/// harep's default `--job-delay` (and maintd's fixed one), in seconds.
pub const HAREP_JOB_DELAY: u64 = 10;
/// Ganeti's default shutdown timeout (seconds), which harep's failover opcode carries.
pub const DEFAULT_SHUTDOWN_TIMEOUT: u64 = 120;

/// A repair type, least to most destructive (harep's `AutoRepairType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairType {
    /// Replace a DRBD mirror's broken side.
    FixStorage,
    /// Live-migrate the instance.
    Migrate,
    /// Fail the instance over (it restarts).
    Failover,
    /// Recreate the disks and reinstall (data is lost).
    Reinstall,
}

impl RepairType {
    /// Every type, least destructive first.
    pub const ALL: [Self; 4] = [
        Self::FixStorage,
        Self::Migrate,
        Self::Failover,
        Self::Reinstall,
    ];

    /// The tag spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FixStorage => "fix-storage",
            Self::Migrate => "migrate",
            Self::Failover => "failover",
            Self::Reinstall => "reinstall",
        }
    }

    /// Parses the tag spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }

    /// harep's name in its messages (`ArFailover`).
    pub const fn harep_name(self) -> &'static str {
        match self {
            Self::FixStorage => "ArFixStorage",
            Self::Migrate => "ArMigrate",
            Self::Failover => "ArFailover",
            Self::Reinstall => "ArReinstall",
        }
    }

    /// The gate's invasiveness (higher first within the duty).
    pub const fn invasiveness(self) -> u8 {
        match self {
            Self::FixStorage => 1,
            Self::Migrate => 2,
            Self::Failover => 3,
            Self::Reinstall => crate::gate::REINSTALL_INVASIVENESS,
        }
    }
}

impl fmt::Display for RepairType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A finished repair's result, in harep's precedence (`enoperm < success < failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepairResult {
    /// The repair needed a type the policy does not permit.
    Enoperm,
    /// Every job succeeded.
    Success,
    /// A job failed (or was lost).
    Failure,
}

impl RepairResult {
    /// The tag spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Enoperm => "enoperm",
            Self::Success => "success",
            Self::Failure => "failure",
        }
    }

    /// Parses the tag spelling.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Enoperm, Self::Success, Self::Failure]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

/// One repair as its `pending:` or `result:` tag records it (harep's `AutoRepairData`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairData {
    /// The repair type.
    pub kind: RepairType,
    /// The repair's id (a uuid when harep or nodecare wrote it; any text without `:` else).
    pub uuid: String,
    /// Unix seconds: when the repair started (pending) or ended (result).
    pub ts: i64,
    /// The result; `None` while pending.
    pub result: Option<RepairResult>,
    /// The jobs run for the repair.
    pub jobs: Vec<JobId>,
    /// The tag this was read from, or the tag to write.
    pub tag: String,
}

/// A number as Haskell's `reads` reads it: its magnitude modulo 2^64, whether the magnitude
/// exceeds `u64` (so that an unbounded `Integer` can saturate), and its sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HsNumber {
    wrapped: u64,
    beyond_u64: bool,
    negative: bool,
}

impl HsNumber {
    /// As Haskell's `Integer` (unbounded), saturated to `i64`: order and comparisons with any
    /// `i64` stay exact.
    fn saturating(self) -> i64 {
        match (self.negative, self.beyond_u64) {
            (false, true) => i64::MAX,
            (true, true) => i64::MIN,
            (false, false) => i64::try_from(self.wrapped).unwrap_or(i64::MAX),
            (true, false) => 0i64.checked_sub_unsigned(self.wrapped).unwrap_or(i64::MIN),
        }
    }

    /// As Haskell's `Int` (64 bits): `fromInteger` wraps modulo 2^64.
    const fn wrapping(self) -> i64 {
        let value = if self.negative {
            self.wrapped.wrapping_neg()
        } else {
            self.wrapped
        };
        value.cast_signed()
    }
}

/// Haskell's `isSymbolChar` for the ASCII symbols its lexer munches into one `Symbol`.
fn is_hs_symbol(c: char) -> bool {
    "!#$%&*+./<=>?@\\^|-~:".contains(c)
}

/// One number lexeme (`Text.Read.Lex`): decimal digits, or `0x`/`0X` and hexadecimal digits,
/// or `0o`/`0O` and octal digits. A fraction or exponent makes a number no integer (`None`);
/// what follows the lexeme is returned.
fn hs_number_lexeme(text: &str) -> Option<(HsNumber, &str)> {
    let based = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .map(|rest| (16, rest))
        .or_else(|| {
            text.strip_prefix("0o")
                .or_else(|| text.strip_prefix("0O"))
                .map(|rest| (8, rest))
        })
        .filter(|(base, rest)| rest.chars().next().is_some_and(|c| c.is_digit(*base)));
    let (base, digits_from) = based.unwrap_or((10, text));
    let end = digits_from
        .find(|c: char| !c.is_digit(base))
        .unwrap_or(digits_from.len());
    let (digits, rest) = digits_from.split_at(end);
    if digits.is_empty() {
        return None;
    }
    if base == 10 {
        // `lexFrac` and `lexExp` are tried before giving up on them (`<++`): a fraction or an
        // exponent that lexes makes a decimal that is no integer.
        let mut chars = rest.chars();
        match (chars.next(), chars.next(), chars.next()) {
            (Some('.'), Some(d), _) if d.is_ascii_digit() => return None,
            (Some('e' | 'E'), Some(d), _) if d.is_ascii_digit() => return None,
            (Some('e' | 'E'), Some('+' | '-'), Some(d)) if d.is_ascii_digit() => return None,
            _ => {}
        }
    }
    let mut number = HsNumber {
        wrapped: 0,
        beyond_u64: false,
        negative: false,
    };
    let mut exact: Option<u64> = Some(0);
    for c in digits.chars() {
        let digit = u64::from(c.to_digit(base)?);
        let base = u64::from(base);
        number.wrapped = number.wrapped.wrapping_mul(base).wrapping_add(digit);
        exact = exact
            .and_then(|v| v.checked_mul(base))
            .and_then(|v| v.checked_add(digit));
    }
    number.beyond_u64 = exact.is_none();
    Some((number, rest))
}

/// `readNumber` under `parens`: a number, `-` and a number, or either in parentheses, with
/// blanks before every lexeme; what follows is returned.
fn hs_read_number(text: &str) -> Option<(HsNumber, &str)> {
    let text = text.trim_start();
    if let Some(inner) = text.strip_prefix('(') {
        let (number, rest) = hs_read_number(inner)?;
        let rest = rest.trim_start().strip_prefix(')')?;
        return Some((number, rest));
    }
    if text.starts_with(is_hs_symbol) {
        let end = text.find(|c| !is_hs_symbol(c)).unwrap_or(text.len());
        if &text[..end] != "-" {
            return None;
        }
        let (number, rest) = hs_number_lexeme(text[end..].trim_start())?;
        return Some((
            HsNumber {
                negative: true,
                ..number
            },
            rest,
        ));
    }
    hs_number_lexeme(text)
}

/// Haskell's `tryRead` of a number (`reads` with exactly one parse and nothing left over):
/// leading blanks, a `-`, hexadecimal and octal literals and parentheses are taken; a `+`,
/// anything after the number (blanks too), fractions and exponents are not.
fn hs_read(text: &str) -> Option<HsNumber> {
    match hs_read_number(text)? {
        (number, "") => Some(number),
        _ => None,
    }
}

/// A timestamp as harep reads it (an `Integer`), saturated to `i64`.
fn read_integer(text: &str) -> Option<i64> {
    hs_read(text).map(HsNumber::saturating)
}

/// A job id as harep reads it (`makeJobIdS`: an `Int`, which wraps, then non-negative).
fn read_job_id(text: &str) -> Option<JobId> {
    JobId::try_from(hs_read(text)?.wrapping()).ok()
}

/// Ganeti's `chompPrefix`: the rest after `prefix`, or `""` when `text` is `prefix` without
/// its last character (`ganeti:watcher:autorepair:suspend` for the suspend prefix).
pub fn chomp_prefix<'a>(prefix: &str, text: &'a str) -> Option<&'a str> {
    text.strip_prefix(prefix).or_else(|| {
        let mut init = prefix.chars();
        init.next_back();
        (text == init.as_str()).then_some("")
    })
}

impl RepairData {
    /// Parses a `pending:` or `result:` tag exactly as harep does (`parseInitTag`): every
    /// colon separates a field, the field count must match, jobs are `+`-separated
    /// non-negative integers (possibly none). Anything else is not a repair tag (`None`).
    pub fn parse_tag(tag: &str) -> Option<Self> {
        let (rest, pending) = if let Some(rest) = chomp_prefix(TAG_PENDING, tag) {
            (rest, true)
        } else {
            (chomp_prefix(TAG_RESULT, tag)?, false)
        };
        let fields = sep_split(':', rest);
        let (kind, uuid, ts, result, jobs) = match (pending, fields.as_slice()) {
            (true, [kind, uuid, ts, jobs]) => (kind, uuid, ts, None, jobs),
            (false, [kind, uuid, ts, result, jobs]) => {
                (kind, uuid, ts, Some(RepairResult::parse(result)?), jobs)
            }
            _ => return None,
        };
        let jobs = sep_split('+', jobs)
            .into_iter()
            .map(read_job_id)
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            kind: RepairType::parse(kind)?,
            uuid: (*uuid).to_owned(),
            ts: read_integer(ts)?,
            result,
            jobs,
            tag: tag.to_owned(),
        })
    }

    /// The same repair with its tag rendered from its fields ([`render_tag`]); `None` when
    /// even an empty job list would not fit in [`MAX_TAG_LEN`].
    pub fn with_tag(mut self) -> Option<Self> {
        self.tag = render_tag(self.kind, &self.uuid, self.ts, self.result, &self.jobs)?;
        Some(self)
    }
}

/// Ganeti's `sepSplit`: an empty text has no fields; otherwise every separator splits
/// (`"a:"` → `["a", ""]`).
fn sep_split(sep: char, text: &str) -> Vec<&str> {
    if text.is_empty() {
        Vec::new()
    } else {
        text.split(sep).collect()
    }
}

/// Renders a `pending:` (no result) or `result:` tag. Ganeti refuses tags over
/// [`MAX_TAG_LEN`] characters: when the job list does not fit, the earliest jobs are left out
/// (the jobs of a repair are chained, each waiting for the success of the one before, so the
/// last job's outcome is the repair's). `None` when even no job fits.
pub fn render_tag(
    kind: RepairType,
    uuid: &str,
    ts: i64,
    result: Option<RepairResult>,
    jobs: &[JobId],
) -> Option<String> {
    let head = match result {
        None => format!("{TAG_PENDING}{kind}:{uuid}:{ts}:"),
        Some(result) => format!("{TAG_RESULT}{kind}:{uuid}:{ts}:{}:", result.as_str()),
    };
    // Ganeti counts characters (Python's `len` of the tag).
    let mut len = head.chars().count();
    if len > MAX_TAG_LEN {
        return None;
    }
    let mut kept: Vec<String> = Vec::new();
    for job in jobs.iter().rev() {
        let text = job.to_string();
        let add = text.len() + usize::from(!kept.is_empty());
        if len + add > MAX_TAG_LEN {
            break;
        }
        len += add;
        kept.push(text);
    }
    kept.reverse();
    Some(head + &kept.join("+"))
}

/// How long a suspension lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Suspension {
    /// Until the tag is removed.
    Forever,
    /// Until this Unix second.
    Until(i64),
}

/// The auto-repair policy of an instance (harep's `AutoRepairPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArPolicy {
    /// Repairs up to this type are permitted.
    Enabled(RepairType),
    /// Suspended.
    Suspended(Suspension),
    /// No auto-repair tag anywhere.
    NotEnabled,
}

impl fmt::Display for ArPolicy {
    /// harep's `show` of the policy (`ArEnabled ArFailover`, `ArSuspended Forever`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Enabled(kind) => write!(f, "ArEnabled {}", kind.harep_name()),
            Self::Suspended(Suspension::Forever) => f.write_str("ArSuspended Forever"),
            Self::Suspended(Suspension::Until(ts)) => write!(f, "ArSuspended (Until {ts})"),
            Self::NotEnabled => f.write_str("ArNotEnabled"),
        }
    }
}

/// The policy of one object's tags at `now` (Unix seconds), as harep's `getArPolicy`; `None`
/// when the tags say nothing (the next scope decides).
pub fn policy_of(tags: &[String], now: i64) -> Option<ArPolicy> {
    let mut enabled: Option<RepairType> = None;
    let mut forever = false;
    let mut until: Option<i64> = None;
    for tag in tags {
        if let Some(rest) = chomp_prefix(TAG_SUSPEND, tag) {
            if rest.is_empty() {
                forever = true;
            } else if let Some(ts) = read_integer(rest).filter(|ts| *ts > now) {
                until = Some(until.map_or(ts, |u| u.max(ts)));
            }
        } else if let Some(kind) = chomp_prefix(TAG_PREFIX, tag).and_then(RepairType::parse) {
            enabled = Some(enabled.map_or(kind, |e| e.min(kind)));
        }
    }
    if forever {
        Some(ArPolicy::Suspended(Suspension::Forever))
    } else if let Some(ts) = until {
        Some(ArPolicy::Suspended(Suspension::Until(ts)))
    } else {
        enabled.map(ArPolicy::Enabled)
    }
}

/// An instance's policy: its own tags, else its group's, else the cluster's (harep's
/// `setArPolicy`).
pub fn resolve_policy(
    instance_tags: &[String],
    group_tags: Option<&[String]>,
    cluster_tags: &[String],
    now: i64,
) -> ArPolicy {
    policy_of(instance_tags, now)
        .or_else(|| group_tags.and_then(|tags| policy_of(tags, now)))
        .or_else(|| policy_of(cluster_tags, now))
        .unwrap_or(ArPolicy::NotEnabled)
}

/// `suspend:<ts>` tags whose time has passed (`ts <= now`): they no longer suspend anything
/// and are removed. Forever-suspends and unparsable timestamps are kept.
pub fn expired_suspends(tags: &[String], now: i64) -> Vec<String> {
    tags.iter()
        .filter(|tag| {
            chomp_prefix(TAG_SUSPEND, tag)
                .filter(|rest| !rest.is_empty())
                .and_then(read_integer)
                .is_some_and(|ts| ts <= now)
        })
        .cloned()
        .collect()
}

/// An instance's repair state (harep's `ArState`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "data", rename_all = "kebab-case")]
pub enum ArState {
    /// Healthy, with the last repair's data if any.
    Healthy(Option<RepairData>),
    /// Broken, and the repair needed is not permitted (`enoperm`).
    NeedsRepair(RepairData),
    /// A repair is running.
    PendingRepair(RepairData),
    /// A repair failed; nothing is done until a person removes the tag.
    FailedRepair(RepairData),
}

impl ArState {
    /// harep's name in its messages and count table.
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Healthy(_) => "Healthy",
            Self::NeedsRepair(_) => "Needs repair",
            Self::PendingRepair(_) => "Pending repair",
            Self::FailedRepair(_) => "Failure",
        }
    }

    /// The repair data the state carries.
    pub const fn data(&self) -> Option<&RepairData> {
        match self {
            Self::Healthy(data) => data.as_ref(),
            Self::NeedsRepair(data) | Self::PendingRepair(data) | Self::FailedRepair(data) => {
                Some(data)
            }
        }
    }
}

/// The state read from an instance's tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialState {
    /// The state.
    pub state: ArState,
    /// Tags superseded by a newer repair, removed with the next change (harep's
    /// `tagsToRemove`).
    pub remove: Vec<String>,
    /// A newer repair found while an older one is unfinished: harep aborts its whole run;
    /// here the older one is waited for and the newer ones are read once it is done.
    pub conflict: Option<String>,
}

/// Reads the state from an instance's tags (harep's `setInitialState` and `arStatusCmp`).
pub fn initial_state(tags: &[String]) -> InitialState {
    let mut data: Vec<RepairData> = tags
        .iter()
        .filter_map(|t| RepairData::parse_tag(t))
        .collect();
    // Group by uuid (stable, so equal uuids keep their tag order), then order the groups by
    // their earliest timestamp (stable again: ties stay in uuid order).
    data.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    let mut groups: Vec<Vec<RepairData>> = Vec::new();
    for d in data {
        match groups.last_mut() {
            Some(group) if group.first().is_some_and(|g| g.uuid == d.uuid) => group.push(d),
            _ => groups.push(vec![d]),
        }
    }
    groups.sort_by_key(|group| group.iter().map(|d| d.ts).min().unwrap_or(i64::MIN));
    let mut state = ArState::Healthy(None);
    let mut remove: Vec<String> = Vec::new();
    let mut conflict = None;
    for group in groups {
        // The last of the maximal (result, ts): harep's `last . sortBy (comparing keyfn)`.
        let Some(newest) = group.into_iter().reduce(|best, d| {
            if (d.result, d.ts) >= (best.result, best.ts) {
                d
            } else {
                best
            }
        }) else {
            continue;
        };
        match &state {
            ArState::FailedRepair(_) | ArState::NeedsRepair(_) => {}
            ArState::Healthy(previous) => {
                if let Some(previous) = previous {
                    remove.insert(0, previous.tag.clone());
                }
                state = match newest.result {
                    Some(RepairResult::Success | RepairResult::Enoperm) => {
                        ArState::Healthy(Some(newest))
                    }
                    Some(RepairResult::Failure) => ArState::FailedRepair(newest),
                    None => ArState::PendingRepair(newest),
                };
            }
            ArState::PendingRepair(older) => {
                conflict = Some(format!(
                    "an unfinished repair was found: found tag {:?}, but older pending tag {:?} exists",
                    newest.tag, older.tag
                ));
                break;
            }
        }
    }
    InitialState {
        state,
        remove,
        conflict,
    }
}

/// What Ganeti says of one job of a pending repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    /// Its status.
    Known(JobStatus),
    /// Ganeti does not know the job (never existed, or purged): the repair cannot be known to
    /// have succeeded, so it counts as failed.
    Lost,
}

/// What becomes of a pending repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingOutcome {
    /// Jobs still run, or their status is unknown this round: wait.
    Wait(String),
    /// Every job is final: the repair's result (tag rendered, timestamp now).
    Done(RepairData),
    /// Every job is final but the result tag cannot be written: even without its job list it
    /// would be longer than Ganeti's [`MAX_TAG_LEN`] (a pending tag with a long id, from
    /// another tool). harep would submit the tag, Ganeti would refuse it and harep would abort
    /// its whole run, every run. Here nothing is submitted; the instance stays pending, shown
    /// as blocked with why and what a person can do.
    Blocked(String),
}

/// harep's `processPending`: a repair whose jobs are all final becomes `success` (every job
/// succeeded, or there was no job) or `failure`.
pub fn process_pending(
    data: &RepairData,
    jobs: &BTreeMap<JobId, JobState>,
    now: i64,
) -> PendingOutcome {
    let mut statuses = Vec::new();
    for job in &data.jobs {
        match jobs.get(job) {
            Some(state) => statuses.push(*state),
            None => return PendingOutcome::Wait(format!("status of job {job} unknown")),
        }
    }
    if let Some(job) = data.jobs.iter().zip(&statuses).find_map(|(job, s)| {
        matches!(
            s,
            JobState::Known(
                JobStatus::Queued | JobStatus::Waiting | JobStatus::Canceling | JobStatus::Running
            )
        )
        .then_some(*job)
    }) {
        return PendingOutcome::Wait(format!("job {job} has not finished"));
    }
    let success = statuses
        .iter()
        .all(|s| *s == JobState::Known(JobStatus::Success));
    let result = RepairData {
        result: Some(if success {
            RepairResult::Success
        } else {
            RepairResult::Failure
        }),
        ts: now,
        ..data.clone()
    };
    match result.clone().with_tag() {
        Some(done) => PendingOutcome::Done(done),
        None => PendingOutcome::Blocked(format!(
            "the repair's jobs have ended but its result tag cannot be written: with the \
             repair's id ({} characters) it would be longer than Ganeti's limit of \
             {MAX_TAG_LEN} characters even without its job list; a person must remove the \
             pending tag {:?} (gnt-instance remove-tags), after which the instance is checked \
             again",
            data.uuid.chars().count(),
            data.tag
        )),
    }
}

/// One Ganeti operation of a repair, submitted as one job through RAPI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum RepairOp {
    /// `OP_INSTANCE_RECREATE_DISKS`: every disk, on nodes chosen by the allocator.
    RecreateDisks {
        /// The allocator (`hail`).
        iallocator: String,
    },
    /// `OP_INSTANCE_REINSTALL` with the current OS (RAPI wraps it in a shutdown and, when
    /// `start`, a startup).
    Reinstall {
        /// Start the instance afterwards (it was administratively up).
        start: bool,
    },
    /// `OP_INSTANCE_FAILOVER` to the DRBD secondary (or, for shared storage, where the
    /// cluster's allocator says).
    Failover,
    /// `OP_INSTANCE_MIGRATE`, live, to the DRBD secondary (or where the allocator says).
    Migrate,
    /// `OP_INSTANCE_REPLACE_DISKS`.
    ReplaceDisks(ReplaceDisksMode),
}

impl RepairOp {
    /// The opcode as harep submits it (its `--dry-run` prints these, fields in Ganeti's
    /// order), for side-by-side comparison.
    pub fn harep_opcode(&self, instance: &str) -> String {
        use serde_json::json;
        let name = json!(instance);
        let fields: Vec<(&str, serde_json::Value)> = match self {
            Self::RecreateDisks { iallocator } => vec![
                ("OP_ID", json!("OP_INSTANCE_RECREATE_DISKS")),
                ("instance_name", name),
                ("disks", json!([])),
                ("nodes", json!([])),
                ("iallocator", json!(iallocator)),
            ],
            Self::Reinstall { .. } => vec![
                ("OP_ID", json!("OP_INSTANCE_REINSTALL")),
                ("instance_name", name),
                ("force_variant", json!(false)),
            ],
            Self::Failover => vec![
                ("OP_ID", json!("OP_INSTANCE_FAILOVER")),
                ("instance_name", name),
                ("shutdown_timeout", json!(DEFAULT_SHUTDOWN_TIMEOUT)),
                ("ignore_consistency", json!(false)),
                ("ignore_ipolicy", json!(false)),
                ("cleanup", json!(false)),
            ],
            Self::Migrate => vec![
                ("OP_ID", json!("OP_INSTANCE_MIGRATE")),
                ("instance_name", name),
                ("mode", json!("live")),
                ("cleanup", json!(false)),
                ("allow_failover", json!(false)),
                ("ignore_ipolicy", json!(false)),
            ],
            Self::ReplaceDisks(mode) => {
                let mut fields = vec![
                    ("OP_ID", json!("OP_INSTANCE_REPLACE_DISKS")),
                    ("instance_name", name),
                    ("early_release", json!(false)),
                    ("ignore_ipolicy", json!(false)),
                    ("mode", json!(mode.as_str())),
                    ("disks", json!([])),
                ];
                if let ReplaceDisksMode::ReplaceNewSecondary {
                    remote_node,
                    iallocator,
                } = mode
                {
                    if let Some(node) = remote_node {
                        fields.push(("remote_node", json!(node)));
                    } else if let Some(ialloc) = iallocator {
                        fields.push(("iallocator", json!(ialloc)));
                    }
                }
                fields
            }
        };
        ordered_object(&fields)
    }

    /// The Ganeti write of the operation on `instance`.
    pub fn op(&self, instance: &str) -> Op {
        let instance = instance.to_owned();
        match self {
            Self::RecreateDisks { iallocator } => Op::RecreateInstanceDisks {
                instance,
                iallocator: iallocator.clone(),
            },
            Self::Reinstall { start } => Op::ReinstallInstance {
                instance,
                start: *start,
            },
            Self::Failover => Op::FailoverInstance {
                instance,
                target: None,
            },
            Self::Migrate => Op::MigrateInstance {
                instance,
                target: None,
            },
            Self::ReplaceDisks(mode) => Op::ReplaceDisks {
                instance,
                mode: mode.clone(),
            },
        }
    }

    /// What the job does, for people.
    pub fn describe(&self) -> String {
        match self {
            Self::RecreateDisks { iallocator } => format!("recreate disks ({iallocator})"),
            Self::Reinstall { start: true } => "reinstall and start".into(),
            Self::Reinstall { start: false } => "reinstall".into(),
            Self::Failover => "failover".into(),
            Self::Migrate => "live migration".into(),
            Self::ReplaceDisks(mode) => format!("replace disks ({})", mode.as_str()),
        }
    }
}

/// A JSON object with its fields in the given order (as Ganeti serialises opcodes).
fn ordered_object(fields: &[(&str, serde_json::Value)]) -> String {
    let inner: Vec<String> = fields
        .iter()
        .map(|(key, value)| format!("{}:{value}", serde_json::Value::from(*key)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// harep's job for a repair (`OP_TEST_DELAY` first when `delay > 0`), as its `--dry-run`
/// prints it.
pub fn harep_job(instance: &str, ops: &[RepairOp], delay: u64) -> String {
    use serde_json::json;
    let mut job = Vec::new();
    if delay > 0 {
        job.push(ordered_object(&[
            ("OP_ID", json!("OP_TEST_DELAY")),
            ("duration", json!(delay)),
            ("on_master", json!(true)),
            ("on_nodes", json!([])),
            ("repeat", json!(0)),
            ("interruptible", json!(false)),
            ("no_locks", json!(false)),
        ]));
    }
    job.extend(ops.iter().map(|op| op.harep_opcode(instance)));
    format!("[{}]", job.join(","))
}

/// What is broken and the repair that fixes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detected {
    /// The repair type needed.
    pub kind: RepairType,
    /// Its operations, in order.
    pub ops: Vec<RepairOp>,
    /// What is broken, for people.
    pub why: String,
    /// Nodes the repair disrupts (see the module docs).
    pub disrupts: BTreeSet<String>,
    /// Nodes it moves the instance onto or works on without disrupting them.
    pub touches: BTreeSet<String>,
    /// Whether the instance moves (its memory then counts for the gate's N+1 check).
    pub moves: bool,
}

fn reinstall_ops(instance: &Instance) -> Vec<RepairOp> {
    vec![
        RepairOp::RecreateDisks {
            iallocator: ALLOCATOR.into(),
        },
        RepairOp::Reinstall {
            start: instance.admin_state == "up",
        },
    ]
}

fn new_secondary() -> RepairOp {
    RepairOp::ReplaceDisks(ReplaceDisksMode::ReplaceNewSecondary {
        remote_node: None,
        iallocator: Some(ALLOCATOR.into()),
    })
}

/// harep's `detectBroken`, plus DRBD degraded while both nodes are online (`degraded`: why,
/// from the agents' storage reports, already past its grace) and a drained primary
/// (migrate). `Err` when the instance's nodes are not known (nothing is done).
pub fn detect(
    instance: &Instance,
    nodes: &BTreeMap<&str, &Node>,
    degraded: Option<&str>,
) -> Result<Option<Detected>, String> {
    let name = &instance.name;
    let primary = nodes
        .get(instance.primary_node.as_str())
        .ok_or_else(|| format!("primary node {} of {name} unknown", instance.primary_node))?;
    let p = primary.name.clone();
    let detected =
        |kind, ops, why: String, disrupts: &[&String], touches: &[&String], moves| Detected {
            kind,
            ops,
            why,
            disrupts: disrupts.iter().map(|n| (*n).clone()).collect(),
            touches: touches.iter().map(|n| (*n).clone()).collect(),
            moves,
        };
    match &instance.disk_template {
        DiskTemplate::Drbd => {
            let secondary_name = instance
                .secondary_nodes
                .first()
                .ok_or_else(|| format!("DRBD instance {name} has no secondary node"))?;
            let secondary = nodes
                .get(secondary_name.as_str())
                .ok_or_else(|| format!("secondary node {secondary_name} of {name} unknown"))?;
            let s = &secondary.name;
            let secondary_down = secondary.offline || secondary.drained;
            let flag = |n: &Node| if n.offline { "offline" } else { "drained" };
            Ok(if primary.offline && secondary_down {
                Some(detected(
                    RepairType::Reinstall,
                    reinstall_ops(instance),
                    format!(
                        "primary {p} is offline and secondary {s} is {}",
                        flag(secondary)
                    ),
                    &[&p, s],
                    &[],
                    true,
                ))
            } else if primary.drained && !primary.offline && secondary_down {
                // harep reinstalls here; the primary still runs the instance, so replace the
                // lost mirror first (the migration follows once it is whole).
                Some(detected(
                    RepairType::FixStorage,
                    vec![new_secondary()],
                    format!(
                        "secondary {s} is {} (primary {p} is drained but online)",
                        flag(secondary)
                    ),
                    &[s],
                    &[],
                    false,
                ))
            } else if primary.offline {
                Some(detected(
                    RepairType::Failover,
                    vec![RepairOp::Failover],
                    format!("primary {p} is offline"),
                    &[&p],
                    &[s],
                    true,
                ))
            } else if primary.drained {
                Some(detected(
                    RepairType::Migrate,
                    vec![RepairOp::Migrate],
                    format!("primary {p} is drained"),
                    &[&p],
                    &[s],
                    true,
                ))
            } else if secondary_down {
                Some(detected(
                    RepairType::FixStorage,
                    vec![new_secondary()],
                    format!("secondary {s} is {}", flag(secondary)),
                    &[s],
                    &[],
                    false,
                ))
            } else {
                degraded.map(|why| {
                    detected(
                        RepairType::FixStorage,
                        vec![new_secondary()],
                        format!("DRBD degraded with both nodes online: {why}"),
                        &[],
                        &[&p, s],
                        false,
                    )
                })
            })
        }
        DiskTemplate::Plain => Ok(primary.offline.then(|| {
            detected(
                RepairType::Reinstall,
                reinstall_ops(instance),
                format!("primary {p} of a plain instance is offline"),
                &[&p],
                &[],
                true,
            )
        })),
        template if template.redundancy() == Redundancy::Shared => Ok(if primary.offline {
            Some(detected(
                RepairType::Failover,
                vec![RepairOp::Failover],
                format!("primary {p} is offline"),
                &[&p],
                &[],
                true,
            ))
        } else if primary.drained {
            Some(detected(
                RepairType::Migrate,
                vec![RepairOp::Migrate],
                format!("primary {p} is drained"),
                &[&p],
                &[],
                true,
            ))
        } else {
            None
        }),
        _ => Ok(None),
    }
}

/// Tags to add to and remove from one object, with harep's progress line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagChange {
    /// Whose tags.
    pub target: TagTarget,
    /// Tag to add first (`OP_TAGS_SET`), if any.
    pub add: Option<String>,
    /// Tags to remove then (`OP_TAGS_DEL`).
    pub remove: Vec<String>,
    /// harep's progress line (`Moving inst3 from "Pending repair" to "Failure"`), if any.
    pub message: Option<String>,
}

/// What a repair runs once the gate admits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairPlan {
    /// The instance.
    pub instance: String,
    /// The repair type.
    pub kind: RepairType,
    /// The repair's uuid (in its tags and every job's reason).
    pub uuid: Uuid,
    /// Unix seconds, for its pending tag.
    pub ts: i64,
    /// The operations, one job each, each job waiting for the success of the one before.
    pub ops: Vec<RepairOp>,
    /// Tags the pending tag supersedes (removed after it is added).
    pub remove: Vec<String>,
    /// harep's progress line (`Executing ArFailover repair on inst3`).
    pub message: String,
}

impl RepairPlan {
    /// The pending tag for the submitted `jobs`.
    pub fn pending_tag(&self, jobs: &[JobId]) -> Option<String> {
        render_tag(self.kind, &self.uuid.to_string(), self.ts, None, jobs)
    }
}

/// A repair proposed to the gate, with its plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedRepair {
    /// What the gate judges.
    pub proposal: Proposal,
    /// What the executor runs once admitted.
    pub plan: RepairPlan,
}

/// What the duty found for one instance this round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceReport {
    /// The instance.
    pub instance: String,
    /// Its policy.
    pub policy: ArPolicy,
    /// harep's state name after this round's changes (a repair counts as pending).
    pub state: String,
    /// The repair it needs, if it is broken.
    pub needs: Option<RepairType>,
    /// What happens and why, for people.
    pub note: String,
    /// Why nothing can go on for this instance until a person acts (a pending repair whose
    /// result tag cannot be written), if so.
    #[serde(default)]
    pub blocked: Option<String>,
}

/// Everything one round of the duty wants.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Assessment {
    /// Per instance, by name.
    pub instances: Vec<InstanceReport>,
    /// Tag-only changes (results of finished repairs, `enoperm` results, expired suspends):
    /// they disrupt nothing and need no gate.
    pub tag_changes: Vec<TagChange>,
    /// Repairs for the gate.
    pub repairs: Vec<PlannedRepair>,
    /// harep's lines for broken instances it does not repair (`Not repairing inst3 because
    /// it's in state ArSuspended Forever`): instance, line.
    pub notices: Vec<(String, String)>,
}

impl Assessment {
    /// The proposals for the gate: one per holder (repairs that disrupt the same nodes share
    /// one, see [`assess`]), their memory added up, the most invasive first.
    pub fn proposals(&self) -> Vec<Proposal> {
        let mut merged: Vec<Proposal> = Vec::new();
        for repair in &self.repairs {
            let p = &repair.proposal;
            match merged.iter_mut().find(|m| m.holder == p.holder) {
                None => merged.push(p.clone()),
                Some(m) => {
                    m.subject = format!("{}, {}", m.subject, p.subject);
                    m.invasiveness = m.invasiveness.max(p.invasiveness);
                    m.since_ms = m.since_ms.min(p.since_ms);
                    m.touches.extend(p.touches.iter().cloned());
                    m.moves_memory = m
                        .moves_memory
                        .zip(p.moves_memory)
                        .map(|(a, b)| a.saturating_add(b));
                    m.reason = format!("{}; {}", m.reason, p.reason);
                }
            }
        }
        merged
    }

    /// harep's `Instance status count` (state name → instances).
    pub fn status_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for report in &self.instances {
            *counts.entry(report.state.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Instances nothing can go on for until a person acts, with why.
    pub fn blocked(&self) -> Vec<(String, String)> {
        self.instances
            .iter()
            .filter_map(|r| Some((r.instance.clone(), r.blocked.clone()?)))
            .collect()
    }

    /// Jobs whose status the duty needs ([`pending_jobs`] over every instance).
    pub fn jobs_to_query(instances: &[Instance]) -> BTreeSet<JobId> {
        instances
            .iter()
            .flat_map(|i| pending_jobs(&i.tags))
            .collect()
    }
}

/// The jobs of every pending repair in an instance's tags.
pub fn pending_jobs(tags: &[String]) -> Vec<JobId> {
    tags.iter()
        .filter_map(|t| RepairData::parse_tag(t))
        .filter(|d| d.result.is_none())
        .flat_map(|d| d.jobs)
        .collect()
}

/// What the duty reads each round.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// Unix seconds.
    pub now: i64,
    /// Cluster tags.
    pub cluster_tags: &'a [String],
    /// Node groups with their tags.
    pub groups: &'a [Group],
    /// Every node.
    pub nodes: &'a [Node],
    /// Every instance.
    pub instances: &'a [Instance],
    /// Status of the jobs of pending repairs ([`Assessment::jobs_to_query`]).
    pub jobs: &'a BTreeMap<JobId, JobState>,
    /// DRBD instances degraded with both nodes online, past their grace: instance → why.
    pub degraded: &'a BTreeMap<String, String>,
    /// Instances with a repair submitted whose pending tag Ganeti does not show yet: waited
    /// for.
    pub in_flight: &'a BTreeSet<String>,
}

/// One round of the duty: every instance's policy, state, pending repair and detection, as
/// harep's run, turned into tag changes and proposals. `new_uuid` names new repairs.
pub fn assess(inputs: &Inputs<'_>, new_uuid: &mut dyn FnMut() -> Uuid) -> Assessment {
    let now = inputs.now;
    let nodes: BTreeMap<&str, &Node> = inputs.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let groups: BTreeMap<&str, &Group> =
        inputs.groups.iter().map(|g| (g.uuid.as_str(), g)).collect();
    let mut out = Assessment::default();
    let mut pending_changes = Vec::new();
    let mut repair_changes = Vec::new();

    // Expired suspends: cluster, groups, instances.
    let mut suspends = Vec::new();
    let expired = expired_suspends(inputs.cluster_tags, now);
    if !expired.is_empty() {
        suspends.push((TagTarget::Cluster, expired));
    }
    for group in inputs.groups {
        let expired = expired_suspends(&group.tags, now);
        if !expired.is_empty() {
            suspends.push((TagTarget::Group(group.name.clone()), expired));
        }
    }

    let mut instances: Vec<&Instance> = inputs.instances.iter().collect();
    instances.sort_by(|a, b| a.name.cmp(&b.name));
    for instance in instances {
        let name = instance.name.clone();
        let expired = expired_suspends(&instance.tags, now);
        if !expired.is_empty() {
            suspends.push((TagTarget::Instance(name.clone()), expired));
        }
        let group_tags = nodes
            .get(instance.primary_node.as_str())
            .and_then(|n| groups.get(n.group.as_str()))
            .map(|g| g.tags.as_slice());
        let policy = resolve_policy(&instance.tags, group_tags, inputs.cluster_tags, now);
        let mut report = InstanceReport {
            instance: name.clone(),
            policy,
            state: String::new(),
            needs: None,
            note: String::new(),
            blocked: None,
        };
        if inputs.in_flight.contains(&name) {
            report.state = "Pending repair".into();
            report.note = "a repair was submitted; waiting for its pending tag".into();
            out.instances.push(report);
            continue;
        }
        let initial = initial_state(&instance.tags);
        let mut state = initial.state;
        let mut remove = initial.remove;
        let mut notes: Vec<String> = initial.conflict.into_iter().collect();
        let mut closed = false;

        // harep's processPending.
        if let ArState::PendingRepair(data) = &state {
            match process_pending(data, inputs.jobs, now) {
                PendingOutcome::Wait(why) => notes.push(format!("waiting: {why}")),
                PendingOutcome::Blocked(why) => {
                    notes.push(format!("blocked: {why}"));
                    report.blocked = Some(why);
                }
                PendingOutcome::Done(done) => {
                    let new_state = if done.result == Some(RepairResult::Success) {
                        ArState::Healthy(Some(done.clone()))
                    } else {
                        ArState::FailedRepair(done.clone())
                    };
                    let mut removed = std::mem::take(&mut remove);
                    removed.insert(0, data.tag.clone());
                    pending_changes.push(TagChange {
                        target: TagTarget::Instance(name.clone()),
                        add: Some(done.tag.clone()),
                        remove: removed,
                        message: Some(format!(
                            "Moving {name} from {:?} to {:?}",
                            state.name(),
                            new_state.name()
                        )),
                    });
                    state = new_state;
                    closed = true;
                }
            }
        }

        // harep's detectBroken and doRepair, for healthy instances only.
        match detect(
            instance,
            &nodes,
            inputs.degraded.get(&name).map(String::as_str),
        ) {
            Err(why) => notes.push(format!("not checked: {why}")),
            Ok(None) => {}
            Ok(Some(found)) => {
                report.needs = Some(found.kind);
                match (&state, policy) {
                    (ArState::Healthy(_), _) if closed => notes.push(format!(
                        "{}; a repair just ended, checking again next round",
                        found.why
                    )),
                    (ArState::Healthy(current), ArPolicy::Enabled(max)) if found.kind > max => {
                        let already = current.as_ref().is_some_and(|c| {
                            c.result == Some(RepairResult::Enoperm) && c.kind == found.kind
                        });
                        if already {
                            notes.push(format!(
                                "{}: needs {}, only up to {} permitted (recorded)",
                                found.why, found.kind, max
                            ));
                        } else {
                            let data = RepairData {
                                kind: found.kind,
                                uuid: new_uuid().to_string(),
                                ts: now,
                                result: Some(RepairResult::Enoperm),
                                jobs: Vec::new(),
                                tag: String::new(),
                            }
                            .with_tag();
                            if let Some(data) = data {
                                let mut removed = std::mem::take(&mut remove);
                                if let Some(current) = current {
                                    removed.insert(0, current.tag.clone());
                                }
                                repair_changes.push(TagChange {
                                    target: TagTarget::Instance(name.clone()),
                                    add: Some(data.tag.clone()),
                                    remove: removed,
                                    message: Some(format!(
                                        "Not performing a repair of type {} on {name} because only repairs up to {} are allowed",
                                        found.kind.harep_name(),
                                        max.harep_name()
                                    )),
                                });
                                notes.push(format!(
                                    "{}: needs {}, only up to {} permitted",
                                    found.why, found.kind, max
                                ));
                                state = ArState::NeedsRepair(data);
                            }
                        }
                    }
                    (ArState::Healthy(current), ArPolicy::Enabled(_)) => {
                        let uuid = new_uuid();
                        let mut removed = std::mem::take(&mut remove);
                        if let Some(current) = current {
                            removed.insert(0, current.tag.clone());
                        }
                        let plan = RepairPlan {
                            instance: name.clone(),
                            kind: found.kind,
                            uuid,
                            ts: now,
                            ops: found.ops.clone(),
                            remove: removed,
                            message: format!(
                                "Executing {} repair on {name}",
                                found.kind.harep_name()
                            ),
                        };
                        let moves_memory = if found.moves {
                            instance.memory
                        } else {
                            Some(0)
                        };
                        let proposal = Proposal {
                            duty: Duty::InstanceRepair,
                            holder: Holder::InstanceRepair { id: uuid },
                            subject: format!("instance {name}"),
                            invasiveness: found.kind.invasiveness(),
                            since_ms: u64::try_from(now).unwrap_or(0).saturating_mul(1000),
                            disrupts: found.disrupts.clone(),
                            touches: found.touches.clone(),
                            fresh: false,
                            moves_memory,
                            after_releases: BTreeMap::new(),
                            reason: format!("{name}: {}; {}", found.why, found.kind),
                        };
                        notes.push(format!("{}: {} proposed", found.why, found.kind));
                        out.repairs.push(PlannedRepair { proposal, plan });
                        state = ArState::PendingRepair(RepairData {
                            kind: found.kind,
                            uuid: uuid.to_string(),
                            ts: now,
                            result: None,
                            jobs: Vec::new(),
                            tag: String::new(),
                        });
                    }
                    (ArState::Healthy(_), policy) => {
                        notes.push(format!(
                            "{}: not repairing {name} because it's in state {policy}",
                            found.why
                        ));
                        out.notices.push((
                            name.clone(),
                            format!("Not repairing {name} because it's in state {policy}"),
                        ));
                    }
                    (other, _) => notes.push(format!(
                        "{}: not repairing, repair state is {}",
                        found.why,
                        other.name()
                    )),
                }
            }
        }
        report.state = state.name().to_owned();
        report.note = notes.join("; ");
        out.instances.push(report);
    }
    // Repairs that disrupt the same nodes (instances leaving one offline node) are judged
    // together: one holder, so the gate does not take them for rivals over the node.
    let mut holders: BTreeMap<BTreeSet<String>, Holder> = BTreeMap::new();
    for repair in &mut out.repairs {
        if repair.proposal.disrupts.is_empty() {
            continue;
        }
        let holder = holders
            .entry(repair.proposal.disrupts.clone())
            .or_insert_with(|| repair.proposal.holder.clone());
        repair.proposal.holder = holder.clone();
    }
    out.tag_changes = pending_changes;
    out.tag_changes.extend(repair_changes);
    out.tag_changes
        .extend(suspends.into_iter().map(|(target, tags)| TagChange {
            target,
            add: None,
            remove: tags,
            message: Some("Removing expired suspend tags".into()),
        }));
    out
}

#[cfg(test)]
#[path = "instance_repair_tests.rs"]
mod tests;
