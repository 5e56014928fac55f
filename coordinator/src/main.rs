//! `nodecare-coordinator` daemon entry point.

fn main() -> anyhow::Result<()> {
    Ok(())
}
