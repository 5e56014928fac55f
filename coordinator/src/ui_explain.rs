//! `GET /ui/explain?…`: an explanation (`GET /1/explain`, the same query) for people, linked
//! from each incident and campaign of the web page. Read-only.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use nodecare_protocol::explain::{ExplainedRound, Explanation, Subject};

use crate::api::ApiState;
use crate::ui::{STYLE, age, html_page};

fn title(explanation: &Explanation) -> String {
    match &explanation.subject {
        Subject::Node { node, .. } => format!("node {node}"),
        Subject::Record { id } => format!("record {id}"),
        Subject::Job { id } => format!("job {id}"),
    }
}

pub(crate) fn round(now: u64, r: &ExplainedRound) -> Markup {
    html! {
        article.incident {
            h3 { "Round " (r.round) ", " (age(now, r.at_ms)) " ago on " (r.coordinator) }
            @if r.repeats > 0 {
                p.mute { "Decided the same " (r.repeats) " more time(s), the last " (age(now, r.last_ms)) " ago." }
            }
            ul {
                @if let Some(verdict) = &r.verdict { li { "Verdict: " b { (verdict) } } }
                @if let Some(held) = &r.held_by { li { "Held by: " (held) } }
                li { "Caps: " (r.caps.join("; ")) }
                @if let Some(why) = &r.breaker { li.bad { "Storm breaker OPEN: " (why) } }
                @if r.in_force.is_empty() {
                    li { "In force before the round: nothing" }
                } @else {
                    @for d in &r.in_force { li { "In force in failure domain " b { (d.domain) } ": " (d.held.join(", ")) } }
                }
            }
            @if r.judgements.is_empty() { p.mute { "No duty proposed anything for it." } }
            @for j in &r.judgements {
                div {
                    p { b { (j.duty) } " proposed " (j.subject) " for " (j.holder) ": " (j.reason) }
                    p.mute {
                        @if !j.disrupts.is_empty() { "disrupts " (j.disrupts.join(", ")) "; " }
                        @if !j.touches.is_empty() { "touches " (j.touches.join(", ")) "; " }
                        @match j.moves_memory_mib {
                            Some(mib) => { "the capacity check counted " (mib) " MiB of instances to move" }
                            None => { "the memory of its instances is unknown" }
                        }
                    }
                    @match &j.blocked_by {
                        None => { p.good { "Admitted: " (j.rule) } }
                        Some(blocked) => { p.blocked { "Refused by the rule " b { (j.rule) } ": " span.blocked-by { (blocked.to_string()) } } }
                    }
                }
            }
        }
    }
}

/// The page of an explanation.
pub fn render(explanation: &Explanation, now: u64) -> String {
    let name = title(explanation);
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "nodecare: why, " (name) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { "Why: " (name) }
                    p.mute { "From the coordinator's flight recorder: the rounds that decided about it. " a href="/ui/" { "Back to the page" } }
                }
                @if !explanation.now.is_empty() {
                    ul.now { @for line in &explanation.now { li { (line) } } }
                }
                @if let Some(job) = &explanation.job {
                    p { (job.description) " (" (job.intent) " of " (job.holder) "), " b { (job.state) } }
                    p.mute {
                        "Reason trail: nodecare incident=" (job.trail) " intent=" (job.intent) "; planned "
                        (age(now, job.recorded_ms)) " ago"
                        @if let Some(n) = job.round { " in round " (n) }
                        "."
                    }
                }
                @for r in &explanation.rounds { (round(now, r)) }
                @if let Some(note) = &explanation.note { p.mute { (note) } }
            }
        }
    };
    page.into_string()
}

/// `GET /ui/explain`.
pub async fn page(State(state): State<ApiState>, RawQuery(query): RawQuery) -> Response {
    match crate::explain_api::explanation(&state, query.as_deref()).await {
        Ok(explanation) => html_page(render(&explanation, nodecare_protocol::now_ms())),
        Err((status, message)) => {
            let body = html! {
                (DOCTYPE)
                html lang="en" { head { meta charset="utf-8"; title { "nodecare: why" } }
                    body { h1 { "Cannot explain" } p { (message) } p { a href="/ui/" { "Back to the page" } } } }
            };
            let status = if status.is_client_error() || status.is_server_error() {
                status
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            crate::explain_api::with_retry_after(
                status,
                (status, html_page(body.into_string())).into_response(),
            )
        }
    }
}
