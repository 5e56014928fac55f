//! Admissions granted to other tools (`/1/admission`): a holder like the duties, which proposes
//! nothing (grants are decided when asked for) and holds the nodes of its grants in force.

use super::{Judged, Phase, RoundDuty, RoundInput, Services, nothing};
use nodecare_core::gate::Holds;
use nodecare_core::gate::{InForce, Proposal};

/// The admission grants.
#[derive(Debug, Default)]
pub struct Admission;

impl RoundDuty for Admission {
    fn name(&self) -> &'static str {
        "admission"
    }

    fn holds<'a>(&'a mut self, _services: Services<'a>, input: &'a RoundInput) -> Phase<'a, Holds> {
        Box::pin(async move {
            Ok(Holds {
                disrupted: input.grants.clone(),
                ..Holds::default()
            })
        })
    }

    fn propose<'a>(
        &'a mut self,
        _services: Services<'a>,
        _input: &'a RoundInput,
        _in_force: &'a InForce,
    ) -> Phase<'a, Vec<Proposal>> {
        nothing()
    }

    fn execute<'a>(
        &'a mut self,
        _services: Services<'a>,
        _input: &'a RoundInput,
        _judged: Judged<'a>,
    ) -> Phase<'a, usize> {
        nothing()
    }
}
