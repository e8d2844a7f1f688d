//! The lessons as programs to run: their names, quick arguments, and where their binaries are.

use std::path::PathBuf;

use anyhow::{bail, Context as _};

use crate::tools;

/// A lesson: its name (`examples/NAME.rs`), arguments that keep a run short (for the sanitizer),
/// arguments for the profiler, whose pictures should show the real workload and whose built-in timeline
/// is accurate only for operations of some length, and for a lesson that follows a CUDA C++ program
/// (`seeds/`), the function that is that program in Rust, which the lesson opens with.
pub struct Lesson {
    pub name: &'static str,
    pub quick: &'static [&'static str],
    pub profile: &'static [&'static str],
    #[cfg_attr(not(test), allow(dead_code))] // read by the tidy test
    pub seed: Option<Seed>,
}

/// The CUDA C++ program a lesson follows, and the function of the lesson that is that program.
#[cfg_attr(not(test), allow(dead_code))] // read by the tidy test
pub struct Seed {
    /// The program, as `seeds/` holds it, or the exercise it is.
    pub program: &'static str,
    /// The function right after `main` that is that program in Rust.
    pub function: &'static str,
}

/// Every lesson, once: the only list of them (a tidy test holds `examples/` and README.md to it).
pub const LESSONS: [Lesson; 15] = [
    Lesson {
        name: "pinned_memory",
        quick: &["--min", "64KiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "64MiB", "--repeats", "3", "--warmup", "1"],
        seed: Some(Seed { program: "pinned_memory.cu", function: "pinned_memory_cu" }),
    },
    Lesson {
        name: "async_memcpy",
        quick: &["-n", "256k", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
        seed: Some(Seed { program: "async_memcpy.cu", function: "async_memcpy_cu" }),
    },
    Lesson {
        name: "overlap",
        quick: &["-n", "4M", "--chunks", "8", "--streams", "4", "--iters", "64", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
        seed: Some(Seed { program: "overlap_pattern.cu", function: "overlap_pattern_cu" }),
    },
    Lesson {
        name: "overlap_sweep",
        quick: &["-n", "1M", "--iters", "16", "--repeats", "2", "--warmup", "1"],
        profile: &["-n", "16M", "--repeats", "3", "--warmup", "1"],
        seed: None,
    },
    Lesson {
        name: "vector_add_streams",
        quick: &["-n", "4M", "--chunks", "8", "--streams", "4", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
        seed: Some(Seed { program: "asyncMemoryCopyExample.cu", function: "async_memory_copy_example_cu" }),
    },
    Lesson {
        name: "zero_copy",
        quick: &["--min", "64KiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "64MiB", "--repeats", "3", "--warmup", "1"],
        seed: Some(Seed { program: "day43_ZeroCopyExample.cu", function: "zero_copy_example_cu" }),
    },
    Lesson {
        name: "double_buffering",
        quick: &["-n", "4M", "--chunks", "8", "--streams", "4", "--iters", "64", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
        seed: Some(Seed { program: "the double-buffering exercise", function: "double_buffering_exercise" }),
    },
    Lesson {
        name: "staged_copy",
        quick: &["--min", "4MiB", "--max", "16MiB", "--threads", "4", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "256MiB", "--repeats", "3", "--warmup", "1"],
        seed: None,
    },
    Lesson {
        name: "bidirectional",
        quick: &["--min", "1MiB", "--max", "4MiB", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "256MiB", "--repeats", "3", "--warmup", "1"],
        seed: None,
    },
    Lesson {
        name: "managed_memory",
        quick: &["--min", "16MiB", "--max", "64MiB", "--iters", "64", "--repeats", "2", "--warmup", "1"],
        profile: &["--max", "256MiB", "--repeats", "3", "--warmup", "1"],
        seed: None,
    },
    Lesson {
        name: "every_gpu",
        quick: &["--size", "4MiB", "--repeats", "2", "--warmup", "1"],
        profile: &["--size", "256MiB", "--repeats", "3", "--warmup", "1"],
        seed: None,
    },
    Lesson {
        name: "latency",
        quick: &["--accesses", "256", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
        seed: None,
    },
    Lesson {
        name: "planner",
        quick: &["--size", "16MiB", "--iters", "16", "--repeats", "2", "--warmup", "1"],
        profile: &["--repeats", "3", "--warmup", "1"],
        seed: None,
    },
    Lesson {
        name: "small_copies",
        quick: &[
            "--counts",
            "3,20",
            "--sizes",
            "100,4KiB",
            "--no-model",
            "--streams",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "0",
        ],
        profile: &["--counts", "100,1000", "--sizes", "4KiB,64KiB", "--repeats", "3", "--warmup", "1"],
        seed: None,
    },
    Lesson { name: "your_kernel", quick: &[], profile: &[], seed: None },
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
