//! `--plan`: which way moves a given set of small buffers fastest. The model ([`ModelCosts`]) is built
//! from costs measured in the same run, recommends the way it predicts fastest, then every rival is run
//! on the set and held against what the model said.
//!
//! The host's speed is not one figure a process keeps: on virtualized hosts, every driver call of a process
//! can run 1.6x (one memcpy) to 2.4x (a batched call's buffer) slower for hundreds of milliseconds at a
//! time, then fast again, whichever CPU the process is held to (see docs/design.md, Many small copies). A
//! model whose calls were measured in one spell and a run in another misses by that much. So the plan
//! makes [`PASSES`] passes, in each of which every rival runs right after what the host's speed moves of
//! its costs is measured again (a round trip's fork, join and synchronization; its calls' lines; for the
//! packed way, the crew's rates and what it takes beyond its parts; zero-copy's kernels), and holds each
//! pass's run against its own prediction. It shows each rival's pass whose achieved over predicted is the
//! median, every pass's ratio beside it, and recommends the rival whose median prediction is the least.

use serde::Serialize;

use cuda_scope::{DeviceInfo, SrcOrder};
use measure::{
    report::{Output, Table},
    timing::Repeats,
};

use crate::{
    buffers::{BufferPlacement, BufferSet},
    costs::{CalibrationSets, LinearCost, ModelCosts, Prediction},
    results::{us, SetRun},
    rig::SmallCopiesRig,
    ways::TransferWay,
};

/// The ways the planner chooses among.
pub fn rivals(zero_copy: bool, batch: bool) -> Vec<TransferWay> {
    let mut v = vec![
        TransferWay::Each { streams: 1, pageable: false, coalesced: false },
        TransferWay::Each { streams: 1, pageable: false, coalesced: true },
    ];
    if batch {
        v.push(TransferWay::Batch { order: SrcOrder::StreamOrder, pageable: false });
    }
    v.extend([TransferWay::Packed, TransferWay::Graph]);
    if zero_copy {
        v.push(TransferWay::ZeroCopy);
    }
    v
}

/// Where the buffers of `set` and of the sets the costs are measured on lie: what a rig for the plan
/// holds.
pub fn placements(set: &BufferSet) -> Vec<BufferPlacement> {
    let calibration = CalibrationSets::for_set(set);
    std::iter::once(set).chain(calibration.all()).map(BufferPlacement::new).collect()
}

/// What `--json` writes for a plan.
#[derive(Serialize)]
struct PlanResults<'a> {
    device: &'a DeviceInfo,
    repeats: Repeats,
    plan: &'a SetPlan,
}

/// How many passes a plan makes: in each, every rival's costs measured again, its prediction, its run.
pub const PASSES: usize = 3;

/// The plan for one set: the costs measured, then [`PASSES`] passes, in each of which every rival runs
/// right after what the host's speed moves of its costs is measured again and it is predicted with
/// them; the fastest predicted (by the median of the passes) recommended.
#[derive(Clone, Debug, Serialize)]
pub struct SetPlan {
    pub set: String,
    /// Every cost, as the first pass measured them.
    pub costs: ModelCosts,
    /// Each rival's prediction and run in its median pass (by achieved over predicted).
    pub predictions: Vec<Prediction>,
    pub run: SetRun,
    /// The rival with the least median prediction.
    pub recommended: TransferWay,
    pub passes: Vec<PlanPass>,
}

/// One pass of a plan: what the model said of each rival with what the host's speed moves of its costs
/// measured right before it ran ([`ModelCosts::again_for`]), the runs, and those costs as they stood
/// at the end.
#[derive(Clone, Debug, Serialize)]
pub struct PlanPass {
    /// The host's time a buffer (up and back) in one memcpy per buffer, a batch and a graph, µs.
    pub each_host_us: f64,
    pub batch_host_us: f64,
    pub graph_host_us: f64,
    /// The crew's packing rate beside the copies up, GB/s, and what the packed way took beyond its parts
    /// near the set's packed bytes, µs.
    pub crew_pack_gbps: f64,
    pub packed_beyond_us: f64,
    pub predictions: Vec<Prediction>,
    pub run: SetRun,
}

impl PlanPass {
    /// Rival `i`'s achieved wall time over its predicted one in this pass.
    fn ratio(&self, i: usize) -> f64 {
        achieved_over_predicted(&self.run, &self.predictions, i)
    }
}

/// Rival `i`'s achieved wall time in `run` over its predicted one.
fn achieved_over_predicted(run: &SetRun, predictions: &[Prediction], i: usize) -> f64 {
    run.ways[i].wall.median_ms / predictions[i].wall_ms
}

impl SetPlan {
    /// Measures the costs on `rig`, then makes the passes over `set`.
    pub fn make(rig: &mut SmallCopiesRig, set: &BufferSet, ways: &[TransferWay]) -> anyhow::Result<SetPlan> {
        let sets = CalibrationSets::for_set(set);
        let mut costs = ModelCosts::measure(rig, &sets)?;
        let mut passes = Vec::new();
        for pass in 0..PASSES {
            let _phase = measure::timeline::phase(&format!("plan: pass {}", pass + 1));
            // Each way right after what the host's speed moves of its costs is measured again.
            let (mut now, mut predictions, mut runs) = (costs.clone(), Vec::new(), Vec::new());
            for &way in ways {
                now.again_for(rig, &sets, way)?;
                predictions.push(now.predict(way, set));
                runs.push(rig.run_set(set, &[way])?);
            }
            let mut run = runs[0].clone();
            run.ways = runs.into_iter().flat_map(|r| r.ways).collect();
            let per_buffer = |line: &LinearCost| line.ms(set.count()) * 1e3 / set.count() as f64;
            passes.push(PlanPass {
                each_host_us: per_buffer(&now.each_host),
                batch_host_us: per_buffer(&now.batch_host),
                graph_host_us: per_buffer(&now.graph_host),
                crew_pack_gbps: now.busy.pack_gbps,
                packed_beyond_us: now.beyond_ms(set) * 1e3,
                predictions,
                run,
            });
            if pass == 0 {
                costs = now;
            }
        }
        Ok(SetPlan::of_passes(set, costs, passes))
    }

    /// The plan the passes make: for each rival, the pass whose achieved over predicted is the median
    /// (its prediction and its run); the rival whose median prediction is the least recommended.
    fn of_passes(set: &BufferSet, costs: ModelCosts, passes: Vec<PlanPass>) -> SetPlan {
        let ways = passes[0].predictions.len();
        // The pass in the middle by `key` (the upper of the two middle ones of an even count).
        let median_by = |key: &dyn Fn(&PlanPass) -> f64| {
            let mut order: Vec<&PlanPass> = passes.iter().collect();
            order.sort_by(|a, b| key(a).total_cmp(&key(b)));
            order[order.len() / 2]
        };
        let median_pass = |i: usize| median_by(&|p| p.ratio(i));
        let predictions: Vec<Prediction> = (0..ways).map(|i| median_pass(i).predictions[i].clone()).collect();
        let mut run = passes[0].run.clone();
        run.ways = (0..ways).map(|i| median_pass(i).run.ways[i].clone()).collect();
        // The recommendation is the model's alone: the least of the rivals' median predictions.
        let median_prediction = |i: usize| median_by(&|p| p.predictions[i].wall_ms).predictions[i].wall_ms;
        let best = (0..ways).min_by(|&a, &b| median_prediction(a).total_cmp(&median_prediction(b))).expect("a way");
        let recommended = passes[0].predictions[best].way;
        SetPlan { set: set.describe(), costs, predictions, recommended, run, passes }
    }

    /// Rival `i`'s achieved over predicted in its median pass.
    pub fn ratio(&self, i: usize) -> f64 {
        achieved_over_predicted(&self.run, &self.predictions, i)
    }

    /// Predicted against achieved, a row a way.
    pub fn table(&self) -> Table {
        let mut t = Table::new(&[
            "way",
            "predicted µs",
            "achieved µs",
            "achieved / predicted",
            "each pass",
            "GPU µs",
            "host µs",
            "",
        ]);
        for (i, (p, w)) in self.predictions.iter().zip(&self.run.ways).enumerate() {
            let passes: Vec<String> = self.passes.iter().map(|p| format!("{:.2}", p.ratio(i))).collect();
            t.row(vec![
                w.name.clone(),
                us(p.wall_ms),
                us(w.wall.median_ms),
                format!("{:.2}", self.ratio(i)),
                passes.join(" "),
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
        let i = self.predictions.iter().position(|p| p.way == self.recommended).expect("the recommended way");
        let (p, w) = (&self.predictions[i], &self.run.ways[i]);
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
            self.ratio(i)
        )
    }

    /// What each pass measured right before each way ran, in words, as the model reads it for this set:
    /// the host's time a buffer in the calls (their lines at the set's count), and what the packed way
    /// took beyond its parts at its bytes.
    pub fn calls_by_pass(&self) -> String {
        // Each pass's figure, in words, one after another.
        let of = |f: &dyn Fn(&PlanPass) -> String| self.passes.iter().map(f).collect::<Vec<_>>().join(", ");
        let batch = match self.passes[0].batch_host_us.is_finite() {
            true => format!("; a batch {}", of(&|p| format!("{:.2}", p.batch_host_us))),
            false => String::new(),
        };
        format!(
            "measured again before each way ran, pass by pass: the host's time a buffer up and back, one memcpy \
             per buffer {}{batch}; a graph {} µs; the crew packing beside the copies at {} GB/s; the packed way \
             beyond its parts {} µs",
            of(&|p| format!("{:.2}", p.each_host_us)),
            of(&|p| format!("{:.2}", p.graph_host_us)),
            of(&|p| format!("{:.1}", p.crew_pack_gbps)),
            of(&|p| format!("{:+.1}", p.packed_beyond_us))
        )
    }
}

impl SmallCopiesRig {
    /// The plan for `set` (the rig made for [`placements`] of it): the costs measured, the prediction of
    /// every rival against what it achieved, the verdict, and the JSON document.
    pub fn plan(&mut self, set: &BufferSet, out: &Output) -> anyhow::Result<()> {
        let ways = rivals(self.zero_copy(), self.batch.is_ok());
        let plan = SetPlan::make(self, set, &ways)?;
        out.say(format!("Plan for {}; costs measured in this run:", plan.set));
        plan.costs.describe().iter().for_each(|l| out.say(format!("  {l}")));
        out.say(format!("  {}", plan.calls_by_pass()));
        out.say(format!(
            "\nEvery way's round trip (every buffer up and back), wall µs: the model's, then the run's, in the pass \
             whose achieved over predicted was the median of {PASSES} (each pass with what the host's speed moves \
             measured again right before each way; every pass's in the next column)"
        ));
        out.table(&plan.table());
        out.say(plan.verdict());
        plan.run.figures().into_iter().for_each(|f| out.add(f)); // `SET / WAY / wall`, for `cargo xtask compare`
        out.finish(&PlanResults { device: &self.gpu.info, repeats: self.repeats, plan: &plan })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{costs::tests::h200, results::tests::made_up};

    /// A pass whose run is the made-up one with every way's wall time `scale`d, and whose predictions
    /// are the made-up wall times times `predicted`.
    fn pass(scale: f64, predicted: f64) -> PlanPass {
        let mut run = made_up(1000, 4096);
        run.ways.iter_mut().for_each(|w| w.wall.median_ms *= scale);
        let predictions = run
            .ways
            .iter()
            .map(|w| Prediction {
                way: w.way,
                gpu_ms: 0.0,
                host_ms: 0.0,
                wall_ms: w.wall.median_ms / scale * predicted,
            })
            .collect();
        PlanPass {
            each_host_us: 2.0 * scale,
            batch_host_us: scale,
            graph_host_us: 0.5,
            crew_pack_gbps: 40.0 / scale,
            packed_beyond_us: 10.0 * scale,
            predictions,
            run,
        }
    }

    #[test]
    fn a_plan_takes_the_median_of_its_passes_and_each_pass_against_its_own_prediction() {
        // The host twice as slow in the second pass, which predicted it so (its costs measured slow just
        // before): each pass achieved 1.0, 1.0 and 1.25 of its own prediction.
        let set = BufferSet::uniform(1000, 4096);
        let plan = SetPlan::of_passes(&set, h200(), vec![pass(1.0, 1.0), pass(2.0, 2.0), pass(1.25, 1.0)]);
        let made = made_up(1000, 4096);
        for (i, w) in made.ways.iter().enumerate() {
            // The median pass by achieved over predicted (the second of the two at 1.0): its prediction and
            // its run, so that the row's ratio is theirs.
            assert_eq!(
                plan.predictions[i].wall_ms,
                w.wall.median_ms * 2.0,
                "the median pass's prediction of {}",
                w.name
            );
            assert_eq!(plan.run.ways[i].wall.median_ms, w.wall.median_ms * 2.0, "the median pass's run of {}", w.name);
            assert_eq!(plan.ratio(i), 1.0, "{}", w.name);
        }
        // The fastest made-up way, by the median prediction.
        assert_eq!(plan.recommended, made.fastest().way);
        let table = plan.table().render();
        assert!(table.contains("each pass") && table.contains("1.00 1.00 1.25"), "{table}");
        assert_eq!(
            plan.calls_by_pass(),
            "measured again before each way ran, pass by pass: the host's time a buffer up and back, one memcpy \
             per buffer 2.00, 4.00, 2.50; a batch 1.00, 2.00, 1.25; a graph 0.50, 0.50, 0.50 µs; the crew packing \
             beside the copies at 40.0, 20.0, 32.0 GB/s; the packed way beyond its parts +10.0, +20.0, +12.5 µs"
        );
        assert!(plan.verdict().contains("(1.00 of the prediction)"), "{}", plan.verdict());
    }
}
