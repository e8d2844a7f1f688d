//! Lesson 3: overlapping copies with kernels, as overlap_pattern.cu does it (`overlap_pattern_cu` below
//! is that program in Rust).
//!
//! Split the data into chunks and give each chunk to a stream in turn. Within a stream a chunk's
//! H2D copy, kernel and D2H copy run in order; across streams they overlap, so the H2D copy engine,
//! the SMs and the D2H copy engine all work at once:
//!
//!     stream 0: [H2D][kernel][D2H]
//!     stream 1:      [H2D][kernel][D2H]
//!     stream 2:           [H2D][kernel][D2H]
//!
//! At best that is three times faster, and only when the stages take equally long: so the same loop
//! then runs on any size, chunk and stream count with a kernel calibrated to take as long as the
//! copies, each run held against a bound measured on the same data, which names what limits it
//! (`--original`: the program's own configuration). `overlap_sweep` tries stream and chunk counts.
//!
//!     cargo run --release --example overlap [-- --streams 4 --chunks 32 | --original]

use std::process::ExitCode;

use clap::Parser;
use cuda_scope::Gpu;
use kernels::Kernels;
use measure::{
    args,
    report::Output,
    rig,
    work::{ChunkKernel, Work},
    Chunking,
};

/// N elements in chunks over K streams: one stream against K, each against its bound.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    flags: args::PipelineFlags,
    /// overlap_pattern.cu's configuration: 16M elements, 4 chunks on 4 streams, 500 rounds of sin*cos
    #[arg(long)]
    original: bool,
}

fn main() -> ExitCode {
    measure::lesson::run(overlap)
}

/// overlap_pattern.cu: 16M floats of 1.0 in 4 chunks; each chunk up, 500 rounds of sin*cos, down. Version 1
/// on one stream, each copy waited for (the program's legacy stream and `cudaMemcpy`); version 2 chunk i
/// on stream i, all queued at once. Each timed with events and printed, with the speedup.
fn overlap_pattern_cu(gpu: &Gpu, kernels: &Kernels, out: &Output) -> anyhow::Result<[f64; 2]> {
    const N: usize = 1 << 24; //                                      16M elements
    const NUM_STREAMS: usize = 4;
    const CHUNK_SIZE: usize = N / NUM_STREAMS;
    let h_input = gpu.pinned_from_fn(N, |_| 1.0f32)?; //             cudaMallocHost(&h_input, BYTES), all 1.0f
    let mut h_output = gpu.pinned::<f32>(N)?; //                     cudaMallocHost(&h_output, BYTES)
    let mut d_data = gpu.alloc_each::<f32>(NUM_STREAMS, CHUNK_SIZE)?; // cudaMalloc(&d_data[i], CHUNK_BYTES)
    let streams = gpu.streams(NUM_STREAMS)?; //                      cudaStreamCreate(&streams[i])

    // VERSION 1: No Overlap (Baseline): one stream, and each cudaMemcpy returns when it is done.
    let no_overlap = gpu.timed(&streams[..1], |s| -> cuda_scope::Result<()> {
        let (d, stream) = (s.devices(&mut d_data), s.stream(0));
        for (i, chunk) in h_output.chunks_mut(CHUNK_SIZE).enumerate() {
            let offset = i * CHUNK_SIZE;
            stream.htod(&h_input[offset..offset + CHUNK_SIZE], d[i])?; //    cudaMemcpy(d_data[i], ...)
            stream.synchronize()?;
            kernels.overlap_pattern_process(stream, d[i])?; //               process<<<(CHUNK+255)/256, 256>>>
            stream.dtoh(d[i], chunk)?; //                                    cudaMemcpy(h_output + offset, ...)
            stream.synchronize()?;
        }
        Ok(())
    })?;
    // VERSION 2: With Overlap: issue all operations for all streams, then synchronize them all.
    let overlap = gpu.timed(&streams, |s| -> cuda_scope::Result<()> {
        let d = s.devices(&mut d_data);
        for (i, chunk) in h_output.chunks_mut(CHUNK_SIZE).enumerate() {
            let (offset, stream) = (i * CHUNK_SIZE, s.stream(i));
            stream.htod(&h_input[offset..offset + CHUNK_SIZE], d[i])?; //    cudaMemcpyAsync(..., streams[i])
            kernels.overlap_pattern_process(stream, d[i])?; //               process<<<..., 0, streams[i]>>>
            stream.dtoh(d[i], chunk)?; //                                    cudaMemcpyAsync(..., streams[i])
        }
        Ok(()) //                                                         cudaStreamSynchronize(streams[i])
    })?;
    out.say(format!("overlap_pattern.cu: Without overlap: {no_overlap:.2} ms"));
    out.say(format!("overlap_pattern.cu: With overlap:    {overlap:.2} ms"));
    out.say(format!("overlap_pattern.cu: Speedup:         {:.2}x\n", no_overlap / overlap));
    Work::OverlapPattern.check(&h_output, &Chunking::new(N, NUM_STREAMS, NUM_STREAMS)?).ensure()?;
    Ok([no_overlap, overlap])
}

fn overlap(args: &Args, out: &Output) -> anyhow::Result<()> {
    let defaults = if args.original { (16 << 20, 4, 4) } else { (64 << 20, 32, 4) };
    let mut setup = rig::PipelineSetup::from_flags(&args.flags, defaults)?;
    if args.original {
        // The program's own kernel, or the same sin * cos for the rounds `--iters` gives.
        let work = args.flags.work.iters.map_or(Work::OverlapPattern, Work::ProcessSincos);
        setup.kernel = ChunkKernel::Given(work);
    }
    let rig = rig::PipelineRig::start(out, setup, setup.chunking.streams)?;
    let [without_overlap, with_overlap] = overlap_pattern_cu(&rig.gpu, &rig.kernels, out)?;
    // The same loop for this chunking, over several runs, each held against its bound.
    let original = serde_json::json!({ "without_overlap_ms": without_overlap, "with_overlap_ms": with_overlap });
    rig.one_stream_against_many(out, original)
}
