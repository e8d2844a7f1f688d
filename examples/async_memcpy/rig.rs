//! async_memcpy's rig: the program's three calls on the lesson's data (`-n`, `--iters`), each version
//! many times. It owns the GPU, the lessons' kernels and the flags; refuses at once a size whose buffers
//! do not fit ([`footprint`]); times each version on the GPU alone, then with the CPU computing the
//! reference while it waits, timing the host inside the calls; checks the result against that
//! reference; prints the table; and writes the JSON ([`AsyncResults`]).

use std::time::Instant;

use cuda_scope::{DeviceBuffer, DeviceInfo, Footprint, Gpu, PinnedBuffer, Stream};
use kernels::{cpu, Kernels};
use measure::{
    report::{fmt_count, fmt_ms, Figure, Output, Table},
    timeline::phase,
    timing::{measure, Repeats, Stats},
    verify::{self, input, Check},
};
use serde::Serialize;

use crate::Args;

/// Elements of the reference the CPU computes between two polls of the stream.
const BLOCK: usize = 256;

/// What async_memcpy.cu measured: its three calls made blocking, then queued on a stream, ms.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Original {
    pub sync_ms: f64,
    pub async_ms: f64,
}

/// One version's figures: what the GPU took, what the host spent inside the calls, and what it did
/// while the GPU worked.
#[derive(Serialize)]
struct Version {
    version: &'static str,
    gpu: Stats,
    host_in_calls: Stats,
    host_free: Stats,
    cpu_elements_meanwhile: usize,
}

/// What async_memcpy writes with `--json`.
#[derive(Serialize)]
struct AsyncResults<'a> {
    device: &'a DeviceInfo,
    elements: usize,
    iters: u32,
    repeats: Repeats,
    versions: Vec<Version>,
    original: Original,
    verification: Check,
}

/// What the lesson holds at once, at most, for `-n` elements: first the program's 4M floats on the
/// device and twice in pinned memory (its data, and the result it reads back); then the lesson's `n`
/// on the device, twice pinned, and once pageable (the reference the CPU computes).
pub fn footprint(n: usize) -> Footprint {
    let program = Footprint::default().device::<f32>(1 << 22).pinned::<f32>(2 << 22);
    program.max(Footprint::default().device::<f32>(n).pinned::<f32>(n).pinned::<f32>(n).pageable::<f32>(n))
}

/// The GPU, the lessons' kernels, and the flags.
pub struct AsyncRig<'a> {
    pub gpu: Gpu,
    pub kernels: Kernels,
    args: &'a Args,
}

impl<'a> AsyncRig<'a> {
    /// Starts the GPU that `CUDA_DEVICE` names (its report printed), refuses at once an `-n` whose
    /// buffers do not fit it or the host, and loads the lessons' kernels.
    pub fn start(out: &Output, args: &'a Args) -> anyhow::Result<AsyncRig<'a>> {
        let gpu = measure::lesson::gpu(out, &footprint(args.elements))?;
        let kernels = Kernels::load(&gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
        Ok(AsyncRig { gpu, kernels, args })
    }

    /// Both versions on the lesson's data, timed, printed and named; then one more asynchronous run, whose
    /// reference elements computed meanwhile check its result. `original`: what the program measured.
    pub fn versions(&self, out: &Output, original: Original) -> anyhow::Result<()> {
        let (n, iters) = (self.args.elements, self.args.iters);
        let mut lesson = LessonData::new(&self.gpu, n)?;
        let versions = [("synchronous", true), ("asynchronous", false)].into_iter();
        let versions =
            versions.map(|(v, wait)| self.version(&mut lesson, v, wait)).collect::<anyhow::Result<Vec<_>>>()?;
        self.report(out, &versions);
        for v in &versions {
            out.figure(format!("{}: GPU time", v.version), &v.gpu); // named for `cargo xtask compare`
            out.add(Figure::new(format!("{}: host in the calls", v.version), &v.host_in_calls).on_host());
        }
        let Run { done, .. } = lesson.run(self, false, true)?;
        let reference = &lesson.reference;
        let expected = |i| if i < done { reference[i] } else { cpu::heavy_sqrt(input(i), iters) };
        let verification = verify::exact(&lesson.h_result, expected);
        out.say(verification.summary());
        verification.ensure()?;
        let (device, repeats) = (&self.gpu.info, self.args.run.repeats());
        out.finish(&AsyncResults { device, elements: n, iters, repeats, versions, original, verification })
    }

    /// One version: its GPU time alone (no CPU work, so the stop event is recorded as soon as the calls
    /// return), then the host's view, with the CPU working while it waits.
    fn version(&self, lesson: &mut LessonData, version: &'static str, wait: bool) -> anyhow::Result<Version> {
        let r = self.args.run.repeats();
        let _p = phase(version);
        let gpu = measure(r, || lesson.run(self, wait, false).map(|t| t.gpu_ms))?;
        let host = (0..r.warmup + r.repeats).map(|_| lesson.run(self, wait, true));
        let host = host.collect::<anyhow::Result<Vec<Run>>>()?.split_off(r.warmup);
        let stats = |f: fn(&Run) -> f64| Stats::from_samples(&host.iter().map(f).collect::<Vec<_>>());
        let mut work: Vec<usize> = host.iter().map(|h| h.done).collect();
        work.sort_unstable();
        let (host_in_calls, host_free) = (stats(|h| h.api_ms)?, stats(|h| h.free_ms)?);
        Ok(Version { version, gpu, host_in_calls, host_free, cpu_elements_meanwhile: work[work.len() / 2] })
    }

    /// The table of both versions, and what it shows.
    fn report(&self, out: &Output, versions: &[Version]) {
        let (n, iters, r) = (self.args.elements, self.args.iters, self.args.run.repeats());
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
        let (runs, warmup) = (r.repeats, r.warmup);
        let count = fmt_count(n);
        out.say(format!(
            "\n{count} elements, {iters} rounds of sqrt(x*x + 1); median of up to {runs} runs after {warmup} warm-up"
        ));
        out.table(&t);
        let (sync, asyn) = (&versions[0], &versions[1]);
        let cpu_ms_per_element = asyn.host_free.median_ms / asyn.cpu_elements_meanwhile.max(1) as f64;
        out.say(format!(
            "\nThe GPU took {} synchronously and {} asynchronously: async calls do not make the GPU faster. \
             The synchronous calls held the host for {}; the asynchronous ones returned after {} ({:.0}x less), \
             leaving the CPU free for {} of real work (this kernel is {:.0}x faster on the GPU than on one CPU \
             core, hence the few elements).",
            fmt_ms(sync.gpu.median_ms),
            fmt_ms(asyn.gpu.median_ms),
            fmt_ms(sync.host_in_calls.median_ms),
            fmt_ms(asyn.host_in_calls.median_ms),
            sync.host_in_calls.median_ms / asyn.host_in_calls.median_ms,
            fmt_ms(asyn.host_free.median_ms),
            n as f64 * cpu_ms_per_element / asyn.gpu.median_ms
        ));
    }
}

/// One run of the three calls: the GPU's time, the host's inside the calls and free after them, and the
/// reference elements it computed meanwhile.
struct Run {
    gpu_ms: f64,
    api_ms: f64,
    free_ms: f64,
    done: usize,
}

/// The lesson's data up, its result down, the device buffer between, and the reference the CPU computes.
struct LessonData {
    h_data: PinnedBuffer<f32>,
    h_result: PinnedBuffer<f32>,
    d_data: DeviceBuffer<f32>,
    streams: Vec<Stream>,
    reference: Vec<f32>,
}

impl LessonData {
    fn new(gpu: &Gpu, n: usize) -> anyhow::Result<LessonData> {
        let d_data = gpu.alloc::<f32>(n)?;
        let (h_data, h_result) = (gpu.pinned_from_fn(n, input)?, gpu.pinned::<f32>(n)?);
        Ok(LessonData {
            h_data,
            h_result,
            d_data,
            streams: gpu.streams(1)?,
            reference: cuda_scope::pageable(n, |_| 0f32)?,
        })
    }

    /// One run: with `wait` each call blocks until its work is done; without, each returns at once. With
    /// `cpu_work` the CPU computes reference elements, a block at a time, until the GPU is done.
    fn run(&mut self, rig: &AsyncRig, wait: bool, cpu_work: bool) -> anyhow::Result<Run> {
        let (n, iters) = (self.h_data.len(), rig.args.iters);
        let LessonData { h_data, h_result, d_data, streams, reference } = self;
        let (mut api_ms, mut free_ms, mut done) = (0.0, 0.0, 0);
        let gpu_ms = rig.gpu.timed(streams, |s| {
            let (d, stream) = (s.device(d_data), s.stream(0));
            let block =
                |queued: cuda_scope::Result<()>| if wait { queued.and_then(|_| s.synchronize()) } else { queued };
            let t = Instant::now();
            block(stream.htod(h_data, d))?;
            block(rig.kernels.heavy_sqrt(stream, d, iters))?;
            block(stream.dtoh(d, h_result))?;
            api_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            while cpu_work && done < n && !s.is_idle()? {
                let end = (done + BLOCK).min(n);
                (done..end).for_each(|i| reference[i] = cpu::heavy_sqrt(input(i), iters));
                done = end;
            }
            free_ms = if done > 0 { t.elapsed().as_secs_f64() * 1e3 } else { 0.0 };
            Ok::<_, anyhow::Error>(())
        })?;
        Ok(Run { gpu_ms, api_ms, free_ms, done })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_default_run_needs_16_mib_on_the_device_32_pinned_and_16_pageable() {
        // -n 4M: the lesson's data as large as the program's, and the reference beside it.
        let need = footprint(4 << 20);
        assert_eq!(need, Footprint { device: 16 * MIB, pinned: 32 * MIB, pageable: 16 * MIB });
        // -n 1k: the program's buffers rule.
        assert_eq!(footprint(1 << 10), Footprint { device: 16 * MIB, pinned: 32 * MIB, pageable: 4 << 10 });
    }

    #[test]
    fn a_huge_n_saturates_past_any_machine() {
        let need = footprint(usize::MAX);
        assert_eq!((need.device, need.pinned, need.pageable), (usize::MAX, usize::MAX, usize::MAX));
        let big = footprint(256 << 30); // -n 256G: 1 TiB on the device, 2 TiB pinned
        assert!(big.device > 141_000_000_000 && big.pinned > 2_000_000_000_000, "{big:?}");
    }
}
