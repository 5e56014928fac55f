//! Property tests for every built-in parser: arbitrary input never panics, and generated
//! well-formed input parses back to the values it was built from.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nodecare_collectors::builtin::{cpu, diskstats, drbd, kvm, lv, xen};
use nodecare_collectors::confd;
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    // Mix of free text and text built from the tokens the parsers look for.
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            prop_oneof![
                Just("cpu".to_owned()),
                Just("cpu0".to_owned()),
                Just(
                    " 0: cs:Connected ro:Primary/Secondary ds:UpToDate/UpToDate C r-----"
                        .to_owned()
                ),
                Just(
                    "    ns:0 nr:0 dw:0 dr:0 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0"
                        .to_owned()
                ),
                Just("[===>....] sync'ed: 12.5% (1/2)K".to_owned()),
                Just("finish: 0:00:05 speed: 1,000 (1,000) K/sec".to_owned()),
                Just("version: 8.4.2 (api:1/proto:86-101)".to_owned()),
                Just("Name ID Mem VCPUs State Time(s)".to_owned()),
                Just(";".to_owned()),
                Just("\n".to_owned()),
                Just(" ".to_owned()),
                "[0-9]{1,22}",
                "[a-zA-Z:/()%.,;-]{1,8}",
            ],
            0..40,
        )
        .prop_map(|parts| parts.join(" ")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn no_parser_panics(input in text()) {
        drop(cpu::parse_proc_stat(&input));
        drop(diskstats::parse_diskstats(&input));
        drop(drbd::parse_proc_drbd(&input));
        drop(drbd::parse_drbdsetup_json(&input));
        drop(lv::parse_lvs(&input));
        drop(xen::parse_xl_list(&input));
        drop(xen::parse_xl_uptime(&input));
        drop(kvm::parse_pid_file(&input));
        drop(kvm::parse_statm_rss(&input));
        drop(kvm::parse_process_stat(&input));
        drop(kvm::parse_qmp_status(&input));
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(&input) {
            drop(confd::parse_node_drbd(&value));
            drop(confd::parse_node_instances(&value));
            drop(confd::parse_data_collectors(&value));
            drop(confd::logical_volumes_of_disks(&value));
        }
    }

    #[test]
    fn confd_datagrams_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let key = confd::ConfdKey::new(b"k\n".to_vec());
        drop(confd::decode_reply(&key, &bytes, "salt"));
        drop(confd::decode_request(&key, &bytes, std::time::SystemTime::now()));
        let mut framed = b"plj0".to_vec();
        framed.extend_from_slice(&bytes);
        drop(confd::decode_reply(&key, &framed, "salt"));
    }

    #[test]
    fn diskstats_any_column_count_from_14(
        major in 0u64..4096, minor in 0u64..1 << 20, name in "[a-z][a-z0-9]{0,10}",
        counters in proptest::collection::vec(any::<u64>(), 11..=17),
    ) {
        let line = format!("{major:>4} {minor:>7} {name} {}\n",
            counters.iter().map(u64::to_string).collect::<Vec<_>>().join(" "));
        let stats = diskstats::parse_diskstats(&line).unwrap();
        prop_assert_eq!(stats.len(), 1);
        prop_assert_eq!(stats[0].major, major);
        prop_assert_eq!(&stats[0].name, &name);
        prop_assert_eq!(stats[0].reads, counters[0]);
        prop_assert_eq!(stats[0].weighted_io_millis, counters[10]);
    }

    #[test]
    fn diskstats_short_lines_fail_naming_the_line(
        good in 0usize..5, columns in 1usize..14,
    ) {
        let mut text = "8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n".repeat(good);
        text.push_str(&vec!["1"; columns].join(" "));
        let error = diskstats::parse_diskstats(&text).unwrap_err();
        prop_assert_eq!(error.line, good + 1);
    }

    #[test]
    fn proc_stat_work_sums_the_busy_counters(
        counters in proptest::collection::vec(0u64..1 << 40, 10),
    ) {
        let line = |name: &str| format!("{name} {}\n",
            counters.iter().map(u64::to_string).collect::<Vec<_>>().join(" "));
        let text = format!("{}{}intr 1 2\n", line("cpu"), line("cpu0"));
        let lines = cpu::parse_proc_stat(&text).unwrap();
        let busy: u64 = [0, 1, 2, 4, 5, 6, 7].iter().map(|&i| counters[i]).sum();
        prop_assert_eq!(lines[0].work, busy);
        prop_assert_eq!(lines.len(), 2);
    }

    #[test]
    fn drbd_device_lines_round_trip(
        minor in 0u64..256,
        cs in prop::sample::select(vec!["Connected", "StandAlone", "WFConnection", "SyncSource", "Disconnecting"]),
        local in prop::sample::select(vec!["Primary", "Secondary", "Unknown"]),
        remote in prop::sample::select(vec!["Primary", "Secondary", "Unknown"]),
        disk in prop::sample::select(vec!["UpToDate", "Diskless", "Inconsistent", "DUnknown"]),
        protocol in prop::sample::select(vec!["A", "B", "C", " "]),
        flags in "[rs][-a-z]{3,5}",
        counters in proptest::collection::vec(0u64..1 << 40, 10),
    ) {
        let names = ["ns", "nr", "dw", "dr", "al", "bm", "lo", "pe", "ua", "ap"];
        let perf: Vec<String> = names.iter().zip(&counters).map(|(n, v)| format!("{n}:{v}")).collect();
        let text = format!(
            "version: 8.4.2 (api:1/proto:86-101)\n{minor:>2}: cs:{cs} ro:{local}/{remote} ds:{disk}/{disk} {protocol} {flags}\n    {}\n",
            perf.join(" ")
        );
        let status = drbd::parse_proc_drbd(&text).unwrap();
        let drbd::DeviceInfo::Configured(device) = &status.devices[0] else {
            return Err(TestCaseError::fail("expected a configured device"));
        };
        prop_assert_eq!(device.minor, minor);
        prop_assert_eq!(&device.connection_state, cs);
        prop_assert_eq!(&device.local_role, local);
        prop_assert_eq!(&device.replication_protocol, protocol);
        prop_assert_eq!(&device.io_flags, &flags);
        prop_assert_eq!(device.perf_indicators.network_send, counters[0]);
        prop_assert_eq!(device.perf_indicators.application_pending, counters[9]);
        let data = drbd::to_report_data(&status);
        let bad = matches!(cs, "StandAlone" | "Disconnecting");
        prop_assert_eq!(data["status"]["code"] == 4, bad);
    }

    #[test]
    fn lvs_lines_round_trip(
        name in "[a-zA-Z0-9._-]{1,40}", size in any::<u64>(), kernel_minor in 0i64..1 << 20,
        owner in proptest::option::of("[a-z0-9.-]{1,20}"),
    ) {
        let tags = owner.as_ref().map(|o| format!("originstname+{o}")).unwrap_or_default();
        let line = format!("  uuid;{name};-wi-ao;-1;-1;253;{kernel_minor};{size}B;1;{tags};;vgu;vg;linear;0B;0;{size}B;;/dev/sda:0-1;/dev/sda(0)\n");
        let volumes = lv::parse_lvs(&line).unwrap();
        prop_assert_eq!(&volumes[0].name, &name);
        prop_assert_eq!(volumes[0].size, size);
        prop_assert_eq!(volumes[0].kernel_minor, kernel_minor);
        prop_assert_eq!(&volumes[0].instance, &owner);
    }

    #[test]
    fn xl_list_rows_round_trip(
        name in "[a-z][a-z0-9.-]{0,30}", id in 1u64..100_000, mem in 0u64..1 << 20,
        tenths in 0u64..1 << 40,
    ) {
        let text = format!("Name ID Mem VCPUs State Time(s)\n{name} {id} {mem} 2 -b---- {}.{}\n", tenths / 10, tenths % 10);
        let domains = xen::parse_xl_list(&text).unwrap();
        prop_assert_eq!(&domains[0].name, &name);
        prop_assert_eq!(domains[0].id, id);
        prop_assert!((domains[0].cpu_seconds - tenths as f64 / 10.0).abs() < 1.0);
    }

    #[test]
    fn confd_requests_round_trip(
        request_type in prop::sample::select(vec![
            confd::RequestType::Ping, confd::RequestType::NodeDrbd, confd::RequestType::NodeInstances,
            confd::RequestType::InstanceDisks, confd::RequestType::DataCollectors,
        ]),
        query in proptest::option::of("[ -~]{0,40}"),
        rsalt in "[a-f0-9-]{1,36}",
        key in proptest::collection::vec(any::<u8>(), 1..64),
    ) {
        let key = confd::ConfdKey::new(key);
        let query = query.map_or(serde_json::Value::Null, serde_json::Value::from);
        let now = std::time::SystemTime::now();
        let datagram = confd::encode_request(&key, request_type, &query, &rsalt, now);
        let request = confd::decode_request(&key, &datagram, now).unwrap();
        prop_assert_eq!(request.request_type, request_type as u64);
        prop_assert_eq!(&request.query, &query);
        prop_assert_eq!(&request.rsalt, &rsalt);
        // Any flipped byte in the body breaks the signature or the framing.
        let mut tampered = datagram.clone();
        let position = tampered.len() / 2;
        tampered[position] ^= 0x01;
        prop_assert!(confd::decode_request(&key, &tampered, now).is_err());
    }
}
