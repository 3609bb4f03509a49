//! Planning with a model: [`plan_with_provider`] asks one for a JSON plan
//! matching [`plan_schema`], validated like any plan plus "only tools that
//! exist", with the problems sent back to the model a bounded number of
//! times. Without a model, the boss plans with [`crate::offline_plan`].

use schemars::JsonSchema;
use serde::Deserialize;
use swarm_common::{ErrorBody, ErrorCode, Limits, SwarmDeploymentPlan};

use crate::provider::{ChatMessage, CompletionRequest, Provider};

/// The JSON schema of a plan, as given to a model. These types mirror
/// `swarm_common`'s plan types (which, being the protocol crate, derive no
/// schema); a test checks that they stay in step.
#[allow(dead_code)] // Read only through the derived schema.
mod schema {
    use super::*;

    /// A team and a task graph for a mission.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(deny_unknown_fields)]
    pub(super) struct Plan {
        /// What the manager must achieve and how to judge the results.
        manager_directive: String,
        /// The worker personas: each a name, a role, a system prompt and tools.
        workers: Vec<Worker>,
        /// The tasks. Every task is assigned to one worker by name.
        tasks: Vec<Task>,
        /// What the finished mission must show.
        #[serde(default)]
        success_criteria: Vec<String>,
        /// Sub-managers: a large, separable part of the mission assigned to
        /// one runs as a swarm of its own, planned when it starts. Leave
        /// empty unless a part is large enough to need a team of its own.
        #[serde(default)]
        sub_managers: Vec<SubManager>,
    }

    /// A sub-manager persona: each task assigned to it runs as a child
    /// swarm, its description the child's mission.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(deny_unknown_fields)]
    pub(super) struct SubManager {
        /// A unique name among workers and sub-managers, such as `research-lead`.
        name: String,
        /// What part of the mission it is responsible for.
        role: String,
    }

    /// A worker persona.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(deny_unknown_fields)]
    pub(super) struct Worker {
        /// A unique name, such as `researcher`.
        name: String,
        /// What it specialises in.
        role: String,
        /// The system prompt it works under.
        system_prompt: String,
        /// Names of the tools it may call; each must be one of the available tools.
        tools: Vec<String>,
        /// Names of other workers it works with.
        #[serde(default)]
        collaborators: Vec<String>,
    }

    /// A task.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(deny_unknown_fields)]
    pub(super) struct Task {
        /// A unique id: letters, digits, `-` and `_` only, such as `t1`.
        task_id: String,
        /// A short title.
        title: String,
        /// What to do, fully enough for the worker to do it alone.
        description: String,
        /// The name of the worker that does it.
        assigned_to: String,
        /// Ids of tasks whose results it needs; they run first.
        #[serde(default)]
        dependencies: Vec<String>,
        /// Run only if this holds once the dependencies have ended (on their
        /// status, or a JSON pointer into a dependency's JSON result);
        /// otherwise the task is skipped. It may name only its own dependencies.
        #[serde(default)]
        condition: Option<swarm_common::condition::Condition>,
        /// Fan out over a JSON array a dependency produces: one copy of this
        /// task per item, with `{{item}}` and `{{index}}` in the description
        /// replaced; `over.task` must be one of its dependencies.
        #[serde(default)]
        map: Option<swarm_common::map::MapSpec>,
        /// The id of another task of the plan to run in this one's place if
        /// it fails; that task runs only then.
        #[serde(default)]
        on_failure: Option<String>,
    }
}

/// The JSON schema a model's plan must match.
pub fn plan_schema() -> serde_json::Value {
    schemars::schema_for!(schema::Plan).to_value()
}

/// The reply's JSON object: the whole text, or a fenced block, or the span
/// from the first `{` to the last `}`.
fn json_of(reply: &str) -> &str {
    let fenced = crate::gates::strip_code_fence(reply);
    if fenced.starts_with('{') {
        return fenced;
    }
    match (reply.find('{'), reply.rfind('}')) {
        (Some(start), Some(end)) if start < end => &reply[start..=end],
        _ => reply.trim(),
    }
}

/// Why a reply is not a usable plan, in words for the model.
fn check_plan_reply(
    reply: &str,
    tool_names: &[String],
    limits: &Limits,
    depth: u32,
) -> Result<SwarmDeploymentPlan, String> {
    let value: serde_json::Value = serde_json::from_str(json_of(reply))
        .map_err(|e| format!("the reply is not a JSON object: {e}"))?;
    let validator = jsonschema::validator_for(&plan_schema())
        .map_err(|e| format!("internal error: the plan schema is invalid: {e}"))?;
    let errors = crate::gates::schema_errors(&validator, &value);
    if !errors.is_empty() {
        return Err(format!(
            "the plan does not match the schema: {}",
            errors.join("; ")
        ));
    }
    let plan: SwarmDeploymentPlan =
        serde_json::from_value(value).map_err(|e| format!("the plan cannot be read: {e}"))?;
    if plan.tasks.is_empty() {
        return Err("the plan has no tasks".to_string());
    }
    swarm_common::validate::validate_plan_at(&plan, limits, depth).map_err(|e| e.message)?;
    let unknown: Vec<String> = plan
        .workers
        .iter()
        .flat_map(|w| {
            w.tools
                .iter()
                .filter(|t| !tool_names.contains(t))
                .map(move |t| format!("{t:?} (worker {:?})", w.name))
        })
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "these tools do not exist: {}; the available tools are {}",
            unknown.join(", "),
            tool_names.join(", ")
        ));
    }
    Ok(plan)
}

fn planning_prompt(tool_names: &[String], limits: &Limits, depth: u32) -> String {
    let schema = serde_json::to_string_pretty(&plan_schema()).unwrap_or_default();
    let sub_managers = if depth < limits.max_swarm_depth {
        format!(
            "- a large part of the mission that needs a team of its own may go to a sub-manager \
             (at most {} such tasks); each task assigned to one is planned and run as a swarm of \
             its own;\n",
            limits.max_child_swarms
        )
    } else {
        "- sub_managers must stay empty: this swarm may not have child swarms;\n".to_string()
    };
    format!(
        "You are the planner of a Swarm: you design a team of worker agents and a graph of \
         tasks that together achieve a mission.\n\n\
         Reply with one JSON object and nothing else, matching this JSON schema:\n{schema}\n\n\
         Rules:\n\
         - at most {} workers and {} tasks; each system prompt and task description at most {} bytes;\n\
         - every task is assigned to a worker (or sub-manager) of the plan by name, and depends only on tasks of the plan, without cycles;\n\
         - task ids are letters, digits, '-' and '_';\n\
         - use a condition when a task should run only if an earlier result says so, a map to handle each item of a list an earlier task produces, and on_failure to name a task that tries another way if one fails;\n\
         {sub_managers}\
         - workers may use only these tools: {}.",
        limits.max_workers,
        limits.max_tasks,
        limits.max_prompt_bytes,
        if tool_names.is_empty() {
            "(none)".to_string()
        } else {
            tool_names.join(", ")
        },
    )
}

/// The planner's question: the mission, and the skills learned earlier
/// that fit it.
fn mission_message(mission: &str, skills: &[(String, String)]) -> String {
    let mut text = format!("The mission:\n{mission}");
    if !skills.is_empty() {
        text.push_str(
            "\n\nSkills learned in earlier missions, best first; plan tasks that use them \
             where they fit (the workers are offered them too):",
        );
        for (name, how_to) in skills {
            text.push_str(&format!("\n- {name}: {how_to}"));
        }
    }
    text
}

/// Asks `provider` for a plan for `mission` whose workers use only
/// `tool_names`, within `limits`. A reply that is not a valid plan gets its
/// problems sent back, and the model tries again, up to `max_attempts`
/// replies in all. The plan's `planner` is the provider's name.
pub async fn plan_with_provider(
    provider: &dyn Provider,
    mission: &str,
    tool_names: &[String],
    limits: &Limits,
    max_attempts: u32,
) -> Result<SwarmDeploymentPlan, ErrorBody> {
    plan_with_provider_at(provider, mission, tool_names, &[], limits, 0, max_attempts).await
}

/// [`plan_with_provider`] for a swarm `depth` levels below a mission's own
/// (a child swarm's; sub-managers are offered only while child swarms may
/// nest deeper), told the `skills` (name, how-to) learned in earlier
/// missions that fit this one, best first.
pub async fn plan_with_provider_at(
    provider: &dyn Provider,
    mission: &str,
    tool_names: &[String],
    skills: &[(String, String)],
    limits: &Limits,
    depth: u32,
    max_attempts: u32,
) -> Result<SwarmDeploymentPlan, ErrorBody> {
    let max_attempts = max_attempts.max(1);
    let mut messages = vec![
        ChatMessage::system(planning_prompt(tool_names, limits, depth)),
        ChatMessage::user(mission_message(mission, skills)),
    ];
    let mut last_problem = String::new();
    for attempt in 1..=max_attempts {
        let response = provider
            .complete(CompletionRequest {
                messages: messages.clone(),
                tools: Vec::new(),
                max_tokens: None,
            })
            .await
            .map_err(|e| {
                let mut body = ErrorBody::new(
                    match e {
                        crate::provider::ProviderError::Timeout(_) => ErrorCode::Timeout,
                        _ => ErrorCode::Internal,
                    },
                    format!("planning with {:?} failed: {e}", provider.name()),
                )
                .with_detail("provider", provider.name());
                body.retriable = e.retriable();
                body
            })?;
        match check_plan_reply(&response.content, tool_names, limits, depth) {
            Ok(mut plan) => {
                plan.planner = provider.name().to_string();
                return Ok(plan);
            }
            Err(problem) => {
                tracing::info!(attempt, %problem, "the model's plan was refused");
                messages.push(ChatMessage::assistant(response.content));
                messages.push(ChatMessage::user(format!(
                    "That plan cannot be used: {problem}\nReply with the corrected plan as one \
                     JSON object matching the schema, and nothing else."
                )));
                last_problem = problem;
            }
        }
    }
    Err(ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "the model gave no valid plan in {max_attempts} attempts; the last problem: {last_problem}"
        ),
    )
    .with_detail("provider", provider.name())
    .with_detail("attempts", max_attempts))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::offline_plan;

    fn tools() -> Vec<String> {
        crate::tools::ToolRegistry::builtin(".").names()
    }

    #[test]
    fn the_plan_schema_mirrors_the_plan_types() {
        let schema = plan_schema();
        let props = |v: &serde_json::Value| -> BTreeSet<String> {
            v["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        let keys = |v: serde_json::Value| -> BTreeSet<String> {
            v.as_object().unwrap().keys().cloned().collect()
        };
        let plan = offline_plan("1. count words in a.txt\n2. what is 1+1", &tools());
        let mut task = plan.tasks[0].clone();
        task.priority = Some(1);
        task.max_result_bytes = Some(1);
        task.condition = Some(
            serde_json::from_value(
                serde_json::json!({"when": {"task": "x", "status": "completed"}}),
            )
            .unwrap(),
        );
        task.map = Some(
            serde_json::from_value(
                serde_json::json!({"over": {"task": "x", "pointer": ""}, "concurrency": 1}),
            )
            .unwrap(),
        );
        task.on_failure = Some("y".into());
        let mut with_sub = plan.clone();
        with_sub.sub_managers = vec![swarm_common::hierarchy::SubManagerPlan {
            name: "lead".into(),
            role: "leads".into(),
            plan: None,
        }];
        let defs = &schema["$defs"];
        assert!(props(&schema).is_subset(&keys(serde_json::to_value(&with_sub).unwrap())));
        assert!(props(&defs["SubManager"]).is_subset(&keys(
            serde_json::to_value(&with_sub.sub_managers[0]).unwrap()
        )));
        assert!(
            props(&defs["Worker"])
                .is_subset(&keys(serde_json::to_value(&plan.workers[0]).unwrap()))
        );
        assert!(props(&defs["Task"]).is_subset(&keys(serde_json::to_value(&task).unwrap())));
        // The schema itself is one the gate library accepts.
        assert!(jsonschema::validator_for(&schema).is_ok());
        // An offline plan, less the fields a model does not write (the
        // planner, pools, the seed's second name of a persona), passes it.
        let mut value = serde_json::to_value(&plan).unwrap();
        value.as_object_mut().unwrap().remove("planner");
        for w in value["workers"].as_array_mut().unwrap() {
            w.as_object_mut().unwrap().remove("pool");
            w.as_object_mut().unwrap().remove("worker_name");
        }
        let reply = value.to_string();
        let checked = check_plan_reply(&reply, &tools(), &Limits::default(), 0).unwrap();
        assert_eq!(checked.tasks, plan.tasks);
    }

    #[test]
    fn a_models_plan_may_grow_its_graph_and_hand_parts_to_sub_managers() {
        let reply = serde_json::json!({
            "manager_directive": "List, handle each, fall back, and delegate the survey.",
            "workers": [{"name": "w", "role": "does", "system_prompt": "Do.", "tools": []}],
            "sub_managers": [{"name": "survey-lead", "role": "runs the survey"}],
            "tasks": [
                {"task_id": "list", "title": "List", "description": "List the files.", "assigned_to": "w",
                 "on_failure": "guess"},
                {"task_id": "guess", "title": "Guess", "description": "Guess the files.", "assigned_to": "w"},
                {"task_id": "each", "title": "Each", "description": "Handle {{item}}.", "assigned_to": "w",
                 "dependencies": ["list"], "map": {"over": {"task": "list", "pointer": "/files"}, "concurrency": 4}},
                {"task_id": "check", "title": "Check", "description": "Check.", "assigned_to": "w",
                 "dependencies": ["each"], "condition": {"when": {"task": "each", "status": "completed"}}},
                {"task_id": "survey", "title": "Survey", "description": "Survey the field.",
                 "assigned_to": "survey-lead"}
            ]
        })
        .to_string();
        let plan = check_plan_reply(&reply, &tools(), &Limits::default(), 0).unwrap();
        assert_eq!(plan.sub_managers[0].name, "survey-lead");
        assert!(
            plan.sub_managers[0].plan.is_none(),
            "the boss plans it when it starts"
        );
        assert_eq!(plan.tasks[0].on_failure.as_deref(), Some("guess"));
        assert!(plan.tasks[2].map.is_some() && plan.tasks[3].condition.is_some());
        // A swarm as deep as child swarms may nest may not have sub-managers.
        let deepest = Limits::default().max_swarm_depth;
        let e = check_plan_reply(&reply, &tools(), &Limits::default(), deepest).unwrap_err();
        assert!(e.contains("child swarms may nest"), "{e}");
        assert!(planning_prompt(&tools(), &Limits::default(), deepest).contains("must stay empty"));
    }
}
