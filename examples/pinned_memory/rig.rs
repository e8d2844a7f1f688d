//! pinned_memory's rig: the exercise after the program. It owns the GPU, what the machine says of its
//! link, the sweep's sizes and the flags; refuses at once a `--max` whose buffers do not fit
//! ([`footprint`]); times four kinds of host memory both ways at every size and fits each kind and
//! direction as t = α + n/β, saying what limits it; times allocating and pinning; reads write-combined
//! memory back on the CPU; checks a round trip through each kind; and writes the JSON
//! ([`PinnedResults`]).

use cuda_scope::{DeviceBuffer, DeviceInfo, Footprint, Gpu, HostAlloc, PinnedBuffer, Registered, Stream};
use measure::{
    fit::{fit_table, unseen_notes, DirectionTimes, KindFit, Sweep},
    machine::{numa_node_of, Health},
    report::{fmt_bytes, fmt_ms, verdict, MemoryKind, Output, Table},
    timeline::phase,
    timing::{gbps, host_ms, measure, Repeats},
    verify::{self, input, Check},
};
use serde::Serialize;

use crate::Args;

/// The kinds of host memory, in the order of the tables, and what each is in the figures' schema.
const KINDS: [&str; 4] = ["pageable", "pinned", "write-combined", "pinned in place"];
const MEMORY: [MemoryKind; 4] =
    [MemoryKind::Pageable, MemoryKind::Pinned, MemoryKind::WriteCombined, MemoryKind::Registered];

/// A known change, planted for `cargo xtask compare --interleave` to find (issue 47): with
/// `PINNED_MEMORY_PLANT=P` (a percent, 1 to 50), every timed copy of pinned memory (`cudaMallocHost`) of
/// 4 MiB or more, both ways, moves P% more bytes under the same name. The lesson says so, and its JSON
/// names the figures it touches (`planted`).
pub const PLANT: &str = "PINNED_MEMORY_PLANT";
/// The smallest copy the plant touches: from it on a copy's time is its bytes' (a 4 MiB copy spends
/// 5 of its 80 µs on its per-copy cost on the H200), so P% more bytes take nearly P% longer.
const PLANTED_FROM: usize = 4 << 20;

/// The planted change, as the JSON says it.
#[derive(Clone, Debug, Serialize)]
struct Planted {
    percent: usize,
    figures: Vec<String>,
}

/// The percent `PINNED_MEMORY_PLANT` asks for, if set.
fn planted_percent() -> anyhow::Result<Option<usize>> {
    let Ok(v) = std::env::var(PLANT) else { return Ok(None) };
    match v.trim().parse::<usize>() {
        Ok(p) if (1..=50).contains(&p) => Ok(Some(p)),
        _ => anyhow::bail!("{PLANT}={v}: a percent from 1 to 50"),
    }
}

/// The elements a copy of kind `kind` (an index of [`KINDS`]) of `bytes` moves: `bytes / 4`, or with a
/// plant of `percent` on pinned memory of [`PLANTED_FROM`] or more, that much more.
fn moved(kind: usize, bytes: usize, percent: Option<usize>) -> usize {
    match percent {
        Some(p) if kind == 1 && bytes >= PLANTED_FROM => bytes / 4 + bytes / 4 * p / 100,
        _ => bytes / 4,
    }
}

/// What pinned_memory.cu measured: 256 MiB up from `malloc`'d memory and from pinned memory.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Original {
    pub pageable_htod_ms: f64,
    pub pinned_htod_ms: f64,
}

/// What it costs to get and give back host memory of one size, ms on the host clock: `malloc` with a
/// touch of every page, `cudaMallocHost`, write-combined, `cudaHostRegister`, unregister, `cudaFreeHost`.
#[derive(Serialize)]
struct AllocCosts {
    bytes: usize,
    ms: [f64; 6],
}

/// How fast the CPU reads pinned and write-combined memory back, GB/s.
#[derive(Serialize)]
struct CpuRead {
    pinned: f64,
    write_combined: f64,
}

/// What pinned_memory writes with `--json`.
#[derive(Serialize)]
struct PinnedResults<'a> {
    device: &'a DeviceInfo,
    repeats: Repeats,
    kinds: [&'static str; 4],
    sizes: &'a [usize],
    copies: Vec<Vec<DirectionTimes>>,
    fits: Vec<KindFit>,
    host_copy_gbps: f64,
    health: &'a Health,
    alloc: Vec<AllocCosts>,
    cpu_read_gbps: CpuRead,
    verification: Vec<Check>,
    original: Original,
    #[serde(skip_serializing_if = "Option::is_none")]
    planted: Option<Planted>,
}

/// What the lesson holds at once, at most, for sizes up to `max` bytes: first the program's 256 MiB,
/// pageable, pinned and on the device; then the four kinds of host memory of `max` (pageable, and three
/// pinned: cudaMallocHost'd, write-combined and pinned in place) and a device buffer of `max`, and
/// beside them the allocation table's buffers of up to 64 MiB (a `Vec` pinned in place and two pinned).
pub fn footprint(max: usize) -> Footprint {
    let program = Footprint::default().pageable::<f32>(1 << 26).pinned::<f32>(1 << 26).device::<f32>(1 << 26);
    let n = max / 4;
    let kinds = Footprint::default().pageable::<f32>(n).pinned::<f32>(3 * n).device::<f32>(n);
    let allocating = Footprint::default().pinned::<f32>(3 * n.min(16 << 20));
    program.max(kinds.and(allocating))
}

/// The GPU, what the machine says of its link, the sweep's sizes, and the flags.
pub struct PinnedRig<'a> {
    pub gpu: Gpu,
    health: Health,
    sizes: Vec<usize>,
    args: &'a Args,
    /// The percent of a planted change ([`PLANT`]), if any.
    plant: Option<usize>,
}

impl<'a> PinnedRig<'a> {
    /// Checks the sizes, starts the GPU that `CUDA_DEVICE` names (its report printed), and refuses at
    /// once sizes whose buffers do not fit it or the host.
    pub fn start(out: &Output, args: &'a Args) -> anyhow::Result<PinnedRig<'a>> {
        let sizes = args.sizes.sizes(4 << 10, 64 << 20)?;
        let plant = planted_percent()?;
        let room = 4 * moved(1, sizes[sizes.len() - 1], plant);
        let (gpu, health) = measure::lesson::gpu_and_health(out, &footprint(room))?;
        Ok(PinnedRig { gpu, health, sizes, args, plant })
    }

    fn repeats(&self) -> Repeats {
        self.args.run.repeats()
    }

    /// The exercise: both directions, four kinds of host memory, over the sizes; then what allocating
    /// costs, the CPU reading write-combined memory, a round trip through each kind, and the figures
    /// held against the references the flags give. `original`: what the program measured.
    pub fn sweep(&self, out: &Output, original: Original) -> anyhow::Result<()> {
        let planted = self.planted(out);
        let n = moved(1, self.sizes[self.sizes.len() - 1], self.plant);
        let mut end = DeviceEnd { gpu: &self.gpu, data: self.gpu.alloc::<f32>(n)?, streams: self.gpu.streams(1)? };
        let mut kinds = HostKinds::new(&self.gpu, n)?;
        let copies = self.time_copies(out, &mut kinds, &mut end)?;
        let probe = n.min(16 << 20);
        let host_copy_gbps = kinds.host_copy_gbps(probe);
        let link_gbps = self.health.link_gbps(&self.gpu);
        let sweep = Sweep { sizes: &self.sizes, kinds: &KINDS, times: &copies, link_gbps, host_copy_gbps };
        let fits = sweep.fits()?;
        let named: Vec<(&str, MemoryKind)> = KINDS.into_iter().zip(MEMORY).collect();
        out.sweep(&self.sizes, &named, &copies); // names every copy (`pinned H2D 4 KiB`) for `cargo xtask compare`
        self.rates(out, &sweep, &fits, &kinds.pinned);
        let alloc = self.alloc_costs(out)?;
        let cpu_read_gbps = kinds.cpu_read(out, probe);
        let verification = KINDS.iter().zip(kinds.each()).map(|(name, host)| end.round_trip(out, name, host));
        let verification = verification.collect::<anyhow::Result<Vec<Check>>>()?;
        let passed = self.against_references(out, &copies);
        out.rate_chart(self.args.svg.as_deref(), link_gbps)?;
        let (device, repeats, sizes, health) = (&self.gpu.info, self.repeats(), &self.sizes[..], &self.health);
        out.finish(&PinnedResults {
            device,
            repeats,
            kinds: KINDS,
            sizes,
            copies,
            fits,
            host_copy_gbps,
            health,
            alloc,
            cpu_read_gbps,
            verification,
            original,
            planted,
        })?;
        anyhow::ensure!(passed, "pinned copies fell short of the reference");
        Ok(())
    }

    /// The planted change ([`PLANT`]), said: its percent and the figures it touches.
    fn planted(&self, out: &Output) -> Option<Planted> {
        let percent = self.plant?;
        let big = self.sizes.iter().filter(|b| **b >= PLANTED_FROM);
        let figures: Vec<String> =
            big.flat_map(|b| ["H2D", "D2H"].map(|dir| format!("pinned {dir} {}", fmt_bytes(*b)))).collect();
        let from = fmt_bytes(PLANTED_FROM);
        let n = figures.len();
        out.say(format!(
            "planted ({PLANT}={percent}): pinned copies of {from} or more move {percent}% more bytes under the \
             same names ({n} figures)"
        ));
        Some(Planted { percent, figures })
    }

    /// Each copy timed alone with CUDA events on the stream: for each size, each kind both ways.
    fn time_copies(
        &self,
        out: &Output,
        kinds: &mut HostKinds,
        end: &mut DeviceEnd,
    ) -> anyhow::Result<Vec<Vec<DirectionTimes>>> {
        let mut results = Vec::new();
        for &bytes in &self.sizes {
            out.progress(format!("{} ...", fmt_bytes(bytes)));
            let mut row = Vec::new();
            for (kind, (name, host)) in KINDS.iter().zip(kinds.each()).enumerate() {
                let _p = phase(&format!("{name} {}", fmt_bytes(bytes)));
                row.push(end.both_directions(&mut host[..moved(kind, bytes, self.plant)], self.repeats())?);
            }
            results.push(row);
        }
        Ok(results)
    }

    /// Each direction's rates, each kind and direction as t = α + n/β, and what holds pinned copies back.
    fn rates(&self, out: &Output, sweep: &Sweep, fits: &[KindFit], pinned: &[f32]) {
        for (d, dir) in ["H2D", "D2H"].into_iter().enumerate() {
            let (r, w) = (self.args.run.repeats, self.args.run.warmup);
            out.say(format!("\n{dir}, GB/s (median of up to {r} runs after {w} warm-up, CUDA events)"));
            out.table(&sweep.rate_table(d, fits, 1));
        }
        let (lo, hi) = (fmt_bytes(self.sizes[0]), fmt_bytes(self.sizes[self.sizes.len() - 1]));
        let one_thread = sweep.host_copy_gbps;
        out.say(format!(
            "\nEach kind as t = α + n/β over {lo} to {hi} (fitted; one thread copies at {one_thread:.1} GB/s)"
        ));
        out.table(&fit_table(fits));
        unseen_notes(fits).iter().for_each(|n| out.say(n));
        let node = numa_node_of(pinned);
        out.say(self.health.numa_line(node));
        if fits.iter().any(|f| f.kind == "pinned" && f.limit.starts_with("below the link")) {
            let causes = self.health.likely_causes(node);
            let none = "none among link, clocks and NUMA: other traffic, or the host's memory; try nvbandwidth";
            out.say(format!("pinned copies run below the link; likely cause: {}", causes.first().map_or(none, |c| c)));
        }
    }

    /// What pinning costs: allocation (with the first touch of every page) and release, on the host
    /// clock, at 1, 16 and 64 MiB (those up to `--max`).
    fn alloc_costs(&self, out: &Output) -> anyhow::Result<Vec<AllocCosts>> {
        out.say("\nAllocating and pinning, ms on the host clock");
        let headers = [
            "size",
            "malloc+touch",
            "cudaMallocHost",
            "write-combined",
            "cudaHostRegister",
            "unregister",
            "cudaFreeHost",
        ];
        let mut table = Table::new(&headers);
        let mut costs = Vec::new();
        let gpu = &self.gpu;
        for bytes in [1 << 20, 16 << 20, 64 << 20].into_iter().filter(|b| *b <= self.sizes[self.sizes.len() - 1]) {
            let len = bytes / 4;
            let (v, t_malloc) = host_ms(|| vec![1.0f32; len].into_iter().map(|x| x * 2.0).collect::<Vec<f32>>());
            let (p, t_pinned) = host_ms(|| gpu.pinned::<f32>(len));
            let (wc, t_wc) = host_ms(|| gpu.pinned_with::<f32>(len, HostAlloc::WRITE_COMBINED));
            let (reg, t_register) = host_ms(|| gpu.register(v));
            let (v, t_unregister) = host_ms(|| reg.map(Registered::into_vec));
            drop(v?);
            let ((), t_free) = host_ms(|| drop(p));
            drop(wc?);
            let ms = [t_malloc, t_pinned, t_wc, t_register, t_unregister, t_free];
            table.row([vec![fmt_bytes(bytes)], ms.iter().map(|t| fmt_ms(*t)).collect()].concat());
            costs.push(AllocCosts { bytes, ms });
        }
        out.table(&table);
        Ok(costs)
    }

    /// Against a copy-engine figure the user passes (say nvbandwidth's): pinned at 64 MiB and above, each
    /// direction; whether every one given was reached.
    fn against_references(&self, out: &Output, copies: &[Vec<DirectionTimes>]) -> bool {
        let mut passed = true;
        let large: Vec<usize> = (0..self.sizes.len()).filter(|&i| self.sizes[i] >= 64 << 20).collect();
        for (d, dir, reference) in [(0, "H2D", self.args.ref_htod), (1, "D2H", self.args.ref_dtoh)] {
            let (Some(r), false) = (reference, large.is_empty()) else { continue };
            let rate = |i: &usize| if d == 0 { &copies[*i][1].htod } else { &copies[*i][1].dtoh }.gbps(self.sizes[*i]);
            let got = large.iter().map(rate).fold(f64::NAN, f64::max);
            passed &= got >= 0.99 * r;
            let share = 100.0 * got / r;
            let line = format!(
                "pinned {dir} at 64 MiB and above: {got:.2} GB/s = {share:.1}% of the reference {r:.2} (needs 99%)"
            );
            out.say(verdict(got >= 0.99 * r, &line));
        }
        passed
    }
}

/// The four kinds of host memory, each of the largest size, all holding the same non-zero data.
struct HostKinds {
    pageable: Vec<f32>,
    pinned: PinnedBuffer<f32>,
    write_combined: PinnedBuffer<f32>,
    registered: Registered<f32>,
}

impl HostKinds {
    fn new(gpu: &Gpu, n: usize) -> anyhow::Result<HostKinds> {
        let pageable = cuda_scope::pageable(n, input)?; //                                  malloc
        let mut pinned = gpu.pinned::<f32>(n)?; //                                      cudaMallocHost
        let mut write_combined = gpu.pinned_with::<f32>(n, HostAlloc::WRITE_COMBINED)?; // cudaHostAllocWriteCombined
        let registered = gpu.register(cuda_scope::pageable(n, input)?)?; //                 cudaHostRegister
        pinned.copy_from_slice(&pageable);
        write_combined.copy_from_slice(&pageable);
        Ok(HostKinds { pageable, pinned, write_combined, registered })
    }

    /// Each kind, in the order of [`KINDS`].
    fn each(&mut self) -> [&mut [f32]; 4] {
        [&mut self.pageable, &mut self.pinned, &mut self.write_combined, &mut self.registered]
    }

    /// One thread's memcpy rate from pageable into pinned memory, best of three copies of `probe`
    /// elements: what the driver's pageable path does.
    fn host_copy_gbps(&mut self, probe: usize) -> f64 {
        let (src, dst) = (&self.pageable[..probe], &mut self.pinned[..probe]);
        let mut copy = || host_ms(|| dst.copy_from_slice(src)).1;
        gbps(probe * 4, [copy(), copy(), copy()].into_iter().fold(f64::INFINITY, f64::min))
    }

    /// Write-combined memory is not cached: fine for the GPU and for CPU writes, slow for CPU reads.
    /// The CPU's read rate of `probe` elements of each.
    fn cpu_read(&self, out: &Output, probe: usize) -> CpuRead {
        let (a, t_cached) = host_ms(|| verify::checksum(&self.pinned[..probe]));
        let (b, t_wc) = host_ms(|| verify::checksum(&self.write_combined[..probe]));
        let (pinned, write_combined) = (gbps(probe * 4, t_cached), gbps(probe * 4, t_wc));
        let same = if a == b { "same data" } else { "DIFFERENT data" };
        let bytes = fmt_bytes(probe * 4);
        out.say(format!(
            "\nCPU reading {bytes} back: pinned {pinned:.2} GB/s, write-combined {write_combined:.2} GB/s ({same})"
        ));
        CpuRead { pinned, write_combined }
    }
}

/// The device end of every copy: a buffer of the largest size, and the stream the copies go on.
struct DeviceEnd<'g> {
    gpu: &'g Gpu,
    data: DeviceBuffer<f32>,
    streams: Vec<Stream>,
}

impl DeviceEnd<'_> {
    /// `host` (a prefix of a kind) up to the device and back down, each copy timed alone over `r`'s runs.
    fn both_directions(&mut self, host: &mut [f32], r: Repeats) -> anyhow::Result<DirectionTimes> {
        let (gpu, streams, d, len) = (self.gpu, &self.streams, &mut self.data, host.len());
        let htod = measure(r, || Ok(gpu.timed(streams, |s| s.stream(0).htod(&host[..], s.device(d).slice(0..len)))?))?;
        let dtoh =
            measure(r, || Ok(gpu.timed(streams, |s| s.stream(0).dtoh(s.device(d).slice(0..len), &mut host[..]))?))?;
        Ok(DirectionTimes { htod, dtoh })
    }

    /// The round trip: `host` up to the device, cleared, and back down; every element must survive.
    fn round_trip(&mut self, out: &Output, name: &str, host: &mut [f32]) -> anyhow::Result<Check> {
        let (gpu, streams, d) = (self.gpu, &self.streams, &mut self.data);
        gpu.scope(streams, |s| s.stream(0).htod(&host[..], s.device(d)))?;
        host.fill(0.0);
        gpu.scope(streams, |s| s.stream(0).dtoh(s.device(d), &mut host[..]))?;
        let check = verify::exact(host, input);
        out.say(format!("{name:>16}: round trip {}", check.summary()));
        check.ensure()?;
        Ok(check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_default_sweep_needs_the_programs_256_mib_and_four_kinds_of_64_mib() {
        // The program: 256 MiB each. The sweep to 64 MiB: a pageable Vec, three pinned kinds and the
        // allocation table's three pinned buffers of 64 MiB, one device buffer.
        let need = footprint(64 * MIB);
        assert_eq!(need, Footprint { device: 256 * MIB, pinned: 384 * MIB, pageable: 256 * MIB });
        // To 1 GiB the sweep's own buffers rule: 3 GiB pinned and 192 MiB more for the table.
        let need = footprint(1 << 30);
        assert_eq!((need.device, need.pinned, need.pageable), (1 << 30, 3 * (1 << 30) + 192 * MIB, 1 << 30));
    }

    #[test]
    fn a_plant_moves_more_bytes_of_pinned_memory_from_4_mib() {
        assert_eq!(moved(1, 64 * MIB, Some(5)), 16 * MIB + 16 * MIB * 5 / 100);
        assert_eq!((moved(1, 1 << 20, Some(5)), moved(0, 64 * MIB, Some(5))), (256 << 10, 16 * MIB));
        assert_eq!(moved(1, 64 * MIB, None), 16 * MIB);
    }

    #[test]
    fn a_huge_max_saturates_past_any_machine() {
        let need = footprint(usize::MAX & !3);
        assert_eq!((need.device, need.pinned, need.pageable), (usize::MAX - 3, usize::MAX, usize::MAX - 3));
        let tib = footprint(1024 << 30);
        assert!(tib.device > 141_000_000_000 && tib.pinned + tib.pageable > 2_000_000_000_000, "{tib:?}");
    }
}
