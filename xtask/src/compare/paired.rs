//! The judgement of one figure from k pairs of runs, A and B in turn (`compare --interleave`).
//!
//! Each pair gives one log-ratio, `d = ln(B / A)` of the two runs' medians. Run in turn, on one
//! machine in one sitting, A and B meet the same drift, and a pair's two runs are alike but for what
//! differs between A and B: where nothing does, `d` is as likely to be `+x` as `-x` (A and B exchange),
//! whatever the figure's spread or its shape (two times a process settles on, a long tail). So the
//! figure is judged by a test that assumes nothing more:
//!
//! - its change is the Hodges-Lehmann estimate of the pairs, the median of the `k (k + 1) / 2` means of
//!   two pairs (each with itself too), `exp` of it the ratio B / A;
//! - its interval is the Wilcoxon signed-rank interval around it: the Walsh means between the `c`-th
//!   smallest and the `c`-th largest, `c` from the exact distribution of the signed-rank statistic for
//!   `k` pairs ([`cut`]), at a level that holds for a lesson's figures together ([`FAMILY_ALPHA`],
//!   split among them by Bonferroni);
//! - **slower** where the interval lies above 1, **faster** below it; **ambiguous** where the pairs lean
//!   one way at [`FIGURE_ALPHA`] for that figure alone but not with its lesson's other figures; **same**
//!   otherwise;
//! - and, whatever the verdict, the smallest change that would show where there was none: the
//!   interval's reach below the estimate slower (`ratio / lo - 1`), above it faster (`1 - ratio / hi`).
//!   The estimate and its interval move with the data (B's times `x` times as long move every pair's
//!   log-ratio by `ln x`), so from a ratio of 1 a change past that reach moves the interval past 1.
//!
//! Where A and B are the same, a lesson shows a slower or faster figure with a chance of at most
//! [`FAMILY_ALPHA`], whatever number of figures it has, and each figure is ambiguous with a chance of at
//! most [`FIGURE_ALPHA`]. The price: `k` pairs can reach a level no lower than `2 / 2^k`, so a lesson of
//! `m` figures needs `k >= 1 + log2(m / FAMILY_ALPHA)` pairs before it can call any figure ([`least_pairs`]:
//! 10 pairs for 4 figures, 17 for 360).

use super::Verdict;

/// The chance that a lesson run against itself shows any figure slower or faster, at most.
pub const FAMILY_ALPHA: f64 = 0.01;
/// The chance that a figure of a lesson run against itself is ambiguous, at most.
pub const FIGURE_ALPHA: f64 = 0.001;

/// How often each signed-rank sum `T+` (0 to `k (k + 1) / 2`) comes of `k` pairs that exchange, as a
/// share of the `2^k` ways their signs fall.
pub fn signed_rank_distribution(k: usize) -> Vec<f64> {
    let mut counts = vec![1.0f64];
    for rank in 1..=k {
        let mut next = vec![0.0; counts.len() + rank];
        for (t, c) in counts.iter().enumerate() {
            next[t] += c;
            next[t + rank] += c;
        }
        counts = next;
    }
    let total = 2f64.powi(k as i32);
    counts.iter().map(|c| c / total).collect()
}

/// How many Walsh means an interval of level `1 - alpha` leaves out at each end for `k` pairs: the
/// largest `c` with `P(T+ <= c - 1) <= alpha / 2`; 0 where `k` pairs cannot reach that level.
pub fn cut(k: usize, alpha: f64) -> usize {
    let mut below = 0.0;
    let mut c = 0;
    for (t, p) in signed_rank_distribution(k).iter().enumerate() {
        below += p;
        if below > alpha / 2.0 {
            break;
        }
        c = t + 1;
    }
    c
}

/// The fewest pairs with which a lesson of `figures` figures can call one slower or faster.
pub fn least_pairs(figures: usize) -> usize {
    (1..64).find(|k| cut(*k, FAMILY_ALPHA / figures.max(1) as f64) > 0).unwrap_or(64)
}

/// The pairs a lesson of `figures` figures gets when `pairs` are asked for: two more than it needs to
/// call any figure where it needs more (with the fewest it needs, only all pairs agreeing would call one).
pub fn pairs_for(pairs: usize, figures: usize) -> usize {
    pairs.max(least_pairs(figures) + 2)
}

/// One figure judged from its pairs.
#[derive(Clone, Debug, PartialEq)]
pub struct Paired {
    pub verdict: Verdict,
    /// The pairs it was judged from.
    pub pairs: usize,
    /// B / A: the estimate, and its interval at the lesson's level (0 and infinity where the pairs
    /// cannot reach it).
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    /// The smallest changes that would show, slower and faster, as fractions: the interval's reach below
    /// and above the estimate (infinite where the pairs cannot reach the lesson's level).
    pub detect_slower: f64,
    pub detect_faster: f64,
}

/// The means of every two of `d` (each with itself too), sorted.
fn walsh(d: &[f64]) -> Vec<f64> {
    let mut w = Vec::with_capacity(d.len() * (d.len() + 1) / 2);
    for i in 0..d.len() {
        for j in i..d.len() {
            w.push((d[i] + d[j]) / 2.0);
        }
    }
    w.sort_by(f64::total_cmp);
    w
}

/// The interval of the sorted Walsh means `w` of `k` pairs at level `1 - alpha`, in log terms.
fn interval(w: &[f64], k: usize, alpha: f64) -> (f64, f64) {
    match cut(k, alpha) {
        0 => (f64::NEG_INFINITY, f64::INFINITY),
        c => (w[c - 1], w[w.len() - c]),
    }
}

/// Judges a figure from the medians of its runs in pairs, `(A, B)` in ms, among `figures` figures of
/// its lesson; `None` without a pair of positive times.
pub fn judge(pairs: &[(f64, f64)], figures: usize) -> Option<Paired> {
    let d: Vec<f64> = pairs
        .iter()
        .filter(|(a, b)| *a > 0.0 && *b > 0.0 && a.is_finite() && b.is_finite())
        .map(|(a, b)| (b / a).ln())
        .collect();
    if d.is_empty() {
        return None;
    }
    let k = d.len();
    let w = walsh(&d);
    let n = w.len();
    let estimate = if n % 2 == 1 { w[n / 2] } else { (w[n / 2 - 1] + w[n / 2]) / 2.0 };
    let (lo, hi) = interval(&w, k, FAMILY_ALPHA / figures.max(1) as f64);
    let (lo_one, hi_one) = interval(&w, k, FIGURE_ALPHA);
    let verdict = if lo > 0.0 {
        Verdict::Slower
    } else if hi < 0.0 {
        Verdict::Faster
    } else if lo_one > 0.0 || hi_one < 0.0 {
        Verdict::Ambiguous
    } else {
        Verdict::Same
    };
    Some(Paired {
        verdict,
        pairs: k,
        ratio: estimate.exp(),
        lo: lo.exp(),
        hi: hi.exp(),
        detect_slower: (estimate - lo).exp() - 1.0,
        detect_faster: if hi.is_finite() { 1.0 - (estimate - hi).exp() } else { f64::INFINITY },
    })
}

#[cfg(test)]
mod tests;
