//! Lesson 3: overlapping copies with kernels, as the course's overlap_pattern.cu does it
//! (`overlap_pattern_cu` below is that program in Rust).
//!
//! Split the data into chunks and give each chunk to a stream in turn. Within a stream a chunk's
//! upload, kernel and download run in order; across streams they overlap, so the H2D copy engine,
//! the SMs and the D2H copy engine all work at once:
//!
//!     stream 0: [H2D][kernel][D2H]
//!     stream 1:      [H2D][kernel][D2H]
//!     stream 2:           [H2D][kernel][D2H]
//!
//! At best that is three times faster than one stage after another, and only when the stages take
//! equally long: by default the kernel is calibrated to take as long as the copies. `--seed` runs
//! overlap_pattern.cu's own configuration (16M floats, 4 chunks on 4 streams, 500 rounds of sin*cos),
//! which is compute-bound. Each run is held against a lower bound measured on the same data, which
//! names what limits it. `overlap_sweep` tries stream and chunk counts.
//!
//!     cargo run --release --example overlap [-- --streams 4 --chunks 32 | --seed]

use std::process::ExitCode;

use clap::Parser;
use common::{DeviceBuffer, Gpu};
use kernels::Kernels;
use measure::{
    args::{PipelineArgs, RunArgs, WorkArgs},
    bound::{Measured, Report, Steps},
    report::{fmt_bytes, Output},
    timeline::phase,
    timing::measure,
    verify::input,
    work::Work,
    ChunkPlan,
};

/// N elements in chunks over K streams: one stream against K, each against its bound.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    work: WorkArgs,
    /// overlap_pattern.cu's configuration: 16M elements, 4 chunks on 4 streams, 500 rounds of sin*cos
    #[arg(long)]
    seed: bool,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(overlap)
}

/// overlap_pattern.cu: 16M floats of 1.0 in 4 chunks; each chunk up, 500 rounds of sin*cos, down. Version 1
/// on one stream, each copy waited for (the program's legacy stream and `cudaMemcpy`); version 2 chunk i
/// on stream i, all queued at once. Each timed with events and printed, with the speedup.
fn overlap_pattern_cu(gpu: &Gpu, kernels: &Kernels, out: &Output) -> anyhow::Result<(f64, f64)> {
    const N: usize = 1 << 24; //                                      16M elements
    const NUM_STREAMS: usize = 4;
    const CHUNK_SIZE: usize = N / NUM_STREAMS;
    let h_input = gpu.pinned_from_fn(N, |_| 1.0f32)?; //             cudaMallocHost(&h_input, BYTES), all 1.0f
    let mut h_output = gpu.pinned::<f32>(N)?; //                     cudaMallocHost(&h_output, BYTES)
    let mut d_data = gpu.alloc_each::<f32>(NUM_STREAMS, CHUNK_SIZE)?; // cudaMalloc(&d_data[i], CHUNK_BYTES)
    let streams = gpu.streams(NUM_STREAMS)?; //                      cudaStreamCreate(&streams[i])

    // VERSION 1: No Overlap (Baseline): one stream, and each cudaMemcpy returns when it is done.
    let no_overlap = gpu.timed(&streams[..1], |s| {
        let (d, stream) = (s.devices(&mut d_data), s.stream(0));
        for (i, out) in h_output.chunks_mut(CHUNK_SIZE).enumerate() {
            let offset = i * CHUNK_SIZE;
            stream.htod(&h_input[offset..offset + CHUNK_SIZE], d[i])?; //    cudaMemcpy(d_data[i], ...)
            stream.synchronize()?;
            kernels.process_sincos(stream, d[i], 500)?; //                   process<<<(CHUNK+255)/256, 256>>>
            stream.dtoh(d[i], out)?; //                                      cudaMemcpy(h_output + offset, ...)
            stream.synchronize()?;
        }
        Ok(())
    })?;
    // VERSION 2: With Overlap: issue all operations for all streams, then synchronize them all.
    let overlap = gpu.timed(&streams, |s| {
        let d = s.devices(&mut d_data);
        for (i, out) in h_output.chunks_mut(CHUNK_SIZE).enumerate() {
            let (offset, stream) = (i * CHUNK_SIZE, s.stream(i));
            stream.htod(&h_input[offset..offset + CHUNK_SIZE], d[i])?; //    cudaMemcpyAsync(..., streams[i])
            kernels.process_sincos(stream, d[i], 500)?; //                   process<<<..., 0, streams[i]>>>
            stream.dtoh(d[i], out)?; //                                      cudaMemcpyAsync(..., streams[i])
        }
        Ok(()) //                                                         cudaStreamSynchronize(streams[i])
    })?;
    out.say(format!("overlap_pattern.cu: Without overlap: {no_overlap:.2} ms"));
    out.say(format!("overlap_pattern.cu: With overlap:    {overlap:.2} ms"));
    out.say(format!("overlap_pattern.cu: Speedup:         {:.2}x\n", no_overlap / overlap));
    Work::SinCos(500).check(&h_output, &ChunkPlan::new(N, NUM_STREAMS, NUM_STREAMS)?).ensure()?;
    Ok((no_overlap, overlap))
}

fn overlap(args: &Args, out: &Output) -> anyhow::Result<()> {
    let plan = if args.seed { args.pipeline.plan(16 << 20, 4, 4)? } else { args.pipeline.plan(64 << 20, 32, 4)? };
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let seed = overlap_pattern_cu(gpu, &kernels, out)?;

    // The same loop for any size, chunk and stream count (the program's by default with --seed), each
    // version measured over several runs and held against its bound.

    // Pinned host memory (async copies need it), and one device buffer per stream: the chunks of a
    // stream reuse its buffer one after another, which the stream's order makes safe.
    let h_input = gpu.pinned_from_fn(plan.elements, input)?; //   cudaMallocHost(&h_input, BYTES)
    let mut h_output = gpu.pinned::<f32>(plan.elements)?; //      cudaMallocHost(&h_output, BYTES)
    let mut d_data = gpu.alloc_each::<f32>(plan.streams, plan.max_chunk())?; // cudaMalloc(&d_data[i], CHUNK_BYTES)
    let streams = gpu.streams(plan.streams)?; //                  cudaStreamCreateWithFlags(.., cudaStreamNonBlocking)
    let work = match args.seed {
        true => Work::SinCos(args.work.iters.unwrap_or(500)),
        false => args.work.work(gpu, &kernels, plan.max_chunk(), r)?,
    };
    out.say(format!(
        "{} elements ({}) in {} chunks on {} streams; {}",
        plan.elements,
        fmt_bytes(plan.elements * 4),
        plan.chunks,
        plan.streams,
        work.describe()
    ));

    // overlap_pattern.cu's two versions are one loop: chunk i goes to stream i % K, in that stream's
    // buffer. With one stream every operation waits for the one before; with K they overlap.
    let run = |plan: ChunkPlan, h_output: &mut [f32], d_data: &mut [DeviceBuffer<f32>]| {
        gpu.timed(&streams[..plan.streams], |s| {
            let d = s.devices(d_data);
            for (c, out) in plan.iter().zip(plan.split_mut(h_output)) {
                let (stream, d) = (s.stream(c.stream), d[c.stream].slice(0..c.len));
                stream.htod(&h_input[c.range()], d)?; //        cudaMemcpyAsync(d_data[i], h_input + offset, ...)
                work.run(&kernels, stream, d)?; //              process<<<grid, 256, 0, streams[i]>>>(d_data[i], n)
                stream.dtoh(d, out)?; //                         cudaMemcpyAsync(h_output + offset, d_data[i], ...)
            }
            Ok(()) // the scope synchronizes every stream before it returns
        })
    };
    let one_stream = ChunkPlan::new(plan.elements, plan.chunks, 1)?;
    let serialized = {
        let _p = phase("serialized");
        measure(r, || run(one_stream, &mut h_output, &mut d_data))?
    };
    h_output.fill(f32::NAN);
    let overlapped = {
        let _p = phase("overlapped");
        measure(r, || run(plan, &mut h_output, &mut d_data))?
    };
    let check = work.check(&h_output, &plan);
    out.say(check.summary());
    check.ensure()?;

    // How good is that? Each run against a bound it cannot beat, measured on the same data.
    let report = Report::measure(
        gpu,
        &kernels,
        &plan,
        Steps::InPlace(work),
        (&h_input, &mut h_output),
        r,
        &[
            Measured::on_streams("one stream", serialized, 1),
            Measured::on_streams(format!("{} streams", plan.streams), overlapped, plan.streams),
        ],
    )?;
    out.say(format!(
        "\nmedian of up to {} runs after {} warm-up; overlapping is {:.2}x faster",
        r.repeats,
        r.warmup,
        serialized.median_ms / overlapped.median_ms
    ));
    out.table(&report.table());
    report.notes().iter().for_each(|l| out.say(l));
    out.pipeline(&report); // names each run against its bound, and the bound's parts, for `cargo xtask compare`
    out.finish(&serde_json::json!({
        "device": gpu.info, "plan": plan, "work": work, "repeats": r, "report": report, "verification": check,
        "seed_ms": { "without_overlap": seed.0, "with_overlap": seed.1 },
    }))
}
