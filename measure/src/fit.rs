//! A copy's cost over sizes: `t = α + n/β`, a fixed per-copy time α and an asymptotic rate β, fitted to
//! measured times by least squares on relative error (every size counts alike, 4 KiB as much as 256 MiB).
//! Half of β is reached at n½ = α·β: below it the per-copy cost dominates, above it the rate does.

use serde::Serialize;

use crate::{
    machine::CopyPath,
    report::{fmt_bytes, Table},
    timing::Stats,
};

/// `t = α + n/β` fitted to measurements.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct CopyCost {
    /// The per-copy time, µs.
    pub alpha_us: f64,
    /// The rate large copies approach, GB/s.
    pub beta_gbps: f64,
    /// The size at which a copy reaches half of β, bytes.
    pub half_rate_bytes: f64,
    /// The largest relative miss of the fit at a measured size: how well two numbers describe the sweep.
    pub worst_miss: f64,
}

impl CopyCost {
    /// Fits `(bytes, ms)` pairs; needs two sizes or more. α is held at or above zero.
    pub fn fit(points: &[(usize, f64)]) -> anyhow::Result<CopyCost> {
        let mut sizes: Vec<usize> = points.iter().map(|p| p.0).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() < 2 || points.iter().any(|&(_, t)| !(t > 0.0 && t.is_finite())) {
            anyhow::bail!("a fit of t = α + n/β needs positive times at two sizes or more");
        }
        // Weighted least squares with weights 1/t², in seconds and bytes: minimize Σ ((t - a - n·x)/t)².
        let w = |t: f64| 1.0 / (t * t);
        let (mut s, mut sn, mut snn, mut st, mut snt) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(n, ms) in points {
            let (n, t) = (n as f64, ms * 1e-3);
            let wi = w(t);
            s += wi;
            sn += wi * n;
            snn += wi * n * n;
            st += wi * t;
            snt += wi * n * t;
        }
        let det = s * snn - sn * sn;
        let (mut a, mut x) = ((snn * st - sn * snt) / det, (s * snt - sn * st) / det);
        if a < 0.0 || !a.is_finite() {
            (a, x) = (0.0, snt / snn);
        }
        if x.is_nan() || x <= 0.0 {
            anyhow::bail!("the times do not grow with size: no rate to fit");
        }
        let worst_miss =
            points.iter().map(|&(n, ms)| ((a + n as f64 * x) - ms * 1e-3).abs() / (ms * 1e-3)).fold(0.0, f64::max);
        Ok(CopyCost { alpha_us: a * 1e6, beta_gbps: 1.0 / x / 1e9, half_rate_bytes: a / x, worst_miss })
    }

    /// Where every point is of one size: its rate as β, with no per-copy time seen (α 0), which is all
    /// one size shows. `None` where there are two sizes or more.
    pub fn one_size(points: &[(usize, f64)]) -> Option<CopyCost> {
        let &(bytes, _) = points.first()?;
        if points.iter().any(|p| p.0 != bytes) {
            return None;
        }
        let mut ms: Vec<f64> = points.iter().map(|p| p.1).collect();
        ms.sort_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        let beta_gbps = bytes as f64 / (median * 1e6);
        Some(CopyCost { alpha_us: 0.0, beta_gbps, half_rate_bytes: 0.0, worst_miss: 0.0 })
    }

    /// The time the fit gives for `bytes`, ms.
    pub fn ms(&self, bytes: usize) -> f64 {
        self.alpha_us * 1e-3 + bytes as f64 / (self.beta_gbps * 1e9) * 1e3
    }
}

/// One kind of host memory at one size: each direction's copy time.
#[derive(Clone, Debug, Serialize)]
pub struct DirectionTimes {
    pub htod: Stats,
    pub dtoh: Stats,
}

impl DirectionTimes {
    fn direction(&self, d: usize) -> &Stats {
        if d == 0 {
            &self.htod
        } else {
            &self.dtoh
        }
    }
}

/// Copy times over a sweep: `times[i][k]` is kind `kinds[k]` at `sizes[i]`, each direction.
pub struct Sweep<'a> {
    pub sizes: &'a [usize],
    pub kinds: &'a [&'a str],
    pub times: &'a [Vec<DirectionTimes>],
    /// One direction's raw link rate, GB/s, where known.
    pub link_gbps: Option<f64>,
    /// One host thread's memory-copy rate, GB/s, measured in the same run.
    pub host_copy_gbps: f64,
}

/// One kind and direction over a sweep: `t = α + n/β`, and what holds its largest copy back.
#[derive(Clone, Debug, Serialize)]
pub struct KindFit {
    pub kind: String,
    pub direction: &'static str,
    pub cost: CopyCost,
    pub limit: String,
    /// Why these sizes cannot show the fit, where they cannot: then its numbers are not printed.
    pub unseen: Option<String>,
}

/// Why `points` cannot show `cost`, if they cannot: two sizes always fit exactly; α shows only where the
/// smallest copy spends a fifth of its time or more on it (at most 4x the size n½ = α·β), and β only where
/// the largest copy spends half or more on moving bytes (at least n½).
pub fn unseen(points: &[(usize, f64)], cost: &CopyCost) -> Option<String> {
    let (smallest, largest) = (points.iter().map(|p| p.0).min()?, points.iter().map(|p| p.0).max()?);
    let sizes = points.iter().map(|p| p.0).collect::<std::collections::BTreeSet<_>>().len();
    if sizes == 1 {
        return Some("one size, which shows a rate and no per-copy cost: sweep three sizes or more".into());
    }
    if sizes < 3 {
        return Some(format!("{sizes} sizes, which any two numbers fit exactly: sweep three or more"));
    }
    if cost.alpha_us <= 0.0 || smallest as f64 > 4.0 * cost.half_rate_bytes {
        return Some(format!(
            "copies of {} and more hide a per-copy cost: α cannot be seen from them (sweep from 4 KiB)",
            fmt_bytes(smallest)
        ));
    }
    if (largest as f64) < cost.half_rate_bytes {
        return Some(format!(
            "copies of {} and less are mostly per-copy cost: β cannot be seen from them (sweep past {})",
            fmt_bytes(largest),
            fmt_bytes(cost.half_rate_bytes as usize)
        ));
    }
    None
}

const DIRECTIONS: [&str; 2] = ["H2D", "D2H"];

/// Why a sweep whose times do not grow with size shows no fit: the rate given is its largest copy's.
const FLAT: &str = "times that do not grow with size (the host or the link busy with other work?): \
                    no per-copy cost or rate to fit; the rate is the largest copy's";

impl Sweep<'_> {
    fn path(&self, k: usize, bytes: usize, gbps: f64, per_copy_us: Option<f64>) -> CopyPath<'static> {
        CopyPath {
            memory: if self.kinds[k] == "pageable" { "pageable" } else { "pinned" },
            bytes,
            gbps,
            per_copy_us,
            link_gbps: self.link_gbps,
            host_copy_gbps: Some(self.host_copy_gbps),
        }
    }

    /// Every kind and direction fitted, kind by kind (H2D then D2H).
    pub fn fits(&self) -> anyhow::Result<Vec<KindFit>> {
        let mut fits = Vec::new();
        for (k, kind) in self.kinds.iter().enumerate() {
            for (d, direction) in DIRECTIONS.into_iter().enumerate() {
                let points: Vec<(usize, f64)> =
                    self.sizes.iter().zip(self.times).map(|(b, row)| (*b, row[k].direction(d).median_ms)).collect();
                let (cost, unseen) = match CopyCost::one_size(&points) {
                    Some(rate) => (rate, None), // what one size shows: its rate; `unseen` says why no fit
                    None => match CopyCost::fit(&points) {
                        Ok(cost) => (cost, None),
                        // Times that do not grow with size (a host or link busy with other work): the
                        // largest copy's rate, and the kind's line says why nothing is fitted.
                        Err(_) if points.iter().all(|&(_, t)| t > 0.0 && t.is_finite()) => {
                            let largest = *points.iter().max_by_key(|p| p.0).expect("two sizes or more");
                            let rate = CopyCost::one_size(&[largest]).expect("one point");
                            (rate, Some(FLAT.to_string()))
                        }
                        Err(err) => return Err(err),
                    },
                };
                let (bytes, ms) = points[points.len() - 1];
                let unseen = unseen.or_else(|| self::unseen(&points, &cost));
                let per_copy = if unseen.is_none() { Some(cost.alpha_us) } else { None };
                let limit = self.path(k, bytes, bytes as f64 / (ms * 1e6), per_copy).limit();
                fits.push(KindFit { kind: kind.to_string(), direction, cost, limit, unseen });
            }
        }
        Ok(fits)
    }

    /// Direction `d`'s rates, GB/s, a row a size, with what limits the kind `limited` at each size.
    pub fn rate_table(&self, d: usize, fits: &[KindFit], limited: usize) -> Table {
        let mut headers: Vec<String> = vec!["size".into()];
        headers.extend(self.kinds.iter().map(|k| k.to_string()));
        headers.push(format!("{} limited by", self.kinds[limited]));
        let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
        for (bytes, row) in self.sizes.iter().zip(self.times) {
            let mut cells = vec![fmt_bytes(*bytes)];
            cells.extend(row.iter().map(|b| format!("{:.2}", b.direction(d).gbps(*bytes))));
            let fit = &fits[2 * limited + d];
            let alpha = fit.unseen.is_none().then_some(fit.cost.alpha_us);
            cells.push(self.path(limited, *bytes, row[limited].direction(d).gbps(*bytes), alpha).limit());
            t.row(cells);
        }
        t
    }
}

/// The fits as a table: α, β, where half of β is reached, how well the two numbers fit, what limits.
pub fn fit_table(fits: &[KindFit]) -> Table {
    let mut t = Table::new(&[
        "kind",
        "direction",
        "α per copy",
        "β GB/s",
        "half of β at",
        "worst miss",
        "largest copy limited by",
    ]);
    for f in fits {
        let c = &f.cost;
        let numbers = match &f.unseen {
            None => vec![
                format!("{:.1} µs", c.alpha_us),
                format!("{:.2}", c.beta_gbps),
                fmt_bytes(c.half_rate_bytes.round() as usize),
                format!("{:.0}%", 100.0 * c.worst_miss),
            ],
            Some(_) => vec!["not seen".into(), "-".into(), "-".into(), "-".into()],
        };
        t.row([vec![f.kind.clone(), f.direction.into()], numbers, vec![f.limit.clone()]].concat());
    }
    t
}

/// Why the fits that are not printed are not: one line each reason.
pub fn unseen_notes(fits: &[KindFit]) -> Vec<String> {
    let mut notes: Vec<String> = fits.iter().filter_map(|f| f.unseen.clone()).collect();
    notes.dedup();
    notes.into_iter().map(|n| format!("not fitted: {n}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One size (`--min 64MiB --max 64MiB`) is its rate and "not fitted", not an error.
    #[test]
    fn one_size_is_a_rate_and_not_fitted() {
        let stats = |ms: f64| Stats::from_samples(&[ms, ms, ms]).unwrap();
        let times = vec![vec![DirectionTimes { htod: stats(1.25), dtoh: stats(2.5) }]];
        let sweep =
            Sweep { sizes: &[64 << 20], kinds: &["pinned"], times: &times, link_gbps: None, host_copy_gbps: 10.0 };
        let fits = sweep.fits().unwrap();
        assert_eq!(fits.len(), 2);
        assert!((fits[0].cost.beta_gbps - (64 << 20) as f64 / 1.25e6).abs() < 1e-9, "{:?}", fits[0].cost);
        assert!(fits.iter().all(|f| f.unseen.as_deref().is_some_and(|u| u.starts_with("one size"))));
        assert_eq!(unseen_notes(&fits).len(), 1, "said once");
        assert!(CopyCost::fit(&[(64 << 20, 1.25)]).is_err(), "no fit of one size");
    }

    /// A kind whose times fall as the copies grow (a link busy with other work meanwhile) is not fitted
    /// and says why, and the others are: the run goes on.
    #[test]
    fn times_that_do_not_grow_with_size_are_said_and_not_fitted() {
        let stats = |ms: f64| Stats::from_samples(&[ms, ms, ms]).unwrap();
        let row = |flat: f64, grows: f64| vec![DirectionTimes { htod: stats(flat), dtoh: stats(grows) }];
        let times = vec![row(0.5, 0.01), row(0.4, 0.02), row(0.3, 1.3)];
        let sizes = [4 << 10, 64 << 10, 64 << 20];
        let sweep = Sweep { sizes: &sizes, kinds: &["pinned"], times: &times, link_gbps: None, host_copy_gbps: 10.0 };
        let fits = sweep.fits().unwrap();
        assert_eq!(fits[0].unseen.as_deref(), Some(FLAT), "H2D: {:?}", fits[0]);
        assert!((fits[0].cost.beta_gbps - (64 << 20) as f64 / 0.3e6).abs() < 1e-9, "the largest copy's rate");
        assert_eq!(fits[1].unseen, None, "D2H fits: {:?}", fits[1]);
        let zero = vec![row(0.0, 0.01), row(0.4, 0.02), row(0.3, 1.3)];
        assert!(Sweep { times: &zero, ..sweep }.fits().is_err(), "a time of zero is an error still");
    }

    #[test]
    fn a_fit_is_shown_only_where_the_sizes_can_show_it() {
        let t = |n: usize| (6e-6 + n as f64 / 55e9) * 1e3; // n½ = 330 KB
        let at = |sizes: &[usize]| -> Option<String> {
            let pts: Vec<(usize, f64)> = sizes.iter().map(|&n| (n, t(n))).collect();
            unseen(&pts, &CopyCost::fit(&pts).unwrap())
        };
        assert_eq!(at(&[4 << 10, 64 << 10, 1 << 20, 64 << 20]), None);
        assert!(at(&[1 << 30, 4 << 30]).unwrap().contains("2 sizes"), "two points always fit");
        assert!(at(&[1 << 30, 2 << 30, 4 << 30]).unwrap().contains("α cannot be seen"));
        assert!(at(&[4 << 10, 8 << 10, 16 << 10]).unwrap().contains("β cannot be seen"));
    }

    #[test]
    fn recovers_alpha_and_beta_from_exact_times() {
        // 8 µs per copy, 55 GB/s.
        let t = |n: usize| (8e-6 + n as f64 / 55e9) * 1e3;
        let pts: Vec<(usize, f64)> = (12..=28).step_by(2).map(|k| (1usize << k, t(1 << k))).collect();
        let c = CopyCost::fit(&pts).unwrap();
        assert!((c.alpha_us - 8.0).abs() < 1e-6, "{c:?}");
        assert!((c.beta_gbps - 55.0).abs() < 1e-6, "{c:?}");
        assert!((c.half_rate_bytes - 440_000.0).abs() < 1.0, "{c:?}");
        assert!(c.worst_miss < 1e-9);
        assert!((c.ms(1 << 20) - t(1 << 20)).abs() < 1e-12);
    }

    #[test]
    fn noise_at_small_sizes_does_not_swamp_the_rate() {
        // ±5% noise alternating: the fit stays within a few percent on both numbers.
        let pts: Vec<(usize, f64)> = (12..=28)
            .step_by(2)
            .enumerate()
            .map(|(i, k)| {
                let n = 1usize << k;
                let noise = if i % 2 == 0 { 1.05 } else { 0.95 };
                (n, (10e-6 + n as f64 / 25e9) * 1e3 * noise)
            })
            .collect();
        let c = CopyCost::fit(&pts).unwrap();
        assert!((c.alpha_us / 10.0 - 1.0).abs() < 0.06, "{c:?}");
        assert!((c.beta_gbps / 25.0 - 1.0).abs() < 0.06, "{c:?}");
        assert!(c.worst_miss > 0.03 && c.worst_miss < 0.08, "{c:?}");
    }

    #[test]
    fn a_negative_intercept_is_held_at_zero_and_bad_input_refused() {
        let pts = [(1 << 20, 0.018), (1 << 24, 0.31), (1 << 26, 1.22)];
        let c = CopyCost::fit(&pts).unwrap();
        assert!(c.alpha_us >= 0.0);
        assert!(CopyCost::fit(&[(4096, 0.01)]).is_err(), "one size");
        assert!(CopyCost::fit(&[(4096, 0.01), (8192, 0.0)]).is_err(), "zero time");
        assert!(CopyCost::fit(&[(4096, 0.02), (8192, 0.01)]).is_err(), "time falls with size");
    }
}
