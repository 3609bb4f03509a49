//! The built-in tools. Each reads only, is deterministic, and resolves every
//! path through the [`Workspace`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::workspace::relative_display;
use super::{Tool, ToolAnnotations, ToolError, TypedTool, Workspace, calc, typed};

/// `read_file` returns at most this many bytes of a file.
pub(crate) const READ_CAP_BYTES: usize = 256 * 1024;
/// `count`, `checksum` and `grep` do not read files larger than this.
const MAX_SCAN_BYTES: u64 = 64 * 1024 * 1024;
/// `list_files` lists at most this many entries.
const MAX_LIST_ENTRIES: usize = 10_000;
/// A walk visits at most this many entries, so a huge tree cannot stall a worker.
const MAX_WALK_ENTRIES: usize = 200_000;
/// `grep` shows at most this many characters of a matching line.
const MAX_LINE_CHARS: usize = 400;
/// What `list_files` says for a directory with nothing in it.
pub(crate) const EMPTY_DIRECTORY: &str = "(empty directory)";

/// Every built-in tool, reading under `workspace`.
pub(super) fn all(workspace: Workspace) -> Vec<Arc<dyn Tool>> {
    vec![
        typed(Echo),
        typed(ReadFile(workspace.clone())),
        typed(ListFiles(workspace.clone())),
        typed(Grep(workspace.clone())),
        typed(Count(workspace.clone())),
        typed(Checksum(workspace)),
        typed(Calc),
    ]
}

/// Runs file-system work off the async threads.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::Failed(format!("the tool's task ended abnormally: {e}")))?
}

fn io_failed(shown: &str, e: std::io::Error) -> ToolError {
    ToolError::Failed(format!("{shown}: {e}"))
}

// ---------------------------------------------------------------- echo

struct Echo;

/// Arguments of `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    /// The text to return.
    text: String,
}

#[async_trait]
impl TypedTool for Echo {
    type Args = EchoArgs;
    const NAME: &'static str = "echo";
    const DESCRIPTION: &'static str = "Returns the given text unchanged.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::READ_ONLY;

    async fn run(&self, args: EchoArgs) -> Result<String, ToolError> {
        Ok(args.text)
    }
}

// ---------------------------------------------------------------- read_file

struct ReadFile(Workspace);

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFileArgs {
    /// Path of the file, relative to the workspace root.
    path: String,
}

#[async_trait]
impl TypedTool for ReadFile {
    type Args = ReadFileArgs;
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str = "Returns the contents of a text file in the workspace \
        (invalid UTF-8 is replaced; files over 256 KiB are cut, with a note).";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::READ_ONLY;

    async fn run(&self, args: ReadFileArgs) -> Result<String, ToolError> {
        let ws = self.0.clone();
        blocking(move || {
            let path = ws.resolve(&args.path)?;
            let shown = ws.display(&path);
            if path.is_dir() {
                return Err(ToolError::Failed(format!(
                    "{shown} is a directory; use list_files"
                )));
            }
            let file = std::fs::File::open(&path).map_err(|e| io_failed(&shown, e))?;
            let total = file.metadata().map_err(|e| io_failed(&shown, e))?.len();
            let mut bytes = Vec::new();
            file.take(READ_CAP_BYTES as u64)
                .read_to_end(&mut bytes)
                .map_err(|e| io_failed(&shown, e))?;
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            if total > bytes.len() as u64 {
                text.push_str(&format!(
                    "\n[read_file: cut: showing the first {} of {total} bytes of {shown}]",
                    bytes.len()
                ));
            }
            Ok(text)
        })
        .await
    }
}

// ---------------------------------------------------------------- list_files

struct ListFiles(Workspace);

fn default_dot() -> String {
    ".".to_string()
}

/// Arguments of `list_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListFilesArgs {
    /// Directory to list, relative to the workspace root.
    #[serde(default = "default_dot")]
    path: String,
    /// Whether to list subdirectories' contents too.
    #[serde(default)]
    recursive: bool,
}

#[async_trait]
impl TypedTool for ListFiles {
    type Args = ListFilesArgs;
    const NAME: &'static str = "list_files";
    const DESCRIPTION: &'static str = "Lists a directory of the workspace: one path per line, \
        relative to the workspace root, sorted, directories ending in '/'.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::READ_ONLY;

    async fn run(&self, args: ListFilesArgs) -> Result<String, ToolError> {
        let ws = self.0.clone();
        blocking(move || {
            let root = ws.canonical_root()?;
            let start = ws.resolve(&args.path)?;
            if !start.is_dir() {
                return Ok(relative_display(&root, &start));
            }
            let walk = walk(&root, &start, args.recursive)?;
            let mut lines: Vec<String> = walk
                .entries
                .iter()
                .map(|e| match e.kind {
                    EntryKind::Dir | EntryKind::LinkedDir => format!("{}/", e.shown),
                    EntryKind::File | EntryKind::Other => e.shown.clone(),
                })
                .collect();
            lines.sort();
            if lines.is_empty() {
                return Ok(EMPTY_DIRECTORY.to_string());
            }
            let total = lines.len();
            lines.truncate(MAX_LIST_ENTRIES);
            let mut out = lines.join("\n");
            if total > MAX_LIST_ENTRIES || walk.stopped {
                out.push_str(&format!(
                    "\n[list_files: stopped after {MAX_LIST_ENTRIES} entries]"
                ));
            }
            Ok(out)
        })
        .await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryKind {
    Dir,
    File,
    /// A symlink to a directory inside the workspace: listed, not entered.
    LinkedDir,
    /// Anything else, including symlinks that lead outside the workspace.
    Other,
}

#[derive(Debug)]
struct Entry {
    path: PathBuf,
    shown: String,
    kind: EntryKind,
}

struct Walk {
    entries: Vec<Entry>,
    /// The walk hit [`MAX_WALK_ENTRIES`].
    stopped: bool,
}

/// The entries under `start` in sorted depth-first order. Symlinks are never
/// followed into directories, and count as files only when their target is
/// inside the workspace.
fn walk(root: &Path, start: &Path, recursive: bool) -> Result<Walk, ToolError> {
    let mut walk = Walk {
        entries: Vec::new(),
        stopped: false,
    };
    visit(root, start, recursive, &mut walk)?;
    Ok(walk)
}

fn visit(root: &Path, dir: &Path, recursive: bool, walk: &mut Walk) -> Result<(), ToolError> {
    let shown_dir = relative_display(root, dir);
    let mut children: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
        .map_err(|e| io_failed(&shown_dir, e))?
        .filter_map(Result::ok)
        .collect();
    children.sort_by_key(|c| c.file_name());
    for child in children {
        if walk.entries.len() >= MAX_WALK_ENTRIES {
            walk.stopped = true;
            return Ok(());
        }
        let path = child.path();
        let Ok(file_type) = child.file_type() else {
            continue;
        };
        let kind = if file_type.is_dir() {
            EntryKind::Dir
        } else if file_type.is_file() {
            EntryKind::File
        } else if file_type.is_symlink() {
            match path.canonicalize() {
                Ok(target) if target.starts_with(root) && target.is_dir() => EntryKind::LinkedDir,
                Ok(target) if target.starts_with(root) && target.is_file() => EntryKind::File,
                _ => EntryKind::Other,
            }
        } else {
            EntryKind::Other
        };
        walk.entries.push(Entry {
            shown: relative_display(root, &path),
            path: path.clone(),
            kind,
        });
        if kind == EntryKind::Dir && recursive {
            visit(root, &path, recursive, walk)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- grep

struct Grep(Workspace);

fn default_max_matches() -> usize {
    100
}

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    /// A regular expression (Rust `regex` syntax), matched against each line.
    pattern: String,
    /// File or directory to search, relative to the workspace root.
    #[serde(default = "default_dot")]
    path: String,
    /// Stop after this many matching lines.
    #[serde(default = "default_max_matches")]
    #[schemars(range(min = 1, max = 10000))]
    max_matches: usize,
}

#[async_trait]
impl TypedTool for Grep {
    type Args = GrepArgs;
    const NAME: &'static str = "grep";
    const DESCRIPTION: &'static str = "Searches text files for lines matching a regular \
        expression, walking directories recursively in sorted order and skipping binary \
        files. Returns 'path:line: text' lines.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::READ_ONLY;

    async fn run(&self, args: GrepArgs) -> Result<String, ToolError> {
        if !(1..=10_000).contains(&args.max_matches) {
            return Err(ToolError::InvalidArguments(
                "grep: max_matches must be 1 to 10000".to_string(),
            ));
        }
        let regex = regex::RegexBuilder::new(&args.pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::InvalidArguments(format!("grep: invalid pattern: {e}")))?;
        let ws = self.0.clone();
        blocking(move || {
            let root = ws.canonical_root()?;
            let start = ws.resolve(&args.path)?;
            let files: Vec<Entry> = if start.is_dir() {
                walk(&root, &start, true)?
                    .entries
                    .into_iter()
                    .filter(|e| e.kind == EntryKind::File)
                    .collect()
            } else {
                vec![Entry {
                    shown: relative_display(&root, &start),
                    path: start.clone(),
                    kind: EntryKind::File,
                }]
            };
            let mut matches = Vec::new();
            let mut stopped = false;
            'files: for file in &files {
                let Some(text) = read_text_for_search(&file.path) else {
                    continue;
                };
                for (n, line) in text.lines().enumerate() {
                    if regex.is_match(line) {
                        if matches.len() == args.max_matches {
                            stopped = true;
                            break 'files;
                        }
                        matches.push(format!("{}:{}: {}", file.shown, n + 1, clip_line(line)));
                    }
                }
            }
            if matches.is_empty() {
                return Ok(format!(
                    "no matches for /{}/ in {}",
                    args.pattern,
                    relative_display(&root, &start)
                ));
            }
            let mut out = matches.join("\n");
            if stopped {
                out.push_str(&format!(
                    "\n[grep: stopped after {} matches]",
                    args.max_matches
                ));
            }
            Ok(out)
        })
        .await
    }
}

/// A file's text, or `None` when it is binary, too large or unreadable.
fn read_text_for_search(path: &Path) -> Option<String> {
    let len = std::fs::metadata(path).ok()?.len();
    if len > MAX_SCAN_BYTES {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    // The same rule as git and grep: a NUL near the start means binary.
    if bytes.iter().take(8192).any(|b| *b == 0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn clip_line(line: &str) -> String {
    if line.chars().count() <= MAX_LINE_CHARS {
        line.to_string()
    } else {
        let clipped: String = line.chars().take(MAX_LINE_CHARS).collect();
        format!("{clipped}…")
    }
}

// ---------------------------------------------------------------- count, checksum

/// Either inline text or a file: exactly one.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TextOrPathArgs {
    /// Text to measure (give this or `path`).
    #[serde(default)]
    text: Option<String>,
    /// Path of a file in the workspace to measure (give this or `text`).
    #[serde(default)]
    path: Option<String>,
}

/// The bytes to measure and how to name them.
async fn text_or_file(
    tool: &str,
    ws: &Workspace,
    args: TextOrPathArgs,
) -> Result<(Vec<u8>, String), ToolError> {
    match (args.text, args.path) {
        (Some(text), None) => {
            let name = format!("(text, {} bytes)", text.len());
            Ok((text.into_bytes(), name))
        }
        (None, Some(path)) => {
            let ws = ws.clone();
            blocking(move || {
                let resolved = ws.resolve(&path)?;
                let shown = ws.display(&resolved);
                if resolved.is_dir() {
                    return Err(ToolError::Failed(format!("{shown} is a directory")));
                }
                let len = std::fs::metadata(&resolved)
                    .map_err(|e| io_failed(&shown, e))?
                    .len();
                if len > MAX_SCAN_BYTES {
                    return Err(ToolError::Failed(format!(
                        "{shown} is {len} bytes; the limit is {MAX_SCAN_BYTES}"
                    )));
                }
                let bytes = std::fs::read(&resolved).map_err(|e| io_failed(&shown, e))?;
                Ok((bytes, shown))
            })
            .await
        }
        _ => Err(ToolError::InvalidArguments(format!(
            "{tool}: give exactly one of `text` or `path`"
        ))),
    }
}

/// What `count` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Counts {
    /// Whitespace-separated words.
    pub words: usize,
    /// Lines (a last line without a newline counts).
    pub lines: usize,
    /// Unicode scalar values.
    pub characters: usize,
    /// Bytes.
    pub bytes: usize,
}

impl Counts {
    fn of(bytes: &[u8]) -> Counts {
        let text = String::from_utf8_lossy(bytes);
        Counts {
            words: text.split_whitespace().count(),
            lines: text.lines().count(),
            characters: text.chars().count(),
            bytes: bytes.len(),
        }
    }
}

struct Count(Workspace);

#[async_trait]
impl TypedTool for Count {
    type Args = TextOrPathArgs;
    const NAME: &'static str = "count";
    const DESCRIPTION: &'static str = "Counts the words, lines, characters and bytes of a text \
        or of a file in the workspace. Returns a JSON object.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::READ_ONLY;

    async fn run(&self, args: TextOrPathArgs) -> Result<String, ToolError> {
        let (bytes, _) = text_or_file(Self::NAME, &self.0, args).await?;
        serde_json::to_string(&Counts::of(&bytes))
            .map_err(|e| ToolError::Failed(format!("count: {e}")))
    }
}

struct Checksum(Workspace);

#[async_trait]
impl TypedTool for Checksum {
    type Args = TextOrPathArgs;
    const NAME: &'static str = "checksum";
    const DESCRIPTION: &'static str = "Computes the SHA-256 of a text or of a file in the \
        workspace. Returns '<hex digest>  <input>', as sha256sum does.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::READ_ONLY;

    async fn run(&self, args: TextOrPathArgs) -> Result<String, ToolError> {
        let (bytes, name) = text_or_file(Self::NAME, &self.0, args).await?;
        Ok(format!("{}  {name}", sha256_hex(&bytes)))
    }
}

/// The SHA-256 of `bytes` in lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---------------------------------------------------------------- calc

struct Calc;

/// Arguments of `calc`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CalcArgs {
    /// An arithmetic expression: numbers, + - * / % ^, parentheses, sqrt abs ln
    /// log10 min max round floor ceil, pi and e.
    expression: String,
}

#[async_trait]
impl TypedTool for Calc {
    type Args = CalcArgs;
    const NAME: &'static str = "calc";
    const DESCRIPTION: &'static str = "Evaluates an arithmetic expression exactly as written \
        (+ - * / %, ^ for powers, parentheses, sqrt abs ln log10 min max round floor ceil, \
        pi, e) and returns the number.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::READ_ONLY;

    async fn run(&self, args: CalcArgs) -> Result<String, ToolError> {
        calc::evaluate(&args.expression)
            .map(calc::format_number)
            .map_err(|e| ToolError::Failed(format!("calc: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolRegistry;
    use serde_json::json;

    fn workspace() -> (tempfile::TempDir, ToolRegistry) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("src/nested")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("notes.txt"), "alpha beta\ngamma TODO delta\n").unwrap();
        std::fs::write(
            root.join("src/main.rs"),
            "fn main() {\n    // TODO: more\n}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("src/nested/deep.md"),
            "# Deep\nno todo here\nTODO last",
        )
        .unwrap();
        std::fs::write(root.join("src/blob.bin"), b"TODO\0\x01\x02").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "TODO secret").unwrap();
        let registry = ToolRegistry::builtin(&root);
        (dir, registry)
    }

    #[tokio::test]
    async fn echo_and_calc() {
        let (_dir, tools) = workspace();
        assert_eq!(
            tools
                .call("echo", json!({"text": "hi there"}))
                .await
                .unwrap(),
            "hi there"
        );
        assert_eq!(
            tools
                .call("calc", json!({"expression": "17*23+4^3"}))
                .await
                .unwrap(),
            "455"
        );
        let err = tools
            .call("calc", json!({"expression": "1/0"}))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ToolError::Failed("calc: division by zero at position 2".into())
        );
    }

    #[tokio::test]
    async fn read_file_reads_and_cuts() {
        let (dir, tools) = workspace();
        let text = tools
            .call("read_file", json!({"path": "notes.txt"}))
            .await
            .unwrap();
        assert_eq!(text, "alpha beta\ngamma TODO delta\n");
        let big = "x".repeat(READ_CAP_BYTES + 10);
        std::fs::write(dir.path().join("ws/big.txt"), &big).unwrap();
        let text = tools
            .call("read_file", json!({"path": "big.txt"}))
            .await
            .unwrap();
        assert!(text.starts_with(&"x".repeat(READ_CAP_BYTES)));
        assert!(text.ends_with(&format!(
            "[read_file: cut: showing the first {READ_CAP_BYTES} of {} bytes of big.txt]",
            READ_CAP_BYTES + 10
        )));
        let err = tools
            .call("read_file", json!({"path": "src"}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Failed(m) if m.contains("directory")));
        let err = tools
            .call("read_file", json!({"path": "nope.txt"}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Failed(m) if m.contains("no such file")));
    }

    #[tokio::test]
    async fn list_files_is_sorted_and_relative() {
        let (_dir, tools) = workspace();
        let top = tools.call("list_files", json!({})).await.unwrap();
        assert_eq!(top, "empty/\nnotes.txt\nsrc/");
        let all = tools
            .call("list_files", json!({"path": ".", "recursive": true}))
            .await
            .unwrap();
        assert_eq!(
            all,
            "empty/\nnotes.txt\nsrc/\nsrc/blob.bin\nsrc/main.rs\nsrc/nested/\nsrc/nested/deep.md"
        );
        let src = tools
            .call("list_files", json!({"path": "src"}))
            .await
            .unwrap();
        assert_eq!(src, "src/blob.bin\nsrc/main.rs\nsrc/nested/");
        let empty = tools
            .call("list_files", json!({"path": "empty/"}))
            .await
            .unwrap();
        assert_eq!(empty, EMPTY_DIRECTORY);
        let file = tools
            .call("list_files", json!({"path": "./notes.txt"}))
            .await
            .unwrap();
        assert_eq!(file, "notes.txt");
    }

    #[tokio::test]
    async fn grep_walks_in_order_and_skips_binaries() {
        let (_dir, tools) = workspace();
        let out = tools
            .call("grep", json!({"pattern": "TODO"}))
            .await
            .unwrap();
        assert_eq!(
            out,
            "notes.txt:2: gamma TODO delta\nsrc/main.rs:2:     // TODO: more\nsrc/nested/deep.md:3: TODO last"
        );
        let out = tools
            .call(
                "grep",
                json!({"pattern": "(?i)todo", "path": "src", "max_matches": 2}),
            )
            .await
            .unwrap();
        assert_eq!(
            out,
            "src/main.rs:2:     // TODO: more\nsrc/nested/deep.md:2: no todo here\n[grep: stopped after 2 matches]"
        );
        let out = tools
            .call("grep", json!({"pattern": "zzz", "path": "notes.txt"}))
            .await
            .unwrap();
        assert_eq!(out, "no matches for /zzz/ in notes.txt");
        let err = tools
            .call("grep", json!({"pattern": "("}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(m) if m.contains("invalid pattern")));
        let err = tools
            .call("grep", json!({"pattern": "a", "max_matches": 0}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)));
    }

    #[tokio::test]
    async fn count_and_checksum_take_text_or_path() {
        let (_dir, tools) = workspace();
        let counts = tools
            .call("count", json!({"path": "notes.txt"}))
            .await
            .unwrap();
        assert_eq!(
            counts,
            r#"{"words":5,"lines":2,"characters":28,"bytes":28}"#
        );
        let counts = tools
            .call("count", json!({"text": "héllo wörld"}))
            .await
            .unwrap();
        assert_eq!(
            counts,
            r#"{"words":2,"lines":1,"characters":11,"bytes":13}"#
        );
        let sum = tools
            .call("checksum", json!({"text": "abc"}))
            .await
            .unwrap();
        assert_eq!(
            sum,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  (text, 3 bytes)"
        );
        let sum = tools
            .call("checksum", json!({"path": "notes.txt"}))
            .await
            .unwrap();
        assert!(sum.ends_with("  notes.txt"), "{sum}");
        assert_eq!(sum.split_whitespace().next().unwrap().len(), 64);
        for bad in [json!({}), json!({"text": "a", "path": "notes.txt"})] {
            let err = tools.call("count", bad.clone()).await.unwrap_err();
            assert!(
                matches!(&err, ToolError::InvalidArguments(m) if m.contains("exactly one")),
                "{err}"
            );
            assert!(tools.call("checksum", bad).await.is_err());
        }
    }

    #[tokio::test]
    async fn every_path_tool_refuses_to_leave_the_workspace() {
        let (dir, tools) = workspace();
        let outside = dir.path().join("secret.txt");
        let outside = outside.to_str().unwrap();
        for path in ["../secret.txt", outside, "src/../../secret.txt", "/"] {
            for (tool, args) in [
                ("read_file", json!({"path": path})),
                ("list_files", json!({"path": path})),
                ("grep", json!({"pattern": "TODO", "path": path})),
                ("count", json!({"path": path})),
                ("checksum", json!({"path": path})),
            ] {
                let err = tools.call(tool, args).await.unwrap_err();
                assert!(matches!(err, ToolError::Refused(_)), "{tool} {path}: {err}");
            }
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn symlinks_out_are_refused_and_not_followed() {
        let (dir, tools) = workspace();
        let root = dir.path().join("ws");
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("leak.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("parent")).unwrap();
        let err = tools
            .call("read_file", json!({"path": "leak.txt"}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{err}");
        let err = tools
            .call("read_file", json!({"path": "parent/secret.txt"}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{err}");
        // A walk lists the links by name but never reads through them.
        let out = tools
            .call("grep", json!({"pattern": "secret"}))
            .await
            .unwrap();
        assert_eq!(out, "no matches for /secret/ in .");
        let listing = tools
            .call("list_files", json!({"recursive": true}))
            .await
            .unwrap();
        assert!(listing.contains("leak.txt") && listing.contains("parent"));
        assert!(!listing.contains("secret"));
    }
}
