//! A held copy's driver error in the flush `Scope::waits` makes, which returns no error, is kept: the
//! scope's next call that queues work returns it, or else the scope's end. Its own test binary, because
//! the fault that provokes the error breaks the context for the whole process.

mod support;

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn an_error_in_the_flush_of_waits_comes_from_the_next_call_or_the_scopes_end() {
    let support::HeldFault { gpu, kernels, streams, mut d, mut victim, host } = support::HeldFault::new();
    let mut said = Vec::new();
    let end = gpu
        .scope(&streams, |s| -> cuda_scope::Result<()> {
            let d = s.device(&mut d);
            support::hold_two(s, d, &host)?;
            // SAFETY: this test process expects the fault and ends with it; the write lands 1 TiB below
            // a fresh allocation, where this context maps nothing.
            unsafe { kernels.fault(s.stream(1), s.device(&mut victim)) }?;
            said.push(format!("{:#}", s.stream(1).synchronize().unwrap_err()));
            // Flushes the two held copies: their launch fails, and the error is kept.
            assert_eq!(s.waits().added, 0);
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
            support::hold_two(s, s.device(&mut d), &host)?;
            s.waits();
            Ok(())
        })
        .unwrap_err();
    let msg = format!("{end:#}");
    eprintln!("kept to the scope's end: {msg}");
    assert!(kept(&msg), "{msg}");
    drop((gpu, d, victim, streams));
}
