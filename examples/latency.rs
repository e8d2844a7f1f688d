//! Lesson 11: how long one small transfer takes (beyond the CUDA C++ programs the first lessons follow).
//!
//! Large copies are held by the link's rate; small ones by a fixed cost per copy, which no rate hides.
//! This lesson times one small `cudaMemcpyAsync` each way, from pinned and from pageable memory, on the
//! GPU (CUDA events around the copy) and as the calling thread feels it (queue, then wait). Then it
//! times one read of memory by a kernel: a single thread follows a chain of links, each read waiting
//! for the one before, in mapped host memory (2 MiB, a link every 128 bytes, as nvbandwidth's
//! `host_device_latency_sm`) and in device memory (256 MiB, more than the L2 cache holds, each launch
//! going on where the last one ended, so every read misses the cache). A read's time is the difference
//! between launches of N and N/2 reads over N/2, which leaves the launch out. pinned_memory fits the
//! per-copy cost α over sizes; this is the cost of one copy seen directly.
//!
//!     cargo run --release --example latency [-- --bytes 4 --accesses 4096]

use std::{process::ExitCode, time::Instant};

use clap::Parser;
use common::{DeviceBuffer, HostAlloc, Scope};
use kernels::{cpu, Kernels};
use measure::{
    args::{parse_bytes, parse_positive_u32, RunArgs},
    report::{fmt_bytes, Figure, Output, Table},
    timing::{measure, Stats},
};

/// One small copy each way, and one read of mapped or device memory by a kernel.
#[derive(Parser)]
struct Args {
    /// Bytes each copy moves
    #[arg(long, default_value = "4", value_parser = nonzero_bytes, allow_negative_numbers = true)]
    bytes: usize,
    /// Dependent reads of the longer launch (256 to 16384, the mapped chain's lines)
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

/// Reads by a kernel, one after another: launches of N and N/2 reads, and the time per read.
#[derive(serde::Serialize)]
struct ReadLatency {
    memory: &'static str,
    accesses: u32,
    launch: Stats,
    half_launch: Stats,
    ns_per_read: f64,
}

/// Chains with a link every 128 bytes: 2 MiB in mapped host memory, as nvbandwidth's, and 256 MiB in
/// device memory, several times the L2 cache.
const MAPPED_CHAIN: usize = (2 << 20) / 4;
const DEVICE_CHAIN: usize = (256 << 20) / 4;
const STRIDE: usize = 32;

fn nonzero_bytes(s: &str) -> anyhow::Result<usize> {
    match parse_bytes(s)? {
        0 => anyhow::bail!("at least 1 byte"),
        b => Ok(b),
    }
}

fn main() -> ExitCode {
    measure::lesson::run(latency)
}

fn latency(args: &Args, out: &Output) -> anyhow::Result<()> {
    let (len, r, n) = (args.bytes, args.run.repeats(), args.accesses);
    if !(256..=(MAPPED_CHAIN / STRIDE) as u32).contains(&n) {
        anyhow::bail!(
            "--accesses: 256 (launch costs must not swamp reads) to {} (the mapped chain's lines)",
            MAPPED_CHAIN / STRIDE
        );
    }
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let streams = gpu.streams(1)?;

    // One small copy each way, from pinned memory (cudaMallocHost) and pageable memory (malloc).
    let mut pinned = gpu.pinned_from_fn::<u8>(len, |i| i as u8)?;
    let mut pageable = common::pageable::<u8>(len, |i| i as u8)?;
    let mut d_small = gpu.alloc::<u8>(len)?;
    let mut copies = Vec::new();
    for (memory, host) in [("pinned", &mut pinned[..]), ("pageable", &mut pageable[..])] {
        for direction in ["H2D", "D2H"] {
            let htod = direction == "H2D";
            let gpu_time = measure(r, || gpu.timed(&streams, |s| one_copy(s, htod, host, &mut d_small)))?;
            let host_time = measure(r, || {
                let t = Instant::now();
                gpu.scope(&streams, |s| one_copy(s, htod, host, &mut d_small))?; // queue it, wait for it
                Ok(t.elapsed().as_secs_f64() * 1e3)
            })?;
            let name = format!("{memory} {direction} {}", fmt_bytes(len)); // for `cargo xtask compare`
            out.add(Figure::new(format!("{name} / gpu"), &gpu_time).transfers(len));
            out.add(Figure::new(format!("{name} / caller waits"), &host_time).on_host().transfers(len));
            copies.push(CopyLatency { memory, direction, bytes: len, gpu: gpu_time, host: host_time });
        }
    }

    // One read at a time by a kernel, in mapped host memory and in device memory.
    let mut mapped = gpu.pinned_with::<u32>(MAPPED_CHAIN, HostAlloc::MAPPED)?; // cudaHostAlloc(.., Mapped)
    mapped.iter_mut().enumerate().for_each(|(i, x)| *x = cpu::chain(i, MAPPED_CHAIN, STRIDE));
    let mut device = gpu.alloc::<u32>(DEVICE_CHAIN)?;
    let chain = common::pageable(DEVICE_CHAIN, |i| cpu::chain(i, DEVICE_CHAIN, STRIDE))?;
    gpu.scope(&streams, |s| s.stream(0).htod(&chain, s.device(&mut device)))?;
    drop(chain);
    let mut d_end = gpu.alloc::<u32>(1)?;
    let mut reads = Vec::new();
    for memory in ["mapped host", "device"] {
        let links = if memory == "device" { DEVICE_CHAIN } else { MAPPED_CHAIN };
        let mut start = 0u32; // each launch goes on where the last ended: no line is read twice
        let mut time = |accesses: u32| {
            measure(r, || {
                let from = start;
                start = cpu::chase(links, STRIDE, from, accesses);
                gpu.timed(&streams, |s| {
                    let next = if memory == "device" { s.device(&mut device) } else { s.mapped(&mut mapped)? };
                    kernels.chase(s.stream(0), next, from, accesses, s.device(&mut d_end))
                    // chase<<<1, 1>>>
                })
            })
        };
        let (launch, half_launch) = (time(n)?, time(n / 2)?);
        let mut end = [0u32];
        gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d_end), &mut end))?;
        if end[0] != start {
            anyhow::bail!("the chase in {memory} memory ended at link {}, the CPU's at {start}", end[0]);
        }
        let ns_per_read = (launch.median_ms - half_launch.median_ms) * 1e6 / (n - n / 2) as f64;
        out.add(Figure::new(format!("{memory} memory, chase of {n} reads / gpu"), &launch));
        out.add(Figure::new(format!("{memory} memory, chase of {} reads / gpu", n / 2), &half_launch));
        reads.push(ReadLatency { memory, accesses: n, launch, half_launch, ns_per_read });
    }

    let (runs, w) = (args.run.repeats, args.run.warmup);
    out.say(format!("One copy of {}, µs (median of up to {runs} runs after {w} warm-up)", fmt_bytes(len)));
    let mut t = Table::new(&["memory", "way", "on the GPU", "spread", "caller waits", "spread"]);
    for c in &copies {
        let us = |s: &Stats| format!("{:.2}", s.median_ms * 1e3);
        let cv = |s: &Stats| format!("{:.0}%", 100.0 * s.cv);
        t.row(vec![c.memory.into(), c.direction.into(), us(&c.gpu), cv(&c.gpu), us(&c.host), cv(&c.host)]);
    }
    out.table(&t);
    out.say("on the GPU: CUDA events around the copy; caller waits: queue the copy and wait for it, on the host clock");
    out.say(format!("\nOne read by a kernel: launches of {n} and {} dependent reads, the difference per read", n / 2));
    let mut t = Table::new(&["memory", "ns per read", &format!("launch of {n}"), "spread"]);
    for l in &reads {
        let launch = format!("{:.1} µs", l.launch.median_ms * 1e3);
        t.row(vec![l.memory.into(), format!("{:.0}", l.ns_per_read), launch, format!("{:.1}%", 100.0 * l.launch.cv)]);
    }
    out.table(&t);
    out.say(format!(
        "a read of host memory across the link costs {:.1}x one of device memory; every chase ended where the \
         CPU's did",
        reads[0].ns_per_read / reads[1].ns_per_read
    ));
    out.finish(&serde_json::json!({ "device": gpu.info, "repeats": r, "copies": copies, "reads": reads }))
}

/// One small copy on the scope's stream: `cudaMemcpyAsync(d, h, n, H2D, stream)`, or the other way.
fn one_copy<'s>(
    s: &'s Scope<'s, '_>,
    htod: bool,
    host: &'s mut [u8],
    d: &'s mut DeviceBuffer<u8>,
) -> anyhow::Result<()> {
    match htod {
        true => s.stream(0).htod(host, s.device(d)),
        false => s.stream(0).dtoh(s.device(d), host),
    }
}
