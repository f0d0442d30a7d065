//! Reading the workspace's sources for the tidy checks: file walking, a small lexer that blanks
//! comments and string literals (keeping line structure), function spans, module references.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Every file under `dir` (relative to the root, `/`-separated, sorted), skipping build
/// output, hidden directories and generated code.
pub fn files(root: &Path, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    walk(root, &root.join(dir), &mut out);
    out.sort();
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "generated" {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The Rust sources of the workspace: every crate's `.rs` files and the fuzz targets.
pub fn rust_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in top_level_dirs(root) {
        out.extend(files(root, &dir).into_iter().filter(|f| f.ends_with(".rs")));
    }
    out
}

/// The top-level directories of the workspace (crates, docs, scripts, ...).
pub fn top_level_dirs(root: &Path) -> Vec<String> {
    let mut dirs: Vec<String> = fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.') && n != "target" && n != "results")
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// `src` with comments and string and char literals replaced by spaces; newlines are kept, so
/// line numbers stay valid.
pub fn blank_comments_and_strings(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let skip = literal_or_comment_len(b, i);
        if skip == 0 {
            out.push(b[i]);
            i += 1;
            continue;
        }
        for &c in &b[i..i + skip] {
            out.push(if c == b'\n' { b'\n' } else { b' ' });
        }
        i += skip;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The comments of `src` by line (1-based): for each line, the text of the comments on it.
pub fn comments_by_line(src: &str) -> Vec<(usize, String)> {
    let b = src.as_bytes();
    let mut out: Vec<(usize, String)> = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let skip = literal_or_comment_len(b, i);
        if skip == 0 {
            line += usize::from(b[i] == b'\n');
            i += 1;
            continue;
        }
        let text = String::from_utf8_lossy(&b[i..i + skip]).into_owned();
        let is_comment = b[i] == b'/';
        for (k, part) in text.split('\n').enumerate() {
            if is_comment {
                out.push((line + k, part.to_string()));
            }
        }
        line += text.matches('\n').count();
        i += skip;
    }
    out
}

/// Length of the comment or literal starting at `i`, or 0.
fn literal_or_comment_len(b: &[u8], i: usize) -> usize {
    let rest = &b[i..];
    let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    match rest {
        [b'/', b'/', ..] => rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len()),
        [b'/', b'*', ..] => block_comment_len(rest),
        [b'r', b'#', ..] | [b'r', b'"', ..] if !ident_before => raw_string_len(rest),
        [b'b', b'"', ..] if !ident_before => 1 + string_len(&rest[1..]),
        [b'"', ..] => string_len(rest),
        [b'\'', ..] => char_len(rest),
        _ => 0,
    }
}

fn block_comment_len(rest: &[u8]) -> usize {
    let (mut depth, mut j) = (0usize, 0usize);
    while j + 1 < rest.len() {
        match (rest[j], rest[j + 1]) {
            (b'/', b'*') => (depth, j) = (depth + 1, j + 2),
            (b'*', b'/') => {
                depth -= 1;
                j += 2;
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    rest.len()
}

fn string_len(rest: &[u8]) -> usize {
    let mut j = 1;
    while j < rest.len() {
        match rest[j] {
            b'\\' => j += 2,
            b'"' => return j + 1,
            _ => j += 1,
        }
    }
    rest.len()
}

fn raw_string_len(rest: &[u8]) -> usize {
    let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
    if rest.get(1 + hashes) != Some(&b'"') {
        return 0; // r#ident, not a string
    }
    let start = 2 + hashes;
    let mut j = start;
    while j < rest.len() {
        if rest[j] == b'"'
            && rest[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == b'#')
                .count()
                == hashes
        {
            return j + 1 + hashes;
        }
        j += 1;
    }
    rest.len()
}

/// A char literal (`'x'`, `'\n'`, `'\u{..}'`); 0 for a lifetime (`'a`).
fn char_len(rest: &[u8]) -> usize {
    if rest.get(1) == Some(&b'\\') {
        return rest[2..]
            .iter()
            .position(|&c| c == b'\'')
            .map_or(0, |p| p + 3);
    }
    let width = rest.get(1).map_or(1, |&c| utf8_width(c));
    if rest.get(1 + width) == Some(&b'\'') {
        width + 2
    } else {
        0
    }
}

fn utf8_width(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// A function with a body: its name and the lines it spans (1-based, inclusive).
pub struct FnSpan {
    pub name: String,
    pub first_line: usize,
    pub last_line: usize,
}

impl FnSpan {
    pub fn lines(&self) -> usize {
        self.last_line - self.first_line + 1
    }
}

/// Every function with a body in blanked source (see [`blank_comments_and_strings`]).
pub fn functions(blank: &str) -> Vec<FnSpan> {
    let b = blank.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = find_word(b, i, b"fn") {
        i = at + 2;
        let Some((name, after)) = ident_after(b, i) else {
            continue;
        };
        let Some(open) = body_start(b, after) else {
            continue;
        };
        let Some(close) = matching_brace(b, open) else {
            continue;
        };
        out.push(FnSpan {
            name,
            first_line: line_of(b, at),
            last_line: line_of(b, close),
        });
    }
    out
}

fn find_word(b: &[u8], from: usize, word: &[u8]) -> Option<usize> {
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    (from..b.len().saturating_sub(word.len() - 1)).find(|&j| {
        &b[j..j + word.len()] == word
            && (j == 0 || !is_ident(b[j - 1]))
            && b.get(j + word.len()).is_none_or(|&c| !is_ident(c))
    })
}

fn ident_after(b: &[u8], mut i: usize) -> Option<(String, usize)> {
    while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    let start = i;
    while b
        .get(i)
        .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_')
    {
        i += 1;
    }
    (i > start).then(|| (String::from_utf8_lossy(&b[start..i]).into_owned(), i))
}

/// The `{` opening the body, or `None` for a declaration (`;` first).
fn body_start(b: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (j, &c) in b.iter().enumerate().skip(from) {
        match c {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'{' if depth == 0 => return Some(j),
            b';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

fn matching_brace(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn line_of(b: &[u8], at: usize) -> usize {
    1 + b[..at].iter().filter(|&&c| c == b'\n').count()
}

/// The top-level modules a file of `broker/src` names through `crate::` paths, including
/// grouped imports (`use crate::{a::X, b}`), in blanked source.
pub fn crate_references(blank: &str) -> Vec<String> {
    let b = blank.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = find_word(b, i, b"crate") {
        i = at + 5;
        if !b[i..].starts_with(b"::") {
            continue;
        }
        i += 2;
        if b.get(i) == Some(&b'{') {
            out.extend(group_heads(b, i));
        } else if let Some((name, _)) = ident_after(b, i) {
            out.push(name);
        }
    }
    out
}

/// The first segment of each item of a `{...}` import group starting at `open`.
fn group_heads(b: &[u8], open: usize) -> Vec<String> {
    let Some(close) = matching_brace(b, open) else {
        return Vec::new();
    };
    let inner = String::from_utf8_lossy(&b[open + 1..close]).into_owned();
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for (j, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && (c.is_alphanumeric() || c == '_') => {
                let name: String = inner[j..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                heads.push(name);
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}
