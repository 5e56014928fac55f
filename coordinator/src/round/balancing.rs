//! Balancing (Ganeti's own `hbal`), behind the gate: [`crate::balance::Balancer`] proposes a
//! run's first job set and records its moves in the executor's ledger, which holds them in
//! force.

use std::sync::Arc;

use super::{Judged, Phase, RoundDuty, RoundInput, Services, nothing};
use crate::balance::{Balancer, BalancingRound, ClusterSource};
use nodecare_core::gate::Holds;

use nodecare_core::gate::{InForce, Proposal};
use nodecare_exec::Changed;

/// The balancing duty.
#[derive(Debug)]
pub struct Balancing {
    balancer: Balancer,
    /// This round's proposal.
    round: BalancingRound,
}

impl Balancing {
    /// The duty around `balancer`.
    pub fn new(balancer: Balancer) -> Self {
        Self {
            balancer,
            round: BalancingRound::default(),
        }
    }
}

impl RoundDuty for Balancing {
    fn name(&self) -> &'static str {
        "balancing"
    }

    fn settle<'a>(
        &'a mut self,
        services: Services<'a>,
        changed: &'a [Changed],
        now_ms: u64,
    ) -> Phase<'a, ()> {
        Box::pin(async move {
            self.balancer
                .settle(services.executor, services.board, changed, now_ms)?;
            Ok(())
        })
    }

    /// What a run holds is in the executor's ledger.
    fn holds<'a>(
        &'a mut self,
        _services: Services<'a>,
        _input: &'a RoundInput,
    ) -> Phase<'a, Holds> {
        nothing()
    }

    fn propose<'a>(
        &'a mut self,
        services: Services<'a>,
        input: &'a RoundInput,
        in_force: &'a InForce,
    ) -> Phase<'a, Vec<Proposal>> {
        Box::pin(async move {
            let incidents = &input.node_repair.incidents;
            // Failback first: while instances go back home, hbal waits for them.
            let mut failback = nodecare_core::duty::balancing::Proposals::default();
            if self.balancer.failback().enabled {
                let in_flight = crate::balance::in_flight(services.executor)?;
                let mut blocked = nodecare_core::duty::balancing::blocked_nodes(
                    incidents,
                    &input.nodes,
                    in_force,
                );
                // A node a balancing move in flight takes an instance off or onto.
                for (node, holder) in &in_force.touched {
                    if matches!(holder, nodecare_core::gate::Holder::Balancing { .. }) {
                        blocked
                            .entry(node.clone())
                            .or_insert_with(|| "a balancing move in flight".to_owned());
                    }
                }
                failback = crate::failback::propose(
                    services.store,
                    services.board,
                    self.balancer.failback(),
                    &input.nodes,
                    &input.instances,
                    &blocked,
                    in_flight,
                    input.now_ms,
                    uuid::Uuid::new_v4,
                )?;
            }
            self.round = if failback.proposals.is_empty() {
                self.balancer
                    .propose(
                        services.executor,
                        services.board,
                        incidents,
                        &input.nodes,
                        in_force,
                        input.now_ms,
                    )
                    .await?
            } else {
                BalancingRound {
                    run: Some(uuid::Uuid::new_v4()),
                    proposals: failback,
                }
            };
            Ok(self.round.proposals.proposals.clone())
        })
    }

    fn execute<'a>(
        &'a mut self,
        services: Services<'a>,
        input: &'a RoundInput,
        judged: Judged<'a>,
    ) -> Phase<'a, usize> {
        Box::pin(async move {
            let round = std::mem::take(&mut self.round);
            let (jobs, submitted) = self
                .balancer
                .execute(
                    services.ganeti,
                    services.executor,
                    services.board,
                    judged.decision,
                    &round,
                    input.now_ms,
                )
                .await?;
            // Each failback move submitted counts an attempt of its instance.
            let home: Vec<String> = round
                .proposals
                .jobs
                .iter()
                .filter(|p| p.group == crate::failback::GROUP)
                .filter(|p| submitted.contains(&p.job.instance))
                .map(|p| p.job.instance.clone())
                .collect();
            services
                .board
                .metrics
                .balancing
                .failback("submitted", home.len());
            crate::failback::attempted(services.store, &home)?;
            Ok(jobs)
        })
    }

    fn set_cluster_source(&mut self, source: Arc<dyn ClusterSource>) {
        self.balancer.set_source(source);
    }
}
