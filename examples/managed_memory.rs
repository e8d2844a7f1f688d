//! Lesson 10: managed (unified) memory, the alternative to explicit copies that seed 001's
//! asyncMemoryCopyExample.cu names (`cudaMallocManaged`, and `cudaMemPrefetchAsync` as the optional step).
//!
//! One pointer serves the CPU and the GPU, and the driver moves the pages. This lesson does overlap's
//! work (chunks on streams, the same kernel) three ways, each timed as a program feels it: the host
//! writes the input, the GPU processes it, the host reads the result.
//!
//!     on demand    managed memory, no prefetch: the first kernel touch of each page faults on the GPU,
//!                  which fetches it across the bus; the host's first read of each result page faults back
//!     prefetched   managed memory, each chunk prefetched to the GPU before its kernel and back to the host
//!                  after it, on the chunk's stream: the same bytes move, in bulk and without faults
//!     explicit     pinned host memory, a device buffer per stream, cudaMemcpyAsync both ways: overlap
//!
//! The first two move the same bytes: their difference is what demand paging costs (less where chunk
//! edges split pages, which fault when prefetched too; the seed's commented-out prefetch names
//! cudaMalloc'd memory, which the driver refuses). Managed memory is granted beyond the device's free
//! memory, where its pages would evict each other's back and forth: the lesson checks first.
//!
//!     cargo run --release --example managed_memory [-- --min 16MiB --max 1GiB --chunks 16 --streams 4]

use std::process::ExitCode;

use clap::Parser;
use common::{host::fill, Destination, DeviceInfo, DeviceRoom};
use kernels::Kernels;
use measure::{
    args::{parse_bytes, parse_count, size_sweep, RunArgs, WorkArgs},
    error::bad_args,
    report::{fmt_bytes, fmt_ms, Figure, Output, Table},
    timeline::phase,
    timing::{gbps, measure_parts, Laps, Repeats, Stats},
    verify::{input, Check},
    work::Work,
    ChunkPlan,
};
use serde::Serialize;

/// Overlap's work with managed memory on demand, managed memory prefetched, and explicit copies, over sizes.
#[derive(Parser)]
struct Args {
    /// Smallest array (then 4x each step)
    #[arg(long, default_value = "16MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    min: usize,
    /// Largest array
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    max: usize,
    /// Chunks each array is cut into
    #[arg(long, default_value = "16", value_parser = parse_count, allow_negative_numbers = true)]
    chunks: usize,
    /// Streams the chunks are dealt to, round-robin
    #[arg(long, default_value = "4", value_parser = parse_count, allow_negative_numbers = true)]
    streams: usize,
    #[command(flatten)]
    work: WorkArgs,
    #[command(flatten)]
    run: RunArgs,
}

/// One way's times at one size: the whole run as the host waits for it, and its three steps.
#[derive(Debug, Serialize)]
struct Times {
    wall: Stats,
    host_fill: Stats,
    /// CUDA events around the scope's work (on demand's without the results' way back)
    gpu: Stats,
    host_read: Stats,
}

#[derive(Serialize)]
struct Row {
    bytes: usize,
    plan: ChunkPlan,
    on_demand: Times,
    prefetched: Times,
    explicit: Times,
    /// Derived: on demand's median wall time less prefetched's, per MiB of the array
    fault_cost_us_per_mib: f64,
    verification: Vec<Check>,
}

#[derive(Serialize)]
struct Report<'a> {
    device: &'a DeviceInfo,
    work: Work,
    repeats: Repeats,
    room: DeviceRoom,
    rows: Vec<Row>,
}

const WAYS: [&str; 3] = ["on demand", "prefetched", "explicit copies"];

fn main() -> ExitCode {
    measure::lesson::run(managed_memory)
}

fn managed_memory(args: &Args, out: &Output) -> anyhow::Result<()> {
    let sizes = size_sweep(args.min, args.max, 4)?.into_iter();
    let plans = sizes.map(|b| ChunkPlan::new(b / 4, args.chunks, args.streams)).collect::<anyhow::Result<Vec<_>>>()?;
    let r = args.run.repeats();
    let gpu = &measure::lesson::gpu(out)?;
    let kernels = Kernels::load(gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
    let (n, chunk) = (args.max / 4, plans[plans.len() - 1].max_chunk());

    // Before allocating anything: all of it must fit in free device memory, less a margin for others.
    let room = gpu.room()?; //                                      cudaMemGetInfo(&free, &total)
    if let Err(why) = room.check(args.streams.saturating_mul(chunk).saturating_add(n).saturating_mul(4)) {
        return Err(bad_args(format!("--max {}: {why}: pass a smaller --max", fmt_bytes(args.max))));
    }
    let work = measure::pipeline::in_place(gpu, &kernels, args.work.kernel(), chunk, r)?;
    let mut managed = gpu.managed::<f32>(n)?; //                    cudaMallocManaged(&data, BYTES)
    let mut h_in = gpu.pinned::<f32>(n)?; //                        cudaMallocHost(&h_in, BYTES)
    let mut h_out = gpu.pinned::<f32>(n)?; //                       cudaMallocHost(&h_out, BYTES)
    let mut d_data = gpu.alloc_each::<f32>(args.streams, chunk)?; // cudaMalloc(&d_data[i], CHUNK_BYTES)
    let streams = gpu.streams(args.streams)?; //                    cudaStreamCreateWithFlags(.., cudaStreamNonBlocking)
    let mut result = common::pageable(n, |_| 0f32)?; //             where the host reads each way's result to
    out.say(format!("{} chunks on {} streams at every size; {}", args.chunks, args.streams, work.describe()));

    // One run of one way: the host writes the input, the GPU processes it chunk by chunk, the host reads it.
    let mut run = |way: usize, plan: ChunkPlan, result: &mut [f32]| -> anyhow::Result<[f64; 4]> {
        let mut laps = Laps::start();
        fill(if way < 2 { &mut managed[..plan.elements] } else { &mut h_in[..plan.elements] }, input);
        let host_fill = laps.lap();
        let gpu_ms = gpu.timed(&streams[..plan.streams], |s| {
            if way < 2 {
                let data = s.managed(&mut managed);
                for c in plan.iter() {
                    let (stream, d) = (s.stream(c.stream), data.slice(c.range()));
                    let prefetch = |to| if way == 1 { stream.prefetch(d, to) } else { Ok(()) };
                    prefetch(Destination::Device)?; //                      cudaMemPrefetchAsync(data + offset, ..., device)
                    work.run(&kernels, stream, d)?; //             process<<<.., streams[i]>>>(data + offset, n)
                    prefetch(Destination::Host)?; // cudaMemPrefetchAsync(data + offset, ..., cudaCpuDeviceId)
                }
                return Ok(());
            }
            let d = s.devices(&mut d_data);
            for (c, out) in plan.iter().zip(plan.split_mut(&mut h_out[..plan.elements])) {
                let (stream, d) = (s.stream(c.stream), d[c.stream].slice(0..c.len));
                stream.htod(&h_in[c.range()], d)?; //               cudaMemcpyAsync(d_data[i], h_in + offset, ...)
                work.run(&kernels, stream, d)?;
                stream.dtoh(d, out)?; //                            cudaMemcpyAsync(h_out + offset, d_data[i], ...)
            }
            Ok(())
        })?; // the scope synchronizes every stream: the host may touch the memory again
        let scope = laps.lap();
        let src = if way < 2 { &managed[..plan.elements] } else { &h_out[..plan.elements] };
        fill(result, |i| src[i]); //                            on demand, each page faults back here
        let host_read = laps.lap();
        Ok([host_fill + scope + host_read, host_fill, gpu_ms, host_read])
    };

    let mut rows = Vec::new();
    for (i, plan) in plans.into_iter().enumerate() {
        let bytes = plan.elements * 4;
        // The first size's runs have warmed the GPU, the pages and the caches: one warm-up after it.
        let r = if i == 0 { r } else { Repeats { warmup: r.warmup.min(1), ..r } };
        let (mut times, mut verification) = (Vec::new(), Vec::new());
        for (way, name) in WAYS.iter().enumerate() {
            out.progress(format!("{name}, {}", fmt_bytes(bytes)));
            let _p = phase(&format!("{name} {}", fmt_bytes(bytes)));
            result.fill(f32::NAN);
            let [wall, host_fill, gpu, host_read] = measure_parts(r, || run(way, plan, &mut result[..plan.elements]))?;
            let check = work.check(&result[..plan.elements], &plan);
            check.ensure().map_err(|e| e.context(format!("{name} at {}", fmt_bytes(bytes))))?;
            verification.push(check);
            times.push(Times { wall, host_fill, gpu, host_read });
        }
        for (name, t) in WAYS.iter().zip(&times) {
            // `16 MiB / on demand / wall`, for `cargo xtask compare`
            // Managed memory: the driver migrates its pages on the CPU's side, on faults or prefetches.
            let figure =
                |what: &str, s: &Stats| Figure::new(format!("{} / {name} / {what}", fmt_bytes(bytes)), s).cpu_paged();
            let chunk = plan.max_chunk() * 4;
            out.add(figure("wall", &t.wall).on_host().transfers(chunk));
            out.add(figure("host fill", &t.host_fill).on_host());
            out.add(figure("gpu", &t.gpu).transfers(chunk));
            out.add(figure("host read", &t.host_read).on_host());
        }
        let [on_demand, prefetched, explicit]: [Times; 3] = times.try_into().expect("three ways");
        let fault_cost_us_per_mib =
            (on_demand.wall.median_ms - prefetched.wall.median_ms) * 1e3 / (bytes as f64 / (1 << 20) as f64);
        rows.push(Row { bytes, plan, on_demand, prefetched, explicit, fault_cost_us_per_mib, verification });
    }

    out.say(format!(
        "\nmedians of up to {} runs after {} warm-up. wall: the host's fill, the scope and the host's read, on the \
         host's clock; GPU: CUDA events around the scope's work (on demand's leaves out the results' way back: \
         their pages move when the host reads them); GB/s: the array's bytes over the wall time",
        r.repeats, r.warmup
    ));
    for row in &rows {
        out.say(format!("\n{} in {} chunks on {} streams", fmt_bytes(row.bytes), row.plan.chunks, row.plan.streams));
        let mut t = Table::new(&["way", "host fill", "GPU", "host read", "wall", "GB/s", "wall vs explicit"]);
        for (name, w) in WAYS.iter().zip([&row.on_demand, &row.prefetched, &row.explicit]) {
            t.row(vec![
                name.to_string(),
                fmt_ms(w.host_fill.median_ms),
                fmt_ms(w.gpu.median_ms),
                fmt_ms(w.host_read.median_ms),
                fmt_ms(w.wall.median_ms),
                format!("{:.1}", gbps(row.bytes, w.wall.median_ms)),
                format!("{:.2}x", w.wall.median_ms / row.explicit.wall.median_ms),
            ]);
        }
        out.table(&t);
        out.say(format!(
            "page faults, derived: on demand's wall less prefetched's = {} for the same bytes moved, {:.1} µs per MiB\n\
             each way {}",
            fmt_ms(row.on_demand.wall.median_ms - row.prefetched.wall.median_ms),
            row.fault_cost_us_per_mib,
            row.verification[0].summary()
        ));
    }
    out.finish(&Report { device: &gpu.info, work, repeats: r, room, rows })
}
