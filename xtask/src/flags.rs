//! The command line of `cargo xtask`.

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Build, test, bundle and inspect the GPU transfer lessons")]
pub struct Xtask {
    #[command(subcommand)]
    pub task: Task,
}

#[derive(Subcommand)]
pub enum Task {
    /// Provision what the build needs where it is missing: nvcc 13.0 from PyPI, a link-only libcuda
    Setup,
    /// The test command: set up, then run every test (GPU tests skip, saying so, without a GPU)
    Test(TestFlags),
    /// Say what was found (driver, GPU, nvcc, nsys, compute-sanitizer) and what to do about the rest
    Doctor,
    /// Compile every kernel for one architecture and print registers, spills and stack from ptxas
    Kernels(KernelsFlags),
    /// Run every lesson (or those named) under Nsight Systems: per-phase overlap figures, pictures, a report
    Profile(ProfileFlags),
    /// Run every lesson (or those named) under compute-sanitizer: memcheck, racecheck, synccheck, initcheck
    Sanitize(SanitizeFlags),
    /// Our best benchmark figures beside the limits measured in the same `cargo bench` run
    BenchReport(BenchReportFlags),
    /// Pack release builds of the lessons, tests and this xtask into target/bundle, for GPU hosts without Rust
    Bundle(BundleFlags),
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
pub struct BundleFlags {
    /// Where to put the bundle
    #[arg(long, default_value = "target/bundle")]
    pub out: std::path::PathBuf,
}

#[derive(Args)]
pub struct SanitizeFlags {
    /// Lessons to check (default: all)
    pub lessons: Vec<String>,
    /// Only these tools (memcheck, racecheck, synccheck, initcheck)
    #[arg(long, value_delimiter = ',')]
    pub tools: Vec<String>,
}

#[derive(Args)]
pub struct ProfileFlags {
    /// Lessons to profile (default: all)
    pub lessons: Vec<String>,
    /// Use the built-in CUDA-event timeline even where nsys is found
    #[arg(long)]
    pub builtin: bool,
}

#[derive(Args)]
pub struct BenchReportFlags {
    /// Criterion's output folder (default: target/criterion, or ./target/criterion in a bundle)
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}
