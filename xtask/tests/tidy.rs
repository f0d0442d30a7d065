//! Tidy checks over the whole workspace, run by `cargo test` (and so by scripts/test.sh):
//! - the broker's modules import each other without a cycle;
//! - functions are at most 70 lines, except those on [`LONG_FUNCTIONS`], which may not grow
//!   and leave the list once they fit (the list only shrinks);
//! - lines are at most 100 characters, except the counts per file in [`LONG_LINES`], which
//!   may only go down;
//! - comments and docs/ name only files that exist (a file that is planned says "to come" on
//!   the same line).
//!
//! On failure each check prints what to change, and for the ratchets the list as it should be.

#[path = "tidy/source.rs"]
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Longest function body, in lines from `fn` to its closing brace.
const FUNCTION_LINES_MAX: usize = 70;
/// Longest line, in characters.
const LINE_CHARS_MAX: usize = 100;

/// Functions longer than [`FUNCTION_LINES_MAX`] when the check arrived, with their length
/// then: (file, function, lines). Split one and remove its line; never add one.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[
    ("broker/src/groups/assignor.rs", "assign", 83),
    ("broker/src/handlers/admin.rs", "describe_configs", 82),
    ("broker/src/handlers/groups.rs", "offset_commit", 94),
    ("broker/src/handlers/metadata.rs", "metadata", 112),
    ("broker/src/server.rs", "run", 92),
    (
        "cli/tests/cli.rs",
        "consumer_groups_consume_commit_describe_reset_and_delete",
        147,
    ),
    (
        "cli/tests/cli.rs",
        "quickstart_matches_the_kafka_seed_output",
        110,
    ),
    (
        "cli/tests/cli.rs",
        "topic_list_alter_delete_and_acks_levels",
        120,
    ),
    (
        "cli/tests/group_crash.rs",
        "a_killed_member_process_loses_its_partitions_to_the_survivor_without_loss",
        129,
    ),
    ("client/examples/sink.rs", "answer", 141),
    ("client/src/producer/accumulator.rs", "append", 84),
    ("loadgen/src/runner.rs", "run_on_topics", 93),
];

/// Lines longer than [`LINE_CHARS_MAX`] per file when the check arrived (mostly long string
/// literals rustfmt does not break). The counts may only go down.
const LONG_LINES: &[(&str, usize)] = &[
    ("broker/src/cli.rs", 1),
    ("broker/src/config.rs", 4),
    ("broker/src/groups/assignor.rs", 5),
    ("broker/src/groups/coordinator.rs", 1),
    ("broker/src/handlers/offsets.rs", 1),
    ("broker/src/server.rs", 2),
    ("broker/src/topic_config.rs", 14),
    ("broker/src/wire.rs", 1),
    ("checker/src/anomaly.rs", 8),
    ("checker/src/bin/borges-checker.rs", 1),
    ("checker/src/history.rs", 2),
    ("checker/src/sim.rs", 1),
    ("checker/src/tests.rs", 1),
    ("checker/src/timing.rs", 3),
    ("checker/tests/cli.rs", 1),
    ("cli/src/format.rs", 4),
    ("cli/tests/cli.rs", 1),
    ("client/examples/consumer_bench.rs", 1),
    ("client/examples/producer_bench.rs", 2),
    ("client/examples/sink.rs", 1),
    ("client/src/consumer.rs", 3),
    ("client/src/error.rs", 1),
    ("client/src/group.rs", 1),
    ("client/src/producer/accumulator.rs", 7),
    ("client/src/producer/mod.rs", 2),
    ("fuzz/fuzz_targets/message_verify.rs", 1),
    ("loadgen/src/procstat.rs", 3),
    ("loadgen/src/report.rs", 1),
    ("loadgen/src/runner.rs", 1),
    ("protocol/src/api.rs", 1),
    ("protocol/src/error.rs", 4),
    ("protocol/src/message.rs", 2),
    ("protocol/tests/frame_props.rs", 1),
    ("protocol/tests/message_roundtrip.rs", 28),
    ("replication/src/controller/mod.rs", 2),
    ("replication/src/metadata.rs", 2),
    ("runtime/src/executor.rs", 3),
    ("storage/src/log.rs", 1),
    ("storage/src/recovery.rs", 4),
    ("storage/src/scan.rs", 1),
    ("testkit/src/lib.rs", 1),
    ("xtask/src/codegen.rs", 1),
];

/// References in comments that name files of other projects, not of this repository.
const EXTERNAL_REFERENCES: &[(&str, &str)] =
    &[("protocol/tests/kafka_vectors.rs", "src/protocol/record.rs")];

fn read(root: &Path, file: &str) -> String {
    fs::read_to_string(root.join(file)).unwrap_or_default()
}

/// The module graph of `broker/src`: top-level module -> the top-level modules it names.
fn broker_module_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in source::files(root, "broker/src") {
        let rel = &file["broker/src/".len()..];
        if !rel.ends_with(".rs") || rel == "lib.rs" || rel.starts_with("bin/") {
            continue;
        }
        let module = rel.split('/').next().unwrap_or(rel).trim_end_matches(".rs");
        let blank = source::blank_comments_and_strings(&read(root, &file));
        let edges = graph.entry(module.to_string()).or_default();
        for target in source::crate_references(&blank) {
            if target != module {
                edges.insert(target);
            }
        }
    }
    graph
}

/// A cycle of the graph, as the modules along it (first repeated at the end), if any.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if !done.insert(node.to_string()) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

#[test]
fn broker_modules_import_no_cycle() {
    let graph = broker_module_graph(&source::root());
    assert!(
        graph.len() > 10,
        "found only {} broker modules",
        graph.len()
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "broker modules import each other in a cycle: {}\n\
             The intended direction (docs/ARCHITECTURE.md): types/failure/metadata/error/metrics/\
             config <- lifecycle/admission/mesh <- partition <- groups, controller <- shard <- \
             handlers <- dispatch <- connection <- server. Move the shared item down.",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn cycle_finder_finds_a_planted_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a", "d"][..]),
        ("d", &[][..]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
    .collect();
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    let mut acyclic = graph;
    acyclic.get_mut("c").unwrap().remove("a");
    assert_eq!(find_cycle(&acyclic), None);
}

/// (file, function) -> lines, for every function longer than the limit.
fn long_functions(root: &Path) -> BTreeMap<(String, String), usize> {
    let mut out = BTreeMap::new();
    for file in source::rust_files(root) {
        let blank = source::blank_comments_and_strings(&read(root, &file));
        for f in source::functions(&blank) {
            if f.lines() > FUNCTION_LINES_MAX {
                let lines = f.lines();
                let e = out.entry((file.clone(), f.name)).or_insert(0);
                *e = lines.max(*e);
            }
        }
    }
    out
}

#[test]
fn functions_are_at_most_70_lines() {
    let found = long_functions(&source::root());
    let allowed: BTreeMap<(String, String), usize> = LONG_FUNCTIONS
        .iter()
        .map(|(f, n, l)| ((f.to_string(), n.to_string()), *l))
        .collect();
    let mut problems = Vec::new();
    for ((file, name), lines) in &found {
        match allowed.get(&(file.clone(), name.clone())) {
            None => problems.push(format!("{file}: fn {name} has {lines} lines; split it")),
            Some(max) if lines > max => problems.push(format!(
                "{file}: fn {name} grew to {lines} lines (allowed while listed: {max}); split it"
            )),
            Some(_) => {}
        }
    }
    for (file, name) in allowed.keys() {
        if !found.contains_key(&(file.clone(), name.clone())) {
            problems.push(format!(
                "{file}: fn {name} is gone or fits in {FUNCTION_LINES_MAX} lines now: remove it \
                 from LONG_FUNCTIONS in xtask/tests/tidy.rs"
            ));
        }
    }
    let list: Vec<String> = found
        .iter()
        .filter(|(k, _)| allowed.contains_key(*k))
        .map(|((f, n), l)| {
            format!(
                "    ({f:?}, {n:?}, {}),",
                l.min(&allowed[&(f.clone(), n.clone())])
            )
        })
        .collect();
    assert!(
        problems.is_empty(),
        "{}\n\nLONG_FUNCTIONS as it may be now:\n{}",
        problems.join("\n"),
        list.join("\n")
    );
}

/// file -> lines longer than the limit.
fn long_lines(root: &Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for file in source::rust_files(root) {
        let n = read(root, &file)
            .lines()
            .filter(|l| l.chars().count() > LINE_CHARS_MAX)
            .count();
        if n > 0 {
            out.insert(file, n);
        }
    }
    out
}

#[test]
fn lines_are_at_most_100_characters() {
    let found = long_lines(&source::root());
    let allowed: BTreeMap<String, usize> = LONG_LINES
        .iter()
        .map(|(f, n)| (f.to_string(), *n))
        .collect();
    let mut problems = Vec::new();
    for (file, n) in &found {
        let max = allowed.get(file).copied().unwrap_or(0);
        if *n > max {
            problems.push(format!(
                "{file}: {n} lines longer than {LINE_CHARS_MAX} characters (allowed: {max}); \
                 break them (long strings can be split with concat!)"
            ));
        }
    }
    for (file, max) in &allowed {
        let n = found.get(file).copied().unwrap_or(0);
        if n < *max {
            problems.push(format!(
                "{file}: {n} long lines now, {max} allowed: lower its count in LONG_LINES in \
                 xtask/tests/tidy.rs (the counts only go down)"
            ));
        }
    }
    let list: Vec<String> = found
        .iter()
        .filter(|(f, _)| allowed.contains_key(*f))
        .map(|(f, n)| format!("    ({f:?}, {}),", n.min(&allowed[f])))
        .collect();
    assert!(
        problems.is_empty(),
        "{}\n\nLONG_LINES as it may be now:\n{}",
        problems.join("\n"),
        list.join("\n")
    );
}

/// Path-like words ending in an extension (`scan.rs`, `docs/operations.md`).
fn file_references(text: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    text.split(|c: char| !is_path_char(c))
        .map(|w| w.trim_end_matches(['.', '/']))
        .filter(|w| {
            w.rsplit_once('.').is_some_and(|(stem, ext)| {
                !stem.is_empty()
                    && !stem.ends_with('/')
                    && (1..=4).contains(&ext.len())
                    && ext.chars().all(|c| c.is_ascii_lowercase())
            })
        })
        .map(str::to_string)
        .collect()
}

/// Whether a reference from `from` names a file or directory of the repository. Bare `.rs`
/// names must exist somewhere; paths must resolve from the root, the crate, its `src/`, the
/// referring file's directory, or as the tail of a repository path. Other bare names
/// (`metadata.json`, `kafka-topics.sh`) and paths outside the repository's top-level
/// directories are not files of ours and are not checked.
fn resolves(reference: &str, from: &str, files: &BTreeSet<String>, tops: &[String]) -> bool {
    if !reference.contains('/') {
        return !reference.ends_with(".rs")
            || files
                .iter()
                .any(|f| f.rsplit('/').next() == Some(reference));
    }
    let head = reference.split('/').next().unwrap_or("");
    if !reference.ends_with(".rs") && !tops.iter().any(|t| t == head) {
        return true;
    }
    let krate = from.split('/').next().unwrap_or("");
    let dir = from.rsplit_once('/').map_or("", |(d, _)| d);
    let candidates = [
        reference.to_string(),
        format!("{krate}/{reference}"),
        format!("{krate}/src/{reference}"),
        format!("{dir}/{reference}"),
    ];
    let exists =
        |p: &str| files.contains(p) || files.iter().any(|f| f.starts_with(&format!("{p}/")));
    candidates.iter().any(|c| exists(c))
        || files.iter().any(|f| f.ends_with(&format!("/{reference}")))
}

#[test]
fn comments_and_docs_name_only_files_that_exist() {
    let root = source::root();
    let tops = source::top_level_dirs(&root);
    let mut files: BTreeSet<String> = BTreeSet::new();
    for top in &tops {
        files.extend(source::files(&root, top));
    }
    files.extend(["Cargo.toml", "README.md", "Cargo.lock"].map(String::from));
    let mut stale = Vec::new();
    let docs = source::files(&root, "docs")
        .into_iter()
        .filter(|f| f.ends_with(".md"));
    for file in source::rust_files(&root).into_iter().chain(docs) {
        let src = read(&root, &file);
        let lines: Vec<(usize, String)> = if file.ends_with(".md") {
            src.lines()
                .enumerate()
                .map(|(i, l)| (i + 1, l.to_string()))
                .collect()
        } else {
            source::comments_by_line(&src)
        };
        for (at, (line, text)) in lines.iter().enumerate() {
            // A planned file says so ("to come"), on its line or the next.
            let next = lines.get(at + 1).map_or("", |(_, t)| t.as_str());
            if text.contains("to come")
                || next.trim_start_matches(['/', '!', ' ']).starts_with("come")
            {
                continue;
            }
            for r in file_references(text) {
                let external = EXTERNAL_REFERENCES.contains(&(file.as_str(), r.as_str()));
                if !external && !resolves(&r, &file, &files, &tops) {
                    stale.push(format!("{file}:{line}: names {r}, which does not exist"));
                }
            }
        }
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    assert!(
        stale.is_empty(),
        "stale file references:\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_source_reader_sees_through_strings_and_comments() {
    let src = r##"
fn short() { let s = "}{"; let c = '{'; } // fn hidden() {
fn generic<'a>(x: &'a str) -> impl Fn() -> &'a str {
    /* { */ move || x
}
trait T { fn declared(&self); }
fn raw() { let r = r#"fn nope() { "#; }
use crate::{alpha::X, beta, gamma::{Y, Z}};
fn uses() { crate::delta::f(); }
"##;
    let blank = source::blank_comments_and_strings(src);
    let fns: Vec<(String, usize)> = source::functions(&blank)
        .into_iter()
        .map(|f| (f.name.clone(), f.lines()))
        .collect();
    let expect = [("short", 1), ("generic", 3), ("raw", 1), ("uses", 1)];
    assert_eq!(fns, expect.map(|(n, l)| (n.to_string(), l)));
    assert_eq!(
        source::crate_references(&blank),
        ["alpha", "beta", "gamma", "delta"]
    );
    assert_eq!(
        file_references("// see storage/src/writer.rs and `log.rs`, docs/ops.md."),
        ["storage/src/writer.rs", "log.rs", "docs/ops.md"]
    );
}
