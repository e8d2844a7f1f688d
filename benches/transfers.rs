//! Criterion benchmarks of GPU time (CUDA events, through `iter_custom`), not of the host's view of it.
//! Every benchmark sets its byte throughput, so criterion's reports read in GB/s.
//!
//!     cargo bench                       # the default suite: 61 benchmarks, planned at most 1.3 minutes
//!     BENCH_FULL=1 cargo bench          # the long sweep: every size to 1 GiB, every configuration
//!     cargo bench -- htod/pinned         # one group or benchmark
//!     GPU_BENCH_MAX=64MiB cargo bench   # a smaller largest size
//!
//! Before any benchmark it prints its plan (how many benchmarks, and the time each takes at most from
//! criterion's warm-up, measurement and analysis) and writes it to `<criterion dir>/gpu-bench-plan.json`;
//! then it measures the limits the report holds the benchmarks against and writes them to
//! `<criterion dir>/gpu-limits.json` (the copy engines' rates first, then the pipelines' bounds), so
//! that `cargo xtask bench-report` has them however early the run is stopped. As it goes, a line on
//! stderr per benchmark says where it is and about how long is left.
//!
//! Groups: `htod`, `dtoh`, `both` (pageable, pinned, write-combined, pinned in place, 4 KiB to 256 MiB;
//! the long sweep to 1 GiB); `overlap` (the pipeline over stream and chunk counts); `zero_copy` (mapped
//! memory against copies); `buffering` (one, two, or one buffer per stream). The copies are drawn as GB/s
//! against size with the link's raw rate across by `cargo xtask bench-report`. Criterion's own summary
//! plots of the groups over sizes use log axes: on linear ones everything below 100 MiB sits in a corner.

use std::{
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use criterion::{AxisScale, BenchmarkId, Criterion, PlotConfiguration, SamplingMode, Throughput};
use cuda_scope::{Gpu, HostAlloc};
use kernels::Kernels;
use measure::{
    args::parse_bytes,
    bound::{Bound, PartCosts},
    pipeline::{balanced_work, Buffering, CopyTimes, Pipeline},
    report::fmt_bytes,
    timing::{measure, Repeats},
    verify::input,
    work::Steps,
    work::Work,
    Chunking,
};

/// The GPU, or `None` after one line (once for the whole run) saying why there is none.
fn gpu() -> Option<Gpu> {
    match Gpu::init() {
        Ok(g) => Some(g),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("GPU benchmarks skipped: {e:#}; run them on a machine with an NVIDIA GPU"));
            None
        }
    }
}

/// `iters` runs of `op`, each returning its GPU time in ms, as the Duration criterion records.
fn gpu_time(iters: u64, mut op: impl FnMut() -> anyhow::Result<f64>) -> Duration {
    gpu_time_batched(iters, 1, |_| op())
}

/// `iters` operations, `batch` at a time in one timed scope (`op(n)` queues n back to back): the host's
/// cost per timed scope would otherwise dominate the wall time of benchmarks of microsecond copies.
fn gpu_time_batched(iters: u64, batch: u64, mut op: impl FnMut(u64) -> anyhow::Result<f64>) -> Duration {
    let (mut left, mut ms) = (iters, 0.0);
    while left > 0 {
        let n = left.min(batch);
        ms += op(n).unwrap_or_else(|e| panic!("GPU work failed: {e:#}"));
        left -= n;
    }
    Duration::from_secs_f64(ms / 1e3)
}

/// What the run measures: the default suite, or the long sweep (`BENCH_FULL=1`).
struct Suite {
    full: bool,
    /// The largest transfer (`GPU_BENCH_MAX`; 256 MiB, or 1 GiB for the long sweep).
    max: usize,
}

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

impl Suite {
    fn from_env() -> Suite {
        let full = std::env::var("BENCH_FULL").is_ok_and(|v| !v.is_empty() && v != "0");
        let max = std::env::var("GPU_BENCH_MAX").ok().and_then(|v| parse_bytes(&v).ok());
        Suite { full, max: max.unwrap_or(if full { 1 << 30 } else { 256 * MIB }) }
    }

    /// Criterion's warm-up and measurement per benchmark, 10 samples each. The GPU's times of a copy
    /// vary by well under 1% from sample to sample from 1 MiB up; 10 samples give a median that
    /// moves less than the spread from one process to the next (`cargo xtask compare`).
    fn times(&self) -> (Duration, Duration) {
        if self.full {
            (Duration::from_millis(200), Duration::from_millis(500))
        } else {
            (Duration::from_millis(100), Duration::from_millis(400))
        }
    }

    /// The copies' sizes: 64 and 256 KiB draw the knee of the rate curve, where the per-copy cost gives
    /// way to the link; the default suite keeps one of them.
    fn copy_sizes(&self) -> Vec<usize> {
        let sizes = if self.full {
            vec![4 * KIB, 64 * KIB, 256 * KIB, MIB, 16 * MIB, 256 * MIB, 1 << 30]
        } else {
            vec![4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB]
        };
        sizes.into_iter().filter(|s| *s <= self.max).collect()
    }

    /// The kinds of host memory each direction is measured from: both at once, pageable and pinned
    /// only by default.
    fn kinds(&self, dir: &str) -> &'static [&'static str] {
        match (dir, self.full) {
            ("both", false) => &["pageable", "pinned"],
            _ => &KINDS,
        }
    }

    /// The sizes each direction is measured at: both at once, each way's bytes fit in half the buffer;
    /// by default 1, 16 and 128 MiB.
    fn sizes(&self, dir: &str) -> Vec<usize> {
        match (dir, self.full) {
            ("both", false) => [MIB, 16 * MIB, 128 * MIB].into_iter().filter(|b| *b <= self.max / 2).collect(),
            ("both", true) => self.copy_sizes().into_iter().filter(|b| *b <= self.max / 2).collect(),
            _ => self.copy_sizes(),
        }
    }

    /// The pipeline's elements (f32): 64 Mi at most, 256 MiB.
    fn elements(&self) -> usize {
        (self.max / 4).min(64 << 20)
    }

    /// (chunks, streams) of the `overlap` group: by default the stream counts at 32 chunks, and 8 and
    /// 128 chunks on 4 streams.
    fn overlap(&self) -> Vec<(usize, usize)> {
        if self.full {
            [8, 32, 128].into_iter().flat_map(|c| [1, 2, 4, 8].map(|s| (c, s))).collect()
        } else {
            vec![(32, 1), (32, 2), (32, 4), (32, 8), (8, 4), (128, 4)]
        }
    }

    fn zero_copy_sizes(&self) -> Vec<usize> {
        let sizes = if self.full { vec![64 * KIB, MIB, 16 * MIB, 256 * MIB] } else { vec![64 * KIB, MIB, 16 * MIB] };
        sizes.into_iter().filter(|b| *b <= self.elements() * 4).collect()
    }

    /// Every benchmark the suite runs, in order, with the time one iteration takes at most, s: a copy at
    /// 25 GB/s (4 GB/s from pageable memory, both ways counted twice) with 10 µs on top, a pipeline as
    /// its data both ways at 25 GB/s. A guess on the slow side: it decides only when criterion's ten
    /// samples take longer than its measurement time.
    fn plan(&self) -> Vec<(String, f64)> {
        let copy = |kind: &str, bytes: usize| 10e-6 + bytes as f64 / if kind == "pageable" { 4e9 } else { 25e9 };
        let mut plan = Vec::new();
        for dir in ["htod", "dtoh", "both"] {
            for kind in self.kinds(dir) {
                for bytes in self.sizes(dir) {
                    let t = copy(kind, bytes) * if dir == "both" { 2.0 } else { 1.0 };
                    plan.push((format!("{dir}/{kind}/{}", fmt_bytes(bytes)), t));
                }
            }
        }
        let pipeline = 2.0 * (self.elements() * 4) as f64 / 25e9;
        for (chunks, streams) in self.overlap() {
            plan.push((format!("overlap/{chunks} chunks/{streams} streams"), pipeline));
        }
        for name in BUFFERING.map(|b| b.0) {
            plan.push((format!("buffering/{name}"), pipeline));
        }
        for bytes in self.zero_copy_sizes() {
            for way in ["mapped", "copy, kernel, copy"] {
                plan.push((format!("zero_copy/{way}/{}", fmt_bytes(bytes)), copy("pinned", 2 * bytes)));
            }
        }
        plan
    }
}

const KINDS: [&str; 4] = ["pageable", "pinned", "write-combined", "pinned in place"];
const BUFFERING: [(&str, usize, bool); 3] = [("single", 1, false), ("double", 2, true), ("4 streams", 4, false)];

/// Criterion's analysis and report of one benchmark, s, at most: a bootstrap of 10,000 resamples and the
/// pictures of its distributions. At criterion's default of 100,000 they take 4 to 7 s per benchmark (on
/// 2 cores, for a benchmark measured in 0.5 s), enough to run the suite past 440 s; at 10,000, 0.15 to
/// 0.3 s.
const ANALYSIS_S: f64 = 0.4;
/// Measuring the limits before the benchmarks, s, at most: the kernel's calibration, the copy engines,
/// device memory and each chunk count's bound.
const LIMITS_S: f64 = 15.0;

/// The time a benchmark takes at most, s: criterion's warm-up (which doubles its iterations until it has
/// run its time, so up to twice that), its samples (ten, each at least one iteration), the analysis.
fn budget_of(iteration_s: f64, (warm_up, measurement): (Duration, Duration)) -> f64 {
    2.0 * warm_up.as_secs_f64().max(iteration_s) + measurement.as_secs_f64().max(10.0 * iteration_s) + ANALYSIS_S
}

/// Where the run is: the plan, what is done, and a line on stderr as each benchmark starts.
struct Progress {
    plan: Vec<(String, f64)>,
    start: Instant,
    /// The benchmark running, its place in the plan, and when the benchmarks began.
    current: Option<usize>,
    benchmarks_start: Option<Instant>,
    done: usize,
}

static PROGRESS: OnceLock<Mutex<Progress>> = OnceLock::new();

/// Whether criterion runs the benchmarks (`cargo bench`, `--bench`), not as tests or a list.
fn benchmarking() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--list" || a == "--test")
}

/// The benchmarks a filter given to criterion (`cargo bench -- htod/pinned`) leaves: those whose names
/// hold it (criterion takes it as a regular expression; a plain name is one).
fn filtered(plan: Vec<(String, f64)>) -> Vec<(String, f64)> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let takes_value = [
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--color",
        "--output-format",
        "--profile-time",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--plotting-backend",
        "--format",
    ];
    let mut filter = None;
    let mut i = 0;
    while i < args.len() {
        if takes_value.contains(&args[i].as_str()) {
            i += 1;
        } else if !args[i].starts_with('-') {
            filter = Some(args[i].clone());
        }
        i += 1;
    }
    match filter {
        Some(f) => plan.into_iter().filter(|(id, _)| id.contains(&f)).collect(),
        None => plan,
    }
}

/// Prints the plan and its budget, writes it beside criterion's reports, and starts the clock.
fn start(suite: &Suite) {
    let times = suite.times();
    let plan: Vec<(String, f64)> =
        filtered(suite.plan()).into_iter().map(|(id, t)| (id, budget_of(t, times))).collect();
    let benchmarks: f64 = plan.iter().map(|p| p.1).sum();
    let each = budget_of(0.0, times);
    let long = plan.iter().filter(|p| p.1 > each + 1e-9).count();
    let all = suite.plan().len();
    eprintln!(
        "plan: {}{} benchmarks of {}: each at most {} ms warm-up (twice that as criterion doubles its runs), {} ms \
         measurement (10 samples) and {ANALYSIS_S} s analysis, {each:.1} s, {long} longer for their iterations: \
         {benchmarks:.0} s; first the limits, at most {LIMITS_S:.0} s: about {:.1} minutes in all",
        plan.len(),
        if plan.len() < all { format!(" of {all}") } else { String::new() },
        if suite.full { "the long sweep (BENCH_FULL)" } else { "the default suite (BENCH_FULL=1 for the long sweep)" },
        times.0.as_millis(),
        times.1.as_millis(),
        (benchmarks + LIMITS_S) / 60.0,
    );
    let _ = PROGRESS.set(Mutex::new(Progress {
        plan,
        start: Instant::now(),
        current: None,
        benchmarks_start: None,
        done: 0,
    }));
}

/// Writes the plan beside criterion's reports, for `cargo xtask bench-report` to say what a run stopped
/// early did not measure.
fn write_plan(suite: &Suite) {
    let Some(p) = PROGRESS.get() else { return };
    let p = p.lock().unwrap_or_else(|e| e.into_inner());
    let doc = serde_json::json!({
        "started_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "full": suite.full,
        "max_bytes": suite.max,
        "budget_s": p.plan.iter().map(|b| b.1).sum::<f64>() + LIMITS_S,
        "benchmarks": p.plan.iter().map(|b| &b.0).collect::<Vec<_>>(),
    });
    write_beside_reports("gpu-bench-plan.json", &doc);
}

/// Called at every call of a benchmark's routine: at its first, a line on stderr with where the run is
/// and about how long is left (the plan's remaining budget, scaled by how the benchmarks done so far
/// kept to theirs).
fn at(id: &str) {
    let Some(p) = PROGRESS.get() else { return };
    let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
    let Some(i) = p.plan.iter().position(|b| b.0 == id) else { return };
    if p.current == Some(i) {
        return;
    }
    let now = Instant::now();
    let started = *p.benchmarks_start.get_or_insert(now);
    if p.current.is_some() {
        p.done += 1;
    }
    p.current = Some(i);
    let planned_done: f64 = p.plan[..i].iter().map(|b| b.1).sum();
    let left: f64 = p.plan[i..].iter().map(|b| b.1).sum();
    let pace = if p.done >= 3 && planned_done > 0.0 {
        (now.duration_since(started).as_secs_f64() / planned_done).clamp(0.25, 4.0)
    } else {
        1.0
    };
    eprintln!(
        "[{:>3}/{}] {id}: {:.0} s in, about {:.0} s left",
        i + 1,
        p.plan.len(),
        now.duration_since(p.start).as_secs_f64(),
        left * pace
    );
}

/// The last line: how long it took against the plan (where a benchmark ran).
fn finish() {
    let Some(p) = PROGRESS.get() else { return };
    let p = p.lock().unwrap_or_else(|e| e.into_inner());
    if p.benchmarks_start.is_none() {
        return;
    }
    let planned: f64 = p.plan.iter().map(|b| b.1).sum::<f64>() + LIMITS_S;
    eprintln!(
        "done: {} benchmarks in {:.0} s (planned at most {planned:.0} s); `cargo xtask bench-report` reports them",
        p.plan.len(),
        p.start.elapsed().as_secs_f64()
    );
}

/// Criterion's output folder: `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else `target/criterion`.
fn criterion_dir() -> std::path::PathBuf {
    std::env::var_os("CRITERION_HOME").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "target".into())
            .join("criterion")
    })
}

fn write_beside_reports(name: &str, doc: &serde_json::Value) {
    let dir = criterion_dir();
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(name);
    if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()) {
        eprintln!("{name} not written to {}: {e}", path.display());
    }
}

fn configure<'a>(c: &'a mut Criterion, name: &str) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let (warm_up, measurement) = Suite::from_env().times();
    let mut g = c.benchmark_group(name);
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .nresamples(10_000)
        .warm_up_time(warm_up)
        .measurement_time(measurement);
    g
}

/// [`configure`] for a group over transfer sizes: criterion's summary plots on log axes.
fn configure_sizes<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = configure(c, name);
    g.plot_config(PlotConfiguration::default().summary_scale(AxisScale::Logarithmic));
    g
}

/// The kernel's work, calibrated once (with the limits) for every pipeline of the run.
static WORK: OnceLock<Work> = OnceLock::new();

fn work(gpu: &Gpu, kernels: &Kernels, n: usize) -> Work {
    *WORK.get_or_init(|| balanced_work(gpu, kernels, n / 32, Repeats { warmup: 1, repeats: 5 }).unwrap())
}

/// The plan and the limits, first: so that a run stopped early still leaves them for the report.
fn limits(suite: &Suite) {
    let Some(gpu) = gpu() else { return };
    write_plan(suite);
    let kernels = Kernels::load(&gpu).unwrap();
    let n = suite.elements();
    let chunks: Vec<usize> = {
        let mut c: Vec<usize> = suite.overlap().into_iter().map(|o| o.0).collect();
        c.dedup();
        c
    };
    eprintln!(
        "limits: the kernel's calibration, the copy engines and device memory, then the pipeline's bound at {} \
         chunk counts",
        chunks.len()
    );
    write_limits(&gpu, &kernels, n, work(&gpu, &kernels, n), &chunks);
}

fn copies(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let suite = Suite::from_env();
    let max = suite.max;
    let n = max / 4;
    let mut pageable = cuda_scope::pageable(n, input).unwrap();
    let mut pinned = gpu.pinned_from_fn(n, input).unwrap();
    let mut wc = gpu.pinned_with::<f32>(n, HostAlloc::WRITE_COMBINED).unwrap();
    wc.copy_from_slice(&pageable);
    let mut registered = gpu.register(cuda_scope::pageable(n, input).unwrap()).unwrap();
    let mut kinds: [(&str, &mut [f32]); 4] = [
        ("pageable", &mut pageable),
        ("pinned", &mut pinned),
        ("write-combined", &mut wc),
        ("pinned in place", &mut registered),
    ];
    let (mut up, mut down) = (gpu.alloc::<f32>(n).unwrap(), gpu.alloc::<f32>(n).unwrap());
    let streams = gpu.streams(2).unwrap();
    for dir in ["htod", "dtoh", "both"] {
        let mut g = configure_sizes(c, dir);
        for (kind, host) in kinds.iter_mut().filter(|k| suite.kinds(dir).contains(&k.0)) {
            for bytes in suite.sizes(dir) {
                let len = bytes / 4;
                g.throughput(Throughput::Bytes(if dir == "both" { 2 * bytes as u64 } else { bytes as u64 }));
                let id = format!("{dir}/{kind}/{}", fmt_bytes(bytes));
                g.bench_function(BenchmarkId::new(*kind, fmt_bytes(bytes)), |b| {
                    at(&id);
                    // Up to 256 copies per timed scope; every download gets its own slice of the host buffer.
                    let room = if dir == "both" { n / 2 / len } else { n / len };
                    b.iter_custom(|iters| {
                        gpu_time_batched(iters, room.clamp(1, 256) as u64, |k| {
                            Ok(gpu.timed(&streams, |s| {
                                let (u, d) = (s.device(&mut up).slice(0..len), s.device(&mut down).slice(0..len));
                                match dir {
                                    "htod" => (0..k).try_for_each(|_| s.stream(0).htod(&host[..len], u)),
                                    "dtoh" => host
                                        .chunks_exact_mut(len)
                                        .take(k as usize)
                                        .try_for_each(|out| s.stream(0).dtoh(d, out)),
                                    _ => {
                                        // Uploads read the first half of the buffer while downloads write the second.
                                        let (lo, hi) = host.split_at_mut(n / 2);
                                        hi.chunks_exact_mut(len).take(k as usize).try_for_each(|out| {
                                            s.stream(0).htod(&lo[..len], u)?;
                                            s.stream(1).dtoh(d, out)
                                        })
                                    }
                                }
                            })?)
                        })
                    })
                });
            }
        }
        g.finish();
    }
}

fn pipelines(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let suite = Suite::from_env();
    let n = suite.elements();
    let kernels = Kernels::load(&gpu).unwrap();
    let mut p =
        Pipeline::new(&gpu, &kernels, Steps::InPlace(work(&gpu, &kernels, n)), n, Repeats { warmup: 1, repeats: 5 })
            .unwrap();
    let mut g = configure(c, "overlap");
    g.throughput(Throughput::Bytes(2 * n as u64 * 4));
    for (chunks, streams) in suite.overlap() {
        let chunking = Chunking::new(n, chunks, streams).unwrap();
        let mut on = p.buffers(&chunking, Buffering::per_stream(streams)).unwrap();
        let id = format!("overlap/{chunks} chunks/{streams} streams");
        g.bench_function(BenchmarkId::new(format!("{chunks} chunks"), format!("{streams} streams")), |b| {
            at(&id);
            b.iter_custom(|iters| gpu_time(iters, || p.run(&chunking, &mut on)))
        });
    }
    g.finish();
    let mut g = configure(c, "buffering");
    g.throughput(Throughput::Bytes(2 * n as u64 * 4));
    let chunking = Chunking::new(n, 32, 1).unwrap();
    for (name, buffers, by_engine) in BUFFERING {
        let mut on = p.buffers(&chunking, Buffering { buffers, by_engine }).unwrap();
        let id = format!("buffering/{name}");
        g.bench_function(name, |b| {
            at(&id);
            b.iter_custom(|iters| gpu_time(iters, || p.run(&chunking, &mut on)))
        });
    }
    g.finish();
}

fn zero_copy(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let suite = Suite::from_env();
    let kernels = Kernels::load(&gpu).unwrap();
    let n = suite.elements();
    let mut m_in = gpu.pinned_with::<f32>(n, HostAlloc::MAPPED).unwrap();
    m_in.iter_mut().enumerate().for_each(|(i, x)| *x = input(i));
    let mut m_out = gpu.pinned_with::<f32>(n, HostAlloc::MAPPED).unwrap();
    let h_in = gpu.pinned_from_fn(n, input).unwrap();
    let mut h_out = gpu.pinned::<f32>(n).unwrap();
    let (mut d_in, mut d_out) = (gpu.alloc::<f32>(n).unwrap(), gpu.alloc::<f32>(n).unwrap());
    let streams = gpu.streams(1).unwrap();
    let mut g = configure_sizes(c, "zero_copy");
    for bytes in suite.zero_copy_sizes() {
        let len = bytes / 4;
        g.throughput(Throughput::Bytes(2 * bytes as u64));
        let id = format!("zero_copy/mapped/{}", fmt_bytes(bytes));
        g.bench_function(BenchmarkId::new("mapped", fmt_bytes(bytes)), |b| {
            at(&id);
            b.iter_custom(|iters| {
                gpu_time(iters, || {
                    Ok(gpu.timed(&streams, |s| {
                        kernels.scale(
                            s.stream(0),
                            s.mapped(&mut m_in)?.slice(0..len),
                            s.mapped(&mut m_out)?.slice(0..len),
                            2.0,
                        )
                    })?)
                })
            })
        });
        let id = format!("zero_copy/copy, kernel, copy/{}", fmt_bytes(bytes));
        g.bench_function(BenchmarkId::new("copy, kernel, copy", fmt_bytes(bytes)), |b| {
            at(&id);
            b.iter_custom(|iters| {
                gpu_time(iters, || {
                    Ok(gpu.timed(&streams, |s| {
                        let (i, o) = (s.device(&mut d_in).slice(0..len), s.device(&mut d_out).slice(0..len));
                        s.stream(0).htod(&h_in[..len], i)?;
                        kernels.scale(s.stream(0), i, o, 2.0)?;
                        s.stream(0).dtoh(o, &mut h_out[..len])
                    })?)
                })
            })
        });
    }
    g.finish();
}

/// The limits measured in this run: the copy engines (the best of large pinned copies, each way and
/// both at once), device memory (a device-to-device copy), and the bound of each `overlap` run at
/// `chunks` (cuda_scope::bound: parts of the run's own work timed alone, none of which the pipeline can
/// beat). Written as soon as the copies' limits are known, then again with each chunk count's bounds.
fn write_limits(gpu: &Gpu, kernels: &Kernels, n: usize, work: Work, chunks: &[usize]) {
    let r = Repeats { warmup: 2, repeats: 10 };
    let big = (256 << 20).min(n * 4) / 4;
    let copies = CopyTimes::measure(gpu, big, r).unwrap();
    let best = |s: &measure::Stats, bytes: usize| bytes as f64 / (s.min_ms * 1e-3) / 1e9;
    let (mut a, mut b) = (gpu.alloc::<f32>(big).unwrap(), gpu.alloc::<f32>(big).unwrap());
    let streams = gpu.streams(8).unwrap();
    let dtod =
        measure(r, || Ok(gpu.timed(&streams[..1], |s| s.stream(0).dtod(s.device(&mut a), s.device(&mut b)))?)).unwrap();
    let mut limits = serde_json::json!({
        "device": gpu.info,
        "link_gbps": measure::machine::Health::read(gpu).link_gbps(gpu),
        "copy_engine_gbps": {
            "htod": best(&copies.htod, copies.bytes),
            "dtoh": best(&copies.dtoh, copies.bytes),
            "both_total": best(&copies.both, 2 * copies.bytes),
        },
        "device_memory_gbps": { "measured_copy": 2.0 * dtod.gbps(big * 4), "peak_from_clocks": gpu.info.memory_gbps },
        "pipeline": { "elements": n, "work": work, "bound_ms": {}, "limited_by": {}, "chunks": chunks },
    });
    write_beside_reports("gpu-limits.json", &limits);
    eprintln!("limits: the copy engines and device memory measured, the pipelines' bounds next");
    let mut p = Pipeline::new(gpu, kernels, Steps::InPlace(work), n, Repeats { warmup: 1, repeats: 5 }).unwrap();
    let bufferings = [1, 2, 4, 8].map(Buffering::per_stream);
    for &chunks in chunks {
        let chunking = Chunking::new(n, chunks, 1).unwrap();
        let costs = PartCosts::measure(&mut p, &chunking, &bufferings).unwrap();
        for b in bufferings {
            let bound = Bound::new(&costs, b);
            let key = format!("overlap/{chunks} chunks/{} streams", b.buffers);
            limits["pipeline"]["bound_ms"][&key] = bound.ms.into();
            limits["pipeline"]["limited_by"][&key] = bound.limit.name().into();
        }
        write_beside_reports("gpu-limits.json", &limits);
    }
    eprintln!("limits of this run written to {}", criterion_dir().join("gpu-limits.json").display());
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    if benchmarking() {
        let suite = Suite::from_env();
        start(&suite);
        limits(&suite);
    }
    copies(&mut c);
    pipelines(&mut c);
    zero_copy(&mut c);
    c.final_summary();
    finish();
}
