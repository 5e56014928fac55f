//! Every process a run starts dies with the run, including those that left its process group.
//!
//! - The run's first process is a child subreaper (`PR_SET_CHILD_SUBREAPER`, kept across
//!   `exec`): while it lives, every orphaned descendant (a `setsid` daemon included) becomes its
//!   child, so the run's whole tree is found through parent links and killed before the first
//!   process itself (the children of a killed process fall back to it and are found next).
//! - The process that runs executables (the agent) is made a child subreaper by
//!   [`init_reaper`]: what escapes after the run's first process exited becomes its child. After
//!   each run, such orphans (children of this process that no run owns and that are not in this
//!   process's own group and session) are killed with their descendants and reaped.
//! - With a ledger directory, each running run is recorded as a file `PID-STARTTIME`, removed when
//!   the run is over. [`init_reaper`] kills what the files of a previous instance name (the
//!   agent was killed mid-run), checking the start time so that a reused PID is never hit.
//!
//! Spawning and sweeping share one lock, so a child that has just been spawned is never taken
//! for an orphan. An orphan is not told apart by run: a sweep may kill the escaped process of
//! another run whose first process already exited, which is then only waiting for its output to
//! close. What escaped a run and was handed to the agent before the agent itself was killed goes
//! to PID 1 and is not in the ledger; under systemd, `KillMode=control-group` kills it with the
//! agent.
//!
//! This needs `/proc` of the process's own PID namespace; with another one, only process groups
//! are killed.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// How many times a kill pass rescans the process table before giving up.
const PASSES: usize = 200;
/// Pause between passes (killed processes take a moment to exit and be reparented).
const PAUSE: Duration = Duration::from_millis(2);

#[derive(Debug)]
struct State {
    subreaper: bool,
    ledger: Option<PathBuf>,
    /// First processes of the runs in progress, with their ledger entry.
    live: BTreeMap<i32, Option<PathBuf>>,
}

static STATE: Mutex<State> = Mutex::new(State {
    subreaper: false,
    ledger: None,
    live: BTreeMap::new(),
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One line of `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proc {
    pid: i32,
    zombie: bool,
    ppid: i32,
    pgrp: i32,
    session: i32,
    start: u64,
}

fn parse_stat(pid: i32, text: &str) -> Option<Proc> {
    // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    // stime cutime cstime priority nice threads itrealvalue starttime ...
    let after = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some(Proc {
        pid,
        zombie: matches!(*fields.first()?, "Z" | "X"),
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

fn read_proc(pid: i32) -> Option<Proc> {
    if !proc_is_ours() {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// Whether `/proc` shows this process under its own PID (not a `/proc` of another PID
/// namespace, where PIDs would name other processes). Checked once.
fn proc_is_ours() -> bool {
    static OURS: OnceLock<bool> = OnceLock::new();
    *OURS.get_or_init(|| {
        let ours = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|text| text.split_whitespace().next()?.parse::<u32>().ok())
            == Some(std::process::id());
        if !ours {
            tracing::warn!(
                "/proc belongs to another PID namespace: only process groups are killed after a run"
            );
        }
        ours
    })
}

/// Every process visible in `/proc` (none when `/proc` is not this PID namespace's).
fn process_table() -> Vec<Proc> {
    if !proc_is_ours() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_proc)
        .collect()
}

/// The descendants of `root` (not `root` itself) in `table`.
fn descendants(table: &[Proc], root: i32) -> Vec<Proc> {
    let mut children: BTreeMap<i32, Vec<Proc>> = BTreeMap::new();
    for process in table {
        children.entry(process.ppid).or_default().push(*process);
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    let mut seen = BTreeSet::from([root]);
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if seen.insert(child.pid) {
                found.push(*child);
                queue.push(child.pid);
            }
        }
    }
    found
}

fn sigkill(pid: i32) {
    if pid <= 1 {
        return;
    }
    match kill(Pid::from_raw(pid), Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(errno) => tracing::warn!(pid, %errno, "cannot kill a process of a run"),
    }
}

fn sigkill_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    match killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(errno) => tracing::warn!(pgid, %errno, "cannot kill the process group of a run"),
    }
}

/// Kills every live descendant of `root` until none is left (`root` itself is left alone, so
/// that, as a subreaper, it collects the children of those killed).
fn kill_descendants(root: i32) {
    for _ in 0..PASSES {
        let alive: Vec<Proc> = descendants(&process_table(), root)
            .into_iter()
            .filter(|process| !process.zombie)
            .collect();
        if alive.is_empty() {
            return;
        }
        for process in &alive {
            sigkill(process.pid);
        }
        std::thread::sleep(PAUSE);
    }
    tracing::warn!(
        pid = root,
        "processes of a run keep appearing; giving up on them"
    );
}

/// Kills every process of the run whose first process is `leader`: its descendants (while it
/// lives, it has collected the orphans of its tree), itself, its process group, and then the
/// orphans this process collected. `reaped` says that `leader` was already waited for: its PID
/// is then no longer its own and only the group (which keeps its id while a member lives) is
/// killed. Blocking: it rescans `/proc` until nothing is left.
pub(crate) fn kill_run_blocking(leader: i32, reaped: bool) {
    if leader <= 1 {
        return;
    }
    if !reaped {
        kill_descendants(leader);
        sigkill(leader);
    }
    sigkill_group(leader);
    sweep_orphans();
}

/// Kills the processes of a run at once, without waiting (a run being dropped).
pub(crate) fn kill_run_now(leader: i32) {
    if leader <= 1 {
        return;
    }
    let table = process_table();
    for process in descendants(&table, leader) {
        sigkill(process.pid);
    }
    sigkill_group(leader);
    sigkill(leader);
}

/// Kills and reaps the children of this process that no run owns and that left this process's
/// group or session: processes that escaped a run and were reparented here. Does nothing unless
/// this process is a subreaper.
pub(crate) fn sweep_orphans() {
    let me = std::process::id();
    let Ok(me) = i32::try_from(me) else {
        return;
    };
    if !state().subreaper {
        return;
    }
    let Some(own) = read_proc(me) else {
        return;
    };
    for _ in 0..PASSES {
        let table = process_table();
        let guard = state();
        if !guard.subreaper {
            return;
        }
        let orphans: Vec<Proc> = table
            .iter()
            .filter(|process| process.ppid == me && !guard.live.contains_key(&process.pid))
            .filter(|process| process.pgrp != own.pgrp || process.session != own.session)
            .copied()
            .collect();
        if orphans.is_empty() {
            return;
        }
        for orphan in &orphans {
            if orphan.zombie {
                // Ours to reap: no run owns it, so no other waiter exists.
                let _reaped = waitpid(Pid::from_raw(orphan.pid), Some(WaitPidFlag::WNOHANG));
            } else {
                for process in descendants(&table, orphan.pid) {
                    sigkill(process.pid);
                }
                sigkill(orphan.pid);
            }
        }
        drop(guard);
        std::thread::sleep(PAUSE);
    }
    tracing::warn!("escaped processes keep appearing; giving up on them");
}

/// Makes this process collect the orphans of the executables it runs, and, with `ledger`, kills
/// what a previous instance recorded there and left running (it was killed mid-run).
///
/// Call it once at the start of a daemon, before anything runs. Without it, runs still kill
/// their whole tree while their first process lives, but a process that escapes after it exited
/// is not found.
pub fn init_reaper(ledger: Option<&Path>) -> io::Result<()> {
    set_child_subreaper()?;
    let mut guard = state();
    guard.subreaper = true;
    if let Some(dir) = ledger {
        std::fs::create_dir_all(dir)?;
        for entry in std::fs::read_dir(dir)?.flatten() {
            let path = entry.path();
            if let Some((pid, start)) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.split_once('-'))
                .and_then(|(pid, start)| {
                    Some((pid.parse::<i32>().ok()?, start.parse::<u64>().ok()?))
                })
            {
                let leftover = read_proc(pid).is_some_and(|process| process.start == start);
                if leftover && !guard.live.contains_key(&pid) {
                    tracing::warn!(
                        pid,
                        "killing the processes of a run left by a previous instance"
                    );
                    kill_descendants(pid);
                    sigkill_group(pid);
                    sigkill(pid);
                }
            }
            if !guard.live.values().flatten().any(|live| *live == path) {
                let _removed = std::fs::remove_file(&path);
            }
        }
        guard.ledger = Some(dir.to_owned());
    }
    Ok(())
}

#[expect(
    unsafe_code,
    reason = "prctl(2) has no safe wrapper for PR_SET_CHILD_SUBREAPER"
)]
fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integers and touches no memory.
    let result = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1_u64, 0_u64, 0_u64, 0_u64) };
    if result == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Spawns `command` and records its process as a run's first process, under the lock the sweep
/// takes, so that the sweep never mistakes it for an orphan.
pub(crate) fn spawn(command: &mut tokio::process::Command) -> io::Result<tokio::process::Child> {
    let mut guard = state();
    let child = command.spawn()?;
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        let entry = guard.ledger.as_ref().and_then(|dir| {
            let start = read_proc(pid)?.start;
            let path = dir.join(format!("{pid}-{start}"));
            match std::fs::File::create(&path) {
                Ok(_file) => Some(path),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "cannot record a run");
                    None
                }
            }
        });
        guard.live.insert(pid, entry);
    }
    Ok(child)
}

/// Forgets a run's first process once it has been reaped.
pub(crate) fn forget(leader: i32) {
    let entry = state().live.remove(&leader).flatten();
    if let Some(path) = entry {
        let _removed = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_parsed() {
        let line = "4242 (a (weird) name) S 17 4242 4242 0 -1 4194560 105 0 0 0 0 0 0 0 20 0 1 0 987654 2736128 224";
        let parsed = parse_stat(4242, line).unwrap();
        assert_eq!(
            parsed,
            Proc {
                pid: 4242,
                zombie: false,
                ppid: 17,
                pgrp: 4242,
                session: 4242,
                start: 987_654,
            }
        );
        let zombie = "7 (sh) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert!(parse_stat(7, zombie).unwrap().zombie);
        assert_eq!(parse_stat(7, "7 (sh) S 1"), None);
        assert_eq!(parse_stat(7, "garbage"), None);
    }

    #[test]
    fn descendants_follow_parent_links() {
        let process = |pid, ppid| Proc {
            pid,
            zombie: false,
            ppid,
            pgrp: pid,
            session: pid,
            start: 0,
        };
        let table = [
            process(10, 1),
            process(11, 10),
            process(12, 11),
            process(13, 1),
            process(14, 12),
        ];
        let mut found: Vec<i32> = descendants(&table, 10).iter().map(|p| p.pid).collect();
        found.sort_unstable();
        assert_eq!(found, [11, 12, 14]);
        assert!(descendants(&table, 13).is_empty());
    }
}
