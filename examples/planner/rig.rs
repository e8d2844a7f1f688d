//! The planner's rig: its setup from the flags and what that needs of the machine, checked before
//! anything is allocated; the GPU with the lessons' kernels and the kernel planned for; the costs
//! measured and printed, the model's ranking, the runs held against their predictions, the best
//! against its bound, and the JSON.

use serde::Serialize;

use cuda_scope::{DeviceInfo, Footprint, Gpu};
use kernels::Kernels;
use measure::{
    args::WorkArgs,
    bound::PipelineReport,
    error::bad_args,
    fit::CopyCost,
    pipeline::{balanced_work, calibrate_process, Buffering, Pipeline, PipelineRun},
    report::{fmt_bytes, fmt_ms, Figure, Output, Table},
    timing::{Repeats, Stats},
    work::{Steps, Work},
    Chunking,
};

use crate::{
    child::UserPtx,
    model::{kernel_times, FittedCosts, Prediction},
    Args,
};

/// The elements the costs are fitted over, at least: 4 MiB, where copies show a rate.
const FIT_ELEMENTS: usize = 1 << 20;

/// What the planner plans for, from its flags: checked before the GPU starts.
pub struct PlannerSetup {
    /// The f32 elements the pipeline moves in and out (`--size` / 4).
    pub elements: usize,
    pub repeats: Repeats,
    /// What the kernel should take over a chunk of 1 MiB (`--kernel-ms-per-mib`).
    pub ms_per_mib: Option<f64>,
    /// The kernel's rounds (`--iters`); with neither, a kernel as long as the copies.
    pub iters: Option<u32>,
    /// A kernel of yours (`--ptx`, `--kernel`), its file and parameters checked; it runs only in a child.
    pub user: Option<UserPtx>,
}

impl PlannerSetup {
    pub fn new(args: &Args) -> anyhow::Result<PlannerSetup> {
        let elements = args.size / 4;
        anyhow::ensure!(elements >= 4, "--size: at least 16 bytes");
        let user = match (&args.ptx, &args.kernel) {
            (Some(ptx), Some(name)) => {
                Some(UserPtx::new(ptx.clone(), name.clone()).map_err(|e| bad_args(format!("--ptx: {e:#}")))?)
            }
            _ => None,
        };
        let (ms_per_mib, iters) = (args.kernel_ms_per_mib, args.work.iters);
        Ok(PlannerSetup { elements, repeats: args.run.repeats(), ms_per_mib, iters, user })
    }

    /// The bytes the pipeline moves each way.
    pub fn bytes(&self) -> usize {
        self.elements * 4
    }

    /// The most the planner holds at once, from `--size` (N: its elements, 1Mi at least, as the fits
    /// need): the pipeline's data pinned, in and out (2N), and the child's as much again for a kernel
    /// of yours; the kernel's input for its timing in pageable memory (N); on the device the costs' H2D
    /// and D2H buffers with the kernel's timing buffer beside them (3N), or a run's buffers (the data
    /// and a few elements a chunk) with the bound's scratch (twice the data): 4N holds either.
    pub fn footprint(&self) -> Footprint {
        let n = self.elements.max(FIT_ELEMENTS);
        let pinned = if self.user.is_some() { 4 } else { 2 };
        Footprint::default()
            .pinned::<f32>(n.saturating_mul(pinned))
            .pageable::<f32>(n)
            .device::<f32>(n.saturating_mul(4))
    }
}

/// The best configuration, its neighbours (twice and half the chunks, twice and half the streams) and
/// one chunk on one stream, each once and each with no more chunks than `elements`: the best first.
pub fn configurations_around(best: &Prediction, elements: usize) -> Vec<(usize, usize)> {
    let (c, k) = (best.chunks, best.streams);
    let mut configs = vec![(c, k), (c * 2, k), (c / 2, k.min(c / 2)), (c, (k * 2).min(c)), (c, k / 2), (1, 1)];
    configs.retain(|&(c, k)| c >= 1 && k >= 1 && c <= elements);
    let mut once = Vec::new();
    for x in configs {
        if !once.contains(&x) {
            once.push(x);
        }
    }
    once
}

/// One configuration run: what the model said, what it took.
#[derive(Serialize)]
pub struct Tried {
    pub predicted: Prediction,
    pub achieved: Stats,
}

/// What the planner writes with `--json`.
#[derive(Serialize)]
struct PlannerResults<'a> {
    device: &'a DeviceInfo,
    bytes: usize,
    work: Work,
    user_kernel: Option<&'a UserPtx>,
    repeats: Repeats,
    costs: &'a FittedCosts,
    /// The model's five best.
    ranked: &'a [Prediction],
    tried: &'a [Tried],
    report: Option<PipelineReport>,
}

/// The planner's GPU, the lessons' kernels, its setup, and the kernel each chunk runs.
pub struct PlannerRig {
    pub gpu: Gpu,
    pub kernels: Kernels,
    pub setup: PlannerSetup,
    /// The kernel planned for: calibrated now where the flags ask for it; `Work::User` for a kernel of
    /// yours, which runs in the child.
    pub work: Work,
}

impl PlannerRig {
    /// Starts the GPU that `CUDA_DEVICE` names (its report printed), refuses at once a `--size` whose
    /// memory does not fit it or the host, loads the lessons' kernels and calibrates the kernel.
    pub fn start(out: &Output, setup: PlannerSetup) -> anyhow::Result<PlannerRig> {
        let gpu = measure::lesson::gpu(out, &setup.footprint())?;
        let kernels = Kernels::load(&gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
        let (mib, r) = ((1 << 20) / 4, setup.repeats);
        let work = match (setup.ms_per_mib, setup.iters, &setup.user) {
            (_, _, Some(_)) => Work::User,
            (Some(ms), _, _) => Work::Process(calibrate_process(&gpu, &kernels, mib, ms, r)?),
            (None, Some(iters), _) => Work::Process(iters),
            (None, None, _) => {
                let work = balanced_work(&gpu, &kernels, mib, r)?;
                out.repeat_with(&WorkArgs::flags_for(work).unwrap_or_default());
                work
            }
        };
        Ok(PlannerRig { gpu, kernels, setup, work })
    }

    /// The pipeline's data in pinned memory: the setup's, and 4 MiB at least for the costs' fits.
    pub fn pipeline(&self) -> anyhow::Result<Pipeline<'_>> {
        let n = self.setup.elements.max(FIT_ELEMENTS);
        Pipeline::new(&self.gpu, &self.kernels, Steps::InPlace(self.work), n, self.setup.repeats)
    }

    /// What this GPU's copies and the kernel cost over chunk sizes, on `p`'s data, fitted and printed.
    pub fn costs(&self, p: &mut Pipeline<'_>, out: &Output) -> anyhow::Result<FittedCosts> {
        let (gpu, r, host) = (&self.gpu, self.setup.repeats, (&p.h_in[..], &mut p.h_out[..]));
        let costs = match &self.setup.user {
            Some(u) => FittedCosts::measure(gpu, host, |sizes| u.kernel_times(sizes, r), r)?,
            None => FittedCosts::measure(gpu, host, |sizes| kernel_times(gpu, &self.kernels, self.work, sizes, r), r)?,
        };
        let line = |what: &str, c: &CopyCost| {
            format!("{what:<9} {:>6.1} µs per operation, then {:>7.2} GB/s", c.alpha_us, c.beta_gbps)
        };
        let what = self
            .setup
            .user
            .as_ref()
            .map_or(self.work.describe(), |u| format!("your kernel {} from {}", u.name, u.ptx.display()));
        out.say(format!("{} ({}), {what}", fmt_bytes(self.setup.bytes()), self.setup.elements));
        out.say(line("H2D", &costs.htod));
        out.say(line("D2H", &costs.dtoh));
        out.say(line("kernel", &costs.kernel));
        let asked = self.setup.ms_per_mib.map_or(String::new(), |ms| format!(" (asked {ms} ms)"));
        out.say(format!(
            "the kernel takes {:.4} ms over a chunk of 1 MiB, launch included{asked}",
            costs.kernel.ms(1 << 20)
        ));
        costs.warnings().iter().for_each(|w| out.say(w));
        out.say(format!("both directions at once keep {:.0}% of their rate", 100.0 * costs.both_directions));
        Ok(costs)
    }

    /// Every configuration whose buffers fit in free device memory (less a fifth), ranked by the model,
    /// the five best printed.
    pub fn rank(&self, costs: &FittedCosts, out: &Output) -> anyhow::Result<Vec<Prediction>> {
        let (free, _) = self.gpu.memory()?;
        let ranked = costs.rank(self.setup.bytes(), free / 10 * 8);
        anyhow::ensure!(!ranked.is_empty(), "no configuration fits in device memory");
        out.say("\nThe model's best (predicted, not yet run):");
        let mut t = Table::new(&["chunks", "streams", "predicted", "limited by (model)", "per-operation share"]);
        for p in ranked.iter().take(5) {
            let share = format!("{:.0}%", 100.0 * p.per_operation_share);
            t.row(vec![p.chunks.to_string(), p.streams.to_string(), fmt_ms(p.ms), p.limit.name().into(), share]);
        }
        out.table(&t);
        Ok(ranked)
    }

    /// Each of `configs` (chunks, streams) run with the overlap loop, each a figure held against the
    /// model's prediction: here, checked against the CPU, or in the child for a kernel of yours (which
    /// has no CPU twin). Prints the table and the fastest.
    pub fn run(
        &self,
        p: &mut Pipeline<'_>,
        costs: &FittedCosts,
        configs: &[(usize, usize)],
        out: &Output,
    ) -> anyhow::Result<Vec<Tried>> {
        let (bytes, r) = (self.setup.bytes(), self.setup.repeats);
        let achieved = match &self.setup.user {
            Some(u) => u.run(self.setup.elements, configs, r)?,
            None => self.run_here(p, configs, out)?,
        };
        let tried: Vec<Tried> = configs
            .iter()
            .zip(achieved)
            .map(|(&(c, k), achieved)| Tried { predicted: costs.predict(bytes, c, k), achieved })
            .collect();
        for x in &tried {
            let name = format!("{} chunks on {} streams", x.predicted.chunks, x.predicted.streams); // for xtask compare
            let figure = Figure::new(name, &x.achieved).transfers(bytes / x.predicted.chunks);
            out.add(figure.calibrated("work").against_model(x.predicted.ms));
        }
        self.print_tried(&tried, out);
        Ok(tried)
    }

    /// `configs` run in this process with the lessons' kernel, each checked against the CPU.
    fn run_here(&self, p: &mut Pipeline<'_>, configs: &[(usize, usize)], out: &Output) -> anyhow::Result<Vec<Stats>> {
        let bar = out.progress_bar(configs.len() as u64, "planner");
        let mut times = Vec::new();
        for &(chunks, streams) in configs {
            bar.step(format!("{chunks} chunks on {streams} streams"));
            let chunking = Chunking::new(self.setup.elements, chunks, streams)?;
            let name = format!("{chunks} chunks on {streams} streams");
            times.push(p.time(&name, &chunking, Buffering::per_stream(streams))?.time); // checked against the CPU
            bar.done();
        }
        Ok(times)
    }

    /// The runs beside their predictions, and the fastest.
    fn print_tried(&self, tried: &[Tried], out: &Output) {
        let checked = if self.setup.user.is_some() {
            "not checked: your kernel has no CPU twin"
        } else {
            "every chunk checked against the CPU"
        };
        out.say(format!("\nRun (median of up to {} runs; {checked}):", self.setup.repeats.repeats));
        let mut t = Table::new(&["chunks", "streams", "predicted", "achieved", "achieved/predicted", "model's limit"]);
        for x in tried {
            let (p, a) = (&x.predicted, &x.achieved);
            let ratio = format!("{:.2}", a.median_ms / p.ms);
            let (chunks, streams, limit) = (p.chunks.to_string(), p.streams.to_string(), p.limit.name().into());
            t.row(vec![chunks, streams, fmt_ms(p.ms), fmt_ms(a.median_ms), ratio, limit]);
        }
        out.table(&t);
        let fastest = tried.iter().min_by(|a, b| a.achieved.median_ms.total_cmp(&b.achieved.median_ms));
        if let Some(f) = fastest {
            let (c, k) = (f.predicted.chunks, f.predicted.streams);
            out.say(format!("fastest run: {c} chunks on {k} streams, {}", fmt_ms(f.achieved.median_ms)));
        }
    }

    /// `best`'s run held against the lower bound measured on its own data, its table printed: the
    /// bound times the kernel in this process, so not for a kernel of yours (None).
    pub fn bound(&self, p: &mut Pipeline<'_>, best: &Tried, out: &Output) -> anyhow::Result<Option<PipelineReport>> {
        if self.setup.user.is_some() {
            return Ok(None);
        }
        let (c, k) = (best.predicted.chunks, best.predicted.streams);
        let chunking = Chunking::new(self.setup.elements, c, k)?;
        let name = format!("{c} chunks on {k} streams");
        let run = PipelineRun { name, time: best.achieved, buffering: Buffering::per_stream(k) };
        let report = PipelineReport::measure(p, &chunking, &[run])?;
        out.table(&report.table());
        Ok(Some(report))
    }

    /// Writes the JSON: the device, the setup, the costs, the model's five best, the runs and the report.
    pub fn finish(
        &self,
        out: &Output,
        costs: &FittedCosts,
        ranked: &[Prediction],
        tried: &[Tried],
        report: Option<PipelineReport>,
    ) -> anyhow::Result<()> {
        out.finish(&PlannerResults {
            device: &self.gpu.info,
            bytes: self.setup.bytes(),
            work: self.work,
            user_kernel: self.setup.user.as_ref(),
            repeats: self.setup.repeats,
            costs,
            ranked: &ranked[..ranked.len().min(5)],
            tried,
            report,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelLimit;

    const MIB: usize = 1 << 20;

    fn setup(size: usize, user: bool) -> PlannerSetup {
        let user = user.then(|| UserPtx { ptx: "mine.ptx".into(), name: "mine".into() });
        let repeats = Repeats { warmup: 1, repeats: 3 };
        PlannerSetup { elements: size / 4, repeats, ms_per_mib: None, iters: None, user }
    }

    #[test]
    fn the_footprint_follows_the_size() {
        // 256 MiB: 512 MiB pinned, 256 MiB pageable, 1 GiB on the device.
        let need = setup(256 * MIB, false).footprint();
        assert_eq!((need.pinned, need.pageable, need.device), (512 * MIB, 256 * MIB, 1024 * MIB));
        // A kernel of yours: the child pins its own data beside the planner's.
        assert_eq!(setup(256 * MIB, true).footprint().pinned, 1024 * MIB);
        // The fits need 4 MiB: a tiny size still holds that much.
        let tiny = setup(16, false).footprint();
        assert_eq!((tiny.pinned, tiny.pageable, tiny.device), (8 * MIB, 4 * MIB, 16 * MIB));
        // A size past any machine saturates rather than wraps.
        let huge = setup(usize::MAX, true).footprint();
        assert_eq!((huge.pinned, huge.device), (usize::MAX, usize::MAX));
    }

    #[test]
    fn the_best_is_tried_first_with_its_neighbours_once_each() {
        let best = |chunks, streams| Prediction {
            chunks,
            streams,
            ms: 1.0,
            limit: ModelLimit::Kernels,
            per_operation_share: 0.0,
        };
        assert_eq!(configurations_around(&best(32, 3), 1 << 20), [(32, 3), (64, 3), (16, 3), (32, 6), (32, 1), (1, 1)]);
        // One chunk on one stream is the best: nothing else to try but twice the chunks.
        assert_eq!(configurations_around(&best(1, 1), 1 << 20), [(1, 1), (2, 1)]);
        // No more chunks than elements.
        assert_eq!(configurations_around(&best(4, 2), 4), [(4, 2), (2, 2), (4, 4), (4, 1), (1, 1)]);
    }
}
