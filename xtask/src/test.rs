//! The README's test command: set up what is missing, then run every test. Without a GPU the GPU
//! tests skip, saying so. From a bundle, it runs the bundled test binaries instead of cargo.

use std::{fs, process::Command};

use anyhow::{bail, Context as _};

use crate::{flags::TestFlags, setup, tools};

pub fn run(flags: TestFlags) -> anyhow::Result<()> {
    if tools::in_bundle() {
        return run_bundled(&flags.args);
    }
    setup::run()?;
    // The CLI tests run the lesson programs; `--all-targets` builds examples only as test harnesses.
    tools::run(tools::cargo().args(["build", "--workspace", "--examples"]), "building the lessons")?;
    let mut cmd = tools::cargo();
    cmd.args(["test", "--workspace", "--all-targets"]);
    if !flags.args.is_empty() {
        cmd.arg("--").args(&flags.args);
    }
    tools::run(&mut cmd, "running the tests")
}

fn run_bundled(args: &[String]) -> anyhow::Result<()> {
    let dir = tools::root().join("tests");
    let mut bins: Vec<_> =
        fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?.flatten().map(|e| e.path()).collect();
    bins.sort();
    let mut failed = Vec::new();
    for bin in &bins {
        eprintln!("xtask test: {}", bin.file_name().unwrap().to_string_lossy());
        if !Command::new(bin).args(args).status().with_context(|| format!("running {}", bin.display()))?.success() {
            failed.push(bin.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    if !failed.is_empty() {
        bail!("failing test binaries: {}", failed.join(", "));
    }
    Ok(())
}
