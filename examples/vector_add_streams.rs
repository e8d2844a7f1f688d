//! Lesson 4: vector addition with pinned memory and streams (the seed's asyncMemoryCopyExample.cu,
//! done properly).
//!
//! C = A + B moves three vectors across the bus for one addition each: it is copy-bound. Cut into
//! chunks over several streams, the download of one chunk and the additions run under the uploads of
//! the next, but the two uploads per chunk remain: the ideal is the upload time alone, about 1.5x
//! faster than serial, not 3x. The lesson measures it and holds it against that ideal.
//!
//!     cargo run --release --example vector_add_streams [-- -n 32M --chunks 16 --streams 4]

use clap::Parser;
use common::{
    args::{PipelineArgs, RunArgs},
    pipeline::{CopyTimes, Judgement, StageTimes},
    report::{fmt_bytes, fmt_count, fmt_ms, Output},
    timeline::phase,
    timing::measure,
    verify::{self, input},
    ChunkPlan, Gpu,
};
use serde_json::json;

/// C = A + B in chunks over streams, against the same chunks on one stream.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> common::Result<()> {
    let args: Args = common::args::parse();
    let out = Output::new(args.run.json);
    let plan = args.pipeline.plan(32 << 20, 16, 4)?;
    let r = args.run.repeats();
    let gpu = Gpu::init()?;
    out.say(format!("{}\n", gpu.info));

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
                s.launch(stream, gpu.kernels.vector_add(a.slice(r.clone()), b.slice(r.clone()), c.slice(r.clone())))?;
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
    h_c.fill(0.0);
    let overlapped = {
        let _p = phase("overlapped");
        measure(r, || run(plan, &mut h_c))?
    };
    let check = verify::exact(&h_c, |i| input(i) + input(i + 1));

    // The stages of one chunk alone: two uploads, the addition, one download.
    let copies = CopyTimes::measure(&gpu, plan.max_chunk(), r)?;
    let len = plan.max_chunk();
    let _p = phase("addition alone");
    let kernel = measure(r, || {
        gpu.timed(&streams[..1], |s| {
            let (a, b, c) =
                (s.device(&mut d_a).slice(0..len), s.device(&mut d_b).slice(0..len), s.device(&mut d_c).slice(0..len));
            s.launch(&streams[0], gpu.kernels.vector_add(a, b, c))
        })
    })?;
    let chunk =
        StageTimes { h2d_ms: 2.0 * copies.h2d.median_ms, kernel_ms: kernel.median_ms, d2h_ms: copies.d2h.median_ms };
    let stages: Vec<StageTimes> = plan.iter().map(|c| chunk.scaled(c.len as f64 / len as f64)).collect();
    let judged = Judgement::new(
        serialized.median_ms,
        overlapped.median_ms,
        &stages,
        plan.chunks,
        gpu.info.async_engines,
        &copies,
    );

    out.say(format!(
        "{} elements per vector ({} each) in {} chunks on {} streams; median of {} runs after {} warm-up",
        fmt_count(plan.elements),
        fmt_bytes(plan.elements * 4),
        plan.chunks,
        plan.streams,
        r.repeats,
        r.warmup
    ));
    copies.lines().iter().for_each(|l| out.say(l));
    out.say(format!("addition of one chunk: {}\n", fmt_ms(kernel.median_ms)));
    judged.lines().iter().for_each(|l| out.say(l));
    out.say(format!(
        "copy-bound: the uploads alone take {:.0}% of the serialized time, so no overlap can beat {:.2}x here",
        100.0 * 2.0 * copies.h2d.median_ms / chunk.total(),
        chunk.total() / (2.0 * copies.h2d.median_ms)
    ));
    out.say(check.summary());
    check.ensure()?;
    out.finish(&json!({
        "device": gpu.info, "plan": plan, "repeats": r, "copies": copies, "kernel": kernel,
        "serialized": serialized, "overlapped": overlapped, "judgement": judged, "verification": check,
    }))?;
    Ok(())
}
