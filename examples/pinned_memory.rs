//! Lesson 1: pinned memory, after a CUDA C++ pinned_memory.cu that times `cudaMemcpy` from `malloc`'d
//! and `cudaMallocHost`'d memory, and its exercise, which sweeps the size.
//!
//! Pageable memory (a plain `Vec`) can be paged out by the OS, so the driver cannot DMA from it: it
//! copies through a hidden pinned staging buffer first. Pinned (page-locked) memory is DMA'd directly.
//! This lesson times both directions for four kinds of host memory over a sweep of sizes, then what
//! allocating and pinning cost, then checks that the data survived a round trip through each kind.
//!
//!     cargo run --release --example pinned_memory [-- --min 4KiB --max 256MiB]

use std::process::ExitCode;

use clap::Parser;
use common::{
    args::{parse_bytes, size_sweep, RunArgs},
    report::{fmt_bytes, fmt_ms, verdict, Output, Table},
    timeline::phase,
    timing::{gbps, host_ms, measure, Stats},
    verify::{self, input},
    HostAlloc, Registered,
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
    #[arg(long, value_parser = common::args::parse_gbps, allow_negative_numbers = true)]
    ref_h2d: Option<f64>,
    /// The same for D2H
    #[arg(long, value_parser = common::args::parse_gbps, allow_negative_numbers = true)]
    ref_d2h: Option<f64>,
    #[command(flatten)]
    run: RunArgs,
}

/// One kind of host memory at one size: each direction's copy time.
#[derive(serde::Serialize)]
struct BothWays {
    h2d: Stats,
    d2h: Stats,
}

const KINDS: [&str; 4] = ["pageable", "pinned", "write-combined", "pinned in place"];

fn main() -> ExitCode {
    common::lesson::run(pinned_memory)
}

fn pinned_memory(args: &Args, out: &Output) -> anyhow::Result<()> {
    let sizes = size_sweep(args.min, args.max, 4)?;
    let n = args.max / 4;
    let gpu = &common::lesson::gpu(out)?;
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
    let stream = &streams[0];

    // Time each copy alone with CUDA events on the stream: for each size, each kind both ways.
    let mut results: Vec<Vec<BothWays>> = Vec::new();
    for &bytes in &sizes {
        out.progress(format!("{} ...", fmt_bytes(bytes)));
        let len = bytes / 4;
        let mut row = Vec::new();
        for (name, host) in KINDS.iter().zip(kinds.iter_mut()) {
            let _p = phase(&format!("{name} {}", fmt_bytes(bytes)));
            let h2d = measure(args.run.repeats(), || {
                gpu.timed(&streams, |s| s.htod(stream, &host[..len], s.device(&mut d_data).slice(0..len)))
            })?;
            let d2h = measure(args.run.repeats(), || {
                gpu.timed(&streams, |s| s.dtoh(stream, s.device(&mut d_data).slice(0..len), &mut host[..len]))
            })?;
            row.push(BothWays { h2d, d2h });
        }
        results.push(row);
    }
    for (dir, pick) in [("Host to device", 0), ("Device to host", 1)] {
        out.say(format!(
            "\n{dir}, GB/s (median of up to {} runs after {} warm-up, CUDA events)",
            args.run.repeats, args.run.warmup
        ));
        let mut t = Table::new(&["size", KINDS[0], KINDS[1], KINDS[2], KINDS[3], "pinned/pageable"]);
        for (bytes, row) in sizes.iter().zip(&results) {
            let rate = |k: usize| if pick == 0 { &row[k].h2d } else { &row[k].d2h }.gbps(*bytes);
            let mut cells = vec![fmt_bytes(*bytes)];
            cells.extend((0..4).map(|k| format!("{:.2}", rate(k))));
            cells.push(format!("{:.1}x", rate(1) / rate(0)));
            t.row(cells);
        }
        out.table(&t);
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
    let probe = n.min(16 << 20);
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
        gpu.scope(&streams, |s| s.htod(stream, &host[..], s.device(&mut d_data)))?;
        host.fill(0.0);
        gpu.scope(&streams, |s| s.dtoh(stream, s.device(&mut d_data), &mut host[..]))?;
        let check = verify::exact(host, input);
        out.say(format!("{name:>16}: round trip {}", check.summary()));
        check.ensure()?;
        checks.push(check);
    }

    // The verdict: large pinned copies against the link and, if given, a copy-engine reference.
    let large: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] >= 64 << 20).collect();
    let best = |pick: usize| {
        large
            .iter()
            .map(|&i| if pick == 0 { &results[i][1].h2d } else { &results[i][1].d2h }.gbps(sizes[i]))
            .fold(f64::NAN, f64::max)
    };
    let mut passed = true;
    for (dir, pick, reference) in [("H2D", 0, args.ref_h2d), ("D2H", 1, args.ref_d2h)] {
        if large.is_empty() {
            break;
        }
        let got = best(pick);
        let link = gpu.info.link.as_ref().map_or(String::new(), |l| {
            format!(", {:.0}% of the PCIe link's raw {:.1} GB/s", 100.0 * got / l.gbps, l.gbps)
        });
        match reference {
            Some(r) => {
                passed &= got >= 0.99 * r;
                out.say(verdict(got >= 0.99 * r, &format!("pinned {dir} at 64 MiB and above: {got:.2} GB/s = {:.1}% of the reference {r:.2} (needs 99%){link}", 100.0 * got / r)));
            }
            None => out.say(format!("pinned {dir} at 64 MiB and above: {got:.2} GB/s{link}")),
        }
    }
    out.finish(&json!({
        "device": gpu.info, "repeats": args.run.repeats(), "kinds": KINDS, "sizes": sizes,
        "copies": results,
        "alloc": alloc_json, "cpu_read_gbps": { "pinned": cpu_cached, "write_combined": cpu_wc },
        "verification": checks,
    }))?;
    if !passed {
        anyhow::bail!("pinned copies fell short of the reference");
    }
    Ok(())
}
