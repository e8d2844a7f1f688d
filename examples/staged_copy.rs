//! Lesson 7: ordinary memory at near-pinned speed (beyond the CUDA C++ programs the first lessons follow).
//!
//! Most data lives in ordinary, pageable memory (a `Vec`), and the driver's path for it is slow: it
//! copies through one small pinned buffer at a time. Three ways round that, each measured here against
//! plain pageable and pinned copies, both directions, over sizes:
//! - pin the `Vec` in place for the one transfer (cudaHostRegister, copy, cudaHostUnregister);
//! - stage it: several CPU threads copy chunks into a ring of pinned buffers while the copy engine
//!   drains them (common::staging);
//! - and, for comparison, staging's CPU side alone, measured in this run: the same threads copying the
//!   same chunks into (or out of) the same pinned slots, with nothing on the GPU. Staging does that
//!   work and a DMA beside it, so it cannot beat that rate; where it runs at about it, the CPU copy is
//!   what stops it.
//!
//!     cargo run --release --example staged_copy [-- --threads 8 --max 1GiB]

use std::process::ExitCode;

use clap::Parser;
use common::Destination;
use measure::{
    args::{parse_bytes, parse_elements_bytes, size_sweep, RunArgs},
    report::{fmt_bytes, Figure, Output, Table},
    timeline::phase,
    timing::{gbps, host_ms, measure, Stats},
    verify::{self, input},
};
use serde_json::json;

/// Pageable memory to and from the device: the driver's path, pinning in place, and staging.
#[derive(Parser)]
struct Args {
    /// Smallest transfer
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    min: usize,
    /// Largest transfer
    #[arg(long, default_value = "128MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    max: usize,
    /// CPU threads that copy into and out of the staging ring (default: one per core, up to 8)
    #[arg(long, value_parser = measure::args::parse_threads, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// Size of each pinned staging buffer (two per thread)
    #[arg(long, default_value = "8MiB", value_parser = parse_elements_bytes, allow_negative_numbers = true)]
    slot: usize,
    #[command(flatten)]
    run: RunArgs,
}

const METHODS: [&str; 5] = ["pageable", "pinned", "pinned in place", "staged", "staging's CPU side alone"];
/// The methods as their figures are named: what the staged ones copy from said.
const FIGURES: [&str; 5] =
    ["pageable", "pinned", "pinned in place", "staged from pageable", "staging's CPU side, pageable"];

fn main() -> ExitCode {
    measure::lesson::run(staged_copy)
}

fn staged_copy(args: &Args, out: &Output) -> anyhow::Result<()> {
    let sizes = size_sweep(args.min, args.max, 4)?;
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()).min(8));
    let r = args.run.repeats();
    let n = args.max / 4;
    let gpu = &measure::lesson::gpu(out)?;
    let mut d_data = gpu.alloc::<f32>(n)?;
    let mut pageable = common::pageable(n, input)?;
    let mut landing = common::pageable(n, |_| 0f32)?;
    let mut pinned = gpu.pinned_from_fn(n, input)?;
    let mut stager = gpu.stager::<f32>(threads, args.slot)?;
    let streams = gpu.streams(1)?;

    // Each method moves `len` elements one way; all are timed on the host clock, from the call to the
    // data being in place, since staging is driven by the host.
    let mut rows: Vec<(usize, [Stats; 5], [Stats; 5])> = Vec::new();
    for &bytes in &sizes {
        out.progress(fmt_bytes(bytes));
        let len = bytes / 4;
        let time = |f: &mut dyn FnMut() -> anyhow::Result<()>| {
            measure(r, || {
                let (done, ms) = host_ms(&mut *f);
                done.map(|()| ms)
            })
        };
        let phase_up = phase(&format!("upload {}", fmt_bytes(bytes)));
        let up = [
            time(&mut || {
                gpu.scope(&streams, |s| s.stream(0).htod(&pageable[..len], s.device(&mut d_data).slice(0..len)))
            })?,
            time(&mut || {
                gpu.scope(&streams, |s| s.stream(0).htod(&pinned[..len], s.device(&mut d_data).slice(0..len)))
            })?,
            time(&mut || {
                // cudaHostRegister, the copy, cudaHostUnregister
                gpu.pin_in_place(&mut pageable[..len], |locked| {
                    gpu.scope(&streams, |s| s.stream(0).htod(locked, s.device(&mut d_data).slice(0..len)))
                })?
            })?,
            time(&mut || stager.upload(&pageable[..len], &mut d_data))?,
            time(&mut || stager.host_side_only(&mut pageable[..len], Destination::Device))?,
        ];
        drop(phase_up);
        let _phase_down = phase(&format!("download {}", fmt_bytes(bytes)));
        let down = [
            time(&mut || {
                gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d_data).slice(0..len), &mut landing[..len]))
            })?,
            time(&mut || {
                gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d_data).slice(0..len), &mut pinned[..len]))
            })?,
            time(&mut || {
                gpu.pin_in_place(&mut landing[..len], |locked| {
                    gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d_data).slice(0..len), locked))
                })?
            })?,
            time(&mut || stager.download(&d_data, &mut landing[..len]))?,
            time(&mut || stager.host_side_only(&mut landing[..len], Destination::Host))?,
        ];
        // Named for `cargo xtask compare`, host clock: `staged from pageable H2D 64 MiB`.
        for (dir, times) in [("H2D", &up), ("D2H", &down)] {
            for (method, stats) in FIGURES.iter().zip(times) {
                out.add(Figure::sized(format!("{method} {dir}"), bytes, stats).on_host());
            }
        }
        rows.push((bytes, up, down));
    }

    // Check the staged paths end to end: up through the stager, down through the stager, compare.
    landing.fill(0.0);
    stager.upload(&pageable, &mut d_data)?;
    stager.download(&d_data, &mut landing)?;
    let check = verify::exact(&landing, input);

    for (dir, pick) in [("Host to device", 0), ("Device to host", 1)] {
        out.say(format!(
            "\n{dir}, GB/s on the host clock (median of up to {} runs), staging with {threads} threads and {} slots",
            r.repeats,
            fmt_bytes(args.slot)
        ));
        let mut headers: Vec<&str> = vec!["size"];
        headers.extend(METHODS);
        headers.extend(["staged/pinned", "staged/pageable"]);
        let mut t = Table::new(&headers);
        for (bytes, up, down) in &rows {
            let m = if pick == 0 { up } else { down };
            let rate = |k: usize| m[k].gbps(*bytes);
            let mut cells = vec![fmt_bytes(*bytes)];
            cells.extend((0..5).map(|k| format!("{:.2}", rate(k))));
            cells.push(format!("{:.0}%", 100.0 * rate(3) / rate(1)));
            cells.push(format!("{:.1}x", rate(3) / rate(0)));
            t.row(cells);
        }
        out.table(&t);
    }
    out.say(format!("\n{}", check.summary()));
    check.ensure()?;

    // What stops staging, at the largest size: the link (pinned copies' rate), the CPU copy (its CPU side
    // alone, measured above: the same threads, chunks and slots, which staging cannot beat), or neither.
    let (bytes, up, down) = rows.last().expect("size_sweep gives at least one size");
    for (dir, m) in [("upload", up), ("download", down)] {
        let rate = |k: usize| m[k].gbps(*bytes);
        let limit = if rate(3) >= 0.85 * rate(1) {
            "near the pinned rate: the link is what stops it".to_string()
        } else if rate(3) >= 0.8 * rate(4) {
            format!("near the {:.1} GB/s its CPU side reaches alone: the CPU copy stops it", rate(4))
        } else {
            format!(
                "below both the link and the {:.1} GB/s its CPU side reaches alone: the two sides in turn, start-up \
                 and hand-over costs",
                rate(4)
            )
        };
        out.say(format!(
            "staged {dir} at {}: {:.1} GB/s, {:.0}% of pinned, {:.1}x the driver's pageable path; {limit}",
            fmt_bytes(*bytes),
            rate(3),
            100.0 * rate(3) / rate(1),
            rate(3) / rate(0)
        ));
    }
    out.finish(&json!({
        "device": gpu.info, "threads": threads, "slot_bytes": args.slot, "repeats": r, "methods": METHODS,
        "rows": rows.iter().map(|(b, u, d)| {
            let rates = |m: &[Stats; 5]| m.iter().map(|s| gbps(*b, s.median_ms)).collect::<Vec<_>>();
            json!({ "bytes": b, "htod_gbps": rates(u), "dtoh_gbps": rates(d) })
        }).collect::<Vec<_>>(),
        "verification": check,
    }))
}
