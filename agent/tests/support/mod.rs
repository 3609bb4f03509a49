//! Provider test support: the test kit's scripted LLM server ([`MockLlm`])
//! playing one script in order, provider configurations pointing at it, and
//! tasks and workspaces for the agent loop.

#![allow(dead_code)] // Each test binary uses part of this module.

use std::time::Duration;

use serde_json::Value;
use swarm_agent::provider::ProviderConfig;
pub use swarm_testkit::{MockLlm, Recorded, Reply};

/// The test kit's [`MockLlm`] playing one script in order, with provider
/// configurations that point at it; it stops when dropped.
pub struct Server {
    pub url: String,
    llm: MockLlm,
}

impl Server {
    /// Starts a server on 127.0.0.1 that plays `script` in order.
    pub async fn start(script: Vec<Reply>) -> Server {
        let llm = MockLlm::with_script(script).await;
        Server {
            url: llm.url().to_string(),
            llm,
        }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.llm.requests()
    }

    /// An OpenAI configuration pointing at this server.
    pub fn openai(&self, model: &str) -> ProviderConfig {
        ProviderConfig {
            base_url: Some(self.llm.openai_base_url()),
            api_key: Some("sk-test".into()),
            timeout: Duration::from_secs(5),
            max_retries: 3,
            retry_min_delay: Duration::from_millis(10),
            ..ProviderConfig::openai(model)
        }
    }

    /// An Anthropic configuration pointing at this server.
    pub fn anthropic(&self, model: &str) -> ProviderConfig {
        ProviderConfig {
            base_url: Some(self.llm.anthropic_base_url()),
            api_key: Some("sk-ant-test".into()),
            timeout: Duration::from_secs(5),
            max_retries: 3,
            retry_min_delay: Duration::from_millis(10),
            ..ProviderConfig::anthropic(model)
        }
    }
}

fn owned(calls: &[(&str, &str, Value)]) -> Vec<(String, String, Value)> {
    calls
        .iter()
        .map(|(id, name, args)| (id.to_string(), name.to_string(), args.clone()))
        .collect()
}

/// An OpenAI chat-completions reply that calls tools.
pub fn openai_calls(calls: &[(&str, &str, Value)], prompt: u64, completion: u64) -> Value {
    swarm_testkit::openai_tool_calls("m", "", &owned(calls), (prompt, completion))
}

/// An OpenAI chat-completions reply with a final text.
pub fn openai_text(text: &str, prompt: u64, completion: u64) -> Value {
    swarm_testkit::openai_text("m", text, (prompt, completion))
}

/// An Anthropic Messages reply that uses tools.
pub fn anthropic_calls(
    text: &str,
    calls: &[(&str, &str, Value)],
    input: u64,
    output: u64,
) -> Value {
    swarm_testkit::anthropic_tool_use("m", text, &owned(calls), (input, output))
}

/// An Anthropic Messages reply with a final text.
pub fn anthropic_text(text: &str, input: u64, output: u64) -> Value {
    swarm_testkit::anthropic_text("m", text, (input, output))
}

/// A task for `persona_tools` (all tools when empty).
pub fn task(description: &str, persona_tools: &[&str]) -> swarm_agent::AgentTask {
    swarm_agent::AgentTask {
        task_id: "t1".into(),
        title: "A task".into(),
        description: description.into(),
        persona: swarm_common::WorkerDeploymentPlan {
            name: "tester".into(),
            role: "Tests things".into(),
            system_prompt: "You test.".into(),
            tools: persona_tools.iter().map(|t| t.to_string()).collect(),
            collaborators: vec![],
            pool: "general".into(),
            a2a_url: None,
            a2a_credential: None,
            skill: None,
        },
        context: vec![],
        feedback: vec![],
        max_steps: 8,
        max_result_bytes: 64 * 1024,
    }
}

/// A workspace with `notes.txt` and the registry over it.
pub fn workspace() -> (tempfile::TempDir, swarm_agent::ToolRegistry) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha beta gamma\n").unwrap();
    let tools = swarm_agent::ToolRegistry::builtin(dir.path());
    (dir, tools)
}
