//! Reading what a task asks for from its text, by rules: which tools, with
//! which arguments. The offline provider acts on these intents; the offline
//! planner picks personas by them.
//!
//! The rules are deliberately plain (keywords, quoted text, tokens that look
//! like paths) so that what the offline provider will do is predictable from
//! the task's wording. Keywords are ASCII, so matching works on an
//! ASCII-lowercased copy whose byte offsets equal the original's.
//!
//! Every function here does work linear in its text (a mission may be
//! 256 KB, and the boss plans it on its one thread): a keyword is tested
//! where it may start, never searched for again from every position, and
//! nothing rescans the rest of a text for each of its words or clauses
//! (`offline::planner::tests::planning_is_linear_in_the_missions_length`).

use std::collections::HashSet;

/// What a `count` or `checksum` should measure.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// A file in the workspace.
    Path(String),
    /// The results of the tasks this one depends on.
    Context,
    /// Quoted text from the task.
    Text(String),
    /// The task names nothing: the context when there is one, else the task text.
    Unspecified,
}

/// One thing the task asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Intent {
    /// Evaluate an arithmetic expression.
    Calc(String),
    /// Count words, lines, characters and bytes.
    Count(Target),
    /// SHA-256.
    Checksum(Target),
    /// List a directory.
    List { path: String, recursive: bool },
    /// Search files for a regular expression.
    Grep { pattern: String, path: String },
    /// Read a file.
    Read(String),
    /// Repeat text.
    Echo(String),
}

impl Intent {
    /// The tool that carries it out.
    pub fn tool(&self) -> &'static str {
        match self {
            Intent::Calc(_) => "calc",
            Intent::Count(_) => "count",
            Intent::Checksum(_) => "checksum",
            Intent::List { .. } => "list_files",
            Intent::Grep { .. } => "grep",
            Intent::Read(_) => "read_file",
            Intent::Echo(_) => "echo",
        }
    }
}

/// Verbs that start a new request when they follow "and".
const VERBS: &[&str] = &[
    "count",
    "compute",
    "calculate",
    "evaluate",
    "list",
    "search",
    "grep",
    "find",
    "read",
    "show",
    "echo",
    "say",
    "repeat",
    "checksum",
    "hash",
    "what",
];

const CALC_VERBS: &[&str] = &[
    "what is",
    "what's",
    "how much is",
    "compute",
    "calculate",
    "calc",
    "evaluate",
    "solve",
];

const CALC_NAMES: &[&str] = &[
    "sqrt", "abs", "ln", "log10", "min", "max", "round", "floor", "ceil", "pi", "e",
];

/// Words after "in"/"under" that mean the whole workspace.
const WHOLE_WORKSPACE: &[&str] = &[
    "workspace",
    "current",
    "root",
    "repo",
    "repository",
    "project",
    "here",
    "everything",
    "all",
    "every",
    ".",
    "./",
];

const CONTEXT_PHRASES: &[&str] = &[
    "previous result",
    "previous results",
    "previous outputs",
    "previous tasks",
    "previous steps",
    "prior results",
    "earlier results",
    "previous output",
    "previous task",
    "previous step",
    "previous answer",
    "prior result",
    "earlier result",
    "results above",
    "result above",
    "output above",
    "above result",
    "the context",
    "dependency",
    "dependencies",
    "upstream",
    "preceding",
    "last result",
    "those results",
    "these results",
    "that result",
    "the results",
    "the result",
    "the output",
];

/// Whether the text refers to the results of earlier tasks.
pub(crate) fn refers_to_context(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    CONTEXT_PHRASES
        .iter()
        .any(|p| find_phrase(&lower, p, 0).is_some())
}

/// The first match of `phrase` in `lower` at or after `from`, on word boundaries.
fn find_phrase(lower: &str, phrase: &str, from: usize) -> Option<usize> {
    let bytes = lower.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut start = from;
    while let Some(rel) = lower.get(start..)?.find(phrase) {
        let at = start + rel;
        let end = at + phrase.len();
        let before_ok = at == 0 || !is_word(bytes[at - 1]);
        let after_ok = end >= bytes.len() || !is_word(bytes[end]);
        if before_ok && after_ok {
            return Some(at);
        }
        start = at + phrase.len().max(1);
        while start < lower.len() && !lower.is_char_boundary(start) {
            start += 1;
        }
    }
    None
}

/// Whether `phrase` stands at byte `at` of `lower` on word boundaries: a
/// test of one position, where [`find_phrase`] searches the rest.
fn phrase_at(lower: &str, at: usize, phrase: &str) -> bool {
    let bytes = lower.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let end = at + phrase.len();
    lower.get(at..).is_some_and(|rest| rest.starts_with(phrase))
        && (at == 0 || !is_word(bytes[at - 1]))
        && (end >= bytes.len() || !is_word(bytes[end]))
}

fn has_phrase(lower: &str, phrase: &str) -> bool {
    find_phrase(lower, phrase, 0).is_some()
}

fn closing_quote(open: char) -> Option<char> {
    match open {
        '"' => Some('"'),
        '“' => Some('”'),
        '`' => Some('`'),
        _ => None,
    }
}

/// The first quoted text: `"..."`, `“...”`, `` `...` `` or `'...'` (a single
/// quote opens only after a space or at the start, so "what's" is no quote).
/// Returns the inner text and the byte offset just after the closing quote.
fn first_quoted(text: &str) -> Option<(String, usize)> {
    const MARKS: [char; 4] = ['"', '”', '`', '\''];
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    // A quote mark that can close: a closing single quote must end a word,
    // so "don't" does not close.
    let closes = |k: usize| {
        chars[k].1 != '\'' || chars.get(k + 1).is_none_or(|&(_, n)| !n.is_alphanumeric())
    };
    // Where the last mark of each kind that can close is: an opening quote
    // before it has a closing one, any later has none. One pass from the
    // end, instead of a search to the end from every opening quote.
    let mut last = [None; 4];
    for k in (0..chars.len()).rev() {
        if let Some(m) = MARKS.iter().position(|&q| q == chars[k].1)
            && last[m].is_none()
            && closes(k)
        {
            last[m] = Some(k);
        }
    }
    for (k, &(i, c)) in chars.iter().enumerate() {
        let close = match c {
            '\'' => {
                let starts_word = k == 0 || chars[k - 1].1.is_whitespace() || chars[k - 1].1 == '(';
                if !starts_word {
                    continue;
                }
                '\''
            }
            other => match closing_quote(other) {
                Some(q) => q,
                None => continue,
            },
        };
        let m = MARKS.iter().position(|&q| q == close)?;
        let Some(end) = last[m].filter(|&l| l > k) else {
            continue;
        };
        // The first mark that closes it: searched once, since this returns.
        let j = (k + 1..=end).find(|&j| chars[j].1 == close && closes(j))?;
        let (at, d) = chars[j];
        let inner_start = i + c.len_utf8();
        return Some((text[inner_start..at].to_string(), at + d.len_utf8()));
    }
    None
}

/// Splits `text` outside double quotes at the word "then" (and, when
/// `and_verbs`, at "and" followed by a request verb), dropping the joining
/// punctuation. Empty pieces are left out.
fn split_words(text: &str, and_verbs: bool) -> Vec<String> {
    let lower = text.to_ascii_lowercase();
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut quote: Option<char> = None;
    let mut iter = text.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        if let Some(q) = closing_quote(c) {
            quote = Some(q);
            continue;
        }
        let at_boundary = i == 0
            || !lower.as_bytes()[i - 1].is_ascii_alphanumeric() && lower.as_bytes()[i - 1] != b'_';
        if !at_boundary {
            continue;
        }
        let cut = if phrase_at(&lower, i, "then") {
            Some(4)
        } else if and_verbs && phrase_at(&lower, i, "and") {
            let next = lower[i + 3..].split_whitespace().next().unwrap_or("");
            let next = next.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '\'');
            // "count and checksum a.txt" is one request with two verbs; "count
            // the words in a.md and compute 6*7" is two. Two words are enough
            // to know, and counting no further keeps this linear.
            (VERBS.contains(&next) && text[start..i].split_whitespace().take(2).count() >= 2)
                .then_some(3)
        } else {
            None
        };
        if let Some(len) = cut {
            pieces.push(text[start..i].to_string());
            start = i + len;
            // Skip the rest of the keyword.
            while iter.peek().is_some_and(|&(j, _)| j < start) {
                iter.next();
            }
        }
    }
    pieces.push(text[start..].to_string());
    pieces
        .into_iter()
        .map(|p| clean_piece(&p))
        .filter(|p| !p.is_empty())
        .collect()
}

/// Trims a piece cut at "then": spaces, joining commas and semicolons, and a
/// dangling "and". Each "and" is compared in place, so a piece of many costs
/// what it is long.
fn clean_piece(piece: &str) -> String {
    let mut p = piece.trim().trim_matches(|c| c == ',' || c == ';').trim();
    loop {
        let b = p.as_bytes();
        if b.eq_ignore_ascii_case(b"and")
            || (b.len() > 3 && b[b.len() - 4..].eq_ignore_ascii_case(b" and"))
        {
            p = p[..p.len() - 3]
                .trim_end()
                .trim_end_matches([',', ';'])
                .trim_end();
        } else if b.len() >= 4 && b[..4].eq_ignore_ascii_case(b"and ") {
            p = p[4..].trim_start();
        } else {
            break;
        }
    }
    p.to_string()
}

/// Splits a step at "then" (", then", "; then", " then "), outside quotes:
/// the sequential sub-steps of one line of a mission.
pub(crate) fn split_then(text: &str) -> Vec<String> {
    split_words(text, false)
}

/// Splits a task into sentences (at line ends, semicolons and sentence
/// ends), and each sentence into clauses, one request each (at "then", and
/// at "and" before a request verb).
fn clauses(text: &str) -> Vec<Vec<String>> {
    let mut rough = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            current.push(c);
            if c == q {
                quote = None;
            }
            continue;
        }
        if let Some(q) = closing_quote(c) {
            quote = Some(q);
            current.push(c);
            continue;
        }
        let sentence_end =
            matches!(c, '.' | '?' | '!') && chars.peek().is_none_or(|n| n.is_whitespace());
        if c == '\n' || c == ';' || sentence_end {
            rough.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    rough.push(current);
    rough
        .iter()
        .map(|r| split_words(r, true))
        .filter(|c| !c.is_empty())
        .collect()
}

/// Strips quotes, brackets and trailing punctuation from a token.
fn clean_token(token: &str) -> &str {
    let mut t = token;
    loop {
        let mut next = t
            .trim_matches(|c| {
                matches!(
                    c,
                    '"' | '\'' | '`' | '“' | '”' | '(' | ')' | '[' | ']' | '<' | '>'
                )
            })
            .trim_end_matches([',', ';', ':', '!', '?']);
        // A sentence's full stop, but not the dots of "." or "..".
        if next.len() > 1
            && next.ends_with('.')
            && next[..next.len() - 1]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || matches!(c, '"' | '\'' | '`' | '”' | ')'))
        {
            next = &next[..next.len() - 1];
        }
        if next == t {
            break;
        }
        t = next;
    }
    t
}

const NOT_PATHS: &[&str] = &[
    "e.g",
    "i.e",
    "and/or",
    "either/or",
    "n/a",
    "w/",
    "a.m",
    "p.m",
    "etc",
];

const BARE_FILE_NAMES: &[&str] = &[
    "makefile",
    "dockerfile",
    "license",
    "readme",
    "changelog",
    "gemfile",
    "procfile",
];

/// Whether a cleaned token looks like a path: it has a `/` or a `.ext`, or
/// is a well-known extensionless file name.
fn looks_like_path(token: &str) -> bool {
    let lower = token.to_ascii_lowercase();
    if token.is_empty() || NOT_PATHS.contains(&lower.as_str()) {
        return false;
    }
    if BARE_FILE_NAMES.contains(&lower.as_str()) {
        return true;
    }
    if token.contains("://")
        || token.chars().any(|c| {
            matches!(
                c,
                '*' | '+'
                    | '^'
                    | '='
                    | '('
                    | ')'
                    | '<'
                    | '>'
                    | '|'
                    | '$'
                    | '%'
                    | '&'
                    | '@'
                    | '"'
                    | '\''
                    | '\\'
            )
        })
    {
        return false;
    }
    if !token.chars().any(|c| c.is_ascii_alphabetic()) {
        return false;
    }
    if token.contains('/') {
        return true;
    }
    match token.rsplit_once('.') {
        Some((stem, ext)) => {
            !stem.is_empty()
                && stem
                    .chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
                && (1..=8).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
        }
        None => false,
    }
}

/// The paths a text mentions, in order, without repeats.
pub(crate) fn path_tokens(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for token in text.split_whitespace() {
        let t = clean_token(token);
        if looks_like_path(t) && seen.insert(t) {
            out.push(t.to_string());
        }
    }
    out
}

/// The directory named after "in", "under", "inside", "within", "from" or
/// "of": `src` in "in the src directory", `.` in "in the workspace".
fn directory_after_preposition(text: &str) -> Option<String> {
    const PREPOSITIONS: &[&str] = &["in", "under", "inside", "within", "from", "of"];
    const FILLER: &[&str] = &[
        "the",
        "a",
        "my",
        "this",
        "that",
        "directory",
        "folder",
        "dir",
    ];
    let words: Vec<&str> = text.split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        if !PREPOSITIONS.contains(&clean_token(w).to_ascii_lowercase().as_str()) {
            continue;
        }
        let Some(candidate) = words[i + 1..]
            .iter()
            .map(|w| clean_token(w))
            .find(|w| !FILLER.contains(&w.to_ascii_lowercase().as_str()))
        else {
            continue;
        };
        if candidate.is_empty() {
            continue;
        }
        let lower = candidate.to_ascii_lowercase();
        if WHOLE_WORKSPACE.contains(&lower.as_str()) {
            return Some(".".to_string());
        }
        // "list the files of the task" is no directory; a directory name is one word.
        if lower == "files" || lower == "file" {
            continue;
        }
        return Some(candidate.to_string());
    }
    None
}

/// An arithmetic expression at the start of `text` (after leading spaces and
/// colons), and whether it takes up all of `text` but trailing punctuation.
fn leading_expression(text: &str) -> Option<(String, bool)> {
    let text = text.trim_start_matches(|c: char| c.is_whitespace() || c == ':');
    // The expression as the calc tool will read it: operator words
    // ("plus", "times", "divided by", "3 x 4") become symbols.
    let mut expression = String::new();
    let mut end = 0;
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        if c.is_ascii_digit()
            || c.is_whitespace()
            || matches!(
                c,
                '.' | '+' | '-' | '*' | '/' | '%' | '^' | '(' | ')' | ',' | '×' | '÷' | '−'
            )
        {
            expression.push(c);
            i += c.len_utf8();
            end = i;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            break;
        }
        let word_end = text[i..]
            .find(|d: char| !d.is_ascii_alphanumeric())
            .map_or(text.len(), |n| i + n);
        let word = text[i..word_end].to_ascii_lowercase();
        let after_operand = expression
            .trim_end()
            .ends_with(|d: char| d.is_ascii_digit() || d == ')');
        let (symbol, consumed_to) = match word.as_str() {
            w if CALC_NAMES.contains(&w) => (w.to_string(), word_end),
            "plus" => ("+".to_string(), word_end),
            "minus" => ("-".to_string(), word_end),
            "times" | "x" if after_operand => ("*".to_string(), word_end),
            "mod" | "modulo" if after_operand => ("%".to_string(), word_end),
            "divided" | "multiplied" => {
                let rest = &text[word_end..];
                let by = rest.trim_start();
                if !by.to_ascii_lowercase().starts_with("by")
                    || by[2..].starts_with(|d: char| d.is_ascii_alphanumeric())
                {
                    break;
                }
                let by_end = word_end + (rest.len() - by.len()) + 2;
                let op = if word == "divided" { "/" } else { "*" };
                (op.to_string(), by_end)
            }
            _ => break,
        };
        expression.push_str(&symbol);
        i = consumed_to;
        end = i;
    }
    let expression = expression
        .trim()
        .trim_end_matches(|c: char| c == '.' || c == ',' || c.is_whitespace())
        .to_string();
    let has_number = expression.chars().any(|c| c.is_ascii_digit())
        || expression
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w.eq_ignore_ascii_case("pi"));
    if expression.is_empty() || !has_number {
        return None;
    }
    let rest = text[end..].trim();
    let whole = rest
        .chars()
        .all(|c| matches!(c, '?' | '.' | '!' | '=' | ' '));
    Some((expression, whole))
}

fn has_operator(expression: &str) -> bool {
    let trimmed = expression.trim_start_matches(['-', '+', ' ']);
    trimmed
        .chars()
        .any(|c| matches!(c, '+' | '-' | '*' | '/' | '%' | '^' | '×' | '÷' | '−'))
        || trimmed.contains('(')
}

fn calc_intent(clause: &str, lower: &str) -> Option<Intent> {
    for verb in CALC_VERBS {
        let mut from = 0;
        while let Some(at) = find_phrase(lower, verb, from) {
            let after = &clause[at + verb.len()..];
            let after =
                strip_prefix_words(after, &["the value of", "the result of", "the expression"]);
            if let Some((expression, _)) = leading_expression(after) {
                return Some(Intent::Calc(expression));
            }
            from = at + verb.len();
        }
    }
    // A clause that is nothing but arithmetic.
    let (expression, whole) = leading_expression(clause)?;
    (whole && has_operator(&expression)).then_some(Intent::Calc(expression))
}

fn strip_prefix_words<'a>(text: &'a str, prefixes: &[&str]) -> &'a str {
    let trimmed = text.trim_start();
    for p in prefixes {
        if trimmed.len() >= p.len()
            && trimmed.is_char_boundary(p.len())
            && trimmed[..p.len()].eq_ignore_ascii_case(p)
        {
            return &trimmed[p.len()..];
        }
    }
    trimmed
}

fn echo_intent(clause: &str, lower: &str) -> Option<Intent> {
    if let Some(at) = find_phrase(lower, "echo", 0) {
        let after = &clause[at + 4..];
        if let Some((quoted, _)) = first_quoted(after) {
            return Some(Intent::Echo(quoted));
        }
        let text = after.trim().trim_start_matches(':').trim();
        return (!text.is_empty()).then(|| Intent::Echo(text.to_string()));
    }
    for verb in ["say", "repeat"] {
        if let Some(at) = find_phrase(lower, verb, 0)
            && let Some((quoted, _)) = first_quoted(&clause[at + verb.len()..])
        {
            return Some(Intent::Echo(quoted));
        }
    }
    None
}

/// The words of `text` with their byte offsets.
fn words_with_offsets(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push((s, &text[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, &text[s..]));
    }
    out
}

fn grep_intent(clause: &str, lower: &str) -> Option<Intent> {
    let verb_at = ["grep", "search", "find", "look"]
        .iter()
        .filter_map(|v| find_phrase(lower, v, 0).map(|at| (at, v.len())))
        .min()?;
    let after_verb = &clause[verb_at.0 + verb_at.1..];
    let is_grep = lower[verb_at.0..].starts_with("grep");
    let for_at = find_phrase(&after_verb.to_ascii_lowercase(), "for", 0);
    let bare_grep = is_grep && for_at.is_none();
    let (pattern, rest) = if let Some((quoted, end)) = first_quoted(after_verb) {
        (quoted, &after_verb[end..])
    } else {
        let words_from = match for_at {
            Some(at) => &after_verb[at + 3..],
            None if is_grep => after_verb,
            None => return None,
        };
        let words = words_with_offsets(words_from);
        let stop = if bare_grep {
            // "grep TODO src": the next word is the pattern.
            words.len().min(1)
        } else {
            words
                .iter()
                .position(|(_, w)| {
                    ["in", "under", "inside", "within", "across", "through"]
                        .contains(&w.to_ascii_lowercase().as_str())
                })
                .unwrap_or(words.len())
        };
        let pattern = words[..stop]
            .iter()
            .map(|(_, w)| clean_token(w))
            .collect::<Vec<_>>()
            .join(" ");
        let rest = words.get(stop).map_or("", |(at, _)| &words_from[*at..]);
        (regex::escape(&pattern), rest)
    };
    if pattern.trim().is_empty() {
        return None;
    }
    let path = path_tokens(rest)
        .into_iter()
        .next()
        .or_else(|| directory_after_preposition(rest))
        .or_else(|| {
            // "grep TODO src": a plain word after the pattern.
            let first = rest.split_whitespace().next().map(clean_token)?;
            (bare_grep && !first.is_empty()).then(|| first.to_string())
        })
        .unwrap_or_else(|| ".".to_string());
    Some(Intent::Grep { pattern, path })
}

fn list_intent(clause: &str, lower: &str) -> Option<Intent> {
    let triggered = has_phrase(lower, "list")
        || has_phrase(lower, "ls")
        || [
            "show the files",
            "show files",
            "show me the files",
            "what files",
            "which files",
        ]
        .iter()
        .any(|p| has_phrase(lower, p));
    if !triggered {
        return None;
    }
    let paths = path_tokens(clause);
    let about_files = [
        "files",
        "file",
        "directory",
        "directories",
        "dir",
        "folder",
        "contents",
        "entries",
        "tree",
        "ls",
    ]
    .iter()
    .any(|w| has_phrase(lower, w));
    if !about_files && paths.is_empty() {
        return None;
    }
    let path = paths
        .into_iter()
        .next()
        .or_else(|| directory_after_preposition(clause))
        .unwrap_or_else(|| ".".to_string());
    let recursive = [
        "recursive",
        "recursively",
        "tree",
        "subdirectories",
        "subfolders",
        "all files",
        "every file",
        "all the files",
    ]
    .iter()
    .any(|w| has_phrase(lower, w));
    Some(Intent::List { path, recursive })
}

fn targets(clause: &str, lower: &str, last_path: Option<&str>) -> Vec<Target> {
    let paths = path_tokens(clause);
    if !paths.is_empty() {
        return paths.into_iter().map(Target::Path).collect();
    }
    if refers_to_context(clause) {
        return vec![Target::Context];
    }
    if let Some((quoted, _)) = first_quoted(clause) {
        return vec![Target::Text(quoted)];
    }
    if let Some(last) = last_path
        && [
            "it",
            "its",
            "the file",
            "that file",
            "this file",
            "same file",
        ]
        .iter()
        .any(|p| has_phrase(lower, p))
    {
        return vec![Target::Path(last.to_string())];
    }
    vec![Target::Unspecified]
}

/// The requests in a task, in the order they appear.
pub(crate) fn recognise(text: &str) -> Vec<Intent> {
    let mut intents: Vec<Intent> = Vec::new();
    let mut seen: HashSet<Intent> = HashSet::new();
    let mut last_path: Option<String> = None;
    for sentence in clauses(text) {
        let paths: Vec<Vec<String>> = sentence.iter().map(|c| path_tokens(c)).collect();
        // The first path of the clauses after each one, from the end back.
        let mut later_paths: Vec<Option<&String>> = vec![None; sentence.len()];
        for k in (0..sentence.len().saturating_sub(1)).rev() {
            later_paths[k] = paths[k + 1].first().or(later_paths[k + 1]);
        }
        for (k, clause) in sentence.iter().enumerate() {
            let mut found = clause_intents(clause, last_path.as_deref());
            // "count the words and checksum a.txt": a measurement that names
            // nothing takes the next path of its sentence.
            if let Some(p) = later_paths[k] {
                for intent in &mut found {
                    if let Intent::Count(t) | Intent::Checksum(t) = intent
                        && *t == Target::Unspecified
                    {
                        *t = Target::Path(p.clone());
                    }
                }
            }
            if let Some(p) = paths[k].last() {
                last_path = Some(p.clone());
            }
            for intent in found {
                if seen.insert(intent.clone()) {
                    intents.push(intent);
                }
            }
        }
    }
    intents
}

/// The requests of one clause.
fn clause_intents(clause: &str, last_path: Option<&str>) -> Vec<Intent> {
    let lower = clause.to_ascii_lowercase();
    if let Some(echo) = echo_intent(clause, &lower) {
        return vec![echo];
    }
    if let Some(grep) = grep_intent(clause, &lower) {
        return vec![grep];
    }
    if let Some(list) = list_intent(clause, &lower) {
        return vec![list];
    }
    let mut found = Vec::new();
    let counts = ["count", "how many", "word count", "wc"]
        .iter()
        .any(|w| has_phrase(&lower, w));
    let sums = [
        "checksum",
        "sha256",
        "sha-256",
        "hash",
        "digest",
        "fingerprint",
    ]
    .iter()
    .any(|w| has_phrase(&lower, w));
    if counts || sums {
        let targets = targets(clause, &lower, last_path);
        if counts {
            found.extend(targets.iter().cloned().map(Intent::Count));
        }
        if sums {
            found.extend(targets.into_iter().map(Intent::Checksum));
        }
        return found;
    }
    if ["read", "open", "cat", "show", "display", "print", "view"]
        .iter()
        .any(|w| has_phrase(&lower, w))
    {
        found.extend(path_tokens(clause).into_iter().map(Intent::Read));
    }
    if found.is_empty()
        && let Some(calc) = calc_intent(clause, &lower)
    {
        found.push(calc);
    }
    found
}

/// The tightest byte limit the text names ("at most 200 bytes", "no more
/// than 1,000 bytes", "under 500 bytes").
pub(crate) fn byte_limit(text: &str) -> Option<usize> {
    const LEADS: &[&str] = &[
        "most", "than", "within", "under", "max", "maximum", "below", "exceed", "to", "<=", "≤",
        "limit",
    ];
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| clean_token(w).to_ascii_lowercase())
        .collect();
    let mut best: Option<usize> = None;
    for (i, w) in words.iter().enumerate() {
        if !w.starts_with("byte") || i == 0 {
            continue;
        }
        let Ok(n) = words[i - 1].replace(',', "").parse::<usize>() else {
            continue;
        };
        let led = words[i.saturating_sub(4)..i - 1]
            .iter()
            .any(|l| LEADS.contains(&l.as_str()));
        if led {
            best = Some(best.map_or(n, |b| b.min(n)));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Target {
        Target::Path(p.to_string())
    }

    #[test]
    fn arithmetic_is_found_after_a_verb_or_alone() {
        assert_eq!(
            recognise("What is 17*23+4^3?"),
            [Intent::Calc("17*23+4^3".into())]
        );
        assert_eq!(
            recognise("Please compute (2 + 3) * sqrt(16)."),
            [Intent::Calc("(2 + 3) * sqrt(16)".into())]
        );
        assert_eq!(recognise("12 / 4 ="), [Intent::Calc("12 / 4".into())]);
        assert_eq!(
            recognise("calculate the value of 2^10"),
            [Intent::Calc("2^10".into())]
        );
        assert_eq!(
            recognise("what is 12 divided by 4 plus 2 times 3?"),
            [Intent::Calc("12 / 4 + 2 * 3".into())]
        );
        assert_eq!(recognise("compute 3 x 4"), [Intent::Calc("3 * 4".into())]);
        assert_eq!(
            recognise("what is 10 mod 3"),
            [Intent::Calc("10 % 3".into())]
        );
        assert!(recognise("what is the meaning of life").is_empty());
        assert!(recognise("1").is_empty());
    }

    #[test]
    fn file_requests_name_their_paths() {
        assert_eq!(
            recognise("count the words in notes.txt"),
            [Intent::Count(path("notes.txt"))]
        );
        assert_eq!(
            recognise("Count the words and lines of docs/README.md."),
            [Intent::Count(path("docs/README.md"))]
        );
        assert_eq!(
            recognise("sha256 of Cargo.toml"),
            [Intent::Checksum(path("Cargo.toml"))]
        );
        assert_eq!(
            recognise("count and checksum a.txt"),
            [
                Intent::Count(path("a.txt")),
                Intent::Checksum(path("a.txt"))
            ]
        );
        assert_eq!(
            recognise("read src/main.rs"),
            [Intent::Read("src/main.rs".into())]
        );
        assert_eq!(
            recognise("Read notes.txt, then count its words"),
            [
                Intent::Read("notes.txt".into()),
                Intent::Count(path("notes.txt"))
            ]
        );
        assert_eq!(
            recognise("list the files in src"),
            [Intent::List {
                path: "src".into(),
                recursive: false
            }]
        );
        assert_eq!(
            recognise("List all files in the workspace recursively"),
            [Intent::List {
                path: ".".into(),
                recursive: true
            }]
        );
        assert_eq!(
            recognise("list the files in the docs directory"),
            [Intent::List {
                path: "docs".into(),
                recursive: false
            }]
        );
        assert_eq!(
            recognise("search for TODO in src"),
            [Intent::Grep {
                pattern: "TODO".into(),
                path: "src".into()
            }]
        );
        assert_eq!(
            recognise("grep for \"fn \\w+\" in src/lib.rs"),
            [Intent::Grep {
                pattern: "fn \\w+".into(),
                path: "src/lib.rs".into()
            }]
        );
        assert_eq!(recognise("find a.b everywhere"), []);
        assert_eq!(
            recognise("search for a.b"),
            [Intent::Grep {
                pattern: "a\\.b".into(),
                path: ".".into()
            }]
        );
        assert_eq!(
            recognise("grep TODO src"),
            [Intent::Grep {
                pattern: "TODO".into(),
                path: "src".into()
            }]
        );
    }

    #[test]
    fn echo_keeps_quoted_text_whole() {
        assert_eq!(
            recognise("echo \"count then list; compute 1+1\""),
            [Intent::Echo("count then list; compute 1+1".into())]
        );
        assert_eq!(
            recognise("say 'hello world'"),
            [Intent::Echo("hello world".into())]
        );
        assert_eq!(recognise("echo hi"), [Intent::Echo("hi".into())]);
        assert!(recognise("what does it say").is_empty());
    }

    #[test]
    fn several_requests_in_one_task_keep_their_order() {
        assert_eq!(
            recognise("Count the words in a.md and compute 6*7; then list files in docs."),
            [
                Intent::Count(path("a.md")),
                Intent::Calc("6*7".into()),
                Intent::List {
                    path: "docs".into(),
                    recursive: false
                },
            ]
        );
    }

    #[test]
    fn a_measurement_takes_the_path_of_its_sentence() {
        assert_eq!(
            recognise("count the words and checksum a.txt"),
            [
                Intent::Count(path("a.txt")),
                Intent::Checksum(path("a.txt"))
            ]
        );
        assert_eq!(
            recognise("compute 2+2 and count words in a.txt"),
            [Intent::Calc("2+2".into()), Intent::Count(path("a.txt"))]
        );
    }

    #[test]
    fn context_references_are_seen() {
        assert!(refers_to_context("Count the words of the previous result"));
        assert!(refers_to_context("summarise the results above"));
        assert!(!refers_to_context("count the words in notes.txt"));
        assert_eq!(
            recognise("checksum of the previous results"),
            [Intent::Checksum(Target::Context)]
        );
        assert_eq!(
            recognise("count the words"),
            [Intent::Count(Target::Unspecified)]
        );
        assert_eq!(
            recognise("count the words in \"a b c\""),
            [Intent::Count(Target::Text("a b c".into()))]
        );
    }

    #[test]
    fn words_are_not_paths() {
        for t in [
            "e.g.",
            "1.5",
            "17/4",
            "and/or",
            "hello",
            "x.",
            "what's",
            "http://x.io/a",
        ] {
            assert!(!looks_like_path(clean_token(t)), "{t}");
        }
        for t in [
            "notes.txt",
            "src/",
            "./a",
            "\"docs/x.md\",",
            "README",
            "a.tar.gz.",
            "'b.rs'.",
        ] {
            assert!(looks_like_path(clean_token(t)), "{t}");
        }
    }

    #[test]
    fn then_splits_outside_quotes() {
        assert_eq!(
            split_then("read a.txt, then count it"),
            ["read a.txt", "count it"]
        );
        assert_eq!(split_then("a; then b then c"), ["a", "b", "c"]);
        assert_eq!(split_then("do x, and then y"), ["do x", "y"]);
        assert_eq!(split_then("echo \"a then b\""), ["echo \"a then b\""]);
        assert_eq!(split_then("Then go"), ["go"]);
        assert_eq!(
            split_then("strengthen the authentication"),
            ["strengthen the authentication"]
        );
    }

    #[test]
    fn byte_limits_are_read_from_feedback() {
        assert_eq!(byte_limit("Keep it to at most 120 bytes."), Some(120));
        assert_eq!(
            byte_limit("result is 9000 bytes; no more than 1,000 bytes please"),
            Some(1000)
        );
        assert_eq!(byte_limit("under 50 bytes, or at most 80 bytes"), Some(50));
        assert_eq!(byte_limit("the result was 400 bytes"), None);
        assert_eq!(byte_limit("be shorter"), None);
    }
}
