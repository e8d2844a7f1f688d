//! What a stretch of trace did, in numbers: engine busy times, copying under kernels, both copy
//! directions at once, idle time ([`Summary`]); the interval arithmetic they come from; and how far
//! two summaries of the same work (nsys and the built-in timeline) agree.

use crate::trace::{Kind, Op};

/// The union of intervals `(start, end)`: sorted, overlapping ones merged.
pub fn union(mut iv: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (s, e) in iv {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The total length of a [`union`].
pub fn length(u: &[(f64, f64)]) -> f64 {
    // fold from +0.0: f64's `sum` starts at -0.0, which prints as "-0.000"
    u.iter().fold(0.0, |a, (s, e)| a + (e - s))
}

/// The time during which both of two [`union`]s cover.
pub fn overlap(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    let (mut i, mut j, mut total) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if e > s {
            total += e - s;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

/// What a stretch of trace did: engine busy times, how much copying ran under kernels, how much both
/// copy directions ran at once, and how long the GPU was idle. Times in ms.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The number of operations.
    pub ops: usize,
    /// From the first operation's start to the last one's end.
    pub span: f64,
    /// Time during which an H2D copy ran.
    pub htod: f64,
    /// Time during which a D2H copy ran.
    pub dtoh: f64,
    /// Time during which a kernel ran.
    pub kernel: f64,
    /// Copy time (either direction) during which a kernel ran.
    pub copy_under_kernel: f64,
    /// copy_under_kernel over all copy time.
    pub overlap_fraction: f64,
    /// Time during which an H2D and a D2H copy ran at once.
    pub both_directions: f64,
    /// Time in the span during which nothing ran.
    pub idle: f64,
}

/// The [`Summary`] of `ops`.
pub fn summarize(ops: &[&Op]) -> Summary {
    let of = |k: Kind| union(ops.iter().filter(|o| o.kind == k).map(|o| (o.start, o.end)).collect());
    let (h, d, k) = (of(Kind::H2D), of(Kind::D2H), of(Kind::Kernel));
    let copies = union(h.iter().chain(&d).copied().collect());
    let all = union(ops.iter().map(|o| (o.start, o.end)).collect());
    let span = match (all.first(), all.last()) {
        (Some(f), Some(l)) => l.1 - f.0,
        _ => 0.0,
    };
    let copy_under_kernel = overlap(&copies, &k);
    let copy_time = length(&copies);
    Summary {
        ops: ops.len(),
        span,
        htod: length(&h),
        dtoh: length(&d),
        kernel: length(&k),
        copy_under_kernel,
        overlap_fraction: if copy_time > 0.0 { copy_under_kernel / copy_time } else { 0.0 },
        both_directions: overlap(&h, &d),
        idle: span - length(&all),
    }
}

/// How far `b` (the built-in timeline) is from `a` (nsys): the largest relative difference in engine
/// busy times, the relative difference in span, and the difference in overlap fraction.
pub fn agreement(a: &Summary, b: &Summary) -> (f64, f64, f64) {
    let rel = |x: f64, y: f64| if x.max(y) < 1e-3 { 0.0 } else { (x - y).abs() / x.max(y) };
    let busy = rel(a.htod, b.htod).max(rel(a.dtoh, b.dtoh)).max(rel(a.kernel, b.kernel));
    (busy, rel(a.span, b.span), (a.overlap_fraction - b.overlap_fraction).abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::trace::test_op as op;

    #[test]
    fn summary_of_a_known_pipeline() {
        // Serialized: H2D 0-1, kernel 1-2, D2H 2-3. Then overlapped: two chunks on two streams.
        let ops = [
            op("1", Kind::H2D, 0.0, 1.0),
            op("1", Kind::Kernel, 1.0, 2.0),
            op("2", Kind::H2D, 1.0, 2.0),
            op("1", Kind::D2H, 2.0, 3.0),
            op("2", Kind::Kernel, 2.0, 3.0),
            op("2", Kind::D2H, 3.0, 4.0),
        ];
        let s = summarize(&ops.iter().collect::<Vec<_>>());
        assert_eq!((s.ops, s.span, s.htod, s.kernel, s.dtoh), (6, 4.0, 2.0, 2.0, 2.0));
        assert_eq!(s.copy_under_kernel, 2.0, "H2D 1-2 under kernel 1-2, D2H 2-3 under kernel 2-3");
        assert_eq!(s.overlap_fraction, 0.5);
        assert_eq!(s.both_directions, 0.0);
        assert_eq!(s.idle, 0.0);
    }

    #[test]
    fn idle_gaps_and_both_directions() {
        let ops = [op("1", Kind::H2D, 0.0, 2.0), op("2", Kind::D2H, 1.0, 3.0), op("1", Kind::Kernel, 5.0, 6.0)];
        let s = summarize(&ops.iter().collect::<Vec<_>>());
        assert_eq!((s.span, s.both_directions, s.idle, s.overlap_fraction), (6.0, 1.0, 2.0, 0.0));
    }

    #[test]
    fn agreement_of_two_summaries() {
        let a = Summary { htod: 10.0, dtoh: 10.0, kernel: 10.0, overlap_fraction: 0.9, ..Default::default() };
        let b = Summary { htod: 10.5, dtoh: 10.0, kernel: 9.9, overlap_fraction: 0.88, ..Default::default() };
        let (busy, span, overlap) = agreement(&a, &b);
        assert!((busy - 0.5 / 10.5).abs() < 1e-12 && (overlap - 0.02).abs() < 1e-12 && span == 0.0);
    }
}
