//! Lesson 5: zero-copy mapped memory, after a CUDA C++ program whose kernel scales mapped host memory
//! (`cudaHostAllocMapped`, `cudaHostGetDevicePointer`), as NVIDIA's simpleZeroCopy sample does.
//!
//! Pinned memory allocated with the mapped flag (`cudaHostAlloc(..., cudaHostAllocMapped)`) has a
//! device address too (`cudaHostGetDevicePointer`): a kernel can read and write it across the bus,
//! with no explicit copy. Whether that beats "copy in, compute, copy out" depends on how often the
//! kernel touches the data: each access crosses the bus again. This lesson sweeps sizes for a one-pass
//! kernel (out = 2 in) and a two-pass one (then out += in), and says where each approach wins.
//!
//!     cargo run --release --example zero_copy [-- --min 64KiB --max 256MiB]

use std::process::ExitCode;

use clap::Parser;
use common::HostAlloc;
use kernels::Kernels;
use measure::{
    args::{parse_bytes, size_sweep, RunArgs},
    report::{fmt_bytes, fmt_ms, Output, Table},
    timeline::phase,
    timing::{gbps, measure, Stats},
    verify::{self, input},
};
use serde_json::json;

/// Mapped host memory read and written by kernels, against pinned copies and device memory, over sizes.
#[derive(Parser)]
struct Args {
    /// Smallest array
    #[arg(long, default_value = "64KiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    min: usize,
    /// Largest array
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    max: usize,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(zero_copy)
}

fn zero_copy(args: &Args, out: &Output) -> anyhow::Result<()> {
    let sizes = size_sweep(args.min, args.max, 4)?;
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    if !gpu.info.can_map_host_memory {
        anyhow::bail!("{} cannot map host memory, so zero-copy is not available on it", gpu.info.name);
    }
    let n = args.max / 4;

    // Zero-copy: mapped pinned memory, which kernels address directly.
    let mut mapped_in = gpu.pinned_with(n, HostAlloc::MAPPED)?;
    mapped_in.iter_mut().enumerate().for_each(|(i, x)| *x = input(i));
    let mut mapped_out = gpu.pinned_with::<f32>(n, HostAlloc::MAPPED)?;
    // The usual way: pinned host memory copied to and from device memory.
    let h_in = gpu.pinned_from_fn(n, input)?;
    let mut h_out = gpu.pinned::<f32>(n)?;
    let (mut d_in, mut d_out) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?);
    let streams = gpu.streams(1)?;
    let stream = &streams[0];

    let mut rows = Vec::new();
    for &bytes in &sizes {
        out.progress(fmt_bytes(bytes));
        let len = bytes / 4;
        let mut results: Vec<Stats> = Vec::new();
        for passes in [1, 2] {
            let _p =
                phase(&format!("{} pass{} over {}", passes, if passes == 1 { "" } else { "es" }, fmt_bytes(bytes)));
            // The kernel reads and writes host memory across the bus; the scope keeps the host off it meanwhile.
            let zero = measure(r, || {
                gpu.timed(&streams, |s| {
                    let (i, o) = (s.mapped(&mut mapped_in)?.slice(0..len), s.mapped(&mut mapped_out)?.slice(0..len));
                    s.launch(stream, kernels.scale(i, o, 2.0))?; //               zeroCopyKernel<<<...>>>(d_in, d_out, N)
                    if passes == 2 {
                        s.launch(stream, kernels.accumulate(i, o))?; //           reads d_in across the bus again
                    }
                    Ok(())
                })
            })?;
            // Copy in, compute in device memory, copy out.
            let copy = measure(r, || {
                gpu.timed(&streams, |s| {
                    let (i, o) = (s.device(&mut d_in).slice(0..len), s.device(&mut d_out).slice(0..len));
                    s.htod(stream, &h_in[..len], i)?;
                    s.launch(stream, kernels.scale(i, o, 2.0))?;
                    if passes == 2 {
                        s.launch(stream, kernels.accumulate(i, o))?; //           reads device memory again
                    }
                    s.dtoh(stream, o, &mut h_out[..len])
                })
            })?;
            let expected = |i| {
                if passes == 1 {
                    input(i) * 2.0
                } else {
                    input(i) * 2.0 + input(i)
                }
            };
            for got in [&mapped_out[..len], &h_out[..len]] {
                verify::exact(got, expected).ensure()?;
            }
            results.extend([zero, copy]);
        }
        rows.push((bytes, results));
    }

    out.say("GPU time, median of runs after warm-up (CUDA events); bus GB/s counts bytes read plus written");
    let mut t = Table::new(&[
        "size",
        "zero-copy",
        "GB/s",
        "copy+kernel+copy",
        "faster",
        "zero-copy 2 passes",
        "copies 2 passes",
        "faster",
    ]);
    let faster = |z: &Stats, c: &Stats| {
        if z.median_ms < c.median_ms {
            format!("zero-copy {:.2}x", c.median_ms / z.median_ms)
        } else {
            format!("copies {:.2}x", z.median_ms / c.median_ms)
        }
    };
    for (bytes, s) in &rows {
        t.row(vec![
            fmt_bytes(*bytes),
            fmt_ms(s[0].median_ms),
            format!("{:.1}", gbps(2 * bytes, s[0].median_ms)),
            fmt_ms(s[1].median_ms),
            faster(&s[0], &s[1]),
            fmt_ms(s[2].median_ms),
            fmt_ms(s[3].median_ms),
            faster(&s[2], &s[3]),
        ]);
    }
    out.table(&t);
    let wins = |k: usize| {
        rows.iter().filter(|(_, s)| s[k].median_ms < s[k + 1].median_ms).map(|(b, _)| fmt_bytes(*b)).collect::<Vec<_>>()
    };
    let (one, two) = (wins(0), wins(2));
    out.say(format!(
        "\nzero-copy wins one pass at {} of {} sizes ({}) and two passes at {} ({}). One pass streams each byte across the \
         bus once, reading and writing at the same time, with no copy steps; a second pass pays the bus again, while the \
         copying version rereads fast device memory.",
        one.len(), rows.len(), if one.is_empty() { "none".into() } else { one.join(", ") },
        two.len(), if two.is_empty() { "none".into() } else { two.join(", ") }
    ));
    out.say("verified: every result of both approaches, at every size, matches the CPU reference exactly");
    out.finish(&json!({
        "device": gpu.info, "repeats": r,
        "rows": rows.iter().map(|(b, s)| json!({ "bytes": b, "zero_copy": s[0], "copies": s[1], "zero_copy_2_passes": s[2], "copies_2_passes": s[3] })).collect::<Vec<_>>(),
    }))
}
