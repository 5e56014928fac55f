//! `lv`: logical volumes from `lvs`, joined to the instances that own them.
//!
//! mond runs `lvs` without a timeout on every request and asks confd N+1 times per request to
//! join volumes to instances. Here `lvs` runs with a timeout and an output cap, and the join
//! uses the volume→instance map the background confd refresher keeps; without confd (or for a
//! volume confd does not list) Ganeti's `originstname+<instance>` volume tag names the owner.
//!
//! `lvs` is a fork and a scan of every disk: on a node without LVM (no LVM device-mapper device
//! in `/sys/block`, no volume group metadata backup in `/etc/lvm/backup`) the collector reports
//! the empty list `lvs` would print without forking it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodecare_protocol::ReportKind;
use serde::Serialize;

use super::systool::{ToolLimits, run_tool};
use super::{BuiltinConfig, ParseError};
use crate::confd::ViewHandle;
use crate::{CollectError, CollectFuture, Collector, CollectorSpec};

/// The `lvs` arguments (mond's column set, `;`-separated, sizes in bytes).
pub const LVS_ARGS: [&str; 7] = [
    "--noheadings",
    "--units",
    "B",
    "--separator",
    ";",
    "-o",
    "lv_uuid,lv_name,lv_attr,lv_major,lv_minor,lv_kernel_major,lv_kernel_minor,lv_size,seg_count,lv_tags,modules,vg_uuid,vg_name,segtype,seg_start,seg_start_pe,seg_size,seg_tags,seg_pe_ranges,devices",
];

/// The tag Ganeti puts on every volume it creates for an instance.
const OWNER_TAG_PREFIX: &str = "originstname+";

/// One logical volume segment, with mond's field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogicalVolume {
    /// LV UUID.
    pub uuid: String,
    /// LV name.
    pub name: String,
    /// Attribute string, e.g. `-wi-ao`.
    pub attr: String,
    /// Persistent major (-1 if none).
    pub major: i64,
    /// Persistent minor (-1 if none).
    pub minor: i64,
    /// Kernel major.
    pub kernel_major: i64,
    /// Kernel minor.
    pub kernel_minor: i64,
    /// Size in bytes.
    pub size: u64,
    /// Number of segments.
    pub seg_count: u64,
    /// LV tags, comma-separated.
    pub tags: String,
    /// Kernel modules needed.
    pub modules: String,
    /// VG UUID.
    pub vg_uuid: String,
    /// VG name.
    pub vg_name: String,
    /// Segment type, e.g. `linear`.
    pub segtype: String,
    /// Segment start in bytes.
    pub seg_start: u64,
    /// Segment start in physical extents.
    pub seg_start_pe: u64,
    /// Segment size in bytes.
    pub seg_size: u64,
    /// Segment tags.
    pub seg_tags: String,
    /// Physical extent ranges.
    pub seg_pe_ranges: String,
    /// Underlying devices.
    pub devices: String,
    /// The owning instance, when known.
    pub instance: Option<String>,
}

const FIELDS: [&str; 20] = [
    "uuid",
    "name",
    "attr",
    "major",
    "minor",
    "kernel_major",
    "kernel_minor",
    "size",
    "seg_count",
    "tags",
    "modules",
    "vg_uuid",
    "vg_name",
    "segtype",
    "seg_start",
    "seg_start_pe",
    "seg_size",
    "seg_tags",
    "seg_pe_ranges",
    "devices",
];

fn signed(line: usize, field: &str, text: &str) -> Result<i64, ParseError> {
    text.parse()
        .map_err(|_| ParseError::new(line, field, format!("{text:?} is not an integer")))
}

fn bytes(line: usize, field: &str, text: &str) -> Result<u64, ParseError> {
    let digits = text.strip_suffix('B').unwrap_or(text);
    digits
        .parse()
        .map_err(|_| ParseError::new(line, field, format!("{text:?} is not a size in bytes")))
}

/// Parses the output of `lvs` with [`LVS_ARGS`].
pub fn parse_lvs(text: &str) -> Result<Vec<LogicalVolume>, ParseError> {
    let mut volumes = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let columns: Vec<&str> = line.split(';').collect();
        if columns.len() != FIELDS.len() {
            return Err(ParseError::new(
                number,
                FIELDS.get(columns.len()).copied().unwrap_or("devices"),
                format!("{} columns, {} expected", columns.len(), FIELDS.len()),
            ));
        }
        let text = |i: usize| columns[i].to_owned();
        let tags = text(9);
        let instance = owner_from_tags(&tags);
        volumes.push(LogicalVolume {
            uuid: text(0),
            name: text(1),
            attr: text(2),
            major: signed(number, FIELDS[3], columns[3])?,
            minor: signed(number, FIELDS[4], columns[4])?,
            kernel_major: signed(number, FIELDS[5], columns[5])?,
            kernel_minor: signed(number, FIELDS[6], columns[6])?,
            size: bytes(number, FIELDS[7], columns[7])?,
            seg_count: bytes(number, FIELDS[8], columns[8])?,
            tags,
            modules: text(10),
            vg_uuid: text(11),
            vg_name: text(12),
            segtype: text(13),
            seg_start: bytes(number, FIELDS[14], columns[14])?,
            seg_start_pe: bytes(number, FIELDS[15], columns[15])?,
            seg_size: bytes(number, FIELDS[16], columns[16])?,
            seg_tags: text(17),
            seg_pe_ranges: text(18),
            devices: text(19),
            instance,
        });
    }
    Ok(volumes)
}

/// The instance named by Ganeti's `originstname+<instance>` tag.
pub fn owner_from_tags(tags: &str) -> Option<String> {
    tags.split(',')
        .find_map(|tag| tag.strip_prefix(OWNER_TAG_PREFIX))
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
}

/// Sets each volume's owner from confd's `(vg, lv) → instance` map, keeping the tag-derived
/// owner for volumes confd does not list.
pub fn join_owners(volumes: &mut [LogicalVolume], owners: &BTreeMap<(String, String), String>) {
    for volume in volumes {
        if let Some(owner) = owners.get(&(volume.vg_name.clone(), volume.name.clone())) {
            volume.instance = Some(owner.clone());
        }
    }
}

/// Whether this node has LVM volumes to list: an active logical volume is a device-mapper
/// device whose `dm/uuid` starts with `LVM-` under `<sys_root>/block`, and every volume group
/// (active or not) has a metadata backup in `<lvm_dir>/backup` (LVM's default). Reads a
/// directory and a few small files; never forks.
pub fn lvm_present(sys_root: &Path, lvm_dir: &Path) -> bool {
    let has_backup = std::fs::read_dir(lvm_dir.join("backup"))
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    if has_backup {
        return true;
    }
    let Ok(devices) = std::fs::read_dir(sys_root.join("block")) else {
        return false;
    };
    devices.flatten().any(|device| {
        device.file_name().to_string_lossy().starts_with("dm-")
            && std::fs::read_to_string(device.path().join("dm/uuid"))
                .is_ok_and(|uuid| uuid.starts_with("LVM-"))
    })
}

/// The `lv` collector.
#[derive(Debug)]
pub struct Lv {
    spec: CollectorSpec,
    lvs: PathBuf,
    sys_root: PathBuf,
    lvm_dir: PathBuf,
    limits: ToolLimits,
    cluster: Option<ViewHandle>,
}

impl Lv {
    /// The collector running the configured `lvs`.
    pub fn new(config: &BuiltinConfig) -> Self {
        Self {
            spec: config.spec("lv", Some("storage"), ReportKind::Performance),
            lvs: config.lvs_path.clone(),
            sys_root: config.sys_root.clone(),
            lvm_dir: config.lvm_dir.clone(),
            limits: config.tool_limits(),
            cluster: config.cluster.clone(),
        }
    }
}

impl Collector for Lv {
    fn pace(&self) -> crate::Pace {
        crate::Pace::OnDemand
    }

    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            // A missing `lvs` stays an error (below); a node without volumes lists none.
            if super::systool::tool_exists(&self.lvs) && !lvm_present(&self.sys_root, &self.lvm_dir)
            {
                return Ok(serde_json::Value::Array(Vec::new()));
            }
            let output = run_tool(&self.lvs, &LVS_ARGS, self.limits)
                .await
                .map_err(|error| CollectError::Source {
                    source_name: "lvs".to_owned(),
                    reason: error.to_string(),
                })?;
            let text = String::from_utf8_lossy(&output);
            let mut volumes = parse_lvs(&text).map_err(|error| CollectError::Parse {
                source_name: "lvs".to_owned(),
                reason: error.to_string(),
            })?;
            if let Some(owners) = self
                .cluster
                .as_ref()
                .and_then(|view| view.current().lv_owners.clone())
            {
                join_owners(&mut volumes, &owners);
            }
            serde_json::to_value(volumes).map_err(|error| CollectError::Parse {
                source_name: "lvs".to_owned(),
                reason: error.to_string(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "  u1;vol1;-wi-ao;-1;-1;253;0;1073741824B;1;originstname+inst1;;vgu;xenvg;linear;0B;0;1073741824B;;/dev/sda5:0-15;/dev/sda5(0)\n";

    #[test]
    fn parses_a_line_and_reads_the_owner_tag() {
        let volumes = parse_lvs(LINE).unwrap();
        assert_eq!(volumes[0].size, 1_073_741_824);
        assert_eq!(volumes[0].major, -1);
        assert_eq!(volumes[0].instance.as_deref(), Some("inst1"));
    }

    #[test]
    fn confd_owner_wins() {
        let mut volumes = parse_lvs(LINE).unwrap();
        let owners = [(("xenvg".to_owned(), "vol1".to_owned()), "real".to_owned())].into();
        join_owners(&mut volumes, &owners);
        assert_eq!(volumes[0].instance.as_deref(), Some("real"));
    }

    #[test]
    fn lvm_is_found_by_its_devices_or_its_backups() {
        let root = tempfile::tempdir().unwrap();
        let sys = root.path().join("sys");
        let lvm = root.path().join("lvm");
        assert!(!lvm_present(&sys, &lvm));
        std::fs::create_dir_all(sys.join("block/loop0")).unwrap();
        std::fs::create_dir_all(sys.join("block/dm-0/dm")).unwrap();
        std::fs::write(sys.join("block/dm-0/dm/uuid"), "CRYPT-LUKS2-abc\n").unwrap();
        std::fs::create_dir_all(lvm.join("backup")).unwrap();
        assert!(!lvm_present(&sys, &lvm));
        std::fs::write(sys.join("block/dm-0/dm/uuid"), "LVM-abcdef\n").unwrap();
        assert!(lvm_present(&sys, &lvm));
        std::fs::write(sys.join("block/dm-0/dm/uuid"), "").unwrap();
        std::fs::write(
            lvm.join("backup/xenvg"),
            "contents = \"Text Format Volume Group\"\n",
        )
        .unwrap();
        assert!(lvm_present(&sys, &lvm));
    }

    #[tokio::test]
    async fn without_lvm_lists_nothing_and_does_not_fork_lvs() {
        let root = tempfile::tempdir().unwrap();
        // An `lvs` that would leave a mark if it ran.
        let lvs = root.path().join("lvs");
        let mark = root.path().join("ran");
        std::fs::write(&lvs, format!("#!/bin/sh\ntouch {}\n", mark.display())).unwrap();
        std::fs::set_permissions(&lvs, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let config = BuiltinConfig {
            lvs_path: lvs,
            sys_root: root.path().join("sys"),
            lvm_dir: root.path().join("lvm"),
            ..BuiltinConfig::default()
        };
        let lv = Lv::new(&config);
        assert_eq!(lv.collect().await.unwrap(), serde_json::json!([]));
        assert!(!mark.exists());
        assert_eq!(lv.pace(), crate::Pace::OnDemand);
    }

    #[test]
    fn errors_name_line_and_field() {
        let error = parse_lvs("a;b;c\n").unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (1, "major"));
        let bad = LINE.replace("1073741824B;1;", "huge;1;");
        let error = parse_lvs(&format!("\n{bad}")).unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (2, "size"));
    }
}
