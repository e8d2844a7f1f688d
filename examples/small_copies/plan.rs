//! `--plan`: which way moves a given set of small buffers fastest. The model ([`ModelCosts`]) is built
//! from costs measured in the same run, recommends the way it predicts fastest, then every rival is run
//! on the set and held against what the model said.

use serde::Serialize;

use common::{DeviceInfo, SrcOrder};
use measure::{
    report::{Output, Table},
    timing::Repeats,
};

use crate::{
    buffers::{BufferPlacement, BufferSet},
    costs::{CalibrationSets, ModelCosts, Prediction},
    results::{us, SetRun},
    rig::SmallCopiesRig,
    ways::TransferWay,
};

/// The ways the planner chooses among.
pub fn rivals(zero_copy: bool, batch: bool) -> Vec<TransferWay> {
    let mut v = vec![TransferWay::Each { streams: 1, pageable: false }];
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

/// The plan for one set: every rival predicted, the fastest recommended, then every rival run.
#[derive(Clone, Debug, Serialize)]
pub struct SetPlan {
    pub set: String,
    pub costs: ModelCosts,
    pub predictions: Vec<Prediction>,
    pub recommended: TransferWay,
    pub run: SetRun,
}

impl SetPlan {
    /// Measures the costs on `rig`, predicts, and runs every rival on `set`.
    pub fn make(rig: &mut SmallCopiesRig, set: &BufferSet, ways: &[TransferWay]) -> anyhow::Result<SetPlan> {
        let batch = ways.iter().any(|w| matches!(w, TransferWay::Batch { .. }));
        let zero_copy = ways.contains(&TransferWay::ZeroCopy);
        let costs = ModelCosts::measure(rig, set, batch, zero_copy)?;
        let predictions: Vec<Prediction> = ways.iter().map(|w| costs.predict(*w, set)).collect();
        let best = predictions.iter().min_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms)).expect("a way");
        let recommended = best.way;
        let run = rig.run_set(set, ways)?;
        Ok(SetPlan { set: set.describe(), costs, predictions, recommended, run })
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

impl SmallCopiesRig {
    /// The plan for `set` (the rig made for [`placements`] of it): the costs measured, the prediction of
    /// every rival against what it achieved, the verdict, and the JSON document.
    pub fn plan(&mut self, set: &BufferSet, out: &Output) -> anyhow::Result<()> {
        let ways = rivals(self.zero_copy(), self.batch.is_ok());
        let plan = SetPlan::make(self, set, &ways)?;
        out.say(format!("Plan for {}; costs measured in this run:", plan.set));
        plan.costs.describe().iter().for_each(|l| out.say(format!("  {l}")));
        out.say("\nEvery way's round trip (every buffer up and back), wall µs: the model's, then the run's");
        out.table(&plan.table());
        out.say(plan.verdict());
        plan.run.figures().into_iter().for_each(|f| out.add(f)); // `SET / WAY / wall`, for `cargo xtask compare`
        out.finish(&PlanResults { device: &self.gpu.info, repeats: self.repeats, plan: &plan })
    }
}
