//! The harness every lesson's `main` is, as wgpu's examples have one, so that a lesson holds only its
//! story: flags parsed and checked before the GPU starts (one line, exit code 2, on a bad one), and any
//! error turned into one line on stderr, or one JSON object under `--json`, with an exit code of its
//! kind (see [`crate::error`]). A lesson checks what depends on several flags, then starts its GPU.
//!
//! ```ignore
//! fn main() -> ExitCode {
//!     common::lesson::run(overlap)
//! }
//!
//! fn overlap(args: &Args, out: &Output) -> anyhow::Result<()> {
//!     let plan = args.pipeline.plan(64 << 20, 32, 4)?; // a bad combination: exit 2, GPU untouched
//!     let gpu = common::lesson::gpu(out)?;              // the GPU CUDA_DEVICE names, and its report
//!     ...
//! }
//! ```

use std::process::ExitCode;

use crate::{
    error::{finish, json_requested},
    machine::Health,
    report::Output,
    Gpu,
};

/// Parses the flags, runs the lesson, and ends the process the way [`crate::error::finish`] does.
pub fn run<A: clap::Parser>(lesson: impl FnOnce(&A, &Output) -> anyhow::Result<()>) -> ExitCode {
    if let Some(code) = crate::planner::child_main() {
        return code; // this process is the planner's child for a kernel of the user's
    }
    let args: A = crate::args::parse();
    let out = Output::new(json_requested(std::env::args_os()));
    finish(lesson(&args, &out).map_err(Into::into))
}

/// Starts the GPU that `CUDA_DEVICE` names (default 0) and prints its report.
pub fn gpu(out: &Output) -> anyhow::Result<Gpu> {
    gpu_and_health(out).map(|(gpu, _)| gpu)
}

/// [`gpu`], and what the machine says of its link, clocks and NUMA node (printed in the report, with any
/// likely cause of slow copies it points to).
pub fn gpu_and_health(out: &Output) -> anyhow::Result<(Gpu, Health)> {
    let gpu = Gpu::init()?;
    let health = Health::read(&gpu);
    out.say(format!("{}\n      {}", gpu.info, health.summary()));
    for cause in health.likely_causes(None) {
        out.say(format!("      likely to slow copies: {cause}"));
    }
    out.say("");
    let mut noted = serde_json::to_value(&gpu.info)?;
    noted["health"] = serde_json::to_value(&health)?;
    out.note_device(&noted);
    Ok((gpu, health))
}
