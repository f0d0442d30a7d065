//! Refuses a stale broker binary: integration tests must run against the `borges` built from
//! the tree they test (issue 21). `cargo test -p borges-broker` alone does not build the `borges`
//! binary (it is the CLI crate's), so without this check a test could pass against the code of
//! an older build.
//!
//! Cargo writes `target/<profile>/borges.d` next to the binary: the binary's path, a colon, and
//! every source file it was built from. A binary older than one of its workspace source files is
//! stale, the same rule cargo applies before rebuilding. Files under `.git/` (the build script
//! watches HEAD for the commit in `borges_build_info`) do not change what a test sees and are
//! not counted; source files that no longer exist are not either (a file whose `mod` line was
//! removed changed its parent, which counts).
//!
//! When the target directory was copied from another checkout, `borges.d` names that
//! checkout's files: paths under the directory that held its `target/` are read under the one
//! that holds this binary's `target/` instead.

use std::path::{Path, PathBuf};

/// Why `bin` is stale, naming the newest source file that is newer than it, or `None` when it
/// is fresh or cannot be judged (no `.d` file beside it).
pub fn stale_reason(bin: &Path) -> Option<String> {
    let dep_info = bin.with_extension("d");
    let text = std::fs::read_to_string(&dep_info).ok()?;
    let built = std::fs::metadata(bin).and_then(|m| m.modified()).ok()?;
    let (target, deps) = parse_dep_info(&text)?;
    let from_root = workspace_of(Path::new(&target));
    let to_root = workspace_of(bin);
    let newest = deps
        .iter()
        .filter(|d| !d.contains("/.git/"))
        .map(|d| relocate(Path::new(d), from_root.as_deref(), to_root.as_deref()))
        .filter_map(|p| {
            let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            (modified > built).then_some((modified, p))
        })
        .max()?;
    Some(format!(
        "{} is older than {} (modified {} s after the build): rebuild it with \
         `cargo build --workspace --bins --features borges-broker/strict-assertions` \
         (scripts/test.sh does), or set BORGES_BIN to the binary to test",
        bin.display(),
        newest.1.display(),
        newest.0.duration_since(built).unwrap_or_default().as_secs()
    ))
}

/// The directory holding the `target/` directory `path` is in (`<root>/target/debug/borges`
/// -> `<root>`), if it is in one named `target`.
fn workspace_of(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "target"))
        .and_then(Path::parent)
        .map(Path::to_path_buf)
}

/// `path` under `to` instead of `from` when it is under `from`.
fn relocate(path: &Path, from: Option<&Path>, to: Option<&Path>) -> PathBuf {
    match (from, to) {
        (Some(from), Some(to)) if from != to => match path.strip_prefix(from) {
            Ok(rest) => to.join(rest),
            Err(_) => path.to_path_buf(),
        },
        _ => path.to_path_buf(),
    }
}

/// The first rule of a Makefile-style dep-info file: (target, dependencies), with `\ ` as an
/// escaped space.
fn parse_dep_info(text: &str) -> Option<(String, Vec<String>)> {
    let line = text.lines().next()?;
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                word.push(' ');
                chars.next();
            }
            ' ' => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            _ => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut words = words.into_iter();
    let target = words.next()?.strip_suffix(':')?.to_string();
    Some((target, words.collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn set_mtime(path: &Path, t: SystemTime) {
        let f = std::fs::File::options()
            .write(true)
            .open(path)
            .expect("open");
        f.set_modified(t).expect("set mtime");
    }

    #[test]
    fn dep_info_lines_split_on_unescaped_spaces() {
        let (target, deps) =
            parse_dep_info("/r/target/debug/borges: /r/a.rs /r/with\\ space.rs\n\n/r/a.rs:\n")
                .unwrap();
        assert_eq!(target, "/r/target/debug/borges");
        assert_eq!(deps, ["/r/a.rs", "/r/with space.rs"]);
    }

    /// A workspace `root` with a source file and a binary whose `.d` names `named_root`'s copy
    /// of that file; returns (binary, source).
    fn tree(root: &Path, named_root: &Path) -> (PathBuf, PathBuf) {
        let src = root.join("broker/src/lib.rs");
        std::fs::create_dir_all(src.parent().unwrap()).unwrap();
        std::fs::write(&src, "").unwrap();
        let git = root.join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("HEAD"), "").unwrap();
        let bin = root.join("target/debug/borges");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::write(&bin, "").unwrap();
        let n = named_root.display();
        std::fs::write(
            bin.with_extension("d"),
            format!("{n}/target/debug/borges: {n}/.git/HEAD {n}/broker/src/lib.rs {n}/gone.rs\n"),
        )
        .unwrap();
        (bin, src)
    }

    #[test]
    fn a_binary_older_than_a_source_is_stale_and_a_newer_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (bin, src) = tree(root, root);
        let now = SystemTime::now();
        set_mtime(&bin, now);
        set_mtime(&src, now - Duration::from_secs(60));
        set_mtime(&root.join(".git/HEAD"), now + Duration::from_secs(60));
        assert_eq!(
            stale_reason(&bin),
            None,
            "fresh (HEAD and a gone file do not count)"
        );
        set_mtime(&src, now + Duration::from_secs(5));
        let reason = stale_reason(&bin).expect("stale");
        assert!(
            reason.contains("broker/src/lib.rs") && reason.contains("cargo build"),
            "{reason}"
        );
    }

    #[test]
    fn a_copied_target_directory_is_judged_against_this_tree() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().join("here");
        let elsewhere = dir.path().join("elsewhere");
        let (bin, src) = tree(&here, &elsewhere);
        let now = SystemTime::now();
        set_mtime(&bin, now);
        set_mtime(&src, now + Duration::from_secs(5));
        assert!(stale_reason(&bin).is_some(), "the source here is newer");
    }

    #[test]
    fn without_dep_info_nothing_is_judged() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("borges");
        std::fs::write(&bin, "").unwrap();
        assert_eq!(stale_reason(&bin), None);
    }
}
