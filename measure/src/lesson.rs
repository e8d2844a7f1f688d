//! The part of the rig every lesson's `main` is (wgpu's examples share one too), so that a lesson holds only its
//! story: flags parsed and checked before the GPU starts (one line, exit code 2, on a bad one), and any
//! error turned into one line on stderr, or one JSON object under `--json`, with an exit code of its
//! kind (see [`crate::error`]). A lesson checks what depends on several flags, then starts its GPU.
//!
//! ```ignore
//! fn main() -> ExitCode {
//!     measure::lesson::run(zero_copy)
//! }
//!
//! fn zero_copy(args: &Args, out: &Output) -> anyhow::Result<()> {
//!     let sizes = args.sizes()?;                         // a bad combination: exit 2, GPU untouched
//!     let gpu = measure::lesson::gpu(out, &footprint(&sizes))?; // too large: exit 2, at once, one line
//!     ...
//! }
//! ```
//!
//! The pipeline lessons start through their rig instead ([`crate::rig::PipelineRig::start`]), which
//! does the same.

use std::process::ExitCode;

use cuda_scope::{Footprint, Gpu};

use crate::{
    error::{finish, json_requested},
    machine::{describe, Health, PcieLink},
    report::Output,
};

/// Parses the flags, runs the lesson, and ends the process the way [`crate::error::finish`] does.
pub fn run<A: clap::Parser>(lesson: impl FnOnce(&A, &Output) -> anyhow::Result<()>) -> ExitCode {
    let args: A = crate::args::parse();
    let out = Output::new(json_requested(std::env::args_os()));
    finish(lesson(&args, &out).map_err(Into::into))
}

/// Starts the GPU that `CUDA_DEVICE` names (default 0), checks that what the lesson will allocate fits
/// it and this host (refused before anything is allocated or printed: one line on stderr, exit code 2),
/// starts the built-in timeline where `GPU_TIMELINE` asks for it, and prints the GPU's report.
pub fn gpu(out: &Output, need: &Footprint) -> anyhow::Result<Gpu> {
    gpu_and_health(out, need).map(|(gpu, _)| gpu)
}

/// [`gpu`], and what the machine says of its link, clocks and NUMA node (printed in the report, with any
/// likely cause of slow copies it points to).
pub fn gpu_and_health(out: &Output, need: &Footprint) -> anyhow::Result<(Gpu, Health)> {
    let mut gpu = Gpu::init()?;
    gpu.check_footprint(need)?;
    crate::timeline::record_if_asked(&mut gpu)?;
    let health = Health::read(&gpu);
    out.say(format!("{}\n      {}", describe(&gpu.info), health.summary()));
    for cause in health.likely_causes(None) {
        out.say(format!("      likely to slow copies: {cause}"));
    }
    out.say("");
    let mut noted = serde_json::to_value(&gpu.info)?;
    noted["link"] = serde_json::to_value(PcieLink::of(&gpu.info))?;
    noted["health"] = serde_json::to_value(&health)?;
    out.note_device(&noted);
    Ok((gpu, health))
}
