//! `nodecare roll` behaviour beyond hroller: real redundancy, stopped
//! instances, failure domains, JSON, and error messages.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare binary"
)]

use std::io::Write as _;
use std::process::{Command, Output};

fn data(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn roll(args: &[&str], file: &tempfile::NamedTempFile) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodecare"))
        .arg("roll")
        .args(args)
        .arg("-t")
        .arg(file.path())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const GROUPS: &str = "g|u|preferred||\n\n";

#[test]
fn shared_storage_is_redundant() {
    // An rbd instance on n1 does not make n1 non-redundant (ganeti#1006).
    let f = data(&format!(
        "{GROUPS}n1|8192|0|8000|10000|10000|4|M|u\nn2|8192|0|8000|10000|10000|4|N|u\n\n\
         i1|512|0|1|running|Y|n1||rbd||1\n\n\n"
    ));
    let compat = roll(
        &["--hroller-compat", "--no-headers", "--skip-non-redundant"],
        &f,
    );
    assert_eq!(stdout(&compat), "n2\n");
    // It is live-migrated away before n1 reboots.
    let ours = roll(&["--no-headers", "--print-moves"], &f);
    assert!(ours.status.success(), "{}", stderr(&ours));
    assert_eq!(stdout(&ours), "n2\nn1\n  i1 n2\n");
    // With --skip-non-redundant, n1 could only reboot in a group of its own,
    // beyond hroller's one group: it is skipped, and named.
    let ours = roll(
        &["--no-headers", "--skip-non-redundant", "--print-moves"],
        &f,
    );
    assert!(ours.status.success(), "{}", stderr(&ours));
    assert_eq!(stdout(&ours), "n2\n");
    assert_eq!(
        stderr(&ours),
        "Warning: node n1 is skipped: it would need a reboot group beyond hroller's plan \
         (run without --skip-non-redundant to include it)\n"
    );
}

#[test]
fn stopped_instances_stay_put() {
    // n2 cannot take the plain instance, but it is stopped: no move needed.
    let f = data(&format!(
        "{GROUPS}n1|8192|0|8000|10000|10000|4|M|u\nn2|8192|0|100|10000|100|4|N|u\n\n\
         i1|512|5000|1|ADMIN_down|Y|n1||plain||1\n\n\n"
    ));
    let compat = roll(&["--hroller-compat", "--no-headers", "-q"], &f);
    assert_eq!(compat.status.code(), Some(1));
    assert_eq!(
        stderr(&compat),
        "Error: Not enough capacity to move non-redundant instances\n"
    );
    let ours = roll(&["--no-headers", "--print-moves", "-q"], &f);
    assert!(ours.status.success(), "{}", stderr(&ours));
    assert_eq!(stdout(&ours), "n2,n1\n");
}

#[test]
fn ignore_non_redundant_moves_no_instance_without_a_secondary() {
    // The rbd instance on n1 fits nowhere else. With --ignore-non-redundant
    // the operator accepts that it goes down with n1: no move, one group,
    // as in hroller (ganeti-testsuite shared-n1-restriction.data).
    let f = data(&format!(
        "{GROUPS}n1|8192|0|8000|10000|10000|4|M|u\nn2|8192|0|100|10000|100|4|N|u\n\n\
         i1|4096|0|1|running|Y|n1||rbd||1\ni2|64|500|1|running|Y|n2||plain||1\n\n\n"
    ));
    for extra in [&[][..], &["--full-evacuation"][..]] {
        let args = [
            &["--no-headers", "--print-moves", "--ignore-non-redundant"][..],
            extra,
        ]
        .concat();
        let ours = roll(&args, &f);
        assert!(ours.status.success(), "{}", stderr(&ours));
        assert_eq!(stdout(&ours), "n2,n1\n");
        let compat = roll(&[&["--hroller-compat"][..], &args[..]].concat(), &f);
        assert_eq!(stdout(&compat), "n2,n1\n");
    }
    // Without the flag the rbd instance must move, and cannot.
    let ours = roll(&["--no-headers", "-q"], &f);
    assert_eq!(
        stderr(&ours),
        "Error: Not enough capacity to move non-redundant instances\n"
    );
}

#[test]
fn skip_non_redundant_skips_what_cannot_be_kept_up_and_says_so() {
    // n3's rbd instance fits nowhere. hroller skips n2 and n3 for their
    // non-DRBD instances, yet still fails on n3's instance (unselected nodes
    // take part in its simulation). nodecare live-migrates n2's instance
    // (onto n4, which does not reboot), so n2 joins n1's group, and skips
    // n3 with a warning. n4's DRBD instance has its secondary on
    // the offline n5: it cannot migrate, so n4 is skipped and named.
    let f = data(&format!(
        "{GROUPS}n1|8192|0|8000|10000|10000|4|M|u\nn2|8192|0|8000|10000|10000|4|N|u\n\
         n3|8192|0|8000|10000|10000|4|N|u\nn4|8192|0|8000|10000|10000|4|N|u\n\
         n5|8192|0|8000|10000|10000|4|Y|u\n\n\
         i1|512|0|1|running|Y|n2||rbd||1\ni2|8100|0|1|running|Y|n3||rbd||1\n\
         i3|512|100|1|running|Y|n4|n5|drbd||1\n\n\n"
    ));
    let compat = roll(
        &["--hroller-compat", "--no-headers", "--skip-non-redundant"],
        &f,
    );
    assert_eq!(
        stderr(&compat),
        "Error: Not enough capacity to move non-redundant instances\n"
    );
    let ours = roll(
        &["--no-headers", "--print-moves", "--skip-non-redundant"],
        &f,
    );
    assert!(ours.status.success(), "{}", stderr(&ours));
    assert_eq!(stdout(&ours), "n2,n1\n  i1 n4\n");
    assert_eq!(
        stderr(&ours),
        "Warning: node n4 is skipped: its running instance i3 cannot migrate \
         (its DRBD secondary n5 is offline)\n\
         Warning: node n3 is skipped: its running instances cannot be moved off it\n"
    );
    let json = roll(&["--skip-non-redundant", "--output", "json"], &f);
    assert!(
        stdout(&json).contains("node n3 is skipped"),
        "{}",
        stdout(&json)
    );
    // Nothing left to reboot: the error names every skipped node.
    let only = data(&format!(
        "{GROUPS}n3|8192|0|8000|10000|10000|4|M|u\nn4|8192|0|8000|10000|10000|4|N|u\n\
         n5|8192|0|8000|10000|10000|4|Y|u\n\n\
         i2|8100|0|1|running|Y|n3||rbd||1\ni3|512|100|1|running|Y|n4|n5|drbd||1\n\n\n"
    ));
    let o = roll(&["--skip-non-redundant"], &only);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).ends_with(
            "Error: Cannot create node graph: node n4 is skipped: its running instance i3 \
             cannot migrate (its DRBD secondary n5 is offline); node n3 is skipped: its \
             running instances cannot be moved off it\n"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn hroller_compat_words_load_errors_as_hroller() {
    let f = data(&format!(
        "{GROUPS}n1|8192|0|8000|10000|10000|4|M|u\n\ni1|512|0|1|running|Y|n9||plain||1\n\n\n"
    ));
    let compat = roll(&["--hroller-compat"], &f);
    assert_eq!(
        stderr(&compat),
        "Error: failed to load data, aborting: Unknown node 'n9' for instance i1\n"
    );
    let ours = roll(&[], &f);
    assert!(
        stderr(&ours).ends_with(": line 5, field pnode: unknown node 'n9' for instance 'i1'\n"),
        "{}",
        stderr(&ours)
    );
}

#[test]
fn failure_domains_split_racks_and_json_lists_groups() {
    let f = data(&format!(
        "{GROUPS}a1|8192|0|8000|10000|10000|4|M|u|1|rack:a\na2|8192|0|8000|10000|10000|4|N|u|1|rack:a\n\
         b1|8192|0|8000|10000|10000|4|N|u|1|rack:b\nb2|8192|0|8000|10000|10000|4|N|u|1|rack:b\n\n\n\n"
    ));
    let all = roll(&["--no-headers"], &f);
    assert_eq!(stdout(&all), "a2,b1,b2,a1\n");
    let racks = roll(&["--no-headers", "--failure-domains", "rack:"], &f);
    assert_eq!(stdout(&racks), "b1,b2\na2,a1\n");
    let json = roll(&["--failure-domains", "rack:", "--output", "json"], &f);
    let text = stdout(&json);
    assert!(
        text.contains("\"nodes\": [\n        \"b1\",\n        \"b2\"\n      ]"),
        "{text}"
    );
    assert!(text.contains("\"htools_algorithm_groups\": 2"), "{text}");
}

#[test]
fn hroller_error_messages_and_exit_codes() {
    let f = data(&format!("{GROUPS}n1|100|0|100|100|100|1|N|u\n\n\n"));
    let o = roll(&[], &f);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "Error: No master node found (maybe not supported by backend).\n"
    );
    let o = roll(&["-f", "--no-headers"], &f);
    assert_eq!(
        stderr(&o),
        "Warning: No master node found (maybe not supported by backend).\n"
    );
    assert_eq!(stdout(&o), "n1\n");
    // As in hroller, the missing-master warning comes before a later error.
    let o = roll(&["-f", "-O", "nx", "-O", "ny"], &f);
    assert_eq!(
        stderr(&o),
        "Warning: No master node found (maybe not supported by backend).\n\
         Error: wrong node name(s) set as offline: ny,nx\n\n"
    );
    let o = roll(&["-f", "-G", "nogroup"], &f);
    assert_eq!(
        stderr(&o),
        "Warning: No master node found (maybe not supported by backend).\n\
         Error: Cannot find target group.\n"
    );
    let o = roll(&["-f", "extra"], &f);
    assert_eq!(
        stderr(&o),
        "Error: This program doesn't take any arguments.\n"
    );
    let bad = data(&format!("{GROUPS}n1|100|0|100|100|x|1|M|u\n\n\n"));
    let o = roll(&[], &bad);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).ends_with(": line 3, field f_dsk: cannot parse 'x' as an integer\n"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).starts_with("Error: failed to load data, aborting: "));
}

#[test]
fn rapi_directory_backend() {
    let dir = tempfile::tempdir().unwrap();
    let samples = concat!(env!("CARGO_MANIFEST_DIR"), "/../roll/tests/rapi");
    for (from, to) in [
        ("02-info.json", "info.json"),
        ("15-groups-bulk.json", "groups.json"),
        ("06-nodes-bulk.json", "nodes.json"),
        ("11-instances-bulk.json", "instances.json"),
    ] {
        std::fs::copy(format!("{samples}/{from}"), dir.path().join(to)).unwrap();
    }
    let o = Command::new(env!("CARGO_BIN_EXE_nodecare"))
        .args(["roll", "--no-headers", "--print-moves", "-m"])
        .arg(format!("file://{}", dir.path().display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // Three nodes without mirrors; the master reboots last.
    assert!(
        out.lines().next().unwrap_or_default().starts_with("node"),
        "{out}"
    );
    assert!(
        out.lines()
            .rfind(|l| !l.starts_with("  "))
            .unwrap_or_default()
            .ends_with("node1.gnt.test"),
        "{out}"
    );
}
