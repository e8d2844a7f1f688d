//! cudarc's stream and device memory, borrowed into `common`'s scope: a program that already holds CUDA
//! handles from another library hands them over without copying, and the scope borrows, orders and
//! synchronizes them as it does its own.
//!
//! cudarc makes a stream and two device buffers (x uploaded, y zeroed); `common` borrows them
//! ([`cuda_scope::Stream::borrow_raw`], [`cuda_scope::DeviceBuffer::borrow_raw`]) and, in one scope on cudarc's
//! stream, uploads y, runs `saxpy` (y = a * x + y, from the test PTX) and downloads y. Then the result
//! is read back through cudarc as well, and both are held against the CPU's.
//!
//! One context for both: `Gpu::init` retains the GPU's primary context, as `cudarc::driver::CudaContext::new`
//! does (and as the CUDA runtime does), so the two libraries share it, whichever starts first, and their
//! handles are of one context. `common` refuses a stream or memory of any other context.
//!
//!     cargo run -p cuda-scope --example cudarc_interop --release
//!
//! Without a GPU it says so in one line and exits with status 3, before cudarc loads anything.

use std::process::ExitCode;

use cuda_scope::{DeviceBuffer, Gpu, LaunchConfig, Stream};
use cudarc::driver::{CudaContext, DevicePtr, DevicePtrMut};

// extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned long long n)
const PTX: &str = include_str!("../tests/ptx/kernels.ptx");
const PROTOTYPES: &str = include_str!("../tests/kernels.cu");

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cudarc_interop: {e:#}");
            match e.downcast_ref::<cuda_scope::Error>() {
                Some(core) if core.is_no_gpu() => ExitCode::from(3),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn run() -> anyhow::Result<String> {
    // common first: it says in one line why there is no GPU, where cudarc would only fail to load libcuda.
    let gpu = Gpu::init()?; // the primary context of CUDA_DEVICE (default 0)
    let saxpy = gpu.load_ptx_with_prototypes(PTX, PROTOTYPES)?.kernel("saxpy")?;

    // cudarc: the same GPU's primary context, a stream of its own, and two buffers.
    let ctx = CudaContext::new(gpu.info.ordinal as usize)?;
    let stream = ctx.new_stream()?; // non-blocking; cudarc's default_stream() is the null stream, refused
    let n = 1 << 20;
    let a = 2.0f32;
    let x_host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let y_host = gpu.pinned_from_fn(n, |i| (i % 7) as f32)?;
    let x = stream.clone_htod(&x_host)?; // uploaded by cudarc, on its stream
    let mut y = stream.alloc_zeros::<f32>(n)?;
    let mut out = gpu.pinned::<f32>(n)?;

    // The raw handles. cudarc's guards record its read and write events on `stream` when dropped: held
    // until common's scope has run, they mark that work for cudarc's later users; and they borrow the
    // CudaSlices, which therefore cannot be freed while common holds their memory.
    let (x_ptr, x_read) = x.device_ptr(&stream);
    let (y_ptr, y_written) = y.device_ptr_mut(&stream);
    // SAFETY: the stream and both allocations are cudarc's, in the primary context the Gpu retains too;
    // the guards above keep the CudaSlices (and the stream they borrow) alive until after the borrowed
    // values are dropped; nothing of cudarc's touches them, or queues on the stream, while the scope
    // runs, and what cudarc queued before (x's upload) is on the same stream, ahead of the scope's work.
    let (streams, mut dx, mut dy) = unsafe {
        (
            [Stream::borrow_raw(&gpu, stream.cu_stream().cast())?],
            DeviceBuffer::<f32>::borrow_raw(&gpu, x_ptr, n)?,
            DeviceBuffer::<f32>::borrow_raw(&gpu, y_ptr, n)?,
        )
    };
    gpu.scope(&streams, |s| {
        let (dx, dy) = (s.device(&mut dx), s.device(&mut dy));
        let on = s.stream(0); // cudarc's stream
        on.htod(&y_host, dy)?;
        let cfg = LaunchConfig::for_elements(n, 256);
        // SAFETY: saxpy reads x[0..n) and writes y[0..n), nothing else (tests/kernels.cu).
        unsafe { on.kernel(&saxpy, cfg).read(dx).write(dy).value(a).value(n as u64).launch()? };
        on.dtoh(dy, &mut out)
    })?; // cudarc's stream synchronized: out is ready, and the memory is cudarc's alone again
    drop((streams, dx, dy)); // nothing destroyed or freed: cudarc's still
    drop((x_read, y_written)); // cudarc records its events, after the scope's work

    let through_cudarc = stream.clone_dtoh(&y)?;
    let expect = |i: usize| a * x_host[i] + y_host[i];
    let wrong_common = (0..n).filter(|&i| out[i] != expect(i)).count();
    let wrong_cudarc = (0..n).filter(|&i| through_cudarc[i] != expect(i)).count();
    if wrong_common + wrong_cudarc > 0 {
        anyhow::bail!(
            "{wrong_common} elements read through common and {wrong_cudarc} through cudarc differ from the CPU's \
             (of {n})"
        );
    }
    Ok(format!(
        "cudarc_interop: saxpy on cudarc's stream and buffers in common's scope, {n} elements on {}: read back \
         through common and through cudarc, both equal to the CPU's",
        gpu.info.name
    ))
}
