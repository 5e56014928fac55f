//! A flood of invalid repair requests (bad signatures, unknown commands, oversized bodies,
//! replays) on loopback runs nothing, does not hold up valid requests, and keeps memory flat.
//!
//! `flood_is_harmless` is the small version run with the test suite. `flood_benchmark` (ignored;
//! run by `bench/repair/run.sh`) is the same flood at a bounded larger scale, with a report.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod repair_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodecare_protocol::repair::sign_repair_request;
use nodecare_protocol::sign::{HmacKey, Signer};
use repair_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, Clone)]
struct FloodSettings {
    duration: Duration,
    patient: usize,
    impatient: usize,
    max_requests: u64,
    probe_interval: Duration,
    delay: Duration,
}

#[derive(Debug, Default)]
struct FloodReport {
    sent: [u64; 4],
    statuses: BTreeMap<u16, u64>,
    dropped: u64,
    baseline: Vec<Duration>,
    under_flood: Vec<Duration>,
    rss_kib: Vec<(Duration, u64)>,
    probes_accepted: usize,
    runs: usize,
    elapsed: Duration,
}

const KINDS: [&str; 4] = [
    "bad signature",
    "unknown command",
    "oversized body",
    "replay",
];

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(samples: &[Duration], fraction: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn raw_post(body: &[u8], declared: usize) -> Vec<u8> {
    let mut bytes = format!(
        "POST /1/repair HTTP/1.1\r\nHost: flood\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The request bytes of the `n`th invalid request.
fn invalid_request(n: u64, foreign: &[u8], replay: &[u8]) -> (usize, Vec<u8>) {
    let kind = (n % 4) as usize;
    let bytes = match kind {
        0 => raw_post(foreign, foreign.len()),
        1 => {
            let signer = Signer::new(HmacKey::new(KEY.to_vec()), NODE);
            let request = request(&incident(1_000_000 + n as u32), "no-such-command");
            let envelope = sign_repair_request(&signer, request, n, now_ms(), 60_000).unwrap();
            let body = serde_json::to_vec(&envelope).unwrap();
            raw_post(&body, body.len())
        }
        // Declares 300 KiB and sends the first 16 KiB of it.
        2 => raw_post(&vec![b' '; 16 * 1024], 300 * 1024),
        _ => raw_post(replay, replay.len()),
    };
    (kind, bytes)
}

async fn exchange(addr: SocketAddr, bytes: &[u8], read: bool) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let _ignored = stream.write_all(bytes).await;
    if !read {
        tokio::time::sleep(Duration::from_millis(5)).await;
        return None;
    }
    let mut reply = Vec::new();
    let _ignored =
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut reply)).await;
    let text = String::from_utf8_lossy(&reply);
    text.split(' ').nth(1).and_then(|code| code.parse().ok())
}

async fn probe(addr: SocketAddr, n: u32) -> (Duration, u16) {
    let envelope = sign(request(&incident(n), "noop"));
    let reply = post(addr, &envelope).await;
    (reply.elapsed, reply.status)
}

async fn flood(settings: FloodSettings) -> FloodReport {
    let fixture = Fixture::new();
    fixture.counting_command("noop", 0);
    let mut config = fixture.config();
    config.invalid_request_delay = settings.delay;
    config.lock_timeout = Duration::from_secs(8);
    // The server gets its own runtime, as it would in its own process.
    let (addr_sender, addr_receiver) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server_thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let server = Server::start(config).await;
            addr_sender.send(server.addr).unwrap();
            let _ignored = stopped.await;
            server.stop().await;
        });
    });
    let addr = addr_receiver.recv().unwrap();
    let mut report = FloodReport::default();

    // Baseline: valid requests with no flood.
    let mut probe_number = 1_u32;
    for _ in 0..10 {
        let (elapsed, status) = probe(addr, probe_number).await;
        probe_number += 1;
        assert_eq!(status, 202);
        report.probes_accepted += 1;
        report.baseline.push(elapsed);
    }
    // The envelope replayed by the flood: accepted once, here.
    let replayed = sign(request(&incident(probe_number), "noop"));
    probe_number += 1;
    assert_eq!(post(addr, &replayed).await.status, 202);
    report.probes_accepted += 1;
    let replayed = Arc::new(serde_json::to_vec(&replayed).unwrap());
    let stranger = Signer::new(HmacKey::new(b"not the cluster key".to_vec()), NODE);
    let foreign = sign_repair_request(
        &stranger,
        request(&incident(9), "noop"),
        1,
        now_ms(),
        60_000,
    )
    .unwrap();
    let foreign = Arc::new(serde_json::to_vec(&foreign).unwrap());

    let started = Instant::now();
    let counter = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut attackers = tokio::task::JoinSet::new();
    for index in 0..settings.patient + settings.impatient {
        let patient = index < settings.patient;
        let (counter, done, foreign, replayed) = (
            Arc::clone(&counter),
            Arc::clone(&done),
            Arc::clone(&foreign),
            Arc::clone(&replayed),
        );
        let settings = settings.clone();
        attackers.spawn(async move {
            let mut sent = [0_u64; 4];
            let mut statuses = BTreeMap::<u16, u64>::new();
            let mut dropped = 0;
            while !done.load(Ordering::Relaxed) && started.elapsed() < settings.duration {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                if n >= settings.max_requests {
                    break;
                }
                let (kind, bytes) = invalid_request(n, &foreign, &replayed);
                sent[kind] += 1;
                match exchange(addr, &bytes, patient).await {
                    Some(status) => *statuses.entry(status).or_default() += 1,
                    None => dropped += 1,
                }
            }
            (sent, statuses, dropped)
        });
    }
    // Memory sampler.
    let sampler_done = Arc::clone(&done);
    let sampler = tokio::spawn(async move {
        let mut samples = Vec::new();
        while !sampler_done.load(Ordering::Relaxed) {
            samples.push((started.elapsed(), rss_kib()));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        samples
    });
    // Valid requests while the flood runs.
    while started.elapsed() < settings.duration
        && counter.load(Ordering::Relaxed) < settings.max_requests
    {
        tokio::time::sleep(settings.probe_interval).await;
        let (elapsed, status) = probe(addr, probe_number).await;
        probe_number += 1;
        assert_eq!(status, 202, "a valid request was refused during the flood");
        report.probes_accepted += 1;
        report.under_flood.push(elapsed);
    }
    done.store(true, Ordering::Relaxed);
    while let Some(result) = attackers.join_next().await {
        let (sent, statuses, dropped) = result.unwrap();
        for (total, count) in report.sent.iter_mut().zip(sent) {
            *total += count;
        }
        for (status, count) in statuses {
            *report.statuses.entry(status).or_default() += count;
        }
        report.dropped += dropped;
    }
    report.elapsed = started.elapsed();
    report.rss_kib = sampler.await.unwrap();
    let _ignored = stop.send(());
    server_thread.join().unwrap();
    report.runs = fixture.runs_of("noop");
    report
}

fn print_report(settings: &FloodSettings, report: &FloodReport) {
    let total: u64 = report.sent.iter().sum();
    println!("## flood report");
    println!(
        "settings: {} s, {} patient + {} impatient connections, at most {} requests, \
         invalid-request delay {} ms, one valid request every {} ms",
        settings.duration.as_secs(),
        settings.patient,
        settings.impatient,
        settings.max_requests,
        settings.delay.as_millis(),
        settings.probe_interval.as_millis()
    );
    println!(
        "invalid requests sent: {total} in {:.1} s ({:.0}/s)",
        report.elapsed.as_secs_f64(),
        total as f64 / report.elapsed.as_secs_f64()
    );
    for (kind, count) in KINDS.iter().zip(report.sent) {
        println!("  {kind}: {count}");
    }
    println!(
        "answers to patient senders by status: {:?}",
        report.statuses
    );
    println!(
        "impatient sends (closed without reading): {}",
        report.dropped
    );
    let line = |name: &str, samples: &[Duration]| {
        println!(
            "valid request latency {name}: n={} p50={:.2} ms p90={:.2} ms p99={:.2} ms max={:.2} ms",
            samples.len(),
            percentile(samples, 0.5).as_secs_f64() * 1e3,
            percentile(samples, 0.9).as_secs_f64() * 1e3,
            percentile(samples, 0.99).as_secs_f64() * 1e3,
            percentile(samples, 1.0).as_secs_f64() * 1e3,
        )
    };
    line("without flood", &report.baseline);
    line("under flood  ", &report.under_flood);
    let quarter = report
        .rss_kib
        .iter()
        .find(|(at, _)| *at >= report.elapsed / 4)
        .map_or(0, |(_, kib)| *kib);
    let peak = report
        .rss_kib
        .iter()
        .map(|(_, kib)| *kib)
        .max()
        .unwrap_or(0);
    let last = report.rss_kib.last().map_or(0, |(_, kib)| *kib);
    println!(
        "process RSS (server and flood client): first sample {} KiB, at 1/4 {} KiB, peak {} KiB, \
         last {} KiB",
        report.rss_kib.first().map_or(0, |(_, kib)| *kib),
        quarter,
        peak,
        last
    );
    println!(
        "commands run: {} (valid requests accepted: {})",
        report.runs, report.probes_accepted
    );
}

fn check(report: &FloodReport, settings: &FloodSettings) {
    // Nothing but the valid requests ran.
    assert_eq!(report.runs, report.probes_accepted);
    // Every answer to the flood was a refusal.
    assert!(
        report
            .statuses
            .keys()
            .all(|status| (400..500).contains(status) || *status == 413)
    );
    // No valid request waited anywhere near the deliberate delay.
    let worst = percentile(&report.under_flood, 1.0);
    assert!(
        worst < settings.delay,
        "a valid request took {worst:?} under the flood"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_is_harmless() {
    let settings = FloodSettings {
        duration: Duration::from_secs(2),
        patient: 16,
        impatient: 4,
        max_requests: 5_000,
        probe_interval: Duration::from_millis(100),
        delay: Duration::from_millis(500),
    };
    let report = flood(settings.clone()).await;
    print_report(&settings, &report);
    check(&report, &settings);
    assert!(report.sent.iter().all(|count| *count > 0));
    assert!(!report.under_flood.is_empty());
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by bench/repair/run.sh"]
async fn flood_benchmark() {
    let settings = FloodSettings {
        duration: Duration::from_secs(env_or("FLOOD_SECONDS", 30)),
        patient: env_or("FLOOD_PATIENT", 200) as usize,
        impatient: env_or("FLOOD_IMPATIENT", 16) as usize,
        max_requests: env_or("FLOOD_MAX_REQUESTS", 500_000),
        probe_interval: Duration::from_millis(env_or("FLOOD_PROBE_MS", 200)),
        delay: Duration::from_millis(env_or("FLOOD_DELAY_MS", 1500)),
    };
    let report = flood(settings.clone()).await;
    print_report(&settings, &report);
    check(&report, &settings);
}
