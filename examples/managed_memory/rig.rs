//! managed_memory's rig: the three ways over the sizes. It owns the GPU, the lessons' kernels, the
//! chunkings (one a size), the kernel's work and the repeats; refuses at once flags whose memory does not
//! fit, managed memory included ([`footprint`]); runs each way's round at every size, checked against the
//! CPU and timed in parts; names the figures; prints a table a size, with what the page faults cost;
//! and writes the JSON ([`ManagedResults`]).

use cuda_scope::{DeviceInfo, DeviceRoom, Footprint, Gpu};
use kernels::Kernels;
use measure::{
    report::{fmt_bytes, fmt_ms, Figure, MemoryKind, Output, Table},
    timeline::phase,
    timing::{gbps, measure_parts, Repeats, Stats},
    verify::Check,
    work::Work,
    Chunking,
};
use serde::Serialize;

use crate::{Args, DataMovement, LessonMemory};

/// One way's times at one size: the whole run as the host waits for it, and its three steps.
#[derive(Debug, Serialize)]
struct Times {
    wall: Stats,
    host_fill: Stats,
    /// CUDA events around the scope's work (on demand's without the results' way back)
    gpu: Stats,
    host_read: Stats,
}

/// One size: its chunking, each way's times, and what the page faults cost.
#[derive(Serialize)]
struct Row {
    bytes: usize,
    /// Named `plan` in JSON: the setting `cargo xtask compare` matches runs on.
    #[serde(rename = "plan")]
    chunking: Chunking,
    on_demand: Times,
    prefetched: Times,
    explicit: Times,
    /// Derived: on demand's median wall time less prefetched's, per MiB of the array
    fault_cost_us_per_mib: f64,
    verification: Vec<Check>,
}

/// What managed_memory writes with `--json`.
#[derive(Serialize)]
struct ManagedResults<'a> {
    device: &'a DeviceInfo,
    work: Work,
    repeats: Repeats,
    room: DeviceRoom,
    rows: Vec<Row>,
}

/// What the lesson holds at once, at most, for its largest `chunking`: first the calibration of the kernel
/// (a chunk pinned and on the device, each way); then the managed array (which may all come to rest on
/// the device) and a device buffer of a chunk per stream, the input and output pinned, and the pageable
/// array the host reads each result into.
pub fn footprint(chunking: &Chunking) -> Footprint {
    let (n, chunk) = (chunking.elements, chunking.max_chunk());
    let calibration = Footprint::default().pinned::<f32>(2 * chunk).device::<f32>(2 * chunk);
    let buffers = Footprint::default().device::<f32>(chunking.streams.saturating_mul(chunk));
    let arrays = Footprint::default().device::<f32>(n).pinned::<f32>(n).pinned::<f32>(n).pageable::<f32>(n);
    calibration.max(arrays.and(buffers))
}

/// The GPU, the lessons' kernels, a chunking for each size, the kernel's work, the repeats, and the device's
/// room as the lesson found it.
pub struct ManagedRig {
    pub gpu: Gpu,
    pub kernels: Kernels,
    pub work: Work,
    chunkings: Vec<Chunking>,
    repeats: Repeats,
    room: DeviceRoom,
}

impl ManagedRig {
    /// Checks the sizes against the chunks and streams, starts the GPU that `CUDA_DEVICE` names (its
    /// report printed), refuses at once flags whose memory does not fit it (less a margin for others:
    /// managed memory is granted beyond free memory, where its pages would evict each other) or the host,
    /// loads the lessons' kernels, and calibrates the kernel where the flags leave it to be.
    pub fn start(out: &Output, args: &Args) -> anyhow::Result<ManagedRig> {
        let sizes = args.sizes.sizes(16 << 20, 64 << 20)?.into_iter();
        let chunkings =
            sizes.map(|b| Chunking::new(b / 4, args.chunks, args.streams)).collect::<anyhow::Result<Vec<_>>>()?;
        let repeats = args.run.repeats();
        let gpu = measure::lesson::gpu(out, &footprint(&chunkings[chunkings.len() - 1]))?;
        let room = gpu.room()?; //                                        cudaMemGetInfo(&free, &total)
        let kernels = Kernels::load(&gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
        let chunk = chunkings[chunkings.len() - 1].max_chunk();
        let work = measure::pipeline::in_place(&gpu, &kernels, args.work.kernel(), chunk, repeats)?;
        Ok(ManagedRig { gpu, kernels, work, chunkings, repeats, room })
    }

    /// Each way at every size, checked, timed and named; then the tables, and the JSON.
    pub fn three_ways(&self, out: &Output) -> anyhow::Result<()> {
        let largest = &self.chunkings[self.chunkings.len() - 1];
        let mut memory = LessonMemory::new(&self.gpu, largest)?;
        let (chunks, streams) = (largest.chunks, largest.streams);
        out.say(format!("{chunks} chunks on {streams} streams at every size; {}", self.work.describe()));
        let mut rows = Vec::new();
        for (i, chunking) in self.chunkings.iter().enumerate() {
            // The first size's runs have warmed the GPU, the pages and the caches: one warm-up after it.
            let r = if i == 0 { self.repeats } else { Repeats { warmup: self.repeats.warmup.min(1), ..self.repeats } };
            rows.push(self.one_size(out, &mut memory, chunking, r)?);
        }
        self.tables(out, &rows);
        let (device, work, repeats, room) = (&self.gpu.info, self.work, self.repeats, self.room);
        out.finish(&ManagedResults { device, work, repeats, room, rows })
    }

    /// The three ways on `chunking`, each checked against the CPU and timed over `r`'s runs, and named.
    fn one_size(
        &self,
        out: &Output,
        memory: &mut LessonMemory,
        chunking: &Chunking,
        r: Repeats,
    ) -> anyhow::Result<Row> {
        let (n, bytes) = (chunking.elements, chunking.elements * 4);
        let (mut times, mut verification) = (Vec::new(), Vec::new());
        for how in DataMovement::ALL {
            out.progress(format!("{}, {}", how.name(), fmt_bytes(bytes)));
            let _p = phase(&format!("{} {}", how.name(), fmt_bytes(bytes)));
            memory.result.fill(f32::NAN);
            let [wall, host_fill, gpu, host_read] = measure_parts(r, || memory.round(self, how, chunking))?;
            let check = self.work.check(&memory.result[..n], chunking);
            check.ensure().map_err(|e| e.context(format!("{} at {}", how.name(), fmt_bytes(bytes))))?;
            verification.push(check);
            let t = Times { wall, host_fill, gpu, host_read };
            figures(out, how, chunking, &t);
            times.push(t);
        }
        let [on_demand, prefetched, explicit]: [Times; 3] = times.try_into().expect("three ways");
        let fault_cost_us_per_mib =
            (on_demand.wall.median_ms - prefetched.wall.median_ms) * 1e3 / (bytes as f64 / (1 << 20) as f64);
        Ok(Row { bytes, chunking: *chunking, on_demand, prefetched, explicit, fault_cost_us_per_mib, verification })
    }

    /// A table a size: each way's steps, wall time, rate and wall time against explicit copies; then what
    /// the page faults cost.
    fn tables(&self, out: &Output, rows: &[Row]) {
        out.say(format!(
            "\nmedians of up to {} runs after {} warm-up. wall: the host's fill, the scope and the host's read, on the \
             host's clock; GPU: CUDA events around the scope's work (on demand's leaves out the results' way back: \
             their pages move when the host reads them); GB/s: the array's bytes over the wall time",
            self.repeats.repeats, self.repeats.warmup
        ));
        for row in rows {
            out.say(format!(
                "\n{} in {} chunks on {} streams",
                fmt_bytes(row.bytes),
                row.chunking.chunks,
                row.chunking.streams
            ));
            let mut t = Table::new(&["way", "host fill", "GPU", "host read", "wall", "GB/s", "wall vs explicit"]);
            for (how, w) in DataMovement::ALL.iter().zip([&row.on_demand, &row.prefetched, &row.explicit]) {
                t.row(vec![
                    how.name().to_string(),
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
                "page faults, derived: on demand's wall less prefetched's = {} for the same bytes moved, {:.1} µs per \
                 MiB\neach way {}",
                fmt_ms(row.on_demand.wall.median_ms - row.prefetched.wall.median_ms),
                row.fault_cost_us_per_mib,
                row.verification[0].summary()
            ));
        }
    }
}

/// Names one way's figures at one size (`16 MiB / on demand / wall`) for `cargo xtask compare`, those
/// of managed memory marked as moved page by page on the CPU's side (the driver migrates its pages
/// there, on faults or prefetches); the explicit copies' are from pinned memory.
fn figures(out: &Output, how: DataMovement, chunking: &Chunking, t: &Times) {
    let (bytes, chunk) = (fmt_bytes(chunking.elements * 4), chunking.max_chunk() * 4);
    let figure = |what: &str, s: &Stats| {
        let f = Figure::new(format!("{bytes} / {} / {what}", how.name()), s);
        if matches!(how, DataMovement::ExplicitCopies) {
            f
        } else {
            f.memory(MemoryKind::Managed)
        }
    };
    out.add(figure("wall", &t.wall).on_host().transfers(chunk));
    out.add(figure("host fill", &t.host_fill).on_host());
    out.add(figure("gpu", &t.gpu).transfers(chunk));
    out.add(figure("host read", &t.host_read).on_host());
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_default_flags_need_80_mib_of_device_memory_and_128_pinned() {
        // --max 64MiB, 16 chunks of 4 MiB on 4 streams: the managed array and four chunks on the device.
        let need = footprint(&Chunking::new(16 * MIB, 16, 4).unwrap());
        assert_eq!(need, Footprint { device: 80 * MIB, pinned: 128 * MIB, pageable: 64 * MIB });
        // One chunk: the calibration's two chunks rule the pinned memory and the device's.
        let one = footprint(&Chunking::new(MIB, 1, 1).unwrap());
        assert_eq!(one, Footprint { device: 8 * MIB, pinned: 8 * MIB, pageable: 4 * MIB });
        // As many streams as chunks: a device buffer per chunk, the array twice over on the device.
        let all = footprint(&Chunking::new(16 * MIB, 16, 16).unwrap());
        assert_eq!(all.device, 128 * MIB);
    }

    #[test]
    fn a_huge_max_saturates_past_any_machine() {
        let need = footprint(&Chunking::new(usize::MAX / 4, 16, 4).unwrap());
        assert_eq!((need.device, need.pinned), (usize::MAX, usize::MAX));
        let big = footprint(&Chunking::new(64 << 30, 16, 4).unwrap()); // --max 256GiB: 320 GiB on the device
        assert!(big.device > 141_000_000_000, "{big:?}");
    }
}
