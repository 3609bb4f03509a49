//! Any JSON as a plan, checked by the rules the boss applies at intake and
//! the manager at deployment: accepted or refused, in bounded work, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use swarm_common::{Limits, SwarmDeploymentPlan, validate::validate_plan};

fuzz_target!(|data: &[u8]| {
    if let Ok(plan) = serde_json::from_slice::<SwarmDeploymentPlan>(data) {
        let _ = validate_plan(&plan, &Limits::default());
    }
});
