//! Lesson 6: double buffering (the double-buffering exercise, Exercise 3 of the streams lesson;
//! `double_buffering_exercise` below is its answer in Rust). "While processing chunk N, transfer chunk
//! N+1. Use only 2 device buffers, alternate between them."
//!
//! Uploads, kernels and downloads go on streams of their own, ordered by events as in CUDA C++; chunk
//! n+2's H2D copy reuses chunk n's buffer and must wait for chunk n's D2H copy. The scope checks
//! those waits and says whether they were enough or which one it added. The same work then runs with
//! one buffer and with one buffer per stream (lesson 3), each held against its bound.
//!
//!     cargo run --release --example double_buffering [-- -n 64M --chunks 32 --streams 4]

use std::process::ExitCode;

use clap::Parser;
use cuda_scope::{ScopeEvent, Waits};
use measure::{
    args,
    pipeline::{Buffering, Pipeline, PipelineRun},
    report::Output,
    rig::{PipelineRig, PipelineSetup},
    verify::Check,
    Chunking,
};

/// Two device buffers, alternating, against one buffer and against one buffer per stream (--streams).
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    flags: args::PipelineFlags,
}

fn main() -> ExitCode {
    measure::lesson::run(double_buffering)
}

/// The exercise: two device buffers, chunk i in buffer i % 2; H2D copies on one stream, kernels on a second,
/// D2H copies on a third, each step waiting for the event of the step before it; checked, and the waits
/// the scope found said.
fn double_buffering_exercise(
    p: &mut Pipeline,
    chunking: Chunking,
    out: &Output,
) -> anyhow::Result<(PipelineRun, Check, Waits)> {
    let (gpu, kernels, r) = (p.gpu(), p.kernels(), p.repeats);
    let measure::work::Steps::InPlace(work) = p.steps else { anyhow::bail!("the exercise runs a kernel in place") };
    let (h_in, h_out) = (&p.h_in[..], &mut p.h_out[..]);
    h_out.fill(f32::NAN);
    let mut d_buf = gpu.alloc_each::<f32>(2, chunking.max_chunk())?; // cudaMalloc(&buf[0]), cudaMalloc(&buf[1])
    let three = gpu.streams(3)?; //                                 H2D, compute and D2H streams
    let _range = measure::timeline::phase("double buffering"); //  nvtxRangePush("double buffering")
    let mut waits = Waits::default();
    let time = measure::timing::measure(r, || {
        gpu.timed(&three, |s| {
            let [copy_in, compute, copy_out] = [s.stream(0), s.stream(1), s.stream(2)];
            let d = s.devices(&mut d_buf);
            let mut freed: [Option<ScopeEvent>; 2] = [None, None];
            for (c, chunk) in chunking.iter().zip(chunking.split_mut(h_out)) {
                let (b, buf) = (c.index % 2, d[c.index % 2].slice(0..c.len));
                if let Some(done) = freed[b] {
                    copy_in.wait_event(done)?; //                cudaStreamWaitEvent(copyIn, freed[b]): chunk i-2 is out
                }
                copy_in.htod(&h_in[c.range()], buf)?; //         cudaMemcpyAsync(buf[b], ..., H2D, copyIn)
                let copied_in = copy_in.record_event()?; //      cudaEventRecord(copiedIn, copyIn)
                compute.wait_event(copied_in)?; //               cudaStreamWaitEvent(compute, copiedIn)
                work.run(kernels, compute, buf)?; //             process<<<..., compute>>>(buf[b], n)
                let computed = compute.record_event()?;
                copy_out.wait_event(computed)?;
                copy_out.dtoh(buf, chunk)?; //                   cudaMemcpyAsync(..., buf[b], D2H, copyOut)
                freed[b] = Some(copy_out.record_event()?); //    buffer b may be refilled after this
            }
            waits = s.waits();
            Ok(())
        })
    })?;
    let check = p.check(&chunking);
    out.say(format!("double buffering: {}\ndouble buffering: {}", check.summary(), waits.summary()));
    check.ensure()?;
    Ok((PipelineRun { name: "2 buffers, 3 streams".into(), time, buffering: Buffering::by_engine(2) }, check, waits))
}

fn double_buffering(args: &Args, out: &Output) -> anyhow::Result<()> {
    let setup = PipelineSetup::from_flags(&args.flags, (64 << 20, 32, 4))?;
    let (chunking, k) = (setup.chunking, setup.chunking.streams.max(2));
    let rig = PipelineRig::start(out, setup, k)?;
    let mut p = rig.pipeline(out)?;
    let (exercise, check, waits) = double_buffering_exercise(&mut p, chunking, out)?;
    // For comparison: one buffer per stream, chunk i on stream i % k (k = 1: everything in turn).
    let one = p.time("1 buffer", &chunking, Buffering::per_stream(1))?;
    let per_stream = p.time(&format!("{k} buffers, {k} streams"), &chunking, Buffering::per_stream(k))?;
    rig.against_bounds(out, p, vec![one, exercise, per_stream], check, waits)
}
