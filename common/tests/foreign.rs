//! Streams and device memory another library made, borrowed into scopes (`Stream::borrow_raw`,
//! `DeviceBuffer::borrow_raw`): they work there as ours do, dropping them leaves them to their owner,
//! and what the driver can tell is wrong with them is refused. The "other library" here is the driver
//! API called directly, as a C library would. Each needs an NVIDIA GPU: without one they are reported
//! as ignored, and `cargo xtask test` runs them where it finds a driver.

mod support;

use std::ffi::c_void;

use cuda_scope::{DeviceBuffer, Error, Gpu, Refusal, Refused, Stream};
use support::driver as ffi;
use support::TestKernels;

fn gpu() -> (Gpu, std::sync::MutexGuard<'static, ()>) {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let lock = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    (Gpu::init().expect("these tests need a GPU"), lock)
}

fn ok(code: ffi::CuResult, what: &str) {
    assert_eq!(code, ffi::SUCCESS, "{what}: {}", ffi::error_name(code));
}

/// What another library holds: a non-blocking stream and `n` f32s of device memory, in the current
/// context; destroyed and freed on drop, as their owner would.
struct Foreign {
    stream: ffi::CUstream,
    x: ffi::CUdeviceptr,
    y: ffi::CUdeviceptr,
    n: usize,
}

impl Foreign {
    fn new(n: usize) -> Foreign {
        let (mut stream, mut x, mut y) = (std::ptr::null_mut(), 0, 0);
        // SAFETY: valid out-pointers, the driver's own flag, nonzero sizes; the Gpu made its context current.
        unsafe {
            ok(ffi::cuStreamCreate(&mut stream, ffi::CU_STREAM_NON_BLOCKING), "creating a stream");
            ok(ffi::cuMemAlloc_v2(&mut x, n * 4), "allocating x");
            ok(ffi::cuMemAlloc_v2(&mut y, n * 4), "allocating y");
        }
        Foreign { stream, x, y, n }
    }

    /// The stream as a foreign library hands it out.
    fn raw_stream(&self) -> *mut c_void {
        self.stream.cast()
    }

    /// A round trip through the foreign handles alone: `src` up into `dst` on the foreign stream, and
    /// back; proves both still live.
    fn round_trip(&self, dst: ffi::CUdeviceptr, src: &[f32]) -> Vec<f32> {
        let mut back = vec![0f32; src.len()];
        // SAFETY: `src` and `back` are live for the copies, which are synchronized before they go; `dst`
        // holds `n` f32s and src.len() <= n.
        unsafe {
            assert!(src.len() <= self.n);
            ok(ffi::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len() * 4, self.stream), "copying up");
            ok(ffi::cuMemcpyDtoHAsync_v2(back.as_mut_ptr().cast(), dst, src.len() * 4, self.stream), "copying back");
            ok(ffi::cuStreamSynchronize(self.stream), "waiting for the foreign stream");
        }
        back
    }

    /// `n` f32s of `y`, read on the foreign stream.
    fn read_y(&self) -> Vec<f32> {
        let mut back = vec![0f32; self.n];
        // SAFETY: `back` is live until the stream is synchronized; `y` holds `n` f32s.
        unsafe {
            ok(ffi::cuMemcpyDtoHAsync_v2(back.as_mut_ptr().cast(), self.y, self.n * 4, self.stream), "reading y");
            ok(ffi::cuStreamSynchronize(self.stream), "waiting for the foreign stream");
        }
        back
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        // SAFETY: made once in `new`, released once; nothing borrowed of them is alive (the tests drop
        // their borrowed values first).
        unsafe {
            ffi::cuStreamSynchronize(self.stream);
            ffi::cuMemFree_v2(self.x);
            ffi::cuMemFree_v2(self.y);
            ffi::cuStreamDestroy_v2(self.stream);
        }
    }
}

/// A foreign stream and foreign buffers in a scope beside a stream of ours: x goes up on our stream, y
/// on the foreign one, saxpy runs on the foreign one (the scope orders it after x's upload), and the
/// result comes back exact. Then the borrowed values are dropped, and the foreign stream and memory
/// still work, through the driver alone and borrowed again into a second scope.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_foreign_stream_and_buffers_run_copies_and_a_kernel_in_a_scope_and_stay_their_owners() {
    let (gpu, _lock) = gpu();
    let kernels = TestKernels::load(&gpu);
    let n = 1_000_003;
    let foreign = Foreign::new(n);
    let x = gpu.pinned_from_fn(n, |i| (i % 1000) as f32).unwrap();
    let y = gpu.pinned_from_fn(n, |i| (i % 7) as f32).unwrap();
    let mut out = gpu.pinned::<f32>(n).unwrap();
    let expect = |i: usize| 2.0 * (i % 1000) as f32 + (i % 7) as f32;
    // SAFETY: live handles of the GPU's primary context, which `foreign` keeps alive until after these
    // are dropped, and which nothing else touches meanwhile.
    let (borrowed, mut d_x, mut d_y) = unsafe {
        (
            Stream::borrow_raw(&gpu, foreign.raw_stream()).unwrap(),
            DeviceBuffer::<f32>::borrow_raw(&gpu, foreign.x, n).unwrap(),
            DeviceBuffer::<f32>::borrow_raw(&gpu, foreign.y, n).unwrap(),
        )
    };
    assert!(borrowed.is_borrowed() && d_x.is_borrowed() && !gpu.alloc::<f32>(1).unwrap().is_borrowed());
    assert_eq!(borrowed.driver_flags().unwrap(), 1, "the foreign stream's own flags");
    assert!(!borrowed.is_blocking());
    assert!(format!("{borrowed:?}").contains("borrowed") && format!("{d_y:?}").contains("borrowed"));
    let streams = [gpu.streams(1).unwrap().pop().unwrap(), borrowed];
    let waits = gpu
        .scope(&streams, |s| {
            let (dx, dy) = (s.device(&mut d_x), s.device(&mut d_y));
            s.stream(0).htod(&x, dx)?;
            s.stream(1).htod(&y, dy)?;
            kernels.saxpy(s.stream(1), dx, dy, 2.0)?;
            s.stream(1).dtoh(dy, &mut out)?;
            Ok::<_, cuda_scope::Error>(s.waits())
        })
        .unwrap();
    assert_eq!((waits.made, waits.added), (0, 1), "the kernel on the foreign stream waited for x: {waits:?}");
    let wrong = (0..n).filter(|&i| out[i] != expect(i)).count();
    assert_eq!(wrong, 0, "{wrong} of {n} elements differ from the CPU's");

    // Dropped: nothing destroyed or freed. The foreign stream and memory still work through the driver.
    drop((streams, d_x, d_y));
    let y_now = foreign.read_y();
    assert!((0..n).all(|i| y_now[i] == expect(i)), "y holds the scope's result, read on the foreign stream");
    let probe: Vec<f32> = (0..4096).map(|i| i as f32 * 0.5).collect();
    assert_eq!(foreign.round_trip(foreign.x, &probe), probe);

    // And borrowed again, into a second scope, alone: y = 2 * x + y once more, on the foreign stream only.
    // SAFETY: as above.
    let (borrowed, mut d_x, mut d_y) = unsafe {
        (
            Stream::borrow_raw(&gpu, foreign.raw_stream()).unwrap(),
            DeviceBuffer::<f32>::borrow_raw(&gpu, foreign.x, n).unwrap(),
            DeviceBuffer::<f32>::borrow_raw(&gpu, foreign.y, n).unwrap(),
        )
    };
    let streams = [borrowed];
    gpu.scope(&streams, |s| {
        let (dx, dy) = (s.device(&mut d_x), s.device(&mut d_y));
        s.stream(0).htod(&x, dx)?;
        kernels.saxpy(s.stream(0), dx, dy, 2.0)?;
        s.stream(0).dtoh(dy, &mut out)
    })
    .unwrap();
    let wrong = (0..n).filter(|&i| out[i] != 2.0 * (i % 1000) as f32 + expect(i)).count();
    assert_eq!(wrong, 0, "{wrong} of {n} elements differ from the CPU's in the second scope");
    drop((streams, d_x, d_y));
    drop(gpu); // the borrowed values held the context; the foreign handles outlive the Gpu too
    assert_eq!(foreign.round_trip(foreign.y, &probe), probe);
}

/// A part of a foreign allocation may be borrowed; a range that runs past it is refused, as are a null
/// pointer, no elements, a pointer misaligned for the type, a length past usize, and memory that is not
/// device memory (pinned host memory, ordinary host memory).
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_range_past_the_foreign_allocation_and_what_is_not_device_memory_are_refused() {
    let (gpu, _lock) = gpu();
    const BYTES: usize = 2 << 20; // a whole number of the driver's pages: its size is what was asked
    let mut base = 0;
    // SAFETY: a valid out-pointer and a nonzero size; the Gpu made its context current.
    ok(unsafe { ffi::cuMemAlloc_v2(&mut base, BYTES) }, "allocating");
    let n = BYTES / 4;
    let borrow = |ptr: u64, len: usize| {
        // SAFETY: where it is accepted, the memory is `base`'s, freed only at the end of this test, after
        // every borrowed value is gone; no scope runs on it. Refusals touch nothing.
        unsafe { DeviceBuffer::<f32>::borrow_raw(&gpu, ptr, len) }.map_err(|e| match e {
            Error::Refused(r) => r.why,
            Error::TooLarge(t) => Refusal::OutOfBounds { range: 0..t.needed as usize, len: usize::MAX },
            other => panic!("not a refusal: {other}"),
        })
    };
    assert_eq!(borrow(base, n).unwrap().len(), n, "the whole allocation");
    assert_eq!(borrow(base + 4096, n - 2048).unwrap().len(), n - 2048, "its end, from inside it");
    assert_eq!(borrow(base + 4, 10).unwrap().len(), 10, "a part inside it");
    // A range of BYTES bytes from base + 4 runs 4 bytes past the allocation: it holds BYTES - 4 from there.
    assert_eq!(borrow(base + 4, n).unwrap_err(), Refusal::OutOfBounds { range: 0..BYTES, len: BYTES - 4 });
    assert_eq!(borrow(base, n + 1).unwrap_err(), Refusal::OutOfBounds { range: 0..BYTES + 4, len: BYTES });
    assert_eq!(borrow(0, 1).unwrap_err(), Refusal::Null);
    assert_eq!(borrow(base, 0).unwrap_err(), Refusal::Empty);
    assert_eq!(borrow(base + 2, 1).unwrap_err(), Refusal::Misaligned { align: 4 });
    assert!(matches!(borrow(base, usize::MAX / 2).unwrap_err(), Refusal::OutOfBounds { len: usize::MAX, .. }));
    // SAFETY: refused before any promise matters.
    let e = unsafe { DeviceBuffer::<u8>::borrow_raw(&gpu, u64::MAX - 8, 16) }.unwrap_err();
    assert!(matches!(e, Error::TooLarge(ref t) if t.memory == cuda_scope::Memory::Addressable), "{e}");
    let pinned = gpu.pinned::<f32>(1024).unwrap();
    assert_eq!(borrow(pinned.as_ptr() as u64, 1024).unwrap_err(), Refusal::NotDeviceMemory);
    // Not CUDA's at all: the driver knows nothing there (or, where it sees system memory through HMM,
    // knows it as no device memory).
    let refused_as_unknown = |e: &Refusal| matches!(e, Refusal::UnknownMemory | Refusal::NotDeviceMemory);
    let pageable = vec![0f32; 1024];
    let e = borrow(pageable.as_ptr() as u64, 1024).unwrap_err();
    assert!(refused_as_unknown(&e), "{e}");
    // SAFETY: allocated above; every borrowed value of it is gone.
    ok(unsafe { ffi::cuMemFree_v2(base) }, "freeing");
    let e = borrow(base, 1).unwrap_err();
    assert!(refused_as_unknown(&e), "freed memory: {e}");
}

/// The default streams, which name a stream of whichever context is current, are refused; so are a
/// stream and memory of another context (`cuCtxCreate`, as a library with a context of its own would
/// make), checked before any scope could see them.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn default_streams_and_another_contexts_stream_and_memory_are_refused() {
    let (gpu, _lock) = gpu();
    for (raw, named) in [(0usize, "null"), (1, "CU_STREAM_LEGACY"), (2, "CU_STREAM_PER_THREAD")] {
        // SAFETY: refused before any promise matters.
        let e = unsafe { Stream::borrow_raw(&gpu, std::ptr::without_provenance_mut(raw)) }.unwrap_err();
        assert!(matches!(e, Error::Refused(Refused { why: Refusal::DefaultStream, .. })), "{named}: {e}");
    }
    let (mut ctx, mut device) = (std::ptr::null_mut(), 0);
    let (mut stream, mut ptr) = (std::ptr::null_mut(), 0);
    // SAFETY: valid out-pointers; the new context is pushed by cuCtxCreate, the stream and memory made in
    // it, and it is popped again, so that the GPU's context is current as before.
    unsafe {
        ok(ffi::cuDeviceGet(&mut device, gpu.info.ordinal as i32), "opening the device");
        ok(ffi::cuCtxCreate_v2(&mut ctx, 0, device), "creating a context");
        ok(ffi::cuStreamCreate(&mut stream, ffi::CU_STREAM_NON_BLOCKING), "creating a stream in it");
        ok(ffi::cuMemAlloc_v2(&mut ptr, 4096), "allocating in it");
        let mut popped = std::ptr::null_mut();
        ok(ffi::cuCtxPopCurrent_v2(&mut popped), "popping it");
        assert_eq!(popped, ctx);
    }
    // SAFETY: live handles, refused (their context is not the GPU's) before any scope could use them.
    let another =
        |e: &Error| matches!(e, Error::Refused(Refused { why: Refusal::Foreign(cuda_scope::Foreign::Context), .. }));
    let e = unsafe { Stream::borrow_raw(&gpu, stream.cast()) }.unwrap_err();
    assert!(another(&e), "{e}");
    // SAFETY: as above.
    let e = unsafe { DeviceBuffer::<f32>::borrow_raw(&gpu, ptr, 1024) }.unwrap_err();
    assert!(another(&e), "{e}");
    // The GPU still works: the checks left its context current.
    let mut d = gpu.alloc::<f32>(16).unwrap();
    let host = [3f32; 16];
    gpu.scope(&gpu.streams(1).unwrap(), |s| s.stream(0).htod(&host, s.device(&mut d))).unwrap();
    // SAFETY: made above, released once, nothing of them borrowed; destroying the context frees its
    // stream and memory.
    unsafe { ok(ffi::cuCtxDestroy_v2(ctx), "destroying the context") };
}

/// A borrowed stream its owner is capturing into a graph is refused by a scope before anything is
/// queued (the capture would take the scope's copies into a graph to run after the borrows end), and
/// the bare copies of `probe` refuse borrowed streams outright; once the capture ends, a scope runs.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_borrowed_stream_being_captured_is_refused_and_bare_copies_refuse_borrowed_streams() {
    let (gpu, _lock) = gpu();
    let theirs = Foreign::new(1024);
    // SAFETY: the foreign stream lives until `theirs` drops, after `streams`; this test is its owner and
    // touches it only between scopes (the capture is begun and ended with no scope running).
    let streams = [unsafe { Stream::borrow_raw(&gpu, theirs.raw_stream()) }.unwrap()];
    let host = vec![1f32; 1024];
    let mut d = gpu.alloc::<f32>(1024).unwrap();
    // SAFETY: a live stream of ours (as its owner), relaxed capture.
    ok(unsafe { ffi::cuStreamBeginCapture_v2(theirs.stream, ffi::CU_STREAM_CAPTURE_MODE_RELAXED) }, "capturing");
    let e = gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d))).unwrap_err();
    assert!(matches!(&e, Error::Refused(Refused { why: Refusal::Capturing, .. })), "{e}");
    let mut graph = std::ptr::null_mut();
    // SAFETY: the capture begun above, nothing captured into it; the graph destroyed once.
    unsafe {
        ok(ffi::cuStreamEndCapture(theirs.stream, &mut graph), "ending the capture");
        ok(ffi::cuGraphDestroy(graph), "destroying the empty graph");
    }
    gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d))).unwrap();
    let (src, mut back) = (gpu.pinned::<u8>(4096).unwrap(), gpu.pinned::<u8>(4096).unwrap());
    let mut dst = gpu.alloc::<u8>(4096).unwrap();
    let e = cuda_scope::probe::bare_round_trip(&streams[0], &src, &mut dst, &mut back, &[(0..16, 0)]).unwrap_err();
    assert!(matches!(&e, Error::Refused(Refused { why: Refusal::BorrowedStream, .. })), "{e}");
    drop(streams);
}

/// Managed memory is refused by `DeviceBuffer::borrow_raw` (the host can touch it, and the scope would
/// track it as device memory), also where the driver calls it device memory.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn managed_memory_is_not_borrowed_as_device_memory() {
    let (gpu, _lock) = gpu();
    let Ok(m) = gpu.managed::<f32>(1024) else { return eprintln!("no managed memory here: not checked") };
    // SAFETY: refused before any promise matters.
    let e = unsafe { DeviceBuffer::<f32>::borrow_raw(&gpu, m.as_ptr() as u64, 1024) }.unwrap_err();
    assert!(matches!(&e, Error::Refused(Refused { why: Refusal::NotDeviceMemory, .. })), "{e}");
}

/// An observer whose own code runs a scope of its GPU (in `label` or in `record`) makes that scope go
/// unobserved, rather than asking itself again without end or panicking on a borrow.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn an_observer_that_runs_a_scope_of_its_own_gpu_neither_panics_nor_recurses() {
    use std::cell::Cell;
    thread_local! {
        static GPU: Cell<*const Gpu> = const { Cell::new(std::ptr::null()) };
        static RAN: Cell<usize> = const { Cell::new(0) };
    }
    /// Runs a small scope of the thread's GPU from each of its callbacks.
    struct Reentrant;
    fn inner_scope() {
        let gpu = GPU.with(Cell::get);
        // SAFETY: the pointer is to the Gpu the test holds alive for the whole test, set before any
        // scope runs and read only on this thread.
        let gpu = unsafe { &*gpu };
        let (streams, host) = (gpu.streams(1).unwrap(), [1f32; 16]);
        let mut d = gpu.alloc::<f32>(16).unwrap();
        gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d))).unwrap();
        RAN.with(|r| r.set(r.get() + 1));
    }
    impl cuda_scope::Observer for Reentrant {
        fn label(&self) -> String {
            inner_scope();
            "outer".into()
        }
        fn record(&mut self, _: cuda_scope::TimedOp) {
            inner_scope();
        }
    }
    let (mut gpu, _lock) = gpu();
    gpu.observe(Box::new(Reentrant)).unwrap();
    GPU.with(|g| g.set(&gpu as *const Gpu));
    let (streams, host) = (gpu.streams(1).unwrap(), [2f32; 16]);
    let mut d = gpu.alloc::<f32>(16).unwrap();
    gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d))).unwrap();
    assert!(RAN.with(Cell::get) >= 2, "the observer's label and record each ran a scope");
    GPU.with(|g| g.set(std::ptr::null()));
}
