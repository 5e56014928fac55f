//! `GET /ui/what-if`: the web page's "what if" form and its answer (`GET /1/what-if` for
//! people). Read-only: any reader may ask; it runs on a private copy and changes nothing.
//!
//! The form's fields: `node` and `change` (a verdict, `drain`, `offline` or `grant`),
//! `max_disrupted_nodes`, `campaign=all`; they become a [`Query`].

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use nodecare_protocol::what_if::{
    CapKey, Change, Ending, MAX_ROUNDS, PolicyKey, Query, WhatIf, is_node_name, parse_verdict,
};

use crate::api::ApiState;
use crate::ui::{STYLE, html_page};

/// The choices of the form's `change` field.
const CHANGES: [(&str, &str); 8] = [
    ("evacuate", "its verdict turns to evacuate"),
    (
        "evacuate-failover",
        "its verdict turns to evacuate-failover",
    ),
    ("live-repair", "its verdict turns to live-repair"),
    ("unknown", "its verdict turns to unknown"),
    ("Ok", "its verdict turns to Ok"),
    ("drain", "someone drains it"),
    ("offline", "someone sets it offline"),
    ("grant", "another tool is granted it"),
];

/// The what-if the form asks (`None`: an empty form).
pub fn form_query(query: Option<&str>) -> Result<Option<Query>, String> {
    let mut node = None;
    let mut change = None;
    let mut cap = None;
    let mut campaign = false;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = (!value.is_empty()).then_some(value);
        match key {
            "node" => node = value,
            "change" => change = value,
            "max_disrupted_nodes" => cap = value,
            "campaign" => campaign = value == Some("all"),
            _ => {
                return Err(format!(
                    "unknown field {:?}",
                    key.chars().take(40).collect::<String>()
                ));
            }
        }
    }
    let mut changes = Vec::new();
    if let Some(node) = node {
        if !is_node_name(node) {
            return Err(format!(
                "not a node name: {:?}",
                node.chars().take(64).collect::<String>()
            ));
        }
        let node = node.to_owned();
        changes.push(match change.unwrap_or("evacuate") {
            "drain" => Change::Drain { node },
            "offline" => Change::Offline { node },
            "grant" => Change::Grant { node },
            verdict => Change::Verdict {
                node,
                verdict: parse_verdict(verdict)?,
            },
        });
    }
    if let Some(cap) = cap {
        let key = PolicyKey::Cluster(CapKey::MaxDisruptedNodes);
        let value = key.value(cap)?;
        changes.push(Change::Policy { key, value });
    }
    if campaign {
        changes.push(Change::Campaign { nodes: Vec::new() });
    }
    Ok((!changes.is_empty()).then_some(Query {
        changes,
        at_ms: None,
        rounds: None,
        from_ms: None,
    }))
}

fn form() -> Markup {
    html! {
        form method="get" action="/ui/what-if" {
            p {
                label { "Node " input type="text" name="node" size="30" placeholder="node9.example.org"; }
                " "
                select name="change" {
                    @for (value, words) in CHANGES { option value=(value) { (words) } }
                }
            }
            p {
                label { "max_disrupted_nodes " input type="number" name="max_disrupted_nodes" min="0" size="4"; }
                " "
                label { input type="checkbox" name="campaign" value="all"; " and a rolling-maintenance campaign of every node starts" }
            }
            p { button type="submit" { "What would nodecare do?" } }
        }
    }
}

fn answer(what_if: &WhatIf) -> Markup {
    let now = what_if.start.at_ms;
    html! {
        h2 { "If " (what_if.changes.iter().map(Change::describe).collect::<Vec<_>>().join(", ")) }
        p.mute {
            @match &what_if.ending {
                Ending::Settled { rounds } => { "Nothing changes after " (rounds) " round(s)." }
                Ending::RoundLimit { rounds } => { "Still changing after " (rounds) " rounds (the limit)." }
                Ending::Failed { round, error } => { "Round " (round) " failed: " (error) }
                Ending::Cut { rounds, budget_s, by } => { "Cut after " (rounds) " round(s): the budget of " (budget_s) " s of " (by.as_str()) " ran out (ask for fewer rounds)." }
            }
            " One round every " (what_if.start.interval_ms / 1000) " s."
        }
        h3 { "Ganeti jobs it would submit, in order" }
        @if what_if.jobs.is_empty() { p.mute { "None." } }
        ol {
            @for job in &what_if.jobs {
                li { "round " (job.round) ": " code { (job.opcode) } " " (job.target) ": " (job.operation) }
            }
        }
        h3 { "Rounds" }
        @for r in &what_if.rounds {
            @if let Some(gate) = &r.gate {
                p { b { "Round " (r.number) } }
                (crate::ui_explain::round(now, gate))
            }
            @if let Some(error) = &r.error { p.bad { "Round " (r.number) " failed: " (error) } }
        }
        h3 { "At the end" }
        ul {
            @for n in &what_if.nodes {
                li { (n.name) ": "
                    @if n.offline { "offline, " } @else if n.drained { "drained, " }
                    (n.primaries) " primary instance(s)"
                    @if n.changed { " (changed)" } }
            }
            @for c in &what_if.campaigns {
                li { "campaign " code { (c.id) } ": " b { (c.state) } @if c.new { " (new)" }
                    @if let Some(why) = &c.why { " — " span.why { (why) } } }
            }
            @for i in &what_if.incidents {
                li { "incident " code { (i.uuid) } " on " (i.node) ": " (i.action) ", " b { (i.status) }
                    @if i.new { " (new)" }
                    @if let Some(why) = &i.why { " — " span.why { (why) } }
                    @else if let Some(blocked) = &i.blocked_by { " — waits: " span.blocked-by { (blocked) } } }
            }
        }
        @for note in &what_if.notes { p.mute { (note) } }
    }
}

/// The page: the form, and the answer when something was asked.
pub fn render(result: Option<Result<&WhatIf, &str>>) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "nodecare: what if" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { "What if" }
                    p.mute {
                        "The coordinator's own rounds, run on a private copy of its state with the change, at most "
                        (MAX_ROUNDS) " rounds; nothing is written or sent. " a href="/ui/" { "Back to the page" }
                    }
                }
                (form())
                @match result {
                    None => {}
                    Some(Ok(what_if)) => { (answer(what_if)) }
                    Some(Err(message)) => { p.bad { (message) } }
                }
            }
        }
    }
    .into_string()
}

/// `GET /ui/what-if`.
pub async fn page(
    State(state): State<ApiState>,
    extensions: axum::http::Extensions,
    RawQuery(query): RawQuery,
) -> Response {
    let asked = match form_query(query.as_deref()) {
        Ok(asked) => asked,
        Err(message) => {
            return (
                StatusCode::BAD_REQUEST,
                html_page(render(Some(Err(&message)))),
            )
                .into_response();
        }
    };
    let Some(asked) = asked else {
        return html_page(render(None));
    };
    let caller = crate::what_if_api::caller_of(&extensions);
    match crate::what_if_api::what_if_by(&state, Some(&asked.to_query_string()), caller).await {
        Ok(what_if) => html_page(render(Some(Ok(&what_if)))),
        Err((status, message)) => (status, html_page(render(Some(Err(&message))))).into_response(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use nodecare_protocol::DiagnoseStatus;
    use nodecare_protocol::what_if::{EndIncident, PredictedJob, Start, Wait, WhatIfRound};

    #[test]
    fn the_form_makes_the_query() {
        assert_eq!(form_query(None).unwrap(), None);
        assert_eq!(form_query(Some("node=&change=evacuate")).unwrap(), None);
        let query = form_query(Some(
            "node=node9.example&change=evacuate-failover&max_disrupted_nodes=2&campaign=all",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            query.changes,
            [
                Change::Verdict {
                    node: "node9.example".into(),
                    verdict: DiagnoseStatus::EvacuateFailover
                },
                Change::Policy {
                    key: PolicyKey::Cluster(CapKey::MaxDisruptedNodes),
                    value: nodecare_protocol::what_if::PolicyValue(Some(2.0))
                },
                Change::Campaign { nodes: Vec::new() },
            ]
        );
        let drain = form_query(Some("node=n5&change=drain")).unwrap().unwrap();
        assert_eq!(drain.changes, [Change::Drain { node: "n5".into() }]);
        for (bad, says) in [
            ("node=a%20b", "not a node name"),
            ("node=n1&change=reboot", "not a verdict"),
            ("node=n1&max_disrupted_nodes=x", "whole number"),
            ("node=n1&script=1", "unknown field"),
        ] {
            let error = form_query(Some(bad)).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn the_answer_shows_jobs_waits_and_the_end() {
        let job = PredictedJob {
            round: 1,
            opcode: "OP_NODE_SET_PARAMS".into(),
            target: "node2".into(),
            operation: "draining node2 for evacuate".into(),
            reason: None,
        };
        let what_if = WhatIf {
            changes: vec![Change::Verdict {
                node: "node2".into(),
                verdict: DiagnoseStatus::Evacuate,
            }],
            start: Start {
                at_ms: 1_000,
                recorded_round: None,
                interval_ms: 30_000,
                jobs_in_flight: 0,
            },
            rounds: vec![WhatIfRound {
                number: 1,
                at_ms: 1_000,
                gate: None,
                jobs: vec![job.clone()],
                waits: vec![Wait {
                    holder: "incident x".into(),
                    subject: "node node3".into(),
                    rule: "its duty waits".into(),
                    why: "node2 first".into(),
                    blocked_by: None,
                }],
                error: None,
            }],
            jobs: vec![job],
            nodes: Vec::new(),
            incidents: vec![EndIncident {
                uuid: "x".into(),
                node: "node3".into(),
                action: "evacuate".into(),
                status: "noted".into(),
                blocked_by: Some("node2 first".into()),
                why: Some("waits: node2 first".into()),
                new: true,
            }],
            campaigns: Vec::new(),
            ending: Ending::Settled { rounds: 2 },
            notes: Vec::new(),
        };
        let page = render(Some(Ok(&what_if)));
        for says in [
            "If verdict node2=evacuate",
            "OP_NODE_SET_PARAMS",
            "draining node2 for evacuate",
            "Nothing changes after 2 round(s).",
            "node2 first",
            "<form method=\"get\" action=\"/ui/what-if\">",
        ] {
            assert!(page.contains(says), "{says}: {page}");
        }
        assert!(!page.contains("<script"));
        let error = render(Some(Err("verdict node9=evacuate: unknown node node9")));
        assert!(error.contains("unknown node node9"));
    }
}
