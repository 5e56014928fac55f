//! Rolling maintenance campaigns (hroller's plans, executed), behind the gate: a campaign due
//! for its next group proposes it; its operations are entries of the executor's ledger
//! ([`crate::campaign_exec`]).

use super::{Duty, Holds, Judged, Phase, RoundInput, Services};
use crate::campaign_exec::{self, CampaignRound, Context};
use crate::gate::{InForce, Proposal};

/// The campaigns' duty.
#[derive(Debug, Default)]
pub struct Campaigns {
    /// This round's proposals and what the state machine saw.
    round: Option<(CampaignRound, crate::campaign::World)>,
}

fn context<'a>(services: Services<'a>, input: &'a RoundInput) -> Context<'a> {
    Context {
        ganeti: services.ganeti,
        store: services.store,
        executor: services.executor,
        repairs: services.repairs,
        agent_urls: &services.settings.agent_urls,
        nodes: &input.nodes,
        domains: &services.settings.gate.domains,
    }
}

impl Duty for Campaigns {
    fn name(&self) -> &'static str {
        "campaigns"
    }

    fn holds<'a>(&'a mut self, services: Services<'a>, _input: &'a RoundInput) -> Phase<'a, Holds> {
        Box::pin(async move {
            Ok(Holds {
                disrupted: campaign_exec::holds(services.store)?,
                touched: campaign_exec::touched(services.store)?,
                left: campaign_exec::flag_changes(services.store, services.executor)?,
            })
        })
    }

    fn propose<'a>(
        &'a mut self,
        services: Services<'a>,
        input: &'a RoundInput,
        _in_force: &'a InForce,
    ) -> Phase<'a, Vec<Proposal>> {
        Box::pin(async move {
            let master = &services.settings.node_name;
            let world = campaign_exec::world(
                &input.nodes,
                &input.instances,
                input.agents_seen.clone(),
                &input.view.storage,
                master,
                input.now_ms,
            );
            let round = campaign_exec::prepare(
                context(services, input),
                &world,
                &input.view,
                &input.instances,
                input.groups.as_deref().unwrap_or_default(),
                master,
            )
            .await?;
            let proposals = round.proposals.clone();
            self.round = Some((round, world));
            Ok(proposals)
        })
    }

    fn execute<'a>(
        &'a mut self,
        services: Services<'a>,
        input: &'a RoundInput,
        judged: Judged<'a>,
    ) -> Phase<'a, usize> {
        Box::pin(async move {
            let Some((round, world)) = self.round.take() else {
                return Ok(0);
            };
            let executed =
                campaign_exec::execute(context(services, input), judged.decision, &round, &world)
                    .await?;
            if executed.again {
                // Its next group (or its completion) is planned by the next round: now, not at
                // the next interval.
                tracing::debug!("a campaign's group or node finished: next round now");
                services.board.wake.notify_one();
            }
            Ok(executed.submitted)
        })
    }
}
