//! Lesson 8: both directions at once (beyond the CUDA C++ programs the first lessons follow).
//!
//! A GPU with two or more copy engines can copy H2D and D2H at the same time, on separate streams.
//! Each direction then runs a little slower than alone (they share the link and the host's memory), but
//! together they move far more. This lesson measures that over sizes, as nvbandwidth's
//! `host_to_device_bidirectional_memcpy_ce` does. `every_gpu` does it on every GPU of the host at once.
//!
//!     cargo run --release --example bidirectional [-- --max 1GiB --ref-both 51.3]

mod rig;

use std::process::ExitCode;

use clap::Parser;
use measure::{
    args::{parse_bytes, parse_gbps, size_sweep, RunArgs},
    report::Output,
};

use rig::BidirectionalRig;

/// H2D and D2H at once against each alone, over sizes.
#[derive(Parser)]
struct Args {
    /// Smallest transfer
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    min: usize,
    /// Largest transfer
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    max: usize,
    /// A both-directions figure (GB/s per direction, say from nvbandwidth) to hold the largest size against
    #[arg(long, value_parser = parse_gbps, allow_negative_numbers = true)]
    ref_both: Option<f64>,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(bidirectional)
}

/// At each size, an H2D copy alone, a D2H copy alone, then one of each at once on two streams; what
/// both at once move in all against the faster direction alone; the largest against the link's raw
/// rate and, given one, a reference.
fn bidirectional(args: &Args, out: &Output) -> anyhow::Result<()> {
    let sizes = size_sweep(args.min, args.max, 4)?;
    // Pinned memory and device memory for the largest size each way, allocated once for every size
    // (a --max past this GPU or host is refused before any of it).
    let mut rig = BidirectionalRig::start(out, &sizes, args.run.repeats())?;
    let rows = rig.sweep(out, &sizes)?;
    rig.say_largest(out, &rows, args.ref_both);
    rig.finish(out, &rows, args.ref_both)
}
