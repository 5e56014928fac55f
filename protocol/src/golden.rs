//! Golden files (feature `test-support`): a test's output compared byte for byte with a file kept
//! in the tree. With `UPDATE_GOLDEN=1` in the environment the file is written instead; review
//! the diff before committing it.

use std::fmt::Write as _;
use std::path::Path;

/// The environment variable that rewrites golden files instead of comparing them.
pub const BLESS_VAR: &str = "UPDATE_GOLDEN";

/// Lines of the same text shown around the lines that differ, and of each side's lines shown.
const CONTEXT: usize = 3;
const SHOWN: usize = 8;

/// Asserts that `actual` is the content of the golden file `path` (or, with `UPDATE_GOLDEN`
/// set, writes it there, creating its directory). Fails naming the file, the first line that
/// differs with a few lines of each side, and the variable that rewrites it.
#[track_caller]
pub fn assert_golden(path: impl AsRef<Path>, actual: impl AsRef<[u8]>) {
    let (path, actual) = (path.as_ref(), actual.as_ref());
    if std::env::var_os(BLESS_VAR).is_some() {
        if let Some(parent) = path.parent()
            && let Err(error) = std::fs::create_dir_all(parent)
        {
            panic!("golden file {}: {error}", parent.display());
        }
        if let Err(error) = std::fs::write(path, actual) {
            panic!("golden file {}: {error}", path.display());
        }
        return;
    }
    let expected = match std::fs::read(path) {
        Ok(expected) => expected,
        Err(error) => panic!(
            "golden file {}: {error} ({BLESS_VAR}=1 writes it)",
            path.display()
        ),
    };
    if expected != actual {
        panic!("{}", mismatch(path, &expected, actual));
    }
}

/// The failure message: where the output first differs from the golden file, diff-style.
fn mismatch(path: &Path, expected: &[u8], actual: &[u8]) -> String {
    let expected = String::from_utf8_lossy(expected);
    let actual = String::from_utf8_lossy(actual);
    let old: Vec<&str> = expected.split_inclusive('\n').collect();
    let new: Vec<&str> = actual.split_inclusive('\n').collect();
    let first = old
        .iter()
        .zip(&new)
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    // The lines both end with, after the first difference.
    let last = old[first..]
        .iter()
        .rev()
        .zip(new[first..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut message = format!(
        "output differs from golden file {} ({BLESS_VAR}=1 rewrites it)\n\
         first difference at line {} (golden file: {} lines, output: {} lines)\n\
         --- golden file\n+++ output\n",
        path.display(),
        first + 1,
        old.len(),
        new.len()
    );
    let line = |message: &mut String, sign: char, text: &str| {
        let text = text.strip_suffix('\n').unwrap_or(text);
        let _ignored = writeln!(message, "{sign}{text}");
    };
    for same in &old[first.saturating_sub(CONTEXT)..first] {
        line(&mut message, ' ', same);
    }
    for (side, sign) in [(&old, '-'), (&new, '+')] {
        let changed = &side[first..side.len() - last];
        for text in changed.iter().take(SHOWN) {
            line(&mut message, sign, text);
        }
        if changed.len() > SHOWN {
            let _ignored = writeln!(message, "{sign}… {} more lines", changed.len() - SHOWN);
        }
    }
    for same in old[old.len() - last..].iter().take(CONTEXT) {
        line(&mut message, ' ', same);
    }
    if old.get(first).map(|l| l.trim_end_matches('\n'))
        == new.get(first).map(|l| l.trim_end_matches('\n'))
    {
        message.push_str("(the texts differ in their final newline)\n");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::mismatch;
    use std::path::Path;

    #[test]
    fn a_mismatch_names_the_file_the_line_and_the_variable() {
        let message = mismatch(
            Path::new("tests/x.txt"),
            b"one\ntwo\nthree\nfour\n",
            b"one\ntwo\n3\nfour\n",
        );
        assert_eq!(
            message,
            "output differs from golden file tests/x.txt (UPDATE_GOLDEN=1 rewrites it)\n\
             first difference at line 3 (golden file: 4 lines, output: 4 lines)\n\
             --- golden file\n+++ output\n \
             one\n \
             two\n\
             -three\n\
             +3\n \
             four\n"
        );
    }

    #[test]
    fn a_missing_final_newline_is_said() {
        let message = mismatch(Path::new("x"), b"a\n", b"a");
        assert!(message.contains("line 1 "), "{message}");
        assert!(
            message.ends_with("(the texts differ in their final newline)\n"),
            "{message}"
        );
        let longer = mismatch(Path::new("x"), b"a\n", b"a\nb\n");
        assert!(
            longer.contains("line 2 ") && longer.ends_with("+b\n"),
            "{longer}"
        );
    }
}
