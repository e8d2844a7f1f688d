//! Kernels of one's own, from PTX, through the scope: ordered across streams like copies, held against
//! their parameters as the driver compiled them (and their C prototypes where given), and refused where
//! their views overlap. Each needs an NVIDIA GPU: without one they are reported as ignored, and
//! `cargo xtask test` runs them where it finds a driver.

mod support;

use cuda_scope::{Dev, Gpu, LaunchConfig, ScopeStream};
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
            Ok::<_, cuda_scope::Error>(s.waits())
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
    let mut refused = |f: &Launcher| refusal(&gpu, &streams, (&mut a, &mut b), f);
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

/// A launch to be refused: given a stream and two views, it declares its arguments and launches.
type Launcher<'k> = dyn for<'s, 'e> Fn(ScopeStream<'s, 'e>, Dev<'s, f32>, Dev<'s, f32>) -> cuda_scope::Result<()> + 'k;

/// What the launch `f` on `a` and `b` (zeros) is refused with, after checking that nothing ran: `b` is
/// still zeros.
fn refusal(
    gpu: &Gpu,
    streams: &[cuda_scope::Stream],
    (a, b): (&mut cuda_scope::DeviceBuffer<f32>, &mut cuda_scope::DeviceBuffer<f32>),
    f: &Launcher,
) -> String {
    let mut b_host = vec![7f32; 64];
    let e = gpu.scope(streams, |s| f(s.stream(0), s.device(a), s.device(b))).unwrap_err();
    gpu.scope(streams, |s| s.stream(0).dtoh(s.device(b), &mut b_host)).unwrap();
    assert!(b_host.iter().all(|v| *v == 0.0), "the refused launch wrote b");
    format!("{e:#}")
}

/// Issue 24's spoofs (`tests/ptx/spoof_*.ptx`), valid PTX that a reading of the text which did not know
/// PTX's strings and whitespace took for spoof(out), where ptxas compiles spoof(out, secret): a `.file`
/// name holding `/*` before the kernel and `*/` after it, and a fake `.entry` in a `.file` name with the
/// real one after `.entry` and a TAB, or a newline. A launch of one argument, which had the driver read
/// a second past the argument array, is refused before anything is queued; the kernel's two arguments
/// run it, and it writes what it was given.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn spoofed_ptx_is_read_as_the_driver_compiled_it() {
    let (gpu, _lock) = gpu();
    let streams = gpu.streams(1).unwrap();
    let spoofs = [
        ("spoof_comment.ptx", include_str!("ptx/spoof_comment.ptx")),
        ("spoof_tab.ptx", include_str!("ptx/spoof_tab.ptx")),
        ("spoof_newline.ptx", include_str!("ptx/spoof_newline.ptx")),
    ];
    for (file, ptx) in spoofs {
        let module = gpu.load_ptx(ptx).unwrap();
        assert_eq!(module.kernel_names().collect::<Vec<_>>(), ["spoof"], "{file}");
        let spoof = module.kernel("spoof").unwrap();
        assert_eq!(format!("{spoof:?}"), "spoof(.u64, .u64)", "{file}");
        let mut out = gpu.alloc::<u64>(1).unwrap();
        let mut back = vec![7u64];
        let e = gpu
            .scope(&streams, |s| {
                let o = s.device(&mut out);
                // SAFETY: refused before it is queued (as the test checks).
                unsafe { s.stream(0).kernel(&spoof, LaunchConfig::linear(1, 1)).write(o).launch() }
            })
            .unwrap_err();
        assert!(format!("{e:#}").contains("kernel spoof: takes 2 arguments and was given 1"), "{file}: {e:#}");
        gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut out), &mut back)).unwrap();
        assert_eq!(back, [0], "{file}: the refused launch ran");
        gpu.scope(&streams, |s| {
            let (o, st) = (s.device(&mut out), s.stream(0));
            // SAFETY: spoof(out, secret) writes out[0] and nothing else.
            unsafe { st.kernel(&spoof, LaunchConfig::linear(1, 1)).write(o).value(0x5EC2E7u64).launch()? };
            st.dtoh(o, &mut back)
        })
        .unwrap();
        assert_eq!(back, [0x5EC2E7], "{file}");
    }
}

/// A launch with one argument fewer than the compiled kernel takes is refused before anything is
/// queued, whatever the arguments given are.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn one_argument_fewer_than_the_compiled_kernel_takes_is_refused() {
    let (gpu, _lock) = gpu();
    let busy = gpu.load_ptx(PTX).unwrap().kernel("busy").unwrap();
    let streams = gpu.streams(1).unwrap();
    let h = vec![1.5f32; 256];
    let mut back = vec![0f32; 256];
    let mut d = gpu.alloc::<f32>(256).unwrap();
    let e = gpu
        .scope(&streams, |s| {
            let v = s.device(&mut d);
            s.stream(0).htod(&h, v)?;
            // SAFETY: refused before it is queued (as the test checks).
            unsafe { s.stream(0).kernel(&busy, LaunchConfig::linear(1, 256)).write(v).value(256u64).launch() }
        })
        .unwrap_err();
    assert!(format!("{e:#}").contains("kernel busy: takes 3 arguments and was given 2"), "{e:#}");
    gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d), &mut back)).unwrap();
    assert!(back.iter().all(|v| *v == 1.5), "the refused launch ran");
}

/// With the kernels' C prototypes (given, or the `.cu` beside a `.ptx` file), a value passed for a
/// pointer, or a view for a value, is refused before anything is queued; a prototype of another
/// version of the kernel refuses the kernel.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn with_its_prototype_a_value_for_a_pointer_is_refused() {
    let (gpu, _lock) = gpu();
    let cu = include_str!("kernels.cu");
    let dir = std::env::temp_dir().join(format!("common-launch-prototypes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kernels.ptx"), PTX).unwrap();
    std::fs::write(dir.join("kernels.cu"), cu).unwrap();
    let streams = gpu.streams(1).unwrap();
    let (mut a, mut b) = (gpu.alloc::<f32>(64).unwrap(), gpu.alloc::<f32>(64).unwrap());
    let cfg = LaunchConfig::for_elements(64, 64);
    for module in [gpu.load_ptx_with_prototypes(PTX, cu).unwrap(), gpu.load_ptx_file(dir.join("kernels.ptx")).unwrap()]
    {
        let saxpy = module.kernel("saxpy").unwrap();
        let mut refused = |f: &Launcher| refusal(&gpu, &streams, (&mut a, &mut b), f);
        // SAFETY: refused before it is queued (as the test checks).
        let e = refused(&|st, _, y| unsafe {
            st.kernel(&saxpy, cfg).value(0u64).write(y).value(2.0f32).value(64u64).launch()
        });
        assert!(
            e.contains("kernel saxpy: argument 0 is u64, but the kernel's prototype declares it a pointer (.u64)"),
            "{e}"
        );
        // SAFETY: refused before it is queued (as the test checks).
        let e = refused(&|st, x, y| unsafe { st.kernel(&saxpy, cfg).read(x).write(y).value(2.0f32).read(x).launch() });
        assert!(
            e.contains("argument 3 is a device view, but the kernel's prototype declares it a value (.u64)"),
            "{e}"
        );
    }
    let stale = "extern \"C\" __global__ void saxpy(const float* x, float* y, float a) {}";
    let e = gpu.load_ptx_with_prototypes(PTX, stale).unwrap().kernel("saxpy").unwrap_err();
    assert!(
        format!("{e:#}")
            .contains("kernel saxpy: its prototype in the prototypes given has 3 parameters, but the PTX 4"),
        "{e:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// PTX the driver cannot compile is refused when it is loaded, with the driver's own message.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn ptx_the_driver_cannot_compile_is_refused_with_its_message() {
    let (gpu, _lock) = gpu();
    let e = gpu.load_ptx(".version 9.0\n.target sm_75\n.address_size 64\n.entry k(.param .u64 x) { bogus; }\n");
    let e = e.unwrap_err();
    // CUDA_ERROR_INVALID_PTX (218), with the JIT's log.
    assert!(matches!(&e, cuda_scope::Error::Module(m) if m.code == Some(218) && m.why.contains("bogus")), "{e}");
    let e = e.to_string();
    assert!(e.starts_with("JIT-compiling the PTX: compiling the PTX: the driver says: "), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
}

/// A kernel taking a pointer to shared memory: the 580 driver compiles it and will not load it
/// (`CUDA_ERROR_INVALID_IMAGE`, an empty log); the refusal says which parameter is why. A driver that
/// loads it has nothing to explain.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_module_the_driver_will_not_load_for_a_pointer_to_shared_memory_says_so() {
    let (gpu, _lock) = gpu();
    let ptx = ".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry k(.param .u64 .ptr .shared .align 4 p)\n{ ret; }\n";
    if let Err(e) = gpu.load_ptx(ptx) {
        let e = format!("{e:#}");
        assert!(e.contains("kernel k: parameter p is declared `.u64 .ptr .shared`"), "{e}");
        assert!(e.contains("CUDA_ERROR_INVALID_IMAGE"), "{e}");
    }
}

/// Generated PTX in every form `cuda_scope::ptx` reads (the differential test's, `support/ptxgen.rs`),
/// through the driver's JIT linker: each kernel the reading supports is accepted (the text, the cubin
/// the driver made and the driver's own account agree), each it refuses is refused for its reason.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn generated_kernels_load_through_the_drivers_jit_linker() {
    let (gpu, _lock) = gpu();
    let (mut accepted, mut refused, mut unloaded) = (0, 0, Vec::new());
    for i in 0..8 {
        let file = support::ptxgen::file_for_the_driver(24, i, 24);
        let module = match gpu.load_ptx(&file.ptx) {
            Ok(m) => m,
            Err(e) => {
                unloaded.push(format!("file {i}: {e:#}"));
                continue;
            }
        };
        for k in &file.kernels {
            match (&k.expect, module.kernel(&k.name)) {
                (support::ptxgen::Expect::Params(_), Ok(_)) => accepted += 1,
                (support::ptxgen::Expect::Refused(why), Err(e)) if format!("{e:#}").contains(why) => refused += 1,
                (expect, got) => panic!("file {i}: kernel {}: meant {expect:?}, got {got:?}\n{}", k.name, file.ptx),
            }
        }
    }
    eprintln!("{accepted} kernels accepted, {refused} refused as unsupported");
    assert!(unloaded.is_empty(), "{} files the driver would not load:\n{}", unloaded.len(), unloaded.join("\n"));
}
