//! The one wall clock of nodecare: Unix milliseconds, the unit of every time at the wire (and
//! Unix seconds, the incidents' clock).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The time since the Unix epoch now (zero if the clock is before 1970).
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// The current Unix time in milliseconds (0 if the clock is before 1970, saturating far in the
/// future).
pub fn now_ms() -> u64 {
    u64::try_from(since_epoch().as_millis()).unwrap_or(u64::MAX)
}

/// The current Unix time in seconds, with its fraction (0 if the clock is before 1970): the
/// clock of incidents and their history.
pub fn now_s() -> f64 {
    since_epoch().as_secs_f64()
}

/// Unix seconds as people read them, `YYYY-MM-DD HH:MM:SS UTC` (`?` for a time before 1970 or
/// not a number): the one date format of the CLI, the page, `explain` and the waiting lines.
pub fn utc_text(unix_seconds: f64) -> String {
    if !unix_seconds.is_finite() || unix_seconds < 0.0 {
        return "?".to_owned();
    }
    // Whole seconds; the float is well within i64 for any real date.
    #[allow(clippy::cast_possible_truncation)]
    let secs = unix_seconds.floor() as i64;
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's civil_from_days).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_text_reads_as_people_write_dates() {
        assert_eq!(super::utc_text(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc_text(951_782_400.5), "2000-02-29 00:00:00 UTC");
        assert_eq!(super::utc_text(1_796_592_000.0), "2026-12-06 21:20:00 UTC");
        assert_eq!(super::utc_text(-1.0), "?");
        assert_eq!(super::utc_text(f64::NAN), "?");
    }

    #[test]
    fn is_after_2020_and_monotone_enough() {
        let first = super::now_ms();
        assert!(first > 1_577_836_800_000, "{first}");
        assert!(super::now_ms() >= first);
        let seconds = super::now_s();
        assert!(seconds > 1_577_836_800.0, "{seconds}");
    }
}
