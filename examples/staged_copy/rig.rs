//! staged_copy's rig: the setup from the flags and what it needs of the machine, checked before
//! anything is allocated; the data at the largest size in every kind of memory and the staging ring;
//! every method timed each way at each size; the staged round trip checked; the tables, what stops
//! staging, and the JSON.

use serde::Serialize;

use cuda_scope::{Destination, DeviceBuffer, DeviceInfo, Footprint, Gpu, PinnedBuffer, Stager, Stream};
use measure::{
    report::{fmt_bytes, Figure, MemoryKind, Output, Table},
    timeline::phase,
    timing::{host_ms, measure, Repeats, Stats},
    verify::{self, input, Check},
};

/// The methods, in the order of each size's times.
const METHODS: [&str; 5] = ["pageable", "pinned", "pinned in place", "staged", "staging's CPU side alone"];
/// The methods as their figures are named: what the staged ones copy from said.
const FIGURES: [&str; 5] =
    ["pageable", "pinned", "pinned in place", "staged from pageable", "staging's CPU side, pageable"];
/// The host memory each of them copies from or into, for the figures' schema.
const MEMORY: [MemoryKind; 5] =
    [MemoryKind::Pageable, MemoryKind::Pinned, MemoryKind::Registered, MemoryKind::Pageable, MemoryKind::Pageable];
/// Where the driver's pageable path, pinned copies, staging and staging's CPU side alone stand in them.
const PAGEABLE: usize = 0;
const PINNED: usize = 1;
const STAGED: usize = 3;
const CPU_SIDE: usize = 4;

/// What the lesson runs, from its flags: checked before the GPU starts.
pub struct StagedSetup {
    /// The sizes, in bytes, from `--min` to `--max`.
    pub sizes: Vec<usize>,
    /// CPU threads that copy into and out of the staging ring.
    pub threads: usize,
    /// Bytes of each pinned staging slot (two per thread).
    pub slot: usize,
    pub repeats: Repeats,
}

impl StagedSetup {
    /// The elements of the largest size.
    fn elements(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(0) / 4
    }

    /// What the lesson holds at once, for the largest size (`--max`): the data on the device; a `Vec`
    /// of it and a `Vec` it lands in (pageable); and pinned, a copy of it and the staging ring, two
    /// slots of `--slot` for each of `--threads`. Pinning a `Vec` in place takes no memory of its own.
    pub fn footprint(&self) -> Footprint {
        let (n, slot) = (self.elements(), (self.slot / 4).max(1));
        let ring = slot.saturating_mul(2).saturating_mul(self.threads);
        Footprint::default().device::<f32>(n).pageable::<f32>(n.saturating_mul(2)).pinned::<f32>(n.saturating_add(ring))
    }
}

/// One size's times on the host clock, each method in [`METHODS`]' order, each way.
pub struct SizeTimes {
    bytes: usize,
    htod: [Stats; 5],
    dtoh: [Stats; 5],
}

/// A size's rates in GB/s, each method in [`METHODS`]' order, for the JSON.
#[derive(Serialize)]
struct SizeRates {
    bytes: usize,
    htod_gbps: Vec<f64>,
    dtoh_gbps: Vec<f64>,
}

/// What staged_copy writes with `--json`.
#[derive(Serialize)]
struct StagedResults<'a> {
    device: &'a DeviceInfo,
    threads: usize,
    slot_bytes: usize,
    repeats: Repeats,
    methods: [&'a str; 5],
    rows: Vec<SizeRates>,
    verification: &'a Check,
}

/// The GPU, the setup, the data at the largest size in every kind of memory, and the staging ring.
pub struct StagedRig {
    gpu: Gpu,
    setup: StagedSetup,
    d_data: DeviceBuffer<f32>,
    /// The data in an ordinary `Vec`, moved to the device.
    pageable: Vec<f32>,
    /// An ordinary `Vec` the data lands in, from the device.
    landing: Vec<f32>,
    pinned: PinnedBuffer<f32>,
    stager: Stager<f32>,
    streams: Vec<Stream>,
}

/// `f` timed on the host clock, from the call to its return, over `r`'s runs.
fn on_host(r: Repeats, f: &mut dyn FnMut() -> anyhow::Result<()>) -> anyhow::Result<Stats> {
    measure(r, || {
        let (done, ms) = host_ms(&mut *f);
        done.map(|()| ms)
    })
}

impl StagedRig {
    /// Starts the GPU that `CUDA_DEVICE` names (its report printed), refuses at once a setup whose
    /// memory does not fit it or the host, then allocates it all.
    pub fn start(out: &Output, setup: StagedSetup) -> anyhow::Result<StagedRig> {
        let gpu = measure::lesson::gpu(out, &setup.footprint())?;
        let n = setup.elements();
        let d_data = gpu.alloc::<f32>(n)?;
        let pageable = cuda_scope::pageable(n, input)?;
        let landing = cuda_scope::pageable(n, |_| 0f32)?;
        let pinned = gpu.pinned_from_fn(n, input)?;
        let stager = gpu.stager::<f32>(setup.threads, setup.slot)?;
        let streams = gpu.streams(1)?;
        Ok(StagedRig { gpu, setup, d_data, pageable, landing, pinned, stager, streams })
    }

    /// Every size H2D then D2H, every method, in a timeline phase each; each a figure, named for `cargo
    /// xtask compare` on the host clock: `staged from pageable H2D 64 MiB`.
    pub fn sweep(&mut self, out: &Output) -> anyhow::Result<Vec<SizeTimes>> {
        let mut rows = Vec::new();
        for bytes in self.setup.sizes.clone() {
            out.progress(fmt_bytes(bytes));
            let htod = {
                let _p = phase(&format!("H2D {}", fmt_bytes(bytes)));
                self.htod(bytes / 4)?
            };
            let _p = phase(&format!("D2H {}", fmt_bytes(bytes)));
            let dtoh = self.dtoh(bytes / 4)?;
            for (dir, times) in [("H2D", &htod), ("D2H", &dtoh)] {
                for ((method, memory), stats) in FIGURES.iter().zip(MEMORY).zip(times) {
                    out.add(Figure::sized(format!("{method} {dir}"), bytes, stats).on_host().memory(memory));
                }
            }
            rows.push(SizeTimes { bytes, htod, dtoh });
        }
        Ok(rows)
    }

    /// `len` elements to the device, each method ([`METHODS`]) timed on the host clock.
    fn htod(&mut self, len: usize) -> anyhow::Result<[Stats; 5]> {
        let StagedRig { gpu, setup, d_data, pageable, pinned, stager, streams, .. } = self;
        let (gpu, r) = (&*gpu, setup.repeats);
        Ok([
            on_host(r, &mut || {
                Ok(gpu.scope(streams, |s| s.stream(0).htod(&pageable[..len], s.device(d_data).slice(0..len)))?)
            })?,
            on_host(r, &mut || {
                Ok(gpu.scope(streams, |s| s.stream(0).htod(&pinned[..len], s.device(d_data).slice(0..len)))?)
            })?,
            on_host(r, &mut || {
                // cudaHostRegister, the copy, cudaHostUnregister
                Ok(gpu.pin_in_place(&mut pageable[..len], |locked| {
                    gpu.scope(streams, |s| s.stream(0).htod(locked, s.device(d_data).slice(0..len)))
                })??)
            })?,
            on_host(r, &mut || Ok(stager.upload(&pageable[..len], d_data)?))?,
            on_host(r, &mut || Ok(stager.host_side_only(&mut pageable[..len], Destination::Device)?))?,
        ])
    }

    /// `len` elements from the device, each method ([`METHODS`]) timed on the host clock.
    fn dtoh(&mut self, len: usize) -> anyhow::Result<[Stats; 5]> {
        let StagedRig { gpu, setup, d_data, landing, pinned, stager, streams, .. } = self;
        let (gpu, r) = (&*gpu, setup.repeats);
        Ok([
            on_host(r, &mut || {
                Ok(gpu.scope(streams, |s| s.stream(0).dtoh(s.device(d_data).slice(0..len), &mut landing[..len]))?)
            })?,
            on_host(r, &mut || {
                Ok(gpu.scope(streams, |s| s.stream(0).dtoh(s.device(d_data).slice(0..len), &mut pinned[..len]))?)
            })?,
            on_host(r, &mut || {
                Ok(gpu.pin_in_place(&mut landing[..len], |locked| {
                    gpu.scope(streams, |s| s.stream(0).dtoh(s.device(d_data).slice(0..len), locked))
                })??)
            })?,
            on_host(r, &mut || Ok(stager.download(d_data, &mut landing[..len])?))?,
            on_host(r, &mut || Ok(stager.host_side_only(&mut landing[..len], Destination::Host)?))?,
        ])
    }

    /// The whole `Vec` up through the stager and down through it into the landing `Vec`, checked.
    pub fn round_trip(&mut self) -> anyhow::Result<Check> {
        self.landing.fill(0.0);
        self.stager.upload(&self.pageable, &mut self.d_data)?;
        self.stager.download(&self.d_data, &mut self.landing)?;
        Ok(verify::exact(&self.landing, input))
    }

    /// A table each way: every method's GB/s at each size, and staging against pinned and pageable.
    pub fn tables(&self, out: &Output, rows: &[SizeTimes]) {
        for (dir, htod) in [("H2D", true), ("D2H", false)] {
            out.say(format!(
                "\n{dir}, GB/s on the host clock (median of up to {} runs), staging with {} threads and {} slots",
                self.setup.repeats.repeats,
                self.setup.threads,
                fmt_bytes(self.setup.slot)
            ));
            let mut headers: Vec<&str> = vec!["size"];
            headers.extend(METHODS);
            headers.extend(["staged/pinned", "staged/pageable"]);
            let mut t = Table::new(&headers);
            for row in rows {
                let m = if htod { &row.htod } else { &row.dtoh };
                let rate = |k: usize| m[k].gbps(row.bytes);
                let mut cells = vec![fmt_bytes(row.bytes)];
                cells.extend((0..METHODS.len()).map(|k| format!("{:.2}", rate(k))));
                cells.push(format!("{:.0}%", 100.0 * rate(STAGED) / rate(PINNED)));
                cells.push(format!("{:.1}x", rate(STAGED) / rate(PAGEABLE)));
                t.row(cells);
            }
            out.table(&t);
        }
    }

    /// What stops staging at the largest size, each way: the link (near the pinned rate), the CPU copy
    /// (near its CPU side alone, which staging cannot beat), or neither.
    pub fn what_stops_staging(&self, out: &Output, rows: &[SizeTimes]) {
        let Some(SizeTimes { bytes, htod, dtoh }) = rows.last() else { return };
        for (dir, m) in [("H2D", htod), ("D2H", dtoh)] {
            let rate = |k: usize| m[k].gbps(*bytes);
            let (staged, cpu_side) = (rate(STAGED), rate(CPU_SIDE));
            let limit = if staged >= 0.85 * rate(PINNED) {
                "near the pinned rate: the link is what stops it".to_string()
            } else if staged >= 0.8 * cpu_side {
                format!("near the {cpu_side:.1} GB/s its CPU side reaches alone: the CPU copy stops it")
            } else {
                format!(
                    "below both the link and the {cpu_side:.1} GB/s its CPU side reaches alone: the two sides in \
                     turn, start-up and hand-over costs"
                )
            };
            out.say(format!(
                "staged {dir} at {}: {staged:.1} GB/s, {:.0}% of pinned, {:.1}x the driver's pageable path; {limit}",
                fmt_bytes(*bytes),
                100.0 * staged / rate(PINNED),
                staged / rate(PAGEABLE)
            ));
        }
    }

    /// Writes the JSON: the device, the setup, every size's rates each way, and the check.
    pub fn finish(&self, out: &Output, rows: &[SizeTimes], check: &Check) -> anyhow::Result<()> {
        let rates = |bytes: usize, m: &[Stats; 5]| m.iter().map(|s| s.gbps(bytes)).collect::<Vec<_>>();
        let rows = rows
            .iter()
            .map(|r| SizeRates {
                bytes: r.bytes,
                htod_gbps: rates(r.bytes, &r.htod),
                dtoh_gbps: rates(r.bytes, &r.dtoh),
            })
            .collect();
        out.finish(&StagedResults {
            device: &self.gpu.info,
            threads: self.setup.threads,
            slot_bytes: self.setup.slot,
            repeats: self.setup.repeats,
            methods: METHODS,
            rows,
            verification: check,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn setup(max: usize, threads: usize, slot: usize) -> StagedSetup {
        StagedSetup { sizes: vec![MIB, max], threads, slot, repeats: Repeats { warmup: 1, repeats: 3 } }
    }

    #[test]
    fn the_footprint_counts_the_largest_size_and_the_ring() {
        // The defaults on 8 cores: 128 MiB, 8 threads, slots of 8 MiB.
        let need = setup(128 * MIB, 8, 8 * MIB).footprint();
        assert_eq!((need.device, need.pageable, need.pinned), (128 * MIB, 256 * MIB, 128 * MIB + 128 * MIB));
        // The ring grows with the threads and the slots.
        assert_eq!(setup(128 * MIB, 2, 64 * MIB).footprint().pinned, 128 * MIB + 256 * MIB);
        // Sizes or slots past any machine stay past it: they saturate rather than wrap.
        let huge = setup(usize::MAX, 8, 8 * MIB).footprint();
        assert_eq!((huge.device, huge.pageable, huge.pinned), (usize::MAX - 3, usize::MAX, usize::MAX));
        assert_eq!(setup(128 * MIB, 64, usize::MAX - 3).footprint().pinned, usize::MAX);
    }
}
