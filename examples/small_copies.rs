//! Lesson 14: many small transfers, the per-copy cost, and every way to beat it (beyond the CUDA C++
//! programs the first lessons follow).
//!
//! Real programs rarely move one large array: an inference server uploads dozens of small tensors per
//! request. Below about 300 KiB a copy costs mostly its fixed cost: on the H200 about 6 µs of the copy
//! engine's and 2-3 µs of the host's in the scope, so a thousand 4 KiB tensors moved one by one take
//! milliseconds where one 4 MiB copy takes 82 µs. This lesson moves the same buffers to the GPU (into
//! one device arena) and back (each into its own host buffer), every way there is:
//!
//! 1. one `cudaMemcpyAsync` per buffer, on one stream, spread over streams, and from pageable memory;
//! 2. one batched call each way, `cuMemcpyBatchAsync` (CUDA 12.8), with each source access order it
//!    offers, from pinned and from pageable memory;
//! 3. packed: gathered into one pinned buffer by the CPU, one copy, and a kernel that scatters the
//!    buffers into place (and back: a kernel that gathers them, one copy, unpacked by the CPU);
//! 4. a CUDA graph of every copy, built once and replayed;
//! 5. zero-copy: one kernel reading every buffer straight from mapped host memory (and one writing back).
//!
//! Each is timed (GPU, the host in the calls, the wall time the caller waits), checked byte for byte,
//! and held against one copy of all the bytes each way measured in the same run; each way's calls are in
//! `measure::small` (`Rig::once`, `Rig::graph_scope`), and what `common` adds for them in its `batch`
//! and `graph` modules. `--plan` asks which way moves a set of your own fastest: a model from costs
//! measured in the same run, then every way run.
//!
//!     cargo run --release --example small_copies [-- --counts 10,100,1000,10000 --max-total 1GiB]
//!     cargo run --release --example small_copies -- --plan 2MiB*4,192KiB*16,12KiB*64,4*100

use std::process::ExitCode;

use clap::Parser;
use kernels::Kernels;
use measure::{
    args::{parse_bytes, parse_count, RunArgs},
    error::bad_args,
    report::{fmt_bytes, Output},
    small::{self, Layout, Rig, Set, SetRun, Way},
    small_plan,
};
use serde_json::json;

/// Many small buffers to the GPU and back, every way, over counts and sizes; or a plan for one set.
#[derive(Parser)]
struct Args {
    /// How many buffers, a list
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000", value_parser = parse_count)]
    counts: Vec<usize>,
    /// How large each buffer is, a list
    #[arg(long, value_delimiter = ',', default_value = "256,4KiB,64KiB,1MiB", value_parser = nonzero_bytes)]
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
    #[arg(long, value_parser = Set::parse)]
    plan: Option<Set>,
    #[command(flatten)]
    run: RunArgs,
}

fn nonzero_bytes(s: &str) -> anyhow::Result<usize> {
    match parse_bytes(s)? {
        0 => anyhow::bail!("a buffer of at least 1 byte"),
        b => Ok(b),
    }
}

fn main() -> ExitCode {
    measure::lesson::run(small_copies)
}

fn small_copies(args: &Args, out: &Output) -> anyhow::Result<()> {
    if args.streams > 32 {
        return Err(bad_args(format!("--streams {}: at most 32", args.streams)));
    }
    let (sets, left_out) = small::grid(&args.counts, &args.sizes, args.max_total, !args.no_model);
    if sets.is_empty() && args.plan.is_none() {
        return Err(bad_args(format!("every count and size is over --max-total {}", fmt_bytes(args.max_total))));
    }
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels, scatter and gather among them
    let batch = common::batch_support(); // cuGetProcAddress("cuMemcpyBatchAsync", 12.8)
    if let Err(why) = &batch {
        out.say(format!("no batched copies: {why}; those ways are left out"));
    }
    let zero_copy = gpu.info.can_map_host_memory;
    if !zero_copy {
        out.say(format!("{} cannot map host memory: zero-copy is left out", gpu.info.name));
    }

    if let Some(set) = &args.plan {
        let ways = small_plan::rivals(zero_copy, batch.is_ok());
        let plan = small_plan::plan(gpu, &kernels, set, &ways, args.streams, r)?;
        out.say(format!("Plan for {}; costs measured in this run:", plan.set));
        plan.costs.describe().iter().for_each(|l| out.say(format!("  {l}")));
        out.say("\nEvery way's round trip (every buffer up and back), wall µs: the model's, then the run's");
        out.table(&plan.table());
        out.say(plan.verdict());
        plan.run.figures().into_iter().for_each(|f| out.add(f)); // `SET / WAY / wall`, for `cargo xtask compare`
        return out.finish(&json!({ "device": gpu.info, "repeats": r, "plan": plan }));
    }

    // Host buffers, staging, the device arena and the kernels' tables, allocated once for every set.
    let ways = Way::all(args.streams, batch.is_ok(), zero_copy);
    let mut rig = Rig::new(gpu, &kernels, &sets.iter().map(Layout::new).collect::<Vec<_>>(), args.streams)?;
    let bar = out.progress_bar(sets.len() as u64, "sets");
    let mut runs = Vec::new();
    for set in &sets {
        bar.step(set.name.clone());
        runs.push(rig.run_set(set, &ways, r)?); // every way, each checked byte for byte
        bar.done();
    }
    bar.finish();
    runs.iter().flat_map(SetRun::figures).for_each(|f| out.add(f)); // `1000 x 4 KiB / memcpy each / host`

    let (w, reps) = (args.run.warmup, args.run.repeats);
    out.say(format!(
        "Every buffer up into a device arena and back into its own host buffer: wall µs as the caller waits \
         (first call to last byte home), median of up to {reps} runs after up to {w} warm-up ({:.0} ms each at \
         most after three); every byte checked",
        small::BUDGET_MS
    ));
    out.table(&small::grid_table(&runs));
    out.say(small::winners(&runs));
    out.say(
        "one copy each way: one H2D copy of all the bytes then one D2H, GPU time, the best of runs: the bytes \
         at the link's rate with one copy's fixed cost each way",
    );
    if !left_out.is_empty() {
        out.say(format!("left out (more than {} each way): {}", fmt_bytes(args.max_total), left_out.join(", ")));
    }
    if let Some(t) = small::crossover_table(&runs) {
        out.say(format!(
            "\nWhere batching, packing and graphs stop mattering: the size from which each is less than {:.1}x faster \
             than the faster memcpy per buffer (wall), measured, and where fits over the sizes put it",
            small::MATTERS
        ));
        out.table(&t);
    }
    let model = runs.last().expect("a set at least"); // the model-like set, unless left out
    out.say(format!("\n{}, every way", model.set));
    out.table(&small::detail_table(model));
    out.say(
        "GPU / one copy: the GPU time against one copy of all the bytes each way. A bound for one memcpy per buffer \
         from pinned memory and for packed (they move the same bytes through the same copies, paying at least one \
         copy's fixed cost each way); a reference for the rest: the driver may write small pageable copies inline, \
         the batched call and a graph reach the copy engines by other paths, and zero-copy uses none",
    );
    small::beaten(&runs).iter().for_each(|l| out.say(format!("  {l}")));
    out.finish(&json!({
        "device": gpu.info, "repeats": r, "budget_ms": small::BUDGET_MS, "streams": args.streams,
        "batch": batch.err(), "left_out": left_out, "sets": runs,
    }))
}
