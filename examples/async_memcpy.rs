//! Lesson 2: asynchronous copies, as the course's async_memcpy.cu does them (and NVIDIA's asyncAPI sample).
//!
//! `cudaMemcpy` returns when the copy is done; `cudaMemcpyAsync` from pinned memory queues the copy on a
//! stream and returns at once. The GPU does the same work either way, in about the same time: what
//! changes is that the CPU is free while it runs. `async_memcpy_cu` below is that program in Rust. The
//! lesson then shows it with real CPU work, as NVIDIA's asyncAPI sample does: while the GPU works, the
//! CPU computes the reference the result is checked against, a block at a time, polling the stream
//! between blocks; and it times the host inside the API calls against the GPU time.
//!
//!     cargo run --release --example async_memcpy [-- -n 4M --iters 100]

use std::{process::ExitCode, time::Instant};

use clap::Parser;
use common::Gpu;
use kernels::{cpu, Kernels};
use measure::{
    args::{parse_count, RunArgs},
    report::{fmt_count, fmt_ms, Figure, Output, Table},
    timeline::phase,
    timing::{measure, Stats},
    verify::{self, input},
};

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

fn main() -> ExitCode {
    measure::lesson::run(async_memcpy)
}

/// async_memcpy.cu: 4M floats of 1.0 up, 100 rounds of sqrt(x*x + 1), back down; first with calls that
/// block, then queued on a stream; each version timed with events and printed, as that program does.
fn async_memcpy_cu(gpu: &Gpu, kernels: &Kernels, out: &Output) -> anyhow::Result<(f64, f64)> {
    const N: usize = 1 << 22; //                                    4M elements
    let h_data = gpu.pinned_from_fn(N, |_| 1.0f32)?; //            cudaMallocHost: MUST use pinned memory for async!
    let mut h_back = gpu.pinned::<f32>(N)?; //                     the scope lends h_data to the upload: a second buffer
    let mut d_data = gpu.alloc::<f32>(N)?; //                      cudaMalloc(&d_data, BYTES)
    let streams = gpu.streams(1)?; //                              cudaStreamCreate(&stream)

    // Synchronous (blocking): each call returns when its work is done.
    let sync_ms = gpu.timed(&streams, |s| {
        let (d, stream) = (s.device(&mut d_data), s.stream(0));
        stream.htod(&h_data, d)?; //                               cudaMemcpy(d_data, h_data, BYTES, H2D)
        stream.synchronize()?;
        kernels.heavy_sqrt(stream, d, 100)?; //                    processKernel<<<..>>>(d_data, N)
        stream.synchronize()?;
        stream.dtoh(d, &mut h_back)?; //                           cudaMemcpy(h_data, d_data, BYTES, D2H)
        stream.synchronize()
    })?;
    // Asynchronous (non-blocking): these return immediately to the CPU.
    let async_ms = gpu.timed(&streams, |s| {
        let (d, stream) = (s.device(&mut d_data), s.stream(0));
        stream.htod(&h_data, d)?; //                               cudaMemcpyAsync(d_data, h_data, BYTES, H2D, stream)
        kernels.heavy_sqrt(stream, d, 100)?; //                    processKernel<<<..., 0, stream>>>(d_data, N)
        stream.dtoh(d, &mut h_back) //                             cudaMemcpyAsync(h_data, d_data, BYTES, D2H, stream)
    })?; // "Can do CPU work here while GPU is busy!"; then the scope waits (cudaStreamSynchronize)
    out.say(format!("async_memcpy.cu: Sync time:  {sync_ms:.2} ms\nasync_memcpy.cu: Async time: {async_ms:.2} ms"));
    // Every element is 100 rounds of the kernel on 1.0, which the CPU computes once.
    let expected = cpu::heavy_sqrt(1.0, 100);
    verify::exact(&h_back, |_| expected).ensure()?;
    Ok((sync_ms, async_ms))
}

/// Elements of the reference the CPU computes between two polls of the stream.
const BLOCK: usize = 256;

/// One version's figures: what the GPU took, what the host spent inside the calls, and what it did
/// while the GPU worked.
#[derive(serde::Serialize)]
struct Version {
    version: &'static str,
    gpu: Stats,
    host_in_calls: Stats,
    host_free: Stats,
    cpu_elements_meanwhile: usize,
}

fn async_memcpy(args: &Args, out: &Output) -> anyhow::Result<()> {
    let (n, iters, r) = (args.elements, args.iters, args.run.repeats());
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let seed = async_memcpy_cu(gpu, &kernels, out)?;

    // The same three calls on this lesson's data (-n, --iters), each version many times, with the host's
    // side of it measured too.
    let mut d_data = gpu.alloc::<f32>(n)?;
    let h_data = gpu.pinned_from_fn(n, input)?;
    let mut h_result = gpu.pinned::<f32>(n)?;
    let streams = gpu.streams(1)?;
    let mut reference = common::pageable(n, |_| 0f32)?;
    // One run: with `wait` each call blocks until its work is done; without, each returns at once. With
    // `cpu_work` the CPU computes reference elements until the GPU is done.
    let mut run = |wait: bool, cpu_work: bool| -> anyhow::Result<Run> {
        let (mut api_ms, mut free_ms, mut done) = (0.0, 0.0, 0);
        let gpu_ms = gpu.timed(&streams, |s| {
            let (d, stream) = (s.device(&mut d_data), s.stream(0));
            let block = |queued: anyhow::Result<()>| if wait { queued.and_then(|_| s.synchronize()) } else { queued };
            let t = Instant::now();
            block(stream.htod(&h_data, d))?;
            block(kernels.heavy_sqrt(stream, d, iters))?;
            block(stream.dtoh(d, &mut h_result))?;
            api_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            while cpu_work && done < n && !s.is_idle()? {
                let end = (done + BLOCK).min(n);
                (done..end).for_each(|i| reference[i] = cpu::heavy_sqrt(input(i), iters));
                done = end;
            }
            free_ms = if done > 0 { t.elapsed().as_secs_f64() * 1e3 } else { 0.0 };
            Ok(())
        })?;
        Ok(Run { gpu_ms, api_ms, free_ms, done })
    };

    let mut versions = Vec::new();
    for (version, wait) in [("synchronous", true), ("asynchronous", false)] {
        let _p = phase(version);
        // GPU time alone (no CPU work, so the stop event is recorded as soon as the calls return) ...
        let gpu_time = measure(r, || run(wait, false).map(|t| t.gpu_ms))?;
        // ... then the host's view, with the CPU working while it waits.
        let host = (0..r.warmup + r.repeats).map(|_| run(wait, true)).collect::<anyhow::Result<Vec<Run>>>()?;
        let host = &host[r.warmup..];
        let stats = |f: fn(&Run) -> f64| Stats::from_samples(&host.iter().map(f).collect::<Vec<_>>());
        let mut work: Vec<usize> = host.iter().map(|h| h.done).collect();
        work.sort_unstable();
        versions.push(Version {
            version,
            gpu: gpu_time,
            host_in_calls: stats(|h| h.api_ms)?,
            host_free: stats(|h| h.free_ms)?,
            cpu_elements_meanwhile: work[work.len() / 2],
        });
    }
    report(out, n, iters, r, &versions);
    for v in &versions {
        out.figure(format!("{}: GPU time", v.version), &v.gpu); // named for `cargo xtask compare`
        out.add(Figure::new(format!("{}: host in the calls", v.version), &v.host_in_calls).on_host());
    }

    // One more asynchronous run, whose reference elements computed meanwhile are used for the check.
    let Run { done, .. } = run(false, true)?;
    let check = verify::exact(&h_result, |i| if i < done { reference[i] } else { cpu::heavy_sqrt(input(i), iters) });
    out.say(check.summary());
    check.ensure()?;
    out.finish(&serde_json::json!({
        "device": gpu.info, "elements": n, "iters": iters, "repeats": r, "versions": versions,
        "seed": { "sync_ms": seed.0, "async_ms": seed.1 }, "verification": check,
    }))
}

/// One run of the three calls.
struct Run {
    gpu_ms: f64,
    api_ms: f64,
    free_ms: f64,
    done: usize,
}

fn report(out: &Output, n: usize, iters: u32, r: measure::timing::Repeats, versions: &[Version]) {
    let mut t = Table::new(&[
        "version",
        "GPU time",
        "host blocked in the calls",
        "host free while the GPU worked",
        "reference elements computed then",
    ]);
    for v in versions {
        let row = [&v.gpu, &v.host_in_calls, &v.host_free].map(|s| fmt_ms(s.median_ms));
        t.row([vec![v.version.to_string()], row.to_vec(), vec![fmt_count(v.cpu_elements_meanwhile)]].concat());
    }
    out.say(format!(
        "\n{} elements, {iters} rounds of sqrt(x*x + 1); median of up to {} runs after {} warm-up",
        fmt_count(n),
        r.repeats,
        r.warmup
    ));
    out.table(&t);
    let (sync, asyn) = (&versions[0], &versions[1]);
    let cpu_ms_per_element = asyn.host_free.median_ms / asyn.cpu_elements_meanwhile.max(1) as f64;
    out.say(format!(
        "\nThe GPU took {} synchronously and {} asynchronously: async calls do not make the GPU faster. The \
         synchronous calls held the host for {}; the asynchronous ones returned after {} ({:.0}x less), leaving the \
         CPU free for {} of real work (this kernel is {:.0}x faster on the GPU than on one CPU core, hence the few \
         elements).",
        fmt_ms(sync.gpu.median_ms),
        fmt_ms(asyn.gpu.median_ms),
        fmt_ms(sync.host_in_calls.median_ms),
        fmt_ms(asyn.host_in_calls.median_ms),
        sync.host_in_calls.median_ms / asyn.host_in_calls.median_ms,
        fmt_ms(asyn.host_free.median_ms),
        n as f64 * cpu_ms_per_element / asyn.gpu.median_ms
    ));
}
