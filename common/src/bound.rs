//! A lower bound on the time of a copy-in, compute, copy-out pipeline, and what limits it.
//!
//! Every term is a time the pipeline cannot beat, measured in the same run on the same data:
//!
//! | term | the pipeline must at least | measured as |
//! | --- | --- | --- |
//! | uploads | do all its uploads, then the last chunk's kernel and download | all uploads at once on many streams, then one kernel and one download alone |
//! | downloads | upload and compute the first chunk, then do all its downloads | one upload and one kernel alone, then all downloads at once |
//! | both directions | move everything both ways | all uploads and downloads at once, nothing ordering them |
//! | compute | upload the first chunk, run every kernel, download the last | one upload alone, all kernels at once on many streams, one download alone |
//! | lanes | run, on its busiest lane (stream or buffer), each chunk's upload, kernel and download one after another | one chunk's three operations back to back on one stream, times the chunks on that lane |
//!
//! Each measured part is the best (least) of several runs, and gives the operations at least as much
//! freedom as the pipeline has (more streams, no dependencies), so no pipeline run can beat its bound
//! by more than timing noise. The largest term is the bound; its name says what limits the run. Where
//! a run takes longer than its bound, what is missing is launch gaps, waits and interference between
//! the engines, which no term counts.

use serde::Serialize;

use crate::{
    kernels::Work,
    report::fmt_ms,
    timing::{measure, Repeats, Stats},
    ChunkPlan, DeviceBuffer, Gpu, Stream,
};

/// What limits a pipeline: the largest of its bound's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Limit {
    Uploads,
    Downloads,
    BothDirections,
    Compute,
    Lanes,
}

impl Limit {
    /// A word or two for a table.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Uploads => "uploads",
            Limit::Downloads => "downloads",
            Limit::BothDirections => "copies both ways",
            Limit::Compute => "kernels",
            Limit::Lanes => "lanes in turn",
        }
    }

    /// What it means, in a sentence.
    pub fn describe(self) -> &'static str {
        match self {
            Limit::Uploads => "copy-bound: all the uploads, then the last chunk's kernel and download",
            Limit::Downloads => "copy-bound: the first chunk's upload and kernel, then all the downloads",
            Limit::BothDirections => "copy-bound: moving the data both ways at once, at the rate the link keeps with both directions busy",
            Limit::Compute => "compute-bound: all the kernels, with the first upload before them and the last download after",
            Limit::Lanes => "each stream (or buffer) runs its chunks' upload, kernel and download one after another: fill and drain, or per-operation latency, dominate",
        }
    }
}

/// What the operations of one run cost when nothing else runs, in ms (best of the repeats).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Costs {
    /// One chunk's upload, kernel, download alone (the smallest chunk).
    pub upload_ms: f64,
    pub kernel_ms: f64,
    pub download_ms: f64,
    /// One chunk's upload, kernel and download back to back on one stream.
    pub chain_ms: f64,
    /// Every upload of the run at once, on many streams.
    pub all_uploads_ms: f64,
    pub all_downloads_ms: f64,
    /// Every upload and every download at once.
    pub all_copies_ms: f64,
    /// Every kernel of the run at once, on many streams.
    pub all_kernels_ms: f64,
}

/// A lower bound on a pipeline's time, with its terms.
#[derive(Clone, Debug, Serialize)]
pub struct Bound {
    pub ms: f64,
    pub limit: Limit,
    pub terms: Vec<(Limit, f64)>,
}

impl Bound {
    /// The bound for `chunks` chunks spread over `lanes` lanes (streams, or buffers reused in turn).
    pub fn new(c: &Costs, chunks: usize, lanes: usize) -> Bound {
        let per_lane = chunks.div_ceil(lanes.max(1));
        let terms = vec![
            (Limit::Uploads, c.all_uploads_ms + c.kernel_ms + c.download_ms),
            (Limit::Downloads, c.upload_ms + c.kernel_ms + c.all_downloads_ms),
            (Limit::BothDirections, c.all_copies_ms),
            (Limit::Compute, c.upload_ms + c.all_kernels_ms + c.download_ms),
            (Limit::Lanes, per_lane as f64 * c.chain_ms),
        ];
        let (limit, ms) = terms.iter().copied().fold((Limit::Lanes, 0.0), |a, t| if t.1 > a.1 { t } else { a });
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
    fn launch<'s>(
        self,
        gpu: &'s Gpu,
        d: crate::Dev<'s, f32>,
        range: std::ops::Range<usize>,
        n: usize,
    ) -> crate::scope::Launch<'s> {
        match self {
            Steps::InPlace(work) => gpu.kernels.work(work, d.slice(range)),
            Steps::VectorAdd => {
                let input = d.slice(n + range.start..n + range.end);
                gpu.kernels.vector_add(input, input, d.slice(range))
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

/// Measures [`Costs`] for `plan` with `steps` per chunk. `streams` should be many (8 or more, and at
/// least the pipeline's): the "all at once" parts spread over them.
pub fn measure_costs(
    gpu: &Gpu,
    streams: &[Stream],
    plan: &ChunkPlan,
    steps: Steps,
    data: Workload<'_>,
    r: Repeats,
) -> anyhow::Result<Costs> {
    let uploads = steps.uploads();
    let Workload { h_in, h_out, scratch } = data;
    let n = plan.elements;
    anyhow::ensure!(
        h_in.len() == n && h_out.len() == n && scratch.len() >= 2 * n,
        "the workload does not match the plan"
    );
    let _phase = crate::timeline::phase("bound");
    let best = |s: Stats| s.min_ms;
    let smallest = plan.elements / plan.chunks;
    let one = &streams[..1];
    let s0 = &streams[0];
    // One chunk alone, and its chain.
    let upload_ms =
        best(measure(r, || gpu.timed(one, |s| s.htod(s0, &h_in[..smallest], s.device(scratch).slice(0..smallest))))?);
    let kernel_ms =
        best(measure(r, || gpu.timed(one, |s| s.launch(s0, steps.launch(gpu, s.device(scratch), 0..smallest, n))))?);
    let download_ms = best(measure(r, || {
        gpu.timed(one, |s| s.dtoh(s0, s.device(scratch).slice(0..smallest), &mut h_out[..smallest]))
    })?);
    let chain_ms = best(measure(r, || {
        gpu.timed(one, |s| {
            let full = s.device(scratch);
            let d = full.slice(0..smallest);
            for _ in 0..uploads {
                s.htod(s0, &h_in[..smallest], d)?;
            }
            s.launch(s0, steps.launch(gpu, full, 0..smallest, n))?;
            s.dtoh(s0, d, &mut h_out[..smallest])
        })
    })?);
    // Everything at once, chunk i on stream i % streams, each chunk in its own part of the scratch buffer
    // (so that nothing orders them), downloads into the chunks of the output.
    let lanes = streams.len();
    let all_uploads_ms = best(measure(r, || {
        gpu.timed(streams, |s| {
            let d = s.device(scratch);
            for c in plan.iter() {
                for _ in 0..uploads {
                    s.htod(&streams[c.index % lanes], &h_in[c.range()], d.slice(c.range()))?;
                }
            }
            Ok(())
        })
    })?);
    let all_downloads_ms = best(measure(r, || {
        gpu.timed(streams, |s| {
            let d = s.device(scratch);
            for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
                s.dtoh(&streams[c.index % lanes], d.slice(n + c.offset..n + c.offset + c.len), out)?;
            }
            Ok(())
        })
    })?);
    // Uploads into the first half of the scratch buffer while downloads read the second: disjoint, so
    // nothing orders them; uploads and downloads on streams of their own.
    let all_copies_ms = best(measure(r, || {
        gpu.timed(streams, |s| {
            let d = s.device(scratch);
            let half = (lanes / 2).max(1);
            for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
                let up = &streams[c.index % half];
                let down = &streams[(half + c.index % (lanes - half).max(1)).min(lanes - 1)];
                for _ in 0..uploads {
                    s.htod(up, &h_in[c.range()], d.slice(c.range()))?;
                }
                s.dtoh(down, d.slice(n + c.offset..n + c.offset + c.len), out)?;
            }
            Ok(())
        })
    })?);
    let all_kernels_ms = best(measure(r, || {
        gpu.timed(streams, |s| {
            let d = s.device(scratch);
            for c in plan.iter() {
                s.launch(&streams[c.index % lanes], steps.launch(gpu, d, c.range(), n))?;
            }
            Ok(())
        })
    })?);
    Ok(Costs {
        upload_ms,
        kernel_ms,
        download_ms,
        chain_ms,
        all_uploads_ms,
        all_downloads_ms,
        all_copies_ms,
        all_kernels_ms,
    })
}

/// One pipeline run held against its bound: its name, its lanes (streams or buffers in turn).
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub name: String,
    pub lanes: usize,
    pub judged: Judged,
}

/// The costs of a pipeline's operations and each run of it against its bound: what a pipeline lesson
/// prints, and serializes with `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub costs: Costs,
    pub runs: Vec<Run>,
}

impl Report {
    /// Measures the costs of `plan`'s operations on `h_in` (downloading into `h_out`, whose contents it
    /// overwrites: check results first), then holds each run, `(name, measured, lanes)`, against its bound.
    pub fn measure(
        gpu: &Gpu,
        plan: &ChunkPlan,
        steps: Steps,
        (h_in, h_out): (&[f32], &mut [f32]),
        r: Repeats,
        runs: &[(&str, Stats, usize)],
    ) -> anyhow::Result<Report> {
        let streams = gpu.streams(plan.streams.clamp(8, 64))?;
        let mut scratch = gpu.alloc::<f32>(2 * plan.elements)?;
        let costs = measure_costs(gpu, &streams, plan, steps, Workload { h_in, h_out, scratch: &mut scratch }, r)?;
        let runs = runs
            .iter()
            .map(|(name, stats, lanes)| Run {
                name: name.to_string(),
                lanes: *lanes,
                judged: Judged::new(*stats, Bound::new(&costs, plan.chunks, *lanes)),
            })
            .collect();
        Ok(Report { costs, runs })
    }

    /// A table: run, time, bound, efficiency, what limits it.
    pub fn table(&self) -> crate::report::Table {
        let mut t = crate::report::Table::new(&["run", "time", "bound", "efficiency", "limited by"]);
        for r in &self.runs {
            let j = &r.judged;
            t.row(vec![
                r.name.clone(),
                fmt_ms(j.measured.median_ms),
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
        let mut limits: Vec<Limit> = self.runs.iter().map(|r| r.judged.bound.limit).collect();
        limits.dedup();
        let mut lines: Vec<String> = limits.iter().map(|l| format!("{}: {}", l.name(), l.describe())).collect();
        lines.push(format!(
            "measured alone (best of the repeats): one chunk's upload {}, kernel {}, download {}, all three {}; \
             all uploads {}, all downloads {}, both at once {}, all kernels {}",
            fmt_ms(c.upload_ms),
            fmt_ms(c.kernel_ms),
            fmt_ms(c.download_ms),
            fmt_ms(c.chain_ms),
            fmt_ms(c.all_uploads_ms),
            fmt_ms(c.all_downloads_ms),
            fmt_ms(c.all_copies_ms),
            fmt_ms(c.all_kernels_ms)
        ));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(each: f64, chunks: f64) -> Costs {
        Costs {
            upload_ms: each,
            kernel_ms: each,
            download_ms: each,
            chain_ms: 3.0 * each,
            all_uploads_ms: chunks * each,
            all_downloads_ms: chunks * each,
            all_copies_ms: chunks * each * 1.1,
            all_kernels_ms: chunks * each,
        }
    }

    #[test]
    fn a_balanced_pipeline_is_bound_by_its_copies_both_ways_and_its_fill_and_drain() {
        let b = Bound::new(&costs(1.0, 32.0), 32, 4);
        // uploads 32 + 2 = 34; both 35.2; compute 34; lanes 8 * 3 = 24
        assert_eq!(b.limit, Limit::BothDirections);
        assert!((b.ms - 35.2).abs() < 1e-9);
    }

    #[test]
    fn few_lanes_make_it_latency_bound() {
        let b = Bound::new(&costs(1.0, 32.0), 32, 1);
        assert_eq!((b.limit, b.ms), (Limit::Lanes, 96.0), "one stream: every chain one after another");
        let b = Bound::new(&costs(1.0, 32.0), 32, 2);
        assert_eq!((b.limit, b.ms), (Limit::Lanes, 48.0), "two buffers: a period of 1.5 stages per chunk");
    }

    #[test]
    fn a_long_kernel_makes_it_compute_bound() {
        let c = Costs { kernel_ms: 10.0, all_kernels_ms: 40.0, chain_ms: 12.0, ..costs(1.0, 4.0) };
        let b = Bound::new(&c, 4, 4);
        assert_eq!(b.limit, Limit::Compute);
        assert!((b.ms - 42.0).abs() < 1e-9);
    }

    #[test]
    fn efficiency_is_bound_over_measured() {
        let m = Stats::from_samples(&[40.0, 40.0, 40.0]).unwrap();
        let j = Judged::new(m, Bound::new(&costs(1.0, 32.0), 32, 4));
        assert!((j.efficiency - 35.2 / 40.0).abs() < 1e-9);
        assert!(j.line().contains("copies both ways"), "{}", j.line());
    }
}
