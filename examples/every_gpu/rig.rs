//! every_gpu's rig: the GPUs to run on, each started and its memory checked (and the host's pinned
//! memory for all of them) before any allocates; each GPU's four phases, alone and in step with the
//! others, on a thread of its own near its memory; the tables, what the host gives least and why, and
//! the JSON.

use std::{sync::Barrier, time::Instant};

use anyhow::{bail, Context as _};
use serde::Serialize;

use cuda_scope::{Footprint, Gpu};
use kernels::Kernels;
use measure::{
    machine::{numa_node_of, why_together, GpuAlone, Health, HostMemory},
    pipeline::{balanced_work, Buffering, Pipeline},
    report::{fmt_bytes, Figure, Output, Table},
    timeline::phase,
    timing::{measure, Repeats, Stats, Window},
    work::Steps,
    Chunking,
};

use crate::{lockstep::Lockstep, numa::bind_thread_to_node};

/// The elements the pipeline phase runs over, at most (the copies move all of `--size`).
const PIPELINE_ELEMENTS: usize = 64 << 20;
/// The chunks the pipeline phase cuts them into.
const PIPELINE_CHUNKS: usize = 32;
/// Host memory the CPUs' own read and write rates are measured over, once every GPU is done.
pub const HOST_MEMORY_BYTES: usize = 1 << 30;

/// What each GPU's check holds it to, for copies of `bytes` on `gpus` GPUs at once: its own device
/// memory (the H2D and D2H buffers of `bytes` each, and the pipeline's four chunk buffers), and the
/// host's pinned memory for every GPU together (each pins an input and an output of `bytes`); the 1 GiB
/// the CPUs' rates are measured over comes after the GPUs are done, counted beside them all the same.
pub fn footprint(bytes: usize, gpus: usize) -> Footprint {
    let n = bytes / 4;
    let chunk = pipeline_chunk(n);
    let own = Footprint::default().device::<f32>(n.saturating_mul(2).saturating_add(4 * chunk));
    let all = Footprint::default().pinned::<f32>(n.saturating_mul(2).saturating_mul(gpus));
    own.and(all).max(Footprint::default().pageable::<u8>(HOST_MEMORY_BYTES))
}

/// What one GPU did, alone or with the others: GB/s of each phase.
#[derive(Clone, Debug, Serialize)]
pub struct PerGpu {
    device: u32,
    name: String,
    numa_node: Option<u32>,
    htod_gbps: f64,
    dtoh_gbps: f64,
    /// Both directions at once: bytes moved both ways per second.
    both_gbps: f64,
    /// The overlap pipeline: bytes in and out per second.
    pipeline_gbps: f64,
    /// Each phase's times, in the order of [`PHASES`].
    times: [Stats; 4],
    /// Each phase's span on the host clock and the bytes it moved.
    windows: Vec<Window>,
    /// Link, clocks and what among them would slow copies (read when the GPU runs alone).
    bus: String,
    health: Option<Health>,
    likely_causes: Vec<String>,
}

/// One phase's rate of a GPU.
type Rate = fn(&PerGpu) -> f64;

/// The phases, as the table names them, and each one's rate.
const PHASES: [(&str, Rate); 4] =
    [("H2D", |g| g.htod_gbps), ("D2H", |g| g.dtoh_gbps), ("both", |g| g.both_gbps), ("pipeline", |g| g.pipeline_gbps)];

/// What every GPU's thread runs: copies of `bytes`, timed with `repeats`, windows on one host clock.
#[derive(Clone, Copy)]
struct PerGpuRun {
    bytes: usize,
    repeats: Repeats,
    t0: Instant,
}

/// What every_gpu writes with `--json`.
#[derive(Serialize)]
struct EveryGpuResults<'a> {
    devices: &'a [u32],
    bytes: usize,
    repeats: Repeats,
    alone: &'a [PerGpu],
    together: &'a [PerGpu],
    host_memory: &'a HostMemory,
}

/// The GPUs and what each runs.
pub struct EveryGpu {
    devices: Vec<u32>,
    run: PerGpuRun,
    /// Each GPU as started and checked, held so that its context lives on to the end: each thread
    /// starts its GPU again, on that context.
    _started: Vec<Gpu>,
}

impl EveryGpu {
    /// Starts every GPU of `devices` and checks each one's device memory, and the host's pinned memory
    /// for all of them at once ([`footprint`]), before any of them allocates: a size past one GPU or
    /// past the host is refused at once.
    pub fn start(devices: Vec<u32>, bytes: usize, repeats: Repeats) -> anyhow::Result<EveryGpu> {
        let need = footprint(bytes, devices.len());
        let mut started = Vec::new();
        for &device in &devices {
            let gpu = Gpu::init_device(device)?;
            gpu.check_footprint(&need).with_context(|| format!("GPU {device}"))?;
            started.push(gpu);
        }
        Ok(EveryGpu { devices, run: PerGpuRun { bytes, repeats, t0: Instant::now() }, _started: started })
    }

    /// Each GPU alone, one after another, on this thread.
    pub fn alone(&self) -> anyhow::Result<Vec<PerGpu>> {
        self.devices.iter().map(|&d| self.run.on_gpu(d, None)).collect()
    }

    /// Every GPU at once, each on a thread of its own, every phase started together (none where there
    /// is one GPU).
    pub fn together(&self) -> anyhow::Result<Vec<PerGpu>> {
        if self.devices.len() < 2 {
            return Ok(Vec::new());
        }
        let (step, run) = (&Barrier::new(self.devices.len()), self.run);
        std::thread::scope(|s| {
            let threads: Vec<_> = self.devices.iter().map(|&d| s.spawn(move || run.on_gpu(d, Some(step)))).collect();
            threads
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail!("a GPU thread panicked")))
                .collect::<anyhow::Result<_>>()
        })
    }

    /// Every GPU's rates alone and together, summed and over the host clock, and what each phase keeps
    /// together of what the GPUs reach alone.
    pub fn table(&self, out: &Output, alone: &[PerGpu], together: &[PerGpu]) {
        let (bytes, r) = (self.run.bytes, self.run.repeats);
        let gpus = self.devices.len();
        out.say(format!("{gpus} GPU(s), copies of {}; GB/s, median of up to {} runs", fmt_bytes(bytes), r.repeats));
        let mut t = Table::new(&["GPU", "NUMA node", "H2D", "D2H", "both ways", "pipeline"]);
        let rates = |label: String, node: String, f: &dyn Fn(usize) -> f64| {
            [label, node].into_iter().chain((0..PHASES.len()).map(|i| format!("{:.2}", f(i)))).collect()
        };
        let node = |g: &PerGpu| g.numa_node.map_or("not exposed".into(), |n| n.to_string());
        alone
            .iter()
            .for_each(|g| t.row(rates(format!("{} ({}) alone", g.device, g.name), node(g), &|i| PHASES[i].1(g))));
        together.iter().for_each(|g| t.row(rates(format!("{} together", g.device), node(g), &|i| PHASES[i].1(g))));
        if !together.is_empty() {
            t.row(rates("all, summed: alone".into(), String::new(), &|i| sum(alone, PHASES[i].1)));
            t.row(rates("all, summed: together".into(), String::new(), &|i| sum(together, PHASES[i].1)));
            let windows = |i| together.iter().map(|g| g.windows[i]).collect::<Vec<_>>();
            t.row(rates("all at once, host clock".into(), String::new(), &|i| Window::rate_together(&windows(i))));
        }
        out.table(&t);
        for (name, f) in PHASES.iter().filter(|_| !together.is_empty()) {
            let (a, b) = (sum(alone, *f), sum(together, *f));
            out.say(format!("{name}: together {b:.1} GB/s, {:.0}% of the {a:.1} the GPUs reach alone", 100.0 * b / a));
        }
    }

    /// Why: each GPU's own state, then what the GPUs share on the host (bridges, memory), and the
    /// direction in which the host gives least, measured against `host`, the CPUs' own rates.
    pub fn why(&self, out: &Output, alone: &[PerGpu], together: &[PerGpu], host: &HostMemory) {
        let loss = |f: Rate| sum(together, f) / sum(alone, f);
        let (way, f) = if loss(PHASES[0].1) < loss(PHASES[1].1) { PHASES[0] } else { PHASES[1] };
        let least = (!together.is_empty()).then(|| (way, sum(together, f), loss(f)));
        let gpus: Vec<GpuAlone> = alone
            .iter()
            .map(|g| GpuAlone {
                device: g.device,
                health: g.health.as_ref(),
                likely_causes: &g.likely_causes,
                slowest_gbps: g.htod_gbps.min(g.dtoh_gbps),
                pci_bus_id: &g.bus,
            })
            .collect();
        why_together(&gpus, least, host).iter().for_each(|l| out.say(l));
    }

    /// Writes the JSON: the devices, the size, each GPU alone and together, and the host's memory; and
    /// each GPU's phases as figures, named `GPU 0 alone: H2D`, for `xtask compare`.
    pub fn finish(&self, out: &Output, alone: &[PerGpu], together: &[PerGpu], host: &HostMemory) -> anyhow::Result<()> {
        let (bytes, repeats) = (self.run.bytes, self.run.repeats);
        let chunk = 4 * pipeline_chunk(bytes / 4);
        for (g, how) in alone.iter().map(|g| (g, "alone")).chain(together.iter().map(|g| (g, "together"))) {
            for ((phase, _), stats) in PHASES.iter().zip(&g.times) {
                let each = if *phase == "pipeline" { chunk } else { bytes };
                let figure = Figure::new(format!("GPU {} {how}: {phase}", g.device), stats).transfers(each);
                out.add(figure.depends_on("bytes"));
            }
        }
        out.finish(&EveryGpuResults { devices: &self.devices, bytes, repeats, alone, together, host_memory: host })
    }
}

/// Elements in the pipeline phase's largest chunk, for copies of `n` elements (its chunking's `max_chunk`).
fn pipeline_chunk(n: usize) -> usize {
    n.min(PIPELINE_ELEMENTS).div_ceil(PIPELINE_CHUNKS)
}

/// A phase's rate summed over GPUs.
fn sum(gpus: &[PerGpu], f: Rate) -> f64 {
    gpus.iter().map(f).sum()
}

impl PerGpuRun {
    /// On a thread of its own: GPU `device`, its memory near it, then each phase. With `step`, every
    /// GPU starts each phase together.
    fn on_gpu(self, device: u32, step: Option<&Barrier>) -> anyhow::Result<PerGpu> {
        let in_step = Lockstep::new(step, 5);
        let gpu = Gpu::init_device(device)?;
        let kernels = Kernels::load(&gpu)?;
        let numa_node = measure::machine::numa_node(&gpu.info);
        if let Some(node) = numa_node {
            bind_thread_to_node(node)?; // pinned memory allocated and touched below lands near the GPU
        }
        let n = self.bytes / 4;
        let chunking = Chunking::new(n.min(PIPELINE_ELEMENTS), PIPELINE_CHUNKS, 4)?;
        let work = balanced_work(&gpu, &kernels, chunking.max_chunk(), self.repeats)?;
        // Pinned input and output of `bytes` each, for the copies and the pipeline over the first part.
        let mut p = Pipeline::new(&gpu, &kernels, Steps::InPlace(work), n, self.repeats)?;
        let health = step.is_none().then(|| Health::read(&gpu));
        let likely_causes = health.as_ref().map_or(Vec::new(), |h| h.likely_causes(numa_node_of(&p.h_in[..])));
        let name = format!("GPU {device} {}", if step.is_some() { "together" } else { "alone" });
        let [htod, dtoh, both, pipeline] = self.phases(&mut p, &chunking, &in_step, &name)?;
        p.check(&chunking).ensure()?;
        Ok(PerGpu {
            device,
            name: gpu.info.name.clone(),
            numa_node,
            htod_gbps: htod.0.gbps(self.bytes),
            dtoh_gbps: dtoh.0.gbps(self.bytes),
            both_gbps: both.0.gbps(2 * self.bytes),
            pipeline_gbps: pipeline.0.gbps(2 * chunking.elements * 4),
            times: [htod.0, dtoh.0, both.0, pipeline.0],
            windows: vec![htod.1, dtoh.1, both.1, pipeline.1],
            bus: gpu.info.pci_bus_id.clone(),
            health,
            likely_causes,
        })
    }

    /// The four phases on `p`'s GPU and data, in a timeline phase `name`, each started when `in_step`
    /// says every GPU has reached it: H2D, D2H, both at once, and the pipeline of `chunking`; each one's
    /// times, and its span on the host clock with the bytes it moved.
    fn phases(
        self,
        p: &mut Pipeline<'_>,
        chunking: &Chunking,
        in_step: &Lockstep,
        name: &str,
    ) -> anyhow::Result<[(Stats, Window); 4]> {
        let (gpu, bytes, r) = (p.gpu(), self.bytes, self.repeats);
        let (mut up, mut down) = (gpu.alloc::<f32>(bytes / 4)?, gpu.alloc::<f32>(bytes / 4)?);
        let streams = gpu.streams(2)?;
        let mut on = p.buffers(chunking, Buffering::per_stream(chunking.streams))?;
        let _p = phase(name);
        let timed = |moved: usize, f: &mut dyn FnMut() -> anyhow::Result<Stats>| {
            in_step.wait();
            let start_s = self.t0.elapsed().as_secs_f64();
            let s = f()?; // the warm-up runs move data too, inside the window
            let end_s = self.t0.elapsed().as_secs_f64();
            Ok::<_, anyhow::Error>((s, Window { start_s, end_s, bytes: moved * (r.warmup + s.runs) }))
        };
        let (h_in, h_out) = (&p.h_in, &mut p.h_out);
        let htod = timed(bytes, &mut || {
            measure(r, || Ok(gpu.timed(&streams[..1], |s| s.stream(0).htod(h_in, s.device(&mut up)))?))
        })?;
        let dtoh = timed(bytes, &mut || {
            measure(r, || Ok(gpu.timed(&streams[..1], |s| s.stream(0).dtoh(s.device(&mut down), &mut *h_out))?))
        })?;
        let both = timed(2 * bytes, &mut || {
            measure(r, || {
                Ok(gpu.timed(&streams, |s| {
                    s.stream(0).htod(h_in, s.device(&mut up))?;
                    s.stream(1).dtoh(s.device(&mut down), &mut *h_out)
                })?)
            })
        })?;
        let pipeline = timed(2 * chunking.elements * 4, &mut || measure(r, || p.run(chunking, &mut on)))?;
        Ok([htod, dtoh, both, pipeline])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;
    const GIB: usize = 1 << 30;

    #[test]
    fn each_gpu_checks_its_own_memory_and_the_host_for_all() {
        // 1 GiB copies: each GPU holds 2 GiB and four chunks of 8 MiB; the host pins 2 GiB per GPU.
        let one = footprint(GIB, 1);
        assert_eq!((one.device, one.pinned, one.pageable), (2 * GIB + 32 * MIB, 2 * GIB, GIB));
        let four = footprint(GIB, 4);
        assert_eq!((four.device, four.pinned), (one.device, 8 * GIB));
        // Small copies: the pipeline runs over all of them, its chunks a 32nd each.
        let small = footprint(4 * MIB, 2);
        assert_eq!((small.device, small.pinned), (8 * MIB + (512 << 10), 16 * MIB));
        // The figures' chunk is the pipeline chunking's.
        for n in [MIB / 4, GIB / 4, (GIB + 12) / 4] {
            let chunking = Chunking::new(n.min(PIPELINE_ELEMENTS), PIPELINE_CHUNKS, 4).unwrap();
            assert_eq!(pipeline_chunk(n), chunking.max_chunk(), "{n}");
        }
        // A size past any machine saturates rather than wraps.
        let huge = footprint(usize::MAX, 8);
        assert_eq!((huge.device, huge.pinned), (usize::MAX, usize::MAX));
    }
}
