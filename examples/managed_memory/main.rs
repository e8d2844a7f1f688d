//! Lesson 10: managed (unified) memory, the alternative to explicit copies that seed 001's
//! asyncMemoryCopyExample.cu names (`cudaMallocManaged`, and `cudaMemPrefetchAsync` as the optional step).
//!
//! One pointer serves the CPU and the GPU, and the driver moves the pages. This lesson does overlap's
//! work (chunks on streams, the same kernel) three ways, each timed as a program feels it: the host
//! writes the input, the GPU processes it, the host reads the result.
//!
//! ```text
//! on demand    managed memory, no prefetch: the first kernel touch of each page faults on the GPU,
//!              which fetches it across the bus; the host's first read of each result page faults back
//! prefetched   managed memory, each chunk prefetched to the GPU before its kernel and back to the host
//!              after it, on the chunk's stream: the same bytes move, in bulk and without faults
//! explicit     pinned host memory, a device buffer per stream, cudaMemcpyAsync both ways: overlap
//! ```
//!
//! The first two move the same bytes: their difference is what demand paging costs (less where chunk
//! edges split pages, which fault when prefetched too; the seed's commented-out prefetch names
//! cudaMalloc'd memory, which the driver refuses). Managed memory is granted beyond the device's free
//! memory, where its pages would evict each other's back and forth: the lesson checks first. Each way's
//! round is below; the rig (`rig.rs`) runs them over the sizes, checks, times and reports them.
//!
//!     cargo run --release --example managed_memory [-- --min 16MiB --max 1GiB --chunks 16 --streams 4]

mod rig;

use std::process::ExitCode;

use clap::Parser;
use cuda_scope::{host::fill, Destination, DeviceBuffer, Gpu, ManagedBuffer, PinnedBuffer, Stream};
use measure::args::{parse_count, RunArgs, SweepArgs, WorkArgs};
use measure::{report::Output, timing::Laps, verify::input, Chunking};
use rig::ManagedRig;

/// Overlap's work with managed memory on demand, managed memory prefetched, and explicit copies, over sizes
/// (16 MiB to 64 MiB unless given, 4x each step).
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    sizes: SweepArgs,
    #[command(flatten)]
    work: WorkArgs,
    /// Chunks each array is cut into
    #[arg(long, default_value = "16", value_parser = parse_count, allow_negative_numbers = true)]
    chunks: usize,
    /// Streams the chunks are dealt to, round-robin
    #[arg(long, default_value = "4", value_parser = parse_count, allow_negative_numbers = true)]
    streams: usize,
    #[command(flatten)]
    run: RunArgs,
}

fn main() -> ExitCode {
    measure::lesson::run(managed_memory)
}

/// The three ways over the sizes, each checked against the CPU, timed, printed and written (`rig.rs`).
fn managed_memory(args: &Args, out: &Output) -> anyhow::Result<()> {
    ManagedRig::start(out, args)?.three_ways(out)
}

/// How the data moves between the host and the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DataMovement {
    /// Managed memory, paged in on demand: the GPU's first touch of a page faults, and so does the host's.
    OnDemand,
    /// Managed memory, each chunk prefetched to the GPU before its kernel and back to the host after it.
    Prefetched,
    /// Pinned host memory, copied to a device buffer per stream and back.
    ExplicitCopies,
}

impl DataMovement {
    const ALL: [DataMovement; 3] = [DataMovement::OnDemand, DataMovement::Prefetched, DataMovement::ExplicitCopies];

    fn name(self) -> &'static str {
        match self {
            DataMovement::OnDemand => "on demand",
            DataMovement::Prefetched => "prefetched",
            DataMovement::ExplicitCopies => "explicit copies",
        }
    }
}

/// The memory of the three ways, for the largest size: one managed array; pinned input and output and a
/// device buffer of a chunk per stream; and where the host reads each way's result to.
struct LessonMemory {
    managed: ManagedBuffer<f32>,
    h_in: PinnedBuffer<f32>,
    h_out: PinnedBuffer<f32>,
    d_data: Vec<DeviceBuffer<f32>>,
    streams: Vec<Stream>,
    result: Vec<f32>,
}

impl LessonMemory {
    fn new(gpu: &Gpu, chunking: &Chunking) -> anyhow::Result<LessonMemory> {
        let n = chunking.elements;
        let managed = gpu.managed::<f32>(n)?; //                                 cudaMallocManaged(&data, BYTES)
        let h_in = gpu.pinned::<f32>(n)?; //                                     cudaMallocHost(&h_in, BYTES)
        let h_out = gpu.pinned::<f32>(n)?; //                                    cudaMallocHost(&h_out, BYTES)
        let d_data = gpu.alloc_each::<f32>(chunking.streams, chunking.max_chunk())?; // cudaMalloc(&d_data[i], ..)
        let streams = gpu.streams(chunking.streams)?; //                             cudaStreamCreateWithFlags(.., ..)
        let result = cuda_scope::pageable(n, |_| 0f32)?; //                          where the host reads each result to
        Ok(LessonMemory { managed, h_in, h_out, d_data, streams, result })
    }

    /// One round of `how` on `chunking`'s chunks: the host writes the input, the GPU processes it chunk by
    /// chunk, the host reads the result. The round's time, then its three steps', ms: the host's fill,
    /// the GPU's part (CUDA events around the scope's work), the host's read.
    fn round(&mut self, rig: &ManagedRig, how: DataMovement, chunking: &Chunking) -> anyhow::Result<[f64; 4]> {
        let (n, managed) = (chunking.elements, how != DataMovement::ExplicitCopies);
        let mut laps = Laps::start();
        fill(if managed { &mut self.managed[..n] } else { &mut self.h_in[..n] }, input);
        let host_fill = laps.lap();
        let gpu_ms =
            if managed { self.managed_chunks(rig, how, chunking)? } else { self.explicit_chunks(rig, chunking)? };
        let scope = laps.lap(); // the scope synchronized every stream: the host may touch the memory again
        let src = if managed { &self.managed[..n] } else { &self.h_out[..n] };
        fill(&mut self.result[..n], |i| src[i]); //                        on demand, each page faults back here
        let host_read = laps.lap();
        Ok([host_fill + scope + host_read, host_fill, gpu_ms, host_read])
    }

    /// The managed array chunk by chunk, each on its stream: prefetched to the GPU before its kernel and
    /// back to the host after it, or, on demand, left to fault.
    fn managed_chunks(&mut self, rig: &ManagedRig, how: DataMovement, chunking: &Chunking) -> anyhow::Result<f64> {
        let LessonMemory { managed, streams, .. } = self;
        rig.gpu.timed(&streams[..chunking.streams], |s| {
            let data = s.managed(managed);
            for c in chunking.iter() {
                let (stream, d) = (s.stream(c.stream), data.slice(c.range()));
                let prefetch = |to| if how == DataMovement::Prefetched { stream.prefetch(d, to) } else { Ok(()) };
                prefetch(Destination::Device)?; //                     cudaMemPrefetchAsync(data + offset, ..., device)
                rig.work.run(&rig.kernels, stream, d)?; //             process<<<.., streams[i]>>>(data + offset, n)
                prefetch(Destination::Host)?; //                       cudaMemPrefetchAsync(.., cudaCpuDeviceId)
            }
            Ok(())
        })
    }

    /// Pinned memory copied chunk by chunk to its stream's device buffer, processed, and copied back.
    fn explicit_chunks(&mut self, rig: &ManagedRig, chunking: &Chunking) -> anyhow::Result<f64> {
        let LessonMemory { h_in, h_out, d_data, streams, .. } = self;
        rig.gpu.timed(&streams[..chunking.streams], |s| {
            let d = s.devices(d_data);
            for (c, out) in chunking.iter().zip(chunking.split_mut(&mut h_out[..chunking.elements])) {
                let (stream, d) = (s.stream(c.stream), d[c.stream].slice(0..c.len));
                stream.htod(&h_in[c.range()], d)?; //                   cudaMemcpyAsync(d_data[i], h_in + offset, ...)
                rig.work.run(&rig.kernels, stream, d)?;
                stream.dtoh(d, out)?; //                                cudaMemcpyAsync(h_out + offset, d_data[i], ...)
            }
            Ok(())
        })
    }
}
