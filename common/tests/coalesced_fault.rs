//! A held copy's driver error comes back from the call that flushed its group, and names the copies.
//! Its own test binary, because the fault that provokes the error breaks the context for the whole
//! process.

mod support;

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_held_copys_error_comes_from_the_call_that_flushed_it_and_names_it() {
    let support::HeldFault { gpu, kernels, streams, mut d, mut victim, host } = support::HeldFault::new();
    let mut said = Vec::new();
    let err = gpu
        .scope(&streams, |s| -> cuda_scope::Result<()> {
            support::hold_two(s, s.device(&mut d), &host)?;
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
