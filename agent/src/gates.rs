//! Quality gates: checks a result must pass, each explaining a failure in
//! words a model can act on.
//!
//! A [`GateSpec`] is the serializable description (so gates can travel in a
//! task assignment); [`BuildGate::build`] makes a [`Gate`]; a [`GateChain`]
//! runs several and reports every verdict. The agent loop sends failures
//! back to the model for correction (see `agent_loop`).
//!
//! Gates that read structure (JSON, SQL) accept the output wrapped in one
//! Markdown code fence, as models often write it.
//!
//! **Bounded work.** Building a gate checks its spec against the limits
//! again ([`swarm_common::gates::check_gate`], [`GateOptions::limits`]), so
//! a plan that never went through intake cannot make this process blow up:
//! a spec over a limit becomes a gate that fails with the reason. Regular
//! expressions and JSON schemas are compiled once, on the first check, on a
//! blocking thread (`spawn_blocking`) under [`GateOptions::compile_timeout`],
//! and kept: in the gate, and in a small process-wide cache keyed by the
//! spec's content, so a manager that builds a task's chain for every result
//! compiles each once. Their checks run on a blocking thread too. A pattern
//! or schema that does not compile, or not in time, fails its gate with the
//! reason; a compilation that overran goes on in the background and is
//! bounded by the same limits.
//!
//! **Command gates** run a program only when this process allows it
//! ([`CommandPolicy`]: none by default, or a list of programs), with the
//! minimal environment and the limits of every child process
//! (`crate::command`), in the worker's workspace or, on a manager, in
//! a temporary folder made for the check.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use swarm_common::Limits;
use tracing::Instrument as _;

use crate::command::run_command;

/// The most bytes of a command gate's stderr quoted in its reason.
const MAX_REASON_BYTES: usize = 2048;

/// A gate's judgement of one output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateCheck {
    /// Whether the output passed.
    pub passed: bool,
    /// Why it failed (empty when it passed).
    pub reason: String,
}

impl GateCheck {
    /// A pass.
    pub fn pass() -> GateCheck {
        GateCheck {
            passed: true,
            reason: String::new(),
        }
    }

    /// A failure with `reason`.
    pub fn fail(reason: impl Into<String>) -> GateCheck {
        GateCheck {
            passed: false,
            reason: reason.into(),
        }
    }
}

/// A check an output must pass.
#[async_trait]
pub trait Gate: Send + Sync {
    /// Its name, for verdicts and feedback.
    fn name(&self) -> String;
    /// Judges `output`.
    async fn check(&self, output: &str) -> GateCheck;
}

/// A gate that could not be built from its spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gate {gate}: {message}")]
pub struct GateError {
    /// The gate's kind.
    pub gate: String,
    /// What is wrong with its spec.
    pub message: String,
}

pub use swarm_common::gates::GateSpec;

/// Which programs `command` gates may run on this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CommandPolicy {
    /// None: a command gate fails, saying so (the default). A spec arrives
    /// over the network and must not run programs unless the operator
    /// allowed them.
    #[default]
    Refuse,
    /// Only these programs, each named exactly as the gate names it (`jq`,
    /// `/usr/local/bin/check-report`). A gate naming another program fails
    /// with the reason and nothing runs. Allow only checkers whose arguments
    /// cannot make them run code: the arguments come from the plan, so
    /// allowing `sh` or `python3` allows anything.
    Allow(BTreeSet<String>),
    /// Any program (`--allow-command-gates`). **Unsafe**: whoever can submit
    /// a mission can run any program on this host, as this process's user.
    /// For development only.
    Any,
}

impl CommandPolicy {
    /// Why `program` may not run, if it may not.
    fn refusal(&self, program: &str) -> Option<String> {
        match self {
            CommandPolicy::Any => None,
            CommandPolicy::Refuse => Some("command gates are disabled on this process".into()),
            CommandPolicy::Allow(programs) if programs.contains(program) => None,
            CommandPolicy::Allow(programs) => Some(format!(
                "program {:?} is not on this process's command-gate allow-list ({}); it was not run",
                crate::text::shorten(program, 80),
                programs.iter().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
    }
}

/// How gates are built on this process.
#[derive(Debug, Clone)]
pub struct GateOptions {
    /// Which programs command gates may run.
    pub commands: CommandPolicy,
    /// Where command gates run: the worker's workspace; `None` makes a
    /// temporary folder for each check (a manager's).
    pub command_dir: Option<std::path::PathBuf>,
    /// The bounds gates are built within (checked again here; see the
    /// module's doc).
    pub limits: Limits,
    /// How long compiling one pattern or schema, or checking one output
    /// against it, may take before its gate fails.
    pub compile_timeout: Duration,
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            commands: CommandPolicy::Refuse,
            command_dir: None,
            limits: Limits::default(),
            compile_timeout: Duration::from_secs(10),
        }
    }
}

/// Makes a [`Gate`] of its description.
pub trait BuildGate {
    /// Builds the gate. Cheap: patterns and schemas are compiled on the
    /// first check.
    fn build(&self, options: &GateOptions) -> Result<Arc<dyn Gate>, GateError>;
}

impl BuildGate for GateSpec {
    fn build(&self, options: &GateOptions) -> Result<Arc<dyn Gate>, GateError> {
        let err = |message: String| GateError {
            gate: self.name(),
            message,
        };
        swarm_common::gates::check_gate(self, &options.limits).map_err(|e| err(e.message))?;
        Ok(match self {
            GateSpec::JsonSchema { schema } => Arc::new(JsonSchemaGate::new(schema, options)),
            GateSpec::Regex {
                pattern,
                forbid,
                description,
            } => Arc::new(RegexGate::new(
                pattern,
                *forbid,
                description.clone(),
                options,
            )),
            GateSpec::Length {
                min_chars,
                max_chars,
            } => Arc::new(LengthGate {
                min_chars: *min_chars,
                max_chars: *max_chars,
            }),
            GateSpec::Sql { dialect, schema } => {
                Arc::new(SqlGate::new(dialect.as_deref(), schema.clone()).map_err(err)?)
            }
            GateSpec::Command {
                program,
                args,
                timeout_secs,
            } => {
                if let Some(why) = options.commands.refusal(program) {
                    return Err(err(why));
                }
                Arc::new(CommandGate {
                    program: program.clone(),
                    args: args.clone(),
                    timeout: Duration::from_secs(
                        (*timeout_secs).clamp(1, options.limits.task.max_command_gate_secs.max(1)),
                    ),
                    dir: options.command_dir.clone(),
                })
            }
        })
    }
}

/// The first ten ways `value` breaks the schema, each with where it is.
pub(crate) fn schema_errors(
    validator: &jsonschema::Validator,
    value: &serde_json::Value,
) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(10)
        .map(|e| {
            let at = e.instance_path.to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect()
}

/// The output without one surrounding Markdown code fence, if it has one.
pub fn strip_code_fence(output: &str) -> &str {
    let trimmed = output.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return trimmed;
    };
    // Drop the info string (`json`, `sql`) on the opening line.
    match body.split_once('\n') {
        Some((_, inner)) => inner.trim(),
        None => body.trim(),
    }
}

// ---------------------------------------------------------------- compiled once

/// A compiled regular expression or JSON schema.
enum Artifact {
    Regex(regex::Regex),
    Schema(jsonschema::Validator),
}

/// One artifact, compiled at most once: the gates built from equal specs
/// share it (through [`cached`]) and wait for the same compilation.
#[derive(Clone)]
struct Compiled {
    cell: Arc<tokio::sync::OnceCell<Result<Arc<Artifact>, String>>>,
    /// Its key in the cache.
    digest: [u8; 32],
}

/// How many compiled artifacts the process keeps for gates built later.
/// A regular expression at the size limits keeps about 2-4 MiB (its
/// automata and match caches), a schema far less, so the cache holds at
/// most about 64 MiB however many plans pass through.
const CACHE_ENTRIES: usize = 16;

type Cache = HashMap<[u8; 32], (Compiled, u64)>;

/// Recently built artifacts by the digest of what they were built from,
/// with the tick of their last use.
static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
static TICK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn with_cache<T>(f: impl FnOnce(&mut Cache) -> T) -> T {
    let mut guard = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// The shared cell for `key` (what is compiled, and under which limits),
/// made empty when the cache has none; the least recently used entry makes
/// room. Gates keep their cells, so an entry dropped here stays alive for
/// as long as a gate uses it.
fn cached(key: &[u8]) -> Compiled {
    let digest: [u8; 32] = sha2::Sha256::digest(key).into();
    let tick = TICK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    with_cache(|map| {
        if let Some((compiled, used)) = map.get_mut(&digest) {
            *used = tick;
            return compiled.clone();
        }
        if map.len() >= CACHE_ENTRIES
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
        {
            map.remove(&oldest);
        }
        let compiled = Compiled {
            cell: Arc::default(),
            digest,
        };
        map.insert(digest, (compiled.clone(), tick));
        compiled
    })
}

/// Runs `work` on a blocking thread, failing when it takes longer than
/// `limit` (it then finishes in the background, unobserved) or panics.
async fn off_thread<T: Send + 'static>(
    what: &str,
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    match tokio::time::timeout(limit, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err(format!("{what} failed: {e}")),
        Err(_) => Err(format!("{what} took longer than {limit:?}")),
    }
}

/// The artifact of `compiled`, compiled by `compile` off the async threads
/// on first use. A failure is kept with the gate, so its checks fail at
/// once. One that may pass on another try (too slow on a busy process, a
/// panic) is also dropped from the cache, so that a chain built later tries
/// again; an invalid pattern or schema stays cached, refused.
async fn artifact(
    compiled: &Compiled,
    what: &str,
    limit: Duration,
    compile: impl FnOnce() -> Result<Artifact, String> + Send + 'static,
) -> Result<Arc<Artifact>, String> {
    compiled
        .cell
        .get_or_init(|| async move {
            match off_thread(what, limit, compile).await {
                Ok(done) => done.map(Arc::new),
                Err(overrun) => {
                    with_cache(|map| {
                        if map
                            .get(&compiled.digest)
                            .is_some_and(|(c, _)| Arc::ptr_eq(&c.cell, &compiled.cell))
                        {
                            map.remove(&compiled.digest);
                        }
                    });
                    Err(overrun)
                }
            }
        })
        .await
        .clone()
}

// ---------------------------------------------------------------- JSON schema

/// The output is JSON valid against a schema.
pub struct JsonSchemaGate {
    schema: Arc<serde_json::Value>,
    compiled: Compiled,
    limits: Limits,
    timeout: Duration,
}

impl JsonSchemaGate {
    /// A gate for `schema`, compiled on its first check. Patterns in the
    /// schema use the `regex` crate (linear-time matching; no look-around
    /// or back-references), within the limits' compiled sizes.
    pub fn new(schema: &serde_json::Value, options: &GateOptions) -> JsonSchemaGate {
        let limits = options.limits.clone();
        let key = serde_json::to_vec(&(
            "json_schema",
            limits.task.max_regex_compiled_bytes,
            limits.task.max_regex_dfa_bytes,
            schema,
        ))
        .unwrap_or_default();
        JsonSchemaGate {
            schema: Arc::new(schema.clone()),
            compiled: cached(&key),
            limits,
            timeout: options.compile_timeout,
        }
    }

    async fn validator(&self) -> Result<Arc<Artifact>, String> {
        let schema = Arc::clone(&self.schema);
        let limits = self.limits.clone();
        artifact(
            &self.compiled,
            "compiling the schema",
            self.timeout,
            move || {
                // `new` is public: a gate made without `build` is bounded too.
                swarm_common::gates::check_schema(&schema, &limits).map_err(|e| e.message)?;
                jsonschema::options()
                    .with_pattern_options(
                        jsonschema::PatternOptions::regex()
                            .size_limit(limits.task.max_regex_compiled_bytes)
                            .dfa_size_limit(limits.task.max_regex_dfa_bytes),
                    )
                    .build(&schema)
                    .map(Artifact::Schema)
                    .map_err(|e| {
                        format!(
                            "invalid schema: {}",
                            crate::text::shorten(&e.to_string(), 300)
                        )
                    })
            },
        )
        .await
    }
}

#[async_trait]
impl Gate for JsonSchemaGate {
    fn name(&self) -> String {
        "json_schema".to_string()
    }

    async fn check(&self, output: &str) -> GateCheck {
        let compiled = match self.validator().await {
            Ok(c) => c,
            Err(why) => return GateCheck::fail(format!("the gate cannot run: {why}")),
        };
        let output = output.to_string();
        let checked = off_thread("checking the output", self.timeout, move || {
            let Artifact::Schema(validator) = compiled.as_ref() else {
                return GateCheck::fail("the gate cannot run: its schema did not compile");
            };
            let value: serde_json::Value = match serde_json::from_str(strip_code_fence(&output)) {
                Ok(v) => v,
                Err(e) => return GateCheck::fail(format!("the output is not valid JSON: {e}")),
            };
            let errors = schema_errors(validator, &value);
            if errors.is_empty() {
                GateCheck::pass()
            } else {
                GateCheck::fail(format!(
                    "the JSON does not match the schema: {}",
                    errors.join("; ")
                ))
            }
        })
        .await;
        checked.unwrap_or_else(|why| GateCheck::fail(format!("the gate cannot run: {why}")))
    }
}

// ---------------------------------------------------------------- regex

/// The output matches (or must not match) a regular expression.
pub struct RegexGate {
    pattern: String,
    forbid: bool,
    description: Option<String>,
    compiled: Compiled,
    limits: Limits,
    timeout: Duration,
}

impl RegexGate {
    /// A gate for `pattern`, compiled on its first check within the limits'
    /// compiled sizes ([`swarm_common::limits::TaskLimits::max_regex_compiled_bytes`],
    /// [`swarm_common::limits::TaskLimits::max_regex_dfa_bytes`]).
    pub fn new(
        pattern: &str,
        forbid: bool,
        description: Option<String>,
        options: &GateOptions,
    ) -> RegexGate {
        let limits = options.limits.clone();
        let key = serde_json::to_vec(&(
            "regex",
            limits.task.max_regex_compiled_bytes,
            limits.task.max_regex_dfa_bytes,
            pattern,
        ))
        .unwrap_or_default();
        RegexGate {
            pattern: pattern.to_string(),
            forbid,
            description,
            compiled: cached(&key),
            limits,
            timeout: options.compile_timeout,
        }
    }

    async fn regex(&self) -> Result<Arc<Artifact>, String> {
        let pattern = self.pattern.clone();
        let limits = self.limits.clone();
        artifact(
            &self.compiled,
            "compiling the pattern",
            self.timeout,
            move || {
                regex::RegexBuilder::new(&pattern)
                    .size_limit(limits.task.max_regex_compiled_bytes)
                    .dfa_size_limit(limits.task.max_regex_dfa_bytes)
                    .build()
                    .map(Artifact::Regex)
                    .map_err(|e| {
                        format!(
                            "invalid pattern: {}",
                            crate::text::shorten(&e.to_string(), 300)
                        )
                    })
            },
        )
        .await
    }
}

#[async_trait]
impl Gate for RegexGate {
    fn name(&self) -> String {
        format!(
            "regex{}({})",
            if self.forbid { "_forbid" } else { "" },
            self.pattern
        )
    }

    async fn check(&self, output: &str) -> GateCheck {
        let compiled = match self.regex().await {
            Ok(c) => c,
            Err(why) => return GateCheck::fail(format!("the gate cannot run: {why}")),
        };
        let what = self
            .description
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        let pattern = self.pattern.clone();
        let forbid = self.forbid;
        let output = output.to_string();
        let checked = off_thread("matching the output", self.timeout, move || {
            let Artifact::Regex(regex) = compiled.as_ref() else {
                return GateCheck::fail("the gate cannot run: its pattern did not compile");
            };
            match (regex.find(&output), forbid) {
                (None, false) => GateCheck::fail(format!(
                    "the output does not match the required pattern /{pattern}/{what}"
                )),
                (Some(m), true) => GateCheck::fail(format!(
                    "the output contains {:?}, which the pattern /{pattern}/ forbids{what}",
                    crate::text::shorten(m.as_str(), 200),
                )),
                _ => GateCheck::pass(),
            }
        })
        .await;
        checked.unwrap_or_else(|why| GateCheck::fail(format!("the gate cannot run: {why}")))
    }
}

// ---------------------------------------------------------------- length

/// The output's length in characters is within bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthGate {
    /// The fewest characters.
    pub min_chars: Option<usize>,
    /// The most characters.
    pub max_chars: Option<usize>,
}

#[async_trait]
impl Gate for LengthGate {
    fn name(&self) -> String {
        "length".to_string()
    }

    async fn check(&self, output: &str) -> GateCheck {
        let n = output.chars().count();
        if let Some(min) = self.min_chars
            && n < min
        {
            return GateCheck::fail(format!(
                "the output is {n} characters long; it must be at least {min}"
            ));
        }
        if let Some(max) = self.max_chars
            && n > max
        {
            return GateCheck::fail(format!(
                "the output is {n} characters long; it must be at most {max}"
            ));
        }
        GateCheck::pass()
    }
}

// ---------------------------------------------------------------- SQL

/// The output is SQL that parses in a dialect and, with a schema, names
/// only tables and columns that exist.
pub struct SqlGate {
    /// A dialect name `dialect_from_str` knows (dialects are not `Send`,
    /// so one is made per check).
    dialect_name: String,
    /// Lower-cased table name to lower-cased columns.
    schema: Option<BTreeMap<String, BTreeSet<String>>>,
}

impl SqlGate {
    /// A gate for `dialect` (`generic` when `None`) and an optional schema.
    pub fn new(
        dialect: Option<&str>,
        schema: Option<BTreeMap<String, Vec<String>>>,
    ) -> Result<SqlGate, String> {
        let name = dialect.unwrap_or("generic").to_ascii_lowercase();
        if sqlparser::dialect::dialect_from_str(&name).is_none() {
            return Err(format!("unknown SQL dialect {name:?}"));
        }
        let schema = schema.map(|s| {
            s.into_iter()
                .map(|(table, columns)| {
                    (
                        last_part(&table).to_ascii_lowercase(),
                        columns.iter().map(|c| c.to_ascii_lowercase()).collect(),
                    )
                })
                .collect()
        });
        Ok(SqlGate {
            dialect_name: name,
            schema,
        })
    }
}

fn last_part(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// Tables, aliases and column references found in statements.
#[derive(Default)]
struct SqlNames {
    tables: BTreeSet<String>,
    /// Table aliases, CTE names and select-item aliases: names that need
    /// not be in the schema.
    aliases: BTreeSet<String>,
    /// Column references: (qualifier, column).
    columns: Vec<(Option<String>, String)>,
}

impl sqlparser::ast::Visitor for SqlNames {
    type Break = ();

    fn pre_visit_query(&mut self, query: &sqlparser::ast::Query) -> ControlFlow<()> {
        use sqlparser::ast::{SelectItem, SetExpr};
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.aliases
                    .insert(cte.alias.name.value.to_ascii_lowercase());
            }
        }
        if let SetExpr::Select(select) = query.body.as_ref() {
            for item in &select.projection {
                if let SelectItem::ExprWithAlias { alias, .. } = item {
                    self.aliases.insert(alias.value.to_ascii_lowercase());
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &sqlparser::ast::TableFactor) -> ControlFlow<()> {
        use sqlparser::ast::TableFactor;
        let alias = match factor {
            TableFactor::Table { alias, .. } | TableFactor::Derived { alias, .. } => alias,
            _ => &None,
        };
        if let Some(alias) = alias {
            self.aliases.insert(alias.name.value.to_ascii_lowercase());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_relation(&mut self, relation: &sqlparser::ast::ObjectName) -> ControlFlow<()> {
        if let Some(last) = relation.0.last() {
            self.tables
                .insert(last.to_string().trim_matches('"').to_ascii_lowercase());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &sqlparser::ast::Expr) -> ControlFlow<()> {
        use sqlparser::ast::Expr;
        match expr {
            Expr::Identifier(ident) => {
                // A double-quoted identifier may be a string in some dialects; still a name.
                self.columns.push((None, ident.value.to_ascii_lowercase()));
            }
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                let n = parts.len();
                self.columns.push((
                    Some(parts[n - 2].value.to_ascii_lowercase()),
                    parts[n - 1].value.to_ascii_lowercase(),
                ));
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

impl SqlGate {
    fn check_schema(
        &self,
        schema: &BTreeMap<String, BTreeSet<String>>,
        statements: &[sqlparser::ast::Statement],
    ) -> Vec<String> {
        let mut names = SqlNames::default();
        let _ = sqlparser::ast::Visit::visit(&statements.to_vec(), &mut names);
        let mut problems = Vec::new();
        let known: Vec<&String> = schema.keys().collect();
        for table in &names.tables {
            if !schema.contains_key(table) && !names.aliases.contains(table) {
                problems.push(format!(
                    "table {table:?} does not exist (the tables are {})",
                    known
                        .iter()
                        .map(|t| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        // Columns may come from any table the statement uses (or, when it
        // names none in the schema, from any table at all).
        let used: Vec<&BTreeSet<String>> =
            names.tables.iter().filter_map(|t| schema.get(t)).collect();
        let pool: Vec<&BTreeSet<String>> = if used.is_empty() {
            schema.values().collect()
        } else {
            used
        };
        let mut reported = BTreeSet::new();
        for (qualifier, column) in &names.columns {
            if names.aliases.contains(column) {
                continue;
            }
            let exists = match qualifier.as_ref().and_then(|q| schema.get(q)) {
                Some(cols) => cols.contains(column),
                None => pool.iter().any(|cols| cols.contains(column)),
            };
            if !exists && reported.insert(column.clone()) {
                let shown = match qualifier {
                    Some(q) => format!("{q}.{column}"),
                    None => column.clone(),
                };
                problems.push(format!(
                    "column {shown:?} does not exist in the tables used"
                ));
            }
        }
        problems
    }
}

#[async_trait]
impl Gate for SqlGate {
    fn name(&self) -> String {
        "sql".to_string()
    }

    async fn check(&self, output: &str) -> GateCheck {
        let sql = strip_code_fence(output);
        let parsed = match sqlparser::dialect::dialect_from_str(&self.dialect_name) {
            Some(dialect) => sqlparser::parser::Parser::parse_sql(dialect.as_ref(), sql),
            None => return GateCheck::fail(format!("unknown SQL dialect {:?}", self.dialect_name)),
        };
        let statements = match parsed {
            Ok(s) => s,
            Err(e) => {
                return GateCheck::fail(format!(
                    "the output is not valid {} SQL: {e}",
                    self.dialect_name
                ));
            }
        };
        if statements.is_empty() {
            return GateCheck::fail("the output contains no SQL statement");
        }
        if let Some(schema) = &self.schema {
            let problems = self.check_schema(schema, &statements);
            if !problems.is_empty() {
                return GateCheck::fail(format!(
                    "the SQL does not fit the schema: {}",
                    problems.join("; ")
                ));
            }
        }
        GateCheck::pass()
    }
}

// ---------------------------------------------------------------- command

/// An external command judges the output: it reads it on stdin, exits 0 to
/// pass, and explains a failure on stderr. It runs like every child process
/// (`crate::command`): a minimal environment, its own process group,
/// killed after `timeout`.
#[derive(Debug, Clone)]
pub struct CommandGate {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How long it may run.
    pub timeout: Duration,
    /// Where it runs (also its `HOME`); `None` makes a temporary folder for
    /// each check, removed after it.
    pub dir: Option<std::path::PathBuf>,
}

#[async_trait]
impl Gate for CommandGate {
    fn name(&self) -> String {
        format!("command({})", self.program)
    }

    async fn check(&self, output: &str) -> GateCheck {
        let scratch;
        let dir = match &self.dir {
            Some(dir) => dir.as_path(),
            None => match tempfile::Builder::new().prefix("swarm-gate-").tempdir() {
                Ok(made) => {
                    scratch = made;
                    scratch.path()
                }
                Err(e) => {
                    return GateCheck::fail(format!(
                        "the check could not run: no temporary folder: {e}"
                    ));
                }
            },
        };
        match run_command(
            &self.program,
            &self.args,
            dir,
            Some(output),
            self.timeout,
            MAX_REASON_BYTES,
        )
        .await
        {
            Ok(out) if out.success() => GateCheck::pass(),
            Ok(out) => {
                let why = if out.stderr.trim().is_empty() {
                    out.stdout.trim().to_string()
                } else {
                    out.stderr.trim().to_string()
                };
                GateCheck::fail(format!(
                    "{} exited with status {}: {why}",
                    self.program,
                    out.status_text()
                ))
            }
            Err(e) => GateCheck::fail(format!("the check could not run: {e}")),
        }
    }
}

// ---------------------------------------------------------------- chain

/// Several gates, run in order; every verdict is kept. Build it once per
/// task run and check every answer with it: its patterns and schemas are
/// compiled on the first check and kept.
#[derive(Clone, Default)]
pub struct GateChain {
    gates: Vec<Arc<dyn Gate>>,
}

impl std::fmt::Debug for GateChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.gates.iter().map(|g| g.name()))
            .finish()
    }
}

impl GateChain {
    /// A chain of `gates`.
    pub fn new(gates: Vec<Arc<dyn Gate>>) -> GateChain {
        GateChain { gates }
    }

    /// A chain built from specs, within `options.limits`. A spec that
    /// cannot be built becomes a gate that always fails with the reason, so
    /// a bad spec is reported, never silently skipped; more gates, or more
    /// regular expressions, than a task may have make a chain of one such
    /// gate. Cheap: nothing is compiled until the first check.
    pub fn from_specs(specs: &[GateSpec], options: &GateOptions) -> GateChain {
        let limits = &options.limits;
        let refuse = |gate: &str, message: String| GateChain {
            gates: vec![Arc::new(Broken(GateError {
                gate: gate.to_string(),
                message,
            })) as Arc<dyn Gate>],
        };
        if specs.len() > limits.task.max_gates_per_task {
            return refuse(
                "gates",
                format!(
                    "the task has {} gates; the limit is {}",
                    specs.len(),
                    limits.task.max_gates_per_task
                ),
            );
        }
        let mut regexes = 0;
        let mut gates = Vec::with_capacity(specs.len());
        for spec in specs {
            if let Ok(n) = swarm_common::gates::check_gate(spec, limits) {
                regexes += n;
            }
            gates.push(match spec.build(options) {
                Ok(gate) => gate,
                Err(e) => Arc::new(Broken(e)) as Arc<dyn Gate>,
            });
        }
        if regexes > limits.task.max_regexes_per_task {
            return refuse(
                "gates",
                format!(
                    "the task's gates use {regexes} regular expressions; the limit is {}",
                    limits.task.max_regexes_per_task
                ),
            );
        }
        GateChain { gates }
    }

    /// Whether the chain has no gates.
    pub fn is_empty(&self) -> bool {
        self.gates.is_empty()
    }

    /// Every gate's name and verdict on `output`, in order.
    pub async fn check(&self, output: &str) -> Vec<(String, GateCheck)> {
        let mut verdicts = Vec::with_capacity(self.gates.len());
        for gate in &self.gates {
            let name = gate.name();
            // A span per gate when traces are exported (target `swarm_otel`,
            // see `crate::provider`).
            let span = tracing::info_span!(
                target: "swarm_otel",
                "gate",
                otel.name = format!("gate {name}"),
                swarm.gate.name = %name,
                swarm.gate.passed = tracing::field::Empty,
            );
            let check = gate.check(output).instrument(span.clone()).await;
            span.record("swarm.gate.passed", check.passed);
            verdicts.push((name, check));
        }
        verdicts
    }
}

/// A gate whose spec could not be built: it always fails, saying why.
struct Broken(GateError);

#[async_trait]
impl Gate for Broken {
    fn name(&self) -> String {
        self.0.gate.clone()
    }

    async fn check(&self, _output: &str) -> GateCheck {
        GateCheck::fail(format!("the gate cannot run: {}", self.0.message))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    async fn check(spec: GateSpec, output: &str) -> GateCheck {
        spec.build(&GateOptions {
            commands: CommandPolicy::Any,
            ..GateOptions::default()
        })
        .unwrap()
        .check(output)
        .await
    }

    #[tokio::test]
    async fn json_schema_gate() {
        let spec = GateSpec::JsonSchema {
            schema: json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}),
        };
        assert!(check(spec.clone(), "```json\n{\"n\": 3}\n```").await.passed);
        let c = check(spec.clone(), r#"{"n": "three"}"#).await;
        assert!(!c.passed && c.reason.contains("/n"), "{}", c.reason);
        let c = check(spec, "n is 3").await;
        assert!(c.reason.contains("not valid JSON"), "{}", c.reason);
        // An invalid schema fails its gate, saying why, on the first check.
        let c = check(
            GateSpec::JsonSchema {
                schema: json!({"type": 5}),
            },
            "1",
        )
        .await;
        assert!(
            !c.passed && c.reason.contains("invalid schema"),
            "{}",
            c.reason
        );
        // Schema patterns use the linear-time engine: look-around is refused.
        let spec = GateSpec::JsonSchema {
            schema: json!({"type": "string", "pattern": "^(?=a)a"}),
        };
        let c = check(spec, "\"a\"").await;
        assert!(
            !c.passed && c.reason.contains("invalid schema"),
            "{}",
            c.reason
        );
    }

    #[tokio::test]
    async fn regex_and_length_gates() {
        let spec = GateSpec::Regex {
            pattern: r"^\d+$".into(),
            forbid: false,
            description: Some("a number".into()),
        };
        assert!(check(spec.clone(), "42").await.passed);
        let c = check(spec, "forty-two").await;
        assert!(c.reason.contains("a number"), "{}", c.reason);
        let spec = GateSpec::Regex {
            pattern: "(?i)lorem".into(),
            forbid: true,
            description: None,
        };
        assert!(!check(spec, "Lorem ipsum").await.passed);
        let spec = GateSpec::Length {
            min_chars: Some(2),
            max_chars: Some(4),
        };
        assert!(check(spec.clone(), "héé").await.passed);
        assert!(check(spec.clone(), "x").await.reason.contains("at least 2"));
        assert!(check(spec, "xxxxx").await.reason.contains("at most 4"));
    }

    #[tokio::test]
    async fn sql_gate_parses_and_checks_the_schema() {
        let schema = BTreeMap::from([
            (
                "users".to_string(),
                vec!["id".to_string(), "name".to_string()],
            ),
            (
                "orders".to_string(),
                vec!["id".to_string(), "user_id".to_string(), "total".to_string()],
            ),
        ]);
        let spec = GateSpec::Sql {
            dialect: Some("postgresql".into()),
            schema: Some(schema),
        };
        let good = "```sql\nSELECT u.name, SUM(o.total) AS spent FROM users u JOIN orders o ON o.user_id = u.id GROUP BY u.name ORDER BY spent DESC\n```";
        let c = check(spec.clone(), good).await;
        assert!(c.passed, "{}", c.reason);
        let c = check(spec.clone(), "SELECT email FROM users").await;
        assert!(c.reason.contains("\"email\""), "{}", c.reason);
        let c = check(spec.clone(), "SELECT id FROM customers").await;
        assert!(c.reason.contains("\"customers\""), "{}", c.reason);
        let c = check(
            spec.clone(),
            "WITH big AS (SELECT * FROM orders WHERE total > 10) SELECT id FROM big",
        )
        .await;
        assert!(c.passed, "{}", c.reason);
        let c = check(spec, "SELEC id FROM users").await;
        assert!(
            c.reason.contains("not valid postgresql SQL"),
            "{}",
            c.reason
        );
        assert!(
            check(
                GateSpec::Sql {
                    dialect: None,
                    schema: None
                },
                "select 1"
            )
            .await
            .passed
        );
        assert!(
            GateSpec::Sql {
                dialect: Some("cobol".into()),
                schema: None
            }
            .build(&GateOptions::default())
            .is_err()
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn command_gate_reads_stdin_and_explains_with_stderr() {
        let spec = |script: &str| GateSpec::Command {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            timeout_secs: 5,
        };
        assert!(check(spec("grep -q ok"), "all ok").await.passed);
        let c = check(spec("echo 'missing the word' >&2; exit 3"), "x").await;
        assert!(!c.passed);
        assert!(
            c.reason.contains("status 3") && c.reason.contains("missing the word"),
            "{}",
            c.reason
        );
        let gate = CommandGate {
            program: "sleep".into(),
            args: vec!["10".into()],
            timeout: Duration::from_millis(200),
            dir: None,
        };
        let started = std::time::Instant::now();
        let c = gate.check("").await;
        assert!(!c.passed && c.reason.contains("killed"), "{}", c.reason);
        assert!(started.elapsed() < Duration::from_secs(5));
        // Command gates are refused unless allowed.
        let chain = GateChain::from_specs(&[spec("true")], &GateOptions::default());
        let verdicts = chain.check("x").await;
        assert!(!verdicts[0].1.passed && verdicts[0].1.reason.contains("disabled"));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_command_gate_runs_only_an_allowed_program_in_its_folder() {
        let workspace = tempfile::tempdir().unwrap();
        let marker = workspace.path().join("ran");
        let options = |dir: Option<std::path::PathBuf>| GateOptions {
            commands: CommandPolicy::Allow(["pwd".to_string()].into()),
            command_dir: dir,
            ..GateOptions::default()
        };
        // Off the allow-list: the gate fails with the reason and nothing runs.
        let touch = GateSpec::Command {
            program: "touch".into(),
            args: vec![marker.display().to_string()],
            timeout_secs: 5,
        };
        let chain = GateChain::from_specs(&[touch], &options(Some(workspace.path().to_path_buf())));
        let verdicts = chain.check("x").await;
        assert!(!verdicts[0].1.passed);
        assert!(
            verdicts[0]
                .1
                .reason
                .contains("\"touch\" is not on this process's command-gate allow-list"),
            "{}",
            verdicts[0].1.reason
        );
        assert!(!marker.exists(), "a refused program ran");
        // On the list: it runs in the workspace, with it as HOME.
        let pwd = CommandGate {
            program: "sh".into(),
            args: vec!["-c".into(), "echo \"$(pwd) $HOME\" >&2; exit 1".into()],
            timeout: Duration::from_secs(5),
            dir: Some(workspace.path().to_path_buf()),
        };
        let c = pwd.check("").await;
        let root = workspace.path().canonicalize().unwrap();
        assert!(
            c.reason.contains(&root.display().to_string()),
            "{}",
            c.reason
        );
        // A manager's (no folder): a temporary one, removed after the check.
        let c = CommandGate { dir: None, ..pwd }.check("").await;
        let used = c
            .reason
            .rsplit(": ")
            .next()
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string();
        assert!(used.contains("swarm-gate-"), "{}", c.reason);
        assert!(
            !std::path::Path::new(&used).exists(),
            "{used} was left behind"
        );
        let allowed = GateSpec::Command {
            program: "pwd".into(),
            args: vec![],
            timeout_secs: 5,
        };
        let verdicts = GateChain::from_specs(&[allowed], &options(None))
            .check("x")
            .await;
        assert!(verdicts[0].1.passed, "{}", verdicts[0].1.reason);
    }

    /// Plans that never went through intake (built directly, or from a
    /// tampered message): the builder bounds them itself, and each fails
    /// its gate with the reason, quickly, instead of taking the process down.
    #[tokio::test]
    async fn the_builder_bounds_what_intake_would_refuse() {
        let mut deep = json!({"type": "integer"});
        for _ in 0..90 {
            deep = json!({ "not": deep });
        }
        let cycle = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
        let started = std::time::Instant::now();
        for (schema, why) in [(deep, "levels deep"), (cycle, "leads back")] {
            let chain =
                GateChain::from_specs(&[GateSpec::JsonSchema { schema }], &GateOptions::default());
            let verdicts = chain.check("{}").await;
            assert!(!verdicts[0].1.passed);
            assert!(
                verdicts[0].1.reason.contains(why),
                "{}",
                verdicts[0].1.reason
            );
        }
        let regex = |i: usize| GateSpec::Regex {
            pattern: format!("x{i}"),
            forbid: false,
            description: None,
        };
        let many: Vec<GateSpec> = (0..6000).map(regex).collect();
        let verdicts = GateChain::from_specs(&many, &GateOptions::default())
            .check("x1")
            .await;
        assert_eq!(verdicts.len(), 1);
        assert!(
            verdicts[0].1.reason.contains("6000 gates"),
            "{}",
            verdicts[0].1.reason
        );
        let huge = GateSpec::Regex {
            pattern: r"\w{1000}".into(),
            forbid: false,
            description: None,
        };
        let c = check(huge, "x").await;
        assert!(
            !c.passed && c.reason.contains("invalid pattern"),
            "{}",
            c.reason
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    /// The most regular expressions a task may have, each near the compiled
    /// size limit (`\w` is Unicode-wide), checked against the largest
    /// result: compiled once, off the async thread, in bounded time; the
    /// second check reuses them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_most_regex_gates_check_in_bounded_time() {
        let limits = Limits::default();
        let n = limits
            .task
            .max_gates_per_task
            .min(limits.task.max_regexes_per_task);
        let specs: Vec<GateSpec> = (0..n)
            .map(|i| GateSpec::Regex {
                pattern: format!(r"\w{{16}}-bounded-{i}"),
                forbid: i % 2 == 1,
                description: None,
            })
            .collect();
        assert!(swarm_common::gates::check_gates(&specs, &limits).is_ok());
        let output = "word ".repeat(limits.max_result_bytes / 5);
        let chain = GateChain::from_specs(&specs, &GateOptions::default());
        let started = std::time::Instant::now();
        let first = chain.check(&output).await;
        let compiled_and_checked = started.elapsed();
        assert_eq!(first.len(), n);
        assert!(
            first.iter().all(|(_, c)| !c.reason.contains("cannot run")),
            "{first:?}"
        );
        let started = std::time::Instant::now();
        let second = chain.check(&output).await;
        let checked = started.elapsed();
        assert_eq!(first, second);
        eprintln!(
            "{n} regex gates on {} bytes: compiled and checked in {compiled_and_checked:?}, \
             checked again in {checked:?}",
            output.len()
        );
        // Debug builds are slow; release takes about a tenth of these.
        assert!(
            compiled_and_checked < Duration::from_secs(20),
            "{compiled_and_checked:?}"
        );
        assert!(checked < Duration::from_secs(5), "{checked:?}");
        assert!(
            checked < compiled_and_checked,
            "{checked:?} then {compiled_and_checked:?}"
        );
    }

    #[tokio::test]
    async fn equal_specs_share_one_compilation() {
        let options = GateOptions::default();
        let a = RegexGate::new("^shared-[0-9]+$", false, None, &options);
        let b = RegexGate::new("^shared-[0-9]+$", false, None, &options);
        assert!(Arc::ptr_eq(&a.compiled.cell, &b.compiled.cell));
        assert!(a.check("shared-42").await.passed);
        assert!(
            b.compiled.cell.get().is_some(),
            "b did not see a's compilation"
        );
        let other = RegexGate::new("^shared-[0-9]+$", true, None, &options);
        assert!(!other.check("shared-1").await.passed);
    }

    #[tokio::test]
    async fn a_compilation_over_its_time_fails_the_gate() {
        let options = GateOptions {
            compile_timeout: Duration::from_nanos(1),
            ..GateOptions::default()
        };
        let spec = GateSpec::JsonSchema {
            schema: json!({"description": "a schema no other test uses", "type": "object"}),
        };
        let gate = spec.build(&options).unwrap();
        let c = gate.check("{}").await;
        assert!(
            !c.passed && c.reason.contains("took longer than"),
            "{}",
            c.reason
        );
        // A later chain tries again (the slow try left the cache).
        let again = spec.build(&GateOptions::default()).unwrap();
        assert!(again.check("{}").await.passed);
    }

    #[test]
    fn specs_travel_as_tagged_json() {
        let spec: GateSpec =
            serde_json::from_value(json!({"kind": "length", "max_chars": 10})).unwrap();
        assert_eq!(
            spec,
            GateSpec::Length {
                min_chars: None,
                max_chars: Some(10)
            }
        );
        let spec: GateSpec =
            serde_json::from_value(json!({"kind": "command", "program": "x"})).unwrap();
        assert_eq!(
            spec,
            GateSpec::Command {
                program: "x".into(),
                args: vec![],
                timeout_secs: 30
            }
        );
    }
}
