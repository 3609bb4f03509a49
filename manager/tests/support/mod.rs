//! What the manager's script tests share: a task and a one-persona
//! deployment, in the shape the boss sends.

use chrono::{DateTime, Utc};
use swarm_common::{
    Limits, SwarmDeployment, SwarmDeploymentPlan, TaskDefinition, WorkerDeploymentPlan,
};

/// A task `id` of persona `w` after `deps`.
pub fn task(id: &str, deps: &[&str]) -> TaskDefinition {
    TaskDefinition {
        estimated_minutes: None,
        on_failure: None,
        task_id: id.into(),
        title: format!("title {id}"),
        description: format!("do {id}"),
        assigned_to: "w".into(),
        dependencies: deps.iter().map(|d| d.to_string()).collect(),
        priority: None,
        max_result_bytes: None,
        gates: Vec::new(),
        condition: None,
        map: None,
    }
}

/// A deployment of `tasks` for persona `w` (pool `code`), accepted at
/// `accepted_at` and due by `deadline`.
pub fn deployment_between(
    tasks: Vec<TaskDefinition>,
    accepted_at: DateTime<Utc>,
    deadline: DateTime<Utc>,
) -> SwarmDeployment {
    SwarmDeployment {
        skills_scope: None,
        trace_id: None,
        failure: None,
        parent: None,
        mission: "m".into(),
        mission_id: None,
        plan: SwarmDeploymentPlan {
            seed: Default::default(),
            sub_managers: Vec::new(),
            manager_directive: "d".into(),
            workers: vec![WorkerDeploymentPlan {
                name: "w".into(),
                role: "r".into(),
                system_prompt: "p".into(),
                tools: vec![],
                collaborators: vec![],
                pool: "code".into(),
                a2a_url: None,
                a2a_credential: None,
                skill: None,
            }],
            tasks,
            success_criteria: vec![],
            planner: "test".into(),
        },
        limits: Limits::default(),
        budget: Default::default(),
        accepted_at,
        deadline,
    }
}
