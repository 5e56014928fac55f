//! `nodecare-packaging-gen OUT_DIR`: writes man pages and completions for the packages.

use std::path::PathBuf;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(out), None) = (args.next(), args.next()) else {
        bail!("usage: nodecare-packaging-gen OUT_DIR");
    };
    let out = PathBuf::from(out);
    let written = nodecare_packaging_gen::generate(nodecare_packaging_gen::binaries(), &out)
        .with_context(|| format!("writing man pages and completions under {}", out.display()))?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}
