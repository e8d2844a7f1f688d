//! Kernels of one's own, from PTX, through the scope: ordered across streams like copies, held against
//! their `.entry` signature, and refused where their views overlap. Each needs an NVIDIA GPU: without
//! one they are reported as ignored, and `cargo xtask test` runs them where it finds a driver.

mod support;

use common::{Dev, Gpu, LaunchConfig, ScopeStream};
use support::{busy_cpu, TestKernels, PTX};

fn gpu() -> (Gpu, std::sync::MutexGuard<'static, ()>) {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let lock = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    (Gpu::init().expect("these tests need a GPU"), lock)
}

/// saxpy from a PTX string on two streams: x is uploaded on stream 0, y on stream 1, and the kernel on
/// stream 1 reads x, which nothing of the program orders; the scope adds the wait, and the result is
/// exact.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_kernel_of_ones_own_on_two_streams_is_ordered_by_the_scope() {
    let (gpu, _lock) = gpu();
    let saxpy = gpu.load_ptx(PTX).unwrap().kernel("saxpy").unwrap();
    let n = 3_000_017;
    let x = gpu.pinned_from_fn(n, |i| (i % 1000) as f32).unwrap();
    let y = gpu.pinned_from_fn(n, |i| (i % 7) as f32).unwrap();
    let mut out = gpu.pinned::<f32>(n).unwrap();
    let (mut d_x, mut d_y) = (gpu.alloc::<f32>(n).unwrap(), gpu.alloc::<f32>(n).unwrap());
    let streams = gpu.streams(2).unwrap();
    let waits = gpu
        .scope(&streams, |s| {
            let (dx, dy) = (s.device(&mut d_x), s.device(&mut d_y));
            s.stream(0).htod(&x, dx)?;
            s.stream(1).htod(&y, dy)?;
            let cfg = LaunchConfig::for_elements(n, 256);
            // SAFETY: saxpy reads x[0..n) and writes y[0..n).
            unsafe { s.stream(1).kernel(&saxpy, cfg).read(dx).write(dy).value(2.0f32).value(n as u64).launch()? };
            s.stream(1).dtoh(dy, &mut out)?;
            Ok(s.waits())
        })
        .unwrap();
    assert_eq!((waits.made, waits.added), (0, 1), "{waits:?}");
    let first = waits.first_added.unwrap();
    assert!(first.contains("kernel saxpy on stream 1 reads") && first.contains("memcpy HtoD on stream 0"), "{first}");
    let wrong = (0..n).filter(|&i| out[i] != 2.0 * (i % 1000) as f32 + (i % 7) as f32).count();
    assert_eq!(wrong, 0, "{wrong} of {n} elements differ from the CPU's");
}

/// Arguments that do not match the PTX's `.entry` are refused before anything is queued, with the
/// first that does not match named; so are an oversized grid and a missing kernel.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn arguments_that_do_not_match_the_ptx_are_refused_before_anything_runs() {
    let (gpu, _lock) = gpu();
    let module = gpu.load_ptx(PTX).unwrap();
    let saxpy = module.kernel("saxpy").unwrap();
    let e = module.kernel("sxapy").unwrap_err().to_string();
    assert!(e.contains("no kernel named sxapy") && e.contains("saxpy, busy, fault"), "{e}");
    let streams = gpu.streams(1).unwrap();
    let (mut a, mut b) = (gpu.alloc::<f32>(64).unwrap(), gpu.alloc::<f32>(64).unwrap());
    let cfg = LaunchConfig::for_elements(64, 64);
    type Launcher<'k> = dyn for<'s, 'e> Fn(ScopeStream<'s, 'e>, Dev<'s, f32>, Dev<'s, f32>) -> anyhow::Result<()> + 'k;
    let mut refused = |f: &Launcher| -> String {
        let mut b_host = vec![7f32; 64];
        let e = gpu.scope(&streams, |s| f(s.stream(0), s.device(&mut a), s.device(&mut b))).unwrap_err();
        // Nothing ran: b is still zeros.
        gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut b), &mut b_host)).unwrap();
        assert!(b_host.iter().all(|v| *v == 0.0), "the refused launch wrote b");
        format!("{e:#}")
    };
    // SAFETY: refused before it is queued (as the test checks).
    let e = refused(&|st, x, y| unsafe { st.kernel(&saxpy, cfg).read(x).write(y).value(2.0f32).launch() });
    assert!(e.contains("kernel saxpy: takes 4 arguments and was given 3"), "{e}");
    // SAFETY: refused before it is queued (as the test checks).
    let e = refused(&|st, x, y| unsafe { st.kernel(&saxpy, cfg).read(x).write(y).value(64u64).value(64u64).launch() });
    assert!(e.contains("argument 2 is u64, but the PTX declares it .f32"), "{e}");
    // SAFETY: refused before it is queued (as the test checks).
    let e = refused(&|st, x, y| unsafe { st.kernel(&saxpy, cfg).read(x).write(y).value(2.0f32).value(64u32).launch() });
    assert!(e.contains("argument 3 is u32, but the PTX declares it .u64"), "{e}");
    // SAFETY: refused before it is queued (as the test checks).
    let e = refused(&|st, _, y| unsafe {
        st.kernel(&saxpy, cfg).value(1.0f64).write(y).value(2.0f32).value(64u64).launch()
    });
    assert!(e.contains("argument 0 is f64"), "{e}");
    let huge = LaunchConfig::for_elements(usize::MAX, 1);
    // SAFETY: refused before it is queued (as the test checks).
    let e =
        refused(&|st, x, y| unsafe { st.kernel(&saxpy, huge).read(x).write(y).value(2.0f32).value(64u64).launch() });
    assert!(e.contains("is more than a GPU runs"), "{e}");
}

/// One launch may not read and write overlapping bytes of one buffer; disjoint halves are fine.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn overlapping_read_and_write_views_are_refused() {
    let (gpu, _lock) = gpu();
    let k = TestKernels::load(&gpu);
    let streams = gpu.streams(1).unwrap();
    let mut d = gpu.alloc::<f32>(1024).unwrap();
    let e = gpu
        .scope(&streams, |s| {
            let v = s.device(&mut d);
            k.saxpy(s.stream(0), v.slice(0..512), v.slice(256..768), 1.0)
        })
        .unwrap_err();
    assert!(format!("{e:#}").contains("reads and writes overlapping bytes"), "{e:#}");
    gpu.scope(&streams, |s| {
        let v = s.device(&mut d);
        k.saxpy(s.stream(0), v.slice(0..512), v.slice(512..1024), 1.0)
    })
    .unwrap();
}

/// A module and its kernel dropped while their launch may still run: the scope keeps the module
/// loaded until its streams are synchronized, and the result is right.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_module_dropped_inside_the_scope_stays_loaded_until_the_work_is_done() {
    let (gpu, _lock) = gpu();
    let streams = gpu.streams(1).unwrap();
    let n = 1 << 20;
    let h = gpu.pinned_from_fn(n, |i| (i % 100) as f32 / 100.0).unwrap();
    let mut back = gpu.pinned::<f32>(n).unwrap();
    let mut d = gpu.alloc::<f32>(n).unwrap();
    gpu.scope(&streams, |s| {
        let module = gpu.load_ptx(PTX)?;
        let k = TestKernels::load(&gpu);
        let v = s.device(&mut d);
        s.stream(0).htod(&h, v)?;
        k.busy(s.stream(0), v, 2000)?;
        drop((module, k)); // every handle of the module is gone while the kernel may run
        s.stream(0).dtoh(v, &mut back)
    })
    .unwrap();
    let wrong = (0..n).filter(|&i| back[i] != busy_cpu(h[i], 2000)).count();
    assert_eq!(wrong, 0);
}
