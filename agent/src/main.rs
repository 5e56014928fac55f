//! nodecare-agent: the per-node daemon.

fn main() {
    println!("nodecare-agent");
}
