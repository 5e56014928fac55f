//! Assembling and running the coordinator: the reconciler loop plus the HTTP API. Used by the
//! binary, and in-process by the demo and the tests with any [`Ganeti`] implementation.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nodecare_protocol::{HmacKey, KeyRing, VerifyPolicy};
use tokio::net::TcpListener;

use crate::config::Config;
use crate::http::ApiState;
use crate::reconcile::{Board, ReconcileSettings, Reconciler, RoundError};
use crate::repair::RepairClient;
use crate::scrape::{ScrapeSettings, Scraper};
use crate::store::{Store, StoreError};
use crate::watch::{WatchSettings, Watches};
use nodecare_ganeti::Ganeti;

/// Why the coordinator cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The state database is unusable.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The HTTP client cannot be built.
    #[error(transparent)]
    Scraper(#[from] crate::scrape::ScraperError),
}

/// A coordinator ready to run.
#[derive(Debug)]
pub struct Coordinator {
    reconciler: Reconciler,
    api: ApiState,
    interval: Duration,
    /// Longest time state changed without a write stays unreplicated.
    replication_interval: Duration,
    webhook: Option<crate::notify::WebhookSettings>,
    /// The agents' long-polls; `None`: rounds poll only.
    watches: Option<Watches>,
    /// The round loop's progress, which feeds the systemd watchdog.
    progress: Arc<nodecare_daemon::systemd::Progress>,
    /// What the state database forgets, and when.
    retention: crate::store::retention::RetentionConfig,
    /// The HTTP API's limits.
    server_limits: crate::server::ServerLimits,
    /// The API's local socket and who may use it ([`crate::server::serve_local`]).
    local_socket: Option<(tokio::net::UnixListener, crate::server::LocalAccess)>,
    /// Ganeti, for the job waits that wake the round loop ([`crate::job_wait`]).
    ganeti: Arc<dyn Ganeti>,
}

/// A watched verdict change starts a round this long after it, so that changes arriving
/// together (several nodes, a burst) start one round. A node a campaign rebooted that comes
/// back starts a round at once ([`Watches::take_returned`]): its group waits for it.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Resolves when the watches saw a change (never without watches, or once they are gone).
async fn changed(changes: Option<&mut tokio::sync::watch::Receiver<u64>>) -> Option<()> {
    match changes {
        Some(changes) => changes.changed().await.ok(),
        None => std::future::pending().await,
    }
}

impl Coordinator {
    /// Builds a coordinator for `node_name` talking to `ganeti`, trusting and signing with `key`.
    pub fn new(
        config: &Config,
        node_name: String,
        ganeti: Arc<dyn Ganeti>,
        key: HmacKey,
    ) -> Result<Self, StartError> {
        config.validate()?;
        let store = Arc::new(Store::open_dir(&config.state_dir)?);
        let scraper = Scraper::new(
            KeyRing::single(key.clone()),
            ScrapeSettings {
                concurrency: config.agents.concurrency,
                timeout: Config::duration(config.agents.timeout),
                policy: VerifyPolicy {
                    max_clock_skew_ms: Config::duration(config.agents.max_clock_skew)
                        .as_millis()
                        .try_into()
                        .unwrap_or(u64::MAX),
                },
            },
        )?;
        let watches = config.agents.watch.then(|| {
            Watches::new(
                Arc::new(scraper.ring().clone()),
                WatchSettings {
                    policy: VerifyPolicy {
                        max_clock_skew_ms: Config::duration(config.agents.max_clock_skew)
                            .as_millis()
                            .try_into()
                            .unwrap_or(u64::MAX),
                    },
                    timeout: Config::duration(config.agents.timeout),
                    ..WatchSettings::default()
                },
            )
        });
        // While an agent's watch is healthy, rounds read the report it delivered.
        let scraper = match &watches {
            Some(watches) => scraper.with_watched(
                watches.delivered(),
                crate::scrape::WatchBounds {
                    max_silence_ms: u64::try_from(watches.max_silence().as_millis())
                        .unwrap_or(u64::MAX),
                    expiry_margin_ms: crate::scrape::WATCHED_EXPIRY_MARGIN_MS,
                },
            ),
            None => scraper,
        };
        let replicator = config.replication.enabled.then(|| {
            Arc::new(crate::replica::Replicator::new(
                Arc::clone(&store),
                Arc::new(crate::replica::HttpPeers::new(
                    scraper.client().clone(),
                    Config::duration(config.agents.timeout).max(Duration::from_secs(5)),
                )),
                key.clone(),
                node_name.clone(),
                config.agent_urls(),
                config.replication_lease(),
            ))
        });
        // Every write to Ganeti and every request to an agent waits until a majority of the
        // master candidates keep the state that led to it.
        let ganeti: Arc<dyn Ganeti> = match &replicator {
            Some(replicator) => Arc::new(crate::replica::ReplicatedGaneti::new(
                ganeti,
                Arc::clone(replicator),
            )),
            None => ganeti,
        };
        let mut repairs = RepairClient::new(
            scraper.client().clone(),
            key,
            Config::duration(config.repair_request_ttl),
        );
        if let Some(replicator) = &replicator {
            repairs = repairs.with_replicator(Arc::clone(replicator));
        }
        let board = Arc::new(Board::default());
        let watches = watches.map(|watches| watches.with_board(&board));
        let incident_lock = Arc::new(tokio::sync::Mutex::new(()));
        let mut settings = reconcile_settings(config, node_name.clone());
        settings.gate.calendar = crate::config::calendar(config)?;
        let calendar = Arc::new(settings.gate.calendar.clone());
        if let Err(error) = crate::auth::Users::load(&config.users) {
            tracing::warn!(%error, "writes (cancel, the web page's actions) are refused until the users file is fixed");
        }
        // A what-if reads the agents as the rounds do, through the same scraper.
        let what_if = Arc::new(
            crate::what_if::WhatIfContext::new(settings.clone(), config.round_interval_duration()?)
                .with_agents(Arc::new(scraper.clone()))
                .with_rounds(board.round_running.subscribe()),
        );
        let ganeti_for_api = Arc::clone(&ganeti);
        let ganeti_for_waits = Arc::clone(&ganeti);
        let agents_for_api = repairs.clone();
        let mut reconciler = Reconciler::new(
            ganeti,
            Arc::clone(&store),
            scraper,
            repairs,
            settings,
            Arc::clone(&board),
            Arc::clone(&incident_lock),
        );
        if let Some(replicator) = &replicator {
            reconciler = reconciler.with_replicator(Arc::clone(replicator));
        }
        if config.balancing.enabled || config.failback.enabled {
            reconciler = reconciler.with_balancer(
                crate::balance::Balancer::new(config.balancing.clone(), None)
                    .with_failback(config.failback),
            );
        }
        let api = ApiState {
            store,
            board,
            incident_lock,
            node_name,
            users: Some(config.users.clone()),
            csrf_key: crate::http::random_key(),
            max_disrupted_nodes: config.max_disrupted_nodes,
            ganeti: Some(ganeti_for_api),
            agents: Some(agents_for_api),
            gate_view_max_age: crate::admission::view_max_age(config.round_interval_duration()?),
            replicator,
            failure_domains: config.domain_source(),
            what_if: Some(what_if),
            calendar,
            approval_hook: crate::approval_hook::ApprovalHook::new(&config.approvals)
                .map_err(|e| crate::config::ConfigError::Invalid(format!("approvals: {e:#}")))?,
        };
        let interval = config.round_interval_duration()?;
        let stall = Config::duration(config.round_stall_timeout);
        Ok(Self {
            reconciler,
            api,
            interval,
            replication_interval: Config::duration(config.replication.interval),
            webhook: config.webhook(),
            watches,
            progress: Arc::new(nodecare_daemon::systemd::Progress::new(
                stall,
                interval.saturating_add(stall),
            )),
            retention: config.retention,
            server_limits: crate::server::ServerLimits {
                reads_need_login: config.api_reads_need_login,
                ..crate::server::ServerLimits::with_max_connections(config.api_max_connections)
            },
            local_socket: None,
            ganeti: ganeti_for_waits,
        })
    }

    /// The same coordinator with the balancing duty reading the cluster from `source` (the
    /// RAPI client; without it an enabled duty reports that it has no source).
    #[must_use]
    pub fn with_cluster_source(mut self, source: Arc<dyn crate::balance::ClusterSource>) -> Self {
        self.set_cluster_source(source);
        self
    }

    /// Where the balancing duty reads the cluster from now on.
    pub fn set_cluster_source(&mut self, source: Arc<dyn crate::balance::ClusterSource>) {
        self.reconciler.set_cluster_source(source);
    }

    /// The round loop's progress: what feeds the systemd watchdog
    /// ([`nodecare_daemon::systemd::notify_ready_on_progress`]).
    pub fn progress(&self) -> Arc<nodecare_daemon::systemd::Progress> {
        Arc::clone(&self.progress)
    }

    /// The same coordinator serving its API on the local socket `listener` too, for the callers
    /// `access` allows.
    #[must_use]
    pub fn with_local_socket(
        mut self,
        listener: tokio::net::UnixListener,
        access: crate::server::LocalAccess,
    ) -> Self {
        self.local_socket = Some((listener, access));
        self
    }

    /// The API state (for in-process callers).
    pub fn api(&self) -> &ApiState {
        &self.api
    }

    /// Checks mastership now.
    pub async fn check_master(&self) -> Result<(), RoundError> {
        self.reconciler.check_master().await.map(drop)
    }

    /// Runs one round.
    pub async fn round(&mut self) -> Result<crate::reconcile::RoundSummary, RoundError> {
        self.reconciler.round().await
    }

    /// Deletes what the retention policy lets go (holding the incident lock, so no cancel or
    /// acknowledgement interleaves), then shrinks the database file. A failure is logged and
    /// retried at the next run.
    async fn apply_retention(&self) {
        let policy = self.retention.policy();
        let now_ms = nodecare_protocol::now_ms();
        let pruned = {
            let _guard = self.api.incident_lock.lock().await;
            self.api.store.apply_retention(&policy, now_ms)
        };
        match pruned {
            Ok(pruned) => {
                self.api.board.metrics.retention_deleted(&pruned);
                tracing::info!(
                    deleted = pruned.total(),
                    incidents = pruned.incidents,
                    intents = pruned.intents,
                    campaigns = pruned.campaigns,
                    balancing_moves = pruned.balancing_moves,
                    overrides = pruned.overrides,
                    audit = pruned.audit,
                    "retention run"
                );
            }
            Err(error) => tracing::warn!(%error, "retention run failed; retrying at the next"),
        }
        if let Err(error) = self.api.store.compact() {
            tracing::warn!(%error, "state database compaction failed; retrying at the next");
        }
    }

    /// Serves the API on `listener` and runs rounds every interval until `shutdown` completes.
    ///
    /// Each round starts with the mastership check: while this node is not the master the
    /// coordinator stands by (acts on nothing, follows no agent, checks again next interval) and
    /// starts acting when it becomes the master; a master that stops being it stops acting at its
    /// next round. Other round errors are logged and the next round retries.
    pub async fn run(
        mut self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), RoundError> {
        // A round's large buffers are mapped and given back when freed (see `memory`).
        crate::memory::map_large_allocations();
        let _webhook = match self.webhook.take() {
            Some(settings) => match self.api.board.start_webhook(settings) {
                Ok(handle) => Some(handle),
                Err(error) => {
                    tracing::error!(%error, "webhook notifications disabled");
                    None
                }
            },
            None => None,
        };
        let app = crate::http::router_with(self.api.clone(), self.server_limits);
        let (stop_local, local_stopped) = tokio::sync::oneshot::channel::<()>();
        let local_server = self.local_socket.take().map(|(listener, access)| {
            let app = app.clone();
            let board = Arc::clone(&self.api.board);
            let limits = self.server_limits;
            tokio::spawn(async move {
                crate::server::serve_local(listener, app, limits, access, board, async {
                    if local_stopped.await.is_err() {
                        tracing::debug!("local API stop sender dropped");
                    }
                })
                .await;
            })
        });
        let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
        let server_board = Arc::clone(&self.api.board);
        let limits = self.server_limits;
        let server = tokio::spawn(async move {
            crate::server::serve(listener, app, limits, server_board, async {
                // Either a send or the sender being dropped stops the server.
                if api_stopped.await.is_err() {
                    tracing::debug!("API stop sender dropped");
                }
            })
            .await;
        });
        // A job in flight that ends starts a round at once; dropped (stopped) with the loop.
        let _job_waits = crate::job_wait::JobWaits::spawn(
            Arc::clone(&self.ganeti),
            Arc::clone(&self.api.store) as Arc<dyn nodecare_exec::ledger::Ledger>,
            Arc::clone(&self.api.board),
            crate::job_wait::JobWaitSettings::default(),
        );
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut changes = self.watches.as_ref().map(Watches::subscribe);
        tokio::pin!(shutdown);
        let mut announced_standby = false;
        let board = Arc::clone(&self.api.board);
        // Retention runs after the first round that acts, then every interval (a coordinator
        // restarted more often than that still prunes).
        let mut retention_due = tokio::time::Instant::now();
        let result = loop {
            tokio::select! {
                () = &mut shutdown => break Ok(()),
                _ = ticker.tick() => {}
                () = board.wake.notified() => {
                    tracing::debug!("woken (a cancel, an acknowledgement, a job that ended): round now");
                    ticker.reset();
                }
                Some(()) = changed(changes.as_mut()) => {
                    let returned = self.watches.as_ref().is_some_and(Watches::take_returned);
                    if !returned {
                        tokio::select! {
                            () = &mut shutdown => break Ok(()),
                            () = tokio::time::sleep(DEBOUNCE) => {}
                        }
                    }
                    if let Some(changes) = changes.as_mut() {
                        changes.borrow_and_update();
                    }
                    tracing::debug!("a watched verdict changed: round now");
                    // The next interval counts from this round.
                    ticker.reset();
                }
            }
            self.progress.busy();
            // A stop is not held back by a round waiting on Ganeti or an agent: the round is
            // left where it is, as after a crash (everything it did is recorded before it is
            // done; the next start goes on from the state).
            let outcome = tokio::select! {
                () = &mut shutdown => {
                    tracing::info!("stopping during a round");
                    break Ok(());
                }
                outcome = self.reconciler.round() => outcome,
            };
            self.progress.idle();
            let was_acting = self.api.board.acting.load(Ordering::Relaxed);
            match outcome {
                Ok(summary) => {
                    if let Some(hook) = &self.api.approval_hook
                        && let Ok(status) = crate::approval_api::status(&self.api)
                    {
                        hook.after_round(
                            status.waiting,
                            &self.api.store,
                            &self.api.board,
                            &self.api.node_name,
                        );
                    }
                    if !was_acting {
                        announced_standby = false;
                        tracing::info!(node = %self.api.node_name, "this node is the master: acting");
                        self.api.board.acting.store(true, Ordering::Relaxed);
                    }
                    tracing::debug!(
                        round = summary.number,
                        ms = summary.duration_ms,
                        agents = summary.agents,
                        failed_agents = summary.agents_failed,
                        jobs = summary.jobs_submitted,
                        "round done"
                    );
                    if tokio::time::Instant::now() >= retention_due {
                        retention_due = tokio::time::Instant::now() + self.retention.interval();
                        self.apply_retention().await;
                    }
                    match self.api.store.size_bytes() {
                        Ok(bytes) => self.api.board.metrics.set_state_bytes(bytes),
                        Err(error) => tracing::debug!(%error, "state database size unknown"),
                    }
                }
                Err(error @ RoundError::NotMaster { .. }) => {
                    if was_acting {
                        tracing::warn!(%error, "no longer the master: standing by");
                    } else if !announced_standby {
                        tracing::info!(%error, "standing by until this node is the master");
                    }
                    announced_standby = true;
                    self.api.board.acting.store(false, Ordering::Relaxed);
                    // A standby follows no agent.
                    if let Some(watches) = self.watches.as_mut() {
                        watches.sync(&[]);
                    }
                    continue;
                }
                Err(error) => tracing::warn!(%error, "round aborted; retrying next round"),
            }
            if let Some(replicator) = self.reconciler.replicator()
                && let Err(error) = replicator.settle(self.replication_interval).await
            {
                tracing::warn!(%error, "the state changed in this round is not replicated yet");
            }
            if let Some(watches) = self.watches.as_mut() {
                // Under the read lock: a copy of every agent's target is megabytes.
                match self.reconciler.board().targets.read() {
                    Ok(targets) => watches.sync(&targets),
                    Err(_) => watches.sync(&[]),
                }
                match crate::campaign_exec::rebooting(&self.api.store) {
                    Ok(nodes) => watches.set_returning(nodes),
                    Err(error) => tracing::debug!(%error, "nodes rebooting unknown"),
                }
            }
            // What the round freed goes back to the system before the next one.
            crate::memory::release_free_memory();
        };
        if stop_api.send(()).is_err() {
            tracing::debug!("API already stopped");
        }
        if let Err(error) = server.await {
            tracing::debug!(%error, "API task ended abnormally");
        }
        if stop_local.send(()).is_err() {
            tracing::debug!("local API already stopped");
        }
        if let Some(local_server) = local_server
            && let Err(error) = local_server.await
        {
            tracing::debug!(%error, "local API task ended abnormally");
        }
        result
    }
}

/// The round's settings from the configuration (the daemon's, and a what-if's).
pub fn reconcile_settings(config: &Config, node_name: String) -> ReconcileSettings {
    ReconcileSettings {
        node_name,
        agent_urls: config.agent_urls(),
        gate: crate::reconcile::GateSettings {
            domains: config.domain_source(),
            cluster: config.caps(),
            groups: config.group_caps.clone(),
            breaker: config.breaker,
            grace: crate::config::Config::duration(config.grace),
            // Loaded with its time zone by the daemon ([`crate::config::calendar`]).
            calendar: nodecare_core::calendar::Calendar::always_open(),
            approvals: config.approvals.require.clone(),
            approvals_moves_above: config.approvals.moves_above,
        },
        job_chains: config.job_chains,
        ladder: config.repair_ladder.clone(),
        failback: config.failback,
        evacuation: config.evacuation_policy(),
        undrain_on_ack: config.undrain_on_ack,
        job_timeout: Config::duration(config.job_timeout),
        repair_timeout: Config::duration(config.repair_timeout),
        repair_poll: Config::duration(config.repair_poll),
        instance_repair: config.instance_repair.enabled,
        ssconf_dir: Some(config.ssconf_dir.clone()),
        record_rounds: config.record_rounds,
    }
}
