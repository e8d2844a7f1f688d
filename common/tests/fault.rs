//! A CUDA error in the middle of a run: reported with what was being done, never a panic or an abort,
//! and every resource dropped. Its own test binary, because the error breaks the context for the
//! whole process.

mod support;

use cuda_scope::Gpu;

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_kernel_fault_is_reported_with_what_was_being_done() {
    let gpu = Gpu::init().unwrap();
    let kernels = support::TestKernels::load(&gpu);
    let streams = gpu.streams(2).unwrap();
    let mut d = gpu.alloc::<f32>(1 << 20).unwrap();
    let h_in = gpu.pinned_from_fn(1 << 20, |i| i as f32).unwrap();
    let mut h_out = gpu.pinned::<f32>(1 << 20).unwrap();
    let err = gpu
        .scope(&streams, |s| {
            let d = s.device(&mut d);
            s.stream(0).htod(&h_in, d)?;
            // SAFETY: this test process expects the fault and ends with it; the write lands 1 TiB below
            // a fresh allocation, where this context maps nothing.
            unsafe { kernels.fault(s.stream(0), d) }?;
            s.stream(1).dtoh(d, &mut h_out) // ordered after the fault: it never runs
        })
        .unwrap_err();
    let msg = format!("{err:#}");
    eprintln!("the fault was reported as: {msg}");
    // The driver names the error (ILLEGAL_ADDRESS, or LAUNCH_FAILED on some drivers).
    assert!(msg.contains("CUDA_ERROR_"), "{msg}");
    let said_what = ["running the queued GPU work", "memcpy", "waiting", "recording", "kernel"];
    assert!(said_what.iter().any(|w| msg.contains(w)), "the error should say what was being done: {msg}");
    assert!(!msg.contains('\n'), "{msg}");
    // The context is dead: a new scope says so instead of running.
    assert!(gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d), &mut h_out)).is_err());
    // Everything drops here, on a broken context, in an order that once freed the context first.
    drop((gpu, h_in, h_out, d, streams));
}
