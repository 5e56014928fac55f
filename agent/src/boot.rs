//! The node's boot id and reboot sentinel, read each time a diagnose verdict is signed: a new
//! boot id tells the coordinator that the node rebooted (a maintenance campaign waits for it),
//! and the sentinel (`/var/run/reboot-required`, as kured reads it) that the node asks for one.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use nodecare_protocol::diagnose::is_valid_boot_id;

/// Linux's boot id, new at every boot.
pub const DEFAULT_BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
/// The reboot sentinel written by package upgrades (Debian's `update-notifier-common`, kured).
pub const DEFAULT_REBOOT_REQUIRED_PATH: &str = "/var/run/reboot-required";

/// What the signed diagnose payload says about the node's boot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BootState {
    /// The boot id; `None` when it cannot be read or is not a valid boot id.
    pub boot_id: Option<String>,
    /// Whether the reboot sentinel exists; `None` when that cannot be told.
    pub reboot_required: Option<bool>,
}

/// Where the boot id and the reboot sentinel are read; both `None`: nothing is reported.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BootSource {
    /// The boot id file.
    pub boot_id_path: Option<PathBuf>,
    /// The reboot sentinel.
    pub reboot_required_path: Option<PathBuf>,
}

impl BootSource {
    /// Reads both, logging (not failing) when they cannot be read.
    pub fn read(&self) -> BootState {
        BootState {
            boot_id: self.boot_id_path.as_deref().and_then(read_boot_id),
            reboot_required: self
                .reboot_required_path
                .as_deref()
                .and_then(read_reboot_required),
        }
    }
}

/// The boot id in `text` (one line, surrounding white space ignored), if valid.
pub fn parse_boot_id(text: &str) -> Option<String> {
    let id = text.trim();
    is_valid_boot_id(id).then(|| id.to_owned())
}

fn read_boot_id(path: &Path) -> Option<String> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let id = std::str::from_utf8(&bytes).ok().and_then(parse_boot_id);
            if id.is_none() {
                tracing::warn!(path = %path.display(), "the boot id file holds no valid boot id");
            }
            id
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot read the boot id");
            None
        }
    }
}

fn read_reboot_required(path: &Path) -> Option<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Some(true),
        Err(error) if error.kind() == ErrorKind::NotFound => Some(false),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot tell whether the reboot sentinel exists");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_boot_ids() {
        assert_eq!(
            parse_boot_id("0f8fad5b-d9cb-469f-a165-70867728950e\n").as_deref(),
            Some("0f8fad5b-d9cb-469f-a165-70867728950e")
        );
        for bad in ["", "\n", "a b", "x/y", "é"] {
            assert_eq!(parse_boot_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_files_and_tells_absent_from_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let boot = dir.path().join("boot_id");
        let sentinel = dir.path().join("reboot-required");
        let source = BootSource {
            boot_id_path: Some(boot.clone()),
            reboot_required_path: Some(sentinel.clone()),
        };
        assert_eq!(
            source.read(),
            BootState {
                boot_id: None,
                reboot_required: Some(false)
            }
        );
        std::fs::write(&boot, "abc-123\n").unwrap();
        std::fs::write(&sentinel, "*** System restart required ***\n").unwrap();
        assert_eq!(
            source.read(),
            BootState {
                boot_id: Some("abc-123".into()),
                reboot_required: Some(true)
            }
        );
        std::fs::write(&boot, "not a boot id\n").unwrap();
        assert_eq!(source.read().boot_id, None);
        // A path below a regular file cannot be examined: unknown, not "absent".
        let below_file = BootSource {
            boot_id_path: None,
            reboot_required_path: Some(boot.join("x")),
        };
        assert_eq!(below_file.read(), BootState::default());
    }
}
