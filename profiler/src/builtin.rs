//! The lessons' built-in CUDA-event timeline (`GPU_TIMELINE=trace.json`, see `cuda_scope::timeline`): its
//! Chrome-trace JSON read into a [`Trace`], and the correction that serializes each engine's work.

use std::{fs, path::Path};

use anyhow::{bail, Context as _};

use crate::trace::{Kind, Op, Phase, Trace};

/// The built-in timeline written at `path`, read and its engines corrected ([`correct_engines`]).
pub fn load(path: &Path) -> anyhow::Result<Trace> {
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)?;
    let mut t = parse_chrome(&json).with_context(|| format!("reading {}", path.display()))?;
    correct_engines(&mut t.ops);
    Ok(t)
}

/// The built-in timeline's Chrome trace (microseconds); see `cuda_scope::timeline`.
pub fn parse_chrome(json: &serde_json::Value) -> anyhow::Result<Trace> {
    let events = json["traceEvents"].as_array().context("no traceEvents")?;
    let mut t = Trace::default();
    for e in events {
        let (ts, dur) = (e["ts"].as_f64().context("an event without ts")?, e["dur"].as_f64().unwrap_or(0.0));
        let (start, end) = (ts / 1e3, (ts + dur) / 1e3);
        let name = e["name"].as_str().unwrap_or("").to_string();
        let kind = match e["cat"].as_str().unwrap_or("") {
            "phase" => {
                t.phases.push(Phase { name, start, end });
                continue;
            }
            "H2D" => Kind::H2D,
            "D2H" => Kind::D2H,
            "kernel" => Kind::Kernel,
            "memset" => Kind::Memset,
            _ => Kind::Other,
        };
        let stream = match &e["tid"] {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        let bytes = e["args"]["bytes"].as_u64().unwrap_or(0);
        t.ops.push(Op {
            start,
            end,
            stream,
            kind,
            name,
            bytes,
            corr: None,
            src_kind: String::new(),
            dst_kind: String::new(),
        });
    }
    if t.ops.is_empty() {
        bail!("the timeline holds no operations");
    }
    Ok(t)
}

/// The built-in timeline's start events fire when a stream reaches an operation, which can be while its
/// engine still runs another stream's: each copy direction and the kernels run one at a time (seen in
/// nsys traces of these lessons), so an operation starts no earlier than the one before it on its engine ends.
pub fn correct_engines(ops: &mut [Op]) {
    for kind in [Kind::H2D, Kind::D2H, Kind::Kernel] {
        let mut idx: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].kind == kind).collect();
        idx.sort_by(|&a, &b| ops[a].end.total_cmp(&ops[b].end));
        let mut last_end = f64::NEG_INFINITY;
        for i in idx {
            ops[i].start = ops[i].start.max(last_end).min(ops[i].end);
            last_end = ops[i].end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        metrics::{agreement, summarize},
        trace::{by_phase, parse_gpu_trace_csv, parse_nvtx_csv},
    };

    use crate::trace::test_op as op;

    const NSYS: &str = include_str!("../fixtures/h200_overlap_cuda_gpu_trace.csv");
    const BUILTIN: &str = include_str!("../fixtures/h200_overlap_builtin.json");

    #[test]
    fn engine_correction_serializes_each_engine() {
        // Stream 2's upload was reached at 0.5 but the H2D engine was busy until 1.0.
        let mut ops = vec![op("1", Kind::H2D, 0.0, 1.0), op("2", Kind::H2D, 0.5, 2.0), op("1", Kind::Kernel, 1.0, 3.0)];
        correct_engines(&mut ops);
        assert_eq!((ops[1].start, ops[1].end), (1.0, 2.0));
        assert_eq!(ops[2].start, 1.0, "other engines are untouched");
    }

    /// Short operations (this run's copies take ~40 us): the built-in timeline counts the few microseconds
    /// between a stream reaching an operation and its engine starting it, nsys does not.
    #[test]
    fn the_builtin_timeline_overcounts_short_ops_by_a_bounded_latency() {
        let nsys = parse_gpu_trace_csv(NSYS).unwrap();
        let mut builtin = parse_chrome(&serde_json::from_str(BUILTIN).unwrap()).unwrap();
        correct_engines(&mut builtin.ops);
        assert_eq!(
            builtin.phases.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["copies alone", "kernel alone", "serialized", "overlapped"]
        );
        // Busy times of each engine over the whole run, without the allocation memsets nsys also sees.
        let engines =
            |ops: Vec<&Op>| summarize(&ops.into_iter().filter(|o| o.kind != Kind::Memset).collect::<Vec<_>>());
        let (n, b) = (engines(nsys.iter().collect()), engines(builtin.ops.iter().collect()));
        for (what, count, x, y) in
            [("H2D", 54.0, n.htod, b.htod), ("D2H", 54.0, n.dtoh, b.dtoh), ("kernel", 51.0, n.kernel, b.kernel)]
        {
            let excess_us = (y - x) / count * 1e3;
            assert!(
                (0.0..12.0).contains(&excess_us),
                "{what}: nsys {x} ms, built-in {y} ms: {excess_us:.1} us per operation"
            );
        }
        assert!((n.span - b.span).abs() / n.span < 0.01, "span: nsys {}, built-in {}", n.span, b.span);
    }

    /// The default overlap workload (8 MiB chunks, ~160 us operations), profiled once and kept as fixtures:
    /// nsys and the built-in timeline of the same run, phase by phase.
    #[test]
    fn on_the_default_workload_the_timelines_agree() {
        let nsys = Trace {
            ops: parse_gpu_trace_csv(include_str!("../fixtures/h200_overlap_default_cuda_gpu_trace.csv")).unwrap(),
            phases: parse_nvtx_csv(include_str!("../fixtures/h200_overlap_default_nvtx_pushpop_trace.csv")).unwrap(),
        };
        let mut builtin =
            parse_chrome(&serde_json::from_str(include_str!("../fixtures/h200_overlap_default_builtin.json")).unwrap())
                .unwrap();
        correct_engines(&mut builtin.ops);
        let (n, b) = (by_phase(&nsys), by_phase(&builtin));
        for phase in ["serialized", "overlapped"] {
            let get = |p: &Vec<(String, Vec<&Op>)>| summarize(&p.iter().find(|(name, _)| name == phase).unwrap().1);
            let (ns, bs) = (get(&n), get(&b));
            assert_eq!(ns.ops, bs.ops, "{phase}: the same operations");
            let (busy, span, overlap) = agreement(&ns, &bs);
            assert!(span < 0.02, "{phase}: span nsys {} ms, built-in {} ms", ns.span, bs.span);
            assert!(overlap < 0.03, "{phase}: overlap nsys {}, built-in {}", ns.overlap_fraction, bs.overlap_fraction);
            assert!(busy < 0.12, "{phase}: busy times differ by {:.1}%", 100.0 * busy);
        }
    }

    #[test]
    fn a_timeline_file_is_read_and_corrected() {
        let dir = std::env::temp_dir().join(format!("profiler-builtin-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("overlap.timeline.json");
        fs::write(&path, BUILTIN).unwrap();
        let mut expected = parse_chrome(&serde_json::from_str(BUILTIN).unwrap()).unwrap();
        correct_engines(&mut expected.ops);
        assert_eq!(load(&path).unwrap().ops, expected.ops);
        let missing = format!("{:#}", load(&dir.join("none.json")).unwrap_err());
        assert!(missing.starts_with(&format!("reading {}", dir.join("none.json").display())), "{missing}");
        let _ = fs::remove_dir_all(dir);
    }
}
