//! Tools the worker adds to the agent crate's built-ins.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use swarm_agent::tools::{ToolAnnotations, ToolError, TypedTool};

/// The longest `sleep` accepted, in milliseconds.
pub const MAX_SLEEP_MS: u64 = 60_000;

/// `sleep`: waits, to pace calls to a rate-limited service or to give an
/// outside process time to finish.
pub struct Sleep;

/// Arguments of `sleep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SleepArgs {
    /// How long to wait, in milliseconds (at most 60000).
    pub ms: u64,
}

#[async_trait]
impl TypedTool for Sleep {
    type Args = SleepArgs;
    const NAME: &'static str = "sleep";
    const DESCRIPTION: &'static str =
        "Waits the given number of milliseconds (at most 60000), then says how long it waited.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::READ_ONLY;

    async fn run(&self, args: SleepArgs) -> Result<String, ToolError> {
        if args.ms > MAX_SLEEP_MS {
            return Err(ToolError::InvalidArguments(format!(
                "ms is {}; the most is {MAX_SLEEP_MS}",
                args.ms
            )));
        }
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        Ok(format!("waited {} ms", args.ms))
    }
}
