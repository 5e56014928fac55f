//! Balancing (Ganeti's own `hbal`), behind the gate: [`crate::balance::Balancer`] proposes a
//! run's first job set and records its moves in the executor's ledger, which holds them in
//! force.

use std::sync::Arc;

use super::{Duty, Holds, Judged, Phase, RoundInput, Services, nothing};
use crate::balance::{Balancer, BalancingRound, ClusterSource};
use crate::exec::Changed;
use crate::gate::{InForce, Proposal};

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

impl Duty for Balancing {
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
            let incidents = services.store.incidents()?;
            self.round = self
                .balancer
                .propose(
                    services.executor,
                    services.board,
                    &incidents,
                    &input.nodes,
                    in_force,
                    input.now_ms,
                )
                .await?;
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
            Ok(self
                .balancer
                .execute(
                    services.ganeti,
                    services.executor,
                    services.board,
                    judged.decision,
                    &round,
                    input.now_ms,
                )
                .await?)
        })
    }

    fn set_cluster_source(&mut self, source: Arc<dyn ClusterSource>) {
        self.balancer.set_source(source);
    }
}
