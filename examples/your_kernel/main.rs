//! Your own kernel through `common`'s scope: the program to copy into yours.
//!
//! A kernel written in CUDA C++ (`your_kernel.cu`, compiled with `nvcc -ptx`), loaded from its PTX, and
//! run as CUDA C++ would run it with two streams: stream 0 uploads, stream 1 waits for that upload,
//! smooths, and downloads. The scope borrows every buffer until the GPU is done with it, holds the
//! launch's arguments against the kernel's signature in the PTX and its prototype in `your_kernel.cu`
//! (which parameters are pointers), and orders the streams by the event
//! the program records (it would add the wait itself if the program forgot). Then the CPU checks every
//! element.
//!
//!     cargo run --release --example your_kernel

use cuda_scope::{Gpu, LaunchConfig};

// extern "C" __global__ void smooth(const float* in, float* out, unsigned long long n)
const PTX: &str = include_str!("your_kernel.ptx");

fn main() -> anyhow::Result<()> {
    let gpu = Gpu::init()?; //                                 cudaSetDevice(0), with a clear error without one

    // cuModuleLoadData and cuModuleGetFunction; the prototype in the .cu says which parameters are pointers,
    // so a count passed for a buffer (or a buffer for the count) is refused at launch.
    let smooth = gpu.load_ptx_with_prototypes(PTX, include_str!("your_kernel.cu"))?.kernel("smooth")?;
    let n = 10_000_000;
    let h_in = gpu.pinned_from_fn(n, |i| ((i * 7919) % 1000) as f32)?; // cudaMallocHost, filled
    let mut h_out = gpu.pinned::<f32>(n)?; //                             cudaMallocHost
    let (mut d_in, mut d_out) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?); // cudaMalloc
    let streams = gpu.streams(2)?; //                          cudaStreamCreateWithFlags(.., cudaStreamNonBlocking)

    let waits = gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let (input, output) = (s.device(&mut d_in), s.device(&mut d_out)); // lent until the scope ends
        let (copy, work) = (s.stream(0), s.stream(1)); //      streams[0] and streams[1]
        copy.htod(&h_in, input)?; //                           cudaMemcpyAsync(d_in, h_in, .., H2D, streams[0])
        let uploaded = copy.record_event()?; //                cudaEventRecord(uploaded, streams[0])
        work.wait_event(uploaded)?; //                         cudaStreamWaitEvent(streams[1], uploaded)
        let config = LaunchConfig::for_elements(n, 256); //    <<<(n + 255) / 256, 256>>>

        // SAFETY: smooth reads in[0..n) and writes out[0..n), and nothing else (your_kernel.cu).
        unsafe { work.kernel(&smooth, config).read(input).write(output).value(n as u64).launch()? }; // smooth<<<..>>>
        work.dtoh(output, &mut h_out)?; //                     cudaMemcpyAsync(h_out, d_out, .., D2H, streams[1])
        Ok(s.waits())
    })?; //                                                    every stream synchronized: h_out is ready

    // The CPU's answer, element by element, as the kernel computes it.
    let at = |i: usize| h_in[i.min(n - 1)];
    let expected = |i: usize| (at(i.saturating_sub(1)) + h_in[i] + at(i + 1)) / 3.0;
    let wrong = (0..n).filter(|&i| h_out[i] != expected(i)).count();
    println!("smoothed {n} floats on {}: {} of them differ from the CPU's", gpu.info.name, wrong);
    println!("{}", waits.summary());
    anyhow::ensure!(wrong == 0, "{wrong} elements differ from the CPU's");
    Ok(())
}
