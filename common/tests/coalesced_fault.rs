//! A held copy's driver error comes back from the call that flushed its group, and names the copies.
//! Its own test binary, because the fault that provokes the error breaks the context for the whole
//! process.

mod support;

use cuda_scope::{Coalescing, CopyWay, Gpu};

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_held_copys_error_comes_from_the_call_that_flushed_it_and_names_it() {
    let gpu = Gpu::init().unwrap();
    let kernels = support::TestKernels::load(&gpu);
    let streams = gpu.streams(2).unwrap();
    let (mut d, mut victim) = (gpu.alloc::<f32>(4096).unwrap(), gpu.alloc::<f32>(1 << 20).unwrap());
    let host = vec![1f32; 4096];
    // A scope of held copies while the context lives: the copy kernel loaded, the staging pinned.
    gpu.scope(&streams, |s| {
        s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
        let d = s.device(&mut d);
        (0..4).try_for_each(|i| s.stream(0).htod(&host[i * 1024..(i + 1) * 1024], d.slice(i * 1024..(i + 1) * 1024)))
    })
    .unwrap();
    let mut said = Vec::new();
    let err = gpu
        .scope(&streams, |s| -> cuda_scope::Result<()> {
            s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
            let d = s.device(&mut d);
            s.stream(0).htod(&host[..1024], d.slice(0..1024))?; // held: no call yet, nothing to fail
            s.stream(0).htod(&host[1024..2048], d.slice(1024..2048))?;
            // SAFETY: this test process expects the fault and ends with it; the write lands 1 TiB below
            // a fresh allocation, where this context maps nothing.
            unsafe { kernels.fault(s.stream(1), s.device(&mut victim)) }?;
            let fault = s.stream(1).synchronize().unwrap_err();
            said.push(format!("{fault:#}"));
            s.stream(0).record_event().map(drop) // flushes the two held copies: their launch fails
        })
        .unwrap_err();
    let msg = format!("{err:#}");
    eprintln!("the fault: {}\nthe held copies' error: {msg}", said[0]);
    assert!(msg.contains("2 copies (operations 0 to 1 of the scope) on stream 0"), "{msg}");
    assert!(msg.contains("CUDA_ERROR_"), "{msg}");
    drop((gpu, d, victim, streams));
}
