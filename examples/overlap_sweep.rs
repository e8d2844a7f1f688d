//! Lesson 3b: how many streams, how many chunks? (Exercise 2 of the overlap lesson.)
//!
//! The overlap loop of lesson 3 over stream counts from 1 to 32 and chunk counts from 4 to 128, each
//! run held against its bound (common::bound), measured on the same data. Three streams already keep
//! the three engines (H2D, SMs, D2H) busy; more chunks shorten the fill and drain at either end until
//! per-operation costs and the lower rate of small copies cost more than they save. The table shows
//! where that happens on your GPU, and the bound says what limits each run.
//!
//!     cargo run --release --example overlap_sweep [-- -n 64M]

use std::process::ExitCode;

use clap::Parser;
use common::DeviceBuffer;
use kernels::Kernels;
use measure::{
    args::{PipelineArgs, RunArgs, WorkArgs},
    bound::{Measured, Report, Steps},
    report::{fmt_bytes, fmt_ms, Figure, Output, Table},
    timeline::phase,
    timing::measure,
    verify::input,
    ChunkPlan,
};

/// The overlap loop over stream and chunk counts, each run against its bound.
#[derive(Parser)]
struct Args {
    /// (-n sets the data; --chunks and --streams are swept)
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    work: WorkArgs,
    #[command(flatten)]
    run: RunArgs,
}

const STREAMS: [usize; 7] = [1, 2, 3, 4, 8, 16, 32];
const CHUNKS: [usize; 6] = [4, 8, 16, 32, 64, 128];

#[derive(serde::Serialize)]
struct Point {
    chunks: usize,
    report: Report,
}

fn main() -> ExitCode {
    measure::lesson::run(sweep)
}

fn sweep(args: &Args, out: &Output) -> anyhow::Result<()> {
    let n = args.pipeline.plan(16 << 20, 32, 4)?.elements;
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let h_input = gpu.pinned_from_fn(n, input)?;
    let mut h_output = gpu.pinned::<f32>(n)?;
    let streams = gpu.streams(32)?;
    let work = args.work.work(gpu, &kernels, n / 32, r)?; // balanced at 32 chunks, the lesson's default
    out.say(format!("{} ({}), {}", fmt_bytes(n * 4), n, work.describe()));
    let chunk_counts: Vec<usize> = CHUNKS.into_iter().filter(|c| *c <= n).collect();
    let bar = out.progress_bar((chunk_counts.len() * STREAMS.len()) as u64, "sweep");
    let mut points = Vec::new();
    for &chunks in &chunk_counts {
        let mut runs = Vec::new();
        for &k in STREAMS.iter().filter(|k| **k <= chunks) {
            bar.step(format!("{chunks} chunks on {k} streams"));
            let plan = ChunkPlan::new(n, chunks, k)?;
            let mut d_data: Vec<DeviceBuffer<f32>> = gpu.alloc_each(k, plan.max_chunk())?;
            let _p = phase(&format!("{chunks} chunks on {k} streams"));
            let time = measure(r, || {
                gpu.timed(&streams[..k], |s| {
                    let d = s.devices(&mut d_data);
                    for (c, out) in plan.iter().zip(plan.split_mut(&mut h_output)) {
                        let (stream, d) = (s.stream(c.stream), d[c.stream].slice(0..c.len));
                        stream.htod(&h_input[c.range()], d)?;
                        work.run(&kernels, stream, d)?;
                        stream.dtoh(d, out)?;
                    }
                    Ok(())
                })
            })?;
            work.check(&h_output, &plan).ensure()?;
            runs.push((format!("{k} streams"), time, k));
            bar.done();
        }
        let plan = ChunkPlan::new(n, chunks, 1)?;
        let named: Vec<Measured> =
            runs.iter().map(|(name, t, k)| Measured::on_streams(name.as_str(), *t, *k)).collect();
        let report = Report::measure(gpu, &kernels, &plan, Steps::InPlace(work), (&h_input, &mut h_output), r, &named)?;
        for run in &report.runs {
            // `32 chunks / 4 streams` against its bound, for `cargo xtask compare`
            let figure = Figure::new(format!("{chunks} chunks / {}", run.name), &run.judged.measured);
            out.add(figure.against(run.judged.bound.ms).depends_on("elements").calibrated("work"));
        }
        points.push(Point { chunks, report });
    }
    bar.finish();

    let mut headers = vec!["chunks".to_string()];
    headers.extend(STREAMS.iter().map(|k| format!("{k} streams")));
    let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
    let mut best: Option<(f64, usize, usize, &str)> = None;
    for p in &points {
        let mut row = vec![format!("{} x {}", p.chunks, fmt_bytes(n * 4 / p.chunks))];
        for run in &p.report.runs {
            let j = &run.judged;
            row.push(format!("{} ({:.2})", fmt_ms(j.measured.median_ms), j.efficiency));
            if best.is_none_or(|b| j.measured.median_ms < b.0) {
                best = Some((j.measured.median_ms, p.chunks, run.lanes, j.bound.limit.describe()));
            }
        }
        t.row(row);
    }
    out.say(format!("\noverlapped time (efficiency against its bound), median of up to {} runs", r.repeats));
    out.table(&t);
    if let Some((ms, chunks, k, limit)) = best {
        out.say(format!("fastest: {chunks} chunks on {k} streams, {}; there, {limit}", fmt_ms(ms)));
    }
    out.finish(&serde_json::json!({ "device": gpu.info, "elements": n, "work": work, "repeats": r, "points": points }))
}
