//! Project automation. `cargo xtask codegen` regenerates `protocol/src/generated/` from
//! `protocol/schema/borges.fbs` with flatc 25.12.19; `cargo xtask codegen --check` fails when
//! the committed code differs from a fresh generation.

mod codegen;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: cargo xtask codegen [--check]";

fn workspace_root() -> Result<PathBuf> {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .context("xtask has no parent directory")?;
    Ok(root.to_path_buf())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let root = workspace_root()?;
    match args.as_slice() {
        ["codegen"] => {
            codegen::regenerate(&root)?;
            println!(
                "regenerated {} with {}",
                codegen::GENERATED_DIR,
                codegen::check_flatc()?
            );
        }
        ["codegen", "--check"] => {
            codegen::check(&root)?;
            println!("{} is up to date", codegen::GENERATED_DIR);
        }
        _ => bail!("{USAGE}"),
    }
    Ok(())
}
