//! Maintenance windows and freezes: when planned work may start. Pure, no IO (the time zone is
//! given, loaded by the daemon).
//!
//! An operator says, in the configuration, on which days and at which times planned work may
//! start (weekly [`Window`]s in the cluster's time zone), and, there or at run time, when
//! nothing planned may start at all ([`Freeze`]s, with a reason). [`Calendar::at`] turns that
//! and a moment into what the gate reads ([`CalendarNow`]): whether a window is open (and when
//! it closes, or when the next one opens) and which freeze is in force. [`CalendarNow::blocks`]
//! is the gate's rule: which kind of work waits, and for what.
//!
//! What each kind of work obeys ([`CalendarRules`]): campaigns, balancing and other tools'
//! admission requests start only inside a window and never in a freeze; live repairs and
//! instance repairs do so only when the rules say; evacuations of failing nodes start outside
//! windows and, unless the rules say otherwise, in a freeze. Only new work waits: what already
//! started (a campaign's group, an evacuation's next moves) goes on, so a campaign that reaches
//! the end of its window finishes its group and stops before the next one.

pub use nodecare_protocol::calendar::{
    CalendarRules, CalendarStatus, FreezeRequest, FreezeView, Obeys, WindowNow, WorkKind,
};

use jiff::Timestamp;
use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Most windows in a configuration.
pub const MAX_WINDOWS: usize = 64;
/// Most freezes kept (in force, planned, or ended and still shown).
pub const MAX_FREEZES: usize = 64;
/// Most bytes of a freeze's reason.
pub const MAX_REASON_BYTES: usize = 512;

/// A calendar problem: a window or a time that does not parse, a time zone unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CalendarError(pub String);

/// A weekly window: on its days, from `start` to `end` (the next day when `end` is not after
/// `start`), in the calendar's time zone. Written `Tue,Thu 02:00-05:00`, `Mon-Fri 22:00-06:00`,
/// `daily 01:00-03:00`, `Sat 00:00-24:00`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Its days, Monday first.
    pub days: [bool; 7],
    /// Minutes after midnight it opens.
    pub start_min: u16,
    /// Minutes after midnight it closes (1440: midnight at the end of the day); at or before
    /// `start_min`: the next day.
    pub end_min: u16,
    /// As written.
    pub text: String,
}

fn day_index(text: &str) -> Result<usize, CalendarError> {
    let lower = text.trim().to_ascii_lowercase();
    DAY_FULL
        .iter()
        .position(|day| lower.len() >= 3 && day.starts_with(lower.as_str()))
        .ok_or_else(|| CalendarError(format!("{text:?} is not a day of the week (Mon … Sun)")))
}

const DAY_FULL: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

fn minutes(text: &str) -> Result<u16, CalendarError> {
    let bad = || {
        CalendarError(format!(
            "{text:?} is not a time of day (HH:MM, 00:00 to 24:00)"
        ))
    };
    let (hours, mins) = text.trim().split_once(':').ok_or_else(bad)?;
    if hours.is_empty() || hours.len() > 2 || mins.len() != 2 {
        return Err(bad());
    }
    let hours: u16 = hours.parse().map_err(|_| bad())?;
    let mins: u16 = mins.parse().map_err(|_| bad())?;
    if mins >= 60 || hours > 24 || (hours == 24 && mins != 0) {
        return Err(bad());
    }
    Ok(hours * 60 + mins)
}

impl Window {
    /// Parses `DAYS HH:MM-HH:MM`.
    pub fn parse(text: &str) -> Result<Self, CalendarError> {
        let context = |e: CalendarError| CalendarError(format!("window {text:?}: {}", e.0));
        if text.len() > 128 {
            return Err(CalendarError(format!(
                "window of {} bytes: at most 128",
                text.len()
            )));
        }
        let (days_text, times) = text.trim().split_once(' ').ok_or_else(|| {
            CalendarError(format!(
                "window {text:?}: write days and times, as in \"Tue,Thu 02:00-05:00\""
            ))
        })?;
        let mut days = [false; 7];
        if days_text.eq_ignore_ascii_case("daily") || days_text == "*" {
            days = [true; 7];
        } else {
            for part in days_text.split(',') {
                match part.split_once('-') {
                    Some((from, to)) => {
                        let from = day_index(from).map_err(context)?;
                        let to = day_index(to).map_err(context)?;
                        let mut day = from;
                        loop {
                            if let Some(d) = days.get_mut(day) {
                                *d = true;
                            }
                            if day == to {
                                break;
                            }
                            day = (day + 1) % 7;
                        }
                    }
                    None => {
                        let day = day_index(part).map_err(context)?;
                        if let Some(d) = days.get_mut(day) {
                            *d = true;
                        }
                    }
                }
            }
        }
        let (start, end) = times.trim().split_once('-').ok_or_else(|| {
            CalendarError(format!("window {text:?}: write the times as HH:MM-HH:MM"))
        })?;
        let start_min = minutes(start).map_err(context)?;
        let end_min = minutes(end).map_err(context)?;
        if start_min == 1440 {
            return Err(CalendarError(format!(
                "window {text:?}: it cannot open at 24:00 (write 00:00 of the next day)"
            )));
        }
        if start_min == end_min {
            return Err(CalendarError(format!(
                "window {text:?}: it opens and closes at the same time (00:00-24:00 is a whole day)"
            )));
        }
        Ok(Self {
            days,
            start_min,
            end_min,
            text: text.trim().to_owned(),
        })
    }

    /// Minutes it lasts.
    const fn length_min(&self) -> u16 {
        if self.end_min > self.start_min {
            self.end_min - self.start_min
        } else {
            1440 - self.start_min + self.end_min
        }
    }

    /// Its occurrence that opens on `date` (if it opens that day), as instants in `zone`.
    fn occurrence(&self, date: Date, zone: &TimeZone) -> Option<(Timestamp, Timestamp)> {
        let weekday = date.weekday().to_monday_zero_offset();
        if !self
            .days
            .get(usize::try_from(weekday).ok()?)
            .copied()
            .unwrap_or(false)
        {
            return None;
        }
        let start = at_minute(date, self.start_min, zone)?;
        let end_day_offset = (u32::from(self.start_min) + u32::from(self.length_min())) / 1440;
        let end_minute = (u32::from(self.start_min) + u32::from(self.length_min())) % 1440;
        let end_date = date
            .checked_add(jiff::Span::new().days(i64::from(end_day_offset)))
            .ok()?;
        let end = at_minute(end_date, u16::try_from(end_minute).ok()?, zone)?;
        (end > start).then_some((start, end))
    }
}

/// The instant of `minute` after midnight of `date` in `zone` (a time in a gap of a clock
/// change is taken as the clock shows it after the change).
fn at_minute(date: Date, minute: u16, zone: &TimeZone) -> Option<Timestamp> {
    let time = Time::new(
        i8::try_from(minute / 60).ok()?,
        i8::try_from(minute % 60).ok()?,
        0,
        0,
    )
    .ok()?;
    let civil = DateTime::from_parts(date, time);
    zone.to_ambiguous_timestamp(civil).compatible().ok()
}

/// A freeze: from `from_ms` until `until_ms`, no planned work starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freeze {
    /// The freeze (a run-time freeze's is random; the configuration's are numbered from 1).
    pub id: Uuid,
    /// Unix ms it begins.
    pub from_ms: u64,
    /// Unix ms it ends.
    pub until_ms: u64,
    /// Why (shown wherever it blocks).
    pub reason: String,
    /// Who set it (`config` for the configuration's).
    pub who: String,
    /// Unix ms it was set.
    pub created_ms: u64,
    /// Unix ms it was lifted, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted_ms: Option<u64>,
    /// Who lifted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted_by: Option<String>,
}

impl Freeze {
    /// Whether it is in force at `now_ms`.
    pub fn in_force(&self, now_ms: u64) -> bool {
        self.from_ms <= now_ms
            && now_ms < self.until_ms
            && self.lifted_ms.is_none_or(|lifted| lifted > now_ms)
    }

    /// Whether it has ended at `now_ms` (past its end, or lifted).
    pub fn ended(&self, now_ms: u64) -> bool {
        now_ms >= self.until_ms || self.lifted_ms.is_some_and(|lifted| lifted <= now_ms)
    }
}

/// A calendar: its windows, its freezes, its time zone and its rules.
#[derive(Debug, Clone)]
pub struct Calendar {
    /// Weekly windows (none: every moment is inside one).
    pub windows: Vec<Window>,
    /// Freezes (the configuration's and the run-time ones).
    pub freezes: Vec<Freeze>,
    /// The cluster's time zone.
    pub zone: TimeZone,
    /// Its name, for people (`Europe/Berlin`, `UTC`).
    pub zone_name: String,
    /// What obeys what.
    pub rules: CalendarRules,
}

/// What the gate reads of the calendar this round (part of its policy, recorded with it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CalendarNow {
    /// Where the windows stand; `None`: no window is configured (work starts at any time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowNow>,
    /// The freeze in force (the one that ends last), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freeze: Option<FreezeNow>,
    /// What obeys what.
    #[serde(default)]
    pub rules: CalendarRules,
}

/// The freeze in force at a moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeNow {
    /// The freeze.
    pub freeze: Freeze,
    /// When it ends, for people (`Sun 2027-01-03 00:00 Europe/Berlin`).
    pub until: String,
}

/// Why the calendar holds a kind of work back (the gate's `BlockedBy`).
pub type CalendarBlock = nodecare_protocol::gate::BlockedBy;

impl CalendarNow {
    /// Why `kind` may not start now (`None`: it may).
    pub fn blocks(&self, kind: WorkKind) -> Option<CalendarBlock> {
        let obeys = self.rules.of(kind);
        if obeys.freezes()
            && let Some(now) = &self.freeze
        {
            return Some(CalendarBlock::Freeze {
                id: now.freeze.id.to_string(),
                reason: now.freeze.reason.clone(),
                until: now.until.clone(),
            });
        }
        if obeys.windows()
            && let Some(window) = &self.window
            && !window.open
        {
            return Some(CalendarBlock::OutsideWindow {
                next: window.text.clone(),
            });
        }
        None
    }
}

/// How far ahead the next window is looked for (a window opens at least once a week).
const LOOK_AHEAD_DAYS: i64 = 8;

impl Default for Calendar {
    fn default() -> Self {
        Self::always_open()
    }
}

impl Calendar {
    /// A calendar in UTC with no window and no freeze: nothing waits (today's default).
    pub fn always_open() -> Self {
        Self {
            windows: Vec::new(),
            freezes: Vec::new(),
            zone: TimeZone::UTC,
            zone_name: "UTC".to_owned(),
            rules: CalendarRules::default(),
        }
    }

    /// Where the calendar stands at `now_ms`.
    pub fn at(&self, now_ms: u64) -> CalendarNow {
        let freeze = self
            .freezes
            .iter()
            .filter(|f| f.in_force(now_ms))
            .max_by_key(|f| (f.until_ms, f.id))
            .map(|freeze| FreezeNow {
                until: self.describe_ms(freeze.until_ms),
                freeze: freeze.clone(),
            });
        CalendarNow {
            window: self.window_at(now_ms),
            freeze,
            rules: self.rules,
        }
    }

    /// Every occurrence of every window that opens from `LOOK_AHEAD_DAYS` before the day of
    /// `now` to as many after, ordered by opening.
    fn occurrences(&self, now: Timestamp) -> Vec<(Timestamp, Timestamp, &Window)> {
        let today = now.to_zoned_datetime(self.zone.clone()).date();
        let mut found: Vec<(Timestamp, Timestamp, &Window)> = Vec::new();
        for offset in -2..=LOOK_AHEAD_DAYS {
            let Ok(date) = today.checked_add(jiff::Span::new().days(offset)) else {
                continue;
            };
            for window in &self.windows {
                if let Some((start, end)) = window.occurrence(date, &self.zone) {
                    found.push((start, end, window));
                }
            }
        }
        found.sort_by_key(|(start, end, _)| (*start, *end));
        found
    }

    fn window_at(&self, now_ms: u64) -> Option<WindowNow> {
        if self.windows.is_empty() {
            return None;
        }
        let now = Timestamp::from_millisecond(i64::try_from(now_ms).unwrap_or(i64::MAX))
            .unwrap_or(Timestamp::MAX);
        let occurrences = self.occurrences(now);
        let open = occurrences
            .iter()
            .find(|(start, end, _)| *start <= now && now < *end);
        if let Some((_, end, window)) = open {
            // Windows that follow without a gap keep it open.
            let mut closes = *end;
            loop {
                let next = occurrences
                    .iter()
                    .filter(|(start, end, _)| *start <= closes && *end > closes)
                    .map(|(_, end, _)| *end)
                    .max();
                match next {
                    Some(end) => closes = end,
                    None => break,
                }
            }
            return Some(WindowNow {
                open: true,
                closes_ms: to_ms(closes),
                next_ms: None,
                text: format!("{} until {}", window.text, self.describe(closes)),
            });
        }
        let next = occurrences.iter().find(|(start, _, _)| *start > now);
        Some(match next {
            Some((start, _, window)) => WindowNow {
                open: false,
                closes_ms: None,
                next_ms: to_ms(*start),
                text: format!("{} ({})", self.describe(*start), window.text),
            },
            None => WindowNow {
                open: false,
                closes_ms: None,
                next_ms: None,
                text: "no window opens".to_owned(),
            },
        })
    }

    /// `Tue 2026-12-08 02:00 Europe/Berlin`.
    pub fn describe(&self, at: Timestamp) -> String {
        let zoned = at.to_zoned_datetime(self.zone.clone());
        format!(
            "{} {} {:02}:{:02} {}",
            weekday_name(zoned.weekday()),
            zoned.date(),
            zoned.hour(),
            zoned.minute(),
            self.zone_name
        )
    }

    /// [`Self::describe`] of a Unix ms.
    pub fn describe_ms(&self, ms: u64) -> String {
        Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX))
            .map_or_else(|_| format!("{ms} ms"), |at| self.describe(at))
    }

    /// Parses a moment written by an operator, in the calendar's time zone unless it says its
    /// own: `2026-12-20`, `2026-12-20T06:00`, `2026-12-20 06:00`, `2026-12-20T06:00:00Z`,
    /// `2026-12-20T06:00+01:00`.
    pub fn parse_moment(&self, text: &str) -> Result<u64, CalendarError> {
        let text = text.trim();
        let bad = |e: &dyn std::fmt::Display| {
            CalendarError(format!(
                "{text:?} is not a date or a date and time (2026-12-20, 2026-12-20T06:00, 2026-12-20T06:00Z): {e}"
            ))
        };
        if text.len() > 64 {
            return Err(CalendarError(format!(
                "a moment of {} bytes: at most 64",
                text.len()
            )));
        }
        if let Ok(at) = text.parse::<Timestamp>() {
            return to_ms(at).ok_or_else(|| bad(&"before 1970"));
        }
        let civil: DateTime = match text.parse::<DateTime>() {
            Ok(civil) => civil,
            Err(error) => match text.parse::<Date>() {
                Ok(date) => date.to_datetime(Time::midnight()),
                Err(_) => return Err(bad(&error)),
            },
        };
        let at = self
            .zone
            .to_ambiguous_timestamp(civil)
            .compatible()
            .map_err(|e| bad(&e))?;
        to_ms(at).ok_or_else(|| bad(&"before 1970"))
    }
}

/// How long an ended freeze is still listed: a week.
pub const ENDED_SHOWN_MS: u64 = 7 * 24 * 3600 * 1000;

/// Longest freeze a request may set: a year.
pub const MAX_FREEZE_MS: u64 = 366 * 24 * 3600 * 1000;

impl Calendar {
    /// The freeze `request` asks `who` to set at `now_ms` (its id given), checked: it begins
    /// `from` (default: now) and ends `until` or after `duration_s` (exactly one), in the
    /// future, within [`MAX_FREEZE_MS`], with a reason.
    pub fn freeze_of(
        &self,
        request: &FreezeRequest,
        who: &str,
        now_ms: u64,
        id: Uuid,
    ) -> Result<Freeze, CalendarError> {
        check_reason(&request.reason)?;
        let from_ms = match &request.from {
            Some(from) => self.parse_moment(from)?,
            None => now_ms,
        };
        let until_ms = match (&request.until, request.duration_s) {
            (Some(until), None) => self.parse_moment(until)?,
            (None, Some(seconds)) => from_ms.saturating_add(seconds.saturating_mul(1000)),
            _ => {
                return Err(CalendarError(
                    "say when the freeze ends: exactly one of until and duration_s".to_owned(),
                ));
            }
        };
        if until_ms <= from_ms {
            return Err(CalendarError(format!(
                "the freeze would end ({}) before it begins ({})",
                self.describe_ms(until_ms),
                self.describe_ms(from_ms)
            )));
        }
        if until_ms <= now_ms {
            return Err(CalendarError(format!(
                "the freeze would end in the past ({})",
                self.describe_ms(until_ms)
            )));
        }
        if until_ms - from_ms > MAX_FREEZE_MS {
            return Err(CalendarError(
                "a freeze lasts at most a year: set another when it ends".to_owned(),
            ));
        }
        Ok(Freeze {
            id,
            from_ms,
            until_ms,
            reason: request.reason.trim().to_owned(),
            who: who.to_owned(),
            created_ms: now_ms,
            lifted_ms: None,
            lifted_by: None,
        })
    }

    /// `freeze` as the API shows it at `now_ms`.
    pub fn view_of(&self, freeze: &Freeze, now_ms: u64) -> FreezeView {
        FreezeView {
            id: freeze.id.to_string(),
            from_ms: freeze.from_ms,
            until_ms: freeze.until_ms,
            from: self.describe_ms(freeze.from_ms),
            until: self.describe_ms(freeze.until_ms),
            reason: freeze.reason.clone(),
            who: freeze.who.clone(),
            created_ms: freeze.created_ms,
            lifted_ms: freeze.lifted_ms,
            lifted_by: freeze.lifted_by.clone(),
            active: freeze.in_force(now_ms),
        }
    }

    /// The calendar at `now_ms` as the API shows it (`GET /1/freezes`): its freezes not ended
    /// a week before, earliest first.
    pub fn status(&self, now_ms: u64) -> CalendarStatus {
        let mut freezes: Vec<&Freeze> = self
            .freezes
            .iter()
            .filter(|f| !f.ended(now_ms.saturating_sub(ENDED_SHOWN_MS)))
            .collect();
        freezes.sort_by_key(|f| (f.from_ms, f.until_ms, f.id));
        CalendarStatus {
            time_zone: self.zone_name.clone(),
            windows: self.windows.iter().map(|w| w.text.clone()).collect(),
            window: self.window_at(now_ms),
            rules: self.rules,
            freezes: freezes
                .into_iter()
                .map(|f| self.view_of(f, now_ms))
                .collect(),
        }
    }
}

fn to_ms(at: Timestamp) -> Option<u64> {
    u64::try_from(at.as_millisecond()).ok()
}

const fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Monday => "Mon",
        Weekday::Tuesday => "Tue",
        Weekday::Wednesday => "Wed",
        Weekday::Thursday => "Thu",
        Weekday::Friday => "Fri",
        Weekday::Saturday => "Sat",
        Weekday::Sunday => "Sun",
    }
}

/// `[calendar]` of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CalendarConfig {
    /// The cluster's time zone (IANA name, `Europe/Berlin`); empty: the system's.
    pub time_zone: String,
    /// Weekly windows (`Tue,Thu 02:00-05:00`); none: planned work starts at any time.
    pub windows: Vec<String>,
    /// What obeys the windows and the freezes.
    pub rules: CalendarRules,
    /// Dated freezes.
    pub freezes: Vec<FreezeConfig>,
}

/// One dated freeze of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreezeConfig {
    /// When it begins (`2026-12-20`, `2026-12-20T18:00`, in the calendar's time zone).
    pub from: String,
    /// When it ends.
    pub until: String,
    /// Why.
    pub reason: String,
}

impl CalendarConfig {
    /// The calendar it describes in `zone` (named `zone_name`), with the run-time freezes
    /// `run_time` besides its own.
    pub fn calendar(
        &self,
        zone: TimeZone,
        zone_name: &str,
        run_time: &[Freeze],
    ) -> Result<Calendar, CalendarError> {
        if self.windows.len() > MAX_WINDOWS {
            return Err(CalendarError(format!(
                "{} windows: at most {MAX_WINDOWS}",
                self.windows.len()
            )));
        }
        if self.freezes.len() > MAX_FREEZES {
            return Err(CalendarError(format!(
                "{} freezes: at most {MAX_FREEZES}",
                self.freezes.len()
            )));
        }
        let windows = self
            .windows
            .iter()
            .map(|w| Window::parse(w))
            .collect::<Result<Vec<_>, _>>()?;
        let mut calendar = Calendar {
            windows,
            freezes: Vec::new(),
            zone,
            zone_name: zone_name.to_owned(),
            rules: self.rules,
        };
        for (n, freeze) in self.freezes.iter().enumerate() {
            let context = |e: CalendarError| CalendarError(format!("freeze {}: {}", n + 1, e.0));
            let from_ms = calendar.parse_moment(&freeze.from).map_err(context)?;
            let until_ms = calendar.parse_moment(&freeze.until).map_err(context)?;
            if until_ms <= from_ms {
                return Err(CalendarError(format!(
                    "freeze {}: it ends ({}) before it begins ({})",
                    n + 1,
                    freeze.until,
                    freeze.from
                )));
            }
            check_reason(&freeze.reason).map_err(context)?;
            calendar.freezes.push(Freeze {
                // The configuration's freezes are numbered in its order.
                id: Uuid::from_u128(u128::try_from(n).unwrap_or(u128::MAX).saturating_add(1)),
                from_ms,
                until_ms,
                reason: freeze.reason.clone(),
                who: "config".to_owned(),
                created_ms: 0,
                lifted_ms: None,
                lifted_by: None,
            });
        }
        calendar.freezes.extend(run_time.iter().cloned());
        Ok(calendar)
    }
}

/// A freeze's reason: not empty, at most [`MAX_REASON_BYTES`], no control characters.
pub fn check_reason(reason: &str) -> Result<(), CalendarError> {
    if reason.trim().is_empty() {
        return Err(CalendarError("a freeze needs a reason".to_owned()));
    }
    if reason.len() > MAX_REASON_BYTES {
        return Err(CalendarError(format!(
            "a reason of {} bytes: at most {MAX_REASON_BYTES}",
            reason.len()
        )));
    }
    if reason.chars().any(char::is_control) {
        return Err(CalendarError(
            "a reason cannot hold control characters".to_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
