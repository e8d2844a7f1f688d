//! Lesson 5: zero-copy mapped memory, as the course's day43_ZeroCopyExample.cu has a kernel scale mapped
//! host memory (`cudaHostAllocMapped`, `cudaHostGetDevicePointer`; `zero_copy_example_cu` below is that
//! program in Rust), and as NVIDIA's simpleZeroCopy sample does.
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
use common::{Gpu, HostAlloc};
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

/// day43_ZeroCopyExample.cu: 1M floats in mapped host memory, a kernel that writes twice each into
/// another mapped buffer straight across the bus, no copy; then the host reads the first result.
fn zero_copy_example_cu(gpu: &Gpu, kernels: &Kernels, out: &Output) -> anyhow::Result<f32> {
    const N: usize = 1 << 20;
    let rand = |i: usize| (((i + 1).wrapping_mul(2654435761) >> 7) % 100) as f32; // a fixed stand-in for rand() % 100
    let mut h_in = gpu.pinned_with::<f32>(N, HostAlloc::MAPPED)?; //  1) cudaHostAlloc(&h_in, size, cudaHostAllocMapped)
    let mut h_out = gpu.pinned_with::<f32>(N, HostAlloc::MAPPED)?; //    cudaHostAlloc(&h_out, ...), zeroed
    common::host::fill(&mut h_in, rand); //                              2) initialize h_in
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |s| {
        let (d_in, d_out) = (s.mapped(&mut h_in)?, s.mapped(&mut h_out)?); // 3) cudaHostGetDevicePointer, twice
        kernels.scale(s.stream(0), d_in, d_out, 2.0) // 4) zeroCopyKernel<<<..>>>(d_in, d_out, N)
    })?; //                                                                  cudaDeviceSynchronize()
    out.say(format!("day43_ZeroCopyExample.cu: h_out[0]= {:.6}", h_out[0])); // 5) no explicit memcpy
    verify::exact(&h_out, |i| rand(i) * 2.0).ensure()?;
    Ok(h_out[0])
}

/// One size's four runs: each way, with one pass of the kernel and with two.
#[derive(serde::Serialize)]
struct Row {
    bytes: usize,
    zero_copy: Stats,
    copies: Stats,
    zero_copy_2_passes: Stats,
    copies_2_passes: Stats,
}

fn zero_copy(args: &Args, out: &Output) -> anyhow::Result<()> {
    let sizes = size_sweep(args.min, args.max, 4)?;
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    if !gpu.info.can_map_host_memory {
        anyhow::bail!("{} cannot map host memory, so zero-copy is not available on it", gpu.info.name);
    }
    zero_copy_example_cu(gpu, &kernels, out)?;

    // The exercise: a sweep of sizes, one pass and two, against copy in, compute, copy out.
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
                    kernels.scale(s.stream(0), i, o, 2.0)?; //    zeroCopyKernel<<<..>>>(d_in, d_out, N)
                    if passes == 2 {
                        kernels.accumulate(s.stream(0), i, o)?; // reads d_in across the bus again
                    }
                    Ok(())
                })
            })?;
            // Copy in, compute in device memory, copy out.
            let copy = measure(r, || {
                gpu.timed(&streams, |s| {
                    let (i, o) = (s.device(&mut d_in).slice(0..len), s.device(&mut d_out).slice(0..len));
                    s.stream(0).htod(&h_in[..len], i)?;
                    kernels.scale(s.stream(0), i, o, 2.0)?;
                    if passes == 2 {
                        kernels.accumulate(s.stream(0), i, o)?; // reads device memory again
                    }
                    s.stream(0).dtoh(o, &mut h_out[..len])
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
            let pass = if passes == 1 { "one pass" } else { "two passes" }; // figures named for `xtask compare`
            out.figure(format!("zero-copy, {pass}, {}", fmt_bytes(bytes)), &zero);
            out.figure(format!("copy+kernel+copy, {pass}, {}", fmt_bytes(bytes)), &copy);
            results.extend([zero, copy]);
        }
        let [zero_copy, copies, zero_copy_2_passes, copies_2_passes]: [Stats; 4] =
            results.try_into().expect("two ways, two pass counts");
        rows.push(Row { bytes, zero_copy, copies, zero_copy_2_passes, copies_2_passes });
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
    for row in &rows {
        t.row(vec![
            fmt_bytes(row.bytes),
            fmt_ms(row.zero_copy.median_ms),
            format!("{:.1}", gbps(2 * row.bytes, row.zero_copy.median_ms)),
            fmt_ms(row.copies.median_ms),
            faster(&row.zero_copy, &row.copies),
            fmt_ms(row.zero_copy_2_passes.median_ms),
            fmt_ms(row.copies_2_passes.median_ms),
            faster(&row.zero_copy_2_passes, &row.copies_2_passes),
        ]);
    }
    out.table(&t);
    let wins = |pick: fn(&Row) -> (&Stats, &Stats)| {
        let won = |r: &&Row| pick(r).0.median_ms < pick(r).1.median_ms;
        rows.iter().filter(won).map(|r| fmt_bytes(r.bytes)).collect::<Vec<_>>()
    };
    let (one, two) = (wins(|r| (&r.zero_copy, &r.copies)), wins(|r| (&r.zero_copy_2_passes, &r.copies_2_passes)));
    out.say(format!(
        "\nzero-copy wins one pass at {} of {} sizes ({}) and two passes at {} ({}). One pass streams each byte \
         across the bus once, reading and writing at the same time, with no copy steps; a second pass pays the bus \
         again, while the \
         copying version rereads fast device memory.",
        one.len(),
        rows.len(),
        if one.is_empty() { "none".into() } else { one.join(", ") },
        two.len(),
        if two.is_empty() { "none".into() } else { two.join(", ") }
    ));
    out.say("verified: every result of both approaches, at every size, matches the CPU reference exactly");
    out.finish(&json!({ "device": gpu.info, "repeats": r, "rows": rows }))
}
