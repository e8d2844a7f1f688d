//! Lesson 6: double buffering (the double-buffering exercise, Exercise 3 of the streams lesson;
//! `double_buffering_exercise` below is its answer in Rust).
//!
//! "While processing chunk N, transfer chunk N+1. Use only 2 device buffers, alternate between them."
//! Uploads go on one stream, kernels on a second, downloads on a third, so each engine has a queue of
//! its own, and events order them, as in CUDA C++: a `cudaEventRecord` after each step and a
//! `cudaStreamWaitEvent` before the next, and one more before chunk n+2's upload, which reuses chunk n's
//! buffer and must wait until chunk n has been downloaded. The scope checks those waits (it knows each
//! buffer's last readers and writer) and says whether they were enough or which one it had to add.
//!
//! The same work then runs with one buffer (everything in turn) and with one buffer per stream
//! (lesson 3), each held against its bound: with B buffers used in place, a buffer is busy for its
//! chunk's upload, kernel and download, so at best B chunks are in flight.
//!
//!     cargo run --release --example double_buffering [-- -n 64M --chunks 32 --streams 4]

use std::process::ExitCode;

use clap::Parser;
use common::{Gpu, ScopeEvent, Waits};
use kernels::Kernels;
use measure::{
    args::{PipelineArgs, RunArgs, WorkArgs},
    bound::{Measured, Report, Steps},
    pipeline::{run_pipeline, Layout},
    report::{fmt_bytes, Output},
    timeline::phase,
    timing::{measure, Repeats, Stats},
    verify::input,
    work::Work,
    ChunkPlan,
};

/// Two device buffers, alternating, against one buffer and against one buffer per stream.
#[derive(Parser)]
struct Args {
    /// (--streams sets the streams of the one-buffer-per-stream comparison)
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    work: WorkArgs,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(serde::Serialize)]
struct Results<'a> {
    device: &'a common::device::DeviceInfo,
    plan: ChunkPlan,
    work: Work,
    waits: Waits,
    report: Report,
    verification: Vec<measure::verify::Check>,
}

fn main() -> ExitCode {
    measure::lesson::run(double_buffering)
}

/// The exercise: two device buffers, chunk i in buffer i % 2; uploads on one stream, kernels on a second,
/// downloads on a third, each step waiting for the event of the step before it.
fn double_buffering_exercise(
    (gpu, kernels): (&Gpu, &Kernels),
    (plan, work, r): (ChunkPlan, Work, Repeats),
    h_in: &[f32],
    h_out: &mut [f32],
) -> anyhow::Result<(Stats, Waits)> {
    let mut d_buf = gpu.alloc_each::<f32>(2, plan.max_chunk())?; // cudaMalloc(&buf[0]), cudaMalloc(&buf[1])
    let three = gpu.streams(3)?; //                                 upload, compute and download streams
    let mut waits = Waits::default();
    let time = measure(r, || {
        gpu.timed(&three, |s| {
            let [up, compute, down] = [s.stream(0), s.stream(1), s.stream(2)];
            let d = s.devices(&mut d_buf);
            let mut freed: [Option<ScopeEvent>; 2] = [None, None];
            for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
                let (b, buf) = (c.index % 2, d[c.index % 2].slice(0..c.len));
                if let Some(done) = freed[b] {
                    up.wait_event(done)?; //                     cudaStreamWaitEvent(upload, freed[b]): chunk i-2 is out
                }
                up.htod(&h_in[c.range()], buf)?; //              cudaMemcpyAsync(buf[b], ..., H2D, upload)
                let uploaded = up.record_event()?; //            cudaEventRecord(uploaded, upload)
                compute.wait_event(uploaded)?; //                cudaStreamWaitEvent(compute, uploaded)
                work.run(kernels, compute, buf)?; //             process<<<..., compute>>>(buf[b], n)
                let computed = compute.record_event()?;
                down.wait_event(computed)?;
                down.dtoh(buf, out)?; //                         cudaMemcpyAsync(..., buf[b], D2H, download)
                freed[b] = Some(down.record_event()?); //        buffer b may be refilled after this
            }
            waits = s.waits();
            Ok(())
        })
    })?;
    Ok((time, waits))
}

fn double_buffering(args: &Args, out: &Output) -> anyhow::Result<()> {
    let plan = args.pipeline.plan(64 << 20, 32, 4)?;
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let h_in = gpu.pinned_from_fn(plan.elements, input)?;
    let mut h_out = gpu.pinned::<f32>(plan.elements)?;
    let work = args.work.work(gpu, &kernels, plan.max_chunk(), r)?;
    out.say(format!(
        "{} ({}) in {} chunks; {}",
        plan.elements,
        fmt_bytes(plan.elements * 4),
        plan.chunks,
        work.describe()
    ));

    h_out.fill(f32::NAN);
    let (double_time, waits) = {
        let _p = phase("double buffering");
        double_buffering_exercise((gpu, &kernels), (plan, work, r), &h_in, &mut h_out)?
    };
    let mut checks = vec![work.check(&h_out, &plan)];
    out.say(format!("double buffering: {}", checks[0].summary()));
    out.say(format!("double buffering: {}", waits.summary()));

    // For comparison: one buffer per stream, chunk i on stream i % k (k = 1: everything in turn).
    let mut one_per_stream = |k: usize| -> anyhow::Result<Stats> {
        let plan = ChunkPlan::new(plan.elements, plan.chunks, k)?;
        let mut bufs = gpu.alloc_each::<f32>(k, plan.max_chunk())?;
        let streams = gpu.streams(k)?;
        let _p = phase(&format!("{k} buffer{}", if k == 1 { "" } else { "s" }));
        let time = measure(r, || {
            let layout = Layout { buffers: k, by_engine: false };
            run_pipeline(gpu, &kernels, &streams, &plan, layout, work, (&h_in, &mut h_out), &mut bufs)
        })?;
        checks.push(work.check(&h_out, &plan));
        Ok(time)
    };
    let single = one_per_stream(1)?;
    let per_stream = one_per_stream(plan.streams.max(2))?;
    checks.iter().try_for_each(|c| c.ensure())?;

    let k = plan.streams.max(2);
    let runs = [
        Measured { name: "1 buffer".into(), time: single, lanes: 1, streams: 1 },
        Measured { name: "2 buffers, 3 streams".into(), time: double_time, lanes: 2, streams: 3 },
        Measured::on_streams(format!("{k} buffers, {k} streams"), per_stream, k),
    ];
    let report = Report::measure(gpu, &kernels, &plan, Steps::InPlace(work), (&h_in, &mut h_out), r, &runs)?;
    out.say(format!("\nmedian of up to {} runs after {} warm-up", r.repeats, r.warmup));
    out.table(&report.table());
    report.notes().iter().for_each(|l| out.say(l));
    out.pipeline(&report); // names each run against its bound, and the bound's parts, for `cargo xtask compare`
    out.finish(&Results { device: &gpu.info, plan, work, waits, report, verification: checks })
}
