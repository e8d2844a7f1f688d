//! The one pipeline loop, the data it runs on, and the copy times and kernel calibration it is
//! measured with: each chunk's H2D copies, kernel and D2H copy, chunk after chunk, on device buffers and
//! streams as a [`Buffering`] lays them out. overlap, vector_add_streams, double_buffering,
//! overlap_sweep, planner and every_gpu run their pipelines through [`Pipeline::run`]; how long one
//! must take, at least, is [`crate::bound`]'s, and the lessons' rig around both is [`crate::rig`]'s.

use serde::Serialize;

use cuda_scope::{DeviceBuffer, Footprint, Gpu, PinnedBuffer, Stream};
use kernels::Kernels;

use crate::{
    timing::{measure, Repeats, Stats},
    verify::{input, Check},
    work::{ChunkKernel, Steps, Work},
    Chunking,
};

/// How a pipeline's chunks use device buffers and streams: chunk i goes into buffer i % buffers, on
/// that buffer's own stream, or, `by_engine`, on an H2D copy, a compute and a D2H copy stream that
/// every buffer shares (double buffering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Buffering {
    pub buffers: usize,
    pub by_engine: bool,
}

impl Buffering {
    /// A buffer and a stream for each of `streams` streams: chunk i on stream i % streams.
    pub fn per_stream(streams: usize) -> Buffering {
        Buffering { buffers: streams, by_engine: false }
    }

    /// `buffers` buffers taken in turn, and a stream for each engine: H2D copies, kernels, D2H copies.
    pub fn by_engine(buffers: usize) -> Buffering {
        Buffering { buffers, by_engine: true }
    }

    /// The streams it runs on.
    pub fn streams(self) -> usize {
        if self.by_engine {
            3
        } else {
            self.buffers
        }
    }
}

/// A pipeline run measured, to hold against its bound: what it was (`one stream`, `4 streams`), its
/// time, and its buffering.
#[derive(Clone, Debug)]
pub struct PipelineRun {
    pub name: String,
    pub time: Stats,
    pub buffering: Buffering,
}

/// Device buffers for runs of one buffering, allocated once for all its runs (the streams are the
/// pipeline's: [`Pipeline::buffers`]).
pub struct RunBuffers {
    buffering: Buffering,
    bufs: Vec<DeviceBuffer<f32>>,
}

/// A pipeline on one GPU: its kernels, what each chunk does, and its data in pinned memory (async
/// copies need it): the input, one vector per H2D copy one after another ([`input`]), and the output.
pub struct Pipeline<'g> {
    gpu: &'g Gpu,
    kernels: &'g Kernels,
    pub steps: Steps,
    pub repeats: Repeats,
    pub h_in: PinnedBuffer<f32>,
    pub h_out: PinnedBuffer<f32>,
    /// The streams every run and every part of the bound runs on, made as they are first needed: a run
    /// on K streams takes the first K, and the bound's parts run on the same ones (and more), so that
    /// what each stream costs (the copy engine the driver gives its copies, say) is the same in both.
    pub(crate) streams: Vec<Stream>,
}

impl<'g> Pipeline<'g> {
    /// A pipeline of `steps` over `elements` per vector, measured with `repeats`.
    pub fn new(
        gpu: &'g Gpu,
        kernels: &'g Kernels,
        steps: Steps,
        elements: usize,
        repeats: Repeats,
    ) -> anyhow::Result<Self> {
        let h_in = gpu.pinned_from_fn(elements * steps.htod_copies(), input)?; // cudaMallocHost, filled
        let h_out = gpu.pinned::<f32>(elements)?;
        Ok(Pipeline { gpu, kernels, steps, repeats, h_in, h_out, streams: Vec::new() })
    }

    /// At least `n` streams in [`Pipeline::streams`], made now where there are fewer.
    pub(crate) fn grow_streams(&mut self, n: usize) -> anyhow::Result<()> {
        let more = n.saturating_sub(self.streams.len());
        self.streams.extend(self.gpu.streams(more)?); //               cudaStreamCreateWithFlags(.., NonBlocking)
        Ok(())
    }

    /// What [`Pipeline::new`] pins, and what runs of `chunking` with up to `buffers` buffers and their
    /// bound take on the device, at most: for a lesson to check before it allocates any of it.
    pub fn footprint(kernel: ChunkKernel, chunking: &Chunking, buffers: usize) -> Footprint {
        let htod_copies = if matches!(kernel, ChunkKernel::VectorAdd) { 2 } else { 1 };
        let per_chunk = if htod_copies == 2 { 3 } else { 1 } * chunking.max_chunk();
        // The bound's parts run in a scratch buffer twice the data; a calibration copies one chunk.
        let device = (buffers.saturating_mul(per_chunk)).max(2 * chunking.elements) + 2 * chunking.max_chunk();
        Footprint::default()
            .pinned::<f32>(chunking.elements * (htod_copies + 1) + 2 * chunking.max_chunk())
            .device::<f32>(device)
    }

    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    pub fn kernels(&self) -> &'g Kernels {
        self.kernels
    }

    /// The elements of each vector.
    pub fn elements(&self) -> usize {
        self.h_out.len()
    }

    /// Buffers for runs of `chunking` laid out by `buffering`, and its streams: the pipeline's first.
    pub fn buffers(&mut self, chunking: &Chunking, buffering: Buffering) -> anyhow::Result<RunBuffers> {
        let len = self.steps.device_len(chunking.max_chunk());
        self.grow_streams(buffering.streams())?;
        let bufs = self.gpu.alloc_each::<f32>(buffering.buffers, len)?; // cudaMalloc(&d_data[i], CHUNK_BYTES)
        Ok(RunBuffers { buffering, bufs })
    }

    /// The pipeline loop, once: chunk i's H2D copies into buffer i % B, its kernel, its D2H copy, on
    /// that buffer's stream (or the engines' streams); the GPU time in ms. The chunks of a buffer
    /// reuse it one after another, which the scope orders: on one stream by the stream's order, and
    /// across streams by the waits it adds where a buffer's next H2D copy would overtake its D2H copy.
    pub fn run(&mut self, chunking: &Chunking, on: &mut RunBuffers) -> anyhow::Result<f64> {
        let (steps, kernels, n) = (self.steps, self.kernels, self.elements());
        anyhow::ensure!(chunking.elements <= n, "a plan of {} elements over data of {n}", chunking.elements);
        let (h_in, h_out) = (&self.h_in[..], &mut self.h_out[..chunking.elements]);
        let RunBuffers { buffering, bufs } = on;
        anyhow::ensure!(self.streams.len() >= buffering.streams(), "run buffers of another pipeline");
        self.gpu.timed(&self.streams[..buffering.streams()], |s| {
            let d = each(s)?.devices(bufs);
            for (c, out) in chunking.iter().zip(chunking.split_mut(h_out)) {
                let (buf, own) = (d[c.index % buffering.buffers], s.stream(c.index % buffering.buffers));
                let (copy_in, compute, copy_out) =
                    if buffering.by_engine { (s.stream(0), s.stream(1), s.stream(2)) } else { (own, own, own) };
                for k in 0..steps.htod_copies() {
                    copy_in.htod(&h_in[k * n + c.offset..k * n + c.offset + c.len], steps.input(buf, k, c.len))?;
                }
                steps.run(kernels, compute, buf, c.len)?; //  process<<<grid, 256, 0, stream>>>(d_data[i], n)
                copy_out.dtoh(steps.output(buf, c.len), out)?;
            }
            Ok(())
        })
    }

    /// The loop over the repeats, `chunking` laid out by `buffering`, in a timeline phase named `name`;
    /// its output is checked against the CPU (an error if it is wrong).
    pub fn time(&mut self, name: &str, chunking: &Chunking, buffering: Buffering) -> anyhow::Result<PipelineRun> {
        let mut on = self.buffers(chunking, buffering)?;
        self.h_out.fill(f32::NAN);
        let time = {
            let _p = crate::timeline::phase(name);
            measure(self.repeats, || self.run(chunking, &mut on))?
        };
        self.check(chunking).ensure()?;
        Ok(PipelineRun { name: name.into(), time, buffering })
    }

    /// The output of `chunking`'s chunks against the CPU's ([`Steps::check`]).
    pub fn check(&self, chunking: &Chunking) -> Check {
        self.steps.check(&self.h_out[..chunking.elements], chunking)
    }
}

/// One chunk's copies timed alone, and both directions at once (what each keeps while the other runs).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CopyTimes {
    pub bytes: usize,
    pub htod: Stats,
    pub dtoh: Stats,
    /// An H2D and a D2H of `bytes` each, on two streams at once.
    pub both: Stats,
}

/// Pinned host memory and device memory for timing copies of up to `len` f32 each way: allocated once,
/// for measurements at many sizes (pinning a gigabyte takes longer than copying it several times).
pub struct CopyBuffers {
    h_in: PinnedBuffer<f32>,
    h_out: PinnedBuffer<f32>,
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
        let htod =
            measure(r, || Ok(gpu.timed(&streams[..1], |s| s.stream(0).htod(h_in, s.device(up).slice(0..len)))?))?;
        let dtoh =
            measure(r, || Ok(gpu.timed(&streams[..1], |s| s.stream(0).dtoh(s.device(down).slice(0..len), h_out))?))?;
        let both = measure(r, || {
            Ok(gpu.timed(streams, |s| {
                s.stream(0).htod(h_in, s.device(up).slice(0..len))?;
                s.stream(1).dtoh(s.device(down).slice(0..len), h_out)
            })?)
        })?;
        Ok(CopyTimes { bytes: len * 4, htod, dtoh, both })
    }
}

/// Iterations of [`kernels::Kernels::process`] that make one pass over `len` elements take about
/// `target_ms`: it times a trial, scales (the kernel is compute-bound, so time grows with iterations),
/// and refines once.
pub fn calibrate_process(gpu: &Gpu, kernels: &Kernels, len: usize, target_ms: f64, r: Repeats) -> anyhow::Result<u32> {
    let mut d = gpu.alloc::<f32>(len)?;
    let streams = gpu.streams(1)?;
    let mut time =
        |iters: u32| measure(r, || Ok(gpu.timed(&streams, |s| kernels.process(s.stream(0), s.device(&mut d), iters))?));
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

/// The steps `kernel` asks for on chunks of `chunk` elements: [`ChunkKernel::Balanced`] calibrated now.
pub fn steps(gpu: &Gpu, kernels: &Kernels, kernel: ChunkKernel, chunk: usize, r: Repeats) -> anyhow::Result<Steps> {
    Ok(match kernel {
        ChunkKernel::VectorAdd => Steps::VectorAdd,
        _ => Steps::InPlace(in_place(gpu, kernels, kernel, chunk, r)?),
    })
}

/// The work in place `kernel` asks for on chunks of `chunk` elements: [`ChunkKernel::Balanced`]
/// calibrated now; `c = a + b` is not in place, and is refused.
pub fn in_place(gpu: &Gpu, kernels: &Kernels, kernel: ChunkKernel, chunk: usize, r: Repeats) -> anyhow::Result<Work> {
    match kernel {
        ChunkKernel::Balanced => balanced_work(gpu, kernels, chunk, r),
        ChunkKernel::Given(work) => Ok(work),
        ChunkKernel::VectorAdd => anyhow::bail!("c = a + b is not a kernel in place"),
    }
}

/// The scope, set to issue every copy as it is queued (`Coalescing::Off`): a pipeline moves one copy
/// per chunk, as the seeds' C++ does, and so do the parts of its bound.
pub fn each<'s, 'e>(s: &'s cuda_scope::Scope<'s, 'e>) -> cuda_scope::Result<&'s cuda_scope::Scope<'s, 'e>> {
    s.set_coalescing(cuda_scope::Coalescing::Off)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: usize = 1 << 30;

    #[test]
    fn a_pipelines_footprint_counts_its_vectors_buffers_and_bound() {
        // overlap's defaults: 64M floats (256 MiB) in 32 chunks on 4 streams, in and out pinned; the
        // bound's scratch (twice the data) is the most the device holds at once.
        let chunking = Chunking::new(64 << 20, 32, 4).unwrap();
        let f = Pipeline::footprint(ChunkKernel::Balanced, &chunking, 4);
        assert_eq!(f.pinned, (2 * (64 << 20) + 2 * chunking.max_chunk()) * 4);
        assert_eq!(f.device, (2 * (64 << 20) + 2 * chunking.max_chunk()) * 4);
        // vector_add_streams -n 20G: a, b and c of 80 GiB each pinned, before anything is allocated.
        let chunking = Chunking::new(20 << 30, 16, 4).unwrap();
        let f = Pipeline::footprint(ChunkKernel::VectorAdd, &chunking, 4);
        assert!(f.pinned >= 240 * GIB && f.device >= 160 * GIB, "{f:?}");
        // Many buffers of big chunks outweigh the bound's scratch.
        let chunking = Chunking::new(1 << 20, 4, 4).unwrap();
        let f = Pipeline::footprint(ChunkKernel::VectorAdd, &chunking, 4);
        assert_eq!(f.device, (4 * 3 * (1 << 18) + 2 * (1 << 18)) * 4);
    }
}
