//! The whitelist: which executables in a directory the agent may run.
//!
//! Rules (as Ganeti's restricted commands, made race-free):
//! - the name matches `^[A-Za-z0-9_-]+$` (no path, no dot files, no editor backups);
//! - the directory and the file are owned by the expected owner (root:root in production), have no
//!   mode bits outside `0755`, and are not symbolic links;
//! - the file is a regular file, executable by its owner.
//!
//! - every directory on the path from `/` is owned by root (or the expected owner) and is not
//!   writable by group or others unless sticky (`/tmp`), so nobody else can swap a path
//!   component for a link to another directory.
//!
//! Nothing may change between the check and the execution: the path is walked one component at
//! a time from `/` with `openat(O_NOFOLLOW | O_DIRECTORY)` (a symbolic link anywhere on it is
//! refused), the file is opened relative to the directory's descriptor with `O_NOFOLLOW`, every
//! descriptor is checked with `fstat`, and the runner executes the very file descriptor that was
//! checked (see [`crate::runner`]). Renaming or replacing the file after the check has no effect
//! on what runs.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::{OFlag, open, openat};
use nix::sys::stat::{Mode, fstatat};

/// Mode bits a whitelisted directory or file may have (`rwxr-xr-x`); anything else, including
/// group/other write and setuid/setgid/sticky, is refused.
pub const ALLOWED_MODE: u32 = 0o755;

/// The owner that whitelisted directories and files must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Expected user id.
    pub uid: u32,
    /// Expected group id.
    pub gid: u32,
}

impl Owner {
    /// root:root, the production requirement.
    pub const ROOT: Self = Self { uid: 0, gid: 0 };
}

/// Why a directory or an executable is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhitelistError {
    /// The name is not `^[A-Za-z0-9_-]+$`.
    #[error("refused {name:?}: name must match ^[A-Za-z0-9_-]+$")]
    BadName {
        /// The offending name (lossy UTF-8).
        name: String,
    },
    /// The whitelist directory cannot be opened or read.
    #[error("cannot open whitelist directory {path}: {reason}")]
    Directory {
        /// The directory.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The whitelist directory breaks an ownership or mode rule.
    #[error("refused whitelist directory {path}: {reason}")]
    DirectoryRefused {
        /// The directory.
        path: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// The executable does not exist.
    #[error("refused {name:?}: no such file in {dir}")]
    NotFound {
        /// The name.
        name: String,
        /// The directory.
        dir: String,
    },
    /// The executable breaks a rule.
    #[error("refused {name:?}: {reason}")]
    Refused {
        /// The name.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
}

/// Whether `name` is acceptable as a whitelisted executable's name.
pub fn is_valid_name(name: &str) -> bool {
    nodecare_protocol::verdict::is_valid_command_name(name)
}

/// A whitelist directory and the owner its entries must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whitelist {
    dir: PathBuf,
    owner: Owner,
}

/// An executable that passed every check, held open: run exactly this descriptor.
#[derive(Debug)]
pub struct VerifiedExecutable {
    name: String,
    path: PathBuf,
    file: OwnedFd,
    mode: u32,
}

impl VerifiedExecutable {
    /// The whitelisted name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path it was opened from (for logs only; never executed by path).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checked permission bits.
    pub fn mode(&self) -> u32 {
        self.mode
    }

    /// The descriptor to execute. It is close-on-exec in this process.
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

fn describe_errno(errno: Errno) -> String {
    errno.desc().to_owned()
}

/// Checks owner and mode of an opened directory or file.
fn check_owner_and_mode(metadata: &std::fs::Metadata, owner: Owner) -> Result<(), String> {
    if metadata.uid() != owner.uid || metadata.gid() != owner.gid {
        return Err(format!(
            "owned by {}:{}, must be {}:{}",
            metadata.uid(),
            metadata.gid(),
            owner.uid,
            owner.gid
        ));
    }
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & !ALLOWED_MODE != 0 {
        return Err(format!(
            "mode {mode:04o} has bits outside {ALLOWED_MODE:04o} ({:04o})",
            mode & !ALLOWED_MODE
        ));
    }
    Ok(())
}

/// Opens the directory `path` one component at a time from `/`, never following a symbolic
/// link, and refuses it if any directory on the way could be changed by someone other than root
/// or `owner`: each must be owned by root or by `owner`'s user, and not writable by group or
/// others unless it is sticky (as `/tmp`: there only an entry's owner may rename or remove it,
/// and the next component is checked in turn). The last component is returned open, unchecked,
/// for the caller's own (stricter) checks.
fn open_trusted_path(path: &Path, owner: Owner) -> Result<File, WhitelistError> {
    let shown = path.display().to_string();
    let refused = |reason: String| WhitelistError::DirectoryRefused {
        path: shown.clone(),
        reason,
    };
    if !path.is_absolute() {
        return Err(refused("is not an absolute path".into()));
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let root = open("/", flags, Mode::empty()).map_err(|errno| WhitelistError::Directory {
        path: shown.clone(),
        reason: format!("cannot open /: {}", describe_errno(errno)),
    })?;
    let mut current = File::from(root);
    let mut walked = PathBuf::from("/");
    let components: Vec<Component<'_>> = path.components().collect();
    let last = components
        .iter()
        .rposition(|component| matches!(component, Component::Normal(_)));
    if last.is_some() {
        check_ancestor(&current, &walked, owner).map_err(&refused)?;
    }
    for (index, component) in components.into_iter().enumerate() {
        let name = match component {
            Component::RootDir | Component::CurDir => continue,
            Component::ParentDir => {
                return Err(refused("contains `..`".into()));
            }
            Component::Prefix(_) => return Err(refused("is not a Unix path".into())),
            Component::Normal(name) => name,
        };
        walked.push(name);
        let fd = openat(&current, name, flags, Mode::empty()).map_err(|errno| match errno {
            Errno::ELOOP | Errno::ENOTDIR => {
                let link = fstatat(&current, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                    .is_ok_and(|stat| stat.st_mode & libc::S_IFMT == libc::S_IFLNK);
                if link || errno == Errno::ELOOP {
                    refused(format!("{} is a symbolic link", walked.display()))
                } else {
                    refused(format!("{} is not a directory", walked.display()))
                }
            }
            other => WhitelistError::Directory {
                path: shown.clone(),
                reason: format!("{}: {}", walked.display(), describe_errno(other)),
            },
        })?;
        current = File::from(fd);
        if Some(index) != last {
            check_ancestor(&current, &walked, owner).map_err(&refused)?;
        }
    }
    Ok(current)
}

/// One directory on the way to a whitelist: owned by root or `owner`'s user, and not writable by
/// group or others unless sticky.
fn check_ancestor(dir: &File, walked: &Path, owner: Owner) -> Result<(), String> {
    let metadata = dir
        .metadata()
        .map_err(|error| format!("cannot stat {}: {error}", walked.display()))?;
    if !metadata.is_dir() {
        return Err(format!("{} is not a directory", walked.display()));
    }
    if metadata.uid() != 0 && metadata.uid() != owner.uid {
        return Err(format!(
            "{} is owned by uid {}, not by root",
            walked.display(),
            metadata.uid()
        ));
    }
    let mode = metadata.permissions().mode();
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky {
        return Err(format!(
            "{} is writable by group or others (mode {:04o})",
            walked.display(),
            mode & 0o7777
        ));
    }
    Ok(())
}

impl Whitelist {
    /// A whitelist whose directory and files must be root:root.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::with_owner(dir, Owner::ROOT)
    }

    /// A whitelist with another required owner (tests running unprivileged).
    pub fn with_owner(dir: impl Into<PathBuf>, owner: Owner) -> Self {
        Self {
            dir: dir.into(),
            owner,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The required owner.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    fn open_dir(&self) -> Result<File, WhitelistError> {
        let path = self.dir.display().to_string();
        let dir = open_trusted_path(&self.dir, self.owner)?;
        let metadata = dir.metadata().map_err(|error| WhitelistError::Directory {
            path: path.clone(),
            reason: error.to_string(),
        })?;
        check_owner_and_mode(&metadata, self.owner)
            .map_err(|reason| WhitelistError::DirectoryRefused { path, reason })?;
        Ok(dir)
    }

    /// Every entry of the directory, sorted, after checking the directory itself.
    ///
    /// Entries are not filtered: an entry with a bad name or bad permissions is listed so that
    /// [`Whitelist::open`] refuses it with a reason, rather than it silently not running.
    pub fn list(&self) -> Result<Vec<String>, WhitelistError> {
        // Check the directory through a descriptor first, then list it.
        let dir = self.open_dir()?;
        let path = self.dir.display().to_string();
        let fd_path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        // Listed through the checked descriptor, never through the path again.
        let listing = std::fs::read_dir(&fd_path).map_err(|error| WhitelistError::Directory {
            path: path.clone(),
            reason: error.to_string(),
        })?;
        let mut names = Vec::new();
        for entry in listing {
            let entry = entry.map_err(|error| WhitelistError::Directory {
                path: path.clone(),
                reason: error.to_string(),
            })?;
            names.push(String::from_utf8_lossy(entry.file_name().as_bytes()).into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// Opens `name` and checks every rule on the opened descriptor.
    pub fn open(&self, name: &str) -> Result<VerifiedExecutable, WhitelistError> {
        if !is_valid_name(name) {
            return Err(WhitelistError::BadName {
                name: name.to_owned(),
            });
        }
        let dir = self.open_dir()?;
        let refused = |reason: String| WhitelistError::Refused {
            name: name.to_owned(),
            reason,
        };
        // O_NONBLOCK: opening a FIFO must not block; it is refused below as not regular.
        let fd = openat(
            &dir,
            OsStr::from_bytes(name.as_bytes()),
            OFlag::O_RDONLY
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC
                | OFlag::O_NOCTTY
                | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .map_err(|errno| match errno {
            Errno::ENOENT => WhitelistError::NotFound {
                name: name.to_owned(),
                dir: self.dir.display().to_string(),
            },
            Errno::ELOOP => refused("is a symbolic link".into()),
            other => refused(format!("cannot open: {}", describe_errno(other))),
        })?;
        let file = File::from(fd);
        let metadata = file
            .metadata()
            .map_err(|error| refused(format!("cannot stat: {error}")))?;
        if !metadata.file_type().is_file() {
            return Err(refused("is not a regular file".into()));
        }
        check_owner_and_mode(&metadata, self.owner).map_err(refused)?;
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & 0o100 == 0 {
            return Err(refused(format!(
                "mode {mode:04o} is not executable by its owner"
            )));
        }
        Ok(VerifiedExecutable {
            name: name.to_owned(),
            path: self.dir.join(name),
            file: OwnedFd::from(file),
            mode,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{chown, symlink};

    fn am_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// A whitelist for the current user, so the tests run unprivileged too.
    fn own_whitelist(dir: &Path) -> Whitelist {
        Whitelist::with_owner(
            dir,
            Owner {
                uid: nix::unistd::geteuid().as_raw(),
                gid: nix::unistd::getegid().as_raw(),
            },
        )
    }

    fn write(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\necho '{\"status\":\"Ok\"}'\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn temp_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[test]
    fn names() {
        for good in ["a", "smart-disks", "ecc_memory", "A1"] {
            assert!(is_valid_name(good), "{good}");
        }
        for bad in [
            "", ".", "..", "a.sh", "a/b", "../x", "a b", "x~", ".hidden", "é",
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn accepts_good_file_and_refuses_each_rule() {
        let dir = temp_dir();
        let whitelist = own_whitelist(dir.path());
        write(dir.path(), "good", 0o755);
        write(dir.path(), "owner-only", 0o700);
        write(dir.path(), "group-writable", 0o775);
        write(dir.path(), "world-writable", 0o757);
        write(dir.path(), "setuid", 0o4755);
        write(dir.path(), "not-executable", 0o644);
        write(dir.path(), "bad.name", 0o755);
        std::fs::create_dir(dir.path().join("subdir")).unwrap();
        symlink(dir.path().join("good"), dir.path().join("link")).unwrap();
        nix::unistd::mkfifo(&dir.path().join("fifo"), Mode::from_bits_truncate(0o755)).unwrap();

        let verified = whitelist.open("good").unwrap();
        assert_eq!(verified.name(), "good");
        assert_eq!(verified.mode(), 0o755);
        assert!(whitelist.open("owner-only").is_ok());

        let reason = |name: &str| whitelist.open(name).unwrap_err().to_string();
        assert!(reason("group-writable").contains("bits outside 0755"));
        assert!(reason("world-writable").contains("bits outside 0755"));
        assert!(reason("setuid").contains("bits outside 0755"));
        assert!(reason("not-executable").contains("not executable"));
        assert!(reason("bad.name").contains("name must match"));
        assert!(reason("subdir").contains("not a regular file"));
        assert!(reason("link").contains("symbolic link"));
        assert!(reason("fifo").contains("not a regular file"));
        assert!(reason("missing").contains("no such file"));
        assert!(reason("../etc").contains("name must match"));

        let listed = whitelist.list().unwrap();
        assert!(listed.contains(&"bad.name".to_owned()));
        assert!(listed.windows(2).all(|pair| pair[0] <= pair[1]));
    }

    #[test]
    fn directory_rules() {
        let dir = temp_dir();
        let whitelist = own_whitelist(dir.path());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            whitelist
                .list()
                .unwrap_err()
                .to_string()
                .contains("bits outside 0755")
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(whitelist.list().unwrap().is_empty());

        let link = dir.path().join("dirlink");
        std::fs::create_dir(dir.path().join("real")).unwrap();
        symlink(dir.path().join("real"), &link).unwrap();
        let error = own_whitelist(&link).list().unwrap_err().to_string();
        assert!(
            error.contains("symbolic link") || error.contains("not a directory"),
            "{error}"
        );

        let missing = own_whitelist(&dir.path().join("absent"))
            .list()
            .unwrap_err();
        assert!(matches!(missing, WhitelistError::Directory { .. }));
    }

    #[test]
    fn a_symlinked_parent_is_refused() {
        let dir = temp_dir();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::create_dir(real.join("commands")).unwrap();
        std::fs::set_permissions(
            real.join("commands"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        write(&real.join("commands"), "script", 0o755);
        symlink(&real, dir.path().join("link")).unwrap();
        // Through the real path it is fine; through the link it is refused.
        assert!(own_whitelist(&real.join("commands")).open("script").is_ok());
        let through_link = own_whitelist(&dir.path().join("link").join("commands"));
        for error in [
            through_link.open("script").unwrap_err(),
            through_link.list().unwrap_err(),
        ] {
            assert!(
                matches!(&error, WhitelistError::DirectoryRefused { reason, .. }
                    if reason.contains("link is a symbolic link")),
                "{error}"
            );
        }
    }

    #[test]
    fn a_writable_parent_is_refused_unless_sticky() {
        let dir = temp_dir();
        let parent = dir.path().join("parent");
        let commands = parent.join("commands");
        std::fs::create_dir_all(&commands).unwrap();
        std::fs::set_permissions(&commands, std::fs::Permissions::from_mode(0o755)).unwrap();
        write(&commands, "script", 0o755);
        let whitelist = own_whitelist(&commands);
        for mode in [0o777, 0o775, 0o757] {
            std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = whitelist.open("script").unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("parent is writable by group or others"),
                "{mode:o}: {error}"
            );
            assert!(whitelist.list().is_err());
        }
        // Sticky, as /tmp: others cannot rename what they do not own.
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(whitelist.open("script").is_ok());
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(whitelist.open("script").is_ok());
    }

    #[test]
    fn relative_and_dotdot_paths_are_refused() {
        for path in ["relative/dir", "/tmp/../etc"] {
            let error = Whitelist::new(path).list().unwrap_err();
            assert!(
                matches!(error, WhitelistError::DirectoryRefused { .. }),
                "{path}: {error}"
            );
        }
    }

    #[test]
    fn a_parent_owned_by_another_user_is_refused() {
        if !am_root() {
            eprintln!("skipped: needs root to chown a parent directory");
            return;
        }
        let dir = temp_dir();
        let parent = dir.path().join("parent");
        let commands = parent.join("commands");
        std::fs::create_dir_all(&commands).unwrap();
        std::fs::set_permissions(&commands, std::fs::Permissions::from_mode(0o755)).unwrap();
        write(&commands, "script", 0o755);
        chown(dir.path(), Some(0), Some(0)).unwrap();
        chown(&commands, Some(0), Some(0)).unwrap();
        chown(commands.join("script"), Some(0), Some(0)).unwrap();
        assert!(Whitelist::new(&commands).open("script").is_ok());
        // The other user could rename `commands` away and put their own directory there.
        chown(&parent, Some(65534), Some(0)).unwrap();
        let error = Whitelist::new(&commands).open("script").unwrap_err();
        assert!(
            error.to_string().contains("parent is owned by uid 65534"),
            "{error}"
        );
    }

    #[test]
    fn wrong_owner_is_refused() {
        let dir = temp_dir();
        write(dir.path(), "script", 0o755);
        let other = Owner {
            uid: nix::unistd::geteuid().as_raw() + 1,
            gid: nix::unistd::getegid().as_raw(),
        };
        let error = Whitelist::with_owner(dir.path(), other)
            .open("script")
            .unwrap_err()
            .to_string();
        assert!(error.contains("owned by"), "{error}");
    }

    #[test]
    fn root_owned_files_pass_the_production_rule() {
        if !am_root() {
            eprintln!("skipped: needs root to chown files to root:root");
            return;
        }
        let dir = temp_dir();
        let path = write(dir.path(), "script", 0o755);
        chown(dir.path(), Some(0), Some(0)).unwrap();
        chown(&path, Some(0), Some(0)).unwrap();
        assert!(Whitelist::new(dir.path()).open("script").is_ok());
        chown(&path, Some(65534), Some(0)).unwrap();
        let error = Whitelist::new(dir.path()).open("script").unwrap_err();
        assert!(error.to_string().contains("owned by 65534:0"), "{error}");
        chown(&path, Some(0), Some(65534)).unwrap();
        assert!(Whitelist::new(dir.path()).open("script").is_err());
    }

    #[test]
    fn replacing_the_file_after_open_does_not_change_what_is_held() {
        let dir = temp_dir();
        let whitelist = own_whitelist(dir.path());
        write(dir.path(), "script", 0o755);
        let verified = whitelist.open("script").unwrap();
        std::fs::remove_file(dir.path().join("script")).unwrap();
        std::fs::write(dir.path().join("script"), "evil").unwrap();
        let held = std::fs::read_to_string(format!("/proc/self/fd/{}", verified.raw_fd())).unwrap();
        assert!(held.contains("status"));
    }
}
