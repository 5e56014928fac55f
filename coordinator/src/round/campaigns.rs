//! Rolling maintenance campaigns (hroller's plans, executed), behind the gate: a campaign due
//! for its next group proposes it; its operations are entries of the executor's ledger
//! ([`crate::campaign_exec`]).

use super::{Judged, Phase, RoundDuty, RoundError, RoundInput, Services};
use crate::campaign_exec::{self, CampaignRound, Context};
use nodecare_core::campaign::Record;
use nodecare_core::gate::Holds;
use nodecare_core::gate::{InForce, Proposal};

/// The campaigns' duty.
#[derive(Debug, Default)]
pub struct Campaigns {
    /// What the state machine sees this round (from the round's input, in `observe`).
    world: Option<nodecare_core::campaign::World>,
    /// The campaigns this round works on, with their operations, read once in `observe`
    /// ([`campaign_exec::follow`]).
    active: Option<Vec<Record>>,
    /// This round's proposals.
    round: Option<CampaignRound>,
    /// What the last rounds left of each campaign (operations, plan).
    known: campaign_exec::Known,
}

fn world_of(
    services: Services<'_>,
    input: &RoundInput,
) -> Result<nodecare_core::campaign::World, RoundError> {
    let mut world = campaign_exec::world(
        &input.nodes,
        &input.instances,
        input.agents_seen.clone(),
        &input.view.storage,
        &services.settings.node_name,
        input.now_ms,
    );
    // Only a running campaign plans moves the gate did not judge (`World::held`): the ledger
    // is read for them alone.
    if services
        .store
        .campaigns()?
        .iter()
        .any(|r| !r.state().is_final())
    {
        world.held = campaign_exec::held(services.executor, &input.grants)?;
    }
    Ok(world)
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

impl RoundDuty for Campaigns {
    fn name(&self) -> &'static str {
        "campaigns"
    }

    /// Every running group moves on first (hooks followed, steps advanced, their jobs
    /// submitted), so that a group that ends in this round frees its nodes for the next
    /// group's proposal in the same round.
    fn observe<'a>(
        &'a mut self,
        services: Services<'a>,
        input: &'a RoundInput,
    ) -> Phase<'a, usize> {
        Box::pin(async move {
            let world = world_of(services, input)?;
            let (submitted, active) =
                campaign_exec::follow(context(services, input), &world, &mut self.known).await?;
            self.world = Some(world);
            self.active = Some(active);
            Ok(submitted)
        })
    }

    fn holds<'a>(&'a mut self, services: Services<'a>, _input: &'a RoundInput) -> Phase<'a, Holds> {
        Box::pin(async move {
            let records = campaign_exec::stored_with_ops(
                services.store,
                services.executor,
                self.active.as_deref().unwrap_or_default(),
            )?;
            Ok(nodecare_core::campaign::held(&records))
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
            let world = match self.world.take() {
                Some(world) => world,
                None => world_of(services, input)?,
            };
            let active = match self.active.take() {
                Some(active) => active,
                None => campaign_exec::active(context(services, input), &mut self.known)?,
            };
            let round = campaign_exec::prepare(
                context(services, input),
                active,
                &world,
                campaign_exec::Planning {
                    view: &input.view,
                    instances: &input.instances,
                    groups: input.groups.as_deref().unwrap_or_default(),
                    master,
                },
                &mut self.known,
            )
            .await?;
            let proposals = round.proposals.clone();
            self.world = Some(world);
            self.round = Some(round);
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
            let (Some(round), Some(world)) = (self.round.take(), self.world.take()) else {
                return Ok(0);
            };
            let executed = campaign_exec::execute(
                context(services, input),
                judged.decision,
                round,
                &world,
                &mut self.known,
            )
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
