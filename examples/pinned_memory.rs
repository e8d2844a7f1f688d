//! Lesson 1: pinned memory, as the course's pinned_memory.cu times `cudaMemcpy` from `malloc`'d and
//! `cudaMallocHost`'d memory (`pinned_memory_cu` below is that program in Rust), and its exercise, which
//! sweeps the size.
//!
//! Pageable memory (a plain `Vec`) can be paged out by the OS, so the driver cannot DMA from it: it
//! copies through a hidden pinned staging buffer first. Pinned (page-locked) memory is DMA'd directly.
//! The lesson then times both directions for four kinds of host memory over a sweep of sizes, what
//! allocating and pinning cost, and checks that the data survived a round trip through each kind.
//!
//!     cargo run --release --example pinned_memory [-- --min 4KiB --max 256MiB]

use std::process::ExitCode;

use clap::Parser;
use common::{Gpu, HostAlloc, Registered};
use measure::{
    args::{parse_bytes, size_sweep, RunArgs},
    fit::{fit_table, unseen_notes, BothWays, Sweep},
    machine::numa_node_of,
    report::{fmt_bytes, fmt_ms, verdict, Output, Table},
    timeline::phase,
    timing::{gbps, host_ms, measure},
    verify::{self, input},
};
use serde_json::json;

/// Pageable against pinned memory, host to device and back, over a sweep of sizes.
#[derive(Parser)]
struct Args {
    /// Smallest transfer
    #[arg(long, default_value = "4KiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    min: usize,
    /// Largest transfer
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    max: usize,
    /// A copy-engine figure (GB/s, say from nvbandwidth) to hold pinned H2D of 64 MiB and more against
    #[arg(long, value_parser = measure::args::parse_gbps, allow_negative_numbers = true)]
    ref_htod: Option<f64>,
    /// The same for D2H
    #[arg(long, value_parser = measure::args::parse_gbps, allow_negative_numbers = true)]
    ref_dtoh: Option<f64>,
    /// Also draw the sweep as an SVG picture: GB/s against size, a line per kind and direction, the link across
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

const KINDS: [&str; 4] = ["pageable", "pinned", "write-combined", "pinned in place"];

fn main() -> ExitCode {
    measure::lesson::run(pinned_memory)
}

/// pinned_memory.cu: 2^26 floats of 1.0 copied to the device once from `malloc`'d memory and once from
/// `cudaMallocHost`'d memory, each timed with events and printed with its rate.
fn pinned_memory_cu(gpu: &Gpu, out: &Output) -> anyhow::Result<[f64; 2]> {
    const SIZE: usize = 1 << 26; //                                   the program says 64MB: it is 256 MiB of floats
    const BYTES: usize = SIZE * 4;
    let h_pageable = common::pageable(SIZE, |_| 1.0f32)?; //          malloc(BYTES), then every element 1.0f
    let h_pinned = gpu.pinned_from_fn(SIZE, |_| 1.0f32)?; //          cudaMallocHost(&h_pinned, BYTES), the same
    let mut d_data = gpu.alloc::<f32>(SIZE)?; //                      cudaMalloc(&d_data, BYTES)
    let streams = gpu.streams(1)?;
    let mut times = [0.0; 2];
    for (t, (name, host)) in times.iter_mut().zip([("Pageable", &h_pageable[..]), ("Pinned", &h_pinned[..])]) {
        // cudaEventRecord(start); cudaMemcpy(d_data, host, BYTES, H2D); cudaEventRecord(stop); ...
        *t = gpu.timed(&streams, |s| s.stream(0).htod(host, s.device(&mut d_data)))?;
        out.say(format!("pinned_memory.cu: {name} H2D: {:.2} ms ({:.2} GB/s)", *t, BYTES as f64 / *t / 1e6));
    }
    Ok(times) //                                                      free, cudaFreeHost, cudaFree: on drop
}

fn pinned_memory(args: &Args, out: &Output) -> anyhow::Result<()> {
    let sizes = size_sweep(args.min, args.max, 4)?;
    let n = args.max / 4;
    let (gpu, health) = &measure::lesson::gpu_and_health(out)?;
    let seed = pinned_memory_cu(gpu, out)?;

    // The exercise: both directions, four kinds of host memory, over sizes.
    let mut d_data = gpu.alloc::<f32>(n)?;

    // The four kinds of host memory, all holding the same non-zero data.
    let mut pageable = common::pageable(n, input)?; // malloc
    let mut pinned = gpu.pinned::<f32>(n)?; // cudaMallocHost
    let mut write_combined = gpu.pinned_with::<f32>(n, HostAlloc::WRITE_COMBINED)?;
    let mut registered = gpu.register(common::pageable(n, input)?)?; // cudaHostRegister
    pinned.copy_from_slice(&pageable);
    write_combined.copy_from_slice(&pageable);
    let mut kinds: [&mut [f32]; 4] = [&mut pageable, &mut pinned, &mut write_combined, &mut registered];

    let streams = gpu.streams(1)?;

    // Time each copy alone with CUDA events on the stream: for each size, each kind both ways.
    let mut results: Vec<Vec<BothWays>> = Vec::new();
    for &bytes in &sizes {
        out.progress(format!("{} ...", fmt_bytes(bytes)));
        let len = bytes / 4;
        let mut row = Vec::new();
        for (name, host) in KINDS.iter().zip(kinds.iter_mut()) {
            let _p = phase(&format!("{name} {}", fmt_bytes(bytes)));
            let htod = measure(args.run.repeats(), || {
                gpu.timed(&streams, |s| s.stream(0).htod(&host[..len], s.device(&mut d_data).slice(0..len)))
            })?;
            let dtoh = measure(args.run.repeats(), || {
                gpu.timed(&streams, |s| s.stream(0).dtoh(s.device(&mut d_data).slice(0..len), &mut host[..len]))
            })?;
            row.push(BothWays { htod, dtoh });
        }
        results.push(row);
    }
    // One thread's memcpy rate from pageable into pinned memory: what the driver's pageable path does.
    let probe = n.min(16 << 20);
    let (src, dst) = kinds.split_at_mut(1);
    let mut copy = || host_ms(|| dst[0][..probe].copy_from_slice(&src[0][..probe])).1;
    let t_copy = [copy(), copy(), copy()].into_iter().fold(f64::INFINITY, f64::min); // best of three
    let host_copy_gbps = gbps(probe * 4, t_copy);

    // Each kind and direction over the sweep as two numbers, t = α + n/β, and what holds it back.
    let link_gbps = health.link_gbps(gpu);
    let sweep = Sweep { sizes: &sizes, kinds: &KINDS, times: &results, link_gbps, host_copy_gbps };
    let fits = sweep.fits()?;
    out.sweep(&sizes, &KINDS, &results); // names every copy (`pinned H2D 4 KiB`) for `cargo xtask compare`
    for (d, dir) in ["Host to device", "Device to host"].into_iter().enumerate() {
        let (r, w) = (args.run.repeats, args.run.warmup);
        out.say(format!("\n{dir}, GB/s (median of up to {r} runs after {w} warm-up, CUDA events)"));
        out.table(&sweep.rate_table(d, &fits, 1));
    }
    let (lo, hi) = (fmt_bytes(sizes[0]), fmt_bytes(args.max));
    out.say(format!(
        "\nEach kind as t = α + n/β over {lo} to {hi} (fitted; one thread copies at {host_copy_gbps:.1} GB/s)"
    ));
    out.table(&fit_table(&fits));
    unseen_notes(&fits).iter().for_each(|n| out.say(n));
    let node = numa_node_of(&kinds[1][..]);
    out.say(health.numa_line(node));
    if fits.iter().any(|f| f.kind == "pinned" && f.limit.starts_with("below the link")) {
        let causes = health.likely_causes(node);
        let none = "none among link, clocks and NUMA: other traffic, or the host's memory; try nvbandwidth";
        out.say(format!("pinned copies run below the link; likely cause: {}", causes.first().map_or(none, |c| c)));
    }

    // What pinning costs: allocation (with the first touch of every page) and release, on the host clock.
    out.say("\nAllocating and pinning, ms on the host clock");
    let mut alloc = Table::new(&[
        "size",
        "malloc+touch",
        "cudaMallocHost",
        "write-combined",
        "cudaHostRegister",
        "unregister",
        "cudaFreeHost",
    ]);
    let mut alloc_json = Vec::new();
    for bytes in [1 << 20, 16 << 20, 64 << 20].into_iter().filter(|b| *b <= args.max) {
        let len = bytes / 4;
        let (v, t_malloc) = host_ms(|| vec![1.0f32; len].into_iter().map(|x| x * 2.0).collect::<Vec<f32>>());
        let (p, t_pinned) = host_ms(|| gpu.pinned::<f32>(len));
        let (wc, t_wc) = host_ms(|| gpu.pinned_with::<f32>(len, HostAlloc::WRITE_COMBINED));
        let (reg, t_register) = host_ms(|| gpu.register(v));
        let (v, t_unregister) = host_ms(|| reg.map(Registered::into_vec));
        drop(v?);
        let ((), t_free) = host_ms(|| drop(p));
        drop(wc?);
        let row = [t_malloc, t_pinned, t_wc, t_register, t_unregister, t_free];
        let mut cells = vec![fmt_bytes(bytes)];
        cells.extend(row.iter().map(|t| fmt_ms(*t)));
        alloc.row(cells);
        alloc_json.push(json!({ "bytes": bytes, "ms": row }));
    }
    out.table(&alloc);

    // Write-combined memory is not cached: fine for the GPU and for CPU writes, slow for CPU reads.
    let (a, t_cached) = host_ms(|| verify::checksum(&kinds[1][..probe]));
    let (b, t_wc) = host_ms(|| verify::checksum(&kinds[2][..probe]));
    let (cpu_cached, cpu_wc) = (gbps(probe * 4, t_cached), gbps(probe * 4, t_wc));
    let same = if a == b { "same data" } else { "DIFFERENT data" };
    out.say(format!(
        "\nCPU reading {} back: pinned {cpu_cached:.2} GB/s, write-combined {cpu_wc:.2} GB/s ({same})",
        fmt_bytes(probe * 4)
    ));

    // The round trip: each kind up to the device, cleared, and back down; every element must survive.
    let mut checks = Vec::new();
    for (name, host) in KINDS.iter().zip(kinds.iter_mut()) {
        gpu.scope(&streams, |s| s.stream(0).htod(&host[..], s.device(&mut d_data)))?;
        host.fill(0.0);
        gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d_data), &mut host[..]))?;
        let check = verify::exact(host, input);
        out.say(format!("{name:>16}: round trip {}", check.summary()));
        check.ensure()?;
        checks.push(check);
    }

    // Against a copy-engine figure the user passes (say nvbandwidth's): pinned at 64 MiB and above.
    let mut passed = true;
    let large: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] >= 64 << 20).collect();
    for (pick, dir, reference) in [(0, "H2D", args.ref_htod), (1, "D2H", args.ref_dtoh)] {
        if let (Some(r), false) = (reference, large.is_empty()) {
            let rate = |i: &usize| if pick == 0 { &results[*i][1].htod } else { &results[*i][1].dtoh }.gbps(sizes[*i]);
            let got = large.iter().map(rate).fold(f64::NAN, f64::max);
            passed &= got >= 0.99 * r;
            out.say(verdict(
                got >= 0.99 * r,
                &format!(
                    "pinned {dir} at 64 MiB and above: {got:.2} GB/s = {:.1}% of the reference {r:.2} (needs 99%)",
                    100.0 * got / r
                ),
            ));
        }
    }
    out.rate_chart(args.svg.as_deref(), link_gbps)?;
    out.finish(&json!({
        "device": gpu.info, "repeats": args.run.repeats(), "kinds": KINDS, "sizes": sizes,
        "copies": results, "fits": fits, "host_copy_gbps": host_copy_gbps, "health": health,
        "alloc": alloc_json, "cpu_read_gbps": { "pinned": cpu_cached, "write_combined": cpu_wc },
        "verification": checks, "seed_ms": { "pageable_htod": seed[0], "pinned_htod": seed[1] },
    }))?;
    if !passed {
        anyhow::bail!("pinned copies fell short of the reference");
    }
    Ok(())
}
