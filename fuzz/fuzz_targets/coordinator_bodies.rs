#![no_main]
//! Bodies the coordinator's HTTP API takes (disruption requests, overrides, breaker resets,
//! freezes, approvals), the change system's answers, and
//! the JSON its status API answers, which the CLI reads: decode and validate or fail cleanly.
use libfuzzer_sys::fuzz_target;
use nodecare_protocol::calendar::{CalendarStatus, FreezeRequest};
use nodecare_protocol::gate::{
    ApprovalAnswer, ApprovalRequest, ApprovalsStatus, BreakerReset, DisruptionRequest,
    OverrideRequest,
};
use nodecare_protocol::status::{IncidentDetail, Overview, RoundSummary};

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = serde_json::from_slice::<DisruptionRequest>(data) {
        let _ = request.validate();
    }
    if let Ok(request) = serde_json::from_slice::<OverrideRequest>(data) {
        let _ = request.until(1_800_000_000_000);
        let _ = request.until(u64::MAX);
    }
    let _ = serde_json::from_slice::<BreakerReset>(data);
    let _ = serde_json::from_slice::<FreezeRequest>(data);
    let _ = serde_json::from_slice::<ApprovalRequest>(data);
    let _ = serde_json::from_slice::<ApprovalAnswer>(data);
    let _ = serde_json::from_slice::<CalendarStatus>(data);
    let _ = serde_json::from_slice::<ApprovalsStatus>(data);
    let _ = serde_json::from_slice::<Overview>(data);
    let _ = serde_json::from_slice::<IncidentDetail>(data);
    let _ = serde_json::from_slice::<RoundSummary>(data);
});
