//! The README's test command: check the committed PTX against nvcc 13.0 (installing it from PyPI where
//! it is missing) and common's driver declarations against CUDA 13's headers beside it (`check_ffi`),
//! build the lessons, and run every test. The GPU tests are
//! `#[ignore]`d, so that a machine without a GPU reports them as ignored rather than passed; where an
//! NVIDIA driver is found they run too. The differential test of common's PTX reading against ptxas
//! is `#[ignore]`d too (it needs ptxas), and run here on every run, with the ptxas, nvlink and
//! cuobjdump this installs: it fails, not skips, where they cannot be had. From a bundle, it runs the
//! bundled test binaries instead.

use std::{fs, process::Command};

use anyhow::{bail, Context as _};

use crate::{check_ffi, flags::TestFlags, generate, setup, tools};

pub fn run(flags: TestFlags) -> anyhow::Result<()> {
    if tools::in_bundle() {
        return run_bundled(&flags.args);
    }
    generate::check()?;
    check_ffi::run()?;
    let ptxas = setup::ptxas_13()?;
    let tools_env: Vec<(&str, std::path::PathBuf)> =
        [("PTXAS", Some(ptxas.clone())), ("CUOBJDUMP", setup::cuobjdump(&ptxas))]
            .into_iter()
            .filter_map(|(var, path)| Some((var, path?)))
            .collect();
    // The CLI tests run the lesson programs; `--all-targets` builds examples only as test binaries.
    tools::run(tools::cargo().args(["build", "--workspace", "--examples"]), "building the lessons")?;
    let gpu = gpu_flag();
    let mut cmd = tools::cargo();
    cmd.args(["test", "--workspace", "--all-targets", "--"]).args(gpu).args(&flags.args);
    tools::run(cmd.envs(tools_env.iter().cloned()), "running the tests")?;
    if gpu.is_some() {
        return Ok(()); // the ignored tests ran, the differential test among them
    }
    eprintln!("xtask test: common's PTX reading against ptxas {} ({})", cuda_find::NVCC_RELEASE, ptxas.display());
    let mut cmd = tools::cargo();
    cmd.args(["test", "-p", "cuda-scope", "--lib", "ptx_differential", "--", "--ignored"]).args(&flags.args);
    if !flags.args.iter().any(|a| a == "--nocapture") {
        cmd.arg("--nocapture"); // its one line of figures
    }
    tools::run(cmd.envs(tools_env), "running the differential test of common's PTX reading against ptxas")
}

/// `--include-ignored` where a driver is found (the GPU tests are the ignored ones), said in one line.
fn gpu_flag() -> Option<&'static str> {
    match tools::real_libcuda() {
        Some(driver) => {
            eprintln!(
                "xtask test: NVIDIA driver found ({}): running the GPU tests too (--include-ignored)",
                driver.display()
            );
            Some("--include-ignored")
        }
        None => {
            eprintln!(
                "xtask test: no NVIDIA driver here: the GPU tests are reported as ignored (they run where one is)"
            );
            None
        }
    }
}

fn run_bundled(args: &[String]) -> anyhow::Result<()> {
    let dir = tools::root().join("tests");
    let mut bins: Vec<_> =
        fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?.flatten().map(|e| e.path()).collect();
    bins.sort();
    let gpu = gpu_flag();
    let mut failed = Vec::new();
    for bin in &bins {
        eprintln!("xtask test: {}", bin.file_name().unwrap().to_string_lossy());
        let status = Command::new(bin).args(gpu).args(args).status();
        if !status.with_context(|| format!("running {}", bin.display()))?.success() {
            failed.push(bin.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    if !failed.is_empty() {
        bail!("failing test binaries: {}", failed.join(", "));
    }
    Ok(())
}
