//! The lessons as programs to run: their names, quick arguments, and where their binaries are.

use std::path::PathBuf;

use anyhow::{bail, Context as _};

use crate::tools;

/// A lesson: its name (`examples/NAME/main.rs`), arguments that keep a run short
/// (for the sanitizer), arguments for the profiler, whose pictures should show the real workload and
/// whose built-in timeline is accurate only for operations of some length, and for a lesson that follows
/// a CUDA C++ program (`seeds/`), the function that is that program in Rust, which the lesson opens with.
pub struct Lesson {
    pub name: &'static str,
    quick: &'static [&'static str],
    profile: &'static [&'static str],
    /// Whether it takes `--repeats` and `--warmup` (every lesson but the example of a kernel of one's own).
    repeats: bool,
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

type Args = &'static [&'static str];

impl Lesson {
    /// A lesson measured with `--repeats` and `--warmup`: its quick and profile arguments.
    const fn new(name: &'static str, quick: Args, profile: Args) -> Lesson {
        Lesson { name, quick, profile, repeats: true, seed: None }
    }

    /// That follows `program`, whose Rust is `function`.
    const fn seed(self, program: &'static str, function: &'static str) -> Lesson {
        Lesson { seed: Some(Seed { program, function }), ..self }
    }

    /// A short run: two repeats after one warm-up, unless its arguments say otherwise.
    pub fn quick(&self) -> Vec<&'static str> {
        self.with_repeats(self.quick, ["--repeats", "2", "--warmup", "1"])
    }

    /// A run for the profiler: three repeats after one warm-up.
    pub fn profile(&self) -> Vec<&'static str> {
        self.with_repeats(self.profile, ["--repeats", "3", "--warmup", "1"])
    }

    fn with_repeats(&self, args: Args, repeats: [&'static str; 4]) -> Vec<&'static str> {
        let mut v = args.to_vec();
        if self.repeats && !args.contains(&"--repeats") {
            v.extend(repeats);
        }
        v
    }
}

/// Every lesson, once: the only list of them (a tidy test holds `examples/` and README.md to it).
#[rustfmt::skip]
pub const LESSONS: [Lesson; 15] = [
    Lesson::new("pinned_memory", &["--min", "64KiB", "--max", "4MiB"], &["--max", "64MiB"])
        .seed("pinned_memory.cu", "pinned_memory_cu"),
    Lesson::new("async_memcpy", &["-n", "256k"], &[]).seed("async_memcpy.cu", "async_memcpy_cu"),
    Lesson::new("overlap", &["-n", "4M", "--chunks", "8", "--streams", "4", "--iters", "64"], &[])
        .seed("overlap_pattern.cu", "overlap_pattern_cu"),
    Lesson::new("overlap_sweep", &["-n", "1M", "--iters", "16"], &["-n", "16M"]),
    Lesson::new("vector_add_streams", &["-n", "4M", "--chunks", "8", "--streams", "4"], &[])
        .seed("asyncMemoryCopyExample.cu", "async_memory_copy_example_cu"),
    Lesson::new("zero_copy", &["--min", "64KiB", "--max", "4MiB"], &["--max", "64MiB"])
        .seed("day43_ZeroCopyExample.cu", "zero_copy_example_cu"),
    Lesson::new("double_buffering", &["-n", "4M", "--chunks", "8", "--streams", "4", "--iters", "64"], &[])
        .seed("the double-buffering exercise", "double_buffering_exercise"),
    Lesson::new("staged_copy", &["--min", "4MiB", "--max", "16MiB", "--threads", "4"], &["--max", "256MiB"]),
    Lesson::new("bidirectional", &["--min", "1MiB", "--max", "4MiB"], &["--max", "256MiB"]),
    Lesson::new("managed_memory", &["--min", "16MiB", "--max", "64MiB", "--iters", "64"], &["--max", "256MiB"]),
    Lesson::new("every_gpu", &["--size", "4MiB"], &["--size", "256MiB"]),
    Lesson::new("latency", &["--accesses", "256"], &[]),
    Lesson::new("planner", &["--size", "16MiB", "--iters", "16"], &[]),
    Lesson::new("small_copies", &["--counts", "3,20", "--sizes", "100,4KiB", "--no-model", "--streams", "2", "--repeats", "1", "--warmup", "0"],
        &["--counts", "100,1000", "--sizes", "4KiB,64KiB"]),
    Lesson { name: "your_kernel", quick: &[], profile: &[], repeats: false, seed: None },
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
