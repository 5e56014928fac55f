//! Golden files of what people read: `cli/tests/<dir>/<name>`; `UPDATE_GOLDEN=1` rewrites them.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

/// Asserts that `text` is the golden file `cli/tests/<dir>/<name>`.
pub(crate) fn assert_golden(dir: &str, name: &str, text: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir)
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        text, expected,
        "{name} differs (UPDATE_GOLDEN=1 rewrites it)"
    );
}
