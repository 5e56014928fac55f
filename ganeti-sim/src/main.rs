//! `nodecare-ganeti-sim`: a simulated Ganeti cluster served as RAPI v2 on loopback, for demos
//! and for crash tests of the coordinator binary (the simulation outlives the coordinator).
//!
//! Prints `listening on <url>` on stdout once ready (and writes the URL to `--url-file`). With
//! `--tls-dir`, serves HTTPS with a Ganeti-like self-signed certificate written to
//! `<dir>/rapi.pem`. Test hooks: `GET /sim/submissions`, `GET /sim/duplicates`, `GET /sim/state`,
//! `POST /sim/http-faults`, `POST /sim/fail-jobs`, `POST /sim/job-delay`, `POST /sim/node-memory`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use nodecare_ganeti::rapi::client::Credentials;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_ganeti_sim::{SimTls, Simulation};

#[derive(Debug, Parser)]
#[command(
    name = "nodecare-ganeti-sim",
    version,
    about = "Simulated Ganeti RAPI v2 cluster with fault injection"
)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Number of nodes `node<i>.<domain>` (node1 is the master).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Instances as `name:template:node-index,...` (diskless, sharedfile, drbd, plain, file, ...).
    #[arg(
        long,
        default_value = "inst1:diskless:1,inst2:diskless:2,inst3:sharedfile:2,inst4:drbd:2,inst5:file:3,inst6:plain:3"
    )]
    instances: String,
    /// Domain of node and instance names.
    #[arg(long, default_value = "sim.test")]
    domain: String,
    /// Full cluster layout as JSON (overrides --nodes/--instances/--domain).
    #[arg(long)]
    config: Option<PathBuf>,
    /// How long each job takes, in milliseconds.
    #[arg(long, default_value_t = 200)]
    job_delay_ms: u64,
    /// Serve HTTPS; the certificate (and key) go to `<dir>/rapi.pem`.
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// Require these RAPI credentials (`user:password` file, as the coordinator reads it).
    #[arg(long)]
    credentials: Option<PathBuf>,
    /// Write the URL to this file once listening.
    #[arg(long)]
    url_file: Option<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => SimConfig::from_spec(args.nodes, &args.instances, &args.domain)
            .map_err(anyhow::Error::msg)?,
    };
    config.job_delay_ms = args.job_delay_ms;
    let sim = Simulation::new(config).map_err(anyhow::Error::msg)?;
    if let Some(path) = &args.credentials {
        sim.require_credentials(Some(Credentials::from_file(path)?));
    }
    let tls = match &args.tls_dir {
        Some(dir) => {
            let tls = SimTls::ganeti_like().map_err(anyhow::Error::msg)?;
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let pem = dir.join("rapi.pem");
            std::fs::write(&pem, format!("{}{}", tls.key_pem, tls.cert_pem))
                .with_context(|| format!("writing {}", pem.display()))?;
            Some(tls)
        }
        None => None,
    };
    let server = sim
        .serve(args.listen, tls)
        .await
        .context("starting the simulated RAPI")?;
    if let Some(path) = &args.url_file {
        std::fs::write(path, format!("{}\n", server.url))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("listening on {}", server.url);
    tokio::signal::ctrl_c()
        .await
        .context("waiting for a signal")?;
    server.stop();
    Ok(())
}
