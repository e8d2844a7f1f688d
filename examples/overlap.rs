//! Lesson 3: the overlap pattern (the seed's overlap_pattern.cu, and its Exercise 2).
//!
//! Split the data into chunks and give each chunk to a stream in turn. Within a stream the chunk's
//! upload, kernel and download run in order; across streams they overlap, so the H2D copy engine,
//! the SMs and the D2H copy engine all work at once:
//!
//!     stream 0: [H2D][kernel][D2H]
//!     stream 1:      [H2D][kernel][D2H]
//!     stream 2:           [H2D][kernel][D2H]
//!
//! Three stages can overlap, so at best this is 3x faster than doing them one after another, and only
//! when the stages take equally long. By default the kernel's work is calibrated to match the copies;
//! `--seed` runs the seed's own configuration, which is compute-bound.
//!
//!     cargo run --release --example overlap [-- --streams 4 --chunks 32 | --seed | --sweep]

use clap::Parser;
use common::{
    args::{PipelineArgs, RunArgs, WorkArgs},
    kernels::Work,
    pipeline::{ChunkStages, CopyTimes, Judgement, StageTimes},
    report::{fmt_bytes, fmt_ms, Output, Table},
    timeline::phase,
    timing::measure,
    verify::input,
    ChunkPlan, DeviceBuffer, Gpu,
};
use serde_json::json;

/// N elements in chunks over K streams: serialized against overlapped, held against the ideal.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    work: WorkArgs,
    /// The seed's configuration: 16M elements, 4 chunks on 4 streams, 500 rounds of sin*cos
    #[arg(long)]
    seed: bool,
    /// Exercise 2: sweep stream counts (1 to 32) and chunk counts, and report the best
    #[arg(long)]
    sweep: bool,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> common::Result<()> {
    let args: Args = common::args::parse();
    let out = Output::new(args.run.json);
    let plan = if args.seed { args.pipeline.plan(16 << 20, 4, 4)? } else { args.pipeline.plan(64 << 20, 32, 4)? };
    let gpu = Gpu::init()?;
    out.say(format!("{}\n", gpu.info));
    let r = args.run.repeats();

    // Pinned host memory (async copies need it), and one device buffer per stream: the chunks of a
    // stream reuse its buffer one after another, which the stream's order makes safe.
    let h_in = gpu.pinned_from_fn(plan.elements, input)?;
    let mut h_out = gpu.pinned::<f32>(plan.elements)?;
    let mut d_data = (0..plan.streams).map(|_| gpu.alloc::<f32>(plan.max_chunk())).collect::<Result<Vec<_>, _>>()?;
    let streams = gpu.streams(if args.sweep { plan.streams.max(32) } else { plan.streams })?;

    // What each stage of one chunk costs alone. In the steady state an upload and a download run at
    // once and share the link, so by default the kernel is balanced against that, slower, copy time.
    let seed_work = args.seed.then(|| Work::SinCos(args.work.iters.unwrap_or(500)));
    let stages = ChunkStages::measure(&gpu, plan.max_chunk(), seed_work.or(args.work.iters.map(Work::Process)), r)?;
    let (work, copies, kernel) = (stages.work, &stages.copies, &stages.kernel);
    out.say(format!(
        "{} elements ({}) in {} chunks on {} streams",
        plan.elements,
        fmt_bytes(plan.elements * 4),
        plan.chunks,
        plan.streams
    ));
    stages.lines().iter().for_each(|l| out.say(l));

    // The seed's two versions are one loop: chunk i goes to stream i % K, in that stream's buffer.
    // With one stream (version 1) every operation waits for the one before; with K they overlap.
    let run = |plan: ChunkPlan, h_out: &mut [f32], d_data: &mut [DeviceBuffer<f32>]| {
        gpu.timed(&streams[..plan.streams], |s| {
            let d = s.devices(d_data);
            for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
                let (stream, buf) = (&streams[c.stream], d[c.stream].slice(0..c.len));
                s.htod(stream, &h_in[c.range()], buf)?; //    cudaMemcpyAsync(d_data[i], h_input + offset, ..., streams[i])
                s.launch(stream, gpu.kernels.work(work, buf))?; // process<<<grid, 256, 0, streams[i]>>>(d_data[i], n)
                s.dtoh(stream, buf, out)?; //                  cudaMemcpyAsync(h_output + offset, d_data[i], ..., streams[i])
            }
            Ok(()) // the scope synchronizes every stream before it returns
        })
    };
    let serial_plan = ChunkPlan::new(plan.elements, plan.chunks, 1)?;
    let serialized = {
        let _p = phase("serialized");
        measure(r, || run(serial_plan, &mut h_out, &mut d_data))?
    };
    h_out.fill(0.0);
    let overlapped = {
        let _p = phase("overlapped");
        measure(r, || run(plan, &mut h_out, &mut d_data))?
    };
    let check = work.check(&h_out);
    out.say(format!("\n{}", check.summary()));
    check.ensure()?;

    // How good is that? The ideal pipeline from the stages measured above (see common::pipeline).
    let judged = Judgement::new(
        serialized.median_ms,
        overlapped.median_ms,
        &stages.per_chunk(&plan),
        plan.streams,
        gpu.info.async_engines,
        copies,
    );
    out.say(format!("\nmedian of {} runs after {} warm-up, CUDA events", r.repeats, r.warmup));
    judged.lines().iter().for_each(|l| out.say(l));
    if args.seed {
        out.say(format!(
            "the seed's kernel takes {:.1}x as long as its copies: compute-bound, so overlap can hide only the copies",
            kernel.median_ms / copies.h2d.median_ms
        ));
    } else {
        judged.verdicts(0.95, 0.90, 2.3).1.iter().for_each(|l| out.say(l));
    }

    // Exercise 2: which stream and chunk counts are best, measured and modelled.
    let mut sweep_json = Vec::new();
    if args.sweep {
        let stream_counts = [1, 2, 3, 4, 8, 16, 32];
        out.say(format!(
            "\nExercise 2: overlapped time (efficiency against the both-directions ideal), {}",
            work.describe()
        ));
        let mut headers = vec!["chunks".to_string()];
        headers.extend(stream_counts.iter().map(|k| format!("{k} streams")));
        let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
        let mut best = (f64::INFINITY, 0, 0);
        for chunks in [4, 8, 16, 32, 64, 128].into_iter().filter(|c| *c <= plan.elements) {
            out.progress(format!("{chunks} chunks"));
            let p = ChunkPlan::new(plan.elements, chunks, 1)?;
            let copies = CopyTimes::measure(&gpu, p.max_chunk(), r)?;
            // The ideal's stages at this chunk size: copies measured at it, the kernel scaled to it.
            let f = p.max_chunk() as f64 / plan.max_chunk() as f64;
            let one = StageTimes {
                h2d_ms: copies.h2d.median_ms,
                kernel_ms: kernel.median_ms * f,
                d2h_ms: copies.d2h.median_ms,
            };
            let model: Vec<_> = p.iter().map(|c| one.scaled(c.len as f64 / p.max_chunk() as f64)).collect();
            let mut row = vec![format!("{chunks} x {}", fmt_bytes(p.max_chunk() * 4))];
            for &k in stream_counts.iter().filter(|k| **k <= chunks) {
                let p = ChunkPlan::new(plan.elements, chunks, k)?;
                let mut bufs = (0..k).map(|_| gpu.alloc::<f32>(p.max_chunk())).collect::<Result<Vec<_>, _>>()?;
                let _p = phase(&format!("{chunks} chunks on {k} streams"));
                let ms = measure(r, || run(p, &mut h_out, &mut bufs))?.median_ms;
                let j = Judgement::new(ms, ms, &model, k, gpu.info.async_engines, &copies);
                row.push(format!("{} ({:.2})", fmt_ms(ms), j.efficiency_both));
                sweep_json.push(json!({ "chunks": chunks, "streams": k, "ms": ms, "ideal_both_ms": j.ideal_both_ms }));
                best = if ms < best.0 { (ms, chunks, k) } else { best };
            }
            t.row(row);
        }
        out.table(&t);
        out.say(format!(
            "best: {} chunks on {} streams, {}. Three streams already keep the three engines (H2D, SMs, D2H) busy, so more \
             add nothing; more chunks shorten the fill and drain at either end, until per-copy overheads and the lower \
             rate of small copies (see pinned_memory) cost more than they save.",
            best.1, best.2, fmt_ms(best.0)
        ));
    }
    out.finish(&json!({
        "device": gpu.info, "plan": plan, "work": work, "repeats": r, "stages": stages,
        "serialized": serialized, "overlapped": overlapped, "judgement": judged, "verification": check, "sweep": sweep_json,
    }))?;
    Ok(())
}
