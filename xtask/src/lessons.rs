//! The lessons as programs to run: their names, quick arguments, and where their binaries are.

use std::path::PathBuf;

use anyhow::{bail, Context as _};

use crate::tools;

/// A lesson: its name (`examples/NAME.rs`), arguments that keep a run short (for the sanitizer), and
/// arguments for the profiler, whose pictures should show the real workload and whose built-in timeline
/// is accurate only for operations of some length.
pub struct Lesson {
    pub name: &'static str,
    pub quick: &'static [&'static str],
    pub profile: &'static [&'static str],
}

/// Every lesson, once: the only list of them (a tidy test holds `examples/` and README.md to it).
pub const LESSONS: [Lesson; 14] = [
    Lesson {
        name: "pinned_memory",
        quick: &["--min", "64KiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "64MiB", "--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "async_memcpy",
        quick: &["-n", "256k", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "overlap",
        quick: &["-n", "4M", "--chunks", "8", "--streams", "4", "--iters", "64", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "overlap_sweep",
        quick: &["-n", "1M", "--iters", "16", "--repeats", "2", "--warmup", "1"],
        profile: &["-n", "16M", "--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "vector_add_streams",
        quick: &["-n", "4M", "--chunks", "8", "--streams", "4", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "zero_copy",
        quick: &["--min", "64KiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "64MiB", "--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "double_buffering",
        quick: &["-n", "4M", "--chunks", "8", "--streams", "4", "--iters", "64", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "staged_copy",
        quick: &["--min", "4MiB", "--max", "16MiB", "--threads", "4", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "256MiB", "--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "bidirectional",
        quick: &["--min", "1MiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "256MiB", "--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "managed_memory",
        quick: &["--min", "16MiB", "--max", "64MiB", "--iters", "64", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "256MiB", "--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "every_gpu",
        quick: &["--size", "4MiB", "--repeats", "2", "--warmup", "1"],
        profile: &["--size", "256MiB", "--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "latency",
        quick: &["--accesses", "256", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
    },
    Lesson {
        name: "planner",
        quick: &["--size", "16MiB", "--iters", "16", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
    },
    Lesson { name: "your_kernel", quick: &[], profile: &[] },
];

/// The lessons named (all when none), checked against the list.
pub fn select(names: &[String]) -> anyhow::Result<Vec<&'static Lesson>> {
    if names.is_empty() {
        return Ok(LESSONS.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            LESSONS
                .iter()
                .find(|l| l.name == n)
                .with_context(|| format!("no lesson named {n}: the lessons are {}", LESSONS.map(|l| l.name).join(", ")))
        })
        .collect()
}

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
