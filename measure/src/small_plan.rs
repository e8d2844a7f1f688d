//! Which way moves a given set of small buffers fastest: a model built from costs measured in the same
//! run, its recommendation and prediction, then every way run on the set and held against what the
//! model said. A model, not a bound: it adds up what each way's parts cost alone.
//!
//! The costs: one copy each way as `t = α + n/β` ([`CopyCost`], single copies from 256 B to 4 MiB); what
//! the host spends queueing one copy through the scope, and a round trip's fork, join and
//! synchronization; one copy per buffer's, a batch's and a graph's GPU time and host time as a fixed
//! part plus a part per buffer (from 16 and 1024 buffers of 256 B); the CPU's packing rate (one thread over buffers of 256 B
//! to 256 KiB, per buffer and per byte, and the pool's threads together over 16 MiB in pieces); the scatter
//! and gather kernels', and zero-copy's, as a launch and a rate over the bytes. Each way's round trip
//! is then the sum of its parts (the GPU's and the host's overlapping where they do):
//!
//! | way | GPU | wall |
//! | --- | --- | --- |
//! | memcpy each | fixed + n · per buffer + B/β↑ + B/β↓ | the larger of the GPU and the 2n calls, and the scope |
//! | batch | fixed + n · per buffer + B/β↑ + B/β↓ | the larger of the GPU and the two calls, and the scope |
//! | packed | each piece's copy up once it is packed (the pieces packed on the pool's threads, a wave at a time), the kernels, each piece's copy back | the last piece unpacked once it landed, and the scope |
//! | graph | fixed + n · per buffer + B/β↑ + B/β↓ | the larger of the launch and the GPU (the GPU starts while the launch goes on), and the scope |
//! | zero-copy | the kernels over mapped memory | the larger of the GPU and two calls, and the scope |

use serde::Serialize;

use common::{Gpu, SrcOrder};
use kernels::Kernels;

use crate::{
    fit::CopyCost,
    report::Table,
    small::{pieces, us, Layout, Rig, Set, SetRun, Way},
    timing::Repeats,
};

/// A cost with a fixed part and a part per buffer, in µs.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Linear {
    pub fixed_us: f64,
    pub per_buffer_us: f64,
}

impl Linear {
    /// Through `(buffers, ms)` at two counts; neither part below zero.
    pub fn through(a: (usize, f64), b: (usize, f64)) -> Linear {
        let per = ((b.1 - a.1) / (b.0 as f64 - a.0 as f64) * 1e3).max(0.0);
        Linear { fixed_us: (a.1 * 1e3 - a.0 as f64 * per).max(0.0), per_buffer_us: per }
    }

    pub fn ms(&self, buffers: usize) -> f64 {
        (self.fixed_us + buffers as f64 * self.per_buffer_us) * 1e-3
    }
}

/// What the model is built from, all measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct Costs {
    /// One copy up, and one down, over sizes: GPU time.
    pub up: CopyCost,
    pub down: CopyCost,
    /// The host's time to queue one copy through the scope, µs.
    pub call_us: f64,
    /// One copy per buffer each way: GPU, and the host in the calls; the bytes' time at the copies'
    /// rates comes on top.
    pub each_gpu: Linear,
    pub each_host: Linear,
    /// A round trip's fork, join and synchronization: a timed scope that queues nothing, wall µs.
    pub scope_us: f64,
    /// A batch up and one back (stream order): GPU, and the host in the two calls; the bytes' time at
    /// the copies' rates comes on top.
    pub batch_gpu: Linear,
    pub batch_host: Linear,
    /// A graph of every copy both ways, replayed: GPU, and the host in `cudaGraphLaunch`.
    pub graph_gpu: Linear,
    pub graph_host: Linear,
    /// The CPU copying the host's buffers into the pinned packed one, and out of it, one thread: α per
    /// buffer, β its rate.
    pub pack: CopyCost,
    pub unpack: CopyCost,
    /// The threads the packed way packs on (the pool's), and the rates they reach together over 16 MiB
    /// in pieces, GB/s.
    pub pack_threads: usize,
    pub pack_threads_gbps: f64,
    pub unpack_threads_gbps: f64,
    /// The scatter and the gather kernels together, in device memory: α their launches, β their rate
    /// over the buffers' bytes.
    pub kernels: CopyCost,
    /// Zero-copy's two kernels, over mapped host memory: α their launches, β their rate.
    pub zero_copy: CopyCost,
}

/// One way's predicted round trip, ms.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    pub way: Way,
    pub gpu_ms: f64,
    pub host_ms: f64,
    pub wall_ms: f64,
}

/// The ways the planner chooses among.
pub fn rivals(zero_copy: bool, batch: bool) -> Vec<Way> {
    let mut v = vec![Way::Each { streams: 1, pageable: false }];
    if batch {
        v.push(Way::Batch { order: SrcOrder::StreamOrder, pageable: false });
    }
    v.extend([Way::Packed, Way::Graph]);
    if zero_copy {
        v.push(Way::ZeroCopy);
    }
    v
}

/// The sets the costs are measured on: 16 and 1024 buffers of 256 B (fixed and per-buffer parts), 64
/// buffers of 256 B, 16 KiB and 256 KiB (rates), and 16 of 1 MiB (the CPU's threads together).
pub fn calibration_sets() -> (Set, Set, [Set; 3], Set) {
    let spread = [256, 16 << 10, 256 << 10].map(|s| Set::uniform(64, s));
    (Set::uniform(16, 256), Set::uniform(1024, 256), spread, Set::uniform(16, 1 << 20))
}

impl Costs {
    /// Measures every cost on `rig` (which must hold [`calibration_sets`]).
    pub fn measure(rig: &mut Rig<'_>, batch: bool, zero_copy: bool, r: Repeats) -> anyhow::Result<Costs> {
        let _phase = crate::timeline::phase("small copies: costs");
        let [ups, downs] = rig.copy_times(&[256, 4 << 10, 64 << 10, 1 << 20, 4 << 20], r)?;
        let scope_us = rig.empty_scope(r)?.median_ms * 1e3;
        let (few, many, spread, big) = calibration_sets();
        let mut tiny = vec![Way::Each { streams: 1, pageable: false }, Way::Graph];
        if batch {
            tiny.push(Way::Batch { order: SrcOrder::StreamOrder, pageable: false });
        }
        let (a, b) = (rig.run_set(&few, &tiny, r)?, rig.run_set(&many, &tiny, r)?);
        let point = |run: &SetRun, way: Way, host: bool| {
            let w = run.ways.iter().find(|w| w.way == way);
            w.map(|w| (run.count, if host { w.host.median_ms } else { w.gpu.median_ms }))
        };
        let line = |way: Way, host: bool| match (point(&a, way, host), point(&b, way, host)) {
            (Some(x), Some(y)) => Linear::through(x, y),
            _ => Linear { fixed_us: f64::NAN, per_buffer_us: f64::NAN },
        };
        let each = Way::Each { streams: 1, pageable: false };
        let call_us = point(&b, each, true).map_or(f64::NAN, |(n, ms)| ms * 1e3 / (2 * n) as f64);
        let batch_way = Way::Batch { order: SrcOrder::StreamOrder, pageable: false };
        let mut kernel_points = Vec::new();
        let mut zero_points = Vec::new();
        let (mut pack_points, mut unpack_points) = (Vec::new(), Vec::new());
        for set in &spread {
            kernel_points.push((set.bytes(), rig.kernel_time(set, r)?));
            let (pack, unpack) = rig.cpu_side(set, false);
            pack_points.push((set.sizes[0], pack / set.count() as f64));
            unpack_points.push((set.sizes[0], unpack / set.count() as f64));
            if zero_copy {
                let run = rig.run_set(set, &[Way::ZeroCopy], r)?;
                zero_points.push((set.bytes(), run.ways[0].gpu.min_ms));
            }
        }
        let pack_threads = rayon::current_num_threads().min(pieces(&Layout::new(&big)).len());
        let (pack, unpack) = rig.cpu_side(&big, true);
        let (pack_threads_gbps, unpack_threads_gbps) =
            (big.bytes() as f64 / (pack * 1e6), big.bytes() as f64 / (unpack * 1e6));
        let nothing = CopyCost { alpha_us: f64::NAN, beta_gbps: f64::NAN, half_rate_bytes: f64::NAN, worst_miss: 0.0 };
        Ok(Costs {
            up: CopyCost::fit(&ups)?,
            down: CopyCost::fit(&downs)?,
            call_us,
            each_gpu: line(each, false),
            each_host: line(each, true),
            scope_us,
            batch_gpu: line(batch_way, false),
            batch_host: line(batch_way, true),
            graph_gpu: line(Way::Graph, false),
            graph_host: line(Way::Graph, true),
            pack: CopyCost::fit(&pack_points)?,
            unpack: CopyCost::fit(&unpack_points)?,
            pack_threads,
            pack_threads_gbps,
            unpack_threads_gbps,
            kernels: CopyCost::fit(&kernel_points)?,
            zero_copy: if zero_copy { CopyCost::fit(&zero_points)? } else { nothing },
        })
    }

    /// The bytes of `n` buffers in all at the copies' rates, both ways, ms.
    fn bytes_ms(&self, bytes: usize) -> f64 {
        bytes as f64 * (1.0 / self.up.beta_gbps + 1.0 / self.down.beta_gbps) * 1e-6
    }

    /// Packing (or unpacking) one piece of `buffers` buffers and `bytes` bytes while `busy` threads pack
    /// at once, ms: a buffer's fixed cost each, and the bytes at one thread's rate, or at the threads'
    /// share of what they reach together, whichever is slower.
    pub fn piece_ms(&self, buffers: usize, bytes: usize, busy: usize) -> f64 {
        Self::cpu_ms(&self.pack, self.pack_threads_gbps, (buffers, bytes, busy))
    }

    /// Unpacking one piece, likewise.
    pub fn unpiece_ms(&self, buffers: usize, bytes: usize, busy: usize) -> f64 {
        Self::cpu_ms(&self.unpack, self.unpack_threads_gbps, (buffers, bytes, busy))
    }

    fn cpu_ms(one: &CopyCost, together_gbps: f64, (buffers, bytes, busy): (usize, usize, usize)) -> f64 {
        let share = together_gbps / busy.max(1) as f64;
        let gbps = if share.is_finite() { one.beta_gbps.min(share) } else { one.beta_gbps };
        buffers as f64 * one.alpha_us * 1e-3 + bytes as f64 / (gbps * 1e6)
    }

    /// The packed way's round trip over `set`, as it runs it (see `small::packed_round_trip`): the
    /// pieces packed on the pool, each copied up once packed; the kernels; each piece copied back, and
    /// unpacked once landed. (GPU span, host calls, wall), ms.
    pub fn packed_ms(&self, set: &Set) -> (f64, f64, f64) {
        let l = Layout::new(set);
        let pieces = pieces(&l);
        let threads = self.pack_threads.clamp(1, pieces.len());
        let call = self.call_us * 1e-3;
        let (mut copied, mut host) = (0.0f64, 0.0);
        for (p, piece) in pieces.iter().enumerate() {
            let bytes: usize = l.sizes[piece.clone()].iter().sum();
            // Pieces are packed `threads` at a time; this one is ready when its wave is done.
            let ready = ((p / threads) + 1) as f64 * self.piece_ms(piece.len(), bytes, threads);
            host += call;
            copied = copied.max(ready).max(host) + self.up.ms(bytes);
        }
        let kernels = self.kernels.ms(l.bytes());
        host += 2.0 * call;
        let mut landed = copied.max(host) + kernels;
        let mut unpacked = 0.0f64;
        for piece in &pieces {
            let bytes: usize = l.sizes[piece.clone()].iter().sum();
            landed += self.down.ms(bytes);
            unpacked = unpacked.max(landed) + self.unpiece_ms(piece.len(), bytes, 1);
        }
        host += 2.0 * pieces.len() as f64 * call;
        (landed, host, unpacked.max(landed) + self.scope_us * 1e-3)
    }

    /// What the model says `way` takes over `set`.
    pub fn predict(&self, way: Way, set: &Set) -> Prediction {
        let (n, bytes, scope) = (set.count(), set.bytes(), self.scope_us * 1e-3);
        let call = self.call_us * 1e-3;
        let (gpu_ms, host_ms, wall_ms) = match way {
            Way::Each { .. } => {
                // Copies back to back on one stream overlap part of each one's fixed cost: a line through
                // the run's own, not a copy's α taken n times.
                let gpu = self.each_gpu.ms(n) + self.bytes_ms(bytes);
                let host = self.each_host.ms(n);
                (gpu, host, gpu.max(host) + scope)
            }
            Way::Batch { .. } => {
                let gpu = self.batch_gpu.ms(n) + self.bytes_ms(bytes);
                let host = self.batch_host.ms(n);
                (gpu, host, gpu.max(host) + scope)
            }
            Way::Packed => self.packed_ms(set),
            Way::Graph => {
                // cudaGraphLaunch hands the nodes over as it goes: the GPU starts before the call returns.
                let gpu = self.graph_gpu.ms(n) + self.bytes_ms(bytes);
                let host = self.graph_host.ms(n);
                (gpu, host, host.max(gpu) + scope)
            }
            Way::ZeroCopy => {
                let gpu = self.zero_copy.ms(bytes);
                (gpu, 2.0 * call, gpu.max(2.0 * call) + scope)
            }
        };
        Prediction { way, gpu_ms, host_ms, wall_ms }
    }

    /// The costs in words, a line each.
    pub fn describe(&self) -> Vec<String> {
        let copy = |c: &CopyCost| format!("{:.1} µs + n / {:.1} GB/s", c.alpha_us, c.beta_gbps);
        let line = |l: &Linear| format!("{:.1} µs + {:.2} µs a buffer", l.fixed_us, l.per_buffer_us);
        let mut v = vec![
            format!("one copy up: {}; down: {}", copy(&self.up), copy(&self.down)),
            format!(
                "queueing a copy through the scope: {:.2} µs of the host; a round trip's fork, join, sync: {:.1} µs",
                self.call_us, self.scope_us
            ),
        ];
        if self.batch_gpu.fixed_us.is_finite() {
            v.push(format!("a batch up and back: GPU {}, host {}", line(&self.batch_gpu), line(&self.batch_host)));
        }
        v.push(format!("a graph replayed: GPU {}, host {}", line(&self.graph_gpu), line(&self.graph_host)));
        v.push(format!(
            "packing on the CPU: {:.2} µs a buffer at {:.1} GB/s on one thread, {:.1} GB/s on {}; unpacking {:.2} µs \
             a buffer at {:.1} GB/s, {:.1} GB/s on {}",
            self.pack.alpha_us,
            self.pack.beta_gbps,
            self.pack_threads_gbps,
            self.pack_threads,
            self.unpack.alpha_us,
            self.unpack.beta_gbps,
            self.unpack_threads_gbps,
            self.pack_threads
        ));
        v.push(format!("scatter and gather kernels: {}", copy(&self.kernels)));
        if self.zero_copy.alpha_us.is_finite() {
            v.push(format!("zero-copy kernels over mapped memory: {}", copy(&self.zero_copy)));
        }
        v
    }
}

/// The plan for one set: every rival predicted, the fastest recommended, then every rival run.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub set: String,
    pub costs: Costs,
    pub predictions: Vec<Prediction>,
    pub recommended: Way,
    pub run: SetRun,
}

impl Plan {
    /// Measures the costs on `rig`, predicts, and runs every rival on `set`.
    pub fn make(rig: &mut Rig<'_>, set: &Set, ways: &[Way], r: Repeats) -> anyhow::Result<Plan> {
        let batch = ways.iter().any(|w| matches!(w, Way::Batch { .. }));
        let zero_copy = ways.contains(&Way::ZeroCopy);
        let costs = Costs::measure(rig, batch, zero_copy, r)?;
        let predictions: Vec<Prediction> = ways.iter().map(|w| costs.predict(*w, set)).collect();
        let best = predictions.iter().min_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms)).expect("a way");
        let recommended = best.way;
        let run = rig.run_set(set, ways, r)?;
        Ok(Plan { set: set.describe(), costs, predictions, recommended, run })
    }

    /// Predicted against achieved, a row a way.
    pub fn table(&self) -> Table {
        let mut t =
            Table::new(&["way", "predicted µs", "achieved µs", "achieved / predicted", "GPU µs", "host µs", ""]);
        for (p, w) in self.predictions.iter().zip(&self.run.ways) {
            t.row(vec![
                w.name.clone(),
                us(p.wall_ms),
                us(w.wall.median_ms),
                format!("{:.2}", w.wall.median_ms / p.wall_ms),
                us(w.gpu.median_ms),
                us(w.host.median_ms),
                if p.way == self.recommended { "recommended".into() } else { String::new() },
            ]);
        }
        t
    }

    /// The verdict in a sentence: the recommendation, its prediction and what it achieved, and whether
    /// another way was faster.
    pub fn verdict(&self) -> String {
        let p = self.predictions.iter().find(|p| p.way == self.recommended).expect("the recommended way");
        let w = self.run.ways.iter().find(|w| w.way == self.recommended).expect("the recommended way ran");
        let fastest = self.run.fastest();
        let then = if fastest.way == self.recommended {
            "the fastest of all the ways run".to_string()
        } else {
            format!(
                "but {} was faster, {} µs ({:.2}x)",
                fastest.name,
                us(fastest.wall.median_ms),
                w.wall.median_ms / fastest.wall.median_ms
            )
        };
        format!(
            "for {}: {} is recommended, predicted {} µs; achieved {} µs ({:.2} of the prediction), {then}",
            self.set,
            w.name,
            us(p.wall_ms),
            us(w.wall.median_ms),
            w.wall.median_ms / p.wall_ms
        )
    }
}

/// Plans `set` on `gpu`: the rig for it and the calibration sets, the costs, the plan.
pub fn plan(gpu: &Gpu, kernels: &Kernels, set: &Set, ways: &[Way], streams: usize, r: Repeats) -> anyhow::Result<Plan> {
    let (few, many, spread, big) = calibration_sets();
    let layouts: Vec<Layout> = [set, &few, &many, &big].into_iter().chain(&spread).map(Layout::new).collect();
    let mut rig = Rig::new(gpu, kernels, &layouts, streams)?;
    Plan::make(&mut rig, set, ways, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(alpha_us: f64, beta_gbps: f64) -> CopyCost {
        CopyCost { alpha_us, beta_gbps, half_rate_bytes: alpha_us * 1e-6 * beta_gbps * 1e9, worst_miss: 0.0 }
    }

    /// Costs like the H200's: 6 µs per copy at 55 GB/s, 4 µs to queue one, a batch 10 µs + 1 µs a buffer,
    /// a graph 5 µs + 2.5 µs a buffer, packing 0.05 µs a buffer at 10 GB/s, kernels 8 µs at 400 GB/s,
    /// zero-copy 8 µs at 25 GB/s.
    fn h200() -> Costs {
        Costs {
            up: cost(6.0, 55.0),
            down: cost(5.5, 55.0),
            call_us: 4.0,
            each_gpu: Linear { fixed_us: 4.0, per_buffer_us: 6.0 },
            each_host: Linear { fixed_us: 2.0, per_buffer_us: 8.0 },
            scope_us: 10.0,
            batch_gpu: Linear { fixed_us: 10.0, per_buffer_us: 1.0 },
            batch_host: Linear { fixed_us: 5.0, per_buffer_us: 0.3 },
            graph_gpu: Linear { fixed_us: 5.0, per_buffer_us: 2.5 },
            graph_host: Linear { fixed_us: 4.0, per_buffer_us: 0.01 },
            pack: cost(0.05, 10.0),
            unpack: cost(0.05, 10.0),
            pack_threads: 8,
            pack_threads_gbps: 40.0,
            unpack_threads_gbps: 40.0,
            kernels: cost(8.0, 400.0),
            zero_copy: cost(8.0, 25.0),
        }
    }

    #[test]
    fn a_line_through_two_counts() {
        let l = Linear::through((16, 0.026), (256, 0.266));
        assert!((l.per_buffer_us - 1.0).abs() < 1e-9 && (l.fixed_us - 10.0).abs() < 1e-9, "{l:?}");
        assert_eq!(Linear::through((16, 0.03), (256, 0.02)).per_buffer_us, 0.0, "never below zero");
    }

    #[test]
    fn many_tiny_buffers_are_not_copied_one_by_one_and_few_large_ones_are_no_worse_so() {
        let c = h200();
        let ways = rivals(true, true);
        let best = |set: &Set| {
            let p: Vec<Prediction> = ways.iter().map(|w| c.predict(*w, set)).collect();
            p.into_iter().min_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms)).unwrap()
        };
        let tiny = Set::uniform(1000, 256);
        let each = c.predict(Way::Each { streams: 1, pageable: false }, &tiny);
        assert!((each.gpu_ms - (4e-3 + 1000.0 * (6e-3 + 512.0 / 55e6))).abs() < 1e-9, "{each:?}");
        assert!(
            (each.host_ms - (2e-3 + 8.0)).abs() < 1e-9 && each.wall_ms > each.host_ms,
            "the host holds it: {each:?}"
        );
        assert!(!matches!(best(&tiny).way, Way::Each { .. }), "{:?}", best(&tiny));
        // Four buffers of 16 MiB: the per-copy cost is lost in the bytes; one memcpy each is within 10%
        // of the best.
        let large = Set::uniform(4, 16 << 20);
        let (b, e) = (best(&large), c.predict(Way::Each { streams: 1, pageable: false }, &large));
        assert!(e.wall_ms / b.wall_ms < 1.1, "{b:?} {e:?}");
    }

    #[test]
    fn packing_uses_threads_where_they_pay() {
        let c = h200();
        // One piece: packed on one thread, then its copies and the kernels, then unpacked.
        let small = Set::uniform(100, 1024);
        let one = c.piece_ms(100, 102_400, 1);
        assert!((one - (100.0 * 0.05e-3 + 102_400.0 / 10e6)).abs() < 1e-9);
        let (gpu, _, wall) = c.packed_ms(&small);
        assert!(wall > gpu + one && gpu > one, "{gpu} {wall}");
        // Sixteen pieces on eight threads, pipelined with their copies: far less than packing it all on one
        // thread, then copying, then unpacking.
        let big = Set::uniform(64, 1 << 20);
        let (_, _, wall) = c.packed_ms(&big);
        let serial = 2.0 * (64 << 20) as f64 / 10e6 + 2.0 * c.up.ms(64 << 20);
        assert!(wall < 0.6 * serial, "{wall} against {serial}");
        assert!(c.piece_ms(4, 4 << 20, 8) > c.piece_ms(4, 4 << 20, 1), "threads share what they reach together");
    }

    #[test]
    fn the_costs_read_as_lines() {
        let lines = h200().describe();
        assert!(lines[0].starts_with("one copy up: 6.0 µs + n / 55.0 GB/s"), "{}", lines[0]);
        assert!(lines.iter().any(|l| l.contains("a batch up and back: GPU 10.0 µs + 1.00 µs a buffer")));
    }
}
