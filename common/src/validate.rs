//! Plan validation and task-graph helpers: pure functions the boss and the
//! manager share, so a plan is judged by one set of rules.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use crate::condition::{self, Condition};
use crate::error::{ErrorBody, ErrorCode};
use crate::gates::excerpt;
use crate::hierarchy::SUB_MANAGER_POOL;
use crate::limits::Limits;
use crate::messages::{SwarmDeploymentPlan, TaskDefinition};
use crate::subjects::is_token;

fn invalid(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// The plan's tasks, or one task per persona from the manager's directive
/// when the plan lists none. The plan's own list is lent, not copied: a
/// reader (the checks, a count) needs no copy of every task.
pub fn expand_tasks(plan: &SwarmDeploymentPlan) -> Cow<'_, [TaskDefinition]> {
    if !plan.tasks.is_empty() {
        return Cow::Borrowed(&plan.tasks);
    }
    // Workers first, then sub-managers, each with its persona's own text
    // when the plan has no directive.
    let personas = plan
        .workers
        .iter()
        .map(|w| (&w.name, &w.role, &w.system_prompt))
        .chain(
            plan.sub_managers
                .iter()
                .map(|s| (&s.name, &s.role, &s.role)),
        );
    let tasks = personas
        .enumerate()
        .map(|(i, (name, role, prompt))| TaskDefinition {
            estimated_minutes: None,
            on_failure: None,
            task_id: format!("task-{}", i + 1),
            title: if role.is_empty() {
                name.clone()
            } else {
                role.clone()
            },
            description: if plan.manager_directive.is_empty() {
                prompt.clone()
            } else {
                plan.manager_directive.clone()
            },
            assigned_to: name.clone(),
            dependencies: Vec::new(),
            priority: None,
            max_result_bytes: None,
            gates: Vec::new(),
            condition: None,
            map: None,
        })
        .collect();
    Cow::Owned(tasks)
}

/// Checks a plan against the rules and the limits: personas exist and are
/// unique, pools and task ids are subject tokens, every task names a known
/// persona and known dependencies (each once), the graph has no cycle, and
/// sizes are within the limits: prompts, titles, and every task's gates
/// ([`crate::gates::check_gates`]: how many, their size, their schemas'
/// depth, nodes and `$ref`s, their regular expressions, per task and in the
/// whole plan), and every task's condition names only its own dependencies
/// and is well formed ([`crate::condition`]). The error names the first problem found. The work is linear
/// in the plan's size: nothing is compiled here.
pub fn validate_plan(plan: &SwarmDeploymentPlan, limits: &Limits) -> Result<(), ErrorBody> {
    validate_plan_at(plan, limits, 0)
}

/// [`validate_plan`] for the plan of a swarm `depth` levels below a
/// mission's own (0: the mission's own): its sub-managers
/// ([`crate::hierarchy`]) are checked too, each given plan one level
/// deeper, and none may sit deeper than [`Limits::max_swarm_depth`].
pub fn validate_plan_at(
    plan: &SwarmDeploymentPlan,
    limits: &Limits,
    depth: u32,
) -> Result<(), ErrorBody> {
    if plan.workers.is_empty() {
        return Err(invalid("the plan has no workers"));
    }
    if plan.workers.len() > limits.max_workers {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "the plan has {} workers; the limit is {}",
                plan.workers.len(),
                limits.max_workers
            ),
        ));
    }
    if plan.manager_directive.len() > limits.max_prompt_bytes {
        return Err(invalid(format!(
            "the manager directive is {} bytes; the limit is {}",
            plan.manager_directive.len(),
            limits.max_prompt_bytes
        )));
    }
    let mut names = HashSet::new();
    for w in &plan.workers {
        if w.name.trim().is_empty() || w.name.len() > 128 {
            return Err(invalid("a worker's name must be 1 to 128 bytes"));
        }
        if !names.insert(w.name.as_str()) {
            return Err(invalid(format!("worker {:?} appears twice", w.name)));
        }
        if w.pool == SUB_MANAGER_POOL {
            return Err(invalid(format!(
                "worker {:?} names pool {SUB_MANAGER_POOL:?}, which is the sub-managers'",
                w.name
            )));
        }
        if !is_token(&w.pool) {
            return Err(invalid(format!(
                "worker {:?} names pool {:?}: a pool is letters, digits, '-' or '_'",
                w.name,
                excerpt(&w.pool, 60)
            )));
        }
        if let Some(url) = &w.a2a_url {
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !scheme_ok || url.len() > 2048 || url.chars().any(char::is_whitespace) {
                return Err(invalid(format!(
                    "worker {:?} names a2a_url {:?}: an http or https URL of at most 2048 bytes",
                    w.name,
                    excerpt(url, 60)
                )));
            }
        }
        if let Some(skill) = &w.skill
            && (!is_token(skill) || skill.len() > 64)
        {
            return Err(invalid(format!(
                "worker {:?} asks for skill {:?}: a skill id is 1 to 64 letters, digits, '-' or '_'",
                w.name,
                excerpt(skill, 60)
            )));
        }
        if let Some(name) = &w.a2a_credential {
            if w.a2a_url.is_none() {
                return Err(invalid(format!(
                    "worker {:?} names an a2a_credential but no a2a_url",
                    w.name
                )));
            }
            if !is_token(name) || name.len() > 64 {
                return Err(invalid(format!(
                    "worker {:?} names a2a_credential {:?}: a credential's name is 1 to 64 \
                     letters, digits, '-' or '_' (the token itself stays with the workers)",
                    w.name,
                    excerpt(name, 60)
                )));
            }
        }
        if w.role.len() > limits.task.max_title_bytes {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "worker {:?}'s role is {} bytes; the limit is {}",
                    w.name,
                    w.role.len(),
                    limits.task.max_title_bytes
                ),
            )
            .with_detail("limit", limits.task.max_title_bytes));
        }
        if w.system_prompt.len() > limits.max_prompt_bytes {
            return Err(invalid(format!(
                "worker {:?}'s system prompt is {} bytes; the limit is {}",
                w.name,
                w.system_prompt.len(),
                limits.max_prompt_bytes
            )));
        }
    }
    let subs = check_sub_managers(plan, limits, depth, &mut names)?;
    let tasks = expand_tasks(plan);
    if tasks.len() > limits.max_tasks {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "the plan has {} tasks; the limit is {}",
                tasks.len(),
                limits.max_tasks
            ),
        ));
    }
    let mut ids = HashSet::new();
    let mut regexes = 0usize;
    for t in tasks.iter() {
        if !is_token(&t.task_id) {
            return Err(invalid(format!(
                "task id {:?} must be 1 to 128 letters, digits, '-' or '_'",
                excerpt(&t.task_id, 60)
            )));
        }
        if !ids.insert(t.task_id.as_str()) {
            return Err(invalid(format!("task {:?} appears twice", t.task_id)));
        }
        if t.description.trim().is_empty() {
            return Err(invalid(format!("task {:?} has no description", t.task_id)));
        }
        if t.description.len() > limits.max_prompt_bytes {
            return Err(invalid(format!(
                "task {:?}'s description is {} bytes; the limit is {}",
                t.task_id,
                t.description.len(),
                limits.max_prompt_bytes
            )));
        }
        if t.title.len() > limits.task.max_title_bytes {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "task {:?}'s title is {} bytes; the limit is {}",
                    t.task_id,
                    t.title.len(),
                    limits.task.max_title_bytes
                ),
            )
            .with_detail("task_id", &t.task_id)
            .with_detail("limit", limits.task.max_title_bytes));
        }
        if !names.contains(t.assigned_to.as_str()) {
            return Err(invalid(format!(
                "task {:?} is assigned to {:?}, which is not one of the plan's workers or sub-managers",
                t.task_id,
                excerpt(&t.assigned_to, 60)
            ))
            .with_detail("task_id", &t.task_id));
        }
        let used = crate::gates::check_gates(&t.gates, limits).map_err(|e| ErrorBody {
            message: format!("task {:?}: {}", t.task_id, e.message),
            ..e.with_detail("task_id", &t.task_id)
        })?;
        regexes += used;
        if regexes > limits.task.max_regexes_per_plan {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "the plan's gates use more than {} regular expressions",
                    limits.task.max_regexes_per_plan
                ),
            )
            .with_detail("limit", limits.task.max_regexes_per_plan));
        }
    }
    for t in tasks.iter() {
        let mut seen = HashSet::new();
        for d in &t.dependencies {
            if !seen.insert(d.as_str()) {
                return Err(invalid(format!(
                    "task {:?} lists dependency {:?} twice",
                    t.task_id,
                    excerpt(d, 60)
                ))
                .with_detail("task_id", &t.task_id)
                .with_detail("dependency", excerpt(d, 60)));
            }
            if !ids.contains(d.as_str()) {
                return Err(invalid(format!(
                    "task {:?} depends on {:?}, which is not a task of the plan",
                    t.task_id,
                    excerpt(d, 60)
                ))
                .with_detail("task_id", &t.task_id)
                .with_detail("dependency", excerpt(d, 60)));
            }
        }
        if let Some(condition) = &t.condition {
            check_condition(t, condition)?;
        }
        if let Some(map) = &t.map {
            check_map(t, map, &ids, &tasks)?;
        }
    }
    check_fallbacks(&tasks)?;
    let children = tasks
        .iter()
        .filter(|t| subs.contains(t.assigned_to.as_str()))
        .count();
    for t in tasks
        .iter()
        .filter(|t| subs.contains(t.assigned_to.as_str()))
    {
        if t.map.is_some() {
            return Err(invalid(format!(
                "task {:?} is a map task assigned to sub-manager {:?}: a map's children run on workers",
                t.task_id, t.assigned_to
            ))
            .with_detail("task_id", &t.task_id));
        }
    }
    if children > limits.max_child_swarms {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "the plan assigns {children} tasks to sub-managers; the limit is {}",
                limits.max_child_swarms
            ),
        )
        .with_detail("limit", limits.max_child_swarms));
    }
    topological_order(&tasks)?;
    Ok(())
}

/// Checks the plan's fallbacks (`on_failure`): each names another task of
/// the plan, which is no task's dependency-descendant of the task it
/// guards (it could never run: its guard's failure would cancel it), is
/// not a map task, guards one task only, and the chains of fallbacks end.
fn check_fallbacks(tasks: &[TaskDefinition]) -> Result<(), ErrorBody> {
    if tasks.iter().all(|t| t.on_failure.is_none()) {
        return Ok(());
    }
    let by_id: HashMap<&str, &TaskDefinition> =
        tasks.iter().map(|t| (t.task_id.as_str(), t)).collect();
    let mut guarded: HashMap<&str, &str> = HashMap::new();
    for t in tasks {
        let Some(f) = t.on_failure.as_deref() else {
            continue;
        };
        let refuse = |message: String| {
            invalid(format!("task {:?}'s on_failure: {message}", t.task_id))
                .with_detail("task_id", &t.task_id)
        };
        let Some(fallback) = by_id.get(f) else {
            return Err(refuse(format!(
                "{:?} is not a task of the plan",
                excerpt(f, 60)
            )));
        };
        if f == t.task_id {
            return Err(refuse("a task cannot be its own fallback".into()));
        }
        if fallback.map.is_some() {
            return Err(refuse(format!("{f:?} is a map task")));
        }
        if let Some(other) = guarded.insert(f, &t.task_id) {
            return Err(refuse(format!(
                "{f:?} is already the fallback of {other:?}"
            )));
        }
        if depends_on(&by_id, f, &t.task_id) {
            return Err(refuse(format!(
                "{f:?} depends on {:?}, so it could never run in its place",
                t.task_id
            )));
        }
    }
    // One guard per fallback makes each chain a path; a path that comes
    // back to its start is a cycle of tasks each held for the other.
    for t in tasks.iter().filter(|t| t.on_failure.is_some()) {
        let mut at = t;
        for _ in 0..tasks.len() {
            match at.on_failure.as_deref().and_then(|f| by_id.get(f)) {
                Some(next) if next.task_id == t.task_id => {
                    return Err(invalid(format!(
                        "task {:?}'s fallbacks lead back to it",
                        t.task_id
                    ))
                    .with_detail("task_id", &t.task_id));
                }
                Some(next) => at = next,
                None => break,
            }
        }
    }
    Ok(())
}

/// Whether `task` depends, directly or not, on `on`.
fn depends_on(by_id: &HashMap<&str, &TaskDefinition>, task: &str, on: &str) -> bool {
    let mut seen = HashSet::new();
    let mut next = vec![task];
    while let Some(id) = next.pop() {
        if !seen.insert(id) {
            continue;
        }
        let Some(t) = by_id.get(id) else { continue };
        for d in &t.dependencies {
            if d == on {
                return true;
            }
            next.push(d.as_str());
        }
    }
    false
}

/// Checks a plan's sub-managers: named apart from every other persona
/// (their names join `names`), allowed at this depth, and each one's own
/// plan valid one level deeper. Returns their names.
fn check_sub_managers<'a>(
    plan: &'a SwarmDeploymentPlan,
    limits: &Limits,
    depth: u32,
    names: &mut HashSet<&'a str>,
) -> Result<HashSet<&'a str>, ErrorBody> {
    if plan.sub_managers.is_empty() {
        return Ok(HashSet::new());
    }
    if depth >= limits.max_swarm_depth {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "the plan has sub-managers at depth {depth}; child swarms may nest {} deep",
                limits.max_swarm_depth
            ),
        )
        .with_detail("limit", limits.max_swarm_depth));
    }
    if plan.sub_managers.len() > limits.max_workers {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "the plan has {} sub-managers; the limit is {}",
                plan.sub_managers.len(),
                limits.max_workers
            ),
        ));
    }
    let mut subs = HashSet::new();
    for s in &plan.sub_managers {
        if s.name.trim().is_empty() || s.name.len() > 128 {
            return Err(invalid("a sub-manager's name must be 1 to 128 bytes"));
        }
        if !names.insert(s.name.as_str()) {
            return Err(invalid(format!("persona {:?} appears twice", s.name)));
        }
        subs.insert(s.name.as_str());
        if s.role.len() > limits.task.max_title_bytes {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "sub-manager {:?}'s role is {} bytes; the limit is {}",
                    s.name,
                    s.role.len(),
                    limits.task.max_title_bytes
                ),
            ));
        }
        if let Some(p) = &s.plan {
            validate_plan_at(p, limits, depth + 1).map_err(|e| ErrorBody {
                message: format!("sub-manager {:?}'s plan: {}", s.name, e.message),
                ..e
            })?;
        }
    }
    Ok(subs)
}

/// Checks a task's condition: within its bounds (tests, nesting), with no
/// empty `all` or `any`, every test well formed, and naming only the task's
/// own dependencies (the only tasks whose end it waits for).
fn check_condition(t: &TaskDefinition, condition: &Condition) -> Result<(), ErrorBody> {
    let refuse = |message: String| {
        invalid(format!("task {:?}'s condition: {message}", t.task_id))
            .with_detail("task_id", &t.task_id)
    };
    let tests = condition.tests();
    if tests.len() > condition::MAX_TESTS || condition.depth() > condition::MAX_DEPTH {
        return Err(refuse(format!(
            "it has {} tests nested {} deep; the limits are {} and {}",
            tests.len(),
            condition.depth(),
            condition::MAX_TESTS,
            condition::MAX_DEPTH
        )));
    }
    if has_empty_list(condition) {
        return Err(refuse("an `all` or `any` has no conditions".into()));
    }
    for test in tests {
        if !t.dependencies.contains(&test.task) {
            return Err(refuse(format!(
                "it tests {:?}, which is not one of its dependencies",
                excerpt(&test.task, 60)
            ))
            .with_detail("dependency", excerpt(&test.task, 60)));
        }
        if let Some(problem) = test.problem() {
            return Err(refuse(format!("on {:?}, {problem}", test.task)));
        }
    }
    Ok(())
}

/// Checks a map task ([`crate::map`]): it maps over one of its own
/// dependencies, which is not itself a map task (its result is assembled,
/// not a worker's list), with a concurrency of 1 to
/// [`crate::map::MAX_CONCURRENCY`], an id short enough for its children's
/// ids, and no task of the plan already named like one of its children.
fn check_map(
    t: &TaskDefinition,
    map: &crate::map::MapSpec,
    ids: &HashSet<&str>,
    tasks: &[TaskDefinition],
) -> Result<(), ErrorBody> {
    let refuse = |message: String| {
        invalid(format!("task {:?}'s map: {message}", t.task_id)).with_detail("task_id", &t.task_id)
    };
    if !t.dependencies.contains(&map.over.task) {
        return Err(refuse(format!(
            "it maps over {:?}, which is not one of its dependencies",
            excerpt(&map.over.task, 60)
        ))
        .with_detail("dependency", excerpt(&map.over.task, 60)));
    }
    if tasks
        .iter()
        .any(|o| o.task_id == map.over.task && o.map.is_some())
    {
        return Err(refuse(format!(
            "it maps over {:?}, which is itself a map task",
            map.over.task
        )));
    }
    if !(1..=crate::map::MAX_CONCURRENCY).contains(&map.concurrency) {
        return Err(refuse(format!(
            "its concurrency is {}; it must be 1 to {}",
            map.concurrency,
            crate::map::MAX_CONCURRENCY
        )));
    }
    if map.over.pointer.len() > condition::MAX_POINTER_BYTES
        || !(map.over.pointer.is_empty() || map.over.pointer.starts_with('/'))
    {
        return Err(refuse(format!(
            "its pointer {:?} must be empty or start with '/', at most {} bytes",
            excerpt(&map.over.pointer, 60),
            condition::MAX_POINTER_BYTES
        )));
    }
    if t.task_id.len() > crate::map::MAX_MAP_ID_BYTES {
        return Err(refuse(format!(
            "a map task's id is at most {} bytes, to leave room for its children's",
            crate::map::MAX_MAP_ID_BYTES
        )));
    }
    let prefix = format!("{}-", t.task_id);
    if let Some(clash) = ids.iter().find(|id| {
        id.strip_prefix(prefix.as_str())
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
    }) {
        return Err(refuse(format!(
            "task {clash:?} has the id of one of its children"
        )));
    }
    Ok(())
}

fn has_empty_list(c: &Condition) -> bool {
    match c {
        Condition::When(_) => false,
        Condition::All(cs) | Condition::Any(cs) => cs.is_empty() || cs.iter().any(has_empty_list),
        Condition::Not(c) => has_empty_list(c),
    }
}

/// Indices of `tasks` in an order where every task comes after its
/// dependencies (Kahn's algorithm, ties kept in plan order). Fails with the
/// tasks on a cycle. Unknown dependencies are ignored here; [`validate_plan`]
/// reports them.
pub fn topological_order(tasks: &[TaskDefinition]) -> Result<Vec<usize>, ErrorBody> {
    let index: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.task_id.as_str(), i))
        .collect();
    let mut indegree = vec![0usize; tasks.len()];
    let mut dependents = vec![Vec::new(); tasks.len()];
    for (i, t) in tasks.iter().enumerate() {
        for d in &t.dependencies {
            if let Some(&j) = index.get(d.as_str()) {
                indegree[i] += 1;
                dependents[j].push(i);
            }
        }
    }
    let mut ready: std::collections::VecDeque<usize> =
        (0..tasks.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(tasks.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &k in &dependents[i] {
            indegree[k] -= 1;
            if indegree[k] == 0 {
                ready.push_back(k);
            }
        }
    }
    if order.len() < tasks.len() {
        let cycle: Vec<&str> = (0..tasks.len())
            .filter(|&i| indegree[i] > 0)
            .map(|i| tasks[i].task_id.as_str())
            .collect();
        return Err(invalid(format!(
            "the task graph has a dependency cycle among {cycle:?}"
        ))
        .with_detail("cycle", cycle.join(",")));
    }
    Ok(order)
}

/// A priority per task: its explicit priority, or else the length of the
/// longest chain of tasks that wait on it, so the critical path runs first.
/// Expects an acyclic graph (see [`topological_order`]).
pub fn priorities(tasks: &[TaskDefinition]) -> Result<Vec<u32>, ErrorBody> {
    let order = topological_order(tasks)?;
    let index: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.task_id.as_str(), i))
        .collect();
    let mut depth = vec![0u32; tasks.len()];
    // Walk from sinks to sources: a task's depth is one more than its deepest dependent.
    for &i in order.iter().rev() {
        for d in &tasks[i].dependencies {
            if let Some(&j) = index.get(d.as_str()) {
                depth[j] = depth[j].max(depth[i] + 1);
            }
        }
    }
    Ok(tasks
        .iter()
        .zip(depth)
        .map(|(t, d)| t.priority.unwrap_or(d))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::WorkerDeploymentPlan;
    use proptest::prelude::*;

    fn task(id: &str, deps: &[&str]) -> TaskDefinition {
        TaskDefinition {
            estimated_minutes: None,
            on_failure: None,
            task_id: id.into(),
            title: id.into(),
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

    fn plan(tasks: Vec<TaskDefinition>) -> SwarmDeploymentPlan {
        SwarmDeploymentPlan {
            seed: Default::default(),
            sub_managers: Vec::new(),
            manager_directive: "d".into(),
            workers: vec![WorkerDeploymentPlan {
                name: "w".into(),
                role: String::new(),
                system_prompt: String::new(),
                tools: vec![],
                collaborators: vec![],
                pool: "general".into(),
                a2a_url: None,
                a2a_credential: None,
                skill: None,
            }],
            tasks,
            success_criteria: vec![],
            planner: "test".into(),
        }
    }

    /// `p` with a sub-manager `lead` (plan `child`) and task `s` assigned to it.
    fn with_sub(
        mut p: SwarmDeploymentPlan,
        child: Option<SwarmDeploymentPlan>,
    ) -> SwarmDeploymentPlan {
        p.sub_managers.push(crate::hierarchy::SubManagerPlan {
            name: "lead".into(),
            role: "leads".into(),
            plan: child.map(Box::new),
        });
        p.tasks.push(TaskDefinition {
            assigned_to: "lead".into(),
            ..task("s", &[])
        });
        p
    }

    #[test]
    fn sub_managers_nest_within_the_depth_limit() {
        let limits = Limits {
            max_swarm_depth: 2,
            ..Limits::default()
        };
        let leaf = plan(vec![task("a", &[])]);
        let two = with_sub(
            plan(vec![]),
            Some(with_sub(plan(vec![]), Some(leaf.clone()))),
        );
        assert!(validate_plan(&two, &limits).is_ok());
        let three = with_sub(plan(vec![]), Some(two.clone()));
        let e = validate_plan(&three, &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.contains("depth 2"), "{}", e.message);
        // A child planned by the boss is checked at its own depth.
        assert!(validate_plan_at(&two, &limits, 1).is_err());
        assert!(validate_plan_at(&leaf, &limits, 2).is_ok());
        let none = Limits {
            max_swarm_depth: 0,
            ..Limits::default()
        };
        assert!(validate_plan(&with_sub(plan(vec![]), None), &none).is_err());
    }

    #[test]
    fn sub_managers_are_named_apart_and_bounded_in_number_of_tasks() {
        let mut p = with_sub(plan(vec![]), None);
        assert!(validate_plan(&p, &Limits::default()).is_ok());
        p.sub_managers[0].name = "w".into();
        let e = validate_plan(&p, &Limits::default()).unwrap_err();
        assert!(e.message.contains("appears twice"), "{}", e.message);

        let mut p = with_sub(plan(vec![]), None);
        p.tasks.push(TaskDefinition {
            assigned_to: "lead".into(),
            ..task("s2", &[])
        });
        let limits = Limits {
            max_child_swarms: 1,
            ..Limits::default()
        };
        let e = validate_plan(&p, &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(
            e.message.contains("2 tasks to sub-managers"),
            "{}",
            e.message
        );

        let mut p = plan(vec![task("a", &[])]);
        p.workers[0].pool = crate::hierarchy::SUB_MANAGER_POOL.into();
        assert!(validate_plan(&p, &Limits::default()).is_err());
    }

    #[test]
    fn a_remote_agent_is_an_http_url_and_its_credential_a_name() {
        let mut p = plan(vec![task("a", &[])]);
        p.workers[0].a2a_url = Some("https://agents.example.com/a2a".into());
        p.workers[0].a2a_credential = Some("partner".into());
        assert!(validate_plan(&p, &Limits::default()).is_ok());
        for bad in ["ftp://x", "file:///etc/passwd", "https://a b"] {
            p.workers[0].a2a_url = Some(bad.into());
            assert!(validate_plan(&p, &Limits::default()).is_err(), "{bad}");
        }
        p.workers[0].a2a_url = Some("https://agents.example.com".into());
        p.workers[0].a2a_credential = Some("sk-live-123 456".into());
        let e = validate_plan(&p, &Limits::default()).unwrap_err();
        assert!(e.message.contains("a2a_credential"), "{}", e.message);
        p.workers[0].a2a_url = None;
        p.workers[0].a2a_credential = Some("partner".into());
        assert!(validate_plan(&p, &Limits::default()).is_err());
        p.workers[0].a2a_credential = None;
        p.workers[0].skill = Some("render".into());
        assert!(validate_plan(&p, &Limits::default()).is_ok());
        p.workers[0].skill = Some("render frames".into());
        assert!(validate_plan(&p, &Limits::default()).is_err());
    }

    #[test]
    fn a_sub_managers_own_plan_is_checked_and_named_in_the_refusal() {
        let bad = plan(vec![task("a", &["missing"])]);
        let e = validate_plan(&with_sub(plan(vec![]), Some(bad)), &Limits::default()).unwrap_err();
        assert!(
            e.message.starts_with("sub-manager \"lead\"'s plan:"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_plan_without_tasks_gives_each_sub_manager_a_task_too() {
        let mut p = with_sub(plan(vec![]), None);
        p.tasks.clear();
        let tasks = expand_tasks(&p);
        let owners: Vec<&str> = tasks.iter().map(|t| t.assigned_to.as_str()).collect();
        assert_eq!(owners, ["w", "lead"]);
        assert!(validate_plan(&p, &Limits::default()).is_ok());
    }

    #[test]
    fn a_fallback_is_another_task_that_could_run_in_its_place() {
        let guarded = |f: &str| TaskDefinition {
            on_failure: Some(f.into()),
            ..task("t", &[])
        };
        let ok = plan(vec![guarded("f"), task("f", &[]), task("d", &["t"])]);
        assert!(validate_plan(&ok, &Limits::default()).is_ok());
        for (p, why) in [
            (plan(vec![guarded("zz")]), "not a task of the plan"),
            (plan(vec![guarded("t")]), "its own fallback"),
            (
                plan(vec![guarded("f"), task("f", &["d"]), task("d", &["t"])]),
                "could never run in its place",
            ),
            (
                plan(vec![
                    guarded("f"),
                    TaskDefinition {
                        on_failure: Some("f".into()),
                        ..task("u", &[])
                    },
                    task("f", &[]),
                ]),
                "already the fallback of",
            ),
            (
                plan(vec![
                    guarded("f"),
                    TaskDefinition {
                        on_failure: Some("t".into()),
                        ..task("f", &[])
                    },
                ]),
                "lead back to it",
            ),
        ] {
            let e = validate_plan(&p, &Limits::default()).unwrap_err();
            assert!(e.message.contains(why), "{why}: {}", e.message);
        }
    }

    #[test]
    fn cycle_is_refused_with_its_members() {
        let p = plan(vec![
            task("a", &["c"]),
            task("b", &["a"]),
            task("c", &["b"]),
            task("d", &[]),
        ]);
        let e = validate_plan(&p, &Limits::default()).unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationFailed);
        assert!(e.message.contains("cycle"), "{}", e.message);
        assert_eq!(e.details["cycle"], "a,b,c");
    }

    #[test]
    fn unknown_dependency_and_worker_are_refused() {
        let e = validate_plan(&plan(vec![task("a", &["zz"])]), &Limits::default()).unwrap_err();
        assert!(e.message.contains("\"zz\""), "{}", e.message);
        let mut t = task("a", &[]);
        t.assigned_to = "nobody".into();
        let e = validate_plan(&plan(vec![t]), &Limits::default()).unwrap_err();
        assert!(e.message.contains("nobody"), "{}", e.message);
    }

    #[test]
    fn critical_path_gets_the_highest_priority() {
        let tasks = vec![
            task("a", &[]),
            task("b", &["a"]),
            task("c", &["b"]),
            task("x", &[]),
        ];
        assert_eq!(priorities(&tasks).unwrap(), vec![2, 1, 0, 0]);
    }

    #[test]
    fn empty_task_list_expands_to_one_task_per_worker() {
        let p = plan(vec![]);
        let tasks = expand_tasks(&p);
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].description, "d");
        assert!(validate_plan(&p, &Limits::default()).is_ok());
    }

    #[test]
    fn duplicate_dependencies_and_long_titles_are_refused() {
        let e = validate_plan(
            &plan(vec![task("a", &[]), task("b", &["a", "a"])]),
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationFailed);
        assert!(e.message.contains("twice"), "{}", e.message);
        let mut t = task("a", &[]);
        t.title = "t".repeat(Limits::default().task.max_title_bytes + 1);
        let e = validate_plan(&plan(vec![t]), &Limits::default()).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.contains("title"), "{}", e.message);
        // A long unknown dependency is quoted only in part.
        let e = validate_plan(
            &plan(vec![task("a", &[&"z".repeat(10_000)])]),
            &Limits::default(),
        )
        .unwrap_err();
        assert!(e.message.len() < 200, "{}", e.message);
    }

    #[test]
    fn gates_are_bounded_per_task_and_per_plan() {
        use crate::gates::GateSpec;
        let limits = Limits::default();
        let regex = GateSpec::Regex {
            pattern: "^ok".into(),
            forbid: false,
            description: None,
        };
        let mut t = task("a", &[]);
        t.gates = vec![regex.clone(); 6000];
        let e = validate_plan(&plan(vec![t]), &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert_eq!(e.details["task_id"], "a");
        assert!(e.message.contains("6000 gates"), "{}", e.message);
        // Within every task's bounds, but too many in the whole plan.
        let per_task = limits.task.max_gates_per_task;
        let tasks: Vec<TaskDefinition> = (0..limits.task.max_regexes_per_plan / per_task + 1)
            .map(|i| {
                let mut t = task(&format!("t{i}"), &[]);
                t.gates = vec![regex.clone(); per_task];
                t
            })
            .collect();
        let e = validate_plan(&plan(tasks), &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.contains("regular expressions"), "{}", e.message);
        let mut t = task("a", &[]);
        t.gates = vec![GateSpec::JsonSchema {
            schema: serde_json::json!({"items": {"$ref": "#"}}),
        }];
        let e = validate_plan(&plan(vec![t]), &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationFailed);
        assert!(e.message.starts_with("task \"a\": "), "{}", e.message);
    }

    #[test]
    fn a_map_is_over_its_own_dependency_with_a_bounded_concurrency() {
        let with_map = |id: &str, deps: &[&str], v: serde_json::Value| {
            let mut t = task(id, deps);
            t.map = Some(serde_json::from_value(v).unwrap());
            t
        };
        let limits = Limits::default();
        let good = with_map(
            "m",
            &["list"],
            serde_json::json!({"over": {"task": "list", "pointer": "/files"}, "concurrency": 4}),
        );
        assert!(validate_plan(&plan(vec![task("list", &[]), good.clone()]), &limits).is_ok());
        let e = validate_plan(
            &plan(vec![
                task("list", &[]),
                task("other", &[]),
                with_map(
                    "m",
                    &["list"],
                    serde_json::json!({"over": {"task": "other"}}),
                ),
            ]),
            &limits,
        )
        .unwrap_err();
        assert!(
            e.message.contains("not one of its dependencies"),
            "{}",
            e.message
        );
        for c in [0, crate::map::MAX_CONCURRENCY + 1] {
            let t = with_map(
                "m",
                &["list"],
                serde_json::json!({"over": {"task": "list"}, "concurrency": c}),
            );
            let e = validate_plan(&plan(vec![task("list", &[]), t]), &limits).unwrap_err();
            assert!(e.message.contains("concurrency"), "{}", e.message);
        }
        let e = validate_plan(
            &plan(vec![
                task("list", &[]),
                good.clone(),
                with_map("n", &["m"], serde_json::json!({"over": {"task": "m"}})),
            ]),
            &limits,
        )
        .unwrap_err();
        assert!(e.message.contains("itself a map task"), "{}", e.message);
        let e = validate_plan(
            &plan(vec![task("list", &[]), good.clone(), task("m-3", &[])]),
            &limits,
        )
        .unwrap_err();
        assert!(e.message.contains("one of its children"), "{}", e.message);
        let e = validate_plan(
            &plan(vec![
                task("list", &[]),
                with_map(
                    "m",
                    &["list"],
                    serde_json::json!({"over": {"task": "list", "pointer": "files"}}),
                ),
            ]),
            &limits,
        )
        .unwrap_err();
        assert!(e.message.contains("pointer"), "{}", e.message);
    }

    #[test]
    fn a_condition_may_name_only_the_tasks_own_dependencies() {
        let when = |v: serde_json::Value| -> Option<Condition> {
            Some(serde_json::from_value(v).unwrap())
        };
        let mut t = task("b", &["a"]);
        t.condition = when(serde_json::json!(
            {"when": {"task": "a", "pointer": "/needs_review", "equals": true}}
        ));
        let ok = plan(vec![task("a", &[]), task("x", &[]), t.clone()]);
        assert!(validate_plan(&ok, &Limits::default()).is_ok());
        // "x" is a task of the plan, but not one b waits for.
        t.condition = when(serde_json::json!({"all": [
            {"when": {"task": "a", "status": "completed"}},
            {"when": {"task": "x", "status": "completed"}}
        ]}));
        let e = validate_plan(
            &plan(vec![task("a", &[]), task("x", &[]), t.clone()]),
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationFailed);
        assert_eq!(e.details["task_id"], "b");
        assert_eq!(e.details["dependency"], "x");
        assert!(
            e.message.contains("not one of its dependencies"),
            "{}",
            e.message
        );
        // A malformed test and an empty list are refused too.
        t.condition = when(serde_json::json!({"when": {"task": "a", "pointer": "/x"}}));
        let e =
            validate_plan(&plan(vec![task("a", &[]), t.clone()]), &Limits::default()).unwrap_err();
        assert!(e.message.contains("needs `equals`"), "{}", e.message);
        t.condition = when(serde_json::json!({"any": []}));
        let e = validate_plan(&plan(vec![task("a", &[]), t]), &Limits::default()).unwrap_err();
        assert!(e.message.contains("no conditions"), "{}", e.message);
    }

    #[test]
    fn limits_from_an_older_build_decode_with_defaults() {
        let old = serde_json::json!({"max_tasks": 5, "max_steps": 3});
        let limits: Limits = serde_json::from_value(old).unwrap();
        assert_eq!(limits.max_tasks, 5);
        assert_eq!(
            limits.task.max_gates_per_task,
            Limits::default().task.max_gates_per_task
        );
        assert_eq!(
            limits.task.max_schema_depth,
            Limits::default().task.max_schema_depth
        );
    }

    proptest! {
        /// Any graph whose edges point backwards in the list is acyclic, and
        /// the order puts each task after its dependencies.
        #[test]
        fn order_respects_dependencies(edges in proptest::collection::vec((1usize..30, 0usize..30), 0..80)) {
            let n = 30;
            let mut tasks: Vec<TaskDefinition> = (0..n).map(|i| task(&format!("t{i}"), &[])).collect();
            for (a, b) in edges {
                if b < a {
                    let dep = format!("t{b}");
                    if !tasks[a].dependencies.contains(&dep) {
                        tasks[a].dependencies.push(dep);
                    }
                }
            }
            let order = topological_order(&tasks).unwrap();
            prop_assert_eq!(order.len(), n);
            let pos: HashMap<usize, usize> = order.iter().enumerate().map(|(p, &i)| (i, p)).collect();
            for (i, t) in tasks.iter().enumerate() {
                for d in &t.dependencies {
                    let j: usize = d[1..].parse().unwrap();
                    prop_assert!(pos[&j] < pos[&i]);
                }
            }
            let pr = priorities(&tasks).unwrap();
            for (i, t) in tasks.iter().enumerate() {
                for d in &t.dependencies {
                    let j: usize = d[1..].parse().unwrap();
                    prop_assert!(pr[j] > pr[i]);
                }
            }
        }
    }
}
