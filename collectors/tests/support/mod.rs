//! Helpers of the runner tests.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nodecare_collectors::whitelist::Owner;

/// The tests of a binary that counts descriptors and processes run one at a time.
pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The current user, so that the whitelists work unprivileged too.
pub(crate) fn owner() -> Owner {
    Owner {
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
    }
}

/// Writes an executable script `dir/name`.
pub(crate) fn script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// How many descriptors this process has open.
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}
