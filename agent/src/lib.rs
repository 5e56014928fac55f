//! nodecare-agent as a library: the pieces the daemon is built from, testable in-process.
//!
//! [`serve`] starts the whole agent (scheduler, signer, HTTP server) on a given listener, so that
//! tests and demos can run agents in-process on `127.0.0.1:0`.

pub mod boot;
pub mod cache;
pub mod check;
pub mod cli;
pub mod config;
pub mod http;
pub mod limits;
pub mod load;
pub mod metrics;
pub mod peers;
pub mod refusals;
pub mod repair;
pub mod replica;
pub mod scheduler;
pub mod script_check;
pub mod signing;
pub mod state;
pub mod storage;

pub use nodecare_daemon::{logging, systemd};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use nodecare_collectors::diagnose::{DiagnoseCollector, DiagnoseRun};
use nodecare_collectors::runner::Runner;
use nodecare_collectors::{CollectError, Registry};
use nodecare_protocol::Report;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::cache::ReportCache;
use crate::config::Config;
use crate::http::HttpState;
use crate::signing::DiagnoseSigner;
use crate::state::StateDir;

/// Why the agent cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The state directory is unusable.
    #[error(transparent)]
    State(#[from] state::StateError),
    /// Signing cannot be set up.
    #[error(transparent)]
    Signing(#[from] signing::SigningError),
    /// The listener is unusable.
    #[error("listener: {0}")]
    Listener(String),
}

/// The collectors an agent runs, built from its configuration.
#[derive(Debug)]
pub struct Collectors {
    /// Every collector in mond's list order (the diagnose collector last, as in Ganeti).
    pub registry: Registry,
    /// The diagnose collector (also in `registry`).
    pub diagnose: Arc<DiagnoseCollector>,
    /// The verdict persisted before a restart, if any.
    pub restored: Option<DiagnoseRun>,
    /// What confd says about this node (shown by `/healthz` and `/1/debug/confd`); `None` off
    /// a Ganeti cluster.
    pub cluster: Option<nodecare_collectors::confd::ViewHandle>,
    /// Where the signed storage report reads DRBD; `None`: the report answers 503.
    pub storage: Option<storage::StorageSource>,
}

/// Builds the diagnose collector (restoring the last verdict) and appends it to `builtin`, the
/// registry of built-in collectors (possibly empty).
pub fn collectors(config: &Config, mut builtin: Registry) -> Result<Collectors, AgentError> {
    let state = StateDir::open(&config.state_dir)?;
    let restored = match state.load_verdict() {
        Ok(restored) => restored,
        Err(error) => {
            tracing::warn!(%error, "ignoring the persisted verdict");
            None
        }
    };
    let diagnose = Arc::new(DiagnoseCollector::new(
        config.diagnose(),
        Runner::new(config.max_concurrent_scripts),
        restored.as_ref().map(|run| run.verdict.clone()),
    ));
    builtin.register(diagnose.clone());
    Ok(Collectors {
        registry: builtin,
        diagnose,
        restored,
        cluster: None,
        storage: None,
    })
}

/// A running agent.
#[derive(Debug)]
pub struct RunningAgent {
    local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
    cache: Arc<ReportCache>,
}

impl RunningAgent {
    /// The address the HTTP server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The report cache (for tests).
    pub fn cache(&self) -> &Arc<ReportCache> {
        &self.cache
    }

    /// Stops the scheduler and the server and waits for them (open connections are dropped).
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        while self.tasks.join_next().await.is_some() {}
    }

    /// Runs until `signal` completes, then shuts down.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }
}

fn placeholder(collector: &dyn nodecare_collectors::Collector, reason: &str) -> Report {
    scheduler::report_for(
        collector,
        Err(CollectError::Source {
            source_name: collector.spec().name.clone(),
            reason: reason.to_owned(),
        }),
    )
}

/// Starts the agent with `collectors` on `listener`.
pub async fn serve_with(
    config: Config,
    collectors: Collectors,
    listener: TcpListener,
) -> Result<RunningAgent, AgentError> {
    serve_with_limits(config, collectors, listener, None).await
}

/// [`serve_with`] with the connection caps and timeouts given (`None`: the defaults, lowered to
/// this process's descriptor limit).
pub async fn serve_with_limits(
    config: Config,
    collectors: Collectors,
    listener: TcpListener,
    connection_limits: Option<limits::ConnectionLimits>,
) -> Result<RunningAgent, AgentError> {
    config.validate()?;
    let local_addr = listener
        .local_addr()
        .map_err(|error| AgentError::Listener(error.to_string()))?;
    let node = config.resolved_node_name();
    let state = StateDir::open(&config.state_dir)?;
    let signer = signing::load_signer(&config.hmac_key, &node);
    let signer_key = signer.clone();
    let key_problem = signer.as_ref().err().cloned();
    if let Some(error) = &key_problem {
        tracing::error!(%error, "signed diagnose reports are unavailable");
    }
    let mut signer = DiagnoseSigner::new(
        signer,
        state,
        config.signature_ttl(),
        config.diagnose_interval(),
    )?
    .with_boot(config.boot());

    let Collectors {
        registry,
        diagnose,
        restored,
        cluster,
        storage: storage_source,
    } = collectors;
    let storage_signer = storage::StorageSigner::new(
        signer_key.clone(),
        signer.sequencer(),
        storage_source
            .as_ref()
            .map_or(storage::STORAGE_INTERVAL, |source| source.interval),
        config.signature_ttl_intervals,
    );
    let load_signer = load::LoadSigner::new(
        signer_key.clone(),
        signer.sequencer(),
        load::LOAD_INTERVAL,
        config.signature_ttl_intervals,
    );
    let sign_counters = signer.counters();
    let cache = Arc::new(ReportCache::new(&registry));
    let now = Instant::now();
    for (position, collector) in registry.iter().enumerate() {
        cache.store(
            position,
            &placeholder(collector.as_ref(), "not collected yet"),
            now,
        );
    }
    if let Some(error) = &key_problem {
        cache.store_signed(cache::CachedSigned::Unavailable(format!(
            "no HMAC key: {error}"
        )));
    }
    if storage_source.is_none() {
        cache.store_storage(cache::CachedSigned::Unavailable(
            "this agent does not read DRBD".into(),
        ));
    }
    // Serve the verdict from before the restart, marked stale, until the first fresh run.
    if let Some(run) = &restored
        && let Some(position) = cache.position(
            nodecare_collectors::diagnose::DIAGNOSE_CATEGORY,
            nodecare_collectors::diagnose::DIAGNOSE_NAME,
        )
    {
        let mut report = scheduler::report_for(
            diagnose.as_ref(),
            Ok(nodecare_collectors::diagnose::verdict_data(&run.verdict)),
        );
        report.timestamp = run.collected_at_ms.saturating_mul(1_000_000);
        let age =
            Duration::from_millis(nodecare_protocol::now_ms().saturating_sub(run.collected_at_ms));
        cache.store(position, &report, now.checked_sub(age).unwrap_or(now));
        cache.store_signed(signer.sign_for_cache(run, true).await);
        tracing::info!(status = %run.verdict.status, "serving the persisted verdict (stale) until the first run");
    } else if key_problem.is_none() {
        // No verdict yet: a signed `unknown`, marked stale, until the first run. The coordinator
        // then sees an agent that answers and authenticates but has nothing to act on (never a
        // disruption), not an unreachable one (which counts towards the storm breaker).
        let pending = DiagnoseRun {
            verdict: nodecare_collectors::diagnose::unknown_verdict(
                cache::NOT_DIAGNOSED_YET.into(),
            ),
            collected_at_ms: nodecare_protocol::now_ms(),
        };
        cache.store_signed(signer.sign_for_cache(&pending, true).await);
    }

    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();

    // Sign and persist every published verdict.
    tasks.spawn(signer.run(
        diagnose.subscribe(),
        Arc::clone(&cache),
        shutdown_rx.clone(),
    ));

    // Read, sign and cache the DRBD state.
    if let Some(source) = storage_source {
        tasks.spawn(storage_signer.run(source, Arc::clone(&cache), shutdown_rx.clone()));
    }

    // Sign the load collectors' reports for the balancer.
    tasks.spawn(load_signer.run(Arc::clone(&cache), shutdown_rx.clone()));

    let diagnose_position = cache.position(
        nodecare_collectors::diagnose::DIAGNOSE_CATEGORY,
        nodecare_collectors::diagnose::DIAGNOSE_NAME,
    );
    let wake_diagnose = Arc::new(tokio::sync::Notify::new());
    for (position, collector) in registry.iter().enumerate() {
        tasks.spawn(scheduler::run_collector(
            Arc::clone(collector),
            position,
            Arc::clone(&cache),
            node.clone(),
            shutdown_rx.clone(),
            (Some(position) == diagnose_position).then(|| Arc::clone(&wake_diagnose)),
        ));
    }
    let refusals = Arc::new(refusals::Refusals::default());
    tasks.spawn(
        Arc::clone(&refusals).run_summaries(refusals::SUMMARY_INTERVAL, shutdown_rx.clone()),
    );
    let check = match signing::load_key(&config.hmac_key) {
        Ok(key) => match check::CheckService::new(
            nodecare_protocol::KeyRing::single(key),
            node.clone(),
            config.repair(&node).verify_policy,
            check::DEFAULT_MIN_CHECK_INTERVAL,
            wake_diagnose,
            Arc::clone(&cache),
            &config.state_dir.join("check"),
            Arc::clone(&refusals),
        ) {
            Ok(service) => Some(Arc::new(service)),
            Err(error) => {
                tracing::error!(%error, "signed checks are unavailable");
                None
            }
        },
        Err(error) => {
            tracing::error!(%error, "signed checks are unavailable");
            None
        }
    };

    let replica = match signing::load_key(&config.hmac_key) {
        Ok(key) => match replica::ReplicaKeeper::open_counting(
            key,
            node.clone(),
            config.repair(&node).verify_policy,
            config.state_dir.join("replica"),
            Arc::clone(&refusals),
        ) {
            Ok(keeper) => Some(Arc::new(keeper)),
            Err(error) => {
                tracing::error!(%error, "replicas of the coordinator's state are unavailable");
                None
            }
        },
        Err(_) => None,
    };
    let repair = repair::open_with_key_file(config.repair(&node), &config.hmac_key);
    let peers = peers::ReservedPeers::new(
        Some(config.ssconf_dir.clone()),
        config.reserved_peers.clone(),
    );
    tasks.spawn(Arc::clone(&peers).run_refresh(peers::REFRESH_INTERVAL, shutdown_rx.clone()));
    let http_state = Arc::new(HttpState {
        cache: Arc::clone(&cache),
        started: now,
        node,
        repair,
        check,
        replica,
        diagnose: Arc::clone(&diagnose),
        sign_counters,
        stale_after: config.signature_ttl(),
        cluster,
        waiters: limits::Slots::with_reserve(
            cache::MAX_WAITERS,
            limits::MAX_WAITERS_PER_PEER,
            limits::RESERVED_WAITERS,
        ),
        peers: Arc::clone(&peers),
        refusals: Arc::clone(&refusals),
    });
    let limits = connection_limits.unwrap_or_else(limits::ConnectionLimits::for_this_process);
    let connection_slots =
        limits::Slots::with_reserve(limits.max_connections, limits.max_per_peer, limits.reserved);
    let mut accept_shutdown = shutdown_rx.clone();
    tasks.spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = accept_shutdown.changed() => break,
                // Reap finished connection tasks as we go.
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // E.g. EMFILE: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Beyond the caps: closed at once, counted, not logged one by one. The cluster's
            // own callers, known by their address, may also take the reserve.
            let share = http_state.peers.share(peer.ip());
            let Ok(slot) = connection_slots.try_take_as(peer.ip(), share) else {
                http_state.refusals.count_from(
                    refusals::Endpoint::Connection,
                    hyper::StatusCode::SERVICE_UNAVAILABLE,
                    Some(peer.ip()),
                );
                drop(stream);
                continue;
            };
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "cannot disable Nagle");
            }
            let state = Arc::clone(&http_state);
            connections.spawn(serve_connection(stream, peer, state, limits, slot));
        }
        connections.shutdown().await;
    });

    Ok(RunningAgent {
        local_addr,
        shutdown,
        tasks,
        cache,
    })
}

/// Requests of one connection in progress, and when the last one ended.
#[derive(Debug)]
struct Activity {
    in_progress: usize,
    since: Instant,
}

/// Serves one connection until it ends, its header or idle timeout passes or the client goes.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    state: Arc<HttpState>,
    limits: limits::ConnectionLimits,
    slot: limits::Slot,
) {
    let activity = Arc::new(std::sync::Mutex::new(Activity {
        in_progress: 0,
        since: Instant::now(),
    }));
    let tracked = Arc::clone(&activity);
    let service = service_fn(move |request| {
        let state = Arc::clone(&state);
        let activity = Arc::clone(&tracked);
        async move {
            let started = RequestInProgress::start(activity);
            let response = refusals::with_peer(peer.ip(), http::route(state, request, peer)).await;
            drop(started);
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits::MAX_CONNECTION_BUFFER_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let mut idle_check = tokio::time::interval(Duration::from_millis(250).min(limits.idle_timeout));
    loop {
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(error) = ended {
                    tracing::debug!(%error, "connection ended with an error");
                }
                break;
            }
            _ = idle_check.tick() => {
                let idle = {
                    let activity = activity.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    activity.in_progress == 0 && activity.since.elapsed() >= limits.idle_timeout
                };
                if idle {
                    tracing::trace!(%peer, "idle connection closed");
                    break;
                }
            }
        }
    }
    drop(slot);
}

/// Marks a request in progress on its connection until dropped.
struct RequestInProgress(Arc<std::sync::Mutex<Activity>>);

impl RequestInProgress {
    fn start(activity: Arc<std::sync::Mutex<Activity>>) -> Self {
        activity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .in_progress += 1;
        Self(activity)
    }
}

impl Drop for RequestInProgress {
    fn drop(&mut self) {
        let mut activity = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        activity.in_progress = activity.in_progress.saturating_sub(1);
        activity.since = Instant::now();
    }
}

/// Starts the agent with its default collectors on `listener`.
pub async fn serve(config: Config, listener: TcpListener) -> Result<RunningAgent, AgentError> {
    let node = config.resolved_node_name();
    let builtin_config =
        nodecare_collectors::builtin::BuiltinConfig::for_node(&node, &config.hmac_key);
    serve_builtin(config, builtin_config, listener).await
}

/// Where the built-in collectors read (`/proc`, `drbdsetup`, confd), for [`serve_builtin`].
pub use nodecare_collectors::builtin::BuiltinConfig;

/// Starts the agent with its default collectors configured by `builtin_config` (where they
/// read `/proc`, `drbdsetup`, …) on `listener`.
pub async fn serve_builtin(
    config: Config,
    builtin_config: nodecare_collectors::builtin::BuiltinConfig,
    listener: TcpListener,
) -> Result<RunningAgent, AgentError> {
    let mut builtin = Registry::new();
    nodecare_collectors::builtin::register_all(&mut builtin, &builtin_config);
    // Plugins come after the built-ins, in mond's list order; refused ones are only logged.
    let plugin_runner = Runner::new(config.max_concurrent_scripts);
    let refused = nodecare_collectors::plugin::register_plugins(
        &mut builtin,
        &config.plugins(),
        &plugin_runner,
    )
    .await;
    for (name, reason) in refused {
        tracing::warn!(plugin = %name, %reason, "collector plugin refused");
    }
    let mut collectors = collectors(&config, builtin)?;
    collectors.cluster = builtin_config.cluster.clone();
    collectors.storage = Some(storage::StorageSource {
        drbd: Arc::new(nodecare_collectors::builtin::drbd::Drbd::new(
            &builtin_config,
        )),
        interval: storage::STORAGE_INTERVAL,
    });
    serve_with(config, collectors, listener).await
}

/// The command-line definition, for generated documentation (man pages, shell completions).
pub fn command() -> clap::Command {
    <cli::Cli as clap::CommandFactory>::command()
}
