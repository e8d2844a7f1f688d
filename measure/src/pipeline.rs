//! The pipeline's pieces that are not its story: copy times of one chunk, a kernel calibrated to
//! balance the copies, and one loop for the benchmarks, the tests and the every-GPU lesson (the lessons
//! spell their own loops out). How long a pipeline must take, at least, is [`crate::bound`]'s.

use serde::Serialize;

use common::{DeviceBuffer, Gpu, Stream};
use kernels::Kernels;

use crate::{
    timing::{measure, Repeats, Stats},
    verify::input,
    work::Work,
    ChunkPlan,
};

/// One chunk's copies timed alone, and both directions at once (what each keeps while the other runs).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CopyTimes {
    pub bytes: usize,
    pub h2d: Stats,
    pub d2h: Stats,
    /// An H2D and a D2H of `bytes` each, on two streams at once.
    pub both: Stats,
}

/// Pinned host memory and device memory for timing copies of up to `len` f32 each way: allocated once,
/// for measurements at many sizes (pinning a gigabyte takes longer than copying it several times).
pub struct CopyBuffers {
    h_in: common::PinnedBuffer<f32>,
    h_out: common::PinnedBuffer<f32>,
    up: DeviceBuffer<f32>,
    down: DeviceBuffer<f32>,
    streams: Vec<Stream>,
}

impl CopyBuffers {
    pub fn new(gpu: &Gpu, len: usize) -> anyhow::Result<CopyBuffers> {
        Ok(CopyBuffers {
            h_in: gpu.pinned_from_fn(len, input)?,
            h_out: gpu.pinned::<f32>(len)?,
            up: gpu.alloc::<f32>(len)?,
            down: gpu.alloc::<f32>(len)?,
            streams: gpu.streams(2)?,
        })
    }
}

impl CopyTimes {
    /// Times copies of `len` f32 between pinned memory and the device, alone and both ways at once.
    pub fn measure(gpu: &Gpu, len: usize, r: Repeats) -> anyhow::Result<CopyTimes> {
        CopyTimes::measure_in(gpu, &mut CopyBuffers::new(gpu, len)?, len, r)
    }

    /// The same in buffers allocated once, for a sweep of sizes (`len` at most theirs).
    pub fn measure_in(gpu: &Gpu, b: &mut CopyBuffers, len: usize, r: Repeats) -> anyhow::Result<CopyTimes> {
        let CopyBuffers { h_in, h_out, up, down, streams } = b;
        anyhow::ensure!(len <= h_in.len(), "copies of {len} elements in buffers of {}", h_in.len());
        let (h_in, h_out) = (&h_in[..len], &mut h_out[..len]);
        // A phase of its own, unless the caller has named what these copies are for.
        let _phase = crate::timeline::current_phase().is_empty().then(|| crate::timeline::phase("copies alone"));
        let h2d = measure(r, || gpu.timed(&streams[..1], |s| s.stream(0).htod(h_in, s.device(up).slice(0..len))))?;
        let d2h = measure(r, || gpu.timed(&streams[..1], |s| s.stream(0).dtoh(s.device(down).slice(0..len), h_out)))?;
        let both = measure(r, || {
            gpu.timed(streams, |s| {
                s.stream(0).htod(h_in, s.device(up).slice(0..len))?;
                s.stream(1).dtoh(s.device(down).slice(0..len), h_out)
            })
        })?;
        Ok(CopyTimes { bytes: len * 4, h2d, d2h, both })
    }
}

/// Iterations of [`kernels::Kernels::process`] that make one pass over `len` elements take about
/// `target_ms`: it times a trial, scales (the kernel is compute-bound, so time grows with iterations),
/// and refines once.
pub fn calibrate_process(gpu: &Gpu, kernels: &Kernels, len: usize, target_ms: f64, r: Repeats) -> anyhow::Result<u32> {
    let mut d = gpu.alloc::<f32>(len)?;
    let streams = gpu.streams(1)?;
    let mut time =
        |iters: u32| measure(r, || gpu.timed(&streams, |s| kernels.process(s.stream(0), s.device(&mut d), iters)));
    let mut iters = 256u32;
    for _ in 0..2 {
        let t = time(iters)?.median_ms;
        iters = ((iters as f64 * target_ms / t).round() as u32).clamp(1, 1 << 20);
    }
    Ok(iters)
}

/// [`Work::Process`] calibrated so that a chunk of `len` elements takes as long to compute as its copies
/// take when both directions run at once, as they do in a pipeline's steady state: a kernel that gives
/// overlap something to hide on every engine.
pub fn balanced_work(gpu: &Gpu, kernels: &Kernels, len: usize, r: Repeats) -> anyhow::Result<Work> {
    let _phase = crate::timeline::phase("calibration");
    let copies = CopyTimes::measure(gpu, len, r)?;
    Ok(Work::Process(calibrate_process(gpu, kernels, len, copies.both.median_ms, r)?))
}

/// How a pipeline lays chunks out: chunk i lives in device buffer i % buffers and runs on stream
/// i % buffers, or, `by_engine`, on an upload, a compute and a download stream (double buffering).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Layout {
    pub buffers: usize,
    pub by_engine: bool,
}

/// Runs `work` over `h_in` into `h_out` once, chunked by `plan` and laid out by `layout`, and returns
/// the GPU time in ms. The lessons spell this loop out; benchmarks and the multi-GPU lesson call it.
#[allow(clippy::too_many_arguments)]
pub fn run_pipeline(
    gpu: &Gpu,
    kernels: &Kernels,
    streams: &[Stream],
    plan: &ChunkPlan,
    layout: Layout,
    work: Work,
    (h_in, h_out): (&[f32], &mut [f32]),
    bufs: &mut [DeviceBuffer<f32>],
) -> anyhow::Result<f64> {
    anyhow::ensure!(
        bufs.len() >= layout.buffers && streams.len() >= layout.buffers.max(if layout.by_engine { 3 } else { 1 }),
        "too few buffers or streams for the layout"
    );
    gpu.timed(streams, |s| {
        let d = s.devices(&mut bufs[..layout.buffers]);
        for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
            let (buf, own) = (d[c.index % layout.buffers].slice(0..c.len), s.stream(c.index % layout.buffers));
            let (up, compute, down) =
                if layout.by_engine { (s.stream(0), s.stream(1), s.stream(2)) } else { (own, own, own) };
            up.htod(&h_in[c.range()], buf)?;
            work.run(kernels, compute, buf)?;
            down.dtoh(buf, out)?;
        }
        Ok(())
    })
}
