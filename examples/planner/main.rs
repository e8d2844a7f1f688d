//! Lesson 12: plan your own pipeline (beyond the CUDA C++ programs the first lessons follow).
//!
//! Given what a kernel costs per MiB, which chunk count and stream count make a copy-in, compute,
//! copy-out pipeline fastest, and how long should it take? The planner measures this GPU's copy costs
//! and the kernel's over chunk sizes (`t = α + n/β` each), ranks every configuration by a model built
//! from them, runs the best and its neighbours with the overlap loop, and prints what it predicted
//! beside what it got, with the best run held against the lower bound of `overlap`. Where no overlap can
//! help (copy-bound past what two directions give, or a kernel so short that per-operation costs
//! dominate), it says so.
//!
//! `--ptx mine.ptx --kernel NAME` plans for a kernel of your own (`extern "C" __global__ void NAME(float*
//! data, unsigned long long n)`, in place), timed and run in a child process.
//!
//!     cargo run --release --example planner [-- --size 256MiB --kernel-ms-per-mib 0.02 | --ptx mine.ptx --kernel NAME]

mod child;
mod model;
mod rig;

use std::process::ExitCode;

use clap::Parser;
use measure::{
    args::{parse_bytes, RunArgs, WorkArgs},
    report::Output,
};

use rig::{configurations_around, PlannerRig, PlannerSetup};

/// The best chunk and stream counts for a kernel's cost, predicted, then run.
#[derive(Parser)]
struct Args {
    /// The data the pipeline moves in (and out)
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    size: usize,
    /// What the kernel costs over a chunk of 1 MiB, ms, launch included (the built-in process kernel is
    /// calibrated to it); without it (or --iters, or --ptx), a kernel as long as the copies
    #[arg(long, value_parser = parse_ms, conflicts_with_all = ["iters", "ptx"])]
    kernel_ms_per_mib: Option<f64>,
    /// A kernel of your own: a PTX file (nvcc -ptx) with `extern "C" __global__ void NAME(float* data,
    /// unsigned long long n)`, run in place in a child process
    #[arg(long, requires = "kernel", conflicts_with = "iters")]
    ptx: Option<std::path::PathBuf>,
    /// The name of your kernel in --ptx
    #[arg(long, requires = "ptx")]
    kernel: Option<String>,
    #[command(flatten)]
    work: WorkArgs,
    #[command(flatten)]
    run: RunArgs,
}

fn parse_ms(s: &str) -> anyhow::Result<f64> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => anyhow::bail!("'{s}' is not a positive number of milliseconds"),
    }
}

fn main() -> ExitCode {
    match child::job() {
        // The planner started itself again to time a kernel of yours (see child::UserPtx): this is that child.
        Some(job) => measure::error::finish(job.and_then(child::ChildJob::run).map_err(Into::into)),
        None => measure::lesson::run(plan),
    }
}

/// The planner's story: what this GPU's copies and the kernel cost, measured; every configuration
/// ranked by the model built from them; the best and its neighbours run and held against what the
/// model predicted; whether overlap can help at all; and the best against its lower bound.
fn plan(args: &Args, out: &Output) -> anyhow::Result<()> {
    let setup = PlannerSetup::new(args)?; // a kernel of yours is checked before the GPU starts
    let rig = PlannerRig::start(out, setup)?; // a --size past this GPU or host is refused here
    let mut p = rig.pipeline()?; // pinned host memory for the runs, and 4 MiB at least for the fits

    // What this GPU's copies and this kernel cost, over chunk sizes.
    let costs = rig.costs(&mut p, out)?;
    // Every configuration that fits in free device memory, ranked by the model.
    let ranked = rig.rank(&costs, out)?;
    let best = &ranked[0];
    // Run the best, its neighbours, and one chunk on one stream, with the overlap loop.
    let configs = configurations_around(best, rig.setup.elements);
    let tried = rig.run(&mut p, &costs, &configs, out)?;
    out.say(costs.verdict(rig.setup.bytes(), best));

    // The recommended run against the lower bound measured on its own data (which times the kernel in
    // this process: not for a kernel of yours).
    let report = rig.bound(&mut p, &tried[0], out)?;
    rig.finish(out, &costs, &ranked, &tried, report)
}
