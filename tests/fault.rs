//! A CUDA error in the middle of a run: reported with what was being done, never a panic, and every
//! resource dropped. Its own test binary, because the error breaks the context for the whole process.

use gpu_transfers::{verify::input, Gpu, PinnedBuffer};

#[test]
fn a_kernel_fault_is_reported_with_what_was_being_done() {
    let gpu = match Gpu::init() {
        Ok(g) => g,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "GPU test skipped: {e:#}");
            return;
        }
    };
    let streams = gpu.streams(2).unwrap();
    let mut d = gpu.alloc::<f32>(1 << 20).unwrap();
    let h_in = PinnedBuffer::from_fn(1 << 20, input).unwrap();
    let mut h_out = PinnedBuffer::<f32>::new(1 << 20).unwrap();
    let err = gpu
        .scope(&streams, |s| {
            let d = s.device(&mut d);
            s.htod(&streams[0], &h_in, d)?;
            s.launch(&streams[0], gpu.kernels.fault_for_tests(d))?;
            s.dtoh(&streams[1], d, &mut h_out)
        })
        .unwrap_err();
    let msg = format!("{err:#}");
    {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "the fault was reported as: {msg}");
    }
    // The driver names the error (ILLEGAL_ADDRESS, or LAUNCH_FAILED on some drivers).
    assert!(msg.contains("CUDA_ERROR_"), "{msg}");
    let said_what = ["running the queued GPU work", "copying", "waiting", "recording", "launching"];
    assert!(said_what.iter().any(|w| msg.contains(w)), "the error should say what was being done: {msg}");
    assert!(!msg.contains('\n'), "{msg}");
    // Everything drops here, on a broken context, without panicking.
    drop((h_in, h_out, d, streams, gpu));
}
