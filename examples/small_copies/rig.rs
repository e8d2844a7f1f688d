//! The lesson's rig: the GPU, the lessons' kernels, the streams and every buffer the ways move the sets
//! through, allocated once for the largest set after the footprint of them all was checked. It runs
//! every way over a set, each checked byte for byte and held against one copy of all the bytes each way
//! ([`SmallCopiesRig::run_set`]), and the lesson's grid of sets with its tables and JSON
//! ([`SmallCopiesRig::every_way_over_every_set`]).

use std::{cell::Cell, ops::Range, time::Instant};

use rayon::prelude::*;
use serde::Serialize;

use cuda_scope::{DeviceBuffer, DeviceInfo, Footprint, Gpu, HostAlloc, PinnedBuffer, Scope, Stream};
use kernels::Kernels;
use measure::{
    report::{fmt_bytes, Output},
    timing::{measure_best, measure_parts_within, measure_parts_within_after, Repeats, Stats},
};

use crate::{
    buffers::{byte, BufferPlacement, BufferSet, SetGrid, POISON},
    packing::PackLayout,
    results::{self, ByteCheck, ScopePrice, SetRun, WayRun, MATTERS},
    ways::TransferWay,
};

/// What a measurement of one way may take, after three runs: with a dozen ways over a dozen sets, a
/// run of milliseconds gets three runs after its checked run, and one of microseconds the usual repeats.
pub const BUDGET_MS: f64 = 15.0;

/// Sets of this many buffers or more have the scope's price measured: below it a round trip's host time
/// is a few dozen microseconds, too short to tell the two apart.
const PRICED_FROM: usize = 100;

/// Round trips of each of the scope and the bare calls, in turn, for the scope's price (even: each goes
/// first as often as the other). With eight, the median moves by a few hundredths from one set to the
/// next on a busy host: in this project's runs one or two sets of six read 1.10x-1.20x where four runs
/// of one set read 1.03x-1.10x. Thirty-two take longer than the host's
/// moments last (a quarter of a second for 1000 buffers), and cost a default run under a second.
const PAIRS: usize = 32;

/// Milliseconds since `t`.
pub fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// What a way's round trip runs on: the GPU, the lessons' kernels, and the streams it may use.
#[derive(Clone, Copy)]
pub struct GpuSide<'r> {
    pub gpu: &'r Gpu,
    pub kernels: &'r Kernels,
    pub streams: &'r [Stream],
}

impl<'r> GpuSide<'r> {
    /// The first `k` streams only.
    pub fn first(self, k: usize) -> GpuSide<'r> {
        GpuSide { streams: &self.streams[..k], ..self }
    }

    /// `calls` in a timed scope on the streams: the GPU's time, and the host's in the calls, ms.
    pub fn timed_calls(
        self,
        calls: impl for<'s> FnOnce(&'s Scope<'s, 'r>) -> anyhow::Result<()>,
    ) -> anyhow::Result<(f64, f64)> {
        let host = Cell::new(0.0);
        let gpu_ms = self.gpu.timed(self.streams, |s| {
            let t = Instant::now();
            calls(s)?;
            host.set(ms(t));
            Ok::<_, anyhow::Error>(())
        })?;
        Ok((gpu_ms, host.get()))
    }
}

/// The rig's pinned host memory.
pub struct HostBuffers {
    /// The host buffers, as slices of two mapped pinned arenas (mapped for zero-copy; copies run from
    /// them as from any pinned memory): what goes up, and where it comes back.
    pub h_in: PinnedBuffer<u8>,
    pub h_out: PinnedBuffer<u8>,
    /// The packed staging buffers, for the H2D copy and the D2H copy (the D2H one also holds the poison an
    /// arena is filled with).
    pub packed_htod: PinnedBuffer<u8>,
    pub packed_dtoh: PinnedBuffer<u8>,
}

/// The rig's device memory.
pub struct DeviceBuffers {
    /// Where every buffer of a set goes, in order.
    pub arena: DeviceBuffer<u8>,
    /// The packed way's buffer on the device.
    pub packed: DeviceBuffer<u8>,
    /// The copy kernel's tables: the packed buffer's, then the host arena's (zero-copy), then the packed
    /// buffer's cut where the packed way's kernels cut it ([`PackLayout::part_table`]).
    pub tables: DeviceBuffer<u64>,
    /// Where each kernel part's entries of the last lie in `tables`, for the set the rig holds.
    pub part_tables: Vec<Range<usize>>,
}

/// Pageable copies of a set's buffers: a `Vec` each, in and out.
pub struct PageableCopies {
    pub ins: Vec<Vec<u8>>,
    pub outs: Vec<Vec<u8>>,
}

/// The GPU, the kernels, the streams and the buffers every way uses, for sets up to the largest it was
/// made for.
pub struct SmallCopiesRig {
    pub gpu: Gpu,
    pub kernels: Kernels,
    /// Every stream the ways may use: those the copies are spread over, and at least two (the packed
    /// way's kernels run on a stream of their own).
    pub streams: Vec<Stream>,
    /// How many streams the copies are spread over, as asked (`--streams`).
    pub spread: usize,
    pub repeats: Repeats,
    pub host: HostBuffers,
    pub device: DeviceBuffers,
    /// Whether this driver has batched copies; if not, why not.
    pub batch: Result<(), String>,
}

/// What `--json` writes for the grid of sets.
#[derive(Serialize)]
struct GridResults<'a> {
    device: &'a DeviceInfo,
    repeats: Repeats,
    budget_ms: f64,
    streams: usize,
    batch: Option<&'a String>,
    left_out: &'a [String],
    sets: &'a [SetRun],
}

/// The copy kernel's tables for a set of `count` buffers ([`DeviceBuffers::tables`]): the packed buffer's
/// and the host arena's, three numbers a buffer each, then the packed buffer's cut at the packed way's
/// kernel parts, which holds the buffer the cut falls in twice.
fn tables_len(count: usize) -> usize {
    count.saturating_mul(9).saturating_add(6)
}

/// The most of each of `places`' lengths (at least 1).
fn most(places: &[BufferPlacement], f: fn(&BufferPlacement) -> usize) -> usize {
    places.iter().map(f).max().unwrap_or(1).max(1)
}

/// What a rig for `places` holds at its peak: the two host arenas, the packed buffers for the H2D and
/// the D2H copies (the D2H one at least an arena: it holds the poison), the arena, the packed buffer
/// and the copy kernel's three tables on the device ([`DeviceBuffers::tables`]); and while a set runs,
/// its buffers' pageable copies in and out and its tables on the host.
pub fn footprint(places: &[BufferPlacement]) -> Footprint {
    let (host, device) = (most(places, |p| p.host_len), most(places, |p| p.device_len));
    let (packed, count) = (most(places, |p| p.packed_len), most(places, BufferPlacement::count));
    let copies = most(places, |p| {
        let headers = p.count().saturating_mul(2 * std::mem::size_of::<Vec<u8>>());
        p.bytes().saturating_mul(2).saturating_add(headers)
    });
    Footprint::default()
        .pinned::<u8>(host.saturating_mul(2))
        .pinned::<u8>(packed.saturating_add(packed.max(device)))
        .device::<u8>(device.saturating_add(packed))
        .device::<u64>(tables_len(count))
        .pageable::<u8>(copies)
        .pageable::<u64>(tables_len(count))
}

impl SmallCopiesRig {
    /// Starts the GPU (its report printed), refuses at once a rig for `places` that does not fit this
    /// machine, loads the kernels, says which ways this driver and GPU leave out, and allocates the rig.
    pub fn start(
        out: &Output,
        places: &[BufferPlacement],
        streams: usize,
        repeats: Repeats,
    ) -> anyhow::Result<SmallCopiesRig> {
        let gpu = measure::lesson::gpu(out, &footprint(places))?; // before anything is allocated
        let kernels = Kernels::load(&gpu)?; // the lessons' kernels, copy_by_table among them
        let rig = SmallCopiesRig::new(gpu, kernels, places, streams, repeats)?;
        if let Err(why) = &rig.batch {
            out.say(format!("no batched copies: {why}; those ways are left out"));
        }
        if !rig.zero_copy() {
            out.say(format!("{} cannot map host memory: zero-copy is left out", rig.gpu.info.name));
        }
        Ok(rig)
    }

    /// Buffers for every set of `places` on `gpu`, and `streams` streams.
    pub fn new(
        gpu: Gpu,
        kernels: Kernels,
        places: &[BufferPlacement],
        streams: usize,
        repeats: Repeats,
    ) -> anyhow::Result<SmallCopiesRig> {
        let (host, dev, packed) =
            (most(places, |p| p.host_len), most(places, |p| p.device_len), most(places, |p| p.packed_len));
        let flags = if gpu.info.can_map_host_memory { HostAlloc::MAPPED } else { HostAlloc::DEFAULT };
        let host_buffers = HostBuffers {
            h_in: gpu.pinned_with(host, flags)?,
            h_out: gpu.pinned_with(host, flags)?,
            packed_htod: gpu.pinned(packed)?,
            packed_dtoh: gpu.pinned(packed.max(dev))?,
        };
        let tables = most(places, |p| tables_len(p.count()));
        let (arena, packed, tables) = (gpu.alloc(dev)?, gpu.alloc(packed)?, gpu.alloc(tables)?);
        let device = DeviceBuffers { arena, packed, tables, part_tables: Vec::new() };
        let (spread, streams) = (streams.max(1), gpu.streams(streams.max(2))?);
        // cuGetProcAddress("cuMemcpyBatchAsync", 12.8)
        let batch = cuda_scope::batch_support().map_err(|e| e.to_string());
        Ok(SmallCopiesRig { gpu, kernels, streams, spread, repeats, host: host_buffers, device, batch })
    }

    /// Whether the GPU maps host memory, for zero-copy.
    pub fn zero_copy(&self) -> bool {
        self.gpu.info.can_map_host_memory
    }

    /// Every way this driver and GPU have.
    pub fn ways(&self) -> Vec<TransferWay> {
        TransferWay::all(self.spread, self.batch.is_ok(), self.zero_copy())
    }

    /// Every way of `ways` over `set`, each checked byte for byte, with one copy of all the bytes each
    /// way measured before them and after them.
    pub fn run_set(&mut self, set: &BufferSet, ways: &[TransferWay]) -> anyhow::Result<SetRun> {
        let _phase = measure::timeline::phase(&set.name);
        let places = BufferPlacement::new(set);
        let mut pageable = self.fill(set, &places)?;
        let before = self.one_copy(places.bytes())?;
        let mut runs = Vec::new();
        for &way in ways {
            let _phase = measure::timeline::phase(&format!("{}: {}", set.name, way.name()));
            let run = self.run_way(way, &places, &mut pageable)?;
            run.check.ensure(&format!("{} over {}", run.name, set.name))?;
            runs.push(run);
        }
        // One copy each way again after the ways, and the better of the two: a copy measured while the
        // host or the link was slow for a moment (the copies have taken 224 µs in place of 158 for the 30
        // runs before the ways, which then ran at full speed) would make every way look faster than it is.
        let after = self.one_copy(places.bytes())?;
        let (one_copy_ms, one_copy_wall_ms) = (before.0.min(after.0), before.1.min(after.1));
        for run in &mut runs {
            run.gpu_vs_one_copy = run.gpu.median_ms / one_copy_ms;
        }
        let (count, bytes, uniform) = (places.count(), places.bytes(), set.uniform);
        let set = set.name.clone();
        let (scope_price, packed_parts) = (None, None);
        Ok(SetRun { set, count, bytes, uniform, one_copy_ms, one_copy_wall_ms, ways: runs, scope_price, packed_parts })
    }

    /// The scope's price for one memcpy per buffer over `set` (its bytes in the host arena): the host's
    /// time in the calls of a round trip through the scope ([`TransferWay::Each`], one stream, pinned),
    /// and in the same calls made bare, [`PAIRS`] of each in turn after one of each as a warm-up (which
    /// goes first alternating, so that neither always follows the other).
    pub fn scope_price(&mut self, set: &BufferSet) -> anyhow::Result<ScopePrice> {
        let places = BufferPlacement::new(set);
        let each = TransferWay::Each { streams: 1, pageable: false, coalesced: false };
        let pieces: Vec<_> =
            (0..places.count()).map(|i| (places.host_range(i), places.device_range(i).start)).collect();
        let mut none = PageableCopies { ins: vec![], outs: vec![] };
        let (mut scope, mut bare, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for pair in 0..=PAIRS {
            let first = match pair % 2 {
                0 => None,
                _ => Some(self.bare_round_trip(&pieces)?),
            };
            let s = self.once(each, &places, &mut none)?[2];
            let b = match first {
                Some(b) => b,
                None => self.bare_round_trip(&pieces)?,
            };
            if pair > 0 {
                scope.push(s);
                bare.push(b);
                ratios.push(s / b);
            }
        }
        let median = |v: &[f64]| Stats::from_samples(v).map(|s| s.median_ms);
        let per_copy = |v: &[f64]| median(v).map(|ms| ms * 1e3 / (2 * places.count()) as f64);
        let (scope_us, bare_us, ratio) = (per_copy(&scope)?, per_copy(&bare)?, median(&ratios)?);
        let middle_half = results::quartiles(&ratios);
        Ok(ScopePrice { copies: 2 * places.count(), scope_us, bare_us, ratio, middle_half, pairs: PAIRS })
    }

    /// One memcpy per buffer each way as bare driver calls on the first stream: the host's time in them, ms.
    pub fn bare_round_trip(&mut self, pieces: &[(Range<usize>, usize)]) -> anyhow::Result<f64> {
        let HostBuffers { h_in, h_out, .. } = &mut self.host;
        Ok(cuda_scope::probe::bare_round_trip(&self.streams[0], h_in, &mut self.device.arena, h_out, pieces)?)
    }

    /// Fills the host arena with `set`'s bytes, makes its pageable copies, and copies its tables H2D.
    fn fill(&mut self, set: &BufferSet, places: &BufferPlacement) -> anyhow::Result<PageableCopies> {
        let fits = places.host_len <= self.host.h_in.len() && places.device_len <= self.device.arena.len();
        let fits = fits
            && places.device_len <= self.host.packed_dtoh.len()
            && places.packed_len <= self.host.packed_htod.len();
        let (part_table, parts) = PackLayout::new(places).part_table(places);
        let at = 6 * places.count(); // the part table's place, after the packed buffer's and the host arena's
        let fits = fits && at + part_table.len() <= self.device.tables.len();
        anyhow::ensure!(fits, "{}: the rig was made for smaller sets", set.name);
        places
            .host_slices_mut(&mut self.host.h_in)
            .into_par_iter()
            .enumerate()
            .for_each(|(i, b)| b.iter_mut().enumerate().for_each(|(j, x)| *x = byte(i, j)));
        let pageable = PageableCopies {
            ins: (0..places.count())
                .into_par_iter()
                .map(|i| (0..places.sizes[i]).map(|j| byte(i, j)).collect())
                .collect(),
            outs: places.sizes.iter().map(|s| vec![0; *s]).collect(),
        };
        self.device.part_tables = parts.into_iter().map(|e| at + 3 * e.start..at + 3 * e.end).collect();
        let tables: Vec<u64> = places.packed_table().into_iter().chain(places.host_table()).chain(part_table).collect();
        let (s0, d_tables) = (&self.streams[..1], &mut self.device.tables);
        self.gpu.scope(s0, |s| s.stream(0).htod(&tables, s.device(d_tables).slice(0..tables.len())))?;
        Ok(pageable)
    }

    /// One copy of `bytes` up and one back: the GPU time, the best of runs, and the wall time as the
    /// caller waits for it, the median, ms.
    fn one_copy(&mut self, bytes: usize) -> anyhow::Result<(f64, f64)> {
        let SmallCopiesRig { gpu, streams, host, device, repeats, .. } = self;
        let (s0, up, down, d_packed) = (&streams[..1], &host.packed_htod, &mut host.packed_dtoh, &mut device.packed);
        let mut once = || {
            let t = Instant::now();
            let gpu_ms = gpu.timed(s0, |s| {
                let d = s.device(d_packed).slice(0..bytes);
                s.stream(0).htod(&up[..bytes], d)?;
                s.stream(0).dtoh(d, &mut down[..bytes])
            })?;
            anyhow::Ok([ms(t), gpu_ms])
        };
        let [wall, _] = measure_parts_within(*repeats, BUDGET_MS, &mut once)?;
        let gpu_ms = measure_best(*repeats, 30, 5.0, || once().map(|[_, gpu]| gpu))?;
        Ok((gpu_ms, wall.median_ms))
    }

    /// `way` over the set `places` holds: its checked run (the first warm-up), then its timed runs.
    fn run_way(
        &mut self,
        way: TransferWay,
        places: &BufferPlacement,
        pageable: &mut PageableCopies,
    ) -> anyhow::Result<WayRun> {
        let ([wall, gpu, host], check, build_ms) = match way {
            TransferWay::Graph => self.graph(places)?,
            _ => {
                self.poison(places, pageable)?;
                let t = Instant::now();
                self.once(way, places, pageable)?; // the checked run is the first warm-up
                let first_ms = ms(t);
                let check = self.check(places, way, pageable);
                let (r, again) = (self.repeats, || self.once(way, places, pageable));
                (measure_parts_within_after(first_ms, r, BUDGET_MS, again)?, check, None)
            }
        };
        Ok(WayRun {
            way,
            name: way.name(),
            gbps: 2.0 * places.bytes() as f64 / (wall.median_ms * 1e6),
            gpu_vs_one_copy: f64::NAN, // set by run_set, once one copy each way is measured again
            bounded: way.bounded(),
            wall,
            gpu,
            host,
            check,
            build_ms,
        })
    }

    /// Fills every output with [`POISON`]: the host buffers, and the arena on the device.
    pub fn poison(&mut self, places: &BufferPlacement, pageable: &mut PageableCopies) -> anyhow::Result<()> {
        self.host.h_out[..places.host_len].fill(POISON);
        pageable.outs.iter_mut().for_each(|o| o.fill(POISON));
        self.host.packed_dtoh.fill(POISON);
        let (s0, down, d_arena, len) =
            (&self.streams[..1], &self.host.packed_dtoh, &mut self.device.arena, places.device_len);
        Ok(self.gpu.scope(s0, |s| s.stream(0).htod(&down[..len], s.device(d_arena).slice(0..len)))?)
    }

    /// Whether every buffer `way` brought back is what went up.
    pub fn check(&self, places: &BufferPlacement, way: TransferWay, pageable: &PageableCopies) -> ByteCheck {
        match way.pageable() {
            true => ByteCheck::of(pageable.ins.iter().map(|v| &v[..]), pageable.outs.iter().map(|v| &v[..])),
            false => ByteCheck::of(
                places.host_slices(&self.host.h_in).into_iter(),
                places.host_slices(&self.host.h_out).into_iter(),
            ),
        }
    }

    /// The lesson's grid: every way over every set, each checked byte for byte; the grid at a glance,
    /// where batching, packing and graphs stop mattering, the last set (the model-like one) in detail,
    /// and the JSON document.
    pub fn every_way_over_every_set(&mut self, grid: &SetGrid, out: &Output) -> anyhow::Result<()> {
        let ways = self.ways();
        let bar = out.progress_bar(grid.sets.len() as u64, "sets");
        let (mut runs, mut priced) = (Vec::new(), Vec::new());
        for set in &grid.sets {
            bar.step(set.name.clone());
            // Every way, each checked byte for byte; then the scope's price, once a count of buffers (at
            // its first size: the scope's bookkeeping for a copy does not depend on its bytes), not where
            // the timeline records (its observer times every operation of the scope's).
            let mut run = self.run_set(set, &ways)?;
            let first_of_its_count = !priced.contains(&set.count());
            if set.count() >= PRICED_FROM && first_of_its_count && !measure::timeline::is_recording() {
                priced.push(set.count());
                run.scope_price = Some(self.scope_price(set)?);
            }
            // The packed way's CPU side alone, to hold it against: what limits packing on this host.
            if set.count() >= PRICED_FROM && ways.contains(&TransferWay::Packed) {
                run.packed_parts = Some(self.packed_parts(set)?);
            }
            runs.push(run);
            bar.done();
        }
        bar.finish();
        runs.iter().flat_map(SetRun::figures).for_each(|f| out.add(f)); // `1000 x 4 KiB / memcpy each / host`
        self.print_grid(&runs, grid, out);
        let (device, streams, batch) = (&self.gpu.info, self.spread, self.batch.as_ref().err());
        let (repeats, left_out, sets) = (self.repeats, &grid.left_out[..], &runs[..]);
        out.finish(&GridResults { device, repeats, budget_ms: BUDGET_MS, streams, batch, left_out, sets })
    }

    /// The grid's tables and notes.
    fn print_grid(&self, runs: &[SetRun], grid: &SetGrid, out: &Output) {
        let Repeats { warmup, repeats } = self.repeats;
        out.say(format!(
            "Every buffer up into a device arena and back into its own host buffer: wall µs as the caller \
             waits (first call to last byte home), median of up to {repeats} runs after up to {warmup} warm-up \
             ({BUDGET_MS:.0} ms each at most after three); every byte checked"
        ));
        out.table(&results::grid_table(runs));
        out.say(results::winners(runs));
        out.say(
            "one copy each way: one H2D copy of all the bytes then one D2H, GPU time, the best of runs before the \
             ways and after them: the bytes at the link's rate with one copy's fixed cost each way",
        );
        if !grid.left_out.is_empty() {
            let (most, left_out) = (fmt_bytes(grid.max_total), grid.left_out.join(", "));
            out.say(format!("left out (more than {most} each way): {left_out}"));
        }
        if measure::timeline::is_recording() {
            out.say(
                "\nThe scope's price is left out: the built-in timeline's observer times every operation of a scope",
            );
        }
        if let Some(t) = results::price_table(runs) {
            out.say(format!(
                "\nThe scope's price: one memcpy per buffer on one stream from pinned memory, the host's time a copy \
                 in the calls through the scope and in the same calls made bare, {PAIRS} round trips of each in turn \
                 (the ratio: the median of each pair's own); once a count of buffers, at its first size"
            ));
            out.table(&t);
        }
        if let Some(t) = results::crossover_table(runs) {
            out.say(format!(
                "\nWhere batching, packing and graphs stop mattering: the size from which each is less than \
                 {MATTERS:.1}x faster than the faster memcpy per buffer (wall), measured, and where fits over the \
                 sizes put it"
            ));
            out.table(&t);
        }
        say_packed(runs, out);
        self.say_coalesced(runs, out);
        let model = runs.last().expect("a set at least"); // the model-like set, unless left out
        out.say(format!("\n{}, every way", model.set));
        out.table(&results::detail_table(model));
        out.say(
            "GPU / one copy: the GPU time against one copy of all the bytes each way. A bound for one memcpy per \
             buffer from pinned memory and for packed (they move the same bytes through the same copies, paying at \
             least one copy's fixed cost each way); a reference for the rest: the driver may write small pageable \
             copies inline, the batched call and a graph reach the copy engines by other paths, and zero-copy uses \
             none",
        );
        results::beaten(runs).iter().for_each(|l| out.say(format!("  {l}")));
    }
}

impl SmallCopiesRig {
    /// The natural loop coalesced by the scope against the packed way, where the run has it, and the
    /// scope's model as fitted in this run.
    fn say_coalesced(&self, runs: &[SetRun], out: &Output) {
        if let Some(t) = results::coalesced_table(runs) {
            out.say(
                "\nThe loop everyone writes first, one memcpy per buffer, coalesced by the scope \
                 (cuda_scope::coalesce): it holds the copies and issues each stream's together, by one launch of \
                 its copy kernel or one call each, as its model fitted on this machine chooses. Wall µs, against \
                 the packed way and against the same loop with coalescing off",
            );
            out.table(&t);
            if let Ok(m) = self.gpu.copy_model() {
                out.say(results::describe_copy_model(&m));
            }
        }
    }
}

/// The packed way against its parts measured alone, where they were: the table, and how to read it.
fn say_packed(runs: &[SetRun], out: &Output) {
    if let Some(t) = results::packed_table(runs) {
        out.say(
            "\nThe packed way against its parts, each measured alone in the same run: one copy of all the bytes \
             each way (wall), and the CPU's packing and unpacking on the threads the packed way shares them \
             among (µs, the best of seven). It overlaps the two, so the larger is a model of its floor were the \
             overlap perfect (a model, not a bound: the parts are timed apart from it). Where the CPU's side is \
             the larger, the CPU and the copies share the host's memory, which sets the pace, not the link: each \
             byte crosses it three times each way",
        );
        out.table(&t);
    }
}
