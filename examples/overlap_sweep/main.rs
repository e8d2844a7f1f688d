//! Lesson 3b: how many streams, how many chunks? (Exercise 2 of the overlap lesson.)
//!
//! The overlap loop of lesson 3 over stream counts from 1 to 32 and chunk counts from 4 to 128, each
//! run held against its bound (cuda_scope::bound), measured on the same data. Three streams already keep
//! the three engines (H2D, SMs, D2H) busy; more chunks shorten the fill and drain at either end until
//! per-operation costs and the lower rate of small copies cost more than they save. The table shows
//! where that happens on your GPU, and the bound says what limits each run.
//!
//!     cargo run --release --example overlap_sweep [-- -n 64M]

use std::process::ExitCode;

use clap::Parser;
use measure::{
    args,
    bound::{BoundedRun, PipelineReport},
    pipeline::{Buffering, Pipeline},
    report::{fmt_bytes, fmt_ms, Figure, Output, Table},
    rig::{PipelineRig, PipelineSetup},
    Chunking,
};

/// The overlap loop over stream and chunk counts, each run against its bound (-n sets the data).
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    flags: args::PipelineFlags,
}

const STREAMS: [usize; 7] = [1, 2, 3, 4, 8, 16, 32];
const CHUNKS: [usize; 6] = [4, 8, 16, 32, 64, 128];

#[derive(serde::Serialize)]
struct Point {
    chunks: usize,
    report: PipelineReport,
}

fn main() -> ExitCode {
    measure::lesson::run(sweep)
}

fn sweep(args: &Args, out: &Output) -> anyhow::Result<()> {
    // The kernel is balanced at 32 chunks, the lesson's default.
    let setup = PipelineSetup::from_flags(&args.flags, (16 << 20, 32, 4))?;
    let (chunking, rig) = (setup.chunking, PipelineRig::start(out, setup, 32)?);
    let mut p = rig.pipeline(out)?;
    let chunk_counts: Vec<usize> = CHUNKS.into_iter().filter(|c| *c <= chunking.elements).collect();
    let bar = out.progress_bar((chunk_counts.len() * STREAMS.len()) as u64, "sweep");
    let mut points = Vec::new();
    for &chunks in &chunk_counts {
        points.push(Point { chunks, report: chunk_count(&mut p, chunking.elements, chunks, &bar)? });
        for run in &points.last().unwrap().report.runs {
            // `32 chunks / 4 streams` against its bound, for `cargo xtask compare`
            let figure = Figure::new(format!("{chunks} chunks / {}", run.name), &run.against_bound.measured);
            out.add(figure.against(run.against_bound.bound.ms).depends_on("elements").calibrated("steps"));
        }
    }
    bar.finish();
    print_table(out, &points, chunking.elements, p.repeats.repeats);
    let json = serde_json::json!({ "device": rig.gpu.info, "elements": chunking.elements, "steps": p.steps,
                                   "repeats": p.repeats, "points": points });
    out.finish(&json)
}

/// `n` elements in `chunks` chunks on each stream count, held against their bounds.
fn chunk_count(
    p: &mut Pipeline,
    n: usize,
    chunks: usize,
    bar: &measure::report::Progress,
) -> anyhow::Result<PipelineReport> {
    let mut runs = Vec::new();
    for &k in STREAMS.iter().filter(|k| **k <= chunks) {
        bar.step(format!("{chunks} chunks on {k} streams"));
        let chunking = Chunking::new(n, chunks, k)?;
        let mut run = p.time(&format!("{chunks} chunks on {k} streams"), &chunking, Buffering::per_stream(k))?;
        run.name = format!("{k} streams");
        runs.push(run);
        bar.done();
    }
    PipelineReport::measure(p, &Chunking::new(n, chunks, 1)?, &runs)
}

/// Overlapped time (efficiency against its bound) by chunk and stream count, and the fastest.
fn print_table(out: &Output, points: &[Point], n: usize, repeats: usize) {
    let mut headers = vec!["chunks".to_string()];
    headers.extend(STREAMS.iter().map(|k| format!("{k} streams")));
    let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
    let mut best: Option<(&BoundedRun, usize)> = None;
    for p in points {
        let mut row = vec![format!("{} x {}", p.chunks, fmt_bytes(n * 4 / p.chunks))];
        for run in &p.report.runs {
            let j = &run.against_bound;
            row.push(format!("{} ({})", fmt_ms(j.measured.median_ms), j.efficiency_cell()));
            if best.is_none_or(|b| j.measured.median_ms < b.0.against_bound.measured.median_ms) {
                best = Some((run, p.chunks));
            }
        }
        t.row(row);
    }
    out.say(format!("\noverlapped time (efficiency against its bound), median of up to {repeats} runs"));
    out.table(&t);
    if points.iter().any(|p| p.report.runs.iter().any(|r| r.against_bound.beaten)) {
        out.say(measure::bound::beaten_note("a run of the sweep"));
    }
    if let Some((run, chunks)) = best {
        let (ms, limit) = (run.against_bound.measured.median_ms, run.against_bound.bound.limit.describe());
        out.say(format!(
            "fastest: {chunks} chunks on {} streams, {}; there, {limit}",
            run.buffering.buffers,
            fmt_ms(ms)
        ));
    }
}
