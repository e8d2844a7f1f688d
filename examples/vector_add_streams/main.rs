//! Lesson 4: vector addition with pinned memory and streams, as the course's asyncMemoryCopyExample.cu
//! does it (`async_memory_copy_example_cu` below is that program in Rust), and as it means it.
//!
//! C = A + B moves three vectors across the bus for one addition each: it is copy-bound. Cut into
//! chunks over several streams, the D2H copy of one chunk and the additions run under the H2D copies
//! of the next, but the two H2D copies per chunk remain: at best the run takes as long as they do, about
//! 1.5x faster than one operation after another, not 3x. The bound, measured on the same data, says so.
//!
//!     cargo run --release --example vector_add_streams [-- -n 32M --chunks 16 --streams 4]

use std::process::ExitCode;

use clap::Parser;
use cuda_scope::Gpu;
use kernels::Kernels;
use measure::{args, report::Output, rig, verify, work::ChunkKernel};

/// C = A + B in chunks over streams, against the same chunks on one stream.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    pipeline: args::PipelineArgs,
    #[command(flatten)]
    run: args::RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(vector_add)
}

/// asyncMemoryCopyExample.cu: A and B (1M floats of (rand() % 100) / 10) up on stream 1, C = A + B timed
/// with events on that stream, C back, its first ten elements printed.
fn async_memory_copy_example_cu(gpu: &Gpu, kernels: &Kernels, out: &Output) -> anyhow::Result<f64> {
    const N: usize = 1 << 20; //                                  1 million elements
    let rand = |i: usize| ((i + 1).wrapping_mul(2654435761) >> 7) % 100; // a fixed stand-in for rand()
    let h_a = gpu.pinned_from_fn(N, |i| rand(i) as f32 / 10.0)?; // cudaMallocHost(&h_A, size), filled
    let h_b = gpu.pinned_from_fn(N, |i| rand(i + N) as f32 / 10.0)?;
    let mut h_c = gpu.pinned::<f32>(N)?;
    let (mut d_a, mut d_b, mut d_c) = (gpu.alloc::<f32>(N)?, gpu.alloc::<f32>(N)?, gpu.alloc::<f32>(N)?); // cudaMalloc
    let streams = gpu.streams(2)?; //                              cudaStreamCreate(&stream1), (&stream2)
    let ms = gpu.scope(&streams, |s| -> cuda_scope::Result<f64> {
        let (a, b, c) = (s.device(&mut d_a), s.device(&mut d_b), s.device(&mut d_c));
        let stream1 = s.stream(0);
        stream1.htod(&h_a, a)?; //                                 cudaMemcpyAsync(d_A, h_A, size, H2D, stream1)
        stream1.htod(&h_b, b)?; //                                 cudaMemcpyAsync(d_B, h_B, size, H2D, stream1)
        let start = stream1.record_event()?; //                    cudaEventRecord(start, stream1)
        kernels.vector_add(stream1, a, b, c)?; //                  vectorAddKernel<<<blocks, 256, 0, stream1>>>(...)
        let stop = stream1.record_event()?; //                     cudaEventRecord(stop, stream1)
        stream1.synchronize()?; //                                 cudaStreamSynchronize(stream1)
        let ms = s.elapsed_ms(start, stop)?; //                    cudaEventElapsedTime(&ms, start, stop)
        stream1.dtoh(c, &mut h_c)?; //                             cudaMemcpyAsync(h_C, d_C, size, D2H, stream1)
        Ok(ms)
    })?; //                                                        cudaStreamSynchronize(stream1)
    out.say(format!("asyncMemoryCopyExample.cu: Kernel Execution Time (Stream1): {ms:.6} ms"));
    let first: Vec<String> = h_c[..10].iter().map(|c| format!("{c:.6}")).collect();
    out.say(format!("First 10 elements of result vector:\n{}", first.join(" ")));
    verify::exact(&h_c, |i| h_a[i] + h_b[i]).ensure()?;
    Ok(ms)
}

fn vector_add(args: &Args, out: &Output) -> anyhow::Result<()> {
    let chunking = args.pipeline.chunking(32 << 20, 16, 4)?;
    let setup = rig::PipelineSetup { chunking, kernel: ChunkKernel::VectorAdd, repeats: args.run.repeats() };
    let rig = rig::PipelineRig::start(out, setup, chunking.streams)?;
    let kernel_ms = async_memory_copy_example_cu(&rig.gpu, &rig.kernels, out)?;
    // As the program means it: all three vectors in chunks over streams, so that copies and additions
    // overlap. The bound counts two H2D copies per chunk.
    rig.one_stream_against_many(out, serde_json::json!({ "kernel_ms": kernel_ms }))
}
