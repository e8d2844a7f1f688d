//! What the planner's model is built from ([`ModelCosts`]), all measured in the same run on the rig, and
//! what the model says each way takes over a set ([`ModelCosts::predict`]). A model, not a bound: it adds
//! up what each way's parts cost alone.
//!
//! The costs: one copy each way as `t = α + n/β` ([`CopyCost`], single copies from 256 B to 4 MiB); what
//! the host spends queueing one copy through the scope, and a round trip's fork, join and synchronization;
//! one copy per buffer's and a graph's GPU time beyond the bytes', a batch's beyond its calls and copies,
//! and each one's host time, as a fixed part plus a part per buffer (from 16 buffers and as many as the set
//! holds, 64 to 1024, at the set's median size up to 4 KiB: a batch's cost per buffer is not one line over
//! counts, so the line runs through the set's own, and its buffers of 4 KiB cost the host 1.05-1.2x those
//! of 256 B); the CPU's packing rate (one thread over buffers of 256 B to 256 KiB, per buffer and per byte,
//! and the pool's threads together over 16 MiB in pieces); the copies' and the crew's rates while both run
//! at once (a copy of 16 MiB up while the crew packs, one down while it unpacks: the host's memory is
//! shared); the copy kernel's scatter and gather, and zero-copy's, as a launch and a rate over the bytes;
//! and what the packed way took beyond the sum of its parts over 1 MiB, 16 MiB and the set's own packed
//! bytes (straight lines between them). The host's speed moves some of these from one moment to the next,
//! so a plan's passes measure them again right before each way runs ([`ModelCosts::again_for`]): the round
//! trip's fork, join and synchronization, the way's calls' lines, for the packed way the crew's rates and
//! its correction, and zero-copy's kernels.
//! Each way's round trip is then the sum of its parts (the GPU's and the host's overlapping where they
//! do):
//!
//! - memcpy each: GPU fixed + n · per buffer + B/β↑ + B/β↓; wall the larger of the GPU and the 2n
//!   calls, and the scope;
//! - batch: a batch's copies start once its call returns, so the call up, then its copies beside the
//!   call down, then the copies down: GPU the larger of h/2 + B/β↑ and h, + B/β↓ (h the two calls'
//!   host time), and what the calibration's GPU took beyond that; wall the GPU and the scope;
//! - packed: GPU each piece's copy up once its items are packed (the items packed in order by the crew's
//!   threads together), the kernels, each piece's copy back; wall the last piece's items unpacked by the
//!   crew once it landed, each copy and the crew at their rates beside each other where they run at
//!   once, and the scope, and what the round trip took beyond its parts, by its bytes;
//! - graph: GPU fixed + n · per buffer + B/β↑ + B/β↓; wall the larger of the launch and the GPU (the GPU
//!   starts while the launch goes on), and the scope;
//! - zero-copy: GPU the kernels over mapped memory; wall the larger of the GPU and two calls, and the
//!   scope.

use std::time::Instant;

use serde::Serialize;

use cuda_scope::{coalesce, CopyCounts, CopyModel, CopyWay};
use kernels::TableCopy;
use measure::{
    fit::CopyCost,
    report::fmt_bytes,
    timing::{host_ms, measure_best, measure_parts_within, Stats},
};

use crate::{
    buffers::{BufferPlacement, BufferSet},
    packing::{crew_threads, pack_all, unpack_all, PackLayout},
    results::{PackedParts, SetRun},
    rig::{ms, HostBuffers, SmallCopiesRig, BUDGET_MS},
    ways::TransferWay,
};

/// A cost with a fixed part and a part per buffer, in µs.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct LinearCost {
    pub fixed_us: f64,
    pub per_buffer_us: f64,
}

impl LinearCost {
    /// Through `(buffers, ms)` at two counts; neither part below zero.
    pub fn through(a: (usize, f64), b: (usize, f64)) -> LinearCost {
        let per = ((b.1 - a.1) / (b.0 as f64 - a.0 as f64) * 1e3).max(0.0);
        LinearCost { fixed_us: (a.1 * 1e3 - a.0 as f64 * per).max(0.0), per_buffer_us: per }
    }

    pub fn ms(&self, buffers: usize) -> f64 {
        (self.fixed_us + buffers as f64 * self.per_buffer_us) * 1e-3
    }
}

/// A cost measured at a few sizes, in ms (below zero where the model it corrects says too much), and
/// between them and beyond the straight lines through the nearest two: `(bytes, ms)` by size.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ByteCurve {
    points: Vec<(usize, f64)>,
}

impl ByteCurve {
    pub fn zero() -> ByteCurve {
        ByteCurve { points: vec![(0, 0.0)] }
    }

    /// Through `points`, sorted by size; where two share a size, their mean.
    pub fn through(mut points: Vec<(usize, f64)>) -> ByteCurve {
        points.sort_by_key(|p| p.0);
        let mut merged: Vec<(usize, f64, usize)> = Vec::new();
        for (bytes, ms) in points {
            match merged.last_mut() {
                Some(last) if last.0 == bytes => (last.1, last.2) = (last.1 + ms, last.2 + 1),
                _ => merged.push((bytes, ms, 1)),
            }
        }
        ByteCurve { points: merged.into_iter().map(|(b, ms, n)| (b, ms / n as f64)).collect() }
    }

    pub fn ms(&self, bytes: usize) -> f64 {
        let p = &self.points;
        if p.len() < 2 {
            return p.first().map_or(0.0, |p| p.1);
        }
        // The segment holding `bytes`, or the first or last one beyond the ends.
        let i = p.partition_point(|q| q.0 < bytes).clamp(1, p.len() - 1);
        let ((b0, m0), (b1, m1)) = (p[i - 1], p[i]);
        m0 + (m1 - m0) * (bytes as f64 - b0 as f64) / (b1 as f64 - b0 as f64)
    }
}

/// `bytes` at `gbps`, ms.
fn at_rate(bytes: usize, gbps: f64) -> f64 {
    bytes as f64 / (gbps * 1e6)
}

/// What the model is built from, all measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct ModelCosts {
    /// One copy H2D, and one D2H, over sizes: GPU time (`up` and `down` in the JSON).
    #[serde(rename = "up")]
    pub htod: CopyCost,
    #[serde(rename = "down")]
    pub dtoh: CopyCost,
    /// The host's time to queue one copy through the scope, µs.
    pub call_us: f64,
    /// One copy per buffer each way: GPU, and the host in the calls; the bytes' time at the copies'
    /// rates comes on top.
    pub each_gpu: LinearCost,
    pub each_host: LinearCost,
    /// A round trip's fork, join and synchronization: a timed scope that queues nothing, wall µs.
    pub scope_us: f64,
    /// A batch up and one back (stream order): the GPU's time beyond what the model gives the calls and
    /// the copies (below), and the host in the two calls.
    pub batch_beyond: LinearCost,
    pub batch_host: LinearCost,
    /// A graph of every copy both ways, replayed: GPU, and the host in `cudaGraphLaunch`.
    pub graph_gpu: LinearCost,
    pub graph_host: LinearCost,
    /// The CPU copying the host's buffers into the pinned packed one, and out of it, one thread: α per
    /// buffer, β its rate.
    pub pack: CopyCost,
    pub unpack: CopyCost,
    /// The threads the packed way packs on (the caller's and the pool's), and what they take together
    /// over a set: α their start (the pool's threads waking), β the rate they reach together.
    pub pack_threads: usize,
    pub crew_pack: CopyCost,
    pub crew_unpack: CopyCost,
    /// The copies and the crew at once, as the packed way runs them (the host's memory shared by both).
    pub busy: BusyRates,
    /// What the packed way's round trip took beyond the sum of its parts above, over the calibration
    /// sets of [`CalibrationSets::packed`] (1 MiB, 16 MiB, and the set's own packed bytes; the median of
    /// three looks at each): what the parts alone leave out (the round trip's scope starting and ending
    /// around the crew, the copies reading what the CPU has just written), added to its prediction.
    pub packed_beyond: ByteCurve,
    /// The scatter and the gather kernels together, in device memory: α their launches, β their rate
    /// over the buffers' bytes.
    pub kernels: CopyCost,
    /// Zero-copy's two kernels, over mapped host memory: α their launches, β their rate.
    pub zero_copy: CopyCost,
    /// The scope's own model of its coalesced copies (`Gpu::copy_model`, fitted once by the scope), where
    /// its kernel loaded.
    pub coalescing: Option<CopyModel>,
    /// What the host spends holding one copy through the scope to coalesce it, µs: the calls' time of the
    /// coalesced loop over the many buffers of [`CalibrationSets`], a copy.
    pub hold_us: f64,
}

/// Rates with the copies and the CPU's packing at once, GB/s, measured over 16 MiB: a copy up while the
/// crew packs, and one down while it unpacks. Each reads or writes the host's memory, which both share:
/// each is slower than alone (1.0 below would be no loss), and the packed way's pipeline runs so.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BusyRates {
    pub htod_gbps: f64,
    pub pack_gbps: f64,
    pub dtoh_gbps: f64,
    pub unpack_gbps: f64,
}

/// The natural loop over buffers of `sizes`, dealt round-robin to `streams` streams, up and back,
/// coalesced by the scope, as the scope's own model predicts it (ms): each stream's copies in the groups
/// the scope makes of them (`coalesce::groups`: a new group past its limits; a copy past `HELD_AT_MOST`
/// issued alone), each group the way the model chooses (one copy each way, as the scope issues it), the
/// groups one after another as the host issues them: [up, down].
pub fn coalesced_ms(model: &CopyModel, sizes: &[usize], streams: usize, pageable: bool) -> [f64; 2] {
    let (none, streams) = (CopyCounts::default(), streams.max(1));
    let mut us = [0.0; 2];
    for k in 0..streams {
        let queued: Vec<usize> = sizes.iter().skip(k).step_by(streams).copied().collect();
        for g in coalesce::groups(queued.iter().copied()) {
            let group = queued[g].iter().fold(none, |c, &size| c.add(size, pageable));
            for (side, (up, down)) in [(group, none), (none, group)].into_iter().enumerate() {
                let way = if group.copies == 1 { CopyWay::Each } else { model.choose(up, down) };
                us[side] += model.predict(way, up, down);
            }
        }
    }
    us.map(|us| us * 1e-3)
}

/// One way's predicted round trip, ms.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    pub way: TransferWay,
    pub gpu_ms: f64,
    pub host_ms: f64,
    pub wall_ms: f64,
}

/// The sets the costs are measured on: 16 buffers and as many as the set planned for (64 to 1024), at
/// its median size up to 4 KiB (the calls' fixed and per-buffer parts); 64 buffers of 256 B, 16 KiB and
/// 256 KiB (rates); 16 of 1 MiB (the CPU's threads together); and the set's packed bytes in buffers of
/// 16 KiB (1 to 4096 of them: what the packed way takes beyond its parts near the set's size; none where
/// that is within a tenth of 1 or 16 MiB, which are measured anyway).
pub struct CalibrationSets {
    pub few: BufferSet,
    pub many: BufferSet,
    pub spread: [BufferSet; 3],
    pub big: BufferSet,
    pub like: Option<BufferSet>,
}

impl CalibrationSets {
    /// The calibration sets for a plan of `set`.
    pub fn for_set(set: &BufferSet) -> CalibrationSets {
        let spread = [256, 16 << 10, 256 << 10].map(|s| BufferSet::uniform(64, s));
        let mut sizes = set.sizes.clone();
        sizes.sort_unstable();
        let size = sizes.get(sizes.len() / 2).map_or(256, |&s| s.min(4 << 10));
        let many = BufferSet::uniform(set.count().clamp(64, 1024), size);
        let (few, big) = (BufferSet::uniform(16, size), BufferSet::uniform(16, 1 << 20));
        let like = BufferSet::uniform(BufferPlacement::new(set).packed_len.div_ceil(16 << 10).clamp(1, 4096), 16 << 10);
        let near = |other: &BufferSet| like.bytes().abs_diff(other.bytes()) * 10 <= other.bytes();
        let like = (!near(&spread[1]) && !near(&big)).then_some(like);
        CalibrationSets { few, many, spread, big, like }
    }

    /// Every one of them.
    pub fn all(&self) -> impl Iterator<Item = &BufferSet> {
        [&self.few, &self.many, &self.big].into_iter().chain(&self.like).chain(&self.spread)
    }

    /// The sets the packed way's correction is measured on, by size: 1 MiB, 16 MiB, and the set's own
    /// packed bytes where they are not within a tenth of either.
    fn packed(&self) -> Vec<&BufferSet> {
        let mut sets: Vec<&BufferSet> = [&self.spread[1], &self.big].into_iter().chain(&self.like).collect();
        sets.sort_by_key(|s| s.bytes());
        sets
    }
}

/// The CPU's packing and unpacking on one thread, and the copy kernel's launches and rate.
struct RateCosts {
    pack: CopyCost,
    unpack: CopyCost,
    kernels: CopyCost,
}

impl ModelCosts {
    /// Measures the costs that a plan's passes do not measure again, over `sets` on `rig` (which must hold
    /// them): one copy each way, the CPU's packing on one thread, the copy kernel, and one memcpy per
    /// buffer's calls (the queued copy's host time the packed way and zero-copy read, whichever way a pass
    /// runs first). The rest is unknown (NaN) until [`ModelCosts::again_for`] measures it for its way.
    pub fn measure(rig: &mut SmallCopiesRig, sets: &CalibrationSets) -> anyhow::Result<ModelCosts> {
        let _phase = measure::timeline::phase("small copies: costs");
        let [htod, dtoh] =
            fit_again("one copy each way", || rig.copy_times(&[256, 4 << 10, 64 << 10, 1 << 20, 4 << 20]))?;
        let rates = RateCosts::measure(rig, sets)?;
        let nan = LinearCost { fixed_us: f64::NAN, per_buffer_us: f64::NAN };
        let unknown = CopyCost { alpha_us: f64::NAN, beta_gbps: f64::NAN, half_rate_bytes: f64::NAN, worst_miss: 0.0 };
        let mut costs = ModelCosts {
            htod,
            dtoh,
            call_us: f64::NAN,
            each_gpu: nan,
            each_host: nan,
            scope_us: f64::NAN,
            batch_beyond: nan,
            batch_host: nan,
            graph_gpu: nan,
            graph_host: nan,
            pack: rates.pack,
            unpack: rates.unpack,
            pack_threads: 0,
            crew_pack: unknown,
            crew_unpack: unknown,
            busy: BusyRates { htod_gbps: f64::NAN, pack_gbps: f64::NAN, dtoh_gbps: f64::NAN, unpack_gbps: f64::NAN },
            packed_beyond: ByteCurve::zero(),
            kernels: rates.kernels,
            zero_copy: unknown,
            coalescing: rig.gpu.copy_model().ok(),
            hold_us: f64::NAN,
        };
        costs.measure_calls(rig, sets, TransferWay::Each { streams: 1, pageable: false, coalesced: false })?;
        Ok(costs)
    }

    /// What the packed way took beyond the sum of its parts (with no correction) over
    /// [`CalibrationSets::packed`], one look at each.
    fn packed_beyond_over(&self, rig: &mut SmallCopiesRig, sets: &CalibrationSets) -> anyhow::Result<ByteCurve> {
        let mut points = Vec::new();
        for set in sets.packed() {
            let run = rig.run_set(set, &[TransferWay::Packed])?;
            points.push(self.packed_beyond_point(set, run.ways[0].wall.median_ms));
        }
        Ok(ByteCurve::through(points))
    }

    /// What the packed way took beyond the sum of its parts over `set` when its round trip took `wall_ms`,
    /// by the set's packed bytes (where `packed_ms` reads it): against the parts alone, whatever
    /// correction these costs already hold.
    fn packed_beyond_point(&self, set: &BufferSet, wall_ms: f64) -> (usize, f64) {
        let parts = ModelCosts { packed_beyond: ByteCurve::zero(), ..self.clone() };
        (BufferPlacement::new(set).packed_len, wall_ms - parts.packed_ms(set).2)
    }

    /// Measures again what the host's speed moves of `way`'s cost over the plan's `sets`, as a pass of the
    /// plan does right before `way` runs: a round trip's fork, join and synchronization (every way pays
    /// it), then its calls' lines (one memcpy per buffer, a batch, a graph; with the first, a queued
    /// copy's host time), for the packed way the crew's rates, alone and beside the copies, and what it
    /// takes beyond its parts (one look at each size), or zero-copy's kernels over mapped memory. On a
    /// virtualized host every driver call of a process can run 1.6x to 2.4x slower for hundreds of
    /// milliseconds at a time, whichever CPU it is held to.
    pub fn again_for(
        &mut self,
        rig: &mut SmallCopiesRig,
        sets: &CalibrationSets,
        way: TransferWay,
    ) -> anyhow::Result<()> {
        self.scope_us = rig.empty_scope()?.median_ms * 1e3;
        match way {
            TransferWay::Packed => {
                let crew = CrewCosts::measure(rig, sets)?;
                (self.pack_threads, self.crew_pack, self.crew_unpack, self.busy) =
                    (crew.pack_threads, crew.crew_pack, crew.crew_unpack, crew.busy);
                self.packed_beyond = self.packed_beyond_over(rig, sets)?;
            }
            TransferWay::ZeroCopy => self.zero_copy = zero_copy_cost(rig, sets)?,
            // The scope fits its model once per GPU; the host's time to hold a copy is measured again.
            TransferWay::Each { coalesced: true, .. } => {
                let r = rig.run_set(&sets.many, &[way])?;
                self.hold_us = r.ways[0].host.median_ms * 1e3 / (2 * r.count) as f64;
            }
            way => self.measure_calls(rig, sets, way)?,
        }
        Ok(())
    }

    /// One memcpy per buffer's, a batch's or a graph's GPU time beyond its bytes' and host time, over few
    /// and many buffers: a line through each (for one memcpy per buffer, a queued copy's host time too).
    fn measure_calls(
        &mut self,
        rig: &mut SmallCopiesRig,
        sets: &CalibrationSets,
        way: TransferWay,
    ) -> anyhow::Result<()> {
        let (a, b) = (rig.run_set(&sets.few, &[way])?, rig.run_set(&sets.many, &[way])?);
        let gpu = |r: &SetRun| (r.count, r.ways[0].gpu.median_ms - self.bytes_ms(r.bytes));
        let host = |r: &SetRun| (r.count, r.ways[0].host.median_ms);
        let lines = (LinearCost::through(gpu(&a), gpu(&b)), LinearCost::through(host(&a), host(&b)));
        match way {
            TransferWay::Each { .. } => {
                (self.each_gpu, self.each_host) = lines;
                self.call_us = b.ways[0].host.median_ms * 1e3 / (2 * b.count) as f64;
            }
            TransferWay::Batch { .. } => {
                // What the GPU took beyond the calls and the copies as the model runs them, at each count.
                let beyond = |r: &SetRun| {
                    let (h, w) = (r.ways[0].host.median_ms, r.ways[0].gpu.median_ms);
                    (r.count, w - self.batch_calls_then_copies(h, r.bytes))
                };
                (self.batch_beyond, self.batch_host) = (LinearCost::through(beyond(&a), beyond(&b)), lines.1);
            }
            TransferWay::Graph => (self.graph_gpu, self.graph_host) = lines,
            way => unreachable!("{} has no calls' lines", way.name()),
        }
        Ok(())
    }

    /// What the packed way takes beyond its parts over `set`, by its packed bytes, ms.
    pub fn beyond_ms(&self, set: &BufferSet) -> f64 {
        self.packed_beyond.ms(BufferPlacement::new(set).packed_len)
    }

    /// A batch's round trip as the GPU sees it, ms, from the calls' host time `host` (both) and the bytes:
    /// the copies up start once the call up returns and run beside the call down, then the copies down.
    fn batch_calls_then_copies(&self, host: f64, bytes: usize) -> f64 {
        let (up, down) = (at_rate(bytes, self.htod.beta_gbps), at_rate(bytes, self.dtoh.beta_gbps));
        (host / 2.0 + up).max(host) + down
    }

    /// The bytes of `n` buffers in all at the copies' rates, both ways, ms.
    fn bytes_ms(&self, bytes: usize) -> f64 {
        at_rate(bytes, self.htod.beta_gbps) + at_rate(bytes, self.dtoh.beta_gbps)
    }

    /// The packed way's round trip over `set`, as it runs it (see `packing::packed_round_trip`): the
    /// crew packs the items in order from its start, and each piece goes up once its items are packed;
    /// the kernels in two parts, each once its last piece is up ([`PackLayout::kernel_parts`]); each
    /// piece comes back once every piece is up and its part's kernels are done, and the crew, awake by
    /// then, unpacks its items. A buffer's fixed cost to pack or unpack is the one thread's, shared by the
    /// crew. Where the copies and the crew run at once (a set of several pieces), each runs at its rate
    /// beside the other ([`BusyRates`]): a copy up that starts before the packing ends, the packing
    /// itself, a copy down that starts while the piece before is unpacked, and an unpacking while the
    /// next piece comes down. (GPU span, host calls, wall), ms.
    pub fn packed_ms(&self, set: &BufferSet) -> (f64, f64, f64) {
        let places = BufferPlacement::new(set);
        let layout = PackLayout::new(&places);
        let threads = self.pack_threads.clamp(1, layout.items) as f64;
        let call = self.call_us * 1e-3;
        let pieces = layout.pieces.len();
        let piece = |p: usize| (layout.piece_buffers(&places, p).len(), layout.piece_bytes(p).len());
        // A rate in GB/s, the lower of alone and beside the other where they run at once.
        let rate = |alone: f64, busy: f64, together: bool| if together { alone.min(busy) } else { alone };
        let pack_gbps = rate(self.crew_pack.beta_gbps, self.busy.pack_gbps, pieces > 1);
        let packed = |(buffers, bytes): (usize, usize)| {
            self.crew_pack.alpha_us * 1e-3
                + at_rate(bytes, pack_gbps)
                + buffers as f64 * self.pack.alpha_us * 1e-3 / threads
        };
        let pack_end = packed((places.count(), places.packed_len));
        let (mut so_far, mut copied, mut host) = ((0usize, 0usize), 0.0f64, 0.0);
        // Each kernel part's end: its kernels run once its last piece is up and they are queued, every
        // part but the last as its last piece goes up, the last between the copies back. The scope's
        // fences and waits between the two streams (about ten driver calls a round trip, each far cheaper
        // than a copy's call) are not counted as calls: what they cost is in `packed_beyond`, measured.
        let (parts, mut kernels, mut done) = (layout.kernel_parts(), 0.0f64, vec![0.0f64; pieces]);
        let mut part_kernels = |k: usize, host: f64, up: f64, done: &mut [f64]| {
            kernels = kernels.max(up).max(host) + self.kernels.ms(layout.bytes_of(&parts[k]).len());
            done[parts[k].clone()].fill(kernels);
        };
        for p in 0..pieces {
            let (buffers, bytes) = piece(p);
            so_far = (so_far.0 + buffers, so_far.1 + bytes);
            host += call;
            let start = copied.max(packed(so_far)).max(host);
            let gbps = rate(self.htod.beta_gbps, self.busy.htod_gbps, start < pack_end);
            copied = start + self.htod.alpha_us * 1e-3 + at_rate(bytes, gbps);
            if let Some(k) = parts.iter().position(|part| part.end == p + 1 && part.end < pieces) {
                host += 2.0 * call;
                part_kernels(k, host, copied, &mut done);
            }
        }
        let (mut landed, mut unpacked) = (copied.max(host), 0.0f64);
        for p in 0..pieces {
            if p == parts[parts.len() - 1].start {
                host += 2.0 * call;
                part_kernels(parts.len() - 1, host, copied, &mut done);
            }
            let (buffers, bytes) = piece(p);
            host += 2.0 * call;
            let gbps = rate(self.dtoh.beta_gbps, self.busy.dtoh_gbps, landed < unpacked);
            landed = landed.max(done[p]).max(host) + self.dtoh.alpha_us * 1e-3 + at_rate(bytes, gbps);
            let gbps = rate(self.crew_unpack.beta_gbps, self.busy.unpack_gbps, p + 1 < pieces);
            let unpack = at_rate(bytes, gbps) + buffers as f64 * self.unpack.alpha_us * 1e-3 / threads;
            unpacked = unpacked.max(landed) + unpack;
        }
        let scope = self.scope_us * 1e-3;
        let wall = unpacked.max(landed) + scope + self.packed_beyond.ms(places.packed_len);
        (landed, host, wall.max(landed + scope))
    }

    /// What the model says `way` takes over `set`.
    pub fn predict(&self, way: TransferWay, set: &BufferSet) -> Prediction {
        let (n, bytes, scope) = (set.count(), set.bytes(), self.scope_us * 1e-3);
        let call = self.call_us * 1e-3;
        let (gpu_ms, host_ms, wall_ms) = match way {
            TransferWay::Each { streams, pageable, coalesced: true } => {
                // The host holds the copies up, flushes them as the first copy down is held, and holds the
                // copies down while the copies up run; the copies down are flushed as the scope ends.
                let none = [f64::NAN; 2];
                let [up, down] = self.coalescing.map_or(none, |m| coalesced_ms(&m, &set.sizes, streams, pageable));
                let hold = n as f64 * self.hold_us * 1e-3;
                let gpu = (hold + up).max(2.0 * hold) + down;
                (gpu, 2.0 * hold, gpu + scope)
            }
            TransferWay::Each { .. } => {
                // Copies back to back on one stream overlap part of each one's fixed cost: a line through
                // the run's own, not a copy's α taken n times.
                let gpu = self.each_gpu.ms(n) + self.bytes_ms(bytes);
                let host = self.each_host.ms(n);
                (gpu, host, gpu.max(host) + scope)
            }
            TransferWay::Batch { .. } => {
                // A batch's copies start once its call returns: the GPU takes the calls' host time and
                // the copies down, or the call up and the copies up, then down, within 4% in this
                // project's runs (the calls' time and every copy's said 1.2-1.3x on the model-like set,
                // where the copies up run beside the call down).
                let host = self.batch_host.ms(n);
                let gpu = self.batch_calls_then_copies(host, bytes) + self.batch_beyond.ms(n);
                (gpu, host, gpu.max(host) + scope)
            }
            TransferWay::Packed => self.packed_ms(set),
            TransferWay::Graph => {
                // cudaGraphLaunch hands the nodes over as it goes: the GPU starts before the call returns.
                let gpu = self.graph_gpu.ms(n) + self.bytes_ms(bytes);
                let host = self.graph_host.ms(n);
                (gpu, host, host.max(gpu) + scope)
            }
            TransferWay::ZeroCopy => {
                let gpu = self.zero_copy.ms(bytes);
                (gpu, 2.0 * call, gpu.max(2.0 * call) + scope)
            }
        };
        Prediction { way, gpu_ms, host_ms, wall_ms }
    }

    /// The costs in words, a line each.
    pub fn describe(&self) -> Vec<String> {
        let copy = |c: &CopyCost| format!("{:.1} µs + n / {:.1} GB/s", c.alpha_us, c.beta_gbps);
        let line = |c: &LinearCost| format!("{:.1} µs + {:.2} µs a buffer", c.fixed_us, c.per_buffer_us);
        let mut v = vec![
            format!("one copy H2D: {}; D2H: {}", copy(&self.htod), copy(&self.dtoh)),
            format!(
                "queueing a copy through the scope: {:.2} µs of the host; a round trip's fork, join, sync: {:.1} µs",
                self.call_us, self.scope_us
            ),
        ];
        if let Some(m) = &self.coalescing {
            v.push(format!(
                "the scope's coalesced copies: holding one {:.2} µs of the host; {}",
                self.hold_us,
                crate::results::describe_copy_model(m)
            ));
        }
        if self.batch_host.fixed_us.is_finite() {
            v.push(format!(
                "a batch up and back: host {}; the GPU beyond its calls and copies {}",
                line(&self.batch_host),
                line(&self.batch_beyond)
            ));
        }
        v.push(format!("a graph replayed: GPU {}, host {}", line(&self.graph_gpu), line(&self.graph_host)));
        v.push(format!(
            "packing on the CPU: {:.2} µs a buffer at {:.1} GB/s on one thread, on {} {}; unpacking {:.2} µs a buffer \
             at {:.1} GB/s, on {} {}",
            self.pack.alpha_us,
            self.pack.beta_gbps,
            self.pack_threads,
            copy(&self.crew_pack),
            self.unpack.alpha_us,
            self.unpack.beta_gbps,
            self.pack_threads,
            copy(&self.crew_unpack),
        ));
        let b = &self.busy;
        v.push(format!(
            "the copies and the crew at once: up {:.1} GB/s while packing at {:.1}; down {:.1} GB/s while \
             unpacking at {:.1}",
            b.htod_gbps, b.pack_gbps, b.dtoh_gbps, b.unpack_gbps
        ));
        let beyond: Vec<String> = self
            .packed_beyond
            .points
            .iter()
            .map(|&(b, ms)| format!("{:+.1} µs at {}", ms * 1e3, fmt_bytes(b)))
            .collect();
        v.push(format!("the packed way beyond the sum of its parts: {}", beyond.join(", ")));
        v.push(format!("the copy kernel, scattering and gathering: {}", copy(&self.kernels)));
        if self.zero_copy.alpha_us.is_finite() {
            v.push(format!("zero-copy kernels over mapped memory: {}", copy(&self.zero_copy)));
        }
        v
    }
}

impl RateCosts {
    /// The copy kernel and the CPU's packing on one thread over 64 buffers of three sizes.
    fn measure(rig: &mut SmallCopiesRig, sets: &CalibrationSets) -> anyhow::Result<RateCosts> {
        let [pack, unpack, kernels] = fit_again("the copy kernel and the packing on one thread", || {
            let mut points = [Vec::new(), Vec::new(), Vec::new()];
            for set in &sets.spread {
                let (pack, unpack) = rig.cpu_side(set, false)?;
                points[0].push((set.sizes[0], pack / set.count() as f64));
                points[1].push((set.sizes[0], unpack / set.count() as f64));
                points[2].push((set.bytes(), rig.kernel_time(set)?));
            }
            Ok(points)
        })?;
        Ok(RateCosts { pack, unpack, kernels })
    }
}

/// Zero-copy's kernels over 64 buffers of three sizes: their launches and their rate over mapped memory,
/// the best of runs.
fn zero_copy_cost(rig: &mut SmallCopiesRig, sets: &CalibrationSets) -> anyhow::Result<CopyCost> {
    let [cost] = fit_again("zero-copy's kernels", || {
        let mut points = Vec::new();
        for set in &sets.spread {
            let run = rig.run_set(set, &[TransferWay::ZeroCopy])?;
            points.push((set.bytes(), run.ways[0].gpu.min_ms));
        }
        Ok([points])
    })?;
    Ok(cost)
}

/// How many times [`fit_again`] measures at most.
const FIT_TRIES: usize = 3;

/// `t = α + n/β` fitted to each list of points `measure` takes, measured again, up to [`FIT_TRIES`]
/// times in all, where a fit fails: one slow look at a small size (a thread of the host's, say, that
/// took milliseconds to wake) can make the times of a busy machine shrink with size. `what` names the
/// points in the error where every try failed.
fn fit_again<const K: usize>(
    what: &str,
    mut measure: impl FnMut() -> anyhow::Result<[Vec<(usize, f64)>; K]>,
) -> anyhow::Result<[CopyCost; K]> {
    let mut tries = 1;
    loop {
        let fits: anyhow::Result<Vec<CopyCost>> = measure()?.iter().map(|p| CopyCost::fit(p)).collect();
        match fits {
            Ok(fits) => return Ok(fits.try_into().unwrap_or_else(|_| unreachable!("one fit a list"))),
            Err(e) if tries == FIT_TRIES => {
                let why = format!("{what}: measured {FIT_TRIES} times, no fit (a busy machine can do this)");
                return Err(e.context(why));
            }
            Err(_) => tries += 1,
        }
    }
}

/// The pool's threads packing and unpacking together, alone and beside the copies: what the host's
/// memory, and its speed at the moment, decide.
struct CrewCosts {
    pack_threads: usize,
    crew_pack: CopyCost,
    crew_unpack: CopyCost,
    busy: BusyRates,
}

impl CrewCosts {
    /// The crew over 1 and 16 MiB (its start and its rate together), then the copies and the crew at
    /// once over 16 MiB.
    fn measure(rig: &mut SmallCopiesRig, sets: &CalibrationSets) -> anyhow::Result<CrewCosts> {
        let [crew_pack, crew_unpack] = fit_again("the crew's packing and unpacking", || {
            let mut points = [Vec::new(), Vec::new()];
            for set in [&sets.spread[1], &sets.big] {
                let (pack, unpack) = rig.cpu_side(set, true)?;
                points[0].push((set.bytes(), pack));
                points[1].push((set.bytes(), unpack));
            }
            Ok(points)
        })?;
        let pack_threads = crew_threads(PackLayout::new(&BufferPlacement::new(&sets.big)).items);
        // Each one's rate beside the other (the crew's start taken off its time, as the packed way's model
        // adds it).
        let [(up, pack), (down, unpack)] = rig.copies_beside_cpu(&sets.big)?;
        let bytes = sets.big.bytes() as f64;
        let rate = |ms: f64| bytes / (ms.max(1e-6) * 1e6);
        let busy = BusyRates {
            htod_gbps: rate(up),
            pack_gbps: rate(pack - crew_pack.alpha_us * 1e-3),
            dtoh_gbps: rate(down),
            unpack_gbps: rate(unpack),
        };
        Ok(CrewCosts { pack_threads, crew_pack, crew_unpack, busy })
    }
}

/// Runs of each part [`SmallCopiesRig::packed_parts`] takes the best of.
pub const PARTS_RUNS: usize = 7;

impl SmallCopiesRig {
    /// The best GPU time of one copy H2D of each of `sizes` bytes, and of one D2H, as `(bytes, ms)`.
    pub fn copy_times(&mut self, sizes: &[usize]) -> anyhow::Result<[Vec<(usize, f64)>; 2]> {
        let (gpu, s0, r) = (&self.gpu, &self.streams[..1], self.repeats);
        let (src, dst, d_packed) = (&self.host.packed_htod, &mut self.host.packed_dtoh, &mut self.device.packed);
        let (mut htod_times, mut dtoh_times) = (Vec::new(), Vec::new());
        for &bytes in sizes {
            anyhow::ensure!(bytes <= src.len() && bytes <= d_packed.len(), "copies of {bytes} bytes in a smaller rig");
            let htod = measure_best(r, 30, 5.0, || {
                Ok(gpu.timed(s0, |s| s.stream(0).htod(&src[..bytes], s.device(d_packed).slice(0..bytes)))?)
            })?;
            let dtoh = measure_best(r, 30, 5.0, || {
                Ok(gpu.timed(s0, |s| s.stream(0).dtoh(s.device(d_packed).slice(0..bytes), &mut dst[..bytes]))?)
            })?;
            htod_times.push((bytes, htod));
            dtoh_times.push((bytes, dtoh));
        }
        Ok([htod_times, dtoh_times])
    }

    /// The wall time of a timed scope on one stream that queues nothing: its fork, join and
    /// synchronization, what every round trip pays once.
    pub fn empty_scope(&mut self) -> anyhow::Result<Stats> {
        let (gpu, s0) = (&self.gpu, &self.streams[..1]);
        let [wall] = measure_parts_within(self.repeats, BUDGET_MS, || {
            let t = Instant::now();
            gpu.timed(s0, |_| Ok::<_, anyhow::Error>(()))?;
            Ok([ms(t)])
        })?;
        Ok(wall)
    }

    /// The best GPU time of the copy kernel over `set`, scattering then gathering, in device memory (its
    /// table copied H2D first).
    pub fn kernel_time(&mut self, set: &BufferSet) -> anyhow::Result<f64> {
        let places = BufferPlacement::new(set);
        let SmallCopiesRig { gpu, kernels, streams, device, repeats, .. } = self;
        let fits = places.device_len <= device.arena.len() && places.packed_len <= device.packed.len();
        anyhow::ensure!(fits, "the rig is too small");
        let (s0, table, n, largest) = (&streams[..1], places.packed_table(), places.count(), places.largest());
        gpu.scope(s0, |s| s.stream(0).htod(&table, s.device(&mut device.tables).slice(0..3 * n)))?;
        measure_best(*repeats, 30, 5.0, || {
            Ok(gpu.timed(s0, |s| {
                let (packed, arena) =
                    (s.device(&mut device.packed).slice(0..places.packed_len), s.device(&mut device.arena));
                let table = s.device(&mut device.tables).slice(0..3 * n).read_only();
                kernels.copy_by_table(s.stream(0), TableCopy::Scatter, packed.read_only(), table, arena, largest)?;
                kernels.copy_by_table(s.stream(0), TableCopy::Gather, arena.read_only(), table, packed, largest)
            })?)
        })
    }

    /// The copies and the crew at once over `set`, as the packed way runs them: a copy of the set's
    /// bytes up (from the pinned buffer the packed way copies down into, which nothing else touches
    /// meanwhile) while the crew packs the set, then one down (into the one it packs into) while the crew
    /// unpacks. [(the copy's GPU time, the crew's host time)] up, then down, each the median of five, ms.
    pub fn copies_beside_cpu(&mut self, set: &BufferSet) -> anyhow::Result<[(f64, f64); 2]> {
        let places = BufferPlacement::new(set);
        let (bytes, threads) = (places.packed_len, crew_threads(PackLayout::new(&places).items));
        let SmallCopiesRig { gpu, streams, host, device, .. } = self;
        let HostBuffers { h_in, h_out, packed_htod, packed_dtoh } = host;
        anyhow::ensure!(bytes <= packed_htod.len() && bytes <= device.packed.len(), "the rig is too small");
        let s0 = &streams[..1];
        let srcs = places.host_slices(h_in);
        // Up's GPU and host times, then down's.
        let mut times: [Vec<f64>; 4] = Default::default();
        for _ in 0..5 {
            let mut cpu = 0.0;
            let gpu_ms = gpu.timed(s0, |s| {
                s.stream(0).htod(&packed_dtoh[..bytes], s.device(&mut device.packed).slice(0..bytes))?;
                cpu = host_ms(|| pack_all(&places, &srcs, &mut packed_htod[..], threads)).1;
                Ok::<_, anyhow::Error>(())
            })?;
            times[0].push(gpu_ms);
            times[1].push(cpu);
            let gpu_ms = gpu.timed(s0, |s| {
                s.stream(0).dtoh(s.device(&mut device.packed).slice(0..bytes), &mut packed_htod[..bytes])?;
                let outs = places.host_slices_mut(h_out);
                cpu = host_ms(|| unpack_all(&places, &packed_dtoh[..], outs, threads)).1;
                Ok::<_, anyhow::Error>(())
            })?;
            times[2].push(gpu_ms);
            times[3].push(cpu);
        }
        let [up, pack, down, unpack] = times.map(|t| Stats::from_samples(&t).map(|s| s.median_ms));
        Ok([(up?, pack?), (down?, unpack?)])
    }

    /// The packed way's CPU side alone over `set`, in the rig's own buffers (the host buffers, and the
    /// pinned packed ones): packing and unpacking, on one thread or, `crew`, on the threads the packed way
    /// shares its items among (the pool's threads woken each time, as the packed way wakes them), the median
    /// of five, ms.
    pub fn cpu_side(&mut self, set: &BufferSet, crew: bool) -> anyhow::Result<(f64, f64)> {
        let (_, pack, unpack) = self.cpu_side_runs(set, crew, 5);
        let median = |t: &[f64]| Stats::from_samples(t).map(|s| s.median_ms);
        Ok((median(&pack)?, median(&unpack)?))
    }

    /// [`Self::cpu_side`]'s packing and unpacking, `runs` of each, ms, and the threads they ran on.
    fn cpu_side_runs(&mut self, set: &BufferSet, crew: bool, runs: usize) -> (usize, Vec<f64>, Vec<f64>) {
        let places = BufferPlacement::new(set);
        let threads = if crew { crew_threads(PackLayout::new(&places).items) } else { 1 };
        let host = &mut self.host;
        let srcs = places.host_slices(&host.h_in);
        let pack =
            (0..runs).map(|_| host_ms(|| pack_all(&places, &srcs, &mut host.packed_htod[..], threads)).1).collect();
        let unpack = (0..runs)
            .map(|_| {
                let outs = places.host_slices_mut(&mut host.h_out);
                host_ms(|| unpack_all(&places, &host.packed_dtoh[..], outs, threads)).1
            })
            .collect();
        (threads, pack, unpack)
    }

    /// The packed way's CPU side on its threads, the best of seven runs of each part: what the lesson's
    /// grid holds the packed way against. The best, since a floor is wanted, and a run disturbed by
    /// the host (one of 935 µs where the others took 145) would make any other figure a poor one.
    pub fn packed_parts(&mut self, set: &BufferSet) -> anyhow::Result<PackedParts> {
        let (threads, pack, unpack) = self.cpu_side_runs(set, true, PARTS_RUNS);
        let best = |t: &[f64]| Stats::from_samples(t).map(|s| s.min_ms);
        Ok(PackedParts { threads, pack_ms: best(&pack)?, unpack_ms: best(&unpack)? })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use cuda_scope::SrcOrder;

    use super::*;
    use crate::plan::rivals;

    fn cost(alpha_us: f64, beta_gbps: f64) -> CopyCost {
        CopyCost { alpha_us, beta_gbps, half_rate_bytes: alpha_us * 1e-6 * beta_gbps * 1e9, worst_miss: 0.0 }
    }

    /// ModelCosts of the sizes this project's runs measure: 6 µs per copy at 55 GB/s, 4 µs to queue one,
    /// a batch 10 µs + 1 µs a buffer, a graph 5 µs + 2.5 µs a buffer, packing 0.05 µs a buffer at 10 GB/s,
    /// kernels 8 µs at 400 GB/s, zero-copy 8 µs at 25 GB/s; the scope's coalesced copies 4 µs a copy each
    /// way (7 from pageable memory), or a launch of 9 µs and 40-45 GB/s.
    pub(crate) fn h200() -> ModelCosts {
        ModelCosts {
            htod: cost(6.0, 55.0),
            dtoh: cost(5.5, 55.0),
            call_us: 4.0,
            each_gpu: LinearCost { fixed_us: 4.0, per_buffer_us: 6.0 },
            each_host: LinearCost { fixed_us: 2.0, per_buffer_us: 8.0 },
            scope_us: 10.0,
            batch_beyond: LinearCost { fixed_us: 5.0, per_buffer_us: 0.7 },
            batch_host: LinearCost { fixed_us: 5.0, per_buffer_us: 0.3 },
            graph_gpu: LinearCost { fixed_us: 5.0, per_buffer_us: 2.5 },
            graph_host: LinearCost { fixed_us: 4.0, per_buffer_us: 0.01 },
            pack: cost(0.05, 10.0),
            unpack: cost(0.05, 10.0),
            pack_threads: 8,
            crew_pack: cost(30.0, 40.0),
            crew_unpack: cost(30.0, 40.0),
            busy: BusyRates { htod_gbps: 55.0, pack_gbps: 40.0, dtoh_gbps: 55.0, unpack_gbps: 40.0 },
            packed_beyond: ByteCurve::zero(),
            kernels: cost(8.0, 400.0),
            zero_copy: cost(8.0, 25.0),
            coalescing: Some(coalescing()),
            hold_us: 0.1,
        }
    }

    /// The scope's model of its coalesced copies in [`h200`]'s figures: the one place the lesson's tests
    /// write them.
    fn coalescing() -> CopyModel {
        CopyModel {
            each_up_us: 4.0,
            each_down_us: 4.0,
            each_up_pageable_us: 7.0,
            each_down_pageable_us: 7.0,
            engine_gbps: 50.0,
            kernel_us: 9.0,
            kernel_up_gbps: 40.0,
            kernel_down_gbps: 45.0,
            pack_gbps: 10.0,
            fit_ms: 2.0,
        }
    }

    /// The coalesced loop as the scope holds it, each group as the scope's model predicts it: one launch a
    /// direction for 1000 x 4 KiB on one stream (a group of 4 MiB), one a stream on four; copies past what
    /// the scope holds each on its own. Then the round trip: the copies up beside the holding of those down.
    #[test]
    fn the_coalesced_loop_is_a_launch_a_group_as_the_scope_holds_them() {
        let c = h200();
        let m = c.coalescing.unwrap();
        let us = |sizes: &[usize], streams: usize| coalesced_ms(&m, sizes, streams, false).map(|ms| ms * 1e3);
        let none = CopyCounts::default();
        let one_way = |way: CopyWay, copies: usize, bytes: usize| {
            let group = (0..copies).fold(none, |g, _| g.add(bytes, false));
            [m.predict(way, group, none), m.predict(way, none, group)]
        };
        let near = |a: [f64; 2], b: [f64; 2]| (a[0] - b[0]).abs() < 1e-6 && (a[1] - b[1]).abs() < 1e-6;
        let launch = one_way(CopyWay::Kernel, 1000, 4096);
        assert!(near(us(&[4096; 1000], 1), launch), "{:?}", us(&[4096; 1000], 1));
        let four = one_way(CopyWay::Kernel, 250, 4096).map(|l| 4.0 * l);
        assert!(near(us(&[4096; 1000], 4), four), "{:?}", us(&[4096; 1000], 4));
        let alone = one_way(CopyWay::Each, 1, 1 << 20).map(|each| 2.0 * each);
        assert!(near(us(&[1 << 20; 2], 1), alone), "two copies of 1 MiB, each alone, up and down");
        let p = c.predict(
            TransferWay::Each { streams: 1, pageable: false, coalesced: true },
            &BufferSet::uniform(1000, 4096),
        );
        // 1000 copies held up (100 µs), the launch up (longer) beside 1000 held down, then the launch down.
        assert!(launch[0] > 100.0, "{launch:?}");
        let want = 100.0 + launch[0] + launch[1] + c.scope_us;
        assert!((p.wall_ms * 1e3 - want).abs() < 1e-6, "{p:?}, {want}");
        assert!((p.host_ms * 1e3 - 200.0).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn the_packed_correction_is_measured_against_the_parts_alone() {
        let set = BufferSet::uniform(1000, 4096);
        let mut c = h200();
        let parts = c.packed_ms(&set).2;
        c.packed_beyond = ByteCurve::through(vec![(1 << 20, 0.05), (16 << 20, 0.05)]);
        assert!((c.packed_ms(&set).2 - parts - 0.05).abs() < 1e-12, "the correction is in the prediction");
        let (bytes, beyond) = c.packed_beyond_point(&set, parts + 0.079);
        assert_eq!(bytes, BufferPlacement::new(&set).packed_len);
        assert!((beyond - 0.079).abs() < 1e-12, "not less the correction already held: {beyond}");
    }

    #[test]
    fn a_line_through_two_counts() {
        let l = LinearCost::through((16, 0.026), (256, 0.266));
        assert!((l.per_buffer_us - 1.0).abs() < 1e-9 && (l.fixed_us - 10.0).abs() < 1e-9, "{l:?}");
        assert_eq!(LinearCost::through((16, 0.03), (256, 0.02)).per_buffer_us, 0.0, "never below zero");
    }

    #[test]
    fn many_tiny_buffers_are_not_copied_one_by_one_and_few_large_ones_are_no_worse_so() {
        let c = h200();
        let ways = rivals(true, true);
        let best = |set: &BufferSet| {
            let p: Vec<Prediction> = ways.iter().map(|w| c.predict(*w, set)).collect();
            p.into_iter().min_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms)).unwrap()
        };
        let tiny = BufferSet::uniform(1000, 256);
        let each = c.predict(TransferWay::Each { streams: 1, pageable: false, coalesced: false }, &tiny);
        assert!((each.gpu_ms - (4e-3 + 1000.0 * (6e-3 + 512.0 / 55e6))).abs() < 1e-9, "{each:?}");
        assert!(
            (each.host_ms - (2e-3 + 8.0)).abs() < 1e-9 && each.wall_ms > each.host_ms,
            "the host holds it: {each:?}"
        );
        assert!(!matches!(best(&tiny).way, TransferWay::Each { .. }), "{:?}", best(&tiny));
        // Four buffers of 16 MiB: the per-copy cost is lost in the bytes; one memcpy each is within 10%
        // of the best.
        let large = BufferSet::uniform(4, 16 << 20);
        let (b, e) =
            (best(&large), c.predict(TransferWay::Each { streams: 1, pageable: false, coalesced: false }, &large));
        assert!(e.wall_ms / b.wall_ms < 1.1, "{b:?} {e:?}");
    }

    #[test]
    fn a_batch_copies_once_its_call_returns() {
        let c = h200();
        let batch = TransferWay::Batch { order: SrcOrder::StreamOrder, pageable: false };
        let at = |bytes: usize| bytes as f64 / 55e6;
        // Many tiny buffers: the calls hold it, and the copies down come after the second.
        let tiny = c.predict(batch, &BufferSet::uniform(1000, 256));
        let host = 5e-3 + 1000.0 * 0.3e-3;
        assert!((tiny.host_ms - host).abs() < 1e-12, "{tiny:?}");
        assert!((tiny.gpu_ms - (host + at(256_000) + 1000.0 * 0.7e-3 + 5e-3)).abs() < 1e-9, "{tiny:?}");
        // Four of 16 MiB: the copies up run beside the call down and take longer, then the copies down.
        let large = c.predict(batch, &BufferSet::uniform(4, 16 << 20));
        let host = 5e-3 + 4.0 * 0.3e-3;
        let beyond = 5e-3 + 4.0 * 0.7e-3;
        assert!((large.gpu_ms - (host / 2.0 + 2.0 * at(64 << 20) + beyond)).abs() < 1e-9, "{large:?}");
        assert!((large.wall_ms - (large.gpu_ms + 10e-3)).abs() < 1e-12, "the GPU and the scope: {large:?}");
    }

    /// A fit whose times shrink with size (one slow look at the small size) is measured again, and
    /// every fit of the try that works is kept; where every try fails, the error says what and how often.
    #[test]
    fn a_fit_that_fails_is_measured_again_then_named() {
        let (good, bad) = (vec![(1 << 10, 0.010), (1 << 20, 0.030)], vec![(1 << 10, 3.0), (1 << 20, 0.030)]);
        let mut tries = 0;
        let [a, b] = fit_again("x", || {
            tries += 1;
            Ok([good.clone(), if tries < 2 { bad.clone() } else { good.clone() }])
        })
        .unwrap();
        assert_eq!((tries, a, b), (2, CopyCost::fit(&good).unwrap(), CopyCost::fit(&good).unwrap()));
        tries = 0;
        let e = fit_again("the crew's packing", || {
            tries += 1;
            Ok([bad.clone()])
        })
        .unwrap_err();
        assert_eq!(tries, FIT_TRIES);
        let said = format!("{e:#}");
        assert!(said.starts_with("the crew's packing: measured 3 times, no fit"), "{said}");
        assert!(said.contains("the times do not grow with size"), "{said}");
        tries = 0;
        let failing: anyhow::Result<[CopyCost; 1]> = fit_again("y", || {
            tries += 1;
            anyhow::bail!("the GPU fell off the bus")
        });
        assert_eq!(failing.unwrap_err().to_string(), "the GPU fell off the bus");
        assert_eq!(tries, 1, "a failed measurement is not retried");
    }

    #[test]
    fn packing_uses_threads_where_they_pay() {
        let c = h200();
        // 100 KiB: two items, one piece: the crew starts (30 µs), packs it, then its copies and the kernels,
        // then the crew unpacks it; every part on top of the one before.
        let small = BufferSet::uniform(100, 1024);
        let (gpu, _, wall) = c.packed_ms(&small);
        let (packed, unpacked) =
            (30e-3 + 102_400.0 / 40e6 + 100.0 * 0.05e-3 / 2.0, 102_400.0 / 40e6 + 100.0 * 0.05e-3 / 2.0);
        let copies = c.htod.ms(102_400) + c.kernels.ms(102_400) + c.dtoh.ms(102_400);
        assert!((gpu - (packed + copies)).abs() < 1e-9, "{gpu}");
        assert!((wall - (gpu + unpacked + 10e-3)).abs() < 1e-9, "{wall}");
        // 64 MiB in sixteen pieces, the crew's packing pipelined with the copies: far less than packing it all
        // on one thread, then copying, then unpacking; and no less than the copies and the crew's start.
        let big = BufferSet::uniform(64, 1 << 20);
        let (_, _, wall) = c.packed_ms(&big);
        let serial = 2.0 * (64 << 20) as f64 / 10e6 + 2.0 * c.htod.ms(64 << 20);
        assert!(wall < 0.6 * serial, "{wall} against {serial}");
        assert!(wall > 30e-3 + 2.0 * (64 << 20) as f64 / 55e6, "{wall}");
    }

    #[test]
    fn copies_beside_the_crew_slow_the_pipeline_only_where_they_run_at_once() {
        let mut c = h200();
        let (one, many) = (BufferSet::uniform(100, 1024), BufferSet::uniform(1000, 4096)); // one piece, eight
        let before = (c.packed_ms(&one).2, c.packed_ms(&many).2);
        c.busy = BusyRates { htod_gbps: 30.0, pack_gbps: 20.0, dtoh_gbps: 30.0, unpack_gbps: 20.0 };
        let after = (c.packed_ms(&one).2, c.packed_ms(&many).2);
        assert_eq!(before.0, after.0, "one piece: nothing runs at once");
        let bytes = 1000 * 4096;
        let at = |gbps: f64| bytes as f64 / (gbps * 1e6);
        // No faster than both copies at their busy rates, nor slower than every part one after another.
        let serial = 30e-3 + 2.0 * at(20.0) + 2.0 * (8.0 * 6e-3 + at(30.0)) + c.kernels.ms(bytes) + 10e-3;
        assert!(after.1 > before.1 && after.1 > 2.0 * at(30.0) && after.1 < serial, "{after:?} {serial}");
    }

    #[test]
    fn the_packed_correction_is_measured_near_the_sets_packed_size_unless_1_or_16_mib_is() {
        let like = |spec: &str| CalibrationSets::for_set(&BufferSet::parse(spec).unwrap()).like.map(|s| s.count());
        assert_eq!(like("4KiB*1000"), Some(250), "4,096,000 bytes in 16 KiB buffers");
        assert_eq!(like("model"), Some(768));
        assert_eq!(like("17*100000"), Some(196), "each buffer padded to 32 bytes: 3.2 MB packed");
        assert_eq!(like("4*100"), Some(1), "one buffer at the least");
        assert_eq!(like("1GiB*2"), Some(4096), "64 MiB at the most");
        assert_eq!(
            (like("16KiB*64"), like("1MiB*15"), like("1MiB*16")),
            (None, None, None),
            "within a tenth of 1 or 16 MiB"
        );
        let sets = CalibrationSets::for_set(&BufferSet::parse("4KiB*1000").unwrap());
        let sizes: Vec<usize> = sets.packed().iter().map(|s| s.bytes()).collect();
        assert_eq!(sizes, [1 << 20, 250 << 14, 16 << 20], "by size");
        assert_eq!(sets.all().count(), 7);
    }

    #[test]
    fn a_curve_through_a_few_sizes_runs_straight_between_them_and_beyond() {
        let mib = 1 << 20;
        let c = ByteCurve::through(vec![(16 * mib, 0.090), (mib, 0.030), (4 * mib, 0.060), (4 * mib, 0.050)]);
        assert_eq!(c.points, vec![(mib, 0.030), (4 * mib, 0.055), (16 * mib, 0.090)], "sorted, a shared size's mean");
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(near(c.ms(mib), 0.030) && near(c.ms(4 * mib), 0.055) && near(c.ms(16 * mib), 0.090));
        assert!(near(c.ms(2 * mib + mib / 2), 0.0425), "halfway between 1 and 4 MiB");
        assert!(near(c.ms(0), 0.030 - 0.025 / 3.0) && near(c.ms(28 * mib), 0.125), "the end segments carried on");
        assert_eq!(ByteCurve::zero().ms(123), 0.0);
        assert_eq!(ByteCurve::through(vec![(mib, 0.02)]).ms(5 * mib), 0.02, "one size: flat");
    }

    #[test]
    fn what_the_packed_way_took_beyond_its_parts_is_added_by_its_bytes() {
        let l = ByteCurve::through(vec![(1 << 20, 0.030), (16 << 20, 0.090)]);
        let mut c = h200();
        let set = BufferSet::uniform(1000, 4096);
        let before = c.packed_ms(&set);
        c.packed_beyond = l.clone();
        let after = c.packed_ms(&set);
        let added = l.ms(1000 * 4096);
        assert!((after.2 - before.2 - added).abs() < 1e-12 && after.0 == before.0, "{before:?} {after:?}");
        // Never faster than its copies and kernels and the scope, whatever the correction says.
        c.packed_beyond = ByteCurve::through(vec![(0, -1e3)]);
        let floor = c.packed_ms(&set);
        assert!((floor.2 - (floor.0 + 10e-3)).abs() < 1e-12, "{floor:?}");
    }

    #[test]
    fn the_costs_read_as_lines() {
        let lines = h200().describe();
        assert!(lines[0].starts_with("one copy H2D: 6.0 µs + n / 55.0 GB/s"), "{}", lines[0]);
        assert!(lines
            .iter()
            .any(|l| l.contains("a batch up and back: host 5.0 µs + 0.30 µs a buffer; the GPU beyond")));
    }
}
