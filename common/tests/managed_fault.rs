//! A kernel fault while managed memory's pages sit on the GPU: the scope reports the error, and the
//! host can still read and free the managed memory of the dead context. Its own test binary, because the
//! fault breaks the context for the whole process.

mod support;

use cuda_scope::{host::fill, Destination, Gpu};

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn managed_memory_stays_readable_after_a_kernel_fault() {
    let gpu = Gpu::init().unwrap();
    let kernels = support::TestKernels::load(&gpu);
    let streams = gpu.streams(2).unwrap();
    let n = 1 << 20;
    let mut m = gpu.managed::<f32>(n).unwrap();
    fill(&mut m, |i| i as f32);
    let mut d = gpu.alloc::<f32>(n).unwrap();
    let err = gpu
        .scope(&streams, |s| {
            let managed = s.managed(&mut m);
            s.stream(0).prefetch(managed, Destination::Device)?; // the pages move to the GPU
            kernels.busy(s.stream(0), managed, 3)?;
            // SAFETY: this test process expects the fault and ends with it; the write lands 1 TiB below
            // a fresh device allocation, where this context maps nothing (as in fault.rs).
            unsafe { kernels.fault(s.stream(1), s.device(&mut d)) }?;
            s.stream(0).prefetch(managed, Destination::Host) // may never run: the context dies
        })
        .unwrap_err();
    let msg = format!("{err:#}");
    eprintln!("the fault was reported as: {msg}");
    assert!(msg.contains("CUDA_ERROR_"), "{msg}");
    // The context is dead; the host reads every page, wherever the driver left it, and finds numbers
    // (busy(x, 3) of the input where the kernel ran, the input where it did not).
    let finite = m.iter().filter(|x| x.is_finite()).count();
    eprintln!("the host read all {n} elements after the fault; {finite} are finite");
    assert_eq!(finite, n);
    assert!(gpu.scope(&streams, |s| s.stream(0).prefetch(s.managed(&mut m), Destination::Device)).is_err());
    drop((gpu, m, d, streams)); // freed on a dead context: no crash
}
