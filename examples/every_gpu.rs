//! Lesson 9: every GPU of the host at once (beyond the CUDA C++ programs the first lessons follow).
//!
//! Each GPU gets a host thread, its own context, and pinned memory near its CPU where the host says
//! which that is. Each works alone, then all together in step (a barrier before each phase): uploads
//! (nvbandwidth's `host_to_all_memcpy_ce`), downloads (`all_to_host_memcpy_ce`), both ways, and the
//! pipeline of lesson 3. Together, each GPU's events give its own rate, and the host clock all of theirs
//! from the first start to the last end. What they lose together, the host cannot supply to all of them.
//!
//!     cargo run --release --example every_gpu [-- --devices all --size 1GiB]

use std::{process::ExitCode, sync::Barrier, time::Instant};

use clap::Parser;
use common::Gpu;
use kernels::Kernels;
use measure::{
    args::{parse_bytes, parse_device_list, RunArgs},
    machine::{numa_node_of, why_together, GpuAlone, Health, HostMemory},
    multi::{bind_thread_to_node, parse_devices, Lockstep},
    pipeline::{balanced_work, Buffering, Pipeline},
    report::{fmt_bytes, Output, Table},
    timeline::phase,
    timing::{measure, Repeats, Stats, Window},
    work::Steps,
    ChunkPlan,
};

/// Every GPU alone, then all at once: uploads, downloads, both, and the overlap pipeline.
#[derive(Parser)]
struct Args {
    /// The GPUs: `all`, or a list such as `0,1`
    #[arg(long, default_value = "all", value_parser = parse_device_list, allow_negative_numbers = true)]
    devices: String,
    /// Bytes each copy moves
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    size: usize,
    #[command(flatten)]
    run: RunArgs,
}

/// What one GPU did, alone or with the others: GB/s of each phase.
#[derive(Clone, Debug, serde::Serialize)]
struct PerGpu {
    device: u32,
    name: String,
    numa_node: Option<u32>,
    htod_gbps: f64,
    dtoh_gbps: f64,
    /// Both directions at once: bytes moved both ways per second.
    both_gbps: f64,
    /// The overlap pipeline: bytes in and out per second.
    pipeline_gbps: f64,
    /// Each phase's span on the host clock and the bytes it moved.
    windows: Vec<Window>,
    /// Link, clocks and what among them would slow copies (read when the GPU runs alone).
    bus: String,
    health: Option<Health>,
    likely_causes: Vec<String>,
}

/// One phase's rate of a GPU.
type Rate = fn(&PerGpu) -> f64;

fn main() -> ExitCode {
    measure::lesson::run(every_gpu)
}

fn every_gpu(args: &Args, out: &Output) -> anyhow::Result<()> {
    let devices = parse_devices(&args.devices)?;
    let (bytes, r) = (args.size, args.run.repeats());
    let t0 = Instant::now();
    let alone: Vec<PerGpu> = devices.iter().map(|&d| on_gpu(d, bytes, r, None, t0)).collect::<anyhow::Result<_>>()?;
    let together: Vec<PerGpu> = if devices.len() > 1 {
        let step = &Barrier::new(devices.len());
        std::thread::scope(|s| {
            let threads: Vec<_> =
                devices.iter().map(|&d| s.spawn(move || on_gpu(d, bytes, r, Some(step), t0))).collect();
            threads
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| anyhow::bail!("a GPU thread panicked")))
                .collect::<anyhow::Result<_>>()
        })?
    } else {
        Vec::new()
    };

    out.say(format!(
        "{} GPU(s), copies of {}; GB/s, median of up to {} runs",
        devices.len(),
        fmt_bytes(bytes),
        r.repeats
    ));
    let phases: [(&str, Rate); 4] = [
        ("H2D", |g| g.htod_gbps),
        ("D2H", |g| g.dtoh_gbps),
        ("both", |g| g.both_gbps),
        ("pipeline", |g| g.pipeline_gbps),
    ];
    let mut t = Table::new(&["GPU", "NUMA node", "H2D", "D2H", "both ways", "pipeline"]);
    let rates = |label: String, node: String, f: &dyn Fn(usize) -> f64| {
        [label, node].into_iter().chain((0..4).map(|i| format!("{:.2}", f(i)))).collect()
    };
    let node = |g: &PerGpu| g.numa_node.map_or("not exposed".into(), |n| n.to_string());
    alone.iter().for_each(|g| t.row(rates(format!("{} ({}) alone", g.device, g.name), node(g), &|i| phases[i].1(g))));
    together.iter().for_each(|g| t.row(rates(format!("{} together", g.device), node(g), &|i| phases[i].1(g))));
    let sum = |v: &[PerGpu], f: Rate| v.iter().map(f).sum::<f64>();
    if !together.is_empty() {
        t.row(rates("all, summed: alone".into(), String::new(), &|i| sum(&alone, phases[i].1)));
        t.row(rates("all, summed: together".into(), String::new(), &|i| sum(&together, phases[i].1)));
        let windows = |i| together.iter().map(|g| g.windows[i]).collect::<Vec<_>>();
        t.row(rates("all at once, host clock".into(), String::new(), &|i| Window::rate_together(&windows(i))));
    }
    out.table(&t);
    for (name, f) in phases.iter().filter(|_| !together.is_empty()) {
        let (a, b) = (sum(&alone, *f), sum(&together, *f));
        out.say(format!("{name}: together {b:.1} GB/s, {:.0}% of the {a:.1} the GPUs reach alone", 100.0 * b / a));
    }
    // Why: each GPU's own state, then what the GPUs share on the host (bridges, memory).
    let host = HostMemory::measure(1 << 30)?;
    let loss = |f: Rate| sum(&together, f) / sum(&alone, f);
    let (way, f) = if loss(phases[0].1) < loss(phases[1].1) { phases[0] } else { phases[1] };
    let least = (!together.is_empty()).then(|| (way, sum(&together, f), loss(f)));
    let gpus: Vec<GpuAlone> = alone
        .iter()
        .map(|g| GpuAlone {
            device: g.device,
            health: g.health.as_ref(),
            likely_causes: &g.likely_causes,
            slowest_gbps: g.htod_gbps.min(g.dtoh_gbps),
            pci_bus_id: &g.bus,
        })
        .collect();
    why_together(&gpus, least, &host).iter().for_each(|l| out.say(l));
    out.finish(&serde_json::json!({
        "devices": devices, "bytes": bytes, "repeats": r, "alone": alone, "together": together, "host_memory": host
    }))
}

/// On a thread of its own: GPU `device`, its memory near it, then each phase. With `step`, every GPU
/// starts each phase together.
fn on_gpu(device: u32, bytes: usize, r: Repeats, step: Option<&Barrier>, t0: Instant) -> anyhow::Result<PerGpu> {
    let in_step = Lockstep::new(step, 5);
    let gpu = Gpu::init_device(device)?;
    let kernels = Kernels::load(&gpu)?;
    let numa_node = measure::machine::numa_node(&gpu.info);
    if let Some(node) = numa_node {
        bind_thread_to_node(node)?; // pinned memory allocated and touched below lands near the GPU
    }
    let n = bytes / 4;
    let plan = ChunkPlan::new(n.min(64 << 20), 32, 4)?;
    let work = balanced_work(&gpu, &kernels, plan.max_chunk(), r)?;
    // Pinned input and output of `bytes` each, for the copies and the pipeline over the first part.
    let mut p = Pipeline::new(&gpu, &kernels, Steps::InPlace(work), n, r)?;
    let health = step.is_none().then(|| Health::read(&gpu));
    let likely_causes = health.as_ref().map_or(Vec::new(), |h| h.likely_causes(numa_node_of(&p.h_in[..])));
    let (mut up, mut down) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?);
    let streams = gpu.streams(2)?;
    let mut on = p.buffers(&plan, Buffering::per_stream(plan.streams))?;
    let _p = phase(&format!("GPU {device} {}", if step.is_some() { "together" } else { "alone" }));
    let windows = std::cell::RefCell::new(Vec::new());
    let in_step = |moved: usize, f: &mut dyn FnMut() -> anyhow::Result<Stats>| {
        in_step.wait();
        let start_s = t0.elapsed().as_secs_f64();
        let s = f()?; // the warm-up runs move data too, inside the window
        let end_s = t0.elapsed().as_secs_f64();
        windows.borrow_mut().push(Window { start_s, end_s, bytes: moved * (r.warmup + s.runs) });
        Ok::<_, anyhow::Error>(s)
    };
    let (h_in, h_out) = (&p.h_in, &mut p.h_out);
    let htod =
        in_step(bytes, &mut || measure(r, || gpu.timed(&streams[..1], |s| s.stream(0).htod(h_in, s.device(&mut up)))))?;
    let dtoh = in_step(bytes, &mut || {
        measure(r, || gpu.timed(&streams[..1], |s| s.stream(0).dtoh(s.device(&mut down), &mut *h_out)))
    })?;
    let both = in_step(2 * bytes, &mut || {
        measure(r, || {
            gpu.timed(&streams, |s| {
                s.stream(0).htod(h_in, s.device(&mut up))?;
                s.stream(1).dtoh(s.device(&mut down), &mut *h_out)
            })
        })
    })?;
    let pipeline = in_step(2 * plan.elements * 4, &mut || measure(r, || p.run(&plan, &mut on)))?;
    p.check(&plan).ensure()?;
    Ok(PerGpu {
        device,
        name: gpu.info.name.clone(),
        numa_node,
        htod_gbps: htod.gbps(bytes),
        dtoh_gbps: dtoh.gbps(bytes),
        both_gbps: both.gbps(2 * bytes),
        pipeline_gbps: pipeline.gbps(2 * plan.elements * 4),
        windows: windows.into_inner(),
        bus: gpu.info.pci_bus_id.clone(),
        health,
        likely_causes,
    })
}
