//! Records the commit the broker is built from (`borges_build_info{commit}`), and rebuilds
//! when HEAD moves. Outside a git checkout the commit is `unknown`.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn watch(path: &str) {
    // A path that does not exist would make cargo rerun this script on every build.
    if Path::new(path).exists() {
        println!("cargo:rerun-if-changed={path}");
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=BORGES_GIT_COMMIT={commit}");
    }
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        watch(&format!("{dir}/HEAD"));
    }
    let common = git(&["rev-parse", "--git-common-dir"]);
    if let (Some(common), Some(branch)) = (common, git(&["symbolic-ref", "-q", "HEAD"])) {
        watch(&format!("{common}/{branch}"));
        watch(&format!("{common}/packed-refs"));
    }
}
