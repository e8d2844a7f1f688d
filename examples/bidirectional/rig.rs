//! bidirectional's rig: the GPU, and copy buffers for the largest size each way, checked to fit before
//! they are allocated; the sweep over sizes, its table and figures, the largest size in words, and the
//! JSON.

use serde::Serialize;

use cuda_scope::{DeviceInfo, Footprint, Gpu};
use measure::{
    machine::PcieLink,
    pipeline::{CopyBuffers, CopyTimes},
    report::{fmt_bytes, Figure, Output, Table},
    timeline::phase,
    timing::Repeats,
};

/// What the lesson holds, for sizes up to `max` bytes: an input and an output of `max` pinned, and a
/// buffer of `max` on the device for each direction.
pub fn footprint(max: usize) -> Footprint {
    let n = max / 4;
    Footprint::default().pinned::<f32>(n.saturating_mul(2)).device::<f32>(n.saturating_mul(2))
}

/// What bidirectional writes with `--json`.
#[derive(Serialize)]
struct BidirectionalResults<'a> {
    device: &'a DeviceInfo,
    repeats: Repeats,
    by_size: &'a [CopyTimes],
    reference_each_way_gbps: Option<f64>,
}

/// The GPU, its copy buffers for the largest size, and the repeats.
pub struct BidirectionalRig {
    gpu: Gpu,
    buffers: CopyBuffers,
    repeats: Repeats,
}

impl BidirectionalRig {
    /// Starts the GPU that `CUDA_DEVICE` names (its report printed), refuses at once sizes whose
    /// buffers do not fit it or the host, and allocates them for the largest of `sizes`.
    pub fn start(out: &Output, sizes: &[usize], repeats: Repeats) -> anyhow::Result<BidirectionalRig> {
        let max = sizes.iter().copied().max().unwrap_or(0);
        let gpu = measure::lesson::gpu(out, &footprint(max))?;
        out.say(format!(
            "Copies each way alone and both at once (an H2D and a D2H on two streams), GB/s, median of up to {} runs",
            repeats.repeats
        ));
        let buffers = CopyBuffers::new(&gpu, max / 4)?;
        Ok(BidirectionalRig { gpu, buffers, repeats })
    }

    /// Each of `sizes` each way alone and both at once, as a table, and as figures for `cargo xtask
    /// compare` (`both at once 1 GiB`).
    pub fn sweep(&mut self, out: &Output, sizes: &[usize]) -> anyhow::Result<Vec<CopyTimes>> {
        let mut t =
            Table::new(&["size", "H2D alone", "D2H alone", "both: each way", "both: total", "total / best alone"]);
        let mut rows = Vec::new();
        for &bytes in sizes {
            out.progress(fmt_bytes(bytes));
            let _p = phase(&format!("both ways, {}", fmt_bytes(bytes)));
            let c = CopyTimes::measure_in(&self.gpu, &mut self.buffers, bytes / 4, self.repeats)?;
            let (h, d, b) = (c.htod.gbps(bytes), c.dtoh.gbps(bytes), c.both.gbps(bytes));
            t.row(vec![
                fmt_bytes(bytes),
                format!("{h:.2}"),
                format!("{d:.2}"),
                format!("{b:.2}"),
                format!("{:.2}", 2.0 * b),
                format!("{:.2}x", 2.0 * b / h.max(d)),
            ]);
            for (series, stats) in [("H2D alone", &c.htod), ("D2H alone", &c.dtoh), ("both at once", &c.both)] {
                out.add(Figure::sized(series, bytes, stats));
            }
            rows.push(c);
        }
        out.table(&t);
        Ok(rows)
    }

    /// Both at once at the largest size, each way and in all, beside the link's raw rate and
    /// `reference` (GB/s each way), where there are.
    pub fn say_largest(&self, out: &Output, rows: &[CopyTimes], reference: Option<f64>) {
        let Some(last) = rows.last() else { return };
        let each = last.both.gbps(last.bytes);
        let limit = match PcieLink::of(&self.gpu.info) {
            Some(l) => format!("; the link's raw rate is {:.1} GB/s each way", l.gbps),
            None => String::new(),
        };
        out.say(format!(
            "both at once at {}: {each:.2} GB/s each way, {:.2} in all{limit}",
            fmt_bytes(last.bytes),
            2.0 * each
        ));
        if let Some(reference) = reference {
            out.say(format!("that is {:.1}% of the reference {reference:.2} GB/s each way", 100.0 * each / reference));
        }
    }

    /// Writes the JSON: the device, the repeats, every size's times, and the reference.
    pub fn finish(&self, out: &Output, rows: &[CopyTimes], reference: Option<f64>) -> anyhow::Result<()> {
        let (device, repeats) = (&self.gpu.info, self.repeats);
        out.finish(&BidirectionalResults { device, repeats, by_size: rows, reference_each_way_gbps: reference })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footprint_is_the_largest_size_twice_pinned_and_twice_on_the_device() {
        let need = footprint(1 << 30); // the default --max
        assert_eq!((need.pinned, need.device, need.pageable), (2 << 30, 2 << 30, 0));
        let huge = footprint(usize::MAX);
        assert_eq!((huge.pinned, huge.device), (usize::MAX, usize::MAX));
    }
}
