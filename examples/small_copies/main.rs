//! Lesson 14: many small transfers, the per-copy cost, and every way to beat it (beyond the CUDA C++
//! programs the first lessons follow).
//!
//! Real programs rarely move one large array: an inference server moves dozens of small tensors to the
//! GPU per request. Below about 300 KiB a copy costs mostly its fixed cost: 3-5 µs of the copy engine's
//! and 1.2-3.6 µs of the host's to queue it in this project's runs, so a thousand 4 KiB tensors moved one
//! by one take about 5 ms where one 4 MiB copy takes 82 µs. This lesson moves the same buffers to the GPU (into
//! one device arena) and back (each into its own host buffer), every way there is:
//!
//! 1. one `cudaMemcpyAsync` per buffer, on one stream, spread over streams, and from pageable memory;
//! 2. one batched call each way, `cuMemcpyBatchAsync` (CUDA 12.8), with each source access order it
//!    offers, from pinned and from pageable memory;
//! 3. packed: gathered into one pinned buffer by the CPU, one copy, and a kernel that scatters the
//!    buffers into place (and back: the kernel gathers them, one copy, unpacked by the CPU);
//! 4. a CUDA graph of every copy, built once and replayed;
//! 5. zero-copy: one kernel reading every buffer straight from mapped host memory (and one writing back).
//!
//! Each is timed (GPU, the host in the calls, the wall time the caller waits), checked byte for byte,
//! and held against one copy of all the bytes each way measured in the same run. Beside this file: the
//! sets and where their buffers lie (`buffers.rs`), the rig that owns the GPU and the buffers
//! (`rig.rs`), each way's calls (`ways.rs`: `SmallCopiesRig::once`, `SmallCopiesRig::graph`; the packed
//! way in `packing.rs`), the results and their tables (`results.rs`); and what `common` adds for them in
//! its `batch` and `graph` modules. `--plan` asks which way moves a set of your own fastest: a model
//! from costs measured in the same run (`costs.rs`), then every way run (`plan.rs`).
//!
//!     cargo run --release --example small_copies [-- --counts 10,100,1000,10000 --max-total 1GiB]
//!     cargo run --release --example small_copies -- --plan 2MiB*4,192KiB*16,12KiB*64,4*100

use std::process::ExitCode;

use clap::Parser;
use measure::{
    args::{parse_bytes, parse_count, parse_nonzero_bytes, RunArgs},
    error::bad_args,
    report::{fmt_bytes, Output},
};

mod buffers;
mod costs;
#[cfg(test)]
mod gpu_tests;
mod packing;
mod plan;
mod results;
mod rig;
mod ways;

use buffers::{BufferSet, SetGrid, MOST_BUFFERS};
use rig::SmallCopiesRig;

fn main() -> ExitCode {
    measure::lesson::run(small_copies)
}

/// Many small buffers to the GPU and back, every way, over counts and sizes; or a plan for one set.
#[derive(Parser)]
struct Args {
    /// How many buffers, a list (each at most 1,000,000)
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000", value_parser = parse_buffer_count)]
    counts: Vec<usize>,
    /// How large each buffer is, a list
    #[arg(long, value_delimiter = ',', default_value = "256,4KiB,64KiB,1MiB", value_parser = parse_nonzero_bytes)]
    sizes: Vec<usize>,
    /// Leave out a count and size whose buffers add up to more than this (each way)
    #[arg(long, default_value = "32MiB", value_parser = parse_bytes)]
    max_total: usize,
    /// Streams the copies of one memcpy per buffer are spread over (1 to 32)
    #[arg(long, default_value = "4", value_parser = parse_count)]
    streams: usize,
    /// Leave out the set shaped like a model's tensors (4 layers of 86 buffers, 12 MiB)
    #[arg(long)]
    no_model: bool,
    /// Plan one set of buffers instead: sizes with counts, such as 1MiB*4,16KiB*64,256*200, or `model`
    #[arg(long, value_parser = BufferSet::parse)]
    plan: Option<BufferSet>,
    #[command(flatten)]
    run: RunArgs,
}

/// The flags' sets, checked before the GPU starts; the rig for them, refused at once where they would
/// not fit this machine; then every way over every set, or the plan for one.
fn small_copies(args: &Args, out: &Output) -> anyhow::Result<()> {
    let grid = grid(args)?;
    let places = match &args.plan {
        Some(set) => plan::placements(set),
        None => grid.placements(),
    };
    // The GPU, the footprint of every set checked, host buffers, staging, the device arena and the
    // kernel's tables, allocated once for every set.
    let mut rig = SmallCopiesRig::start(out, &places, args.streams, args.run.repeats())?;
    match &args.plan {
        Some(set) => rig.plan(set, out),
        None => rig.every_way_over_every_set(&grid, out),
    }
}

/// The grid of sets the flags ask for, checked: a bad combination ends the lesson with exit code 2.
fn grid(args: &Args) -> anyhow::Result<SetGrid> {
    if args.streams > 32 {
        return Err(bad_args(format!("--streams {}: at most 32", args.streams)));
    }
    let grid = SetGrid::new(&args.counts, &args.sizes, args.max_total, !args.no_model);
    if grid.sets.is_empty() && args.plan.is_none() {
        return Err(bad_args(format!("every count and size is over --max-total {}", fmt_bytes(args.max_total))));
    }
    Ok(grid)
}

/// A count of buffers: at least 1, at most [`MOST_BUFFERS`] (as `--plan` allows of a size).
fn parse_buffer_count(s: &str) -> anyhow::Result<usize> {
    match parse_count(s)? {
        n if n > MOST_BUFFERS => anyhow::bail!("at most 1,000,000 buffers"),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::BufferPlacement;

    const GIB: usize = 1 << 30;

    /// What the lesson holds at its peak with these flags (after the program's name).
    fn footprint(flags: &[&str]) -> cuda_scope::Footprint {
        let args = Args::try_parse_from(std::iter::once("small_copies").chain(flags.iter().copied())).unwrap();
        let places: Vec<BufferPlacement> = match &args.plan {
            Some(set) => plan::placements(set),
            None => grid(&args).unwrap().placements(),
        };
        rig::footprint(&places)
    }

    /// The default run's largest set is the model-like one, 12 MiB: about 4 of it pinned (the host
    /// arenas in and out, the packed buffers up and down), 2 on the device (the arena and the packed
    /// buffer), 2 pageable (its `Vec`s in and out).
    #[test]
    fn the_default_flags_need_tens_of_mebibytes() {
        let need = footprint(&[]);
        let set = BufferSet::model().bytes();
        assert!(need.pinned >= 4 * set && need.pinned < 4 * set + (1 << 20), "{need:?}");
        assert!(need.device >= 2 * set && need.device < 2 * set + (1 << 20), "{need:?}");
        assert!(need.pageable >= 2 * set && need.pageable < 2 * set + (1 << 20), "{need:?}");
        let grid = footprint(&["--counts", "1000", "--sizes", "1MiB", "--max-total", "1GiB", "--no-model"]);
        assert!(grid.device >= 2000 << 20 && grid.pinned >= 4000 << 20, "{grid:?}");
    }

    /// A plan's rig holds its set and the calibration sets (16 of 1 MiB, or the set's own packed bytes
    /// in buffers of 16 KiB up to 64 MiB, the largest of them).
    #[test]
    fn a_plan_needs_its_set_and_the_calibration_sets_and_a_huge_one_saturates() {
        let small = footprint(&["--plan", "4*100"]);
        assert!(small.device >= 32 << 20 && small.device < 64 << 20, "{small:?}");
        let big = footprint(&["--plan", "1000GiB"]);
        assert!(big.device >= 2000 * GIB && big.pinned >= 4000 * GIB, "past any GPU and host: {big:?}");
        let huge = footprint(&["--plan", "17179869183GiB*2"]);
        assert_eq!((huge.device, huge.pinned), (usize::MAX, usize::MAX), "saturates: {huge:?}");
    }

    #[test]
    fn counts_past_a_million_buffers_are_refused_before_the_gpu_starts() {
        assert!(Args::try_parse_from(["small_copies", "--counts", "1000001"]).is_err());
        assert_eq!(parse_buffer_count("1000000").unwrap(), MOST_BUFFERS);
        assert_eq!(parse_buffer_count("2M").unwrap_err().to_string(), "at most 1,000,000 buffers");
    }
}
