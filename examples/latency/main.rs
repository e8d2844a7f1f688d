//! Lesson 11: how long one small transfer takes (beyond the CUDA C++ programs the first lessons follow).
//!
//! Large copies are held by the link's rate; small ones by a fixed cost per copy, which no rate hides.
//! This lesson times one small `cudaMemcpyAsync` each way, from pinned and from pageable memory, on the
//! GPU (CUDA events around the copy) and as the calling thread feels it (queue, then wait). Then it
//! times one read of memory by a kernel: a single thread follows a chain of links, each read waiting
//! for the one before, in mapped host memory (2 MiB, a link every 128 bytes, as nvbandwidth's
//! `host_device_latency_sm`) and in device memory (256 MiB, more than the L2 cache holds, each launch
//! going on where the last one ended, so every read misses the cache). A read's time is the difference
//! between launches of N and N/2 reads over N/2, which leaves the launch out. pinned_memory fits the
//! per-copy cost α over sizes; this is the cost of one copy seen directly.
//!
//!     cargo run --release --example latency [-- --bytes 4 --accesses 4096]

use std::{process::ExitCode, time::Instant};

use clap::Parser;
use cuda_scope::{DeviceBuffer, DeviceInfo, Footprint, Gpu, HostAlloc, PinnedBuffer, Scope, Stream};
use kernels::{cpu, Kernels};
use measure::{
    args::{parse_nonzero_bytes, parse_positive_u32, RunArgs},
    error::bad_args,
    report::{fmt_bytes, Figure, MemoryKind, Output, Table},
    timing::{measure, Repeats, Stats},
};

/// One small copy each way, and one read of mapped or device memory by a kernel.
#[derive(Parser)]
struct Args {
    /// Bytes each copy moves
    #[arg(long, default_value = "4", value_parser = parse_nonzero_bytes, allow_negative_numbers = true)]
    bytes: usize,
    /// Dependent reads of the longer launch (256 to 16384, the mapped chain's lines)
    #[arg(long, default_value = "4096", value_parser = parse_positive_u32, allow_negative_numbers = true)]
    accesses: u32,
    #[command(flatten)]
    run: RunArgs,
}

/// One copy: its time on the GPU and as the caller waits for it.
#[derive(serde::Serialize)]
struct CopyLatency {
    memory: &'static str,
    direction: &'static str,
    bytes: usize,
    gpu: Stats,
    host: Stats,
}

/// Reads by a kernel, one after another: launches of N and N/2 reads, and the time per read.
#[derive(serde::Serialize)]
struct ReadLatency {
    memory: &'static str,
    accesses: u32,
    launch: Stats,
    half_launch: Stats,
    ns_per_read: f64,
}

/// What `--json` writes.
#[derive(serde::Serialize)]
struct LatencyResults<'a> {
    device: &'a DeviceInfo,
    repeats: Repeats,
    copies: &'a [CopyLatency],
    reads: &'a [ReadLatency],
}

/// Chains with a link every 128 bytes: 2 MiB in mapped host memory, as nvbandwidth's, and 256 MiB in
/// device memory, several times the L2 cache.
const MAPPED_CHAIN: usize = (2 << 20) / 4;
const DEVICE_CHAIN: usize = (256 << 20) / 4;
const STRIDE: usize = 32;

fn main() -> ExitCode {
    measure::lesson::run(latency)
}

/// The flags checked; the rig (the GPU, refused at once where the copies would not fit); one small copy
/// each way, then one read at a time by a kernel; the tables and the JSON document.
fn latency(args: &Args, out: &Output) -> anyhow::Result<()> {
    check_accesses(args.accesses)?; // before the GPU starts
    let rig = LatencyRig::start(out, args)?;
    let copies = rig.copy_latencies(out)?; // one small copy each way, pinned and pageable
    let reads = rig.read_latencies(out)?; //  one read at a time by a kernel, mapped and device memory
    rig.print(&copies, &reads, out);
    let (device, repeats) = (&rig.gpu.info, rig.repeats);
    out.finish(&LatencyResults { device, repeats, copies: &copies, reads: &reads })
}

/// `--accesses`: from 256 (launch costs must not swamp reads) to the mapped chain's lines.
fn check_accesses(n: u32) -> anyhow::Result<()> {
    match (256..=(MAPPED_CHAIN / STRIDE) as u32).contains(&n) {
        true => Ok(()),
        false => Err(bad_args(format!(
            "--accesses: 256 (launch costs must not swamp reads) to {} (the mapped chain's lines)",
            MAPPED_CHAIN / STRIDE
        ))),
    }
}

/// What the lesson holds at its peak: the copies' buffers of `bytes` (pinned, pageable and on the
/// device), kept while the chains are made and followed: the mapped chain (pinned), the device chain
/// and the pageable one it is copied from, and the chase's end. `--accesses` is held to the mapped
/// chain's lines, and changes no size.
fn footprint(bytes: usize) -> Footprint {
    let copies = Footprint::default().pinned::<u8>(bytes).pageable::<u8>(bytes).device::<u8>(bytes);
    let chains =
        Footprint::default().pinned::<u32>(MAPPED_CHAIN).pageable::<u32>(DEVICE_CHAIN).device::<u32>(DEVICE_CHAIN + 1);
    copies.and(chains)
}

/// The GPU, the lessons' kernels, a stream, and the flags' sizes.
struct LatencyRig {
    gpu: Gpu,
    kernels: Kernels,
    streams: Vec<Stream>,
    bytes: usize,
    accesses: u32,
    repeats: Repeats,
}

/// The chain a kernel follows: in mapped host memory, or in device memory.
enum Chain {
    Mapped(PinnedBuffer<u32>),
    Device(DeviceBuffer<u32>),
}

impl Chain {
    fn memory(&self) -> &'static str {
        match self {
            Chain::Mapped(_) => "mapped host",
            Chain::Device(_) => "device",
        }
    }

    /// What it is in the figures' schema.
    fn kind(&self) -> MemoryKind {
        match self {
            Chain::Mapped(_) => MemoryKind::Mapped,
            Chain::Device(_) => MemoryKind::Device,
        }
    }

    fn links(&self) -> usize {
        match self {
            Chain::Mapped(b) => b.len(),
            Chain::Device(b) => b.len(),
        }
    }

    /// Lent to a scope, for the kernel to read.
    fn lend<'s>(&'s mut self, s: &'s Scope<'s, '_>) -> cuda_scope::Result<cuda_scope::Dev<'s, u32>> {
        match self {
            Chain::Mapped(b) => s.mapped(b), // cudaHostGetDevicePointer
            Chain::Device(b) => Ok(s.device(b)),
        }
    }
}

impl LatencyRig {
    /// Starts the GPU (its report printed), refuses at once sizes that do not fit it, and loads the
    /// kernels.
    fn start(out: &Output, args: &Args) -> anyhow::Result<LatencyRig> {
        let gpu = measure::lesson::gpu(out, &footprint(args.bytes))?; // before anything is allocated
        let kernels = Kernels::load(&gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
        let streams = gpu.streams(1)?;
        let (bytes, accesses, repeats) = (args.bytes, args.accesses, args.run.repeats());
        Ok(LatencyRig { gpu, kernels, streams, bytes, accesses, repeats })
    }

    /// One small copy each way, from pinned memory (cudaMallocHost) and pageable memory (malloc).
    fn copy_latencies(&self, out: &Output) -> anyhow::Result<Vec<CopyLatency>> {
        let len = self.bytes;
        let mut pinned = self.gpu.pinned_from_fn::<u8>(len, |i| i as u8)?;
        let mut pageable = cuda_scope::pageable::<u8>(len, |i| i as u8)?;
        let mut d_small = self.gpu.alloc::<u8>(len)?;
        let mut copies = Vec::new();
        let kinds =
            [("pinned", MemoryKind::Pinned, &mut pinned[..]), ("pageable", MemoryKind::Pageable, &mut pageable[..])];
        for (memory, kind, host) in kinds {
            for htod in [true, false] {
                let copy = self.copy_latency((memory, &mut *host), htod, &mut d_small)?;
                let name = format!("{memory} {} {}", copy.direction, fmt_bytes(len)); // for `cargo xtask compare`
                out.add(Figure::new(format!("{name} / gpu"), &copy.gpu).transfers(len).memory(kind));
                out.add(
                    Figure::new(format!("{name} / caller waits"), &copy.host).on_host().transfers(len).memory(kind),
                );
                copies.push(copy);
            }
        }
        Ok(copies)
    }

    /// One copy between `host` (of `memory`) and `device`, H2D or D2H: on the GPU (CUDA events around
    /// it) and as the caller waits (queue it, wait for it, on the host clock).
    fn copy_latency(
        &self,
        (memory, host): (&'static str, &mut [u8]),
        htod: bool,
        device: &mut DeviceBuffer<u8>,
    ) -> anyhow::Result<CopyLatency> {
        let (gpu, streams, r) = (&self.gpu, &self.streams, self.repeats);
        let gpu_time = measure(r, || gpu.timed(streams, |s| one_copy(s, htod, host, device)))?;
        let host_time = measure(r, || {
            let t = Instant::now();
            gpu.scope(streams, |s| one_copy(s, htod, host, device))?; // queue it, wait for it
            Ok(t.elapsed().as_secs_f64() * 1e3)
        })?;
        let direction = if htod { "H2D" } else { "D2H" };
        Ok(CopyLatency { memory, direction, bytes: self.bytes, gpu: gpu_time, host: host_time })
    }

    /// One read at a time by a kernel, in mapped host memory and in device memory.
    fn read_latencies(&self, out: &Output) -> anyhow::Result<Vec<ReadLatency>> {
        let mut mapped = self.gpu.pinned_with::<u32>(MAPPED_CHAIN, HostAlloc::MAPPED)?; // cudaHostAlloc(.., Mapped)
        mapped.iter_mut().enumerate().for_each(|(i, x)| *x = cpu::chain(i, MAPPED_CHAIN, STRIDE));
        let mut device = self.gpu.alloc::<u32>(DEVICE_CHAIN)?;
        let chain = cuda_scope::pageable(DEVICE_CHAIN, |i| cpu::chain(i, DEVICE_CHAIN, STRIDE))?;
        self.gpu.scope(&self.streams, |s| s.stream(0).htod(&chain, s.device(&mut device)))?;
        drop(chain);
        let mut d_end = self.gpu.alloc::<u32>(1)?;
        let mut chains = [Chain::Mapped(mapped), Chain::Device(device)];
        chains.iter_mut().map(|chain| self.read_latency(chain, &mut d_end, out)).collect()
    }

    /// Launches of N and N/2 reads along `chain`, each going on where the last ended, so that no line is
    /// read twice; where the last ended is checked against the CPU's chase.
    fn read_latency(
        &self,
        chain: &mut Chain,
        d_end: &mut DeviceBuffer<u32>,
        out: &Output,
    ) -> anyhow::Result<ReadLatency> {
        let (n, links, memory) = (self.accesses, chain.links(), chain.memory());
        let mut start = 0u32;
        let mut time = |accesses: u32| {
            measure(self.repeats, || {
                let from = start;
                start = cpu::chase(links, STRIDE, from, accesses);
                Ok(self.gpu.timed(&self.streams, |s| {
                    let next = chain.lend(s)?;
                    self.kernels.chase(s.stream(0), next, from, accesses, s.device(d_end))
                    // chase<<<1, 1>>>
                })?)
            })
        };
        let (launch, half_launch) = (time(n)?, time(n / 2)?);
        let mut end = [0u32];
        self.gpu.scope(&self.streams, |s| s.stream(0).dtoh(s.device(d_end), &mut end))?;
        if end[0] != start {
            anyhow::bail!("the chase in {memory} memory ended at link {}, the CPU's at {start}", end[0]);
        }
        let ns_per_read = (launch.median_ms - half_launch.median_ms) * 1e6 / (n - n / 2) as f64;
        let kind = chain.kind();
        out.add(Figure::new(format!("{memory} memory, chase of {n} reads / gpu"), &launch).memory(kind));
        out.add(Figure::new(format!("{memory} memory, chase of {} reads / gpu", n / 2), &half_launch).memory(kind));
        Ok(ReadLatency { memory, accesses: n, launch, half_launch, ns_per_read })
    }

    /// The copies' table and the reads' table, with what each column means.
    fn print(&self, copies: &[CopyLatency], reads: &[ReadLatency], out: &Output) {
        let (n, Repeats { warmup, repeats }) = (self.accesses, self.repeats);
        let bytes = fmt_bytes(self.bytes);
        out.say(format!("One copy of {bytes}, µs (median of up to {repeats} runs after {warmup} warm-up)"));
        let mut t = Table::new(&["memory", "way", "on the GPU", "spread", "caller waits", "spread"]);
        for c in copies {
            let us = |s: &Stats| format!("{:.2}", s.median_ms * 1e3);
            let cv = |s: &Stats| format!("{:.0}%", 100.0 * s.cv);
            t.row(vec![c.memory.into(), c.direction.into(), us(&c.gpu), cv(&c.gpu), us(&c.host), cv(&c.host)]);
        }
        out.table(&t);
        out.say(
            "on the GPU: CUDA events around the copy; caller waits: queue the copy and wait for it, on the host clock",
        );
        out.say(format!(
            "\nOne read by a kernel: launches of {n} and {} dependent reads, the difference per read",
            n / 2
        ));
        let mut t = Table::new(&["memory", "ns per read", &format!("launch of {n}"), "spread"]);
        for l in reads {
            let launch = format!("{:.1} µs", l.launch.median_ms * 1e3);
            t.row(vec![
                l.memory.into(),
                format!("{:.0}", l.ns_per_read),
                launch,
                format!("{:.1}%", 100.0 * l.launch.cv),
            ]);
        }
        out.table(&t);
        out.say(format!(
            "a read of host memory across the link costs {:.1}x one of device memory; every chase ended where the \
             CPU's did",
            reads[0].ns_per_read / reads[1].ns_per_read
        ));
    }
}

/// One small copy on the scope's stream: `cudaMemcpyAsync(d, h, n, H2D, stream)`, or the other way.
fn one_copy<'s>(
    s: &'s Scope<'s, '_>,
    htod: bool,
    host: &'s mut [u8],
    d: &'s mut DeviceBuffer<u8>,
) -> anyhow::Result<()> {
    match htod {
        true => Ok(s.stream(0).htod(host, s.device(d))?),
        false => Ok(s.stream(0).dtoh(s.device(d), host)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// The default copies of 4 bytes: the chains dominate, 2 MiB pinned and 256 MiB each on the device
    /// and in pageable memory.
    #[test]
    fn the_default_flags_need_the_chains_and_a_few_bytes() {
        let need = footprint(4);
        assert_eq!((need.pinned, need.pageable, need.device), (2 * MIB + 4, 256 * MIB + 4, 256 * MIB + 8));
        let big = footprint(1 << 40);
        assert!(big.device > 1 << 40 && big.pinned > 1 << 40 && big.pageable > 1 << 40, "{big:?}");
        let huge = footprint(usize::MAX);
        assert_eq!((huge.device, huge.pinned, huge.pageable), (usize::MAX, usize::MAX, usize::MAX), "saturates");
    }

    #[test]
    fn accesses_are_held_to_the_mapped_chain_and_copies_move_a_byte_at_least() {
        assert!(check_accesses(256).is_ok() && check_accesses(16384).is_ok());
        let e = check_accesses(16385).unwrap_err();
        assert_eq!(measure::error::ErrorKind::of(&e), measure::error::ErrorKind::BadArguments);
        assert!(e.to_string().ends_with("to 16384 (the mapped chain's lines)"), "{e}");
        assert!(check_accesses(255).is_err());
        assert!(Args::try_parse_from(["latency", "--bytes", "0"]).is_err());
    }
}
