//! Lesson 1: pinned memory, as the course's pinned_memory.cu times `cudaMemcpy` from `malloc`'d and
//! `cudaMallocHost`'d memory (`pinned_memory_cu` below is that program in Rust), and its exercise, which
//! sweeps the size.
//!
//! Pageable memory (a plain `Vec`) can be paged out by the OS, so the driver cannot DMA from it: it
//! copies through a hidden pinned staging buffer first. Pinned (page-locked) memory is DMA'd directly.
//! The lesson's rig then times both directions for four kinds of host memory over a sweep of sizes,
//! what allocating and pinning cost, and checks that the data survived a round trip through each kind.
//!
//!     cargo run --release --example pinned_memory [-- --min 4KiB --max 256MiB]

mod rig;

use std::process::ExitCode;

use clap::Parser;
use cuda_scope::{host::fill, Gpu};
use measure::args::{parse_gbps, RunArgs, SweepArgs};
use measure::report::Output;
use rig::{Original, PinnedRig};

/// Pageable against pinned memory, H2D and D2H, over a sweep of sizes (4 KiB to 64 MiB unless given).
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    sizes: SweepArgs,
    /// A copy-engine figure (GB/s, say from nvbandwidth) to hold pinned H2D of 64 MiB and more against
    #[arg(long, value_parser = parse_gbps, allow_negative_numbers = true)]
    ref_htod: Option<f64>,
    /// The same for D2H
    #[arg(long, value_parser = parse_gbps, allow_negative_numbers = true)]
    ref_dtoh: Option<f64>,
    /// Also draw the sweep as an SVG picture: GB/s against size, a line per kind and direction, the link across
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(pinned_memory)
}

/// pinned_memory.cu: 2^26 floats of 1.0 copied to the device once from `malloc`'d memory and once from
/// `cudaMallocHost`'d memory, each copy timed with a pair of events and printed with its rate.
fn pinned_memory_cu(gpu: &Gpu, out: &Output) -> anyhow::Result<Original> {
    const SIZE: usize = 1 << 26; //                                     "64MB", says the program: 256 MiB of floats
    const BYTES: usize = SIZE * std::mem::size_of::<f32>();

    // Allocate Host Memory: regular pageable memory, and pinned (page-locked) memory
    let mut h_pageable = cuda_scope::pageable(SIZE, |_| 0.0f32)?; //       h_pageable = (float*)malloc(BYTES)
    let mut h_pinned = gpu.pinned::<f32>(SIZE)?; //                     cudaMallocHost(&h_pinned, BYTES)
    let mut d_data = gpu.alloc::<f32>(SIZE)?; //                        cudaMalloc(&d_data, BYTES)

    // Initialize
    fill(&mut h_pageable, |_| 1.0); //                                  h_pageable[i] = 1.0f;
    fill(&mut h_pinned, |_| 1.0); //                                    h_pinned[i] = 1.0f;

    // Compare Transfer Speeds: each copy and its events on one stream, the copy waited for.
    let streams = gpu.streams(1)?;
    let mut times = Vec::new();
    // Pageable transfer (synchronous only!), then pinned transfer (can be async!)
    for (label, h_data) in [("Pageable H2D:", &h_pageable[..]), ("Pinned H2D:  ", &h_pinned[..])] {
        let ms = gpu.scope(&streams, |s| {
            let stream = s.stream(0);
            let start = stream.record_event()?; //                      cudaEventRecord(start)
            stream.htod(h_data, s.device(&mut d_data))?; //             cudaMemcpy(d_data, h_data, BYTES, H2D)
            let stop = stream.record_event()?; //                       cudaEventRecord(stop)
            stream.synchronize()?; //                                   cudaEventSynchronize(stop)
            s.elapsed_ms(start, stop) //                                cudaEventElapsedTime(&ms, start, stop)
        })?;
        // printf("%s %.2f ms (%.2f GB/s)\n", label, ms, BYTES / ms / 1e6)
        out.say(format!("pinned_memory.cu: {label} {ms:.2} ms ({:.2} GB/s)", BYTES as f64 / ms / 1e6));
        times.push(ms);
    }
    // Cleanup: free(h_pageable), cudaFreeHost(h_pinned), cudaFree(d_data), each as it drops.
    Ok(Original { pageable_htod_ms: times[0], pinned_htod_ms: times[1] })
}

/// The program, then the exercise: the rig sweeps the sizes (`rig.rs`).
fn pinned_memory(args: &Args, out: &Output) -> anyhow::Result<()> {
    let rig = PinnedRig::start(out, args)?;
    let original = pinned_memory_cu(&rig.gpu, out)?;
    rig.sweep(out, original)
}
