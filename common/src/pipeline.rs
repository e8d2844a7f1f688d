//! The ideal time of a copy-in, compute, copy-out pipeline, from measured stage times.
//!
//! The model: chunks go through H2D, kernel and D2H in order. Kernels run one after another (each
//! fills the GPU). With two or more copy engines, H2D and D2H each have their own engine; with one,
//! they share it. A chunk's upload must wait until the chunk `buffers` places earlier has been
//! downloaded, because it reuses that chunk's device buffer. Every resource takes the earliest work
//! that is ready. Nothing else costs time: no launch gaps, no interference, which is why it is ideal.

use serde::Serialize;

use crate::{
    kernels::Work,
    report::{fmt_bytes, fmt_ms, verdict},
    timing::{measure, Repeats, Stats},
    verify::input,
    ChunkPlan, DeviceBuffer, Gpu, Stream,
};

/// Milliseconds each stage of one chunk takes when run alone.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StageTimes {
    pub h2d_ms: f64,
    pub kernel_ms: f64,
    pub d2h_ms: f64,
}

impl StageTimes {
    pub fn total(&self) -> f64 {
        self.h2d_ms + self.kernel_ms + self.d2h_ms
    }

    /// The same stages for a chunk `f` times as long.
    pub fn scaled(&self, f: f64) -> StageTimes {
        StageTimes { h2d_ms: self.h2d_ms * f, kernel_ms: self.kernel_ms * f, d2h_ms: self.d2h_ms * f }
    }

    /// The same stages with both copies at another rate (say, the rate each keeps when both run at once).
    pub fn with_copy_rates(&self, h2d_factor: f64, d2h_factor: f64) -> StageTimes {
        StageTimes { h2d_ms: self.h2d_ms * h2d_factor, d2h_ms: self.d2h_ms * d2h_factor, ..*self }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Stage {
    H2D,
    Kernel,
    D2H,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Op {
    pub chunk: usize,
    pub stage: Stage,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// The schedule the model gives, and its length.
#[derive(Clone, Debug, Serialize)]
pub struct Schedule {
    pub ops: Vec<Op>,
    pub makespan_ms: f64,
}

/// Simulates the pipeline for `chunks` (per-chunk stage times), `buffers` device buffers reused in turn,
/// and `copy_engines` copy engines.
pub fn simulate(chunks: &[StageTimes], buffers: usize, copy_engines: u32) -> Schedule {
    let n = chunks.len();
    let buffers = buffers.max(1);
    let (mut h_end, mut k_end, mut d_end) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let mut ops = Vec::with_capacity(3 * n);
    let (mut up_free, mut down_free, mut sm_free) = (0.0f64, 0.0f64, 0.0f64);
    let (mut hi, mut di) = (0, 0);
    while di < n {
        // The next upload is possible once its buffer's previous chunk has been downloaded.
        let up_ready: Option<f64> =
            (hi < n && (hi < buffers || hi - buffers < di)).then(
                || {
                    if hi >= buffers {
                        d_end[hi - buffers]
                    } else {
                        0.0
                    }
                },
            );
        let down_ready: Option<f64> = (di < hi).then(|| k_end[di]);
        let (up_engine, down_engine) = if copy_engines >= 2 { (up_free, down_free) } else { (up_free, up_free) };
        let up_start = up_ready.map(|r| r.max(up_engine));
        let down_start = down_ready.map(|r| r.max(down_engine));
        let upload = match (up_start, down_start) {
            (Some(u), Some(d)) => u <= d,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => unreachable!("a download is always possible once its upload is done"),
        };
        if upload {
            let start = up_start.unwrap();
            h_end[hi] = start + chunks[hi].h2d_ms;
            ops.push(Op { chunk: hi, stage: Stage::H2D, start_ms: start, end_ms: h_end[hi] });
            up_free = h_end[hi];
            if copy_engines < 2 {
                down_free = up_free;
            }
            let ks = h_end[hi].max(sm_free);
            k_end[hi] = ks + chunks[hi].kernel_ms;
            sm_free = k_end[hi];
            ops.push(Op { chunk: hi, stage: Stage::Kernel, start_ms: ks, end_ms: k_end[hi] });
            hi += 1;
        } else {
            let start = down_start.unwrap();
            d_end[di] = start + chunks[di].d2h_ms;
            ops.push(Op { chunk: di, stage: Stage::D2H, start_ms: start, end_ms: d_end[di] });
            down_free = d_end[di];
            if copy_engines < 2 {
                up_free = down_free;
            }
            di += 1;
        }
    }
    let makespan_ms = d_end.iter().copied().fold(0.0, f64::max);
    Schedule { ops, makespan_ms }
}

/// The serialized time: every stage of every chunk one after another.
pub fn serialized(chunks: &[StageTimes]) -> f64 {
    chunks.iter().map(StageTimes::total).sum()
}

/// One chunk's copies timed alone, and both directions at once (what each keeps while the other runs).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CopyTimes {
    pub bytes: usize,
    pub h2d: Stats,
    pub d2h: Stats,
    /// An H2D and a D2H of `bytes` each, on two streams at once.
    pub both: Stats,
}

impl CopyTimes {
    /// Times copies of `len` f32 between pinned memory and the device, alone and both ways at once.
    pub fn measure(gpu: &Gpu, len: usize, r: Repeats) -> anyhow::Result<CopyTimes> {
        let h_in = gpu.pinned_from_fn(len, input)?;
        let mut h_out = gpu.pinned::<f32>(len)?;
        let (mut up, mut down) = (gpu.alloc::<f32>(len)?, gpu.alloc::<f32>(len)?);
        let streams = gpu.streams(2)?;
        // A phase of its own, unless the caller has named what these copies are for.
        let _phase = crate::timeline::current_phase().is_empty().then(|| crate::timeline::phase("copies alone"));
        let h2d = measure(r, || gpu.timed(&streams[..1], |s| s.htod(&streams[0], &h_in, s.device(&mut up))))?;
        let d2h = measure(r, || gpu.timed(&streams[..1], |s| s.dtoh(&streams[0], s.device(&mut down), &mut h_out)))?;
        let both = measure(r, || {
            gpu.timed(&streams, |s| {
                s.htod(&streams[0], &h_in, s.device(&mut up))?;
                s.dtoh(&streams[1], s.device(&mut down), &mut h_out)
            })
        })?;
        Ok(CopyTimes { bytes: len * 4, h2d, d2h, both })
    }

    /// How much longer each copy takes when the other direction runs too (>= 1 on a shared link).
    pub fn both_factor(&self) -> f64 {
        (self.both.median_ms / self.h2d.median_ms.max(self.d2h.median_ms)).max(1.0)
    }

    pub fn lines(&self) -> Vec<String> {
        let rate = |s: &Stats| s.gbps(self.bytes);
        vec![
            format!(
                "copies of one {} chunk: H2D {} ({:.1} GB/s), D2H {} ({:.1} GB/s) alone",
                fmt_bytes(self.bytes),
                fmt_ms(self.h2d.median_ms),
                rate(&self.h2d),
                fmt_ms(self.d2h.median_ms),
                rate(&self.d2h)
            ),
            format!(
                "                both at once: {} ({:.1} GB/s each way)",
                fmt_ms(self.both.median_ms),
                rate(&self.both)
            ),
        ]
    }
}

/// Iterations of [`crate::kernels::Kernels::process`] that make one pass over `len` elements take about
/// `target_ms`: it times a trial, scales (the kernel is compute-bound, so time grows with iterations),
/// and refines once.
pub fn calibrate_process(gpu: &Gpu, len: usize, target_ms: f64, r: Repeats) -> anyhow::Result<u32> {
    let mut d = gpu.alloc::<f32>(len)?;
    let streams = gpu.streams(1)?;
    let mut time = |iters: u32| {
        measure(r, || gpu.timed(&streams, |s| s.launch(&streams[0], gpu.kernels.process(s.device(&mut d), iters))))
    };
    let mut iters = 256u32;
    for _ in 0..2 {
        let t = time(iters)?.median_ms;
        iters = ((iters as f64 * target_ms / t).round() as u32).clamp(1, 1 << 20);
    }
    Ok(iters)
}

/// [`Work::Process`] calibrated so that a chunk of `len` elements takes as long to compute as its copies
/// take when both directions run at once, as they do in a pipeline's steady state: a kernel that gives
/// overlap something to hide on every engine.
pub fn balanced_work(gpu: &Gpu, len: usize, r: Repeats) -> anyhow::Result<Work> {
    let _phase = crate::timeline::phase("calibration");
    let copies = CopyTimes::measure(gpu, len, r)?;
    Ok(Work::Process(calibrate_process(gpu, len, copies.both.median_ms, r)?))
}

/// What each stage of one chunk costs alone: the copies (each way, and both at once) and the kernel.
#[derive(Clone, Debug, Serialize)]
pub struct ChunkStages {
    pub len: usize,
    pub copies: CopyTimes,
    pub work: Work,
    pub kernel: Stats,
}

impl ChunkStages {
    /// Measures a chunk of `len` elements. Without `work`, [`Work::Process`] is calibrated to take as long as
    /// the copies take when both directions run at once, as they do in a pipeline's steady state.
    pub fn measure(gpu: &Gpu, len: usize, work: Option<Work>, r: Repeats) -> anyhow::Result<ChunkStages> {
        let copies = CopyTimes::measure(gpu, len, r)?;
        let work = match work {
            Some(w) => w,
            None => {
                let _phase = crate::timeline::phase("calibration");
                Work::Process(calibrate_process(gpu, len, copies.both.median_ms, r)?)
            }
        };
        let _phase = crate::timeline::phase("kernel alone");
        let mut d = gpu.alloc::<f32>(len)?;
        let streams = gpu.streams(1)?;
        let kernel =
            measure(r, || gpu.timed(&streams, |s| s.launch(&streams[0], gpu.kernels.work(work, s.device(&mut d)))))?;
        Ok(ChunkStages { len, copies, work, kernel })
    }

    /// The stage times of each chunk of `plan` (in proportion to its length).
    pub fn per_chunk(&self, plan: &ChunkPlan) -> Vec<StageTimes> {
        let one = StageTimes {
            h2d_ms: self.copies.h2d.median_ms,
            kernel_ms: self.kernel.median_ms,
            d2h_ms: self.copies.d2h.median_ms,
        };
        plan.iter().map(|c| one.scaled(c.len as f64 / self.len as f64)).collect()
    }

    pub fn lines(&self) -> Vec<String> {
        let mut l = self.copies.lines();
        l.push(format!("kernel on one chunk: {} ({})", fmt_ms(self.kernel.median_ms), self.work.describe()));
        l
    }
}

/// How a pipeline lays chunks out: chunk i lives in device buffer i % buffers and runs on stream
/// i % buffers, or, `by_engine`, on an upload, a compute and a download stream (double buffering).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Layout {
    pub buffers: usize,
    pub by_engine: bool,
}

/// Runs `work` over `h_in` into `h_out` once, chunked by `plan` and laid out by `layout`, and returns
/// the GPU time in ms. The lessons spell this loop out; benchmarks and the multi-GPU lesson call it.
pub fn run_pipeline(
    gpu: &Gpu,
    streams: &[Stream],
    plan: &ChunkPlan,
    layout: Layout,
    work: Work,
    (h_in, h_out): (&[f32], &mut [f32]),
    bufs: &mut [DeviceBuffer<f32>],
) -> anyhow::Result<f64> {
    anyhow::ensure!(
        bufs.len() >= layout.buffers && streams.len() >= layout.buffers.max(if layout.by_engine { 3 } else { 1 }),
        "too few buffers or streams for the layout"
    );
    gpu.timed(streams, |s| {
        let d = s.devices(&mut bufs[..layout.buffers]);
        for (c, out) in plan.iter().zip(plan.split_mut(h_out)) {
            let (buf, own) = (d[c.index % layout.buffers].slice(0..c.len), &streams[c.index % layout.buffers]);
            let (up, compute, down) =
                if layout.by_engine { (&streams[0], &streams[1], &streams[2]) } else { (own, own, own) };
            s.htod(up, &h_in[c.range()], buf)?;
            s.launch(compute, gpu.kernels.work(work, buf))?;
            s.dtoh(down, buf, out)?;
        }
        Ok(())
    })
}

/// A pipeline's measured time against its serialized version and its ideal, two ways.
#[derive(Clone, Debug, Serialize)]
pub struct Judgement {
    pub serialized_ms: f64,
    pub overlapped_ms: f64,
    pub speedup: f64,
    /// The model with each copy at its single-direction rate (as NVIDIA's simpleMultiCopy computes it).
    pub ideal_single_ms: f64,
    /// The model with copies at the rate each direction keeps while the other runs.
    pub ideal_both_ms: f64,
    pub efficiency_single: f64,
    pub efficiency_both: f64,
}

impl Judgement {
    pub fn new(
        serialized_ms: f64,
        overlapped_ms: f64,
        stages: &[StageTimes],
        buffers: usize,
        copy_engines: u32,
        copies: &CopyTimes,
    ) -> Judgement {
        let f = copies.both_factor();
        let both: Vec<StageTimes> = stages.iter().map(|s| s.with_copy_rates(f, f)).collect();
        let ideal_single_ms = simulate(stages, buffers, copy_engines).makespan_ms;
        let ideal_both_ms = simulate(&both, buffers, copy_engines).makespan_ms;
        Judgement {
            serialized_ms,
            overlapped_ms,
            speedup: serialized_ms / overlapped_ms,
            ideal_single_ms,
            ideal_both_ms,
            efficiency_single: ideal_single_ms / overlapped_ms,
            efficiency_both: ideal_both_ms / overlapped_ms,
        }
    }

    pub fn lines(&self) -> Vec<String> {
        vec![
            format!("serialized      {}", fmt_ms(self.serialized_ms)),
            format!("overlapped      {}   speedup {:.2}x", fmt_ms(self.overlapped_ms), self.speedup),
            format!(
                "ideal, copies at their one-direction rates   {}   efficiency {:.3}",
                fmt_ms(self.ideal_single_ms),
                self.efficiency_single
            ),
            format!(
                "ideal, copies at their both-directions rates {}   efficiency {:.3}",
                fmt_ms(self.ideal_both_ms),
                self.efficiency_both
            ),
        ]
    }

    /// PASS/FAIL lines against targets: (minimum efficiency vs both-directions ideal, vs single, speedup).
    pub fn verdicts(&self, min_eff_both: f64, min_eff_single: f64, min_speedup: f64) -> (bool, Vec<String>) {
        let checks = [
            (
                self.efficiency_both >= min_eff_both,
                format!(
                    "efficiency against the both-directions ideal {:.3} (target {min_eff_both})",
                    self.efficiency_both
                ),
            ),
            (
                self.efficiency_single >= min_eff_single,
                format!(
                    "efficiency against the one-direction ideal {:.3} (target {min_eff_single})",
                    self.efficiency_single
                ),
            ),
            (
                self.speedup >= min_speedup,
                format!("speedup over serialized {:.2}x (target {min_speedup}x)", self.speedup),
            ),
        ];
        (checks.iter().all(|c| c.0), checks.iter().map(|(ok, t)| verdict(*ok, t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn equal(n: usize, t: f64) -> Vec<StageTimes> {
        vec![StageTimes { h2d_ms: t, kernel_ms: t, d2h_ms: t }; n]
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn balanced_three_stage_pipeline_takes_n_plus_2() {
        for n in [1, 2, 4, 32] {
            let s = simulate(&equal(n, 1.0), 4, 2);
            assert!(close(s.makespan_ms, n as f64 + 2.0), "n={n}: {}", s.makespan_ms);
        }
        assert!(close(serialized(&equal(32, 1.0)), 96.0));
    }

    #[test]
    fn the_slowest_stage_sets_the_pace() {
        let c = vec![StageTimes { h2d_ms: 1.0, kernel_ms: 3.0, d2h_ms: 1.0 }; 10];
        // first upload, ten kernels back to back, last download
        assert!(close(simulate(&c, 3, 2).makespan_ms, 1.0 + 30.0 + 1.0));
    }

    #[test]
    fn two_buffers_give_a_period_of_one_and_a_half_stages() {
        // Chunk 2 reuses chunk 0's buffer and may only start uploading once chunk 0 is downloaded at t=3.
        let s = simulate(&equal(4, 1.0), 2, 2);
        assert!(close(s.makespan_ms, 7.0), "{}", s.makespan_ms);
        let h2 = s.ops.iter().find(|o| o.chunk == 2 && o.stage == Stage::H2D).unwrap();
        assert!(close(h2.start_ms, 3.0));
    }

    #[test]
    fn one_buffer_serializes_everything() {
        assert!(close(simulate(&equal(5, 1.0), 1, 2).makespan_ms, 15.0));
    }

    #[test]
    fn one_copy_engine_carries_both_directions() {
        // 2n copies of 1 on one engine, kernels hidden under them.
        let s = simulate(&equal(4, 1.0), 8, 1);
        assert!(close(s.makespan_ms, 8.0), "{}", s.makespan_ms);
        let mut copies: Vec<_> = s.ops.iter().filter(|o| o.stage != Stage::Kernel).collect();
        copies.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        for w in copies.windows(2) {
            assert!(w[1].start_ms >= w[0].end_ms - 1e-12, "copies on one engine never overlap");
        }
    }

    #[test]
    fn every_op_follows_its_dependencies() {
        let c: Vec<_> = (0..20)
            .map(|i| StageTimes { h2d_ms: 1.0 + (i % 3) as f64, kernel_ms: 2.0, d2h_ms: 0.5 + (i % 2) as f64 })
            .collect();
        for (buffers, engines) in [(1, 1), (2, 2), (3, 1), (4, 2), (20, 2)] {
            let s = simulate(&c, buffers, engines);
            let find = |i, st| s.ops.iter().find(|o| o.chunk == i && o.stage == st).unwrap();
            for i in 0..20 {
                assert!(find(i, Stage::Kernel).start_ms >= find(i, Stage::H2D).end_ms - 1e-12);
                assert!(find(i, Stage::D2H).start_ms >= find(i, Stage::Kernel).end_ms - 1e-12);
                if i >= buffers {
                    assert!(find(i, Stage::H2D).start_ms >= find(i - buffers, Stage::D2H).end_ms - 1e-12);
                }
            }
            assert!(s.makespan_ms <= serialized(&c) + 1e-9);
            assert_eq!(s.ops.len(), 60);
        }
    }

    #[test]
    fn judgement_of_a_perfect_pipeline() {
        let stages = equal(32, 1.0);
        let copies = CopyTimes {
            bytes: 1,
            h2d: Stats { median_ms: 1.0, min_ms: 1.0, max_ms: 1.0, runs: 1 },
            d2h: Stats { median_ms: 1.0, min_ms: 1.0, max_ms: 1.0, runs: 1 },
            both: Stats { median_ms: 1.25, min_ms: 1.25, max_ms: 1.25, runs: 1 },
        };
        assert!(close(copies.both_factor(), 1.25));
        let j = Judgement::new(96.0, 34.0, &stages, 4, 2, &copies);
        assert!(close(j.ideal_single_ms, 34.0) && close(j.efficiency_single, 1.0));
        assert!(j.ideal_both_ms > 34.0 && j.efficiency_both > 1.0, "slower copies make a longer ideal");
        assert!(close(j.speedup, 96.0 / 34.0));
        let (ok, lines) = j.verdicts(0.95, 0.90, 2.3);
        assert!(ok && lines.iter().all(|l| l.starts_with("PASS")));
        let (ok, lines) = Judgement::new(96.0, 50.0, &stages, 4, 2, &copies).verdicts(0.95, 0.90, 2.3);
        assert!(!ok && lines.iter().any(|l| l.starts_with("FAIL")));
    }

    #[test]
    fn slower_copies_when_both_directions_run() {
        let t = StageTimes { h2d_ms: 1.0, kernel_ms: 1.0, d2h_ms: 1.0 }.with_copy_rates(1.17, 1.17);
        assert!(close(t.h2d_ms, 1.17) && close(t.d2h_ms, 1.17) && close(t.kernel_ms, 1.0));
    }
}
