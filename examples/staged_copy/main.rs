//! Lesson 7: ordinary memory at near-pinned speed (beyond the CUDA C++ programs the first lessons follow).
//!
//! Most data lives in ordinary, pageable memory (a `Vec`), and the driver's path for it is slow: it
//! copies through one small pinned buffer at a time. Three ways round that, each measured here against
//! plain pageable and pinned copies, both directions, over sizes:
//! - pin the `Vec` in place for the one transfer (cudaHostRegister, copy, cudaHostUnregister);
//! - stage it: several CPU threads copy chunks into a ring of pinned buffers while the copy engine
//!   drains them (cuda_scope::staging);
//! - and, for comparison, staging's CPU side alone, measured in this run: the same threads copying the
//!   same chunks into (or out of) the same pinned slots, with nothing on the GPU. Staging does that
//!   work and a DMA beside it, so it cannot beat that rate; where it runs at about it, the CPU copy is
//!   what stops it.
//!
//!     cargo run --release --example staged_copy [-- --threads 8 --max 1GiB]

mod rig;

use std::process::ExitCode;

use clap::Parser;
use measure::{
    args::{parse_bytes, parse_elements_bytes, size_sweep, RunArgs},
    report::Output,
};

use rig::{StagedRig, StagedSetup};

/// Pageable memory to and from the device: the driver's path, pinning in place, and staging.
#[derive(Parser)]
struct Args {
    /// Smallest transfer
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    min: usize,
    /// Largest transfer
    #[arg(long, default_value = "128MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    max: usize,
    /// CPU threads that copy into and out of the staging ring (default: one per core, up to 8)
    #[arg(long, value_parser = measure::args::parse_threads, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// Size of each pinned staging buffer (two per thread)
    #[arg(long, default_value = "8MiB", value_parser = parse_elements_bytes, allow_negative_numbers = true)]
    slot: usize,
    #[command(flatten)]
    run: RunArgs,
}

impl Args {
    /// What the flags ask for: the sizes from `--min` to `--max`, and the threads (by default one per
    /// core, up to 8).
    fn setup(&self) -> anyhow::Result<StagedSetup> {
        let sizes = size_sweep(self.min, self.max, 4)?;
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let threads = self.threads.unwrap_or(cores.min(8));
        Ok(StagedSetup { sizes, threads, slot: self.slot, repeats: self.run.repeats() })
    }
}

fn main() -> ExitCode {
    measure::lesson::run(staged_copy)
}

/// At each size, every way of moving a `Vec` each way, timed on the host clock from the call to the
/// data being in place (staging is driven by the host); the staged paths checked end to end; the
/// tables; and what stops staging at the largest size.
fn staged_copy(args: &Args, out: &Output) -> anyhow::Result<()> {
    let setup = args.setup()?;
    // The data at the largest size in pageable, pinned and device memory, and the staging ring (a size,
    // slot or thread count past this GPU or host is refused before any of it is allocated).
    let mut rig = StagedRig::start(out, setup)?;
    let rows = rig.sweep(out)?;

    // Check the staged paths end to end: up through the stager, down through the stager, compare.
    let check = rig.round_trip()?;
    rig.tables(out, &rows);
    out.say(format!("\n{}", check.summary()));
    check.ensure()?;

    // What stops staging, at the largest size: the link (pinned copies' rate), the CPU copy (its CPU
    // side alone, measured above: the same threads, chunks and slots, which staging cannot beat), or
    // neither.
    rig.what_stops_staging(out, &rows);
    rig.finish(out, &rows, &check)
}
