//! The one wall clock of nodecare: Unix milliseconds, the unit of every time at the wire (and
//! Unix seconds, the incidents' clock); and the one date text, for people (`utc_text`) and for
//! logs (`utc_iso_ms`), with the civil-date arithmetic behind them and behind the parsers of
//! dates.

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

/// Unix milliseconds as Unix seconds.
#[expect(
    clippy::cast_precision_loss,
    reason = "Unix milliseconds stay far below 2^52"
)]
pub fn ms_to_s(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// Unix seconds as Unix milliseconds (0 before 1970, saturating far in the future).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "clamped to the range of u64 milliseconds"
)]
pub fn s_to_ms(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1000.0).min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// Days since 1970-01-01 of a civil (proleptic Gregorian) date, month 1 to 12 (Howard Hinnant's
/// `days_from_civil`).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date `(year, month, day)` of a number of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Whole Unix seconds as `YYYY-MM-DD` and `HH:MM:SS` (UTC), joined by `between`.
fn date_and_time(secs: i64, between: char) -> String {
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rest = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}{between}{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
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
    format!("{} UTC", date_and_time(secs, ' '))
}

/// Unix milliseconds as people read them: [`utc_text`] of their seconds.
#[expect(
    clippy::cast_precision_loss,
    reason = "Unix milliseconds stay far below 2^52"
)]
pub fn utc_text_ms(unix_ms: u64) -> String {
    utc_text(unix_ms as f64 / 1000.0)
}

/// Unix milliseconds as RFC 3339 with milliseconds, `YYYY-MM-DDTHH:MM:SS.mmmZ`, as logs stamp
/// their lines.
pub fn utc_iso_ms(unix_ms: u64) -> String {
    // u64::MAX / 1000 is below i64::MAX.
    let secs = i64::try_from(unix_ms / 1000).unwrap_or(i64::MAX);
    format!("{}.{:03}Z", date_and_time(secs, 'T'), unix_ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::{civil_from_days, days_from_civil, utc_iso_ms, utc_text, utc_text_ms};

    #[test]
    fn utc_text_reads_as_people_write_dates() {
        assert_eq!(utc_text(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_text(951_782_400.5), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_text(1_709_164_800.0), "2024-02-29 00:00:00 UTC");
        assert_eq!(utc_text(4_107_542_399.0), "2100-02-28 23:59:59 UTC");
        assert_eq!(utc_text(4_107_542_400.0), "2100-03-01 00:00:00 UTC");
        assert_eq!(utc_text(1_795_000_000.5), "2026-11-18 11:06:40 UTC");
        assert_eq!(utc_text(1_795_431_150.7), "2026-11-23 10:52:30 UTC");
        assert_eq!(utc_text(1_796_592_000.0), "2026-12-06 21:20:00 UTC");
        assert_eq!(utc_text(-1.0), "?");
        assert_eq!(utc_text(f64::NAN), "?");
        assert_eq!(utc_text(f64::INFINITY), "?");
    }

    #[test]
    fn milliseconds_read_as_their_seconds() {
        assert_eq!(utc_text_ms(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_text_ms(999), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_text_ms(1_709_164_800_000), "2024-02-29 00:00:00 UTC");
        assert_eq!(utc_text_ms(4_107_542_400_000), "2100-03-01 00:00:00 UTC");
        assert_eq!(utc_text_ms(1_795_431_150_512), "2026-11-23 10:52:30 UTC");
        assert_eq!(utc_text_ms(1_795_431_150_999), "2026-11-23 10:52:30 UTC");
        for ms in [0, 1, 999, 1000, 951_782_400_001, 1_795_431_150_999] {
            #[allow(clippy::cast_precision_loss)]
            let seconds = ms as f64 / 1000.0;
            assert_eq!(utc_text_ms(ms), utc_text(seconds), "{ms}");
        }
    }

    #[test]
    fn iso_text_keeps_the_milliseconds() {
        assert_eq!(utc_iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_iso_ms(1_709_164_800_007), "2024-02-29T00:00:00.007Z");
        assert_eq!(utc_iso_ms(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(utc_iso_ms(1_795_749_432_512), "2026-11-27T03:17:12.512Z");
    }

    #[test]
    fn days_and_dates_convert_both_ways() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2024, 2, 29), 1_709_164_800 / 86_400);
        assert_eq!(civil_from_days(1_709_164_800 / 86_400), (2024, 2, 29));
        assert_eq!(days_from_civil(2100, 3, 1), 4_107_542_400 / 86_400);
        assert_eq!(civil_from_days(4_107_542_400 / 86_400 - 1), (2100, 2, 28));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        // A day that does not exist comes back as another date.
        assert_eq!(civil_from_days(days_from_civil(2100, 2, 29)), (2100, 3, 1));
        for days in -800_000..800_000 {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), days);
        }
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
