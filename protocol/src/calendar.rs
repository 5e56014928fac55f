//! Maintenance windows and freezes as they travel: what obeys them, where the windows stand,
//! the freezes (`GET /1/freezes`, `POST /1/freezes`).

use serde::{Deserialize, Serialize};

use crate::limits;

/// Whether a kind of work obeys the windows and the freezes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Obeys {
    /// Starts at any time.
    #[default]
    AnyTime,
    /// Starts only inside a window, never in a freeze.
    Windows,
    /// Starts at any time but never in a freeze.
    Freezes,
}

impl Obeys {
    /// It waits outside the windows.
    pub const fn windows(self) -> bool {
        matches!(self, Self::Windows)
    }
    /// It waits in a freeze.
    pub const fn freezes(self) -> bool {
        matches!(self, Self::Windows | Self::Freezes)
    }
}

/// What each kind of work obeys (`[calendar]` of the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct CalendarRules {
    /// Rolling-maintenance campaigns (each group starts only inside a window).
    pub campaigns: Obeys,
    /// Balancing moves.
    pub balancing: Obeys,
    /// Other tools' admission requests (`POST /1/disruptions`): planned disruptions.
    pub admissions: Obeys,
    /// Live repairs of failing nodes.
    pub live_repairs: Obeys,
    /// Instance repairs (harep's duty).
    pub instance_repairs: Obeys,
    /// Evacuations of failing nodes.
    pub evacuations: Obeys,
}

impl Default for CalendarRules {
    /// Planned work (campaigns, balancing, admissions) obeys windows and freezes; repairs of
    /// what is failing start at any time.
    fn default() -> Self {
        Self {
            campaigns: Obeys::Windows,
            balancing: Obeys::Windows,
            admissions: Obeys::Windows,
            live_repairs: Obeys::AnyTime,
            instance_repairs: Obeys::AnyTime,
            evacuations: Obeys::AnyTime,
        }
    }
}

/// The kinds of work the calendar tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkKind {
    /// A campaign's group.
    Campaign,
    /// A balancing move.
    Balancing,
    /// Another tool's admission request.
    Admission,
    /// A live repair.
    LiveRepair,
    /// An instance repair.
    InstanceRepair,
    /// An evacuation of a failing node.
    Evacuation,
    /// An instance repair that reinstalls its instance (harep's `reinstall`): an instance
    /// repair for the calendar, and for approvals too unless named on its own.
    Reinstall,
}

impl WorkKind {
    /// For people.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Campaign => "campaign",
            Self::Balancing => "balancing",
            Self::Admission => "admission",
            Self::LiveRepair => "live repair",
            Self::InstanceRepair => "instance repair",
            Self::Evacuation => "evacuation",
            Self::Reinstall => "reinstall",
        }
    }
}

impl CalendarRules {
    /// What `kind` obeys.
    pub const fn of(&self, kind: WorkKind) -> Obeys {
        match kind {
            WorkKind::Campaign => self.campaigns,
            WorkKind::Balancing => self.balancing,
            WorkKind::Admission => self.admissions,
            WorkKind::LiveRepair => self.live_repairs,
            WorkKind::InstanceRepair | WorkKind::Reinstall => self.instance_repairs,
            WorkKind::Evacuation => self.evacuations,
        }
    }
}

/// Where the windows stand at a moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowNow {
    /// A window is open.
    pub open: bool,
    /// Open: Unix ms it closes (the end of the windows that follow each other without a gap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closes_ms: Option<u64>,
    /// Closed: Unix ms the next one opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_ms: Option<u64>,
    /// The window open now, or the next one, for people: `Tue 2026-12-08 02:00 Europe/Berlin
    /// (Tue,Thu 02:00-05:00)`.
    pub text: String,
}

/// A freeze as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeView {
    /// The freeze.
    pub id: String,
    /// Unix ms it begins.
    pub from_ms: u64,
    /// Unix ms it ends.
    pub until_ms: u64,
    /// When it begins and ends, for people, in the cluster's time zone.
    pub from: String,
    /// When it ends, for people.
    pub until: String,
    /// Why.
    pub reason: String,
    /// Who set it (`config`: the configuration's).
    pub who: String,
    /// Unix ms it was set (0: the configuration's).
    pub created_ms: u64,
    /// Unix ms it was lifted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted_ms: Option<u64>,
    /// Who lifted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted_by: Option<String>,
    /// In force now.
    pub active: bool,
}

/// `GET /1/freezes`: the calendar now.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CalendarStatus {
    /// The cluster's time zone.
    pub time_zone: String,
    /// The weekly windows, as configured (none: planned work starts at any time).
    pub windows: Vec<String>,
    /// Where they stand now (`None`: no window configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowNow>,
    /// What obeys what.
    pub rules: CalendarRules,
    /// The freezes: the configuration's and the run-time ones, in force, planned or ended
    /// within the last week.
    pub freezes: Vec<FreezeView>,
}

/// `POST /1/freezes`: no planned work from `from` (default: now) until `until`, or for
/// `duration_s`; exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreezeRequest {
    /// When it begins (`2026-12-20`, `2026-12-20T18:00` in the cluster's time zone, or with an
    /// offset); default: now.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "limits::optional_text"
    )]
    pub from: Option<String>,
    /// When it ends.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "limits::optional_text"
    )]
    pub until: Option<String>,
    /// How long it lasts from its beginning, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<u64>,
    /// Why (at most 512 bytes; required).
    #[serde(deserialize_with = "limits::text")]
    pub reason: String,
}
