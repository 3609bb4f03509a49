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

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::tools::shell::run_command;

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

/// How gates are built on this process.
#[derive(Debug, Clone, Default)]
pub struct GateOptions {
    /// Whether [`GateSpec::Command`] may run programs. Off by default: a
    /// spec that arrives over the network must not run commands on a worker
    /// unless its operator allowed it.
    pub allow_commands: bool,
    /// Where command gates run (the current directory when `None`).
    pub command_dir: Option<std::path::PathBuf>,
}

/// Makes a [`Gate`] of its description.
pub trait BuildGate {
    /// Builds the gate.
    fn build(&self, options: &GateOptions) -> Result<Arc<dyn Gate>, GateError>;
}

impl BuildGate for GateSpec {
    fn build(&self, options: &GateOptions) -> Result<Arc<dyn Gate>, GateError> {
        let err = |message: String| GateError {
            gate: self.name(),
            message,
        };
        Ok(match self {
            GateSpec::JsonSchema { schema } => Arc::new(JsonSchemaGate::new(schema).map_err(err)?),
            GateSpec::Regex {
                pattern,
                forbid,
                description,
            } => Arc::new(RegexGate::new(pattern, *forbid, description.clone()).map_err(err)?),
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
                if !options.allow_commands {
                    return Err(err("command gates are disabled on this process".to_string()));
                }
                Arc::new(CommandGate {
                    program: program.clone(),
                    args: args.clone(),
                    timeout: Duration::from_secs((*timeout_secs).max(1)),
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

// ---------------------------------------------------------------- JSON schema

/// The output is JSON valid against a schema.
pub struct JsonSchemaGate {
    validator: jsonschema::Validator,
}

impl JsonSchemaGate {
    /// A gate for `schema`; an invalid schema is an error.
    pub fn new(schema: &serde_json::Value) -> Result<JsonSchemaGate, String> {
        let validator =
            jsonschema::validator_for(schema).map_err(|e| format!("invalid schema: {e}"))?;
        Ok(JsonSchemaGate { validator })
    }
}

#[async_trait]
impl Gate for JsonSchemaGate {
    fn name(&self) -> String {
        "json_schema".to_string()
    }

    async fn check(&self, output: &str) -> GateCheck {
        let value: serde_json::Value = match serde_json::from_str(strip_code_fence(output)) {
            Ok(v) => v,
            Err(e) => return GateCheck::fail(format!("the output is not valid JSON: {e}")),
        };
        let errors = schema_errors(&self.validator, &value);
        if errors.is_empty() {
            GateCheck::pass()
        } else {
            GateCheck::fail(format!(
                "the JSON does not match the schema: {}",
                errors.join("; ")
            ))
        }
    }
}

// ---------------------------------------------------------------- regex

/// The output matches (or must not match) a regular expression.
pub struct RegexGate {
    regex: regex::Regex,
    forbid: bool,
    description: Option<String>,
}

impl RegexGate {
    /// A gate for `pattern`.
    pub fn new(
        pattern: &str,
        forbid: bool,
        description: Option<String>,
    ) -> Result<RegexGate, String> {
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| format!("invalid pattern: {e}"))?;
        Ok(RegexGate {
            regex,
            forbid,
            description,
        })
    }
}

#[async_trait]
impl Gate for RegexGate {
    fn name(&self) -> String {
        format!(
            "regex{}({})",
            if self.forbid { "_forbid" } else { "" },
            self.regex.as_str()
        )
    }

    async fn check(&self, output: &str) -> GateCheck {
        let what = self
            .description
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        match (self.regex.find(output), self.forbid) {
            (None, false) => GateCheck::fail(format!(
                "the output does not match the required pattern /{}/{what}",
                self.regex.as_str()
            )),
            (Some(m), true) => GateCheck::fail(format!(
                "the output contains {:?}, which the pattern /{}/ forbids{what}",
                crate::agent_loop::shorten(m.as_str(), 200),
                self.regex.as_str()
            )),
            _ => GateCheck::pass(),
        }
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
/// pass, and explains a failure on stderr.
#[derive(Debug, Clone)]
pub struct CommandGate {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How long it may run.
    pub timeout: Duration,
    /// Where it runs (the current directory when `None`).
    pub dir: Option<std::path::PathBuf>,
}

#[async_trait]
impl Gate for CommandGate {
    fn name(&self) -> String {
        format!("command({})", self.program)
    }

    async fn check(&self, output: &str) -> GateCheck {
        let dir = self
            .dir
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from("."));
        match run_command(
            &self.program,
            &self.args,
            &dir,
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

/// Several gates, run in order; every verdict is kept.
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

    /// A chain built from specs. A spec that cannot be built becomes a gate
    /// that always fails with the reason, so a bad spec is reported, never
    /// silently skipped.
    pub fn from_specs(specs: &[GateSpec], options: &GateOptions) -> GateChain {
        let gates = specs
            .iter()
            .map(|spec| match spec.build(options) {
                Ok(gate) => gate,
                Err(e) => Arc::new(Broken(e)) as Arc<dyn Gate>,
            })
            .collect();
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
            verdicts.push((gate.name(), gate.check(output).await));
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
            allow_commands: true,
            command_dir: None,
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
        assert!(
            GateSpec::JsonSchema {
                schema: json!({"type": 5})
            }
            .build(&GateOptions::default())
            .is_err()
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
