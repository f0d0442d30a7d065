//! SCRAM users for brokers under test, made with the real `borges user` command.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Adds `name`'s SCRAM-SHA-256 credential to the credentials file `file` with
/// `borges user create --credentials-file` (file mode); panics unless it succeeds.
pub fn create_file_user(file: &Path, name: &str, password: &str) {
    let mut child = Command::new(crate::borges_bin())
        .args([
            "user",
            "create",
            name,
            "--password-stdin",
            "--credentials-file",
        ])
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("borges user create");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{password}").expect("password");
    drop(stdin);
    assert!(child.wait().expect("wait").success(), "user create {name}");
}
