//! The harness every lesson's `main` is, as wgpu's examples have one, so that a lesson holds only its
//! story: flags parsed and checked before the GPU starts (one line, exit code 2, on a bad one), the GPU
//! started and its report printed, the lesson run, and any error turned into one line on stderr, or one
//! JSON object under `--json`, with an exit code of its kind (see [`crate::error`]).
//!
//! ```ignore
//! fn main() -> ExitCode {
//!     common::lesson::run(overlap)
//! }
//!
//! fn overlap(args: &Args, gpu: &Gpu, out: &Output) -> anyhow::Result<()> { ... }
//! ```

use std::process::ExitCode;

use crate::{
    error::{finish, json_requested},
    report::Output,
    Gpu,
};

/// Runs a lesson on the GPU that `CUDA_DEVICE` names (default 0).
pub fn run<A: clap::Parser>(lesson: impl FnOnce(&A, &Gpu, &Output) -> anyhow::Result<()>) -> ExitCode {
    run_plain(|args: &A, out| {
        let gpu = Gpu::init()?;
        out.say(format!("{}\n", gpu.info));
        lesson(args, &gpu, out)
    })
}

/// Runs a lesson that starts its GPUs itself (several, say).
pub fn run_plain<A: clap::Parser>(lesson: impl FnOnce(&A, &Output) -> anyhow::Result<()>) -> ExitCode {
    let args: A = crate::args::parse();
    let out = Output::new(json_requested(std::env::args_os()));
    finish(lesson(&args, &out).map_err(Into::into))
}
