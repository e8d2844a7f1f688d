//! Lesson 2: asynchronous copies, as a CUDA C++ async_memcpy.cu does them (and NVIDIA's asyncAPI sample).
//!
//! `cudaMemcpy` returns when the copy is done; `cudaMemcpyAsync` from pinned memory queues the copy on a
//! stream and returns at once. The GPU does the same work either way, in about the same time: what
//! changes is that the CPU is free while it runs. This lesson shows that with real CPU work, as NVIDIA's
//! asyncAPI sample does: while the GPU works, the CPU computes the reference the result is checked
//! against, a block at a time, polling the stream between blocks. It also times the host inside the
//! API calls against the GPU time.
//!
//!     cargo run --release --example async_memcpy [-- -n 4M --iters 100]

use std::{process::ExitCode, time::Instant};

use clap::Parser;
use kernels::{cpu, Kernels};
use measure::{
    args::{parse_count, RunArgs},
    report::{fmt_count, fmt_ms, Output, Table},
    timeline::phase,
    timing::{measure, Stats},
    verify::{self, input},
};
use serde_json::json;

/// Synchronous against asynchronous H2D, kernel, D2H: GPU time, host time in API calls, CPU work done meanwhile.
#[derive(Parser)]
struct Args {
    /// Elements (f32); k, M, G multiply by 2^10, 2^20, 2^30
    #[arg(short = 'n', long, default_value = "4M", value_parser = parse_count, allow_negative_numbers = true)]
    elements: usize,
    /// Rounds of x = sqrt(x*x + 1) per element (that program's "heavy computation")
    #[arg(long, default_value = "100", value_parser = measure::args::parse_u32, allow_negative_numbers = true)]
    iters: u32,
    #[command(flatten)]
    run: RunArgs,
}

/// Elements of the reference the CPU computes between two polls of the stream.
const BLOCK: usize = 256;

fn main() -> ExitCode {
    measure::lesson::run(async_memcpy)
}

fn async_memcpy(args: &Args, out: &Output) -> anyhow::Result<()> {
    let (n, iters, r) = (args.elements, args.iters, args.run.repeats());
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let mut d_data = gpu.alloc::<f32>(n)?;

    // MUST use pinned memory for async: from pageable memory the copy would block anyway.
    let h_data = gpu.pinned_from_fn(n, input)?;
    let mut h_result = gpu.pinned::<f32>(n)?;
    let streams = gpu.streams(1)?;
    let stream = &streams[0];
    let mut reference = common::pageable(n, |_| 0f32)?;

    // One run of the program's three calls. With `wait` each call blocks until its work is done, as
    // cudaMemcpy (and a launch followed by cudaDeviceSynchronize) do; without, each returns at once.
    // With `cpu_work` the CPU computes reference elements until the GPU is done.
    // Returns (GPU ms, host ms inside the three calls, host ms free while the GPU worked, reference
    // elements computed in that time).
    let mut run = |wait: bool, cpu_work: bool| -> anyhow::Result<(f64, f64, f64, usize)> {
        let (mut api_ms, mut free_ms, mut done) = (0.0, 0.0, 0);
        let gpu_ms = gpu.timed(&streams, |s| {
            let d = s.device(&mut d_data);
            let block = |queued: anyhow::Result<()>| {
                if wait {
                    queued.and_then(|_| s.synchronize())
                } else {
                    queued
                }
            };
            let t = Instant::now();
            block(s.htod(stream, &h_data, d))?; //                            cudaMemcpy[Async](d_data, h_data, BYTES, H2D, stream)
            block(s.launch(stream, kernels.heavy_sqrt(d, iters)))?; //     processKernel<<<blocks, 256, 0, stream>>>(d_data, N), grid-stride
            block(s.dtoh(stream, d, &mut h_result))?; //                       cudaMemcpy[Async](h_data, d_data, BYTES, D2H, stream)
            api_ms = t.elapsed().as_secs_f64() * 1e3;
            // "Can do CPU work here while GPU is busy!"
            let t = Instant::now();
            while cpu_work && done < n && !s.is_idle()? {
                let end = (done + BLOCK).min(n);
                (done..end).for_each(|i| reference[i] = cpu::heavy_sqrt(input(i), iters));
                done = end;
            }
            free_ms = if done > 0 { t.elapsed().as_secs_f64() * 1e3 } else { 0.0 };
            Ok(())
        })?;
        Ok((gpu_ms, api_ms, free_ms, done))
    };

    let mut rows = Vec::new();
    for (name, wait) in [("synchronous", true), ("asynchronous", false)] {
        let _p = phase(name);
        // GPU time alone (no CPU work, so the stop event is recorded as soon as the calls return) ...
        let gpu_time = measure(r, || run(wait, false).map(|t| t.0))?;
        // ... then the host's view, with the CPU working while it waits.
        let host: Vec<(f64, f64, f64, usize)> =
            (0..r.warmup + r.repeats).map(|_| run(wait, true)).collect::<anyhow::Result<_>>()?;
        let host = &host[r.warmup..];
        let api = Stats::from_samples(&host.iter().map(|h| h.1).collect::<Vec<_>>())?;
        let free = Stats::from_samples(&host.iter().map(|h| h.2).collect::<Vec<_>>())?;
        let mut work: Vec<usize> = host.iter().map(|h| h.3).collect();
        work.sort_unstable();
        rows.push((name, gpu_time, api, free, work[work.len() / 2]));
    }

    let mut t = Table::new(&[
        "version",
        "GPU time",
        "host blocked in the calls",
        "host free while the GPU worked",
        "reference elements computed then",
    ]);
    for (name, gpu_time, api, free, work) in &rows {
        t.row(vec![
            name.to_string(),
            fmt_ms(gpu_time.median_ms),
            fmt_ms(api.median_ms),
            fmt_ms(free.median_ms),
            fmt_count(*work),
        ]);
    }
    out.say(format!(
        "{} elements, {iters} rounds of sqrt(x*x + 1); median of up to {} runs after {} warm-up",
        fmt_count(n),
        r.repeats,
        r.warmup
    ));
    out.table(&t);
    let (sync, asyn) = (&rows[0], &rows[1]);
    out.say(format!(
        "\nThe GPU took {} synchronously and {} asynchronously: async calls do not make the GPU faster. The synchronous \
         calls held the host for {}; the asynchronous ones returned after {} ({:.0}x less), leaving the CPU free for {} \
         of real work (this kernel is {:.0}x faster on the GPU than on one CPU core, hence the few elements).",
        fmt_ms(sync.1.median_ms),
        fmt_ms(asyn.1.median_ms),
        fmt_ms(sync.2.median_ms),
        fmt_ms(asyn.2.median_ms),
        sync.2.median_ms / asyn.2.median_ms,
        fmt_ms(asyn.3.median_ms),
        n as f64 / asyn.4.max(1) as f64 * asyn.3.median_ms / asyn.1.median_ms
    ));

    // One more asynchronous run, whose reference elements computed meanwhile are used for the check.
    let (_, _, _, done) = run(false, true)?;
    let check = verify::exact(&h_result, |i| if i < done { reference[i] } else { cpu::heavy_sqrt(input(i), iters) });
    out.say(check.summary());
    check.ensure()?;
    out.finish(&json!({
        "device": gpu.info, "elements": n, "iters": iters, "repeats": r,
        "versions": rows.iter().map(|(name, g, a, f, w)| json!({ "version": name, "gpu": g, "host_in_calls": a, "host_free": f, "cpu_elements_meanwhile": w })).collect::<Vec<_>>(),
        "verification": check,
    }))
}
