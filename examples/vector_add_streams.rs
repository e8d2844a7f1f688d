//! Lesson 4: vector addition with pinned memory and streams, as the course's asyncMemoryCopyExample.cu
//! does it (`async_memory_copy_example_cu` below is that program in Rust), and as it means it.
//!
//! C = A + B moves three vectors across the bus for one addition each: it is copy-bound. Cut into
//! chunks over several streams, the download of one chunk and the additions run under the uploads of
//! the next, but the two uploads per chunk remain: at best the run takes as long as its uploads, about
//! 1.5x faster than one operation after another, not 3x. The bound, measured on the same data, says so.
//!
//!     cargo run --release --example vector_add_streams [-- -n 32M --chunks 16 --streams 4]

use std::process::ExitCode;

use clap::Parser;
use common::Gpu;
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
    let ms = gpu.scope(&streams, |s| {
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
    let plan = args.pipeline.plan(32 << 20, 16, 4)?;
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let seed_kernel_ms = async_memory_copy_example_cu(gpu, &kernels, out)?;

    // As the program means it: all three vectors in chunks over streams, so that copies and additions overlap.

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
                let (stream, r) = (s.stream(k.stream), k.range());
                stream.htod(&h_a[r.clone()], a.slice(r.clone()))?; //   cudaMemcpyAsync(d_A + offset, ...)
                stream.htod(&h_b[r.clone()], b.slice(r.clone()))?; //   cudaMemcpyAsync(d_B + offset, ...)
                kernels.vector_add(stream, a.slice(r.clone()), b.slice(r.clone()), c.slice(r.clone()))?;
                stream.dtoh(c.slice(r), out)?; //                       cudaMemcpyAsync(h_C + offset, ...)
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
        "\n{} elements per vector ({} each) in {} chunks; median of up to {} runs after {} warm-up; {:.2}x faster on \
         {} streams",
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
    out.pipeline(&report); // names each run against its bound, and the bound's parts, for `cargo xtask compare`
    out.finish(
        &serde_json::json!({ "device": gpu.info, "plan": plan, "repeats": r, "report": report, "verification": check,
                             "seed_kernel_ms": seed_kernel_ms }),
    )
}
