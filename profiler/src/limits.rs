//! What limits a stretch of work, named from its measurements; the overlap model; and how much faster
//! one stretch does the same work as the one before it.

use std::collections::BTreeMap;

use crate::{
    metrics::{summarize, Summary},
    trace::{Kind, Op},
};

/// The GPU idle this share of the span or more: what limits it is latency (launches, host work, waits).
const IDLE_DOMINATES: f64 = 0.5;
/// An engine busy this share of the span or more is what limits it.
const BUSY: f64 = 0.8;
/// Engines whose busy times overlap by less than this share of their sum ran one after another.
const NO_OVERLAP: f64 = 0.05;
/// An engine busy less than this share of the span hardly takes part.
const PRESENT: f64 = 0.05;

/// What limits a stretch of work, in words, from its measured busy, overlap and idle times.
pub fn limit(s: &Summary) -> String {
    if s.span <= 0.0 {
        return "nothing timed".into();
    }
    let pct = |x: f64| format!("{:.0}%", 100.0 * x / s.span);
    let engines = [("H2D", s.htod), ("kernels", s.kernel), ("D2H", s.dtoh)];
    let sum = s.htod + s.kernel + s.dtoh;
    if s.idle >= IDLE_DOMINATES * s.span {
        return format!(
            "latency-bound: the GPU sat idle {} of the span, between operations (launches, host work, waits)",
            pct(s.idle)
        );
    }
    let taking_part: Vec<String> =
        engines.iter().filter(|(_, b)| *b >= PRESENT * s.span).map(|(n, b)| format!("{n} {}", pct(*b))).collect();
    if taking_part.len() >= 2 && s.copy_under_kernel + s.both_directions <= NO_OVERLAP * sum {
        return format!(
            "serialized: {} one after another, busy {} of the span with no two engines at once",
            taking_part.join(", "),
            pct(sum)
        );
    }
    let busy: Vec<(&str, f64)> = engines.iter().copied().filter(|(_, b)| *b >= BUSY * s.span).collect();
    let each = |v: &[(&str, f64)]| v.iter().map(|(n, b)| format!("{n} {}", pct(*b))).collect::<Vec<_>>().join(", ");
    match busy.as_slice() {
        [] => {
            format!("mixed: no engine busy {:.0}% of the span ({}, idle {})", 100.0 * BUSY, each(&engines), pct(s.idle))
        }
        [("kernels", k)] => format!(
            "compute-bound: kernels busy {} of the span; {:.0}% of copy time under kernels",
            pct(*k),
            100.0 * s.overlap_fraction
        ),
        [(one, b)] => format!("copy-bound ({one}): {one} busy {} of the span", pct(*b)),
        [("H2D", h), ("D2H", d)] => format!(
            "copy-bound (both directions): H2D busy {}, D2H {} of the span, both at once {}",
            pct(*h),
            pct(*d),
            pct(s.both_directions)
        ),
        several => {
            let names: Vec<&str> = several.iter().map(|(n, _)| *n).collect();
            let (last, rest) = names.split_last().expect("two or more");
            format!(
                "bound by {} and {last} together: each busy {:.0}% of the span or more ({}); both directions at once {}",
                rest.join(", "),
                100.0 * BUSY,
                each(several),
                pct(s.both_directions)
            )
        }
    }
}

/// The overlap model: were every engine's work fully overlapped with the others', and every operation
/// to keep its measured duration, the stretch would take its busiest engine's time. A model, not a
/// bound: operations change speed when overlapped (copies slow when both directions run at once,
/// kernels when copies compete for memory), so a run can beat it or fall short of it.
pub fn model(s: &Summary) -> f64 {
    s.htod.max(s.kernel).max(s.dtoh)
}

/// The work a stretch does: bytes in each direction, bytes set and copied otherwise, and kernels by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StretchWork {
    htod: u64,
    dtoh: u64,
    memset: u64,
    other: u64,
    kernels: BTreeMap<String, usize>,
}

/// The work `ops` do, to compare with another stretch's.
pub fn work(ops: &[&Op]) -> StretchWork {
    let mut w = StretchWork::default();
    for o in ops {
        match o.kind {
            Kind::H2D => w.htod += o.bytes,
            Kind::D2H => w.dtoh += o.bytes,
            Kind::Memset => w.memset += o.bytes,
            Kind::Other => w.other += o.bytes,
            Kind::Kernel => *w.kernels.entry(o.name.clone()).or_default() += 1,
        }
    }
    w
}

/// For each pair of consecutive rows that do the same work, how much faster the second did it, from
/// their spans: "segment 2 does segment 1's work 1.17x faster (15.955 ms, then 13.604 ms)".
pub fn speedups(rows: &[(String, Vec<&Op>)]) -> Vec<String> {
    rows.windows(2)
        .filter_map(|w| {
            let ((a, ops_a), (b, ops_b)) = (&w[0], &w[1]);
            let work_a = work(ops_a);
            if work_a == StretchWork::default() || work_a != work(ops_b) {
                return None;
            }
            let (sa, sb) = (summarize(ops_a).span, summarize(ops_b).span);
            if sa <= 0.0 || sb <= 0.0 {
                return None;
            }
            let (ratio, word) = if sa >= sb { (sa / sb, "faster") } else { (sb / sa, "slower") };
            Some(format!("{b} does {a}'s work {ratio:.2}x {word} ({sa:.3} ms, then {sb:.3} ms)"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(stream: &str, kind: Kind, start: f64, end: f64, corr: u64) -> Op {
        Op { corr: Some(corr), ..crate::trace::test_op(stream, kind, start, end) }
    }

    fn summary(span: f64, htod: f64, kernel: f64, dtoh: f64, under: f64, both: f64, idle: f64) -> Summary {
        let copy = htod + dtoh - both;
        Summary {
            ops: 1,
            span,
            htod,
            dtoh,
            kernel,
            copy_under_kernel: under,
            overlap_fraction: if copy > 0.0 { under / copy } else { 0.0 },
            both_directions: both,
            idle,
        }
    }

    #[test]
    fn limits_named_from_measurements() {
        let words = |s: Summary| limit(&s);
        assert!(words(summary(10.0, 1.0, 8.5, 0.4, 0.0, 0.0, 0.1)).starts_with("serialized: H2D 10%, kernels 85%"));
        assert_eq!(
            words(summary(10.0, 1.0, 9.5, 1.0, 1.8, 0.0, 0.2)),
            "compute-bound: kernels busy 95% of the span; 90% of copy time under kernels"
        );
        assert!(words(summary(10.0, 9.0, 3.0, 8.5, 5.0, 8.0, 0.1)).starts_with("copy-bound (both directions)"));
        assert!(words(summary(10.0, 9.0, 0.0, 0.0, 0.0, 0.0, 1.0)).starts_with("copy-bound (H2D): H2D busy 90%"));
        assert!(words(summary(10.0, 1.0, 2.0, 1.0, 0.0, 0.0, 6.0)).starts_with("latency-bound: the GPU sat idle 60%"));
        assert_eq!(
            words(summary(10.0, 6.0, 6.0, 0.5, 4.0, 0.0, 1.0)),
            "mixed: no engine busy 80% of the span (H2D 60%, kernels 60%, D2H 5%, idle 10%)"
        );
        // The overlap lesson's overlapped phase as profiled: every engine near saturation.
        assert_eq!(
            words(summary(26.382, 22.205, 22.985, 21.595, 39.0, 18.667, 0.989)),
            "bound by H2D, kernels and D2H together: each busy 80% of the span or more (H2D 84%, kernels 87%, \
             D2H 82%); both directions at once 71%"
        );
        assert_eq!(model(&summary(10.0, 6.0, 7.0, 0.5, 4.0, 0.0, 1.0)), 7.0);
    }

    #[test]
    fn speedup_only_between_neighbours_doing_the_same_work() {
        let a = [op("7", Kind::H2D, 0.0, 1.0, 1), op("7", Kind::Kernel, 1.0, 3.0, 2)];
        let b = [op("13", Kind::H2D, 4.0, 5.0, 3), op("14", Kind::Kernel, 4.5, 6.0, 4)];
        let c = [op("13", Kind::H2D, 7.0, 8.0, 5)];
        fn rows<'a>(x: &[&'a [Op]]) -> Vec<(String, Vec<&'a Op>)> {
            x.iter().enumerate().map(|(i, o)| (format!("segment {}", i + 1), o.iter().collect())).collect()
        }
        let a2 = [op("7", Kind::H2D, 9.0, 10.0, 1), op("7", Kind::Kernel, 10.0, 14.0, 2)];
        assert!(speedups(&rows(&[&b, &c, &a2])).is_empty(), "b differs from c, and c from a2");
        assert_eq!(
            speedups(&rows(&[&a, &b])),
            ["segment 2 does segment 1's work 1.50x faster (3.000 ms, then 2.000 ms)"]
        );
        assert_eq!(
            speedups(&rows(&[&a, &a2])),
            ["segment 2 does segment 1's work 1.67x slower (3.000 ms, then 5.000 ms)"]
        );
    }
}
