//! Lesson 8: both directions at once (beyond the CUDA C++ programs the first lessons follow).
//!
//! A GPU with two or more copy engines can upload and download at the same time, on separate streams.
//! Each direction then runs a little slower than alone (they share the link and the host's memory), but
//! together they move far more. This lesson measures that over sizes, as nvbandwidth's
//! `host_to_device_bidirectional_memcpy_ce` does. `every_gpu` does it on every GPU of the host at once.
//!
//!     cargo run --release --example bidirectional [-- --max 1GiB --ref-both 51.3]

use std::process::ExitCode;

use clap::Parser;
use measure::{
    args::{parse_bytes, parse_gbps, size_sweep, RunArgs},
    pipeline::{CopyBuffers, CopyTimes},
    report::{fmt_bytes, Figure, Output, Table},
    timeline::phase,
};

/// H2D and D2H at once against each alone, over sizes.
#[derive(Parser)]
struct Args {
    /// Smallest transfer
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    min: usize,
    /// Largest transfer
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    max: usize,
    /// A both-directions figure (GB/s per direction, say from nvbandwidth) to hold the largest size against
    #[arg(long, value_parser = parse_gbps, allow_negative_numbers = true)]
    ref_both: Option<f64>,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(bidirectional)
}

fn bidirectional(args: &Args, out: &Output) -> anyhow::Result<()> {
    let sizes = size_sweep(args.min, args.max, 4)?;
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    out.say(format!(
        "Copies each way alone and both at once (an H2D and a D2H on two streams), GB/s, median of up to {} runs",
        r.repeats
    ));
    let mut t = Table::new(&["size", "H2D alone", "D2H alone", "both: each way", "both: total", "total / best alone"]);
    let mut rows = Vec::new();
    let mut buffers = CopyBuffers::new(gpu, args.max / 4)?;
    for &bytes in &sizes {
        out.progress(fmt_bytes(bytes));
        let _p = phase(&format!("both ways, {}", fmt_bytes(bytes)));
        let c = CopyTimes::measure_in(gpu, &mut buffers, bytes / 4, r)?;
        let (h, d, b) = (c.htod.gbps(bytes), c.dtoh.gbps(bytes), c.both.gbps(bytes));
        t.row(vec![
            fmt_bytes(bytes),
            format!("{h:.2}"),
            format!("{d:.2}"),
            format!("{b:.2}"),
            format!("{:.2}", 2.0 * b),
            format!("{:.2}x", 2.0 * b / h.max(d)),
        ]);
        for (series, stats) in [("H2D alone", &c.htod), ("D2H alone", &c.dtoh), ("both at once", &c.both)] {
            out.add(Figure::sized(series, bytes, stats)); // `both at once 1 GiB`, for `cargo xtask compare`
        }
        rows.push(c);
    }
    out.table(&t);
    let last = rows.last().expect("size_sweep gives at least one size");
    let each = last.both.gbps(last.bytes);
    let limit = match measure::machine::PcieLink::of(&gpu.info) {
        Some(l) => format!("; the link's raw rate is {:.1} GB/s each way", l.gbps),
        None => String::new(),
    };
    out.say(format!(
        "both at once at {}: {each:.2} GB/s each way, {:.2} in all{limit}",
        fmt_bytes(last.bytes),
        2.0 * each
    ));
    if let Some(reference) = args.ref_both {
        out.say(format!("that is {:.1}% of the reference {reference:.2} GB/s each way", 100.0 * each / reference));
    }
    let reference = args.ref_both;
    out.finish(
        &serde_json::json!({ "device": gpu.info, "repeats": r, "sizes": rows, "reference_each_way_gbps": reference }),
    )
}
