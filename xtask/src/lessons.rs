//! The lessons as programs to run: their names, quick arguments, and where their binaries are.

use std::path::PathBuf;

use anyhow::{bail, Context as _};

use crate::tools;

/// Every lesson, with arguments that keep a run short (for the sanitizer and the profiler).
pub const QUICK: [(&str, &[&str]); 8] = [
    ("pinned_memory", &["--min", "64KiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"]),
    ("async_memcpy", &["-n", "256k", "--repeats", "2", "--warmup", "1"]),
    ("overlap", &["-n", "4M", "--chunks", "8", "--streams", "4", "--iters", "64", "--repeats", "2", "--warmup", "1"]),
    ("vector_add_streams", &["-n", "4M", "--chunks", "8", "--streams", "4", "--repeats", "2", "--warmup", "1"]),
    ("zero_copy", &["--min", "64KiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"]),
    (
        "double_buffering",
        &["-n", "4M", "--chunks", "8", "--streams", "4", "--iters", "64", "--repeats", "2", "--warmup", "1"],
    ),
    ("staged_copy", &["--min", "4MiB", "--max", "16MiB", "--threads", "4", "--repeats", "2", "--warmup", "1"]),
    ("bidirectional", &["--min", "1MiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"]),
];

/// The lessons named (all when none), checked against the list.
pub fn select(names: &[String]) -> anyhow::Result<Vec<(&'static str, &'static [&'static str])>> {
    if names.is_empty() {
        return Ok(QUICK.to_vec());
    }
    names
        .iter()
        .map(|n| {
            QUICK
                .iter()
                .find(|(l, _)| l == n)
                .copied()
                .with_context(|| format!("no lesson named {n}: the lessons are {}", QUICK.map(|l| l.0).join(", ")))
        })
        .collect()
}

/// Every lesson at its own sizes, with fewer repeats: for the profiler, whose pictures should show
/// the real workload and whose built-in timeline is accurate only for operations of some length.
pub const PROFILE: [(&str, &[&str]); 8] = [
    ("pinned_memory", &["--max", "64MiB", "--repeats", "3", "--warmup", "1"]),
    ("async_memcpy", &["--repeats", "3", "--warmup", "1"]),
    ("overlap", &["--repeats", "3", "--warmup", "1"]),
    ("vector_add_streams", &["--repeats", "3", "--warmup", "1"]),
    ("zero_copy", &["--max", "64MiB", "--repeats", "3", "--warmup", "1"]),
    ("double_buffering", &["--repeats", "3", "--warmup", "1"]),
    ("staged_copy", &["--max", "256MiB", "--repeats", "3", "--warmup", "1"]),
    ("bidirectional", &["--max", "256MiB", "--repeats", "3", "--warmup", "1"]),
];

/// The folder of release-built lessons: `lessons/` in a bundle, else built now with cargo, with NVTX
/// ranges when `nvtx` (for the profiler).
pub fn binaries(nvtx: bool) -> anyhow::Result<PathBuf> {
    if tools::in_bundle() {
        return Ok(tools::root().join("lessons"));
    }
    crate::setup::run()?;
    let mut cargo = tools::cargo();
    cargo.args(["build", "--release", "--examples"]);
    if nvtx {
        cargo.args(["--features", "nvtx"]).envs(crate::setup::nvtx_build_env()?);
    }
    tools::run(&mut cargo, "building the lessons")?;
    Ok(tools::target_dir().join("release/examples"))
}

/// Where a task writes its files: under target/ through cargo, beside the bundle otherwise.
pub fn output_dir(task: &str) -> PathBuf {
    if tools::in_bundle() {
        tools::root().join(task)
    } else {
        tools::target_dir().join(task)
    }
}

/// A GPU is needed: say so in one line where there is no driver.
pub fn need_gpu(task: &str) -> anyhow::Result<()> {
    if tools::real_libcuda().is_none() {
        bail!("no NVIDIA driver on this machine: `cargo xtask {task}` runs the lessons on a GPU");
    }
    Ok(())
}
