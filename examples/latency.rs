//! Lesson 11: how long one small transfer takes (beyond the CUDA C++ programs the first lessons follow).
//!
//! Large copies are held by the link's rate; small ones by a fixed cost per copy, which no rate hides.
//! This lesson times one small `cudaMemcpyAsync` each way, from pinned and from pageable memory, on the
//! GPU (CUDA events around the copy) and as the calling thread feels it (queue, then wait). Then it
//! times one read of memory by a kernel: a single thread follows a chain of links, each read waiting
//! for the one before, in mapped host memory and in device memory, as nvbandwidth's
//! `host_device_latency_sm` does (2 MiB, a link every 128 bytes). pinned_memory fits the per-copy cost
//! α over sizes; this is the cost of one copy seen directly.
//!
//!     cargo run --release --example latency [-- --bytes 4 --accesses 4096]

use std::{process::ExitCode, time::Instant};

use clap::Parser;
use common::{
    args::{parse_bytes, parse_positive_u32, RunArgs},
    kernels::cpu,
    report::{fmt_bytes, Output, Table},
    timing::{measure, Stats},
    HostAlloc,
};

/// One small copy each way, and one read of mapped or device memory by a kernel.
#[derive(Parser)]
struct Args {
    /// Bytes each copy moves
    #[arg(long, default_value = "4", value_parser = parse_bytes, allow_negative_numbers = true)]
    bytes: usize,
    /// Dependent reads a kernel launch makes (fewer than the chain's 16384 lines, so none is read twice)
    #[arg(long, default_value = "4096", value_parser = parse_positive_u32, allow_negative_numbers = true)]
    accesses: u32,
    #[command(flatten)]
    run: RunArgs,
}

/// One copy: its time on the GPU and as the caller waits for it.
#[derive(serde::Serialize)]
struct CopyLatency {
    memory: &'static str,
    direction: &'static str,
    bytes: usize,
    gpu: Stats,
    host: Stats,
}

/// Reads by a kernel, one after another: time per read.
#[derive(serde::Serialize)]
struct ReadLatency {
    memory: &'static str,
    accesses: u32,
    launch: Stats,
    ns_per_read: f64,
}

/// A 2 MiB chain with a link every 128 bytes, as nvbandwidth's.
const CHAIN: usize = (2 << 20) / 4;
const STRIDE: usize = 32;

fn main() -> ExitCode {
    common::lesson::run(latency)
}

fn latency(args: &Args, out: &Output) -> anyhow::Result<()> {
    let (len, r) = (args.bytes.div_ceil(4), args.run.repeats());
    if args.accesses as usize > CHAIN / STRIDE {
        anyhow::bail!("--accesses: at most {} (the chain's lines), so that no line is read twice", CHAIN / STRIDE);
    }
    let gpu = &common::lesson::gpu(out)?;
    let streams = gpu.streams(1)?;
    let stream = &streams[0];

    // One small copy each way, from pinned memory (cudaMallocHost) and pageable memory (malloc).
    let mut pinned = gpu.pinned_from_fn::<u32>(len, |i| i as u32)?;
    let mut pageable = common::pageable::<u32>(len, |i| i as u32)?;
    let mut d_small = gpu.alloc::<u32>(len)?;
    let mut copies = Vec::new();
    for (memory, host) in [("pinned", &mut pinned[..]), ("pageable", &mut pageable[..])] {
        for direction in ["H2D", "D2H"] {
            let mut copy = || {
                gpu.timed(&streams, |s| match direction {
                    "H2D" => s.htod(stream, &host[..], s.device(&mut d_small)), // cudaMemcpyAsync(d, h, n, H2D, s)
                    _ => s.dtoh(stream, s.device(&mut d_small), &mut host[..]), //  cudaMemcpyAsync(h, d, n, D2H, s)
                })
            };
            let gpu_time = measure(r, &mut copy)?;
            let host_time = measure(r, || {
                let t = Instant::now();
                copy()?; // queue the copy, then wait for it (cudaStreamSynchronize)
                Ok(t.elapsed().as_secs_f64() * 1e3)
            })?;
            copies.push(CopyLatency { memory, direction, bytes: len * 4, gpu: gpu_time, host: host_time });
        }
    }

    // One read at a time by a kernel: a chain in mapped host memory, and the same chain in device memory.
    let mut mapped = gpu.pinned_with::<u32>(CHAIN, HostAlloc::MAPPED)?; // cudaHostAlloc(.., cudaHostAllocMapped)
    mapped.iter_mut().enumerate().for_each(|(i, x)| *x = cpu::chain(i, CHAIN, STRIDE));
    let mut device = gpu.alloc::<u32>(CHAIN)?;
    gpu.scope(&streams, |s| s.htod(stream, &mapped, s.device(&mut device)))?;
    let mut d_end = gpu.alloc::<u32>(1)?;
    let mut end = [0u32];
    let mut reads = Vec::new();
    for memory in ["mapped host", "device"] {
        let launch = measure(r, || {
            gpu.timed(&streams, |s| {
                let next = if memory == "device" { s.device(&mut device) } else { s.mapped(&mut mapped)? };
                s.launch(stream, gpu.kernels.chase(next, args.accesses, s.device(&mut d_end)))
                // chase<<<1, 1>>>
            })
        })?;
        gpu.scope(&streams, |s| s.dtoh(stream, s.device(&mut d_end), &mut end))?;
        let want = cpu::chase(CHAIN, STRIDE, args.accesses);
        if end[0] != want {
            anyhow::bail!("the chase in {memory} memory ended at link {}, the CPU's at {want}", end[0]);
        }
        let ns_per_read = launch.median_ms * 1e6 / args.accesses as f64;
        reads.push(ReadLatency { memory, accesses: args.accesses, launch, ns_per_read });
    }

    let (runs, w) = (args.run.repeats, args.run.warmup);
    out.say(format!("One copy of {}, µs (median of up to {runs} runs after {w} warm-up)", fmt_bytes(len * 4)));
    let mut t = Table::new(&["memory", "way", "on the GPU", "spread", "caller waits", "spread"]);
    for c in &copies {
        let us = |s: &Stats| format!("{:.2}", s.median_ms * 1e3);
        let cv = |s: &Stats| format!("{:.0}%", 100.0 * s.cv);
        t.row(vec![c.memory.into(), c.direction.into(), us(&c.gpu), cv(&c.gpu), us(&c.host), cv(&c.host)]);
    }
    out.table(&t);
    out.say("on the GPU: CUDA events around the copy; caller waits: queue the copy and wait for it, on the host clock");
    out.say(format!("\nOne read by a kernel, {} dependent reads a launch (launch included)", args.accesses));
    let mut t = Table::new(&["memory", "ns per read", "spread"]);
    for l in &reads {
        t.row(vec![l.memory.into(), format!("{:.0}", l.ns_per_read), format!("{:.1}%", 100.0 * l.launch.cv)]);
    }
    out.table(&t);
    out.say(format!(
        "a read of host memory across the link costs {:.1}x one of device memory; every chase ended where the CPU's did",
        reads[0].ns_per_read / reads[1].ns_per_read
    ));
    out.finish(&serde_json::json!({ "device": gpu.info, "repeats": r, "copies": copies, "reads": reads }))
}
