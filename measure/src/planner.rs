//! A pipeline planner: from the copy costs and a kernel's cost, measured on this GPU in the same run,
//! which chunk count and stream count should run a copy-in, compute, copy-out pipeline fastest, and the
//! time a model predicts for each. It is a model, not a bound: [`crate::bound`] gives the bound.
//!
//! The model: every operation on a chunk of `b` bytes costs `α + b/β` (a fit over sizes, [`CopyCost`]),
//! uploads and downloads slow to the rate they keep when both run at once, and a run of `C` chunks on
//! `K` streams takes one chunk's whole chain (fill and drain) plus `C - 1` periods, the period being the
//! busiest engine's time per chunk, or a chain over `K` when too few streams keep the engines fed. It
//! leaves out what the host spends queueing each operation and forking to the streams and joining
//! them back, which a run of many small chunks pays: the achieved time says how much.

use anyhow::Context as _;
use serde::Serialize;

use common::Gpu;
use kernels::Kernels;

use crate::{
    fit::CopyCost,
    pipeline::{Buffering, Pipeline},
    report::{fmt_bytes, fmt_ms},
    timing::{measure, Repeats, Stats},
    work::{Steps, Work},
    ChunkPlan,
};

/// What the planner measured: each operation's cost over chunk sizes.
#[derive(Clone, Debug, Serialize)]
pub struct FittedCosts {
    pub upload: CopyCost,
    pub download: CopyCost,
    /// Each direction's rate with both running, against alone (1.0: no loss; taken as 0.5 at worst,
    /// what two directions sharing one engine's rate would keep).
    pub both_ways: f64,
    /// The kernel, as if it were a copy: a fixed cost per launch and a rate in GB/s of data processed.
    pub kernel: CopyCost,
}

/// What limits a configuration, in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ModelLimit {
    /// One chunk: nothing to overlap with.
    OneChunk,
    Uploads,
    Kernels,
    Downloads,
    /// Too few streams: each carries whole chains, which leave engines idle.
    Streams,
}

impl ModelLimit {
    pub fn name(self) -> &'static str {
        match self {
            ModelLimit::OneChunk => "one chunk, no overlap",
            ModelLimit::Uploads => "uploads",
            ModelLimit::Kernels => "kernels",
            ModelLimit::Downloads => "downloads",
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
    /// Times uploads from `h_in`, downloads into `h_out` (alone and both at once) and the kernel at six
    /// sizes from a 1024th of their length up to all of it, and fits each to its best times. The host
    /// buffers (pinned, as a pipeline's are) must hold 4 MiB at least, so that even a tiny pipeline's
    /// costs are fitted where copies show a rate. `kernel` times the kernel at the sizes it is given
    /// (elements), as `(bytes, ms)`: [`kernel_times`] for the lessons' kernels, [`UserPtx::kernel_times`]
    /// for one of yours.
    pub fn measure(
        gpu: &Gpu,
        (h_in, h_out): (&[f32], &mut [f32]),
        kernel: impl FnOnce(&[usize]) -> anyhow::Result<Vec<(usize, f64)>>,
        r: Repeats,
    ) -> anyhow::Result<FittedCosts> {
        let _phase = crate::timeline::phase("planner: costs");
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
                gpu.timed(s0, |s| s.stream(0).htod(&h_in[..len], s.device(&mut up).slice(0..len)))
            })?));
            downs.push(t(measure(r, || {
                gpu.timed(s0, |s| s.stream(0).dtoh(s.device(&mut down).slice(0..len), &mut h_out[..len]))
            })?));
        }
        let len = sizes[0]; // the largest: the rate with both directions busy, not their per-copy cost
        let both = measure(r, || {
            gpu.timed(&streams, |s| {
                s.stream(0).htod(&h_in[..len], s.device(&mut up).slice(0..len))?;
                s.stream(1).dtoh(s.device(&mut down).slice(0..len), &mut h_out[..len])
            })
        })?;
        let (upload, download) = (CopyCost::fit(&ups)?, CopyCost::fit(&downs)?);
        // Each direction's rate with both at once against alone, per-copy cost taken off both times.
        let alpha = upload.alpha_us.max(download.alpha_us) * 1e-3;
        let alone = upload.ms(len * 4).max(download.ms(len * 4)) - alpha;
        let both_ways = (alone / (both.median_ms - alpha)).clamp(0.5, 1.0);
        Ok(FittedCosts { upload, download, both_ways, kernel: CopyCost::fit(&kernel(&sizes)?)? })
    }

    /// The model's time for `bytes` in `chunks` chunks on `streams` streams.
    pub fn predict(&self, bytes: usize, chunks: usize, streams: usize) -> Prediction {
        let b = bytes.div_ceil(chunks.max(1));
        let (up, k, down) = (self.upload.ms(b), self.kernel.ms(b), self.download.ms(b));
        let slowed = |c: &CopyCost| c.alpha_us * 1e-3 + b as f64 / (c.beta_gbps * 1e9 * self.both_ways) * 1e3;
        let chain = up + k + down;
        let terms = [
            (ModelLimit::Uploads, slowed(&self.upload)),
            (ModelLimit::Kernels, k),
            (ModelLimit::Downloads, slowed(&self.download)),
            (ModelLimit::Streams, chain / streams.max(1) as f64),
        ];
        let (limit, period) = terms.into_iter().fold((ModelLimit::Streams, 0.0), |a, t| if t.1 > a.1 { t } else { a });
        let ms = chain + (chunks.max(1) - 1) as f64 * period;
        let alpha = (self.upload.alpha_us + self.kernel.alpha_us + self.download.alpha_us) * 1e-3;
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
        [("upload", &self.upload), ("download", &self.download), ("kernel", &self.kernel)]
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
        let (up, k, down) = (self.upload.ms(bytes), self.kernel.ms(bytes), self.download.ms(bytes));
        if gain >= 1.15 {
            return format!("overlap should help: {gain:.2}x faster than one chunk on one stream ({})", fmt_ms(serial));
        }
        if best.per_operation_share > 0.5 || bytes as f64 <= self.upload.half_rate_bytes {
            return format!(
                "no overlap can help much ({gain:.2}x): per-operation costs dominate; {} is below or near the \
                 {} at which a copy reaches half its rate",
                fmt_bytes(bytes),
                fmt_bytes(self.upload.half_rate_bytes as usize)
            );
        }
        if up.max(down) > 4.0 * k {
            return format!(
                "no overlap can help much ({gain:.2}x): copy-bound, the copies take {} and {} against the kernel's {}; \
                 only both directions at once can be hidden, and they lose {:.0}% of their rate together",
                fmt_ms(up),
                fmt_ms(down),
                fmt_ms(k),
                100.0 * (1.0 - self.both_ways)
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
    let input = common::pageable(d.len(), crate::verify::input)?;
    gpu.scope(s0, |s| s.stream(0).htod(&input, s.device(&mut d)))?;
    let mut out = Vec::new();
    for &len in sizes {
        let t = measure(r, || gpu.timed(s0, |s| work.run(kernels, s.stream(0), s.device(&mut d).slice(0..len))))?;
        out.push((len * 4, t.min_ms));
    }
    Ok(out)
}

/// A kernel of your own, in a PTX file (`nvcc -ptx -arch=sm_90 mine.cu`), declared
/// `extern "C" __global__ void NAME(float* data, unsigned long long n)`: in place, one thread per element
/// in blocks of 256, as the lessons launch theirs.
///
/// It runs in a child process: this program started again with [`CHILD`] set, which loads the kernel,
/// runs what it is asked and prints the times. Only the planner's own `main` acts as that child
/// ([`child_job`]): it is there that the kernel is adopted, in an `unsafe` block. Nothing here can check what the kernel does (it might
/// write outside its data); in the child it can reach nothing of this process's, and a fault kills the
/// child's context, not this one.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct UserPtx {
    pub ptx: std::path::PathBuf,
    pub name: String,
}

/// The variable that makes the planner the child of a [`UserPtx`]: the job, as JSON.
pub const CHILD: &str = "GPU_TRANSFERS_USER_KERNEL";

/// What the child is asked: the kernel's times at `sizes`, and the pipeline over `elements` for each
/// (chunks, streams) of `configs`.
#[derive(Serialize, serde::Deserialize)]
struct Job {
    kernel: UserPtx,
    sizes: Vec<usize>,
    elements: usize,
    configs: Vec<(usize, usize)>,
    repeats: Repeats,
}

#[derive(Serialize, serde::Deserialize)]
struct Done {
    kernel: Vec<(usize, f64)>,
    runs: Vec<Stats>,
}

impl UserPtx {
    /// Checks the file and the kernel's parameters before anything runs.
    pub fn new(ptx: std::path::PathBuf, name: String) -> anyhow::Result<UserPtx> {
        let text = std::fs::read_to_string(&ptx).with_context(|| format!("reading {}", ptx.display()))?;
        user_signature(&text, &name)?;
        Ok(UserPtx { ptx, name })
    }

    /// The kernel's best time over each of `sizes` elements, as `(bytes, ms)`.
    pub fn kernel_times(&self, sizes: &[usize], r: Repeats) -> anyhow::Result<Vec<(usize, f64)>> {
        let job = Job { kernel: self.clone(), sizes: sizes.to_vec(), elements: 0, configs: vec![], repeats: r };
        Ok(self.ask(&job)?.kernel)
    }

    /// The pipeline over `elements` with the kernel, for each (chunks, streams) of `configs`.
    pub fn run(&self, elements: usize, configs: &[(usize, usize)], r: Repeats) -> anyhow::Result<Vec<Stats>> {
        let job = Job { kernel: self.clone(), sizes: vec![], elements, configs: configs.to_vec(), repeats: r };
        Ok(self.ask(&job)?.runs)
    }

    fn ask(&self, job: &Job) -> anyhow::Result<Done> {
        let me = std::env::current_exe().context("finding this program, to run your kernel in a child of it")?;
        let out = std::process::Command::new(me)
            .env(CHILD, serde_json::to_string(job)?)
            .stdin(std::process::Stdio::null())
            .output()
            .context("starting the child process for your kernel")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match (out.status.success(), stdout.lines().last()) {
            (true, Some(last)) => serde_json::from_str(last).context("reading the child's times"),
            _ => anyhow::bail!(
                "your kernel's child process failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("no message")
            ),
        }
    }
}

/// Whether the PTX text declares `name` as a kernel of the user's may be: `.entry name(.param .u64,
/// .param .u64)`, that is `extern "C" __global__ void name(float* data, unsigned long long n)`.
pub fn user_signature(ptx: &str, name: &str) -> anyhow::Result<()> {
    let params = common::module::signature(ptx, name).with_context(|| {
        format!("the PTX has no kernel named {name} (declare it extern \"C\" so that its name is not mangled)")
    })?;
    let params = params.map_err(|why| anyhow::anyhow!("{name}: {why}"))?;
    if params != [".u64", ".u64"] {
        anyhow::bail!(
            "{name} takes ({}); kernels of yours must be declared (float* data, unsigned long long n)",
            params.join(", ")
        );
    }
    Ok(())
}

/// The job of a child that [`UserPtx`] started, where this process is one ([`CHILD`] is set).
pub fn child_job() -> Option<anyhow::Result<ChildJob>> {
    let job = std::env::var(CHILD).ok()?;
    Some(serde_json::from_str::<Job>(&job).context("reading the planner's job").map(ChildJob))
}

/// What a child of [`UserPtx`] is asked to do with the user's kernel.
pub struct ChildJob(Job);

impl ChildJob {
    /// The PTX file of the user's kernel.
    pub fn ptx(&self) -> &std::path::Path {
        &self.0.kernel.ptx
    }

    /// The kernel's name.
    pub fn kernel(&self) -> &str {
        &self.0.kernel.name
    }

    /// Does the job with the kernel `kernels` adopted ([`Kernels::adopt_user`]) and prints the result
    /// as one line of JSON, for the parent to read.
    pub fn run(self, gpu: &Gpu, kernels: &Kernels) -> anyhow::Result<()> {
        let job = self.0;
        let work = Work::User;
        let kernel =
            if job.sizes.is_empty() { vec![] } else { kernel_times(gpu, kernels, work, &job.sizes, job.repeats)? };
        let mut runs = Vec::new();
        if !job.configs.is_empty() {
            let mut p = Pipeline::new(gpu, kernels, Steps::InPlace(work), job.elements, job.repeats)?;
            for &(chunks, streams) in &job.configs {
                let plan = ChunkPlan::new(job.elements, chunks, streams)?;
                runs.push(p.time("your kernel", &plan, Buffering::per_stream(streams))?.time);
            }
        }
        println!("{}", serde_json::to_string(&Done { kernel, runs })?);
        Ok(())
    }
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
            upload: cost(10.0, 55.0),
            download: cost(10.0, 55.0),
            both_ways: 50.0 / 55.0,
            kernel: cost(5.0, kernel_gbps),
        }
    }

    #[test]
    fn one_chunk_is_the_chain_and_one_stream_is_chunks_chains() {
        let c = costs(55.0);
        let bytes = 256 << 20;
        let one = c.predict(bytes, 1, 1);
        let chain = c.upload.ms(bytes) + c.kernel.ms(bytes) + c.download.ms(bytes);
        assert!((one.ms - chain).abs() < 1e-12 && one.limit == ModelLimit::OneChunk);
        let serial = c.predict(bytes, 8, 1);
        let b = bytes / 8;
        assert!((serial.ms - 8.0 * (c.upload.ms(b) + c.kernel.ms(b) + c.download.ms(b))).abs() < 1e-9);
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
        assert!(matches!(best.limit, ModelLimit::Uploads | ModelLimit::Downloads), "{best:?}");
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
