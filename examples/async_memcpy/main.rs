//! Lesson 2: asynchronous copies, as the course's async_memcpy.cu does them (and NVIDIA's asyncAPI sample).
//!
//! `cudaMemcpy` returns when the copy is done; `cudaMemcpyAsync` from pinned memory queues the copy on a
//! stream and returns at once. The GPU does the same work either way, in about the same time: what
//! changes is that the CPU is free while it runs. `async_memcpy_cu` below is that program in Rust. The
//! lesson then shows it with real CPU work, as NVIDIA's asyncAPI sample does: while the GPU works, the
//! CPU computes the reference the result is checked against, a block at a time, polling the stream
//! between blocks; and it times the host inside the API calls against the GPU time (the lesson's rig).
//!
//!     cargo run --release --example async_memcpy [-- -n 4M --iters 100]

mod rig;

use std::process::ExitCode;

use clap::Parser;
use cuda_scope::Gpu;
use kernels::{cpu, Kernels};
use measure::args::{parse_count, RunArgs};
use measure::{report::Output, verify};
use rig::{AsyncRig, Original};

/// Synchronous against asynchronous H2D, kernel, D2H: GPU time, host time in API calls, CPU work done meanwhile.
#[derive(Parser)]
struct Args {
    /// Elements (f32); k, M, G multiply by 2^10, 2^20, 2^30
    #[arg(short = 'n', long, default_value = "4M", value_parser = parse_count, allow_negative_numbers = true)]
    elements: usize,
    /// Rounds of x = sqrt(x*x + 1) per element (that program's "heavy computation")
    #[arg(long, default_value = "100", value_parser = measure::args::parse_u32, allow_negative_numbers = true)]
    iters: u32,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(async_memcpy)
}

/// async_memcpy.cu: 4M floats of 1.0 up, 100 rounds of sqrt(x*x + 1), back down; first with calls that
/// block, then queued on a stream; each version timed with events and printed, as that program does.
fn async_memcpy_cu(gpu: &Gpu, kernels: &Kernels, out: &Output) -> anyhow::Result<(f64, f64)> {
    const N: usize = 1 << 22; //                                    4M elements
    let h_data = gpu.pinned_from_fn(N, |_| 1.0f32)?; //            cudaMallocHost: MUST use pinned memory for async!
    let mut h_back = gpu.pinned::<f32>(N)?; //                     the scope lends h_data to the upload: a second buffer
    let mut d_data = gpu.alloc::<f32>(N)?; //                      cudaMalloc(&d_data, BYTES)
    let streams = gpu.streams(1)?; //                              cudaStreamCreate(&stream)

    // Synchronous (blocking): each call returns when its work is done.
    let sync_ms = gpu.timed(&streams, |s| {
        let (d, stream) = (s.device(&mut d_data), s.stream(0));
        stream.htod(&h_data, d)?; //                               cudaMemcpy(d_data, h_data, BYTES, H2D)
        stream.synchronize()?;
        kernels.heavy_sqrt(stream, d, 100)?; //                    processKernel<<<..>>>(d_data, N)
        stream.synchronize()?;
        stream.dtoh(d, &mut h_back)?; //                           cudaMemcpy(h_data, d_data, BYTES, D2H)
        stream.synchronize()
    })?;
    // Asynchronous (non-blocking): these return immediately to the CPU.
    let async_ms = gpu.timed(&streams, |s| {
        let (d, stream) = (s.device(&mut d_data), s.stream(0));
        stream.htod(&h_data, d)?; //                               cudaMemcpyAsync(d_data, h_data, BYTES, H2D, stream)
        kernels.heavy_sqrt(stream, d, 100)?; //                    processKernel<<<..., 0, stream>>>(d_data, N)
        stream.dtoh(d, &mut h_back) //                             cudaMemcpyAsync(h_data, d_data, BYTES, D2H, stream)
    })?; // "Can do CPU work here while GPU is busy!"; then the scope waits (cudaStreamSynchronize)
    out.say(format!("async_memcpy.cu: Sync time:  {sync_ms:.2} ms\nasync_memcpy.cu: Async time: {async_ms:.2} ms"));
    // Every element is 100 rounds of the kernel on 1.0, which the CPU computes once.
    let expected = cpu::heavy_sqrt(1.0, 100);
    verify::exact(&h_back, |_| expected).ensure()?;
    Ok((sync_ms, async_ms)) //                                      cudaStreamDestroy, cudaFreeHost, cudaFree: on drop
}

/// The program, then the same calls on the lesson's data, the host's side measured too (`rig.rs`).
fn async_memcpy(args: &Args, out: &Output) -> anyhow::Result<()> {
    let rig = AsyncRig::start(out, args)?;
    let (sync_ms, async_ms) = async_memcpy_cu(&rig.gpu, &rig.kernels, out)?;
    rig.versions(out, Original { sync_ms, async_ms })
}
