//! Lesson 12: plan your own pipeline (beyond the CUDA C++ programs the first lessons follow).
//!
//! Given what a kernel costs per MiB, which chunk count and stream count make a copy-in, compute,
//! copy-out pipeline fastest, and how long should it take? The planner measures this GPU's copy costs
//! and the kernel's over chunk sizes (`t = α + n/β` each), ranks every configuration by a model built
//! from them, runs the best and its neighbours with the overlap loop, and prints what it predicted
//! beside what it got, with the best run held against the lower bound of `overlap`. Where no overlap can
//! help (copy-bound past what two directions give, or a kernel so short that per-operation costs
//! dominate), it says so.
//!
//! `--ptx mine.ptx --kernel NAME` plans for a kernel of your own (`extern "C" __global__ void NAME(float*
//! data, unsigned long long n)`, in place), timed and run in a child process.
//!
//!     cargo run --release --example planner [-- --size 256MiB --kernel-ms-per-mib 0.02 | --ptx mine.ptx --kernel NAME]

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use kernels::Kernels;
use measure::{
    args::{parse_bytes, RunArgs, WorkArgs},
    bound::PipelineReport,
    error::bad_args,
    pipeline::{balanced_work, calibrate_process, Buffering, Pipeline, PipelineRun},
    planner::{self, FittedCosts, Prediction, UserPtx},
    report::{fmt_bytes, fmt_ms, Figure, Output, Table},
    timing::Stats,
    work::{Steps, Work},
    ChunkPlan,
};

/// The best chunk and stream counts for a kernel's cost, predicted, then run.
#[derive(Parser)]
struct Args {
    /// The data the pipeline moves in (and out)
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    size: usize,
    /// What the kernel costs over a chunk of 1 MiB, ms, launch included (the built-in process kernel is
    /// calibrated to it); without it (or --iters, or --ptx), a kernel as long as the copies
    #[arg(long, value_parser = parse_ms, conflicts_with_all = ["iters", "ptx"])]
    kernel_ms_per_mib: Option<f64>,
    /// A kernel of your own: a PTX file (nvcc -ptx) with `extern "C" __global__ void NAME(float* data,
    /// unsigned long long n)`, run in place in a child process
    #[arg(long, requires = "kernel", conflicts_with = "iters")]
    ptx: Option<std::path::PathBuf>,
    /// The name of your kernel in --ptx
    #[arg(long, requires = "ptx")]
    kernel: Option<String>,
    #[command(flatten)]
    work: WorkArgs,
    #[command(flatten)]
    run: RunArgs,
}

fn parse_ms(s: &str) -> anyhow::Result<f64> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => anyhow::bail!("'{s}' is not a positive number of milliseconds"),
    }
}

/// One configuration run: what the model said, what it took.
#[derive(serde::Serialize)]
struct Tried {
    predicted: Prediction,
    achieved: Stats,
}

fn main() -> ExitCode {
    match planner::child_job() {
        // The planner started itself again to time a kernel of yours (see UserPtx): this is that child.
        Some(job) => measure::error::finish(job.and_then(your_kernel).map_err(Into::into)),
        None => measure::lesson::run(plan),
    }
}

/// The child: your kernel, and nothing else of the planner's, in a process of its own.
fn your_kernel(job: planner::ChildJob) -> anyhow::Result<()> {
    let ptx = std::fs::read_to_string(job.ptx()).with_context(|| format!("reading {}", job.ptx().display()))?;
    let gpu = common::Gpu::init()?;
    let kernel = gpu.load_ptx(&ptx)?.kernel(job.kernel())?;
    let mut kernels = Kernels::load(&gpu)?;
    // SAFETY: the promise that the kernel touches only data[0..n) is yours, who passed --ptx, as for any
    // program of yours you run. This process holds nothing but the GPU, the job's buffers and the times
    // it prints, so whatever the kernel does reaches nothing of the planner's: a fault kills this
    // process's context only, and the planner reports it.
    unsafe { kernels.adopt_user(kernel) };
    job.run(&gpu, &kernels)
}

fn plan(args: &Args, out: &Output) -> anyhow::Result<()> {
    let (n, r) = (args.size / 4, args.run.repeats());
    anyhow::ensure!(n >= 4, "--size: at least 16 bytes");
    let bytes = n * 4;
    // A kernel of yours is checked before the GPU starts, and runs only in a child process.
    let user = match (&args.ptx, &args.kernel) {
        (Some(ptx), Some(name)) => {
            Some(UserPtx::new(ptx.clone(), name.clone()).map_err(|e| bad_args(format!("--ptx: {e:#}")))?)
        }
        _ => None,
    };
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let mib = (1 << 20) / 4;
    let work = match (args.kernel_ms_per_mib, args.work.iters, &user) {
        (_, _, Some(_)) => Work::User,
        (Some(ms), _, _) => Work::Process(calibrate_process(gpu, &kernels, mib, ms, r)?),
        (None, Some(iters), _) => Work::Process(iters),
        (None, None, _) => balanced_work(gpu, &kernels, mib, r)?,
    };
    // Pinned host memory for the runs, and 4 MiB at least for the costs' fits.
    let mut p = Pipeline::new(gpu, &kernels, Steps::InPlace(work), n.max(1 << 20), r)?;
    let (h_in, h_out) = (&p.h_in[..], &mut p.h_out[..]);

    // What this GPU's copies and this kernel cost, over chunk sizes.
    let costs = match &user {
        Some(u) => FittedCosts::measure(gpu, (h_in, h_out), |sizes| u.kernel_times(sizes, r), r)?,
        None => {
            FittedCosts::measure(gpu, (h_in, h_out), |sizes| planner::kernel_times(gpu, &kernels, work, sizes, r), r)?
        }
    };
    let line = |what: &str, c: &measure::fit::CopyCost| {
        format!("{what:<9} {:>6.1} µs per operation, then {:>7.2} GB/s", c.alpha_us, c.beta_gbps)
    };
    let what = user.as_ref().map_or(work.describe(), |u| format!("your kernel {} from {}", u.name, u.ptx.display()));
    out.say(format!("{} ({}), {what}", fmt_bytes(bytes), n));
    out.say(line("upload", &costs.upload));
    out.say(line("download", &costs.download));
    out.say(line("kernel", &costs.kernel));
    let asked = args.kernel_ms_per_mib.map_or(String::new(), |ms| format!(" (asked {ms} ms)"));
    out.say(format!(
        "the kernel takes {:.4} ms over a chunk of 1 MiB, launch included{asked}",
        costs.kernel.ms(1 << 20)
    ));
    costs.warnings().iter().for_each(|w| out.say(w));
    out.say(format!("both directions at once keep {:.0}% of their rate", 100.0 * costs.both_ways));

    // Every configuration that fits in free device memory, ranked by the model.
    let (free, _) = gpu.memory()?;
    let ranked = costs.rank(bytes, free / 10 * 8);
    let best = ranked.first().cloned().ok_or_else(|| anyhow::anyhow!("no configuration fits in device memory"))?;
    out.say("\nThe model's best (predicted, not yet run):");
    let mut t = Table::new(&["chunks", "streams", "predicted", "limited by (model)", "per-operation share"]);
    for p in ranked.iter().take(5) {
        let share = format!("{:.0}%", 100.0 * p.per_operation_share);
        t.row(vec![p.chunks.to_string(), p.streams.to_string(), fmt_ms(p.ms), p.limit.name().into(), share]);
    }
    out.table(&t);

    // Run the best, its neighbours, and one chunk on one stream, with the overlap loop.
    let (c, k) = (best.chunks, best.streams);
    let mut configs = vec![(c, k), (c * 2, k), (c / 2, k.min(c / 2)), (c, (k * 2).min(c)), (c, k / 2), (1, 1)];
    configs.retain(|&(c, k)| c >= 1 && k >= 1 && c <= n);
    configs = configs.iter().enumerate().filter(|(i, x)| !configs[..*i].contains(x)).map(|(_, x)| *x).collect();
    let achieved: Vec<Stats> = match &user {
        Some(u) => u.run(n, &configs, r)?, // in the child: your kernel has no CPU twin to check it against
        None => {
            let bar = out.progress_bar(configs.len() as u64, "planner");
            let mut times = Vec::new();
            for &(chunks, streams) in &configs {
                bar.step(format!("{chunks} chunks on {streams} streams"));
                let plan = ChunkPlan::new(n, chunks, streams)?;
                let name = format!("{chunks} chunks on {streams} streams");
                times.push(p.time(&name, &plan, Buffering::per_stream(streams))?.time); // checked against the CPU
                bar.done();
            }
            times
        }
    };
    let tried: Vec<Tried> = configs
        .iter()
        .zip(achieved)
        .map(|(&(c, k), achieved)| Tried { predicted: costs.predict(bytes, c, k), achieved })
        .collect();
    for x in &tried {
        let name = format!("{} chunks on {} streams", x.predicted.chunks, x.predicted.streams); // for xtask compare
        out.add(Figure::new(name, &x.achieved).transfers(bytes / x.predicted.chunks).depends_on("work"));
    }
    let checked =
        if user.is_some() { "not checked: your kernel has no CPU twin" } else { "every chunk checked against the CPU" };
    out.say(format!("\nRun (median of up to {} runs; {checked}):", r.repeats));
    let mut t = Table::new(&["chunks", "streams", "predicted", "achieved", "achieved/predicted", "model's limit"]);
    for x in &tried {
        let (p, a) = (&x.predicted, &x.achieved);
        let ratio = format!("{:.2}", a.median_ms / p.ms);
        t.row(vec![
            p.chunks.to_string(),
            p.streams.to_string(),
            fmt_ms(p.ms),
            fmt_ms(a.median_ms),
            ratio,
            p.limit.name().into(),
        ]);
    }
    out.table(&t);
    let fastest = tried.iter().min_by(|a, b| a.achieved.median_ms.total_cmp(&b.achieved.median_ms)).expect("one run");
    let (fc, fk) = (fastest.predicted.chunks, fastest.predicted.streams);
    out.say(format!("fastest run: {fc} chunks on {fk} streams, {}", fmt_ms(fastest.achieved.median_ms)));
    out.say(costs.verdict(bytes, &best));

    // The recommended run against the lower bound measured on its own data (which times the kernel in
    // this process: not for a kernel of yours).
    let plan = ChunkPlan::new(n, c, k)?;
    let name = format!("{c} chunks on {k} streams");
    let report = match user {
        Some(_) => None,
        None => {
            let run = PipelineRun { name, time: tried[0].achieved, buffering: Buffering::per_stream(k) };
            Some(PipelineReport::measure(&mut p, &plan, &[run])?)
        }
    };
    report.iter().for_each(|rep| out.table(&rep.table()));
    out.finish(&serde_json::json!({
        "device": gpu.info, "bytes": bytes, "work": work, "user_kernel": user, "repeats": r, "costs": costs,
        "ranked": &ranked[..ranked.len().min(5)], "tried": tried, "report": report,
    }))
}
