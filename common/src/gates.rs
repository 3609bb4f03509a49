//! Gates as data: what a task's output must satisfy, described so the
//! description can travel in a plan and an assignment. The agent crate
//! builds and runs them.
//!
//! [`check_gates`] bounds what building and running a task's gates can
//! cost ([`Limits`]: how many, how large, how deep a schema, how many
//! regular expressions), without compiling anything: plan validation runs
//! it at intake and at deployment, and the gate builders again.

use std::collections::{BTreeMap, HashMap};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{ErrorBody, ErrorCode};
use crate::limits::Limits;

/// A gate, described as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateSpec {
    /// The output is JSON valid against `schema`.
    JsonSchema {
        /// The JSON schema.
        schema: serde_json::Value,
    },
    /// The output matches `pattern` (or, with `forbid`, does not).
    Regex {
        /// A regular expression (Rust `regex` syntax).
        pattern: String,
        /// Fail when the pattern matches, instead of when it does not.
        #[serde(default)]
        forbid: bool,
        /// Said in the reason, for people and the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// The output's length, in characters, is within bounds.
    Length {
        /// The fewest characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_chars: Option<usize>,
        /// The most characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_chars: Option<usize>,
    },
    /// The output is SQL that parses, and (with `schema`) names only
    /// tables and columns that exist.
    Sql {
        /// `generic` (default), `postgresql`, `mysql`, `sqlite`, `mssql`, ...
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dialect: Option<String>,
        /// Table name to its column names.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<BTreeMap<String, Vec<String>>>,
    },
    /// An external command reads the output on stdin; exit 0 passes, any
    /// other status fails with its stderr.
    Command {
        /// The program.
        program: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Seconds before it is killed and the gate fails.
        #[serde(default = "default_command_secs")]
        timeout_secs: u64,
    },
}

fn default_command_secs() -> u64 {
    30
}

impl GateSpec {
    /// The gate's name: its kind, with the detail that tells two apart.
    pub fn name(&self) -> String {
        match self {
            GateSpec::JsonSchema { .. } => "json_schema".to_string(),
            GateSpec::Regex {
                pattern, forbid, ..
            } => {
                format!("regex{}({pattern})", if *forbid { "_forbid" } else { "" })
            }
            GateSpec::Length { .. } => "length".to_string(),
            GateSpec::Sql { .. } => "sql".to_string(),
            GateSpec::Command { program, .. } => format!("command({program})"),
        }
    }
}

// ---------------------------------------------------------------- bounds

/// `text` cut to about `max` bytes (on a character boundary) for an error
/// message, so a refusal never echoes a large input back.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn limit(message: String, name: &str, value: impl ToString) -> ErrorBody {
    ErrorBody::new(ErrorCode::LimitExceeded, message).with_detail(name, value)
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// Counts bytes written, and stops the writer once there are more than
/// `max`, so measuring a huge value costs no more than the limit.
struct ByteCounter {
    written: usize,
    max: usize,
}

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written += buf.len();
        if self.written > self.max {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Checks one gate against `limits` and returns how many regular
/// expressions building it compiles. The boss runs this at intake (through
/// [`crate::validate::validate_plan`]) and the gate builders again, so a gate
/// that passes costs bounded memory and time to build and to run.
pub fn check_gate(spec: &GateSpec, limits: &Limits) -> Result<usize, ErrorBody> {
    // The depth first: it bounds the recursion of measuring the size.
    if let GateSpec::JsonSchema { schema } = spec {
        check_depth(schema, limits.task.max_schema_depth)?;
    }
    let mut counter = ByteCounter {
        written: 0,
        max: limits.task.max_gate_bytes,
    };
    if serde_json::to_writer(&mut counter, spec).is_err() {
        return Err(limit(
            format!(
                "gate {} is more than {} bytes as JSON",
                excerpt(&spec.name(), 60),
                limits.task.max_gate_bytes
            ),
            "limit",
            limits.task.max_gate_bytes,
        ));
    }
    match spec {
        GateSpec::JsonSchema { schema } => Ok(check_schema(schema, limits)?.patterns),
        GateSpec::Regex { pattern, .. } => {
            check_regex(pattern, limits)?;
            Ok(1)
        }
        GateSpec::Command {
            program,
            timeout_secs,
            ..
        } => {
            if program.trim().is_empty() {
                return Err(invalid("a command gate names no program".to_string()));
            }
            if *timeout_secs > limits.task.max_command_gate_secs {
                return Err(limit(
                    format!(
                        "command gate {} may run {timeout_secs} s; the limit is {} s",
                        excerpt(program, 60),
                        limits.task.max_command_gate_secs
                    ),
                    "limit",
                    limits.task.max_command_gate_secs,
                ));
            }
            Ok(0)
        }
        GateSpec::Length { .. } | GateSpec::Sql { .. } => Ok(0),
    }
}

/// Checks a task's gates: how many there are, each one ([`check_gate`]),
/// and how many regular expressions they compile together, which it returns.
pub fn check_gates(specs: &[GateSpec], limits: &Limits) -> Result<usize, ErrorBody> {
    if specs.len() > limits.task.max_gates_per_task {
        return Err(limit(
            format!(
                "the task has {} gates; the limit is {}",
                specs.len(),
                limits.task.max_gates_per_task
            ),
            "limit",
            limits.task.max_gates_per_task,
        ));
    }
    let mut regexes = 0;
    for (i, spec) in specs.iter().enumerate() {
        regexes += check_gate(spec, limits).map_err(|e| e.with_detail("gate", i))?;
    }
    if regexes > limits.task.max_regexes_per_task {
        return Err(limit(
            format!(
                "the task's gates use {regexes} regular expressions; the limit is {}",
                limits.task.max_regexes_per_task
            ),
            "limit",
            limits.task.max_regexes_per_task,
        ));
    }
    Ok(regexes)
}

/// Checks a regular expression's size and syntax (Rust `regex` syntax),
/// without compiling it: the compiled size is bounded where it is compiled
/// ([`crate::limits::TaskLimits::max_regex_compiled_bytes`]). Only the syntax tree is built, in
/// time linear in the pattern: expanding Unicode classes (`\w` is hundreds
/// of ranges) would cost milliseconds a pattern, on the boss's one thread.
pub fn check_regex(pattern: &str, limits: &Limits) -> Result<(), ErrorBody> {
    check_pattern_size(pattern, limits)?;
    regex_syntax::ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|e| {
            // The parser's message quotes the pattern over several lines; its
            // first line says what is wrong.
            let why = e.to_string();
            let why = why
                .lines()
                .rev()
                .find(|l| l.starts_with("error:"))
                .unwrap_or("cannot be parsed")
                .trim_start_matches("error:")
                .trim();
            invalid(format!(
                "the pattern /{}/ is not a valid regular expression: {}",
                excerpt(pattern, 60),
                excerpt(why, 120)
            ))
        })?;
    Ok(())
}

fn check_pattern_size(pattern: &str, limits: &Limits) -> Result<(), ErrorBody> {
    if pattern.len() > limits.task.max_regex_bytes {
        return Err(limit(
            format!(
                "the pattern /{}/ is {} bytes; the limit is {}",
                excerpt(pattern, 40),
                pattern.len(),
                limits.task.max_regex_bytes
            ),
            "limit",
            limits.task.max_regex_bytes,
        ));
    }
    Ok(())
}

/// Fails when `value` nests deeper than `max` levels of objects and arrays
/// (`{"type": "integer"}` is one level). Walks with its own stack, so a deep
/// value cannot exhaust the thread's.
fn check_depth(value: &serde_json::Value, max: usize) -> Result<(), ErrorBody> {
    let mut stack = vec![(value, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Object(m) => Box::new(m.values()),
            serde_json::Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        if depth > max {
            return Err(limit(
                format!("the JSON schema nests more than {max} levels deep"),
                "limit",
                max,
            ));
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    Ok(())
}

/// What [`check_schema`] found in a schema it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaShape {
    /// JSON values written in the schema.
    pub nodes: usize,
    /// Nodes with every `$ref` replaced by what it points to.
    pub expanded_nodes: usize,
    /// Regular expressions (`pattern`, `patternProperties` keys).
    pub patterns: usize,
}

/// How a value in a schema document is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A schema, or a keyword's value that may hold schemas.
    Schema,
    /// A map of names to schemas (`properties`, `$defs`, ...).
    Names,
    /// Plain data (`enum`, `const`, `default`, `examples`): never a schema.
    Data,
}

/// A schema (an object or a boolean read as a schema) in the document.
struct SchemaNode<'a> {
    value: &'a serde_json::Value,
    /// The schema whose `$id` `#` fragments resolve against (the nearest
    /// one with an `$id`, or the document).
    resource: usize,
    /// For a schema with an `$id`, the resource around it.
    outer: Option<usize>,
    /// Values under it that are not schemas of their own.
    own: usize,
    /// Schemas directly under it.
    children: Vec<usize>,
    /// Its `$ref`, `$dynamicRef` and `$recursiveRef` values.
    refs: Vec<&'a str>,
}

/// Checks a JSON schema (a `json_schema` gate's) against the limits before
/// anyone compiles it: depth ([`crate::limits::TaskLimits::max_schema_depth`]), nodes written
/// and expanded through `$ref`s ([`crate::limits::TaskLimits::max_schema_nodes`]), and each
/// pattern's size ([`crate::limits::TaskLimits::max_regex_bytes`]). Every `$ref` must point
/// inside the schema (`#`, `#/json/pointer`, `#anchor`, or an `$id` the
/// schema declares, with such a fragment); one that leads back to where it
/// started, directly (`{"$ref": "#"}` at the top) or through other schemas
/// and references, is refused: a recursive schema expands without end.
pub fn check_schema(schema: &serde_json::Value, limits: &Limits) -> Result<SchemaShape, ErrorBody> {
    check_depth(schema, limits.task.max_schema_depth)?;
    let doc = SchemaDoc::read(schema, limits)?;
    let expanded = doc.expand(limits.task.max_schema_nodes)?;
    Ok(SchemaShape {
        nodes: doc.nodes,
        expanded_nodes: expanded,
        patterns: doc.patterns,
    })
}

/// A schema document, read once: its schemas, their ids and anchors.
struct SchemaDoc<'a> {
    schemas: Vec<SchemaNode<'a>>,
    /// A schema's address (its place in memory) to its index.
    index: HashMap<usize, usize>,
    /// `$id` (without a trailing `#`) to the schema that declares it.
    ids: HashMap<&'a str, usize>,
    /// `$anchor`, `$dynamicAnchor` and `#name` ids to the schemas that declare them.
    anchors: HashMap<&'a str, Vec<usize>>,
    nodes: usize,
    patterns: usize,
}

fn address(v: &serde_json::Value) -> usize {
    std::ptr::from_ref(v) as usize
}

impl<'a> SchemaDoc<'a> {
    fn read(root: &'a serde_json::Value, limits: &Limits) -> Result<Self, ErrorBody> {
        let mut doc = SchemaDoc {
            schemas: Vec::new(),
            index: HashMap::new(),
            ids: HashMap::new(),
            anchors: HashMap::new(),
            nodes: 0,
            patterns: 0,
        };
        // (value, how it is read, the schema it belongs to, that schema's resource)
        let mut stack: Vec<(&'a serde_json::Value, Role, Option<usize>)> =
            vec![(root, Role::Schema, None)];
        while let Some((value, role, owner)) = stack.pop() {
            doc.nodes += 1;
            if doc.nodes > limits.task.max_schema_nodes {
                return Err(limit(
                    format!(
                        "the JSON schema has more than {} nodes",
                        limits.task.max_schema_nodes
                    ),
                    "limit",
                    limits.task.max_schema_nodes,
                ));
            }
            let is_schema = role == Role::Schema
                && matches!(
                    value,
                    serde_json::Value::Object(_) | serde_json::Value::Bool(_)
                );
            if !is_schema {
                if let Some(o) = owner {
                    doc.schemas[o].own += 1;
                }
                let inner = if role == Role::Names {
                    Role::Schema
                } else {
                    role
                };
                match value {
                    serde_json::Value::Object(m) => {
                        stack.extend(m.values().map(|c| (c, inner, owner)));
                    }
                    serde_json::Value::Array(a) => {
                        stack.extend(a.iter().map(|c| (c, inner, owner)));
                    }
                    _ => {}
                }
                continue;
            }
            let me = doc.schemas.len();
            let parent_resource = owner.map_or(me, |o| doc.schemas[o].resource);
            doc.schemas.push(SchemaNode {
                value,
                resource: parent_resource,
                outer: None,
                own: 1,
                children: Vec::new(),
                refs: Vec::new(),
            });
            doc.index.insert(address(value), me);
            if let Some(o) = owner {
                doc.schemas[o].children.push(me);
            }
            let serde_json::Value::Object(map) = value else {
                continue;
            };
            for key in ["$id", "id"] {
                if let Some(serde_json::Value::String(id)) = map.get(key) {
                    match id.strip_prefix('#') {
                        Some(anchor) if !anchor.is_empty() => {
                            doc.anchors.entry(anchor).or_default().push(me);
                        }
                        Some(_) => {}
                        None => {
                            if doc.schemas[me].resource != me {
                                doc.schemas[me].outer = Some(doc.schemas[me].resource);
                            }
                            doc.schemas[me].resource = me;
                            doc.ids.insert(id.trim_end_matches('#'), me);
                        }
                    }
                }
            }
            for key in ["$anchor", "$dynamicAnchor"] {
                if let Some(serde_json::Value::String(anchor)) = map.get(key) {
                    doc.anchors.entry(anchor).or_default().push(me);
                }
            }
            for (key, child) in map {
                let role = match key.as_str() {
                    "$ref" | "$dynamicRef" | "$recursiveRef" => {
                        if let serde_json::Value::String(r) = child {
                            doc.schemas[me].refs.push(r);
                        }
                        Role::Data
                    }
                    "enum" | "const" | "default" | "examples" => Role::Data,
                    "properties" | "patternProperties" | "$defs" | "definitions"
                    | "dependentSchemas" | "dependencies" => Role::Names,
                    _ => Role::Schema,
                };
                if key == "pattern"
                    && let serde_json::Value::String(p) = child
                {
                    check_pattern_size(p, limits)?;
                    doc.patterns += 1;
                }
                if key == "patternProperties"
                    && let serde_json::Value::Object(m) = child
                {
                    for p in m.keys() {
                        check_pattern_size(p, limits)?;
                        doc.patterns += 1;
                    }
                }
                stack.push((child, role, Some(me)));
            }
        }
        Ok(doc)
    }

    /// The schemas `reference`, written in schema `from`, may point to.
    /// Drafts disagree on which `$id`s open a new base (`id` in draft 4,
    /// `$id` later) and on anchors' scope, so a fragment is resolved against
    /// every base from `from`'s own up to the document's, and an anchor to
    /// every schema that declares it: more edges can only make the check
    /// stricter, never let a cycle through.
    fn resolve(&self, from: usize, reference: &str) -> Result<Vec<usize>, ErrorBody> {
        let outside = || {
            invalid(format!(
                "the JSON schema's $ref {:?} does not point to a schema inside it \
                 (use #, #/json/pointer, #anchor or an $id the schema declares)",
                excerpt(reference, 60)
            ))
        };
        let (uri, fragment) = match reference.split_once('#') {
            Some((uri, fragment)) => (uri, fragment),
            None => (reference, ""),
        };
        let bases = if uri.is_empty() {
            let mut bases = vec![self.schemas[from].resource];
            while let Some(&last) = bases.last() {
                match self.schemas[last].outer {
                    Some(outer) if !bases.contains(&outer) => bases.push(outer),
                    _ => break,
                }
            }
            bases
        } else {
            vec![*self.ids.get(uri).ok_or_else(outside)?]
        };
        let mut targets = Vec::new();
        if fragment.is_empty() {
            targets = bases;
        } else if fragment.starts_with('/') {
            let pointer = percent_decode(fragment).ok_or_else(outside)?;
            for base in bases {
                if let Some(target) = self.schemas[base].value.pointer(&pointer)
                    && let Some(&i) = self.index.get(&address(target))
                {
                    targets.push(i);
                }
            }
        } else if let Some(found) = self.anchors.get(fragment) {
            targets.clone_from(found);
        }
        if targets.is_empty() {
            return Err(outside());
        }
        Ok(targets)
    }

    /// The size of the schema with every `$ref` replaced by its target,
    /// refusing a reference that leads back to itself and a size above
    /// `max`. Each schema is expanded once (depth first, with its own
    /// stack), so this is linear in the schema and its references.
    fn expand(&self, max: usize) -> Result<usize, ErrorBody> {
        #[derive(Clone, Copy)]
        enum Mark {
            New,
            Open,
            Done(usize),
        }
        /// A schema being expanded: where its successors (each with the
        /// `$ref` that leads there, if one does) are up to.
        struct Frame<'r> {
            at: usize,
            next: Vec<(usize, Option<&'r str>)>,
            done: usize,
            via: Option<&'r str>,
        }
        let open = |at: usize, via: Option<&'a str>| -> Result<Frame<'a>, ErrorBody> {
            let node = &self.schemas[at];
            let mut next: Vec<(usize, Option<&'a str>)> =
                node.children.iter().map(|&c| (c, None)).collect();
            for &r in &node.refs {
                next.extend(self.resolve(at, r)?.into_iter().map(|t| (t, Some(r))));
            }
            Ok(Frame {
                at,
                next,
                done: 0,
                via,
            })
        };
        if self.schemas.is_empty() {
            return Ok(self.nodes);
        }
        let mut marks = vec![Mark::New; self.schemas.len()];
        marks[0] = Mark::Open;
        let mut stack = vec![open(0, None)?];
        let mut root_size = 0;
        while let Some(top) = stack.last_mut() {
            if top.done < top.next.len() {
                let (n, edge) = top.next[top.done];
                top.done += 1;
                match marks[n] {
                    Mark::Done(_) => {}
                    Mark::Open => {
                        let named = edge
                            .or_else(|| stack.iter().rev().find_map(|f| f.via))
                            .unwrap_or("#");
                        return Err(invalid(format!(
                            "the JSON schema's $ref {:?} leads back to where it started: \
                             recursive schemas are refused, they expand without end",
                            excerpt(named, 60)
                        )));
                    }
                    Mark::New => {
                        marks[n] = Mark::Open;
                        let frame = open(n, edge)?;
                        stack.push(frame);
                    }
                }
                continue;
            }
            let Some(frame) = stack.pop() else { break };
            let mut size = self.schemas[frame.at].own;
            for (n, _) in frame.next {
                if let Mark::Done(s) = marks[n] {
                    size = size.saturating_add(s);
                }
            }
            if size > max {
                return Err(limit(
                    format!(
                        "the JSON schema expands to more than {max} nodes through its $refs \
                         (each $ref counts the size of what it points to)"
                    ),
                    "limit",
                    max,
                ));
            }
            marks[frame.at] = Mark::Done(size);
            root_size = size;
        }
        Ok(root_size)
    }
}

/// A URI fragment with its `%XX` escapes decoded.
fn percent_decode(fragment: &str) -> Option<String> {
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = fragment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(schema: serde_json::Value) -> ErrorBody {
        check_schema(&schema, &Limits::default()).expect_err("the schema is refused")
    }

    fn nested(depth: usize) -> serde_json::Value {
        let mut v = json!({"type": "integer"});
        for _ in 1..depth {
            v = json!({ "not": v });
        }
        v
    }

    #[test]
    fn ref_cycles_are_refused_in_every_spelling() {
        for schema in [
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
            json!({"anyOf": [{"$ref": "#"}]}),
            json!({"$ref": "#"}),
            json!({"type": "object", "properties": {"child": {"$ref": "#"}}}),
            json!({"definitions": {"a": {"allOf": [{"$ref": "#/definitions/a"}]}}}),
            json!({"$defs": {"a": {"$anchor": "x", "not": {"$ref": "#x"}}}}),
            json!({"$defs": {"a": {"$id": "a.json", "allOf": [{"$ref": "a.json"}]}}}),
            json!({"$defs": {"a b": {"not": {"$ref": "#/$defs/a%20b"}}}}),
            json!({"$defs": {"a/b": {"not": {"$ref": "#/$defs/a~1b"}}}}),
            json!({"$recursiveAnchor": true, "items": {"$recursiveRef": "#"}}),
            json!({"$dynamicAnchor": "m", "items": {"$dynamicRef": "#m"}}),
        ] {
            let e = refused(schema.clone());
            assert_eq!(
                e.code,
                ErrorCode::ValidationFailed,
                "{schema}: {}",
                e.message
            );
            assert!(e.message.contains("leads back"), "{schema}: {}", e.message);
        }
    }

    #[test]
    fn refs_must_point_inside_the_schema() {
        for schema in [
            json!({"$ref": "https://example.com/schema.json"}),
            json!({"$ref": "#/$defs/missing"}),
            json!({"$ref": "#nowhere"}),
            json!({"$ref": "#/enum/0", "enum": [{"type": "string"}]}),
        ] {
            let e = refused(schema.clone());
            assert_eq!(e.code, ErrorCode::ValidationFailed, "{schema}");
            assert!(e.message.contains("does not point"), "{}", e.message);
        }
    }

    #[test]
    fn plain_refs_names_and_data_are_accepted() {
        let schema = json!({
            "$defs": {"count": {"type": "integer", "minimum": 0}},
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/count"},
                "b": {"$ref": "#/$defs/count"},
                "$ref": {"type": "string"},
                "const": {"pattern": "^x"}
            },
            "patternProperties": {"^p": true, "^q": {"pattern": "y$"}},
            "enum": [{"$ref": "#"}],
            "default": {"$ref": "https://example.com"}
        });
        let shape = check_schema(&schema, &Limits::default()).unwrap();
        assert!(shape.expanded_nodes > shape.nodes, "{shape:?}");
        assert_eq!(shape.patterns, 4);
    }

    #[test]
    fn exponential_expansion_is_refused() {
        // Each level uses the next twice: 2^20 copies once inlined.
        let mut defs = serde_json::Map::new();
        for i in 0..20 {
            let next = format!("#/$defs/a{}", i + 1);
            defs.insert(
                format!("a{i}"),
                json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert("a20".into(), json!({"type": "integer"}));
        let e = refused(json!({"$defs": defs, "$ref": "#/$defs/a0"}));
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.contains("expands"), "{}", e.message);
    }

    #[test]
    fn depth_nodes_and_bytes_are_bounded() {
        let limits = Limits::default();
        assert!(check_schema(&nested(limits.task.max_schema_depth), &limits).is_ok());
        let e = refused(nested(limits.task.max_schema_depth + 1));
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.contains("levels deep"), "{}", e.message);
        let e = refused(nested(90));
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        let wide: serde_json::Map<_, _> = (0..limits.task.max_schema_nodes)
            .map(|i| (format!("p{i}"), json!(true)))
            .collect();
        let e = refused(json!({ "properties": wide }));
        assert!(e.message.contains("nodes"), "{}", e.message);
        let big = GateSpec::JsonSchema {
            schema: json!({"description": "x".repeat(limits.task.max_gate_bytes)}),
        };
        let e = check_gate(&big, &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.len() < 200, "{}", e.message);
    }

    #[test]
    fn regexes_are_bounded_and_parsed() {
        let limits = Limits::default();
        let gate = |pattern: &str| GateSpec::Regex {
            pattern: pattern.into(),
            forbid: false,
            description: None,
        };
        assert_eq!(check_gate(&gate(r"^\d+$"), &limits), Ok(1));
        let e = check_gate(&gate("(unclosed"), &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationFailed);
        assert!(
            e.message.contains("not a valid regular expression"),
            "{}",
            e.message
        );
        let e =
            check_gate(&gate(&"a".repeat(limits.task.max_regex_bytes + 1)), &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.len() < 200, "{}", e.message);
        let long = json!({"pattern": "b".repeat(limits.task.max_regex_bytes + 1)});
        assert_eq!(refused(long).code, ErrorCode::LimitExceeded);
        // Too many gates on a task, and too many patterns across its gates.
        let many: Vec<GateSpec> = (0..6000).map(|_| gate("a")).collect();
        let e = check_gates(&many, &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.contains("6000 gates"), "{}", e.message);
        let patterns: serde_json::Map<_, _> =
            (0..17).map(|i| (format!("^p{i}"), json!(true))).collect();
        let schema = GateSpec::JsonSchema {
            schema: json!({ "patternProperties": patterns }),
        };
        let e = check_gates(&[schema.clone(), schema], &limits).unwrap_err();
        assert!(
            e.message.contains("34 regular expressions"),
            "{}",
            e.message
        );
    }

    #[test]
    fn command_gates_are_bounded() {
        let limits = Limits::default();
        let gate = |secs: u64| GateSpec::Command {
            program: "jq".into(),
            args: vec![],
            timeout_secs: secs,
        };
        assert_eq!(check_gate(&gate(30), &limits), Ok(0));
        let e = check_gate(&gate(limits.task.max_command_gate_secs + 1), &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
    }
}
