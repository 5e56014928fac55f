//! Secret files (the cluster HMAC key, the coordinator's users file and RAPI credentials) are
//! refused when others could have written them or can read them, as ssh refuses a private key.
//!
//! The rules, checked on the opened descriptor (links are followed, as ssh does, and the file
//! they lead to is what is checked):
//!
//! * a regular file, at most [`MAX_SECRET_FILE_BYTES`] long;
//! * owned by root, by the user the daemon runs as, or by one of Ganeti's daemon users
//!   ([`GANETI_OWNERS`]: with separate daemon users, Ganeti's `ensure-dirs` gives `hmac.key` to
//!   `gnt-confd` and the RAPI users file to `gnt-rapi`);
//! * writable by no one but its owner (no group or world write bit);
//! * not readable by the world;
//! * readable by its group only when that group is root's (gid 0), the daemon's own group, or
//!   one of Ganeti's key groups ([`GANETI_KEY_GROUPS`]: `gnt-masterd`, the group `ensure-dirs`
//!   gives `hmac.key` and the RAPI users file, mode 0440/0640).
//!
//! Any other file is refused with the reason; nothing is read from it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The largest secret file accepted (a key, a users file or credentials are far smaller).
pub const MAX_SECRET_FILE_BYTES: u64 = 1024 * 1024;

/// Ganeti's daemon users that may own a secret file besides root and the daemon's own user.
pub const GANETI_OWNERS: &[&str] = &["gnt-masterd", "gnt-confd", "gnt-rapi"];

/// Ganeti's groups that may read a secret file besides root's and the daemon's own group.
pub const GANETI_KEY_GROUPS: &[&str] = &["gnt-masterd"];

/// Why a secret file was refused.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The file could not be opened, inspected or read.
    #[error("cannot read secret file {path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The file is not safe to trust or is readable by others.
    #[error("refusing secret file {path}: {reason}")]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// Why: owner, mode or type.
        reason: String,
    },
}

/// The accounts a secret file may belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedAccounts {
    /// Owners accepted.
    pub owners: Vec<u32>,
    /// Groups that may read the file (never write it).
    pub reader_groups: Vec<u32>,
}

impl TrustedAccounts {
    /// Root, the running process's user and group, and Ganeti's daemon users and key groups
    /// that exist on this system.
    pub fn of_this_process() -> Self {
        let mut owners = vec![0, nix::unistd::geteuid().as_raw()];
        for name in GANETI_OWNERS {
            if let Ok(Some(user)) = nix::unistd::User::from_name(name) {
                owners.push(user.uid.as_raw());
            }
        }
        let mut reader_groups = vec![0, nix::unistd::getegid().as_raw()];
        for name in GANETI_KEY_GROUPS {
            if let Ok(Some(group)) = nix::unistd::Group::from_name(name) {
                reader_groups.push(group.gid.as_raw());
            }
        }
        owners.dedup();
        reader_groups.dedup();
        Self {
            owners,
            reader_groups,
        }
    }
}

/// What [`check_metadata`] looks at: the file's type, owner, group, mode and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretFileMeta {
    /// A regular file.
    pub regular: bool,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Size in bytes.
    pub len: u64,
}

/// The rules of this module, pure: `Err(reason)` when the file must be refused.
pub fn check_metadata(meta: &SecretFileMeta, trusted: &TrustedAccounts) -> Result<(), String> {
    if !meta.regular {
        return Err("not a regular file".into());
    }
    if meta.len > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "{} bytes, more than the {} accepted",
            meta.len, MAX_SECRET_FILE_BYTES
        ));
    }
    if !trusted.owners.contains(&meta.uid) {
        return Err(format!(
            "owned by uid {}, neither root, this daemon's user nor a Ganeti daemon user",
            meta.uid
        ));
    }
    if meta.mode & 0o002 != 0 {
        return Err(format!("writable by everyone (mode {:04o})", meta.mode));
    }
    if meta.mode & 0o020 != 0 {
        return Err(format!("writable by its group (mode {:04o})", meta.mode));
    }
    if meta.mode & 0o004 != 0 {
        return Err(format!("readable by everyone (mode {:04o})", meta.mode));
    }
    if meta.mode & 0o040 != 0 && !trusted.reader_groups.contains(&meta.gid) {
        return Err(format!(
            "readable by group gid {} (mode {:04o}), neither root's, this daemon's nor Ganeti's key group",
            meta.gid, meta.mode
        ));
    }
    Ok(())
}

fn open_checked(path: &Path, trusted: &TrustedAccounts) -> Result<File, SecretFileError> {
    let io = |error: std::io::Error| SecretFileError::Io {
        path: path.to_owned(),
        reason: error.to_string(),
    };
    let file = File::open(path).map_err(io)?;
    let metadata = file.metadata().map_err(io)?;
    let meta = SecretFileMeta {
        regular: metadata.file_type().is_file(),
        uid: metadata.uid(),
        gid: metadata.gid(),
        mode: metadata.mode() & 0o7777,
        len: metadata.len(),
    };
    check_metadata(&meta, trusted).map_err(|reason| SecretFileError::Unsafe {
        path: path.to_owned(),
        reason,
    })?;
    Ok(file)
}

/// Checks a secret file without reading it (see the module's rules).
pub fn check_secret_file(path: &Path) -> Result<(), SecretFileError> {
    open_checked(path, &TrustedAccounts::of_this_process()).map(drop)
}

/// Opens a secret file, checks it on the open descriptor (so the checked file is the one read)
/// and reads it whole.
pub fn read_secret_file(path: &Path) -> Result<Vec<u8>, SecretFileError> {
    read_secret_file_trusting(path, &TrustedAccounts::of_this_process())
}

/// [`read_secret_file`] with the trusted accounts given.
pub fn read_secret_file_trusting(
    path: &Path,
    trusted: &TrustedAccounts,
) -> Result<Vec<u8>, SecretFileError> {
    let file = open_checked(path, trusted)?;
    let mut content = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut content)
        .map_err(|error| SecretFileError::Io {
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
    if content.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(SecretFileError::Unsafe {
            path: path.to_owned(),
            reason: "grew beyond the size accepted while read".into(),
        });
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn trusted() -> TrustedAccounts {
        TrustedAccounts {
            owners: vec![0, nix::unistd::geteuid().as_raw()],
            reader_groups: vec![0, nix::unistd::getegid().as_raw()],
        }
    }

    fn secret(mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, b"key\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    fn refused(path: &Path) -> String {
        match read_secret_file_trusting(path, &trusted()) {
            Err(SecretFileError::Unsafe { reason, .. }) => reason,
            other => panic!("{} accepted or unreadable: {other:?}", path.display()),
        }
    }

    #[test]
    fn private_files_are_read() {
        for mode in [0o600, 0o400, 0o640, 0o440] {
            let (_dir, path) = secret(mode);
            assert_eq!(
                read_secret_file_trusting(&path, &trusted()).unwrap(),
                b"key\n",
                "mode {mode:o}"
            );
        }
        let (_dir, path) = secret(0o600);
        check_secret_file(&path).unwrap();
    }

    #[test]
    fn writable_by_others_is_refused() {
        let (_dir, path) = secret(0o602);
        assert!(refused(&path).contains("writable by everyone"));
        let (_dir, path) = secret(0o620);
        assert!(refused(&path).contains("writable by its group"));
        let (_dir, path) = secret(0o666);
        assert!(check_secret_file(&path).is_err());
    }

    #[test]
    fn readable_by_the_world_is_refused() {
        let (_dir, path) = secret(0o644);
        assert!(refused(&path).contains("readable by everyone"));
    }

    #[test]
    fn another_owner_or_reader_group_is_refused() {
        let (_dir, path) = secret(0o600);
        let other = 54_321;
        if nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(other)), None).is_ok() {
            assert!(refused(&path).contains("owned by uid 54321"));
            let (_dir, path) = secret(0o640);
            nix::unistd::chown(&path, None, Some(nix::unistd::Gid::from_raw(other))).unwrap();
            assert!(refused(&path).contains("readable by group gid 54321"));
        }
        // Pure rules, whoever runs the test.
        let meta = SecretFileMeta {
            regular: true,
            uid: other,
            gid: 0,
            mode: 0o600,
            len: 4,
        };
        assert!(check_metadata(&meta, &trusted()).is_err());
        let meta = SecretFileMeta {
            uid: 0,
            gid: other,
            mode: 0o640,
            ..meta
        };
        assert!(check_metadata(&meta, &trusted()).is_err());
        let meta = SecretFileMeta {
            mode: 0o600,
            ..meta
        };
        assert_eq!(check_metadata(&meta, &trusted()), Ok(()));
    }

    #[test]
    fn links_lead_to_the_file_checked_and_other_types_are_refused() {
        let (dir, path) = secret(0o644);
        let link = dir.path().join("link");
        symlink(&path, &link).unwrap();
        assert!(refused(&link).contains("readable by everyone"));
        assert!(refused(dir.path()).contains("not a regular file"));
        let missing = dir.path().join("missing");
        assert!(matches!(
            check_secret_file(&missing),
            Err(SecretFileError::Io { .. })
        ));
    }
}
