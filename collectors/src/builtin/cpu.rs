//! `cpu-avg-load`: CPU load over a true moving window, from `/proc/stat`.
//!
//! mond 3.x averages since the daemon started (its buffer keeps the oldest samples and its
//! window compares seconds with microseconds) and counts guest time twice (the kernel already
//! includes it in user and nice). Here the window really moves, samples are timed with a
//! monotonic clock, and guest time is counted once. Data keeps mond's shape:
//! `{"cpu_number": N, "cpus": [load of cpu0, …], "cpu_total": load of all CPUs}`, where one
//! fully busy CPU is 1.0.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nodecare_protocol::ReportKind;
use serde_json::{Value, json};

use super::{BuiltinConfig, ParseError, parse_u64, read_text};
use crate::{CollectError, CollectFuture, Collector, CollectorSpec};

/// One `cpu…` line of `/proc/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuLine {
    /// `cpu` (the aggregate) or `cpuN`.
    pub name: String,
    /// Time spent working, in clock ticks: user + nice + system + iowait + irq + softirq + steal.
    /// Guest and guest_nice are not added: the kernel already counts them in user and nice.
    pub work: u64,
}

/// Parses the `cpu` lines of `/proc/stat` (the aggregate first, then one per CPU).
///
/// Kernels print 4 to 10 counters per line depending on age; missing ones count as zero.
pub fn parse_proc_stat(text: &str) -> Result<Vec<CpuLine>, ParseError> {
    const FIELDS: [&str; 10] = [
        "user",
        "nice",
        "system",
        "idle",
        "iowait",
        "irq",
        "softirq",
        "steal",
        "guest",
        "guest_nice",
    ];
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let mut words = line.split_ascii_whitespace();
        let Some(name) = words.next() else { continue };
        if !name.starts_with("cpu") {
            continue;
        }
        let suffix = &name[3..];
        if !suffix.is_empty() && !suffix.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(ParseError::new(
                number,
                "name",
                format!("{name:?} is not a cpu line"),
            ));
        }
        let mut counters = [0u64; 10];
        let mut count = 0;
        for word in words {
            let Some(field) = FIELDS.get(count) else {
                // Newer kernels may add columns; they are not part of the load.
                break;
            };
            counters[count] = parse_u64(number, field, word)?;
            count += 1;
        }
        if count < 4 {
            return Err(ParseError::new(
                number,
                FIELDS.get(count).copied().unwrap_or("idle"),
                format!("{name} has {count} counters, at least 4 expected"),
            ));
        }
        let work = [0usize, 1, 2, 4, 5, 6, 7]
            .iter()
            .fold(0u64, |sum, &field| sum.saturating_add(counters[field]));
        lines.push(CpuLine {
            name: name.to_owned(),
            work,
        });
    }
    match lines.first() {
        None => Err(ParseError::new(0, "cpu", "no cpu lines")),
        Some(first) if first.name != "cpu" => Err(ParseError::new(
            1,
            "name",
            "the aggregate \"cpu\" line must come first",
        )),
        Some(_) => Ok(lines),
    }
}

/// The loads computed over a window.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuLoad {
    /// Per-CPU load, 1.0 = one CPU fully busy.
    pub cpus: Vec<f64>,
    /// Load of all CPUs together (0..N).
    pub total: f64,
}

impl CpuLoad {
    /// mond's data shape.
    pub fn to_json(&self) -> Value {
        json!({"cpu_number": self.cpus.len(), "cpus": self.cpus, "cpu_total": self.total})
    }
}

/// A moving window of `/proc/stat` samples.
#[derive(Debug, Clone)]
pub struct CpuWindow {
    window: Duration,
    capacity: usize,
    /// (time, work per line), oldest first.
    samples: VecDeque<(Instant, Vec<u64>)>,
}

impl CpuWindow {
    /// A window of `window` length holding at most `capacity` samples.
    pub fn new(window: Duration, capacity: usize) -> Self {
        Self {
            window,
            capacity: capacity.max(2),
            samples: VecDeque::new(),
        }
    }

    /// Adds a sample taken at `at`. A sample with another CPU count (hotplug) or a counter
    /// that went backwards restarts the window, since differences across it mean nothing.
    pub fn push(&mut self, at: Instant, work: Vec<u64>) {
        if let Some((last_at, last)) = self.samples.back() {
            let incompatible = last.len() != work.len()
                || at < *last_at
                || last.iter().zip(&work).any(|(old, new)| new < old);
            if incompatible {
                self.samples.clear();
            }
        }
        self.samples.push_back((at, work));
        while let Some((oldest, _)) = self.samples.front() {
            let too_old = at.saturating_duration_since(*oldest) > self.window;
            if (too_old && self.samples.len() > 2) || self.samples.len() > self.capacity {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    /// Time between the oldest and newest sample.
    pub fn span(&self) -> Duration {
        match (self.samples.front(), self.samples.back()) {
            (Some((oldest, _)), Some((newest, _))) => newest.saturating_duration_since(*oldest),
            _ => Duration::ZERO,
        }
    }

    /// The loads between the oldest and newest sample, with `ticks_per_second` clock ticks.
    pub fn load(&self, ticks_per_second: u64) -> Option<CpuLoad> {
        let (oldest_at, oldest) = self.samples.front()?;
        let (newest_at, newest) = self.samples.back()?;
        let span = newest_at
            .saturating_duration_since(*oldest_at)
            .as_secs_f64();
        if span <= 0.0 || ticks_per_second == 0 {
            return None;
        }
        let ticks = span * ticks_per_second as f64;
        let mut loads = oldest
            .iter()
            .zip(newest)
            .map(|(old, new)| new.saturating_sub(*old) as f64 / ticks);
        let total = loads.next()?;
        Some(CpuLoad {
            cpus: loads.collect(),
            total,
        })
    }
}

/// Clock ticks per second of `/proc/stat` counters.
pub fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|ticks| u64::try_from(ticks).ok())
        .filter(|ticks| *ticks > 0)
        .unwrap_or(100)
}

/// The `cpu-avg-load` collector.
#[derive(Debug)]
pub struct CpuAvgLoad {
    spec: CollectorSpec,
    stat_path: PathBuf,
    ticks_per_second: u64,
    window: Mutex<CpuWindow>,
}

/// The shortest span a first report is computed over.
const MIN_SPAN: Duration = Duration::from_millis(250);

impl CpuAvgLoad {
    /// The collector reading `<proc_root>/stat`.
    pub fn new(config: &BuiltinConfig) -> Self {
        let min_interval = Duration::from_secs(1);
        let capacity = (config.cpu_window.as_secs() / min_interval.as_secs()).clamp(2, 1024);
        Self {
            spec: config.spec("cpu-avg-load", None, ReportKind::Performance),
            stat_path: config.proc_root.join("stat"),
            ticks_per_second: clock_ticks_per_second(),
            window: Mutex::new(CpuWindow::new(config.cpu_window, capacity as usize)),
        }
    }

    async fn sample(&self) -> Result<(), CollectError> {
        let text = read_text(&self.stat_path).await?;
        let lines =
            parse_proc_stat(&text).map_err(|error| error.into_collect_error(&self.stat_path))?;
        let work = lines.into_iter().map(|line| line.work).collect();
        let mut window = self.window.lock().map_err(|_| CollectError::Source {
            source_name: "cpu window".to_owned(),
            reason: "state lock poisoned".to_owned(),
        })?;
        window.push(Instant::now(), work);
        Ok(())
    }

    fn current(&self) -> Result<(Duration, Option<CpuLoad>), CollectError> {
        let window = self.window.lock().map_err(|_| CollectError::Source {
            source_name: "cpu window".to_owned(),
            reason: "state lock poisoned".to_owned(),
        })?;
        Ok((window.span(), window.load(self.ticks_per_second)))
    }
}

impl Collector for CpuAvgLoad {
    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            self.sample().await?;
            let (span, _) = self.current()?;
            if span < MIN_SPAN {
                // The first report: take a second sample shortly after instead of answering
                // with mond's "not sufficient" error.
                tokio::time::sleep(MIN_SPAN - span).await;
                self.sample().await?;
            }
            match self.current()? {
                (_, Some(load)) => Ok(load.to_json()),
                (span, None) => Err(CollectError::Source {
                    source_name: self.stat_path.display().to_string(),
                    reason: format!("samples cover only {span:?}"),
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 10 50 1000 5 1 2 3 40 4\n\
cpu0 60 5 30 500 2 1 1 2 20 2\n\
cpu1 40 5 20 500 3 0 1 1 20 2\n\
intr 12345 0 0\n\
ctxt 999\n";

    #[test]
    fn work_excludes_idle_and_guest() {
        let lines = parse_proc_stat(STAT).unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].name, "cpu");
        // user+nice+system+iowait+irq+softirq+steal; idle and guest time excluded.
        assert_eq!(lines[0].work, 100 + 10 + 50 + 5 + 1 + 2 + 3);
        assert_eq!(lines[2].work, 40 + 5 + 20 + 3 + 1 + 1);
    }

    #[test]
    fn old_kernels_with_four_counters_parse() {
        let lines = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(lines[1].work, 6);
    }

    #[test]
    fn errors_name_line_and_field() {
        let error = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 x 3 4\n").unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (2, "nice"));
        let error = parse_proc_stat("cpu 1 2\n").unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (1, "system"));
        assert_eq!(parse_proc_stat("intr 1\n").unwrap_err().field, "cpu");
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4\n").unwrap_err().line, 1);
        assert_eq!(
            parse_proc_stat("cpufoo 1 2 3 4\n").unwrap_err().field,
            "name"
        );
    }

    #[test]
    fn window_moves_and_drops_old_samples() {
        let start = Instant::now();
        let mut window = CpuWindow::new(Duration::from_secs(600), 1000);
        // A busy first hour, then an idle stretch: a true window forgets the busy hour.
        window.push(start, vec![0, 0]);
        window.push(start + Duration::from_secs(3600), vec![360_000, 360_000]);
        for step in 1..=130u64 {
            window.push(
                start + Duration::from_secs(3600 + step * 5),
                vec![360_000, 360_000],
            );
        }
        assert!(window.span() <= Duration::from_secs(600));
        let load = window.load(100).unwrap();
        assert_eq!(load.total, 0.0);
        assert_eq!(load.cpus, vec![0.0]);
    }

    #[test]
    fn load_is_fraction_of_a_cpu() {
        let start = Instant::now();
        let mut window = CpuWindow::new(Duration::from_secs(600), 10);
        window.push(start, vec![0, 0, 0]);
        window.push(start + Duration::from_secs(10), vec![1500, 1000, 500]);
        let load = window.load(100).unwrap();
        assert!((load.total - 1.5).abs() < 1e-9);
        assert_eq!(load.cpus.len(), 2);
        assert!((load.cpus[0] - 1.0).abs() < 1e-9);
        assert!((load.cpus[1] - 0.5).abs() < 1e-9);
        assert_eq!(
            load.to_json(),
            json!({"cpu_number": 2, "cpus": [1.0, 0.5], "cpu_total": 1.5})
        );
    }

    #[test]
    fn hotplug_or_reset_restarts_the_window() {
        let start = Instant::now();
        let mut window = CpuWindow::new(Duration::from_secs(600), 10);
        window.push(start, vec![0, 0]);
        window.push(start + Duration::from_secs(5), vec![10, 10, 0]);
        assert_eq!(window.span(), Duration::ZERO);
        assert!(window.load(100).is_none());
        window.push(start + Duration::from_secs(10), vec![5, 5, 0]);
        assert_eq!(window.span(), Duration::ZERO);
    }

    #[test]
    fn capacity_is_bounded() {
        let start = Instant::now();
        let mut window = CpuWindow::new(Duration::from_secs(600), 4);
        for step in 0..100u64 {
            window.push(start + Duration::from_secs(step), vec![step]);
        }
        assert_eq!(window.span(), Duration::from_secs(3));
    }
}
