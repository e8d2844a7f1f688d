//! A held copy's driver error in the flush `Scope::waits` makes, which returns no error, is kept: the
//! scope's next call that queues work returns it, or else the scope's end. Its own test binary, because
//! the fault that provokes the error breaks the context for the whole process.

mod support;

use cuda_scope::{Coalescing, CopyWay, Gpu};

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn an_error_in_the_flush_of_waits_comes_from_the_next_call_or_the_scopes_end() {
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
    let end = gpu
        .scope(&streams, |s| -> cuda_scope::Result<()> {
            s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
            let d = s.device(&mut d);
            s.stream(0).htod(&host[..1024], d.slice(0..1024))?; // held: no call yet, nothing to fail
            s.stream(0).htod(&host[1024..2048], d.slice(1024..2048))?;
            // SAFETY: this test process expects the fault and ends with it; the write lands 1 TiB below
            // a fresh allocation, where this context maps nothing.
            unsafe { kernels.fault(s.stream(1), s.device(&mut victim)) }?;
            said.push(format!("{:#}", s.stream(1).synchronize().unwrap_err()));
            assert_eq!(s.waits().added, 0); // flushes the two held copies: their launch fails, and is kept
                                            // The next call returns the kept error in place of its own result, and holds nothing.
            let next = s.stream(0).htod(&host[2048..3072], d.slice(2048..3072)).unwrap_err();
            said.push(format!("{next:#}"));
            assert!(s.flush().is_ok(), "the kept error is returned once, and nothing is held to fail");
            Ok(())
        })
        .unwrap_err();
    eprintln!("the fault: {}\nfrom the next call: {}\nthe scope's end: {end:#}", said[0], said[1]);
    let kept = |msg: &str| {
        msg.contains("2 copies (operations 0 to 1 of the scope) on stream 0")
            && msg.contains("Scope::waits")
            && msg.contains("CUDA_ERROR_")
    };
    assert!(kept(&said[1]), "{}", said[1]);
    assert!(!format!("{end:#}").contains("Scope::waits"), "returned once, by the next call: {end:#}");
    // Where no call comes after `waits`, the scope's end returns the error it kept. The context is dead
    // since the fault, so the launch of the held copies fails again.
    let end = gpu
        .scope(&streams, |s| -> cuda_scope::Result<()> {
            s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
            let d = s.device(&mut d);
            s.stream(0).htod(&host[..1024], d.slice(0..1024))?;
            s.stream(0).htod(&host[1024..2048], d.slice(1024..2048))?;
            s.waits();
            Ok(())
        })
        .unwrap_err();
    let msg = format!("{end:#}");
    eprintln!("kept to the scope's end: {msg}");
    assert!(kept(&msg), "{msg}");
    drop((gpu, d, victim, streams));
}
