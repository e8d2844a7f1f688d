//! Criterion benchmarks of GPU time (CUDA events, through `iter_custom`), not of the host's view of it.
//! Every benchmark sets its byte throughput, so criterion's reports read in GB/s.
//!
//!     cargo bench                       # the whole suite, about five minutes on an H200
//!     cargo bench -- h2d/pinned         # one group or benchmark
//!     GPU_BENCH_MAX=256MiB cargo bench  # a smaller largest size
//!
//! Groups: `h2d`, `d2h`, `both` (pageable, pinned, write-combined, pinned in place, 4 KiB to 1 GiB);
//! `overlap` (the pipeline over stream and chunk counts); `zero_copy` (mapped memory against copies);
//! `buffering` (one, two, or one buffer per stream). It also measures the limits the report holds
//! these against, and writes them to `<criterion dir>/gpu-limits.json` for `cargo xtask bench-report`,
//! which draws the copies as GB/s against size with the link's raw rate (also written there) across.
//! Criterion's own summary plots of the groups over sizes use log axes: on linear ones everything below
//! 100 MiB sits in a corner.

use std::time::Duration;

use common::{DeviceBuffer, Gpu, HostAlloc};
use criterion::{
    criterion_group, criterion_main, AxisScale, BenchmarkId, Criterion, PlotConfiguration, SamplingMode, Throughput,
};
use kernels::Kernels;
use measure::{
    args::parse_bytes,
    bound::{measure_costs, Bound, Steps, Workload},
    pipeline::{balanced_work, run_pipeline, CopyTimes, Layout},
    report::fmt_bytes,
    timing::{measure, Repeats},
    verify::input,
    work::Work,
    ChunkPlan,
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

fn max_bytes() -> usize {
    std::env::var("GPU_BENCH_MAX").ok().and_then(|v| parse_bytes(&v).ok()).unwrap_or(1 << 30)
}

fn configure<'a>(c: &'a mut Criterion, name: &str) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(500));
    g
}

/// [`configure`] for a group over transfer sizes, 4 KiB to 1 GiB: criterion's summary plots on log axes.
fn configure_sizes<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = configure(c, name);
    g.plot_config(PlotConfiguration::default().summary_scale(AxisScale::Logarithmic));
    g
}

fn copies(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let max = max_bytes();
    let n = max / 4;
    let mut pageable = common::pageable(n, input).unwrap();
    let mut pinned = gpu.pinned_from_fn(n, input).unwrap();
    let mut wc = gpu.pinned_with::<f32>(n, HostAlloc::WRITE_COMBINED).unwrap();
    wc.copy_from_slice(&pageable);
    let mut registered = gpu.register(common::pageable(n, input).unwrap()).unwrap();
    let mut kinds: [(&str, &mut [f32]); 4] = [
        ("pageable", &mut pageable),
        ("pinned", &mut pinned),
        ("write-combined", &mut wc),
        ("pinned in place", &mut registered),
    ];
    let (mut up, mut down) = (gpu.alloc::<f32>(n).unwrap(), gpu.alloc::<f32>(n).unwrap());
    let streams = gpu.streams(2).unwrap();
    // 64 and 256 KiB draw the knee of the rate curve, where the per-copy cost gives way to the link.
    let sizes: Vec<usize> = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30]
        .into_iter()
        .filter(|s| *s <= max)
        .collect();
    for dir in ["h2d", "d2h", "both"] {
        let mut g = configure_sizes(c, dir);
        for (kind, host) in kinds.iter_mut() {
            for &bytes in sizes.iter().filter(|b| dir != "both" || **b <= max / 2) {
                let len = bytes / 4;
                g.throughput(Throughput::Bytes(if dir == "both" { 2 * bytes as u64 } else { bytes as u64 }));
                g.bench_function(BenchmarkId::new(*kind, fmt_bytes(bytes)), |b| {
                    // Up to 256 copies per timed scope; every download gets its own slice of the host buffer.
                    let room = if dir == "both" { n / 2 / len } else { n / len };
                    b.iter_custom(|iters| {
                        gpu_time_batched(iters, room.clamp(1, 256) as u64, |k| {
                            gpu.timed(&streams, |s| {
                                let (u, d) = (s.device(&mut up).slice(0..len), s.device(&mut down).slice(0..len));
                                match dir {
                                    "h2d" => (0..k).try_for_each(|_| s.stream(0).htod(&host[..len], u)),
                                    "d2h" => host
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
                            })
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
    let n = (max_bytes() / 4).min(64 << 20);
    let r = Repeats { warmup: 1, repeats: 5 };
    let kernels = Kernels::load(&gpu).unwrap();
    let work = balanced_work(&gpu, &kernels, n / 32, r).unwrap();
    let h_in = gpu.pinned_from_fn(n, input).unwrap();
    let mut h_out = gpu.pinned::<f32>(n).unwrap();
    let streams = gpu.streams(8).unwrap();
    let run = |plan: ChunkPlan, bufs: &mut [DeviceBuffer<f32>], by_engine: bool, h_out: &mut [f32]| {
        run_pipeline(
            &gpu,
            &kernels,
            &streams,
            &plan,
            Layout { buffers: bufs.len(), by_engine },
            work,
            (&h_in, h_out),
            bufs,
        )
    };
    let mut g = configure(c, "overlap");
    g.throughput(Throughput::Bytes(2 * n as u64 * 4));
    for chunks in [8, 32, 128] {
        for streams in [1, 2, 4, 8] {
            let plan = ChunkPlan::new(n, chunks, streams).unwrap();
            let mut bufs: Vec<_> = (0..streams).map(|_| gpu.alloc::<f32>(plan.max_chunk()).unwrap()).collect();
            g.bench_function(BenchmarkId::new(format!("{chunks} chunks"), format!("{streams} streams")), |b| {
                b.iter_custom(|iters| gpu_time(iters, || run(plan, &mut bufs, false, &mut h_out)))
            });
        }
    }
    g.finish();
    let mut g = configure(c, "buffering");
    g.throughput(Throughput::Bytes(2 * n as u64 * 4));
    let plan = ChunkPlan::new(n, 32, 1).unwrap();
    for (name, buffers, by_engine) in [("single", 1, false), ("double", 2, true), ("4 streams", 4, false)] {
        let mut bufs: Vec<_> = (0..buffers).map(|_| gpu.alloc::<f32>(plan.max_chunk()).unwrap()).collect();
        g.bench_function(name, |b| {
            b.iter_custom(|iters| gpu_time(iters, || run(plan, &mut bufs, by_engine, &mut h_out)))
        });
    }
    g.finish();
    write_limits(&gpu, &kernels, n, work);
}

fn zero_copy(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let kernels = Kernels::load(&gpu).unwrap();
    let n = (max_bytes() / 4).min(64 << 20);
    let mut m_in = gpu.pinned_with::<f32>(n, HostAlloc::MAPPED).unwrap();
    m_in.iter_mut().enumerate().for_each(|(i, x)| *x = input(i));
    let mut m_out = gpu.pinned_with::<f32>(n, HostAlloc::MAPPED).unwrap();
    let h_in = gpu.pinned_from_fn(n, input).unwrap();
    let mut h_out = gpu.pinned::<f32>(n).unwrap();
    let (mut d_in, mut d_out) = (gpu.alloc::<f32>(n).unwrap(), gpu.alloc::<f32>(n).unwrap());
    let streams = gpu.streams(1).unwrap();
    let mut g = configure_sizes(c, "zero_copy");
    for bytes in [64 << 10, 1 << 20, 16 << 20, 256 << 20].into_iter().filter(|b| *b <= n * 4) {
        let len = bytes / 4;
        g.throughput(Throughput::Bytes(2 * bytes as u64));
        g.bench_function(BenchmarkId::new("mapped", fmt_bytes(bytes)), |b| {
            b.iter_custom(|iters| {
                gpu_time(iters, || {
                    gpu.timed(&streams, |s| {
                        kernels.scale(
                            s.stream(0),
                            s.mapped(&mut m_in)?.slice(0..len),
                            s.mapped(&mut m_out)?.slice(0..len),
                            2.0,
                        )
                    })
                })
            })
        });
        g.bench_function(BenchmarkId::new("copy, kernel, copy", fmt_bytes(bytes)), |b| {
            b.iter_custom(|iters| {
                gpu_time(iters, || {
                    gpu.timed(&streams, |s| {
                        let (i, o) = (s.device(&mut d_in).slice(0..len), s.device(&mut d_out).slice(0..len));
                        s.stream(0).htod(&h_in[..len], i)?;
                        kernels.scale(s.stream(0), i, o, 2.0)?;
                        s.stream(0).dtoh(o, &mut h_out[..len])
                    })
                })
            })
        });
    }
    g.finish();
}

/// The limits measured in this run: the copy engines (the best of large pinned copies, each way and
/// both at once), device memory (a device-to-device copy), and the bound of each `overlap` run
/// (common::bound: parts of the run's own work timed alone, none of which the pipeline can beat).
fn write_limits(gpu: &Gpu, kernels: &Kernels, n: usize, work: Work) {
    let r = Repeats { warmup: 2, repeats: 10 };
    let big = (256 << 20).min(n * 4) / 4;
    let copies = CopyTimes::measure(gpu, big, r).unwrap();
    let best = |s: &measure::Stats, bytes: usize| bytes as f64 / (s.min_ms * 1e-3) / 1e9;
    let (mut a, mut b) = (gpu.alloc::<f32>(big).unwrap(), gpu.alloc::<f32>(big).unwrap());
    let streams = gpu.streams(8).unwrap();
    let dtod =
        measure(r, || gpu.timed(&streams[..1], |s| s.stream(0).dtod(s.device(&mut a), s.device(&mut b)))).unwrap();
    let h_in = gpu.pinned_from_fn(n, input).unwrap();
    let mut h_out = gpu.pinned::<f32>(n).unwrap();
    let mut scratch = gpu.alloc::<f32>(2 * n).unwrap();
    let (mut bound, mut limit) = (serde_json::Map::new(), serde_json::Map::new());
    for chunks in [8, 32, 128] {
        let plan = ChunkPlan::new(n, chunks, 1).unwrap();
        let data = Workload { h_in: &h_in, h_out: &mut h_out, scratch: &mut scratch };
        let costs = measure_costs(
            gpu,
            kernels,
            &streams,
            &plan,
            Steps::InPlace(work),
            &[1, 2, 4, 8],
            &[1, 2, 4, 8],
            data,
            Repeats { warmup: 1, repeats: 5 },
        )
        .unwrap();
        for k in [1, 2, 4, 8] {
            let b = Bound::new(&costs, k, k);
            bound.insert(format!("overlap/{chunks} chunks/{k} streams"), b.ms.into());
            limit.insert(format!("overlap/{chunks} chunks/{k} streams"), b.limit.name().into());
        }
    }
    let limits = serde_json::json!({
        "device": gpu.info,
        "link_gbps": measure::machine::Health::read(gpu).link_gbps(gpu),
        "copy_engine_gbps": {
            "h2d": best(&copies.h2d, copies.bytes),
            "d2h": best(&copies.d2h, copies.bytes),
            "both_total": best(&copies.both, 2 * copies.bytes),
        },
        "device_memory_gbps": { "measured_copy": 2.0 * dtod.gbps(big * 4), "peak_from_clocks": gpu.info.memory_gbps },
        "pipeline": { "elements": n, "work": work, "bound_ms": bound, "limited_by": limit },
    });
    let dir = std::env::var_os("CRITERION_HOME").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "target".into())
            .join("criterion")
    });
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("gpu-limits.json");
    match std::fs::write(&path, serde_json::to_string_pretty(&limits).unwrap()) {
        Ok(()) => eprintln!("limits of this run written to {}", path.display()),
        Err(e) => eprintln!("limits not written to {}: {e}", path.display()),
    }
}

criterion_group!(benches, copies, pipelines, zero_copy);
criterion_main!(benches);
