use super::*;
use proptest::prelude::*;

fn zone(name: &str) -> TimeZone {
    // The tests' zones: UTC, and a fixed-rule zone with summer time (Central Europe), made
    // from a POSIX TZ string so that no zoneinfo file is needed.
    match name {
        "UTC" => TimeZone::UTC,
        _ => TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").unwrap_or(TimeZone::UTC),
    }
}

fn calendar(windows: &[&str], zone_name: &str) -> Calendar {
    let config = CalendarConfig {
        windows: windows.iter().map(|w| (*w).to_owned()).collect(),
        ..CalendarConfig::default()
    };
    match config.calendar(zone(zone_name), zone_name, &[]) {
        Ok(calendar) => calendar,
        Err(error) => panic!("{error}"),
    }
}

fn ms(calendar: &Calendar, text: &str) -> u64 {
    match calendar.parse_moment(text) {
        Ok(ms) => ms,
        Err(error) => panic!("{error}"),
    }
}

#[test]
fn windows_parse_as_operators_write_them() {
    let cases: &[(&str, [bool; 7], u16, u16)] = &[
        (
            "Tue,Thu 02:00-05:00",
            [false, true, false, true, false, false, false],
            120,
            300,
        ),
        (
            "Mon-Fri 22:00-06:00",
            [true, true, true, true, true, false, false],
            1320,
            360,
        ),
        ("daily 01:00-03:30", [true; 7], 60, 210),
        (
            "Sat 00:00-24:00",
            [false, false, false, false, false, true, false],
            0,
            1440,
        ),
        (
            "fri-mon 23:00-01:00",
            [true, false, false, false, true, true, true],
            1380,
            60,
        ),
        (
            "Tuesday 02:00-05:00",
            [false, true, false, false, false, false, false],
            120,
            300,
        ),
    ];
    for (text, days, start, end) in cases {
        let window = Window::parse(text);
        assert_eq!(
            window.as_ref().map(|w| (w.days, w.start_min, w.end_min)),
            Ok((*days, *start, *end)),
            "{text}"
        );
    }
}

#[test]
fn bad_windows_say_what_is_wrong() {
    let cases: &[(&str, &str)] = &[
        ("Tue 02:00", "HH:MM-HH:MM"),
        ("Tue02:00-05:00", "write days and times"),
        ("Tu 02:00-05:00", "not a day of the week"),
        ("Tue 2:00-5:61", "not a time of day"),
        ("Tue 25:00-26:00", "not a time of day"),
        ("Tue 03:00-03:00", "same time"),
        ("Tue 24:00-02:00", "cannot open at 24:00"),
        ("", "write days and times"),
    ];
    for (text, says) in cases {
        match Window::parse(text) {
            Ok(window) => panic!("{text:?} parsed as {window:?}"),
            Err(error) => assert!(error.0.contains(says), "{text:?}: {error}"),
        }
    }
}

#[test]
fn a_weekly_window_opens_and_closes_and_names_the_next() {
    let c = calendar(&["Tue,Thu 02:00-05:00"], "UTC");
    // Monday 2026-12-07 12:00 UTC: closed, the next opens on Tuesday at 02:00.
    let monday = ms(&c, "2026-12-07T12:00");
    let now = c.at(monday);
    let window = now.window.clone().unwrap_or_else(|| panic!("no window"));
    assert!(!window.open);
    assert_eq!(window.next_ms, Some(ms(&c, "2026-12-08T02:00")));
    assert_eq!(
        window.text,
        "Tue 2026-12-08 02:00 UTC (Tue,Thu 02:00-05:00)"
    );
    assert_eq!(
        now.blocks(WorkKind::Campaign),
        Some(CalendarBlock::OutsideWindow {
            next: window.text.clone(),
        })
    );
    // Repairs of failing nodes are not held by windows by default.
    assert_eq!(now.blocks(WorkKind::Evacuation), None);
    assert_eq!(now.blocks(WorkKind::LiveRepair), None);
    // Inside: open until 05:00.
    let inside = c.at(ms(&c, "2026-12-08T04:59"));
    let window = inside.window.unwrap_or_else(|| panic!("no window"));
    assert!(window.open);
    assert_eq!(window.closes_ms, Some(ms(&c, "2026-12-08T05:00")));
    assert_eq!(inside.rules, CalendarRules::default());
    // At the end it is closed again; the next is Thursday's.
    let after = c.at(ms(&c, "2026-12-08T05:00"));
    let window = after.window.unwrap_or_else(|| panic!("no window"));
    assert!(!window.open);
    assert_eq!(window.next_ms, Some(ms(&c, "2026-12-10T02:00")));
}

#[test]
fn a_window_across_midnight_and_windows_that_touch() {
    let c = calendar(&["Fri 22:00-02:00", "Sat 02:00-04:00"], "UTC");
    let now = c.at(ms(&c, "2026-12-12T01:00")); // Saturday 01:00
    let window = now.window.unwrap_or_else(|| panic!("no window"));
    assert!(window.open);
    // Friday's window runs into Saturday's: open until 04:00.
    assert_eq!(window.closes_ms, Some(ms(&c, "2026-12-12T04:00")));
}

#[test]
fn no_window_configured_means_always_open() {
    let c = Calendar::always_open();
    let now = c.at(1_800_000_000_000);
    assert_eq!(now.window, None);
    assert_eq!(now.freeze, None);
    for kind in [
        WorkKind::Campaign,
        WorkKind::Balancing,
        WorkKind::Admission,
        WorkKind::LiveRepair,
        WorkKind::InstanceRepair,
        WorkKind::Evacuation,
    ] {
        assert_eq!(now.blocks(kind), None, "{kind:?}");
    }
}

#[test]
fn windows_follow_the_zone_s_clock_across_a_clock_change() {
    // Central Europe: summer time ends on Sunday 2026-10-25 at 03:00 (back to 02:00).
    let c = calendar(&["daily 06:00-07:00"], "CET");
    let before = ms(&c, "2026-10-24T06:30");
    let after = ms(&c, "2026-10-26T06:30");
    assert!(c.at(before).window.is_some_and(|w| w.open));
    assert!(c.at(after).window.is_some_and(|w| w.open));
    // 06:30 local is 04:30 UTC in summer, 05:30 UTC in winter.
    assert_eq!(before % 86_400_000, (4 * 60 + 30) * 60_000);
    assert_eq!(after % 86_400_000, (5 * 60 + 30) * 60_000);
}

#[test]
fn freezes_hold_planned_work_and_evacuations_only_by_rule() {
    let c = calendar(&[], "UTC");
    let from = ms(&c, "2026-12-20");
    let until = ms(&c, "2027-01-03");
    let freeze = Freeze {
        id: Uuid::nil(),
        from_ms: from,
        until_ms: until,
        reason: "year end".into(),
        who: "alice".into(),
        created_ms: 0,
        lifted_ms: None,
        lifted_by: None,
    };
    let mut frozen = c.clone();
    frozen.freezes.push(freeze.clone());
    assert_eq!(frozen.at(from - 1).freeze, None);
    let now = frozen.at(from);
    assert_eq!(now.freeze.as_ref().map(|f| &f.freeze), Some(&freeze));
    assert_eq!(
        now.blocks(WorkKind::Balancing).map(|b| b.to_string()),
        Some(format!(
            "frozen until Sun 2027-01-03 00:00 UTC: year end (freeze {})",
            Uuid::nil()
        ))
    );
    assert_eq!(now.blocks(WorkKind::Evacuation), None);
    let mut strict = now.clone();
    strict.rules.evacuations = Obeys::Freezes;
    assert!(strict.blocks(WorkKind::Evacuation).is_some());
    assert_eq!(frozen.at(until).freeze, None);
    // Lifted: no longer in force.
    let mut lifted = frozen.clone();
    if let Some(f) = lifted.freezes.first_mut() {
        f.lifted_ms = Some(from + 10);
    }
    assert_eq!(lifted.at(from + 10).freeze, None);
    assert!(lifted.at(from + 9).freeze.is_some());
}

#[test]
fn configured_freezes_are_read_in_the_zone() {
    let config = CalendarConfig {
        freezes: vec![FreezeConfig {
            from: "2026-12-20".into(),
            until: "2027-01-03T06:00".into(),
            reason: "year end".into(),
        }],
        ..CalendarConfig::default()
    };
    let c = config.calendar(zone("CET"), "Europe/Berlin", &[]);
    let c = c.unwrap_or_else(|e| panic!("{e}"));
    let freeze = c.freezes.first().cloned().unwrap_or_else(|| panic!("none"));
    // Midnight in Berlin in winter is 23:00 UTC the day before.
    assert_eq!(
        freeze.from_ms,
        ms(&calendar(&[], "UTC"), "2026-12-19T23:00")
    );
    assert_eq!(freeze.who, "config");
    let backwards = CalendarConfig {
        freezes: vec![FreezeConfig {
            from: "2027-01-03".into(),
            until: "2026-12-20".into(),
            reason: "x".into(),
        }],
        ..CalendarConfig::default()
    };
    assert!(
        backwards
            .calendar(TimeZone::UTC, "UTC", &[])
            .is_err_and(|e| e.0.contains("before it begins"))
    );
    let no_reason = CalendarConfig {
        freezes: vec![FreezeConfig {
            from: "2026-12-20".into(),
            until: "2027-01-03".into(),
            reason: " ".into(),
        }],
        ..CalendarConfig::default()
    };
    assert!(
        no_reason
            .calendar(TimeZone::UTC, "UTC", &[])
            .is_err_and(|e| e.0.contains("needs a reason"))
    );
}

#[test]
fn moments_parse_in_the_zone_or_with_their_own_offset() {
    let c = calendar(&[], "CET");
    let utc = calendar(&[], "UTC");
    assert_eq!(ms(&c, "2026-07-01T12:00"), ms(&utc, "2026-07-01T10:00"));
    assert_eq!(ms(&c, "2026-07-01 12:00"), ms(&utc, "2026-07-01T10:00"));
    assert_eq!(ms(&c, "2026-07-01T12:00Z"), ms(&utc, "2026-07-01T12:00"));
    assert_eq!(
        ms(&c, "2026-07-01T12:00+01:00"),
        ms(&utc, "2026-07-01T11:00")
    );
    for bad in ["tomorrow", "2026-13-01", "", "1969-12-31T23:59Z"] {
        assert!(c.parse_moment(bad).is_err(), "{bad:?}");
    }
}

fn any_window() -> impl Strategy<Value = String> {
    (
        prop::sample::subsequence(vec!["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], 1..=7),
        0u16..24,
        prop::sample::select(vec![0u16, 15, 30, 45]),
        1u16..=24 * 60 - 1,
    )
        .prop_map(|(days, hour, minute, length)| {
            let start = hour * 60 + minute;
            let end = (start + length) % 1440;
            let end = if end == 0 { 1440 } else { end };
            format!(
                "{} {:02}:{:02}-{:02}:{:02}",
                days.join(","),
                start / 60,
                start % 60,
                end / 60,
                end % 60
            )
        })
}

proptest! {
    /// Whatever the windows and the moment: closed, the next opening is after now, open
    /// there and closed a minute before; open, it closes after now, and is still open a
    /// minute before it closes.
    #[test]
    fn the_next_opening_and_the_closing_are_where_the_windows_say(
        windows in prop::collection::vec(any_window(), 1..4),
        at in 1_700_000_000_000u64..1_900_000_000_000,
        summer in any::<bool>(),
    ) {
        let refs: Vec<&str> = windows.iter().map(String::as_str).collect();
        let c = calendar(&refs, if summer { "CET" } else { "UTC" });
        let window = c.at(at).window;
        prop_assert!(window.is_some());
        let window = window.unwrap_or_else(|| unreachable!());
        if window.open {
            let closes = window.closes_ms;
            prop_assert!(closes.is_some_and(|c| c > at), "{window:?}");
            let closes = closes.unwrap_or_default();
            prop_assert!(c.at(closes - 60_000).window.is_some_and(|w| w.open));
        } else {
            let next = window.next_ms;
            prop_assert!(next.is_some_and(|n| n > at), "{window:?}");
            let next = next.unwrap_or_default();
            prop_assert!(c.at(next).window.is_some_and(|w| w.open));
            prop_assert!(c.at(next - 1).window.is_some_and(|w| !w.open));
        }
    }
}

#[test]
fn a_freeze_request_is_checked_before_it_is_kept() {
    let c = calendar(&[], "UTC");
    let now = ms(&c, "2026-12-07T12:00");
    let ask = |from: Option<&str>, until: Option<&str>, duration_s: Option<u64>, reason: &str| {
        c.freeze_of(
            &FreezeRequest {
                from: from.map(str::to_owned),
                until: until.map(str::to_owned),
                duration_s,
                reason: reason.to_owned(),
            },
            "alice",
            now,
            Uuid::nil(),
        )
    };
    let year_end = ask(Some("2026-12-20"), Some("2027-01-03"), None, "year end");
    assert_eq!(
        year_end
            .as_ref()
            .map(|f| (f.from_ms, f.until_ms, f.who.as_str())),
        Ok((ms(&c, "2026-12-20"), ms(&c, "2027-01-03"), "alice"))
    );
    assert_eq!(
        ask(None, None, Some(3600), "incident").map(|f| (f.from_ms, f.until_ms)),
        Ok((now, now + 3_600_000))
    );
    type Refusal<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        Option<u64>,
        &'a str,
        &'a str,
    );
    let refusals: &[Refusal<'_>] = &[
        (None, None, None, "x", "exactly one of until and duration_s"),
        (None, Some("2027-01-03"), Some(60), "x", "exactly one"),
        (
            Some("2027-01-03"),
            Some("2026-12-20"),
            None,
            "x",
            "before it begins",
        ),
        (
            Some("2026-01-01"),
            Some("2026-02-01"),
            None,
            "x",
            "in the past",
        ),
        (None, Some("2028-06-01"), None, "x", "at most a year"),
        (None, Some("2026-12-20"), None, "", "needs a reason"),
        (None, Some("soon"), None, "x", "not a date"),
    ];
    for (from, until, duration, reason, says) in refusals {
        match ask(*from, *until, *duration, reason) {
            Ok(freeze) => panic!("{from:?} {until:?} {duration:?}: kept {freeze:?}"),
            Err(error) => assert!(error.0.contains(says), "{error}"),
        }
    }
    // As the API shows it.
    let mut frozen = c.clone();
    frozen.freezes.extend(year_end);
    let status = frozen.status(ms(&c, "2026-12-21"));
    assert_eq!(status.time_zone, "UTC");
    assert_eq!(status.freezes.len(), 1);
    assert!(
        status
            .freezes
            .iter()
            .all(|f| f.active && f.until == "Sun 2027-01-03 00:00 UTC")
    );
    assert!(frozen.status(ms(&c, "2027-01-11")).freezes.is_empty());
}

#[test]
fn the_configuration_s_calendar_parses_and_is_checked() {
    let config = crate::config::Config::parse(
        r#"
[calendar]
time_zone = "Europe/Berlin"
windows = ["Tue,Thu 02:00-05:00", "Sat 00:00-24:00"]
freezes = [{ from = "2026-12-20", until = "2027-01-03", reason = "year-end change freeze" }]

[calendar.rules]
evacuations = "freezes"
live_repairs = "windows"
"#,
    );
    let config = config.unwrap_or_else(|e| panic!("{e}"));
    assert!(config.validate().is_ok());
    assert_eq!(config.calendar.windows.len(), 2);
    assert_eq!(config.calendar.rules.evacuations, Obeys::Freezes);
    assert_eq!(config.calendar.rules.campaigns, Obeys::Windows);
    // The packaged file's defaults are the code's.
    assert_eq!(
        crate::config::Config::default().calendar,
        CalendarConfig::default()
    );
    for (text, says) in [
        (
            "[calendar]\nwindows = [\"Tue 02:00\"]\n",
            "calendar: window",
        ),
        (
            "[calendar.rules]\ncampaigns = \"sometimes\"\n",
            "unknown variant",
        ),
        ("[calendar]\nwindow = []\n", "unknown field"),
        (
            "[calendar]\nfreezes = [{ from = \"2027-01-03\", until = \"2026-12-20\", reason = \"x\" }]\n",
            "before it begins",
        ),
    ] {
        let error = crate::config::Config::parse(text)
            .and_then(|c| c.validate().map(|()| c))
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            error.as_ref().is_err_and(|e| e.contains(says)),
            "{text}: {error:?}"
        );
    }
}
