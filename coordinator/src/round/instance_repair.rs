//! Instance auto-repair (harep's duty), behind the gate: it reads harep's tags and the jobs of
//! pending repairs from Ganeti, proposes each repair (nodes in the grace of a planned
//! disruption are left alone), and runs what the gate admitted
//! ([`crate::instance_repair_exec`]).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{Judged, Phase, RoundDuty, RoundInput, Services};
use crate::instance_repair_exec::{self as exec, Collected};
use nodecare_core::duty::instance_repair::{Assessment, Inputs, assess};
use nodecare_core::gate::Holds;
use nodecare_core::gate::{self, InForce, Proposal};

/// The instance-repair duty.
#[derive(Debug, Default)]
pub struct InstanceRepair {
    /// What this round read of Ganeti (none: the duty is off, or Ganeti could not be read).
    collected: Option<Collected>,
    /// This round's assessment.
    assessment: Option<Assessment>,
}

impl RoundDuty for InstanceRepair {
    fn name(&self) -> &'static str {
        "instance-repair"
    }

    /// The repairs whose jobs still run hold their instances' nodes (read even with the duty
    /// off: `nodecare harep` runs too).
    fn holds<'a>(&'a mut self, services: Services<'a>, input: &'a RoundInput) -> Phase<'a, Holds> {
        Box::pin(async move {
            self.assessment = None;
            self.collected = match (services.settings.instance_repair, input.groups.as_ref()) {
                (true, Some(groups)) => {
                    match exec::collect(
                        services.ganeti,
                        services.executor,
                        &input.instances,
                        groups.clone(),
                    )
                    .await
                    {
                        Ok(collected) => Some(collected),
                        Err(error) => {
                            tracing::warn!(%error, "instance repair: cannot read Ganeti; skipped this round");
                            None
                        }
                    }
                }
                _ => None,
            };
            let held = match &self.collected {
                Some(collected) => exec::holds(
                    &input.instances,
                    &input.nodes,
                    Some(&collected.jobs),
                    &collected.repairs_in_flight,
                ),
                None => {
                    let (jobs, _) = exec::job_states(services.ganeti, &input.instances).await;
                    exec::holds(
                        &input.instances,
                        &input.nodes,
                        Some(&jobs),
                        &BTreeMap::new(),
                    )
                }
            };
            Ok(Holds {
                disrupted: held.disrupted,
                touched: held.touched,
                left: Vec::new(),
            })
        })
    }

    fn propose<'a>(
        &'a mut self,
        _services: Services<'a>,
        input: &'a RoundInput,
        _in_force: &'a InForce,
    ) -> Phase<'a, Vec<Proposal>> {
        Box::pin(async move {
            let Some(collected) = &self.collected else {
                return Ok(Vec::new());
            };
            let inputs = Inputs {
                now: i64::try_from(input.now_ms / 1000).unwrap_or(i64::MAX),
                cluster_tags: &collected.cluster_tags,
                groups: &collected.groups,
                nodes: &input.nodes,
                instances: &input.instances,
                jobs: &collected.jobs,
                degraded: &input.degraded,
                in_flight: &collected.in_flight,
            };
            let assessment = assess(&inputs, &mut Uuid::new_v4);
            let proposals = assessment
                .proposals()
                .into_iter()
                .filter(|p| {
                    !p.disrupts
                        .iter()
                        .chain(p.touches.iter())
                        .any(|n| input.graced.contains_key(n))
                })
                .collect();
            self.assessment = Some(assessment);
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
            let (Some(collected), Some(assessment)) =
                (self.collected.take(), self.assessment.take())
            else {
                return Ok(0);
            };
            let decision = judged.decision;
            let blocked: BTreeMap<&str, String> = decision
                .refused()
                .filter(|(p, _)| p.duty == gate::Duty::InstanceRepair)
                .flat_map(|(p, why)| {
                    assessment
                        .repairs
                        .iter()
                        .filter(move |r| r.proposal.holder == p.holder)
                        .map(move |r| (r.plan.instance.as_str(), why.to_string()))
                })
                .collect();
            let shown: Vec<nodecare_protocol::status::InstanceRepairSummary> = assessment
                .instances
                .iter()
                .filter(|i| i.state != "Healthy")
                .map(|i| nodecare_protocol::status::InstanceRepairSummary {
                    instance: i.instance.clone(),
                    state: i.state.clone(),
                    needs: i.needs.map(|t| t.as_str().to_owned()),
                    note: i.note.clone(),
                    blocked_by: blocked
                        .get(i.instance.as_str())
                        .cloned()
                        .or_else(|| i.blocked.clone()),
                })
                .collect();
            services
                .board
                .metrics
                .set_instance_repairs_blocked(blocked.len(), assessment.blocked().len());
            if let Ok(mut board) = services.board.instance_repairs.write() {
                *board = shown;
            }
            let report = exec::run_instance_repairs(
                services.ganeti,
                services.executor,
                &assessment,
                decision,
                &collected,
                false,
                input.now_ms,
            )
            .await;
            for line in &report.lines {
                tracing::info!(target: "nodecare::instance_repair", "{line}");
            }
            for error in collected.errors.iter().chain(report.errors.iter()) {
                tracing::warn!(%error, "instance repair");
            }
            Ok(report
                .submitted
                .iter()
                .map(|(_, _, jobs)| jobs.len())
                .sum::<usize>())
        })
    }
}
