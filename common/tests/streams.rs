//! Streams really are what they say: `Gpu::streams` makes non-blocking streams, which run concurrently
//! with the legacy default stream, and `Gpu::blocking_streams` makes streams that synchronize with it.
//! Another library's `cudaMemcpy` (legacy default stream) during a long kernel shows the difference.
//! And a download can be handed back to the host mid-scope, once its copy has finished (`dtoh_pending`).

use std::time::Instant;

mod support;

use cuda_scope::{Gpu, Stream};
use support::TestKernels;

/// A 4-byte synchronous `cuMemcpyHtoD` on the legacy default stream, as code that knows nothing of our
/// streams would make it; returns how long the host waited, in ms.
fn legacy_copy_ms() -> f64 {
    type Alloc = unsafe extern "C" fn(*mut u64, usize) -> i32;
    type Copy = unsafe extern "C" fn(u64, *const std::ffi::c_void, usize) -> i32;
    type Free = unsafe extern "C" fn(u64) -> i32;
    let (mut d, x) = (0u64, 1f32);
    // SAFETY: the driver's library, opened as another library would; its entry points by the symbols
    // and signatures cuda.h gives them (PFN_cuMemAlloc_v3020, PFN_cuMemcpyHtoD_v3020,
    // PFN_cuMemFree_v3020); a 4-byte allocation in the current context (the scope made it current),
    // one copy into it from a live local, and its release.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1").unwrap();
        let alloc = *lib.get::<Alloc>(b"cuMemAlloc_v2\0").unwrap();
        let copy = *lib.get::<Copy>(b"cuMemcpyHtoD_v2\0").unwrap();
        let free = *lib.get::<Free>(b"cuMemFree_v2\0").unwrap();
        assert_eq!(alloc(&mut d, 4), 0);
        let t = Instant::now();
        assert_eq!(copy(d, (&x as *const f32).cast(), 4), 0);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        free(d);
        ms
    }
}

/// (kernel ms, legacy copy ms) for a long kernel on `streams[0]` with a legacy copy queued behind it.
fn copy_behind_a_kernel(gpu: &Gpu, kernels: &TestKernels, streams: &[Stream], iters: u32) -> (f64, f64) {
    let mut d = gpu.alloc::<f32>(1 << 22).unwrap();
    let kernel = gpu.timed(streams, |s| kernels.busy(s.stream(0), s.device(&mut d), iters)).unwrap();
    let copy = gpu
        .scope(streams, |s| {
            kernels.busy(s.stream(0), s.device(&mut d), iters)?;
            Ok::<_, cuda_scope::Error>(legacy_copy_ms())
        })
        .unwrap();
    (kernel, copy)
}

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn non_blocking_streams_do_not_hold_back_the_legacy_stream_and_blocking_ones_do() {
    let gpu = Gpu::init().unwrap();
    let kernels = TestKernels::load(&gpu);
    let (free, blocking) = (gpu.streams(1).unwrap(), gpu.blocking_streams(1).unwrap());
    assert_eq!(free[0].driver_flags().unwrap(), 1, "CU_STREAM_NON_BLOCKING, as the driver reports it");
    assert_eq!(blocking[0].driver_flags().unwrap(), 0);
    // A kernel of at least 50 ms: time 2000 rounds, then scale.
    let mut d = gpu.alloc::<f32>(1 << 22).unwrap();
    let trial = gpu.timed(&free, |s| kernels.busy(s.stream(0), s.device(&mut d), 2000)).unwrap();
    let iters = (2000.0 * 60.0 / trial).clamp(2000.0, 5e7) as u32;
    let (kernel, copy) = copy_behind_a_kernel(&gpu, &kernels, &free, iters);
    eprintln!("non-blocking stream: kernel {kernel:.1} ms, legacy copy behind it waited {copy:.3} ms");
    assert!(kernel > 40.0, "the kernel must be long enough to see ({kernel} ms)");
    assert!(
        copy < kernel / 4.0,
        "a copy on the legacy stream waited {copy} ms for a {kernel} ms kernel on a non-blocking stream"
    );
    let (kernel, copy) = copy_behind_a_kernel(&gpu, &kernels, &blocking, iters);
    eprintln!("blocking stream: kernel {kernel:.1} ms, legacy copy behind it waited {copy:.3} ms");
    assert!(
        copy > kernel / 2.0,
        "a copy on the legacy stream waited only {copy} ms for a {kernel} ms kernel on a blocking stream"
    );
}

/// A pending download handed back once its copy has finished (`dtoh_pending`): each piece is the host's, with the right
/// bytes, while the scope's later work (a long kernel queued behind it) still runs.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_pending_download_hands_its_piece_back_while_later_work_runs() {
    let gpu = cuda_scope::Gpu::init().expect("these tests need a GPU");
    let k = TestKernels::load(&gpu);
    let streams = gpu.streams(2).unwrap();
    let n = 1 << 20;
    let h = gpu.pinned_from_fn(n, |i| (i % 1000) as f32).unwrap();
    let mut back = gpu.pinned::<f32>(n).unwrap();
    let (mut d, mut busy) = (gpu.alloc::<f32>(n).unwrap(), gpu.alloc::<f32>(1 << 16).unwrap());
    let (sum, idle_when_handed_back) = gpu
        .scope(&streams, |s| {
            let (v, st) = (s.device(&mut d), s.stream(0));
            st.htod(&h, v)?;
            let (first, second) = back.split_at_mut(n / 2);
            let a = st.dtoh_pending(v.slice(0..n / 2), first)?;
            let b = s.stream(1).dtoh_pending(v.slice(n / 2..n), second)?; // the scope orders it after the upload
            k.busy(st, s.device(&mut busy), 2_000_000)?; // milliseconds: still running when the pieces arrive
            let first = a.wait()?;
            let second = b.wait()?;
            let idle = s.is_idle()?;
            let sum: f64 = first.iter().chain(second.iter()).map(|x| *x as f64).sum();
            first[0] = -1.0; // the host's to write again
            Ok::<_, cuda_scope::Error>((sum, idle))
        })
        .unwrap();
    let expected: f64 = (0..n).map(|i| (i % 1000) as f64).sum();
    assert_eq!(sum, expected, "every element handed back");
    assert!(!idle_when_handed_back, "the pieces were handed back while the kernel queued after them still ran");
    assert_eq!(back[0], -1.0);
}
