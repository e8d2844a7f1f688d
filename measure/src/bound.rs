//! A lower bound on the time of a copy-in, compute, copy-out pipeline, and what limits it.
//!
//! Each term is the time of a part of the pipeline's own work, run alone on the same data in the same
//! run, as one timed scope with the same fork and join as the pipeline's, and with at least the freedom
//! the pipeline has (more streams, fewer dependencies):
//!
//! | term | the part |
//! | --- | --- |
//! | uploads | every upload at once on many streams, then the last chunk's kernel and download |
//! | downloads | the first chunk's upload and kernel, then every download at once |
//! | copies both ways | every upload and every download at once, nothing ordering them |
//! | kernels | the first chunk's upload, then every kernel at once, then the last chunk's download |
//! | lanes in turn | the busiest lane's chunks (a stream's, or a reused buffer's), each chunk's upload, kernel and download one after another |
//!
//! The pipeline does all of each part's work with the same dependencies or more, so it cannot take less
//! time than any part: each term, the best (least) of several runs, is a lower bound within timing noise,
//! and so is the largest, whose name says what limits the run. Where a run takes longer than its bound,
//! what is missing is launch gaps, waits and engines slowing each other, which no part shows.

use serde::Serialize;

use common::{DeviceBuffer, Gpu, Stream};
use kernels::Kernels;

use crate::{
    report::fmt_ms,
    timing::{measure_best, Repeats, Stats},
    work::Work,
    ChunkPlan,
};

/// What limits a pipeline: the largest of its bound's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Bottleneck {
    Uploads,
    Downloads,
    BothDirections,
    Compute,
    Lanes,
}

impl Bottleneck {
    /// A word or two for a table.
    pub fn name(self) -> &'static str {
        match self {
            Bottleneck::Uploads => "uploads",
            Bottleneck::Downloads => "downloads",
            Bottleneck::BothDirections => "copies both ways",
            Bottleneck::Compute => "kernels",
            Bottleneck::Lanes => "lanes in turn",
        }
    }

    /// What it means, in a sentence.
    pub fn describe(self) -> &'static str {
        match self {
            Bottleneck::Uploads => "copy-bound: all the uploads, then the last chunk's kernel and download",
            Bottleneck::Downloads => "copy-bound: the first chunk's upload and kernel, then all the downloads",
            Bottleneck::BothDirections => "copy-bound: moving the data both ways at once, at the rate the link keeps with both directions busy",
            Bottleneck::Compute => "compute-bound: all the kernels, with the first upload before them and the last download after",
            Bottleneck::Lanes => "each stream (or buffer) runs its chunks' upload, kernel and download one after another: fill and drain, or per-operation latency, dominate",
        }
    }
}

/// What the parts of a run cost alone, in ms (best of the repeats).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartCosts {
    /// One chunk's upload, kernel and download alone, and all three back to back (for the notes).
    pub upload_ms: f64,
    pub kernel_ms: f64,
    pub download_ms: f64,
    pub chain_ms: f64,
    /// The parts in the module's table.
    pub uploads_ms: f64,
    pub downloads_ms: f64,
    pub copies_ms: f64,
    pub kernels_ms: f64,
    /// (lanes, ms): for each number of lanes, its busiest lane's chunks one after another.
    pub lanes: Vec<(usize, f64)>,
    /// The streams the "at once" parts ran on.
    pub streams: usize,
    /// (streams, ms): a timed scope with nothing in it, on that many streams: what forking to them and
    /// joining them back costs. A run on fewer streams than the parts pays less of it, which the bound
    /// takes off (it matters for runs of microseconds).
    pub empty: Vec<(usize, f64)>,
}

impl PartCosts {
    fn lanes_ms(&self, lanes: usize) -> f64 {
        self.lanes.iter().find(|l| l.0 == lanes).map_or(0.0, |l| l.1)
    }

    /// What the parts' fork and join cost more than a run's on `streams` streams (0 if not measured).
    fn extra_fork_join_ms(&self, streams: usize) -> f64 {
        let empty = |n: usize| self.empty.iter().find(|e| e.0 == n).map(|e| e.1);
        match (empty(self.streams), empty(streams)) {
            (Some(parts), Some(run)) => (parts - run).max(0.0),
            _ => 0.0,
        }
    }
}

/// A lower bound on a pipeline's time, with its terms.
#[derive(Clone, Debug, Serialize)]
pub struct Bound {
    pub ms: f64,
    pub limit: Bottleneck,
    pub terms: Vec<(Bottleneck, f64)>,
}

impl Bound {
    /// The bound for a run on `streams` streams whose chunks go to `lanes` lanes (streams, or buffers
    /// reused in turn).
    pub fn new(c: &PartCosts, lanes: usize, streams: usize) -> Bound {
        let extra = c.extra_fork_join_ms(streams);
        let terms = vec![
            (Bottleneck::Uploads, c.uploads_ms - extra),
            (Bottleneck::Downloads, c.downloads_ms - extra),
            (Bottleneck::BothDirections, c.copies_ms - extra),
            (Bottleneck::Compute, c.kernels_ms - extra),
            (Bottleneck::Lanes, c.lanes_ms(lanes)),
        ];
        let (limit, ms) = terms.iter().copied().fold((Bottleneck::Lanes, 0.0), |a, t| if t.1 > a.1 { t } else { a });
        Bound { ms, limit, terms }
    }
}

/// A pipeline's measured time held against its bound.
#[derive(Clone, Debug, Serialize)]
pub struct Judged {
    pub measured: Stats,
    pub bound: Bound,
    /// bound / measured: at most 1, within timing noise.
    pub efficiency: f64,
}

impl Judged {
    pub fn new(measured: Stats, bound: Bound) -> Judged {
        let efficiency = bound.ms / measured.median_ms;
        Judged { measured, bound, efficiency }
    }

    /// `6.004 ms, bound 5.62 ms (efficiency 0.936, 7% above its bound); limited by copies both ways`
    pub fn line(&self) -> String {
        let gap = if self.efficiency >= 0.98 {
            "at its bound".to_string()
        } else {
            format!("{:.0}% above its bound", 100.0 * (1.0 / self.efficiency - 1.0))
        };
        format!(
            "{}, bound {} (efficiency {:.3}, {gap}); limited by {}",
            fmt_ms(self.measured.median_ms),
            fmt_ms(self.bound.ms),
            self.efficiency,
            self.bound.limit.name()
        )
    }
}

/// What each chunk of a pipeline does between its upload and its download.
#[derive(Clone, Copy, Debug, Serialize)]
pub enum Steps {
    /// One upload, `work` in place, one download.
    InPlace(Work),
    /// Two uploads (a and b), `c = a + b`, one download (c).
    VectorAdd,
}

impl Steps {
    fn uploads(self) -> usize {
        match self {
            Steps::InPlace(_) => 1,
            Steps::VectorAdd => 2,
        }
    }

    /// The chunk's kernel on `range` of `d`, the first half of the scratch buffer; `c = a + b` reads
    /// its inputs from the second half, which only downloads read.
    fn run<'s>(
        self,
        kernels: &Kernels,
        on: common::ScopeStream<'s, '_>,
        d: common::Dev<'s, f32>,
        (range, n): (std::ops::Range<usize>, usize),
    ) -> anyhow::Result<()> {
        match self {
            Steps::InPlace(work) => work.run(kernels, on, d.slice(range)),
            Steps::VectorAdd => {
                let input = d.slice(n + range.start..n + range.end);
                kernels.vector_add(on, input, input, d.slice(range))
            }
        }
    }
}

/// The data a pipeline works on, for measuring its costs: its input, a place for its output, and a
/// device buffer twice as long as the input that the measurements may overwrite (uploads fill the
/// first half while downloads read the second, so that nothing orders them).
pub struct Workload<'a> {
    pub h_in: &'a [f32],
    pub h_out: &'a mut [f32],
    pub scratch: &'a mut DeviceBuffer<f32>,
}

/// Measures [`PartCosts`] for `plan` with `steps` per chunk, the busiest lane for each count in `lanes`, and
/// an empty scope on each count in `stream_counts` (the runs'). `streams` should be many (8 or more, and
/// at least the pipeline's): the "at once" parts spread over them.
#[allow(clippy::too_many_arguments)]
pub fn measure_costs(
    gpu: &Gpu,
    kernels: &Kernels,
    streams: &[Stream],
    plan: &ChunkPlan,
    steps: Steps,
    lanes: &[usize],
    stream_counts: &[usize],
    data: Workload<'_>,
    r: Repeats,
) -> anyhow::Result<PartCosts> {
    let uploads = steps.uploads();
    let Workload { h_in, h_out, scratch } = data;
    let n = plan.elements;
    anyhow::ensure!(
        h_in.len() == n && h_out.len() == n && scratch.len() >= 2 * n,
        "the workload does not match the plan"
    );
    let _phase = crate::timeline::phase("bound");
    // No part can use more streams than two per chunk (every upload and every download on its own),
    // and fanning out to more would cost the parts waits the run does not pay.
    let streams = &streams[..streams.len().min(2 * plan.chunks).max(1)];
    let k = streams.len();
    // The streams that run kernels or downloads besides the first, which must wait for it.
    let fan_out = 1..k.min(plan.chunks);
    let on = |c: &crate::Chunk| c.index % k;
    let first = plan.chunk(0);
    let last = plan.chunk(plan.chunks - 1);
    let smallest = plan.elements / plan.chunks;
    // One chunk alone, for the notes.
    let one = &streams[..1];
    let upload_ms =
        part(r, || gpu.timed(one, |s| s.stream(0).htod(&h_in[..smallest], s.device(scratch).slice(0..smallest))))?;
    let kernel_ms =
        part(r, || gpu.timed(one, |s| steps.run(kernels, s.stream(0), s.device(scratch), (0..smallest, n))))?;
    let download_ms =
        part(r, || gpu.timed(one, |s| s.stream(0).dtoh(s.device(scratch).slice(0..smallest), &mut h_out[..smallest])))?;
    let chain_ms = part(r, || {
        gpu.timed(one, |s| {
            let (d, s0) = (s.device(scratch), s.stream(0));
            for _ in 0..uploads {
                s0.htod(&h_in[..smallest], d.slice(0..smallest))?;
            }
            steps.run(kernels, s0, d, (0..smallest, n))?;
            s0.dtoh(d.slice(0..smallest), &mut h_out[..smallest])
        })
    })?;
    // Every upload at once, then the last chunk's kernel and download behind its upload.
    let uploads_ms = part(r, || {
        gpu.timed(streams, |s| {
            let d = s.device(scratch);
            for c in plan.iter() {
                for _ in 0..uploads {
                    s.stream(on(&c)).htod(&h_in[c.range()], d.slice(c.range()))?;
                }
            }
            steps.run(kernels, s.stream(on(&last)), d, (last.range(), n))?;
            s.stream(on(&last)).dtoh(d.slice(last.range()), &mut h_out[last.range()])
        })
    })?;
    // The first chunk's upload and kernel, then every download at once (from the second half of the
    // scratch buffer, which nothing writes, so that only the first kernel orders them).
    let downloads_ms = part(r, || {
        gpu.timed(streams, |s| {
            let (d, s0) = (s.device(scratch), s.stream(0));
            for _ in 0..uploads {
                s0.htod(&h_in[first.range()], d.slice(first.range()))?;
            }
            steps.run(kernels, s0, d, (first.range(), n))?;
            let computed = s0.record_event()?;
            fan_out.clone().try_for_each(|i| s.stream(i).wait_event(computed))?;
            for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
                s.stream(on(&c)).dtoh(d.slice(n + c.offset..n + c.offset + c.len), out)?;
            }
            Ok(())
        })
    })?;
    // Every upload (into the first half) and every download (from the second) at once, uploads and
    // downloads on streams of their own.
    let copies_ms = part(r, || {
        gpu.timed(streams, |s| {
            let d = s.device(scratch);
            let half = (k / 2).max(1);
            for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
                let up = s.stream(c.index % half);
                let down = s.stream((half + c.index % (k - half).max(1)).min(k - 1));
                for _ in 0..uploads {
                    up.htod(&h_in[c.range()], d.slice(c.range()))?;
                }
                down.dtoh(d.slice(n + c.offset..n + c.offset + c.len), out)?;
            }
            Ok(())
        })
    })?;
    // The first chunk's upload, then every kernel at once, then the last chunk's download behind its kernel.
    let kernels_ms = part(r, || {
        gpu.timed(streams, |s| {
            let (d, s0) = (s.device(scratch), s.stream(0));
            for _ in 0..uploads {
                s0.htod(&h_in[first.range()], d.slice(first.range()))?;
            }
            let uploaded = s0.record_event()?;
            fan_out.clone().try_for_each(|i| s.stream(i).wait_event(uploaded))?;
            for c in plan.iter() {
                steps.run(kernels, s.stream(on(&c)), d, (c.range(), n))?;
            }
            s.stream(on(&last)).dtoh(d.slice(last.range()), &mut h_out[last.range()])
        })
    })?;
    // The busiest lane: chunks 0, L, 2L, ... one after another on one stream.
    let mut lane_costs = Vec::new();
    for &l in lanes {
        let ms = part(r, || {
            gpu.timed(one, |s| {
                let (d, s0) = (s.device(scratch), s.stream(0));
                for (c, out) in plan.iter().zip(plan.split_mut(h_out)).filter(|(c, _)| c.index % l.max(1) == 0) {
                    for _ in 0..uploads {
                        s0.htod(&h_in[c.range()], d.slice(c.range()))?;
                    }
                    steps.run(kernels, s0, d, (c.range(), n))?;
                    s0.dtoh(d.slice(c.range()), out)?;
                }
                Ok(())
            })
        })?;
        lane_costs.push((l, ms));
    }
    let mut empty = Vec::new();
    for n in stream_counts.iter().copied().chain([k]).filter(|n| (1..=k).contains(n)) {
        if empty.iter().all(|e: &(usize, f64)| e.0 != n) {
            empty.push((n, part(r, || gpu.timed(&streams[..n], |_| Ok(())))?));
        }
    }
    Ok(PartCosts {
        upload_ms,
        kernel_ms,
        download_ms,
        chain_ms,
        uploads_ms,
        downloads_ms,
        copies_ms,
        kernels_ms,
        lanes: lane_costs,
        streams: k,
        empty,
    })
}

/// A part's time: the best of its runs, looked at long enough to catch the fast times of short work
/// (see [`measure_best`]): 30 runs at most, while they add up to less than 5 ms.
fn part(r: Repeats, f: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    measure_best(r, 30, 5.0, f)
}

/// One pipeline run held against its bound: its name, its lanes (streams or buffers in turn), its streams.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub name: String,
    pub lanes: usize,
    pub streams: usize,
    pub judged: Judged,
}

/// A pipeline run to judge.
#[derive(Clone, Debug)]
pub struct Measured {
    /// What the run was: `one stream`, `4 streams`.
    pub name: String,
    /// Its time.
    pub time: Stats,
    /// Lanes: the streams, or the buffers reused in turn, whose chunks run one after another.
    pub lanes: usize,
    /// The streams it ran on.
    pub streams: usize,
}

impl Measured {
    /// A run on `streams` streams, each a lane of its own.
    pub fn on_streams(name: impl Into<String>, time: Stats, streams: usize) -> Measured {
        Measured { name: name.into(), time, lanes: streams, streams }
    }
}

/// The costs of a pipeline's operations and each run of it against its bound: what a pipeline lesson
/// prints, and serializes with `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub costs: PartCosts,
    pub runs: Vec<Run>,
}

impl Report {
    /// Measures the costs of `plan`'s operations on `h_in` (downloading into `h_out`, whose contents it
    /// overwrites: check results first), then holds each run, `(name, measured, lanes)`, against its bound.
    pub fn measure(
        gpu: &Gpu,
        kernels: &Kernels,
        plan: &ChunkPlan,
        steps: Steps,
        (h_in, h_out): (&[f32], &mut [f32]),
        r: Repeats,
        runs: &[Measured],
    ) -> anyhow::Result<Report> {
        let streams = gpu.streams(plan.streams.clamp(8, 64))?;
        let mut scratch = gpu.alloc::<f32>(2 * plan.elements)?;
        let mut lanes: Vec<usize> = runs.iter().map(|r| r.lanes).collect();
        lanes.sort_unstable();
        lanes.dedup();
        let stream_counts: Vec<usize> = runs.iter().map(|r| r.streams).collect();
        // Five runs of each part for a best (least) time, more for short parts (see `part`); big runs stay quick.
        let r = Repeats { warmup: 1.min(r.warmup), repeats: r.repeats.min(5) };
        let data = Workload { h_in, h_out, scratch: &mut scratch };
        let costs = measure_costs(gpu, kernels, &streams, plan, steps, &lanes, &stream_counts, data, r)?;
        let runs = runs
            .iter()
            .map(|m| Run {
                name: m.name.clone(),
                lanes: m.lanes,
                streams: m.streams,
                judged: Judged::new(m.time, Bound::new(&costs, m.lanes, m.streams)),
            })
            .collect();
        Ok(Report { costs, runs })
    }

    /// A table: run, time (median, and the runs' coefficient of variation), bound, efficiency, what limits it.
    pub fn table(&self) -> crate::report::Table {
        let mut t = crate::report::Table::new(&["run", "time", "spread", "bound", "efficiency", "limited by"]);
        for r in &self.runs {
            let j = &r.judged;
            t.row(vec![
                r.name.clone(),
                fmt_ms(j.measured.median_ms),
                format!("±{:.1}%", 100.0 * j.measured.cv),
                fmt_ms(j.bound.ms),
                format!("{:.3}", j.efficiency),
                j.bound.limit.name().to_string(),
            ]);
        }
        t
    }

    /// What each limit means and what the operations cost, for the lines under the table.
    pub fn notes(&self) -> Vec<String> {
        let c = &self.costs;
        let mut limits: Vec<Bottleneck> = self.runs.iter().map(|r| r.judged.bound.limit).collect();
        limits.dedup();
        let mut lines: Vec<String> = limits.iter().map(|l| format!("{}: {}", l.name(), l.describe())).collect();
        lines.push(format!(
            "measured alone (best of the repeats): one chunk's upload {}, kernel {}, download {}, all three in \
             turn {}; the parts of the bound: uploads {}, downloads {}, copies both ways {}, kernels {}",
            fmt_ms(c.upload_ms),
            fmt_ms(c.kernel_ms),
            fmt_ms(c.download_ms),
            fmt_ms(c.chain_ms),
            fmt_ms(c.uploads_ms),
            fmt_ms(c.downloads_ms),
            fmt_ms(c.copies_ms),
            fmt_ms(c.kernels_ms)
        ));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(uploads: f64, downloads: f64, copies: f64, kernels: f64, lanes: &[(usize, f64)]) -> PartCosts {
        PartCosts {
            upload_ms: 1.0,
            kernel_ms: 1.0,
            download_ms: 1.0,
            chain_ms: 3.0,
            uploads_ms: uploads,
            downloads_ms: downloads,
            copies_ms: copies,
            kernels_ms: kernels,
            lanes: lanes.to_vec(),
            streams: 8,
            empty: vec![(8, 0.010), (2, 0.006)],
        }
    }

    #[test]
    fn the_largest_part_is_the_bound_and_names_the_limit() {
        let c = costs(34.0, 34.0, 35.2, 34.0, &[(1, 96.0), (4, 24.0)]);
        let b = Bound::new(&c, 4, 8);
        assert_eq!((b.limit, b.ms), (Bottleneck::BothDirections, 35.2));
        assert_eq!(b.terms.len(), 5);
        let b = Bound::new(&c, 1, 8);
        assert_eq!((b.limit, b.ms), (Bottleneck::Lanes, 96.0), "one stream: every chunk in turn");
    }

    #[test]
    fn a_long_kernel_makes_it_compute_bound() {
        let b = Bound::new(&costs(10.0, 10.0, 11.0, 42.0, &[(4, 12.0)]), 4, 8);
        assert_eq!((b.limit, b.ms), (Bottleneck::Compute, 42.0));
    }

    #[test]
    fn a_run_on_fewer_streams_pays_less_fork_and_join() {
        let c = costs(0.05, 0.05, 0.05, 0.05, &[(2, 0.04)]);
        let b = Bound::new(&c, 2, 2);
        assert!((b.terms[0].1 - 0.046).abs() < 1e-12, "{:?}", b.terms);
        assert_eq!(Bound::new(&c, 2, 8).terms[0].1, 0.05, "as many streams as the parts: nothing taken off");
        assert_eq!(Bound::new(&c, 2, 3).terms[0].1, 0.05, "no empty scope measured on 3: nothing taken off");
    }

    #[test]
    fn lanes_not_measured_count_nothing() {
        let b = Bound::new(&costs(1.0, 1.0, 1.0, 1.0, &[(2, 5.0)]), 3, 8);
        assert_eq!(b.terms[4], (Bottleneck::Lanes, 0.0));
    }

    #[test]
    fn efficiency_is_bound_over_measured() {
        let m = Stats::from_samples(&[40.0, 40.0, 40.0]).unwrap();
        let j = Judged::new(m, Bound::new(&costs(34.0, 34.0, 35.2, 34.0, &[(4, 24.0)]), 4, 8));
        assert!((j.efficiency - 35.2 / 40.0).abs() < 1e-9);
        assert!(j.line().contains("copies both ways"), "{}", j.line());
    }
}
