//! Lesson 5: zero-copy mapped memory, as the course's day43_ZeroCopyExample.cu has a kernel scale mapped
//! host memory (`cudaHostAllocMapped`, `cudaHostGetDevicePointer`; `zero_copy_example_cu` below is that
//! program in Rust), and as NVIDIA's simpleZeroCopy sample does.
//!
//! Pinned memory allocated with the mapped flag (`cudaHostAlloc(..., cudaHostAllocMapped)`) has a
//! device address too (`cudaHostGetDevicePointer`): a kernel can read and write it across the bus,
//! with no explicit copy. Whether that beats "copy in, compute, copy out" depends on how often the
//! kernel touches the data: each access crosses the bus again. This lesson sweeps sizes for a one-pass
//! kernel (out = 2 in) and a two-pass one (then out += in), and says where each approach wins (its rig).
//!
//!     cargo run --release --example zero_copy [-- --min 64KiB --max 256MiB]

mod rig;

use std::process::ExitCode;

use clap::Parser;
use cuda_scope::{Gpu, HostAlloc};
use kernels::Kernels;
use measure::args::{RunArgs, SweepArgs};
use measure::{report::Output, verify};
use rig::{Original, ZeroCopyRig};

/// Mapped host memory against copy in, compute, copy out, over sizes (64 KiB to 64 MiB unless given).
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    sizes: SweepArgs,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(zero_copy)
}

/// day43_ZeroCopyExample.cu: 1M floats in mapped host memory, a kernel that writes twice each into
/// another mapped buffer straight across the bus, no copy; then the host reads the first result.
fn zero_copy_example_cu(gpu: &Gpu, kernels: &Kernels, out: &Output) -> anyhow::Result<Original> {
    // int N=1<<20; rand() % 100 as a fixed stand-in, so that every run checks the same numbers.
    const N: usize = 1 << 20;
    let rand = |i: usize| (((i + 1).wrapping_mul(2654435761) >> 7) % 100) as f32;

    // 1) Allocate host memory with zero-copy
    let mut h_in = gpu.pinned_with::<f32>(N, HostAlloc::MAPPED)?; //   cudaHostAlloc(&h_in, size, cudaHostAllocMapped)
    let mut h_out = gpu.pinned_with::<f32>(N, HostAlloc::MAPPED)?; //  cudaHostAlloc(&h_out, size, cudaHostAllocMapped)

    // 2) Initialize h_in
    cuda_scope::host::fill(&mut h_in, rand); //                             h_in[i] = (float)(rand()%100);
    h_out.fill(0.0); //                                                 h_out[i] = 0.0f;

    let streams = gpu.streams(1)?; //                                   the stream the kernel goes on
    gpu.scope(&streams, |s| {
        // 3) Get device pointers for them
        let d_in = s.mapped(&mut h_in)?; //                             cudaHostGetDevicePointer(&d_in, h_in, 0)
        let d_out = s.mapped(&mut h_out)?; //                           cudaHostGetDevicePointer(&d_out, h_out, 0)

        // 4) Launch kernel that directly accesses host memory
        kernels.scale(s.stream(0), d_in, d_out, 2.0) //                 zeroCopyKernel<<<..>>>(d_in, d_out, N)
    })?; //                                                             cudaDeviceSynchronize()

    // 5) Now h_out should contain the results (no explicit memcpy)
    out.say(format!("day43_ZeroCopyExample.cu: h_out[0]= {:.6}", h_out[0])); // printf("h_out[0]= %f\n", h_out[0])
    verify::exact(&h_out, |i| rand(i) * 2.0).ensure()?; //              every element, which the program trusts

    // Cleanup: cudaFreeHost(h_in), cudaFreeHost(h_out), each as it drops.
    Ok(Original { h_out_0: h_out[0] })
}

/// The program, then the exercise: the rig sweeps the sizes, one pass and two (`rig.rs`).
fn zero_copy(args: &Args, out: &Output) -> anyhow::Result<()> {
    let rig = ZeroCopyRig::start(out, args)?;
    let original = zero_copy_example_cu(&rig.gpu, &rig.kernels, out)?;
    rig.sweep(out, original)
}
