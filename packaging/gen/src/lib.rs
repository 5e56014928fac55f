//! Man pages (clap_mangen) and bash/zsh/fish completions (clap_complete) for nodecare's three
//! binaries, generated from the same clap definitions the binaries parse their arguments with,
//! so the shipped documentation cannot drift from the real options.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;

/// A binary to document: its clap definition and its manual section.
#[derive(Debug)]
pub struct Binary {
    /// The binary's argument definition (its `command()`).
    pub command: Command,
    /// `8` for daemons run by the administrator, `1` for user commands.
    pub section: &'static str,
}

/// The binaries shipped in the packages.
pub fn binaries() -> Vec<Binary> {
    vec![
        Binary {
            command: nodecare_agent::command(),
            section: "8",
        },
        Binary {
            command: nodecare_coordinator::command(),
            section: "8",
        },
        Binary {
            command: nodecare_cli::command(),
            section: "1",
        },
    ]
}

/// Writes `man/<name>[-<subcommand>…].<section>` for every binary and visible subcommand, and
/// `completions/<name>.bash`, `completions/_<name>`, `completions/<name>.fish`, under `out`.
/// Returns the files written.
pub fn generate(binaries: Vec<Binary>, out: &Path) -> io::Result<Vec<PathBuf>> {
    let man_dir = out.join("man");
    let completion_dir = out.join("completions");
    fs::create_dir_all(&man_dir)?;
    fs::create_dir_all(&completion_dir)?;
    let mut written = Vec::new();
    for Binary { command, section } in binaries {
        let name = command.get_name().to_owned();
        let mut command = command.disable_help_subcommand(true);
        command.build();
        write_man_pages(&command, section, &man_dir, &mut written)?;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            written.push(clap_complete::generate_to(
                shell,
                &mut command,
                &name,
                &completion_dir,
            )?);
        }
    }
    Ok(written)
}

/// One page per command and per visible subcommand (`nodecare-agent-diagnose.8`), as
/// `git-commit(1)` does; each page's SEE ALSO-style subcommand list names the others.
fn write_man_pages(
    command: &Command,
    section: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> io::Result<()> {
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_man_pages(sub, section, dir, written)?;
    }
    let page = clap_mangen::Man::new(command.clone())
        .section(section)
        .source(format!("nodecare {}", env!("CARGO_PKG_VERSION")))
        .manual("nodecare");
    written.push(page.generate_to(dir)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Command {
        Command::new("demo")
            .about("demo daemon")
            .arg(
                clap::Arg::new("config")
                    .long("config")
                    .help("configuration file"),
            )
            .subcommand(Command::new("diagnose").about("run diagnose scripts once"))
            .subcommand(Command::new("secret").hide(true))
    }

    #[test]
    fn writes_a_page_per_visible_subcommand_and_three_completions() {
        let out = tempfile::tempdir().unwrap();
        let written = generate(
            vec![Binary {
                command: sample(),
                section: "8",
            }],
            out.path(),
        )
        .unwrap();
        let mut names: Vec<String> = written
            .iter()
            .map(|path| path.strip_prefix(out.path()).unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "completions/_demo",
                "completions/demo.bash",
                "completions/demo.fish",
                "man/demo-diagnose.8",
                "man/demo.8",
            ]
        );
        let page = fs::read_to_string(out.path().join("man/demo.8")).unwrap();
        assert!(page.contains(".TH demo 8"), "{page}");
        assert!(page.contains("configuration file"), "{page}");
        assert!(page.contains("demo\\-diagnose(8)"), "{page}");
        let bash = fs::read_to_string(out.path().join("completions/demo.bash")).unwrap();
        assert!(
            bash.contains("diagnose") && bash.contains("--config"),
            "{bash}"
        );
    }

    #[test]
    fn every_shipped_binary_is_documented() {
        let out = tempfile::tempdir().unwrap();
        let written = generate(binaries(), out.path()).unwrap();
        for name in ["nodecare-agent", "nodecare-coordinator"] {
            assert!(
                written.contains(&out.path().join(format!("man/{name}.8"))),
                "{name}"
            );
            assert!(
                written.contains(&out.path().join(format!("completions/_{name}"))),
                "{name}"
            );
        }
        assert!(written.contains(&out.path().join("man/nodecare.1")));
        assert!(written.contains(&out.path().join("completions/nodecare.fish")));
    }
}
