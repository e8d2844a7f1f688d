//! Lesson 4: vector addition with pinned memory and streams, as asyncMemoryCopyExample.cu means it.
//!
//! C = A + B moves three vectors across the bus for one addition each: it is copy-bound. Cut into
//! chunks over several streams, the download of one chunk and the additions run under the uploads of
//! the next, but the two uploads per chunk remain: at best the run takes as long as its uploads, about
//! 1.5x faster than one operation after another, not 3x. The bound, measured on the same data, says so.
//!
//!     cargo run --release --example vector_add_streams [-- -n 32M --chunks 16 --streams 4]

use std::process::ExitCode;

use clap::Parser;
use kernels::Kernels;
use measure::{
    args::{PipelineArgs, RunArgs},
    bound::{Measured, Report, Steps},
    report::{fmt_bytes, fmt_count, Output},
    timeline::phase,
    timing::measure,
    verify::{self, input},
    ChunkPlan,
};

/// C = A + B in chunks over streams, against the same chunks on one stream.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(vector_add)
}

fn vector_add(args: &Args, out: &Output) -> anyhow::Result<()> {
    let plan = args.pipeline.plan(32 << 20, 16, 4)?;
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction

    // Pinned host vectors, and whole device vectors: chunk i uses elements [offset, offset + len) of each.
    let h_a = gpu.pinned_from_fn(plan.elements, input)?;
    let h_b = gpu.pinned_from_fn(plan.elements, |i| input(i + 1))?;
    let mut h_c = gpu.pinned::<f32>(plan.elements)?;
    let (mut d_a, mut d_b, mut d_c) =
        (gpu.alloc::<f32>(plan.elements)?, gpu.alloc::<f32>(plan.elements)?, gpu.alloc::<f32>(plan.elements)?);
    let streams = gpu.streams(plan.streams)?;

    let mut run = |plan: ChunkPlan, h_c: &mut [f32]| {
        gpu.timed(&streams[..plan.streams], |s| {
            let (a, b, c) = (s.device(&mut d_a), s.device(&mut d_b), s.device(&mut d_c));
            for (k, out) in plan.iter().zip(plan.split_mut(h_c)) {
                let (stream, r) = (&streams[k.stream], k.range());
                s.htod(stream, &h_a[r.clone()], a.slice(r.clone()))?; // cudaMemcpyAsync(d_A + offset, h_A + offset, ..., stream)
                s.htod(stream, &h_b[r.clone()], b.slice(r.clone()))?; // cudaMemcpyAsync(d_B + offset, h_B + offset, ..., stream)
                s.launch(stream, kernels.vector_add(a.slice(r.clone()), b.slice(r.clone()), c.slice(r.clone())))?;
                s.dtoh(stream, c.slice(r), out)?; //                     cudaMemcpyAsync(h_C + offset, d_C + offset, ..., stream)
            }
            Ok(())
        })
    };
    // The same chunks on one stream: every operation waits for the one before.
    let serialized = {
        let _p = phase("serialized");
        measure(r, || run(ChunkPlan::new(plan.elements, plan.chunks, 1)?, &mut h_c))?
    };
    h_c.fill(f32::NAN);
    let overlapped = {
        let _p = phase("overlapped");
        measure(r, || run(plan, &mut h_c))?
    };
    let check = verify::exact(&h_c, |i| input(i) + input(i + 1));
    out.say(check.summary());
    check.ensure()?;

    // The bound counts two uploads per chunk, and one stream's chunks one after another.
    let runs = [
        Measured::on_streams("one stream", serialized, 1),
        Measured::on_streams(format!("{} streams", plan.streams), overlapped, plan.streams),
    ];
    let report = Report::measure(gpu, &kernels, &plan, Steps::VectorAdd, (&h_a, &mut h_c), r, &runs)?;
    out.say(format!(
        "\n{} elements per vector ({} each) in {} chunks; median of up to {} runs after {} warm-up; {:.2}x faster on {} streams",
        fmt_count(plan.elements),
        fmt_bytes(plan.elements * 4),
        plan.chunks,
        r.repeats,
        r.warmup,
        serialized.median_ms / overlapped.median_ms,
        plan.streams
    ));
    out.table(&report.table());
    report.notes().iter().for_each(|l| out.say(l));
    out.finish(
        &serde_json::json!({ "device": gpu.info, "plan": plan, "repeats": r, "report": report, "verification": check }),
    )
}
