//! A verdict held back by a grace, as the waiting line the status, the page and the what-if show
//! (pure; shared by `admission`'s gate status and `what_if`, it imports neither).

use std::collections::BTreeMap;

use nodecare_protocol::gate::Waiting;

/// The verdicts a grace holds back (`held`: node → verdict), each as a waiting line naming the
/// grace's holder, the node it disrupts and when the grace ends (pure).
pub fn graced_waiting(
    held: &BTreeMap<String, String>,
    graces: &BTreeMap<String, nodecare_core::gate::Grace>,
) -> Vec<Waiting> {
    held.iter()
        .filter_map(|(node, verdict)| Some(grace_line(node, verdict, graces.get(node)?)))
        .collect()
}

/// The waiting line of `node`, whose `verdict` `grace` holds back (pure).
pub fn grace_line(node: &str, verdict: &str, grace: &nodecare_core::gate::Grace) -> Waiting {
    Waiting {
        duty: "node-repair".to_owned(),
        subject: format!("node {node}"),
        blocked_by: format!(
            "verdict {verdict} not acted on: in the {}",
            grace_text(node, grace)
        ),
    }
}

/// `grace of HOLDER's disruption of …, until TIME` (pure): the grace alone, without a verdict.
pub fn grace_text(node: &str, grace: &nodecare_core::gate::Grace) -> String {
    let disruption = if grace.disrupted == node {
        format!("{}'s disruption of it", grace.holder)
    } else {
        format!(
            "{}'s disruption of {}, its DRBD peer",
            grace.holder, grace.disrupted
        )
    };
    format!(
        "grace of {disruption}, until {}",
        nodecare_protocol::clock::utc_text_ms(grace.until_ms)
    )
}
