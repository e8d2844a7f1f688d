//! Lesson 8: both directions at once, and every GPU of the host (beyond the seed lessons).
//!
//! A GPU with two or more copy engines can upload and download at the same time, on separate streams.
//! Each direction then runs a little slower than alone (they share the link and the host's memory), but
//! together they move far more. Part 1 measures that over sizes. Part 2 (`--devices all`, or a list)
//! puts every GPU to work at once, one host thread and context each, with pinned memory allocated near
//! each GPU's CPU where the host says which that is, and shows where the host side saturates: each
//! GPU alone, then all together, for copies both ways and for the overlap pipeline.
//!
//!     cargo run --release --example bidirectional [-- --devices all --ref-both 47.31]

use std::sync::Barrier;

use clap::Parser;
use common::{
    args::{parse_bytes, size_sweep, RunArgs},
    device::{bind_thread_to_node, parse_devices},
    pipeline::{run_pipeline, ChunkStages, CopyTimes, Layout},
    report::{fmt_bytes, fmt_ms, verdict, Output, Table},
    timeline::phase,
    timing::{measure, Repeats},
    verify::input,
    ChunkPlan, Gpu,
};
use serde_json::json;

/// H2D and D2H at once against each alone, over sizes; then every GPU of the host at once.
#[derive(Parser)]
struct Args {
    /// GPUs for part 2: `all`, or a list such as `0,1` (part 1 runs on the first)
    #[arg(long, default_value = "0", value_parser = common::args::parse_device_list, allow_negative_numbers = true)]
    devices: String,
    /// Smallest transfer
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    min: usize,
    /// Largest transfer
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    max: usize,
    /// A both-directions figure (GB/s per direction, say from nvbandwidth) to hold the largest size against
    #[arg(long, value_parser = common::args::parse_gbps, allow_negative_numbers = true)]
    ref_both: Option<f64>,
    #[command(flatten)]
    run: RunArgs,
}

/// What one GPU did in part 2: copies both ways at the largest size, and the overlap pipeline.
#[derive(Clone, Debug, serde::Serialize)]
struct PerGpu {
    device: u32,
    name: String,
    numa_node: Option<u32>,
    copies: CopyTimes,
    pipeline_ms: f64,
    pipeline_bytes: usize,
}

fn main() -> common::Result<()> {
    let args: Args = common::args::parse();
    let out = Output::new(args.run.json);
    let sizes = size_sweep(args.min, args.max, 4)?;
    let devices = parse_devices(&args.devices)?;
    let r = args.run.repeats();

    // Part 1: one GPU, each direction alone and both at once (an H2D and a D2H on two streams).
    let gpu = Gpu::init_device(devices[0])?;
    out.say(format!("{}\n", gpu.info));
    out.say(format!("Part 1: copies each way alone and both at once, GB/s (median of {}, CUDA events)", r.repeats));
    let mut t = Table::new(&["size", "H2D alone", "D2H alone", "both: each way", "both: total", "total / best alone"]);
    let mut part1 = Vec::new();
    for &bytes in &sizes {
        out.progress(fmt_bytes(bytes));
        let _p = phase(&format!("both ways, {}", fmt_bytes(bytes)));
        let c = CopyTimes::measure(&gpu, bytes / 4, r)?;
        let (h, d, b) = (c.h2d.gbps(bytes), c.d2h.gbps(bytes), c.both.gbps(bytes));
        t.row(vec![
            fmt_bytes(bytes),
            format!("{h:.2}"),
            format!("{d:.2}"),
            format!("{b:.2}"),
            format!("{:.2}", 2.0 * b),
            format!("{:.2}x", 2.0 * b / h.max(d)),
        ]);
        part1.push(c);
    }
    out.table(&t);
    let last = part1.last().unwrap();
    let each = last.both.gbps(last.bytes);
    if let Some(reference) = args.ref_both {
        out.say(verdict(
            each >= 0.99 * reference,
            &format!(
                "both at once at {}: {each:.2} GB/s each way = {:.1}% of the reference {reference:.2}",
                fmt_bytes(last.bytes),
                100.0 * each / reference
            ),
        ));
    }
    drop(gpu);

    // Part 2: every GPU named, first each alone, then all at once.
    let bytes = *sizes.last().unwrap();
    let alone: Vec<PerGpu> = devices.iter().map(|&d| on_gpu(d, bytes, r, None)).collect::<anyhow::Result<_>>()?;
    let together: Vec<PerGpu> = if devices.len() > 1 {
        let start = Barrier::new(devices.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = devices
                .iter()
                .map(|&d| {
                    s.spawn({
                        let start = &start;
                        move || on_gpu(d, bytes, r, Some(start))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a GPU thread panicked"))))
                .collect::<anyhow::Result<_>>()
        })?
    } else {
        Vec::new()
    };

    out.say(format!(
        "\nPart 2: {} GPU{}, copies of {} and the overlap pipeline, each GPU alone{}",
        devices.len(),
        if devices.len() > 1 { "s" } else { "" },
        fmt_bytes(bytes),
        if together.is_empty() { "" } else { " and all at once" }
    ));
    let mut t =
        Table::new(&["GPU", "NUMA node", "H2D GB/s", "D2H GB/s", "both, total GB/s", "pipeline", "pipeline GB/s"]);
    let mut add = |label: String, g: &PerGpu| {
        let c = &g.copies;
        t.row(vec![
            label,
            g.numa_node.map_or("not exposed".into(), |n| n.to_string()),
            format!("{:.2}", c.h2d.gbps(c.bytes)),
            format!("{:.2}", c.d2h.gbps(c.bytes)),
            format!("{:.2}", 2.0 * c.both.gbps(c.bytes)),
            fmt_ms(g.pipeline_ms),
            format!("{:.2}", g.pipeline_bytes as f64 / g.pipeline_ms / 1e6),
        ]);
    };
    for g in &alone {
        add(format!("{} alone", g.device), g);
    }
    for g in &together {
        add(format!("{} together", g.device), g);
    }
    out.table(&t);
    if !together.is_empty() {
        let total = |v: &[PerGpu], f: &dyn Fn(&PerGpu) -> f64| v.iter().map(f).sum::<f64>();
        let both = |g: &PerGpu| 2.0 * g.copies.both.gbps(g.copies.bytes);
        let pipe = |g: &PerGpu| g.pipeline_bytes as f64 / g.pipeline_ms / 1e6;
        out.say(format!(
            "all at once: copies both ways {:.1} GB/s in total ({:.0}% of the {:.1} the GPUs reach alone), pipelines {:.1} GB/s ({:.0}% of {:.1}). \
             What is missing is what the host (its memory and PCIe root) could not supply to every GPU at once.",
            total(&together, &both),
            100.0 * total(&together, &both) / total(&alone, &both),
            total(&alone, &both),
            total(&together, &pipe),
            100.0 * total(&together, &pipe) / total(&alone, &pipe),
            total(&alone, &pipe)
        ));
    }
    out.finish(&json!({ "devices": devices, "repeats": r, "part1": part1, "alone": alone, "together": together }))?;
    Ok(())
}

/// On a thread of its own: GPU `device`, its memory near it, copies both ways and the overlap pipeline.
/// With `start`, waits until every GPU is ready so that they run at the same time.
fn on_gpu(device: u32, bytes: usize, r: Repeats, start: Option<&Barrier>) -> anyhow::Result<PerGpu> {
    let gpu = Gpu::init_device(device)?;
    let numa_node = gpu.info.numa_node();
    if let Some(node) = numa_node {
        bind_thread_to_node(node)?; // pinned memory allocated and touched below lands near the GPU
    }
    let plan = ChunkPlan::new(64 << 20, 32, 4)?;
    let stages = ChunkStages::measure(&gpu, plan.max_chunk(), None, r)?;
    let h_in = gpu.pinned_from_fn(plan.elements, input)?;
    let mut h_out = gpu.pinned::<f32>(plan.elements)?;
    let mut bufs = (0..plan.streams).map(|_| gpu.alloc::<f32>(plan.max_chunk())).collect::<anyhow::Result<Vec<_>>>()?;
    let streams = gpu.streams(plan.streams)?;
    if let Some(b) = start {
        b.wait();
    }
    let _p = phase(&format!("GPU {device} {}", if start.is_some() { "together" } else { "alone" }));
    let copies = CopyTimes::measure(&gpu, bytes / 4, r)?;
    let layout = Layout { buffers: plan.streams, by_engine: false };
    let pipeline =
        measure(r, || run_pipeline(&gpu, &streams, &plan, layout, stages.work, &h_in, &mut h_out, &mut bufs))?;
    stages.work.check(&h_out).ensure()?;
    Ok(PerGpu {
        device,
        name: gpu.info.name.clone(),
        numa_node,
        copies,
        pipeline_ms: pipeline.median_ms,
        pipeline_bytes: 2 * plan.elements * 4,
    })
}
