//! The planner's cost model: from the copy costs and a kernel's cost, measured on this GPU in the same
//! run, which chunk count and stream count should run a copy-in, compute, copy-out pipeline fastest,
//! and the time the model predicts for each. It is a model, not a bound: `measure::bound` gives the
//! bound.
//!
//! The model: every operation on a chunk of `b` bytes costs `α + b/β` (a fit over sizes, [`CopyCost`]),
//! H2D and D2H copies slow to the rate they keep when both directions run at once, and a run of `C`
//! chunks on `K` streams takes one chunk's whole chain (fill and drain) plus `C - 1` periods, the period
//! being the busiest engine's time per chunk, or a chain over `K` when too few streams keep the engines
//! fed. It leaves out what the host spends queueing each operation and forking to the streams and
//! joining them back, which a run of many small chunks pays: the achieved time says how much.

use serde::Serialize;

use cuda_scope::Gpu;
use kernels::Kernels;
use measure::{
    fit::CopyCost,
    report::{fmt_bytes, fmt_ms},
    timing::{measure, Repeats, Stats},
    work::Work,
};

/// What the planner measured: each operation's cost over chunk sizes.
#[derive(Clone, Debug, Serialize)]
pub struct FittedCosts {
    pub htod: CopyCost,
    pub dtoh: CopyCost,
    /// Each direction's rate with both running, against alone (1.0: no loss; taken as 0.5 at worst,
    /// what two directions sharing one engine's rate would keep). `both_ways` in JSON.
    #[serde(rename = "both_ways")]
    pub both_directions: f64,
    /// The kernel, as if it were a copy: a fixed cost per launch and a rate in GB/s of data processed.
    pub kernel: CopyCost,
}

/// What limits a configuration, in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ModelLimit {
    /// One chunk: nothing to overlap with.
    OneChunk,
    HtodCopies,
    Kernels,
    DtohCopies,
    /// Too few streams: each carries whole chains, which leave engines idle.
    Streams,
}

impl ModelLimit {
    pub fn name(self) -> &'static str {
        match self {
            ModelLimit::OneChunk => "one chunk, no overlap",
            ModelLimit::HtodCopies => "H2D copies",
            ModelLimit::Kernels => "kernels",
            ModelLimit::DtohCopies => "D2H copies",
            ModelLimit::Streams => "too few streams",
        }
    }
}

/// A configuration and the model's time for it.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    pub chunks: usize,
    pub streams: usize,
    pub ms: f64,
    pub limit: ModelLimit,
    /// The per-operation costs' share of the time: how much of the run is α.
    pub per_operation_share: f64,
}

impl FittedCosts {
    /// Times H2D copies from `h_in`, D2H copies into `h_out` (alone and both at once) and the kernel at six
    /// sizes from a 1024th of their length up to all of it, and fits each to its best times. The host
    /// buffers (pinned, as a pipeline's are) must hold 4 MiB at least, so that even a tiny pipeline's
    /// costs are fitted where copies show a rate. `kernel` times the kernel at the sizes it is given
    /// (elements), as `(bytes, ms)`: [`kernel_times`] for the lessons' kernels,
    /// [`crate::child::UserPtx::kernel_times`] for one of yours.
    pub fn measure(
        gpu: &Gpu,
        (h_in, h_out): (&[f32], &mut [f32]),
        kernel: impl FnOnce(&[usize]) -> anyhow::Result<Vec<(usize, f64)>>,
        r: Repeats,
    ) -> anyhow::Result<FittedCosts> {
        let _phase = measure::timeline::phase("planner: costs");
        let n = h_in.len();
        anyhow::ensure!(n >= 1 << 20 && h_out.len() >= n, "the planner's costs need 4 MiB of host buffers at least");
        let (mut up, mut down) = (gpu.alloc::<f32>(n)?, gpu.alloc::<f32>(n)?);
        let streams = gpu.streams(2)?;
        let s0 = &streams[..1];
        // Down to the smallest chunk [`FittedCosts::rank`] tries, bytes / 1024.
        let sizes: Vec<usize> = (0..=5).map(|i| (n >> (2 * i)).max(1)).collect();
        let (mut ups, mut downs) = (Vec::new(), Vec::new());
        for &len in &sizes {
            let t = |s: Stats| (len * 4, s.min_ms); // the best of the repeats: the least noise
            ups.push(t(measure(r, || {
                Ok(gpu.timed(s0, |s| s.stream(0).htod(&h_in[..len], s.device(&mut up).slice(0..len)))?)
            })?));
            downs.push(t(measure(r, || {
                Ok(gpu.timed(s0, |s| s.stream(0).dtoh(s.device(&mut down).slice(0..len), &mut h_out[..len]))?)
            })?));
        }
        let len = sizes[0]; // the largest: the rate with both directions busy, not their per-copy cost
        let both = measure(r, || {
            Ok(gpu.timed(&streams, |s| {
                s.stream(0).htod(&h_in[..len], s.device(&mut up).slice(0..len))?;
                s.stream(1).dtoh(s.device(&mut down).slice(0..len), &mut h_out[..len])
            })?)
        })?;
        let (htod, dtoh) = (CopyCost::fit(&ups)?, CopyCost::fit(&downs)?);
        // Each direction's rate with both at once against alone, per-copy cost taken off both times.
        let alpha = htod.alpha_us.max(dtoh.alpha_us) * 1e-3;
        let alone = htod.ms(len * 4).max(dtoh.ms(len * 4)) - alpha;
        let both_directions = (alone / (both.median_ms - alpha)).clamp(0.5, 1.0);
        Ok(FittedCosts { htod, dtoh, both_directions, kernel: CopyCost::fit(&kernel(&sizes)?)? })
    }

    /// The model's time for `bytes` in `chunks` chunks on `streams` streams.
    pub fn predict(&self, bytes: usize, chunks: usize, streams: usize) -> Prediction {
        let b = bytes.div_ceil(chunks.max(1));
        let (up, k, down) = (self.htod.ms(b), self.kernel.ms(b), self.dtoh.ms(b));
        let slowed = |c: &CopyCost| c.alpha_us * 1e-3 + b as f64 / (c.beta_gbps * 1e9 * self.both_directions) * 1e3;
        let chain = up + k + down;
        let terms = [
            (ModelLimit::HtodCopies, slowed(&self.htod)),
            (ModelLimit::Kernels, k),
            (ModelLimit::DtohCopies, slowed(&self.dtoh)),
            (ModelLimit::Streams, chain / streams.max(1) as f64),
        ];
        let (limit, period) = terms.into_iter().fold((ModelLimit::Streams, 0.0), |a, t| if t.1 > a.1 { t } else { a });
        let ms = chain + (chunks.max(1) - 1) as f64 * period;
        let alpha = (self.htod.alpha_us + self.kernel.alpha_us + self.dtoh.alpha_us) * 1e-3;
        let per_operation_share = (alpha * chunks as f64 / ms).min(1.0);
        let limit = if chunks <= 1 { ModelLimit::OneChunk } else { limit };
        Prediction { chunks, streams, ms, limit, per_operation_share }
    }

    /// Every configuration of 1 to 1024 chunks (powers of two, and 3) and 1 to 32 streams whose buffers
    /// (one chunk per stream) fit in `free` bytes, fastest first.
    pub fn rank(&self, bytes: usize, free: usize) -> Vec<Prediction> {
        let mut all = Vec::new();
        for chunks in (0..=10).map(|i| 1usize << i).chain([3]).filter(|c| *c <= bytes / 4) {
            for streams in [1, 2, 3, 4, 6, 8, 16, 32].into_iter().filter(|k| *k <= chunks) {
                if streams * bytes.div_ceil(chunks) <= free {
                    all.push(self.predict(bytes, chunks, streams));
                }
            }
        }
        all.sort_by(|a, b| a.ms.total_cmp(&b.ms).then(a.streams.cmp(&b.streams)).then(a.chunks.cmp(&b.chunks)));
        all
    }

    /// The fits that describe their sizes badly (a miss over 15%), in words: the predictions lean on them.
    pub fn warnings(&self) -> Vec<String> {
        [("H2D copy", &self.htod), ("D2H copy", &self.dtoh), ("kernel", &self.kernel)]
            .iter()
            .filter(|(_, c)| c.worst_miss > 0.15)
            .map(|(what, c)| {
                format!(
                    "the {what}'s fit misses one of its sizes by {:.0}%: predictions lean on it",
                    100.0 * c.worst_miss
                )
            })
            .collect()
    }

    /// Whether overlap can help at all, and why not where it cannot, in words.
    pub fn verdict(&self, bytes: usize, best: &Prediction) -> String {
        let serial = self.predict(bytes, 1, 1).ms;
        let gain = serial / best.ms;
        let (up, k, down) = (self.htod.ms(bytes), self.kernel.ms(bytes), self.dtoh.ms(bytes));
        if gain >= 1.15 {
            return format!("overlap should help: {gain:.2}x faster than one chunk on one stream ({})", fmt_ms(serial));
        }
        if best.per_operation_share > 0.5 || bytes as f64 <= self.htod.half_rate_bytes {
            return format!(
                "no overlap can help much ({gain:.2}x): per-operation costs dominate; {} is below or near the \
                 {} at which a copy reaches half its rate",
                fmt_bytes(bytes),
                fmt_bytes(self.htod.half_rate_bytes as usize)
            );
        }
        if up.max(down) > 4.0 * k {
            return format!(
                "no overlap can help much ({gain:.2}x): copy-bound, the copies take {} and {} against the kernel's {}; \
                 only both directions at once can be hidden, and they lose {:.0}% of their rate together",
                fmt_ms(up),
                fmt_ms(down),
                fmt_ms(k),
                100.0 * (1.0 - self.both_directions)
            );
        }
        format!(
            "no overlap can help much ({gain:.2}x): the kernel ({}) dwarfs the copies ({} and {})",
            fmt_ms(k),
            fmt_ms(up),
            fmt_ms(down)
        )
    }
}

/// The best time of `work` over each of `sizes` elements, in place on the GPU, as `(bytes, ms)`.
pub fn kernel_times(
    gpu: &Gpu,
    kernels: &Kernels,
    work: Work,
    sizes: &[usize],
    r: Repeats,
) -> anyhow::Result<Vec<(usize, f64)>> {
    let mut d = gpu.alloc::<f32>(sizes.iter().copied().max().unwrap_or(1))?;
    let streams = gpu.streams(1)?;
    let s0 = &streams[..];
    let input = cuda_scope::pageable(d.len(), measure::verify::input)?;
    gpu.scope(s0, |s| s.stream(0).htod(&input, s.device(&mut d)))?;
    let mut out = Vec::new();
    for &len in sizes {
        let t = measure(r, || Ok(gpu.timed(s0, |s| work.run(kernels, s.stream(0), s.device(&mut d).slice(0..len)))?))?;
        out.push((len * 4, t.min_ms));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(alpha_us: f64, beta_gbps: f64) -> CopyCost {
        CopyCost { alpha_us, beta_gbps, half_rate_bytes: alpha_us * 1e-6 * beta_gbps * 1e9, worst_miss: 0.0 }
    }

    /// 55 GB/s each way (50 both at once), 10 µs per copy; kernel per launch 5 µs at `kernel_gbps`.
    fn costs(kernel_gbps: f64) -> FittedCosts {
        FittedCosts {
            htod: cost(10.0, 55.0),
            dtoh: cost(10.0, 55.0),
            both_directions: 50.0 / 55.0,
            kernel: cost(5.0, kernel_gbps),
        }
    }

    #[test]
    fn one_chunk_is_the_chain_and_one_stream_is_chunks_chains() {
        let c = costs(55.0);
        let bytes = 256 << 20;
        let one = c.predict(bytes, 1, 1);
        let chain = c.htod.ms(bytes) + c.kernel.ms(bytes) + c.dtoh.ms(bytes);
        assert!((one.ms - chain).abs() < 1e-12 && one.limit == ModelLimit::OneChunk);
        let serial = c.predict(bytes, 8, 1);
        let b = bytes / 8;
        assert!((serial.ms - 8.0 * (c.htod.ms(b) + c.kernel.ms(b) + c.dtoh.ms(b))).abs() < 1e-9);
        assert_eq!(serial.limit, ModelLimit::Streams);
    }

    #[test]
    fn a_balanced_kernel_is_best_overlapped_and_names_its_limit() {
        let c = costs(50.0);
        let bytes = 256 << 20;
        let best = &c.rank(bytes, usize::MAX)[0];
        assert!(best.chunks >= 8 && best.streams >= 3, "{best:?}");
        assert!(c.verdict(bytes, best).starts_with("overlap should help"), "{}", c.verdict(bytes, best));
        // About three stages' worth faster than serial, less fill and drain.
        let gain = c.predict(bytes, 1, 1).ms / best.ms;
        assert!(gain > 2.3 && gain < 3.0, "{gain}");
    }

    #[test]
    fn copy_bound_and_compute_bound_and_tiny_runs_say_why_overlap_cannot_help() {
        let bytes = 256 << 20;
        let c = costs(5000.0); // a kernel 100x faster than the copies
        let best = c.rank(bytes, usize::MAX)[0].clone();
        assert!(matches!(best.limit, ModelLimit::HtodCopies | ModelLimit::DtohCopies), "{best:?}");
        let v = c.verdict(bytes, &best);
        assert!(v.starts_with("overlap should help"), "both copy directions still overlap: {v}");
        let c = costs(0.5); // a kernel 100x slower
        let best = c.rank(bytes, usize::MAX)[0].clone();
        assert_eq!(best.limit, ModelLimit::Kernels);
        assert!(c.verdict(bytes, &best).contains("dwarfs the copies"), "{}", c.verdict(bytes, &best));
        let c = costs(50.0);
        let best = c.rank(4096, usize::MAX)[0].clone();
        assert!(c.verdict(4096, &best).contains("per-operation costs dominate"), "{}", c.verdict(4096, &best));
    }

    #[test]
    fn configurations_that_do_not_fit_in_memory_are_left_out() {
        let c = costs(50.0);
        let bytes = 256 << 20;
        let ranked = c.rank(bytes, 64 << 20);
        assert!(ranked.iter().all(|p| p.streams * bytes.div_ceil(p.chunks) <= 64 << 20));
        assert!(ranked.iter().all(|p| p.chunks >= 4));
    }
}
