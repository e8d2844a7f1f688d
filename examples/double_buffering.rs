//! Lesson 6: double buffering (the seed's Exercise 3).
//!
//! "While processing chunk N, transfer chunk N+1. Use only 2 device buffers, alternate between them."
//! Uploads go on one stream, kernels on a second, downloads on a third, so each engine has a queue of
//! its own. Chunk n+2 reuses chunk n's buffer, so its upload must wait until chunk n has been computed
//! and downloaded on the other streams: a cudaEventRecord after the download and a cudaStreamWaitEvent
//! before the upload, and the same pair between upload and kernel and between kernel and download.
//! The lesson makes those waits itself; the scope checks them (it knows each buffer's last readers and
//! writer) and says whether they were enough or which one it had to add.
//!
//! The same loop then runs with one buffer (everything serialized) and with one buffer per stream
//! (lesson 3's overlap), each held against the ideal for its number of buffers.
//!
//!     cargo run --release --example double_buffering [-- -n 64M --chunks 32 --streams 4]

use std::cell::RefCell;

use clap::Parser;
use common::{
    args::{PipelineArgs, RunArgs, WorkArgs},
    kernels::Work,
    pipeline::{ChunkStages, Judgement},
    report::{fmt_bytes, fmt_ms, Output, Table},
    timeline::phase,
    timing::measure,
    verify::input,
    Gpu, Ordering, ScopeEvent,
};
use serde_json::json;

/// Two device buffers, alternating, against one buffer and against one buffer per stream.
#[derive(Parser)]
struct Args {
    /// (--streams sets the K of the K-stream comparison)
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    work: WorkArgs,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> common::Result<()> {
    let args: Args = common::args::parse();
    let out = Output::new(args.run.json);
    let plan = args.pipeline.plan(64 << 20, 32, 4)?;
    let r = args.run.repeats();
    let gpu = Gpu::init()?;
    out.say(format!("{}\n", gpu.info));

    let h_in = gpu.pinned_from_fn(plan.elements, input)?;
    let mut h_out = gpu.pinned::<f32>(plan.elements)?;
    let k = plan.streams.max(2);
    let mut d_bufs = (0..k).map(|_| gpu.alloc::<f32>(plan.max_chunk())).collect::<Result<Vec<_>, _>>()?;
    let streams = gpu.streams(k.max(3))?;

    let stages = ChunkStages::measure(&gpu, plan.max_chunk(), args.work.iters.map(Work::Process), r)?;
    let work = stages.work;
    out.say(format!("{} elements ({}) in {} chunks", plan.elements, fmt_bytes(plan.elements * 4), plan.chunks));
    stages.lines().iter().for_each(|l| out.say(l));
    out.say("");

    // One loop for every layout: chunk i lives in buffer i % buffers. With `by_engine`, uploads,
    // kernels and downloads each have their own stream, ordered by events; otherwise chunk i runs on
    // stream i % buffers, whose order is enough.
    let ordering = RefCell::new(Ordering::default());
    let mut run = |buffers: usize, by_engine: bool, h_out: &mut [f32]| {
        gpu.timed(&streams, |s| {
            let d = s.devices(&mut d_bufs[..buffers]);
            let mut freed: Vec<Option<ScopeEvent>> = vec![None; buffers];
            for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
                let (b, own) = (c.index % buffers, &streams[c.index % buffers]);
                let buf = d[b].slice(0..c.len);
                if !by_engine {
                    s.htod(own, &h_in[c.range()], buf)?;
                    s.launch(own, gpu.kernels.work(work, buf))?;
                    s.dtoh(own, buf, out)?;
                    continue;
                }
                let (up, compute, down) = (&streams[0], &streams[1], &streams[2]);
                if let Some(done) = freed[b] {
                    s.stream_wait_event(up, done)?; //           cudaStreamWaitEvent(upload, freed[b]): chunk i-2 is out
                }
                s.htod(up, &h_in[c.range()], buf)?;
                let uploaded = s.event_record(up)?; //           cudaEventRecord(uploaded, upload)
                s.stream_wait_event(compute, uploaded)?;
                s.launch(compute, gpu.kernels.work(work, buf))?;
                let computed = s.event_record(compute)?;
                s.stream_wait_event(down, computed)?;
                s.dtoh(down, buf, out)?;
                freed[b] = Some(s.event_record(down)?); //     buffer b may be refilled after this
            }
            *ordering.borrow_mut() = s.ordering();
            Ok(())
        })
    };

    let per_chunk = stages.per_chunk(&plan);
    let layouts =
        [("single buffer", 1, false), ("double buffering", 2, true), (&*format!("{k}-stream overlap"), k, false)];
    let mut t = Table::new(&[
        "layout",
        "buffers",
        "time",
        "speedup",
        "ideal, one-way rates",
        "efficiency",
        "ideal, both-ways rates",
        "efficiency",
        "waits made",
        "waits added",
    ]);
    let (mut single_ms, mut results) = (0.0, Vec::new());
    for (name, buffers, by_engine) in layouts {
        h_out.fill(f32::NAN);
        let time = {
            let _p = phase(name);
            measure(r, || run(buffers, by_engine, &mut h_out))?
        };
        let check = work.check(&h_out);
        check.ensure()?;
        single_ms = if buffers == 1 { time.median_ms } else { single_ms };
        let judged =
            Judgement::new(single_ms, time.median_ms, &per_chunk, buffers, gpu.info.async_engines, &stages.copies);
        t.row(vec![
            name.to_string(),
            buffers.to_string(),
            fmt_ms(time.median_ms),
            format!("{:.2}x", judged.speedup),
            fmt_ms(judged.ideal_single_ms),
            format!("{:.3}", judged.efficiency_single),
            fmt_ms(judged.ideal_both_ms),
            format!("{:.3}", judged.efficiency_both),
            ordering.borrow().waits_made.to_string(),
            ordering.borrow().waits_added.to_string(),
        ]);
        out.say(format!("{name}: {}", check.summary()));
        if by_engine {
            out.say(format!("{name}: {}", ordering.borrow().summary()));
        }
        results.push(json!({ "layout": name, "buffers": buffers, "time": time, "judgement": judged, "ordering": *ordering.borrow(), "verification": check }));
    }
    out.say(format!(
        "\nmedian of {} runs after {} warm-up, CUDA events; ideal = the pipeline model for that many buffers",
        r.repeats, r.warmup
    ));
    out.table(&t);
    let double = &results[1]["judgement"];
    let eff = double["efficiency_both"].as_f64().unwrap_or(0.0);
    out.say(common::report::verdict(
        eff >= 0.95,
        &format!("double buffering reaches {eff:.3} of its ideal (target 0.95)"),
    ));
    out.say(
        "With two buffers in place, a buffer is busy for its chunk's upload, kernel and download, so at best two chunks \
         finish every three stage-times: a third buffer (or separate input and output buffers) lets all three engines run \
         all the time.",
    );
    out.finish(
        &json!({ "device": gpu.info, "plan": plan, "work": work, "repeats": r, "stages": stages, "layouts": results }),
    )?;
    Ok(())
}
