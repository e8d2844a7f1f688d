//! The command line of `cargo xtask`.

use clap::{builder::PossibleValuesParser, Args, Parser, Subcommand};

use crate::lessons;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Build, test, bundle and inspect the GPU transfer lessons")]
pub struct Xtask {
    #[command(subcommand)]
    pub task: Task,
}

#[derive(Subcommand)]
pub enum Task {
    /// Install nvcc 13.0 from PyPI where no nvcc is found (the build does not need it; some tasks do)
    Setup,
    /// The test command: check the committed files and common's driver declarations, then run every test (the
    /// GPU tests where a driver is found)
    Test(TestFlags),
    /// Say what was found (C compiler, Python, PyPI, driver, GPU, nvcc, nsys, compute-sanitizer); fail if
    /// something needed is missing
    Doctor,
    /// Remake the committed files: the PTX of every .cu with nvcc 13.0
    Generate,
    /// Check every declaration of common/src/ffi.rs (entry points, types, structs, constants) against CUDA 13's
    /// cuda.h and cudaTypedefs.h, with the C compiler and -Werror, and that a copy with a wrong parameter fails
    /// (part of `test`)
    CheckFfi,
    /// CI's checks beyond the test command: the MSRV build, the build against an installed CUDA toolkit,
    /// and the README's first command, from a clean clone
    Ci(CiFlags),
    /// Compile every kernel for one architecture and print registers, spills and stack from ptxas
    Kernels(KernelsFlags),
    /// Run every lesson (or those named), or any CUDA program (`-- COMMAND [ARGS...]`), under Nsight Systems:
    /// per-range overlap figures, what limits each, transfer checks, nsys's own findings, pictures, a report
    Profile(ProfileFlags),
    /// Run every lesson (or those named) under compute-sanitizer: memcheck, racecheck, synccheck, initcheck
    Sanitize(SanitizeFlags),
    /// Our best benchmark figures beside the limits measured in the same `cargo bench` run
    BenchReport(BenchReportFlags),
    /// Pack release builds of the lessons, tests and this xtask into target/bundle, for GPU hosts without Rust
    Bundle(BundleFlags),
    /// Run every lesson's default run several times, the benchmarks and the references given, on this GPU
    /// machine, and write results/<gpu model>-x<count>/ (figures.json, a page of tables, pictures); then
    /// remake README.md's figures from results/
    Results(ResultsFlags),
    /// Which timed figures of two runs of a lesson (`--json` output) changed beyond what moves from one
    /// process to the next: same, faster, slower or ambiguous; or fit that drift from back-to-back runs;
    /// or, with --interleave, run two builds' lessons in turn on this GPU machine and judge each figure
    /// from the pairs
    #[command(after_help = COMPARE_EXIT)]
    Compare(Box<CompareFlags>),
}

/// What `compare`'s exit status says, under its `--help`.
const COMPARE_EXIT: &str = "Exit status: 0 when no figure is slower (every one the same, faster or ambiguous), \
1 when a figure is slower: beyond its kind's drift from one process to the next and beyond A's own runs, or \
with --interleave beyond its pairs' interval (a regression, for CI), 2 when the files could not be compared or \
the lessons not run. --calibrate exits 0 once it has written the table.";

#[derive(Args)]
pub struct CompareFlags {
    /// The first run's JSON (the reference), or a folder of runs
    #[arg(required_unless_present_any = ["calibrate", "rejudge"])]
    pub a: Option<std::path::PathBuf>,
    /// The second run's JSON, or a folder: files of the same name in the two folders are compared
    #[arg(required_unless_present_any = ["calibrate", "rejudge"])]
    pub b: Option<std::path::PathBuf>,
    /// More runs made as A was (repeat the flag): the drift of each kind of figure is fitted from them and
    /// A for this comparison (one run can only widen it)
    #[arg(long, conflicts_with = "calibrate")]
    pub baseline: Vec<std::path::PathBuf>,
    /// Also list the figures that stayed the same
    #[arg(long)]
    pub all: bool,
    /// The drift table to hold changes against (default: the shipped xtask/drift.json)
    #[arg(long, value_name = "FILE", conflicts_with = "calibrate")]
    pub drift: Option<std::path::PathBuf>,
    /// Fit the drift table from back-to-back runs instead: every .json under DIR, each lesson's `--json`
    /// output two times or more; writes xtask/drift.json (drift.json in a bundle) or --out
    #[arg(long, value_name = "DIR", conflicts_with_all = ["a", "b"])]
    pub calibrate: Option<std::path::PathBuf>,
    /// Where --calibrate writes the table
    #[arg(long, value_name = "FILE", requires = "calibrate")]
    pub out: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub interleave: InterleaveFlags,
}

/// `compare --interleave A B`: A and B are builds, not runs.
#[derive(Args, Default, Clone)]
pub struct InterleaveFlags {
    /// A and B are two builds (bundle folders made by `cargo xtask bundle`, or folders of lesson
    /// binaries; the same one twice for a lesson against itself or with two settings): run each lesson of
    /// A and of B in turn, --pairs times, and judge each figure from the pairs: SAME, FAST, SLOW, AMBG
    #[arg(long, conflicts_with_all = ["calibrate", "baseline", "drift"])]
    pub interleave: bool,
    /// Pairs of runs of each lesson (a lesson of many figures gets the few more it needs to call one)
    #[arg(long, default_value = "15", requires = "interleave", value_parser = clap::value_parser!(u32).range(2..=200))]
    pub pairs: u32,
    /// Lessons to run (repeat the flag; default: every lesson that names figures)
    #[arg(long = "lesson", value_name = "NAME", requires = "interleave", value_parser = lesson_names())]
    pub lessons: Vec<String>,
    /// An argument for A's lessons (repeat the flag): A and B may be one build with two settings
    #[arg(long = "a-arg", value_name = "ARG", allow_hyphen_values = true, requires = "interleave")]
    pub a_args: Vec<String>,
    /// An argument for B's lessons (repeat the flag)
    #[arg(long = "b-arg", value_name = "ARG", allow_hyphen_values = true, requires = "interleave")]
    pub b_args: Vec<String>,
    /// An environment variable for A's lessons, KEY=VALUE (repeat the flag)
    #[arg(long = "a-env", value_name = "KEY=VALUE", requires = "interleave")]
    pub a_env: Vec<String>,
    /// An environment variable for B's lessons, KEY=VALUE (repeat the flag): PINNED_MEMORY_PLANT=5 plants a
    /// known change in pinned_memory
    #[arg(long = "b-env", value_name = "KEY=VALUE", requires = "interleave")]
    pub b_env: Vec<String>,
    /// A shell command run beside each of B's runs (started a second before it, stopped after it), such
    /// as a loop of copies both ways: what it moves, and what each figure would show
    #[arg(long = "b-beside", value_name = "COMMAND", requires = "interleave")]
    pub b_beside: Option<String>,
    /// Where to write every figure's pairs and judgement as JSON
    #[arg(long, value_name = "FILE", requires = "interleave")]
    pub json: Option<std::path::PathBuf>,
    /// Keep every run's document as DIR/pair-N/a/LESSON.json and DIR/pair-N/b/LESSON.json (two folders
    /// that the two-process compare takes)
    #[arg(long, value_name = "DIR", requires = "interleave")]
    pub keep: Option<std::path::PathBuf>,
    /// Stop starting rounds once the next would end past SECONDS from the start, and judge each lesson
    /// from the pairs it has (a lesson short of the pairs it needs says so)
    #[arg(long, value_name = "SECONDS", requires = "interleave")]
    pub within: Option<f64>,
    /// Run nothing: judge the runs a --keep folder holds (an interrupted comparison, or another reading)
    #[arg(long, value_name = "DIR", requires = "interleave", conflicts_with_all = ["a", "b", "keep"])]
    pub rejudge: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub struct TestFlags {
    /// Extra arguments for the test binaries (a name filter, --nocapture, ...)
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Args)]
pub struct KernelsFlags {
    /// GPU architecture to compile for
    #[arg(long, default_value = "sm_90")]
    pub arch: String,
}

#[derive(Args)]
pub struct ResultsFlags {
    /// Lessons to run (default: all)
    #[arg(value_parser = lesson_names())]
    pub lessons: Vec<String>,
    /// Runs of each lesson, round after round
    #[arg(long, default_value = "3")]
    pub runs: usize,
    /// NVIDIA's nvbandwidth binary: its pinned copies run in the same call, as the reference
    #[arg(long, value_name = "PATH")]
    pub nvbandwidth: Option<std::path::PathBuf>,
    /// A seed's C++ program built with nvcc, as NAME=PATH (repeat the flag): run in the same call, its
    /// `label: N ms` lines recorded
    #[arg(long, value_name = "NAME=PATH")]
    pub seed: Vec<String>,
    /// Processes of benches/scope
    #[arg(long, default_value = "5")]
    pub processes: usize,
    /// Leave the benchmark out
    #[arg(long)]
    pub no_benches: bool,
    /// Where to write (default: results/ in the repository or the bundle)
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Only remake README.md's figures from results/, running nothing
    #[arg(long, conflicts_with_all = ["lessons", "nvbandwidth", "seed", "no_benches", "out"])]
    pub readme: bool,
}

#[derive(Args)]
pub struct BundleFlags {
    /// Where to put the bundle
    #[arg(long, default_value = "target/bundle")]
    pub out: std::path::PathBuf,
}

/// compute-sanitizer's tools, in the order `cargo xtask sanitize` runs them.
pub const SANITIZER_TOOLS: [&str; 4] = ["memcheck", "racecheck", "synccheck", "initcheck"];

#[derive(Args)]
pub struct SanitizeFlags {
    /// Lessons to check (default: all)
    #[arg(value_parser = lesson_names())]
    pub lessons: Vec<String>,
    /// Only these tools
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(SANITIZER_TOOLS))]
    pub tools: Vec<String>,
}

#[derive(Args)]
pub struct ProfileFlags {
    /// Lessons to profile (default: all)
    #[arg(value_parser = lesson_names())]
    pub lessons: Vec<String>,
    /// Use the built-in CUDA-event timeline even where nsys is found
    #[arg(long)]
    pub builtin: bool,
    /// Any CUDA program and its arguments, after `--`, instead of the lessons (needs nsys); the report goes
    /// to target/profile/PROGRAM/
    #[arg(last = true, value_name = "COMMAND", conflicts_with_all = ["lessons", "builtin"])]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct BenchReportFlags {
    /// Criterion's output folder (default: target/criterion, or ./target/criterion in a bundle)
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub struct CiFlags {
    /// Only these steps (default: all, in this order)
    #[arg(value_enum)]
    pub steps: Vec<CiStep>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CiStep {
    /// Build the workspace with the Rust of its rust-version (installed with rustup)
    Msrv,
    /// In a clean clone, with no setup step: build every example and bench against the PyPI toolkit laid
    /// out like an installed one (CUDA_PATH with bin/nvcc, include/cuda.h, lib64)
    CudaPath,
    /// In a clean clone, without CUDA: README's first command, `cargo run --release --example overlap`, then the
    /// release binary it built run directly (no cargo, no LD_LIBRARY_PATH): one line, exit 3
    FirstCommand,
    /// In a clean clone, with nothing set: a crate outside the workspace on the core crate alone (lift/)
    /// builds and passes its tests, and brings in nothing of the lessons' rig
    Lift,
    /// The core crate as the registry would take it: `cargo package` (which builds what it packed), and
    /// its documentation with rustdoc's warnings denied, as docs.rs builds it
    Package,
}

/// Lesson names are checked when the flags are read, before anything looks for a GPU.
fn lesson_names() -> PossibleValuesParser {
    PossibleValuesParser::new(lessons::LESSONS.map(|l| l.name))
}
