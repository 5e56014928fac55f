//! `diskstats`: per-device I/O counters from `/proc/diskstats`.
//!
//! mond accepts exactly 14 columns and fails (HTTP 500) on every kernel since 4.18, which
//! prints 18 (discard counters) or, since 5.5, 20 (flush counters). This parser takes the 14
//! classic columns of any line that has at least that many and ignores the rest.

use std::path::PathBuf;

use nodecare_protocol::ReportKind;
use serde::Serialize;
use serde_json::Value;

use super::{BuiltinConfig, ParseError, parse_u64, read_text};
use crate::{CollectError, CollectFuture, Collector, CollectorSpec};

/// One device's counters, serialised with mond's field names and order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiskStat {
    /// Major device number.
    pub major: u64,
    /// Minor device number.
    pub minor: u64,
    /// Device name.
    pub name: String,
    /// Reads completed.
    #[serde(rename = "readsNum")]
    pub reads: u64,
    /// Reads merged.
    #[serde(rename = "mergedReads")]
    pub merged_reads: u64,
    /// Sectors read.
    #[serde(rename = "secRead")]
    pub sectors_read: u64,
    /// Milliseconds spent reading.
    #[serde(rename = "timeRead")]
    pub time_read: u64,
    /// Writes completed.
    pub writes: u64,
    /// Writes merged.
    #[serde(rename = "mergedWrites")]
    pub merged_writes: u64,
    /// Sectors written.
    #[serde(rename = "secWritten")]
    pub sectors_written: u64,
    /// Milliseconds spent writing.
    #[serde(rename = "timeWrite")]
    pub time_write: u64,
    /// I/Os currently in progress.
    pub ios: u64,
    /// Milliseconds spent doing I/O.
    #[serde(rename = "timeIO")]
    pub time_io: u64,
    /// Weighted milliseconds spent doing I/O.
    #[serde(rename = "wIOmillis")]
    pub weighted_io_millis: u64,
}

const COUNTERS: [&str; 11] = [
    "readsNum",
    "mergedReads",
    "secRead",
    "timeRead",
    "writes",
    "mergedWrites",
    "secWritten",
    "timeWrite",
    "ios",
    "timeIO",
    "wIOmillis",
];

/// Parses `/proc/diskstats` of any Linux version (14, 18 or 20 columns; extra columns ignored).
pub fn parse_diskstats(text: &str) -> Result<Vec<DiskStat>, ParseError> {
    let mut stats = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        if words.len() < 14 {
            let field = match words.len() {
                1 => "minor",
                2 => "name",
                n => COUNTERS[n - 3],
            };
            return Err(ParseError::new(
                number,
                field,
                format!("{} columns, at least 14 expected", words.len()),
            ));
        }
        let mut counters = [0u64; 11];
        for (slot, (field, word)) in counters.iter_mut().zip(COUNTERS.iter().zip(&words[3..14])) {
            *slot = parse_u64(number, field, word)?;
        }
        let [
            reads,
            merged_reads,
            sectors_read,
            time_read,
            writes,
            merged_writes,
            sectors_written,
            time_write,
            ios,
            time_io,
            weighted_io_millis,
        ] = counters;
        stats.push(DiskStat {
            major: parse_u64(number, "major", words[0])?,
            minor: parse_u64(number, "minor", words[1])?,
            name: words[2].to_owned(),
            reads,
            merged_reads,
            sectors_read,
            time_read,
            writes,
            merged_writes,
            sectors_written,
            time_write,
            ios,
            time_io,
            weighted_io_millis,
        });
    }
    Ok(stats)
}

/// The `diskstats` collector.
#[derive(Debug)]
pub struct Diskstats {
    spec: CollectorSpec,
    path: PathBuf,
}

impl Diskstats {
    /// The collector reading `<proc_root>/diskstats`.
    pub fn new(config: &BuiltinConfig) -> Self {
        Self {
            spec: config.spec("diskstats", Some("storage"), ReportKind::Performance),
            path: config.proc_root.join("diskstats"),
        }
    }
}

impl Collector for Diskstats {
    fn pace(&self) -> crate::Pace {
        crate::Pace::OnDemand
    }

    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            let text = read_text(&self.path).await?;
            let stats =
                parse_diskstats(&text).map_err(|error| error.into_collect_error(&self.path))?;
            serde_json::to_value(stats).map_err(|error| CollectError::Parse {
                source_name: self.path.display().to_string(),
                reason: error.to_string(),
            })
        })
    }
}

/// Serialises parsed stats to mond's data (an array of objects).
pub fn to_json(stats: &[DiskStat]) -> Value {
    serde_json::to_value(stats).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_kernel_generations_parse() {
        let old = "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n";
        let k418 = "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n";
        let k55 = "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n";
        for text in [old, k418, k55] {
            let stats = parse_diskstats(text).unwrap();
            assert_eq!(stats.len(), 1);
            assert_eq!(stats[0].name, "sda");
            assert_eq!(stats[0].reads, 1);
            assert_eq!(stats[0].weighted_io_millis, 11);
        }
    }

    #[test]
    fn errors_name_line_and_field() {
        let error =
            parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n8 1 sda1 1 2 x\n").unwrap_err();
        assert_eq!(error.line, 2);
        let error = parse_diskstats("8 0 sda 1 2 3 4 5 x 7 8 9 10 11\n").unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (1, "mergedWrites"));
        let error = parse_diskstats("x 0 sda 1 2 3 4 5 6 7 8 9 10 11\n").unwrap_err();
        assert_eq!(error.field, "major");
    }

    #[test]
    fn shape_matches_mond() {
        let stats = parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n").unwrap();
        assert_eq!(
            serde_json::to_string(&stats).unwrap(),
            r#"[{"major":8,"minor":0,"name":"sda","readsNum":1,"mergedReads":2,"secRead":3,"timeRead":4,"writes":5,"mergedWrites":6,"secWritten":7,"timeWrite":8,"ios":9,"timeIO":10,"wIOmillis":11}]"#
        );
    }
}
