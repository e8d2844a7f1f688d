//! A run's GPU operations and phases, from Nsight Systems' `nsys stats` CSV exports (`cuda_gpu_trace`,
//! and `nvtx_pushpop_trace` or `nvtx_gpu_proj_trace`); and the operations of each phase.

use anyhow::Context as _;

use crate::table::{self, column};

/// What a GPU operation does, and so the engine it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A copy from the host to the device.
    H2D,
    /// A kernel.
    Kernel,
    /// A copy from the device to the host.
    D2H,
    /// A memset.
    Memset,
    /// Any other copy (device to device, peer to peer...).
    Other,
}

/// One GPU operation; times in ms. From nsys also the correlation id of the API call that made it, and
/// the memory kinds a copy read and wrote ("Pageable", "Pinned", "Device", "Managed"...; empty if unknown).
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// When it started, in ms.
    pub start: f64,
    /// When it ended, in ms.
    pub end: f64,
    /// The stream it ran on, as the trace names it (empty for the driver's unified-memory migrations).
    pub stream: String,
    /// What it does.
    pub kind: Kind,
    /// Its name: the kernel's, or nsys's for a copy or memset ("[CUDA memcpy Host-to-Device]").
    pub name: String,
    /// The bytes it copied or set; 0 for a kernel or where unknown.
    pub bytes: u64,
    /// The correlation id of the API call that made it (nsys only).
    pub corr: Option<u64>,
    /// The memory kind a copy read ("Pageable", "Pinned", "Device"...; empty if unknown).
    pub src_kind: String,
    /// The memory kind a copy wrote (empty if unknown).
    pub dst_kind: String,
}

/// A named stretch of the run: an NVTX range, a phase of the built-in timeline, or a segment.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    /// Its name.
    pub name: String,
    /// When it started, in ms.
    pub start: f64,
    /// When it ended, in ms.
    pub end: f64,
}

/// A run: its GPU operations and its phases (none where it has no NVTX ranges).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The GPU operations.
    pub ops: Vec<Op>,
    /// The phases, in order of their starts.
    pub phases: Vec<Phase>,
}

/// `nsys stats --report cuda_gpu_trace --format csv`.
pub fn parse_gpu_trace_csv(text: &str) -> anyhow::Result<Vec<Op>> {
    let mut ops = Vec::new();
    for (i, row) in table::rows(text)?.iter().enumerate() {
        let num = |names: &[&str]| -> anyhow::Result<f64> {
            let v = column(row, names).with_context(|| format!("row {}: no column {names:?}", i + 1))?;
            v.trim().parse::<f64>().with_context(|| format!("row {}: {names:?} is {v:?}", i + 1))
        };
        let name = column(row, &["Name"]).context("no Name column")?.to_string();
        // Copies and memsets are named in brackets ("[CUDA memcpy Host-to-Device]", "[CUDA memcpy HtoD]" in
        // older nsys, "[CUDA memset]"); anything else is a kernel, whatever its name says.
        let kind = match name.strip_prefix('[') {
            Some(n) if n.contains("Host-to-Device") || n.contains("HtoD") => Kind::H2D,
            Some(n) if n.contains("Device-to-Host") || n.contains("DtoH") => Kind::D2H,
            Some(n) if n.contains("memset") => Kind::Memset,
            Some(_) => Kind::Other,
            None => Kind::Kernel,
        };
        let start = num(&["Start (ns)"])? / 1e6;
        let bytes = column(row, &["Bytes (MB)"])
            .and_then(|b| b.trim().parse::<f64>().ok())
            .map_or(0, |mb| (mb * 1e6).round() as u64);
        ops.push(Op {
            start,
            end: start + num(&["Duration (ns)"])? / 1e6,
            stream: column(row, &["Strm"]).unwrap_or("?").to_string(),
            kind,
            name,
            bytes,
            corr: column(row, &["CorrId", "Correlation"]).and_then(|c| c.trim().parse().ok()),
            src_kind: column(row, &["SrcMemKd", "Src Kind", "SrcMemKind"]).unwrap_or("").trim().to_string(),
            dst_kind: column(row, &["DstMemKd", "Dst Kind", "DstMemKind"]).unwrap_or("").trim().to_string(),
        });
    }
    Ok(ops)
}

/// NVTX ranges from `nsys stats` (`nvtx_pushpop_trace` or `nvtx_gpu_proj_trace`), whatever the exact columns.
pub fn parse_nvtx_csv(text: &str) -> anyhow::Result<Vec<Phase>> {
    let mut phases = Vec::new();
    for row in table::rows(text)? {
        let get = |names: &[&str]| column(&row, names).and_then(|v| v.trim().parse::<f64>().ok());
        let start = get(&["Start (ns)", "Projected Start (ns)", "Start"]).context("an NVTX row without a start")?;
        let end = match get(&["End (ns)", "Projected End (ns)", "End"]) {
            Some(e) => e,
            None => {
                start
                    + get(&["Duration (ns)", "Projected Duration (ns)", "Duration"])
                        .context("an NVTX row without an end")?
            }
        };
        let name = column(&row, &["Name", "Range"]).unwrap_or("").trim_start_matches(':').to_string();
        phases.push(Phase { name, start: start / 1e6, end: end / 1e6 });
    }
    phases.sort_by(|a, b| a.start.total_cmp(&b.start));
    Ok(phases)
}

/// The operations of each phase (an operation belongs to the phase in which it starts), in phase
/// order; everything when there are no phases.
pub fn by_phase(t: &Trace) -> Vec<(String, Vec<&Op>)> {
    if t.phases.is_empty() {
        return vec![("whole run".into(), t.ops.iter().collect())];
    }
    let mut out: Vec<(String, Vec<&Op>)> = Vec::new();
    for p in &t.phases {
        let ops: Vec<&Op> = t.ops.iter().filter(|o| o.start >= p.start && o.start < p.end).collect();
        match out.iter_mut().find(|(n, _)| *n == p.name) {
            Some((_, v)) => v.extend(ops),
            None => out.push((p.name.clone(), ops)),
        }
    }
    out
}

/// An operation of `kind` on `stream` from `start` to `end`, for the tests of this crate.
#[cfg(test)]
pub(crate) fn test_op(stream: &str, kind: Kind, start: f64, end: f64) -> Op {
    Op {
        start,
        end,
        stream: stream.into(),
        kind,
        name: format!("{kind:?}"),
        bytes: 0,
        corr: None,
        src_kind: String::new(),
        dst_kind: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_op as op;

    #[test]
    fn the_h200_nsys_trace_parses() {
        let ops = parse_gpu_trace_csv(include_str!("../fixtures/h200_overlap_cuda_gpu_trace.csv")).unwrap();
        let count = |k| ops.iter().filter(|o| o.kind == k).count();
        assert_eq!((count(Kind::H2D), count(Kind::D2H), count(Kind::Kernel), count(Kind::Memset)), (54, 54, 51, 7));
        let h = ops.iter().find(|o| o.kind == Kind::H2D).unwrap();
        assert_eq!(h.bytes, 2_097_000, "nsys reports MB = 10^6 bytes, to 3 decimals");
        assert_eq!(
            (h.corr, h.src_kind.as_str(), h.dst_kind.as_str(), h.stream.as_str()),
            (Some(70), "Pinned", "Device", "18")
        );
        let m = ops.iter().find(|o| o.kind == Kind::Memset).unwrap();
        assert_eq!((m.corr, m.src_kind.as_str(), m.dst_kind.as_str()), (Some(36), "Device", ""));
        assert!(ops.iter().all(|o| o.end > o.start));
        assert!(ops.iter().all(|o| o.kind != Kind::Kernel || o.name == "process"));
    }

    #[test]
    fn phases_split_the_ops() {
        let t = Trace {
            ops: vec![op("1", Kind::H2D, 0.0, 1.0), op("1", Kind::Kernel, 1.0, 2.0), op("1", Kind::D2H, 5.0, 6.0)],
            phases: vec![
                Phase { name: "a".into(), start: 0.0, end: 3.0 },
                Phase { name: "b".into(), start: 4.0, end: 7.0 },
            ],
        };
        let p = by_phase(&t);
        assert_eq!(p.iter().map(|(n, o)| (n.as_str(), o.len())).collect::<Vec<_>>(), [("a", 2), ("b", 1)]);
    }

    #[test]
    fn nvtx_ranges_from_either_report() {
        let pushpop = "Start (ns),End (ns),Duration (ns),DurChild (ns),DurNonChild (ns),Name,PID,TID,Lvl,NumChild,RangeId,ParentId,RangeStack,NameId\n\
                       2000000,5000000,3000000,0,3000000,serialized,1,1,0,0,1,,:1,5\n1000000,1500000,500000,0,500000,copies alone,1,1,0,0,2,,:2,6\n";
        let p = parse_nvtx_csv(pushpop).unwrap();
        assert_eq!(
            p,
            vec![
                Phase { name: "copies alone".into(), start: 1.0, end: 1.5 },
                Phase { name: "serialized".into(), start: 2.0, end: 5.0 }
            ]
        );
        let proj =
            "Name,Projected Start (ns),Projected Duration (ns),Orig Start (ns)\n:overlapped,10000000,2000000,9000000\n";
        assert_eq!(parse_nvtx_csv(proj).unwrap(), vec![Phase { name: "overlapped".into(), start: 10.0, end: 12.0 }]);
    }
}
