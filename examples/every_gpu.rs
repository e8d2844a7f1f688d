//! Lesson 9: every GPU of the host at once (beyond the CUDA C++ programs the first lessons follow).
//!
//! Each GPU gets a host thread, its own context, and pinned memory allocated near its CPU where the
//! host says which that is. First each GPU works alone, then all together, phase by phase in step (a
//! barrier before each): uploads only (nvbandwidth's `host_to_all_memcpy_ce`), downloads only
//! (`all_to_host_memcpy_ce`), both directions, and the overlap pipeline of lesson 3. What the GPUs lose
//! together against alone is what the host (its memory and its PCIe root) cannot supply to all of them.
//!
//!     cargo run --release --example every_gpu [-- --devices all --size 1GiB]

use std::{process::ExitCode, sync::Barrier};

use clap::Parser;
use common::{
    args::{parse_bytes, parse_device_list, RunArgs},
    device::{bind_thread_to_node, parse_devices, Lockstep},
    machine::{numa_node_of, pci_path, shared_bridges, Health, HostMemory},
    pipeline::{balanced_work, run_pipeline, Layout},
    report::{fmt_bytes, Output, Table},
    timeline::phase,
    timing::{measure, Repeats, Stats},
    verify::input,
    ChunkPlan, Gpu,
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
    h2d_gbps: f64,
    d2h_gbps: f64,
    /// Both directions at once: bytes moved both ways per second.
    both_gbps: f64,
    /// The overlap pipeline: bytes in and out per second.
    pipeline_gbps: f64,
    /// Link, clocks and what among them would slow copies (read when the GPU runs alone).
    bus: String,
    health: Option<Health>,
    likely_causes: Vec<String>,
}

/// One phase's rate of a GPU.
type Rate = fn(&PerGpu) -> f64;

fn main() -> ExitCode {
    common::lesson::run(every_gpu)
}

fn every_gpu(args: &Args, out: &Output) -> anyhow::Result<()> {
    let devices = parse_devices(&args.devices)?;
    let (bytes, r) = (args.size, args.run.repeats());
    let alone: Vec<PerGpu> = devices.iter().map(|&d| on_gpu(d, bytes, r, None)).collect::<anyhow::Result<_>>()?;
    let together: Vec<PerGpu> = if devices.len() > 1 {
        let step = &Barrier::new(devices.len());
        std::thread::scope(|s| {
            let threads: Vec<_> = devices.iter().map(|&d| s.spawn(move || on_gpu(d, bytes, r, Some(step)))).collect();
            threads
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| anyhow::bail!("a GPU thread panicked")))
                .collect::<anyhow::Result<_>>()
        })?
    } else {
        Vec::new()
    };

    let (gpus, runs) = (devices.len(), r.repeats);
    out.say(format!("{gpus} GPU(s), copies of {}; GB/s, median of up to {runs} runs", fmt_bytes(bytes)));
    let phases: [(&str, Rate); 4] = [
        ("H2D", |g| g.h2d_gbps),
        ("D2H", |g| g.d2h_gbps),
        ("both", |g| g.both_gbps),
        ("pipeline", |g| g.pipeline_gbps),
    ];
    let mut t = Table::new(&["GPU", "NUMA node", "H2D", "D2H", "both ways", "pipeline"]);
    let rates = |label: String, node: String, f: &dyn Fn(Rate) -> f64| {
        [label, node].into_iter().chain(phases.iter().map(|(_, p)| format!("{:.2}", f(*p)))).collect()
    };
    let node = |g: &PerGpu| g.numa_node.map_or("not exposed".into(), |n| n.to_string());
    alone.iter().for_each(|g| t.row(rates(format!("{} ({}) alone", g.device, g.name), node(g), &|f| f(g))));
    together.iter().for_each(|g| t.row(rates(format!("{} together", g.device), node(g), &|f| f(g))));
    let sum = |v: &[PerGpu], f: Rate| v.iter().map(f).sum::<f64>();
    if !together.is_empty() {
        t.row(rates("all, summed: alone".into(), String::new(), &|f| sum(&alone, f)));
        t.row(rates("all, summed: together".into(), String::new(), &|f| sum(&together, f)));
    }
    out.table(&t);
    for (name, f) in phases.iter().filter(|_| !together.is_empty()) {
        let (a, b) = (sum(&alone, *f), sum(&together, *f));
        out.say(format!("{name}: together {b:.1} GB/s, {:.0}% of the {a:.1} the GPUs reach alone", 100.0 * b / a));
    }

    // Why: each GPU's own state, then what the GPUs share on the host (bridges, memory).
    let best = alone.iter().map(|g| g.h2d_gbps.min(g.d2h_gbps)).fold(0.0, f64::max);
    for g in &alone {
        out.say(format!("GPU {}: {}", g.device, g.health.as_ref().map_or("not read".into(), Health::summary)));
        if g.h2d_gbps.min(g.d2h_gbps) < 0.8 * best {
            let cause = g.likely_causes.first().map_or("none among link, clocks and NUMA", |c| c);
            out.say(format!("  slower alone than the best GPU; likely cause: {cause}"));
        }
    }
    if alone.iter().all(|g| g.numa_node.is_none()) {
        out.say("the host exposes no NUMA node for these GPUs, so memory could not be placed near each one");
    }
    let paths: Vec<(u32, Vec<String>)> = alone.iter().filter_map(|g| Some((g.device, pci_path(&g.bus)?))).collect();
    shared_bridges(&paths).iter().for_each(|l| out.say(l));
    let host = HostMemory::measure(1 << 30)?;
    let (threads, read, write) = (host.threads, host.read_gbps, host.write_gbps);
    out.say(format!("the host's {threads} CPU threads read memory at {read:.1} GB/s and write it at {write:.1}"));
    let loss = |f: Rate| sum(&together, f) / sum(&alone, f);
    if let Some((name, f)) =
        phases[..2].iter().filter(|_| !together.is_empty()).min_by(|a, b| loss(a.1).total_cmp(&loss(b.1)))
    {
        let (what, cpus) = if *name == "H2D" { ("read", read) } else { ("write", write) };
        out.say(format!(
            "the host gives least in {name}: {:.1} GB/s together, {:.0}% of alone; the GPUs {what} host memory there, which the CPUs {what} at {cpus:.1}",
            sum(&together, *f),
            100.0 * loss(*f)
        ));
    }
    out.finish(&serde_json::json!({
        "devices": devices, "bytes": bytes, "repeats": r, "alone": alone, "together": together, "host_memory": host
    }))
}

/// On a thread of its own: GPU `device`, its memory near it, then each phase. With `step`, every GPU
/// starts each phase together.
fn on_gpu(device: u32, bytes: usize, r: Repeats, step: Option<&Barrier>) -> anyhow::Result<PerGpu> {
    let in_step = Lockstep::new(step, 5);
    let gpu = Gpu::init_device(device)?;
    let numa_node = gpu.info.numa_node();
    if let Some(node) = numa_node {
        bind_thread_to_node(node)?; // pinned memory allocated and touched below lands near the GPU
    }
    let n = bytes / 4;
    let (h_in, mut h_out) = (gpu.pinned_from_fn(n, input)?, gpu.pinned::<f32>(n)?);
    let health = step.is_none().then(|| Health::read(&gpu));
    let likely_causes = health.as_ref().map_or(Vec::new(), |h| h.likely_causes(numa_node_of(&h_in[..])));
    let (mut up, mut down) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?);
    let streams = gpu.streams(4)?;
    let plan = ChunkPlan::new(n.min(64 << 20), 32, 4)?;
    let work = balanced_work(&gpu, plan.max_chunk(), r)?;
    let mut bufs = gpu.alloc_each::<f32>(plan.streams, plan.max_chunk())?;
    let together = step.is_some();
    let _p = phase(&format!("GPU {device} {}", if together { "together" } else { "alone" }));
    let in_step = |f: &mut dyn FnMut() -> anyhow::Result<Stats>| {
        in_step.wait();
        f()
    };
    let h2d =
        in_step(&mut || measure(r, || gpu.timed(&streams[..1], |s| s.htod(&streams[0], &h_in, s.device(&mut up)))))?;
    let d2h = in_step(&mut || {
        measure(r, || gpu.timed(&streams[..1], |s| s.dtoh(&streams[0], s.device(&mut down), &mut h_out)))
    })?;
    let both = in_step(&mut || {
        measure(r, || {
            gpu.timed(&streams[..2], |s| {
                s.htod(&streams[0], &h_in, s.device(&mut up))?;
                s.dtoh(&streams[1], s.device(&mut down), &mut h_out)
            })
        })
    })?;
    let layout = Layout { buffers: plan.streams, by_engine: false };
    let pipeline = in_step(&mut || {
        measure(r, || {
            let data = (&h_in[..plan.elements], &mut h_out[..plan.elements]);
            run_pipeline(&gpu, &streams, &plan, layout, work, data, &mut bufs)
        })
    })?;
    work.check(&h_out[..plan.elements], &plan).ensure()?;
    Ok(PerGpu {
        device,
        name: gpu.info.name.clone(),
        numa_node,
        h2d_gbps: h2d.gbps(bytes),
        d2h_gbps: d2h.gbps(bytes),
        both_gbps: both.gbps(2 * bytes),
        pipeline_gbps: pipeline.gbps(2 * plan.elements * 4),
        bus: gpu.info.pci_bus_id.clone(),
        health,
        likely_causes,
    })
}
