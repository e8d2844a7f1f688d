//! Timing: CUDA events, repeated measurements with warm-up, their median, and bandwidth.

use std::time::Instant;

use serde::Serialize;

/// How many times to run a measurement: `warmup` runs are thrown away, then `repeats` are kept.
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize)]
pub struct Repeats {
    pub warmup: usize,
    pub repeats: usize,
}

pub use figures::{quantile, Stats};

/// Once its timed runs add up to this much, a measurement stops at three runs: long copies (a 1 GiB
/// pageable copy takes 130 ms) would otherwise make a lesson take minutes for no better median.
pub const ENOUGH_MS: f64 = 250.0;

/// Runs `f` (which returns milliseconds) `warmup` times, then up to `repeats` times (at least three, or
/// `repeats` if fewer, once the runs add up to [`ENOUGH_MS`]), and summarizes the timed runs.
pub fn measure(r: Repeats, mut f: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<Stats> {
    let [stats] = measure_parts(r, || Ok([f()?]))?;
    Ok(stats)
}

/// The best (least) time of `f` for a lower bound's parts: [`measure`]'s runs, and more while they add
/// up to less than `until_ms`, up to `most` in all. Short GPU work takes one of two or more times from
/// run to run (the same 64 KiB round trip took 18 or 28 µs in this project's runs), so a best of five can miss the
/// fast one that a run's median lands on; long work stops where [`measure`] does.
pub fn measure_best(
    r: Repeats,
    most: usize,
    until_ms: f64,
    mut f: impl FnMut() -> anyhow::Result<f64>,
) -> anyhow::Result<f64> {
    let mut best = measure(r, &mut f)?;
    let (mut runs, mut total) = (best.runs, best.median_ms * best.runs as f64);
    while runs < most && total < until_ms {
        let t = f()?;
        (best.min_ms, runs, total) = (best.min_ms.min(t), runs + 1, total + t);
    }
    Ok(best.min_ms)
}

/// [`measure`] for a run timed in parts at once (the whole, then its steps): `f` returns each part's
/// milliseconds, and each part gets its own statistics. When to stop is decided on the first part.
pub fn measure_parts<const N: usize>(
    r: Repeats,
    f: impl FnMut() -> anyhow::Result<[f64; N]>,
) -> anyhow::Result<[Stats; N]> {
    runs_in_parts(r, 0.0, f64::INFINITY, ENOUGH_MS, f)
}

/// [`measure_parts`] held to a budget, for lessons that time many things: the warm-up runs stop once
/// they add up to half of `budget_ms` (a run that long is warm after one), and the timed runs, at least
/// three (or `repeats` if fewer), stop once they add up to `budget_ms`. The first part decides.
pub fn measure_parts_within<const N: usize>(
    r: Repeats,
    budget_ms: f64,
    f: impl FnMut() -> anyhow::Result<[f64; N]>,
) -> anyhow::Result<[Stats; N]> {
    runs_in_parts(r, 0.0, budget_ms / 2.0, budget_ms, f)
}

/// [`measure_parts_within`] after a run the caller made itself (a run whose result it checked), which
/// took `first_ms` and counts as the first of `r`'s warm-up runs: a first run of half the budget leaves
/// no more warm-up to do.
pub fn measure_parts_within_after<const N: usize>(
    first_ms: f64,
    r: Repeats,
    budget_ms: f64,
    f: impl FnMut() -> anyhow::Result<[f64; N]>,
) -> anyhow::Result<[Stats; N]> {
    let rest = Repeats { warmup: r.warmup.saturating_sub(1), ..r };
    runs_in_parts(rest, first_ms, budget_ms / 2.0, budget_ms, f)
}

/// Warm-up runs until they add up to `warm_ms` (counting `warmed_ms` already spent), then timed runs,
/// at least three (or `repeats` if fewer), until they add up to `enough_ms`; each part's statistics.
fn runs_in_parts<const N: usize>(
    r: Repeats,
    warmed_ms: f64,
    warm_ms: f64,
    enough_ms: f64,
    mut f: impl FnMut() -> anyhow::Result<[f64; N]>,
) -> anyhow::Result<[Stats; N]> {
    let mut warm = warmed_ms;
    for _ in 0..r.warmup {
        if warm >= warm_ms {
            break;
        }
        warm += f()?[0];
    }
    let mut samples: Vec<[f64; N]> = Vec::with_capacity(r.repeats);
    while samples.len() < r.repeats {
        samples.push(f()?);
        if samples.len() >= 3 && samples.iter().map(|s| s[0]).sum::<f64>() >= enough_ms {
            break;
        }
    }
    let stats = (0..N)
        .map(|k| Stats::from_samples(&samples.iter().map(|s| s[k]).collect::<Vec<_>>()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(stats.try_into().expect("one Stats per part"))
}

/// Host wall-clock laps, for a run whose steps are timed one after another.
pub struct Laps(Instant);

impl Laps {
    pub fn start() -> Laps {
        Laps(Instant::now())
    }

    /// Milliseconds since the last lap (or the start).
    pub fn lap(&mut self) -> f64 {
        let now = Instant::now();
        let ms = (now - self.0).as_secs_f64() * 1e3;
        self.0 = now;
        ms
    }
}

/// GB/s for `bytes` moved in `ms` milliseconds.
pub fn gbps(bytes: usize, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

/// Host wall-clock time of `f` in milliseconds: for CPU-side costs (allocation, pinning, API calls).
pub fn host_ms<R>(f: impl FnOnce() -> R) -> (R, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_secs_f64() * 1e3)
}

/// A span of work on the host clock (seconds from a start shared by several threads) and the bytes it
/// moved: for work that several GPUs do at once, where each GPU's own events leave out how their starts
/// were staggered.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
    pub bytes: usize,
}

impl Window {
    /// GB/s of all `windows` together: their bytes over the span from the first start to the last end.
    pub fn rate_together(windows: &[Window]) -> f64 {
        let start = windows.iter().map(|w| w.start_s).fold(f64::INFINITY, f64::min);
        let end = windows.iter().map(|w| w.end_s).fold(f64::NEG_INFINITY, f64::max);
        windows.iter().map(|w| w.bytes).sum::<usize>() as f64 / (end - start) / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        let s = Stats::from_samples(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median_ms, s.min_ms, s.max_ms, s.runs, s.q3_ms), (2.0, 1.0, 3.0, 3, 2.5));
        let s = Stats::from_samples(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.median_ms, s.q3_ms), (2.5, 3.25), "the third quartile lies 3/4 of the way from first to last");
        assert_eq!(Stats::from_samples(&[5.0]).unwrap().q3_ms, 5.0);
    }

    #[test]
    fn spread_is_the_coefficient_of_variation() {
        let s = Stats::from_samples(&[9.0, 10.0, 11.0]).unwrap();
        assert!((s.cv - 0.1).abs() < 1e-12, "{}", s.cv);
        assert_eq!(Stats::from_samples(&[5.0]).unwrap().cv, 0.0);
    }

    #[test]
    fn bad_samples_are_refused() {
        assert!(Stats::from_samples(&[]).is_err());
        assert!(Stats::from_samples(&[1.0, f64::NAN]).is_err());
        assert!(Stats::from_samples(&[-1.0]).is_err());
    }

    #[test]
    fn windows_together_count_the_stagger() {
        let w = |start_s, end_s| Window { start_s, end_s, bytes: 1_000_000_000 };
        // Two GPUs moving 1 GB each in 1 s, the second starting 0.5 s late: 2 GB over 1.5 s.
        assert!((Window::rate_together(&[w(0.0, 1.0), w(0.5, 1.5)]) - 2.0 / 1.5).abs() < 1e-12);
        assert!((Window::rate_together(&[w(2.0, 3.0)]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_best_of_short_runs_goes_on_until_it_has_looked_long_enough() {
        let r = Repeats { warmup: 1, repeats: 5 };
        // Slow for the warm-up and the first eight runs, then fast: five runs would miss the fast time.
        let mut calls = 0;
        let best = measure_best(r, 30, 1.0, || {
            calls += 1;
            Ok(if calls <= 9 { 0.028 } else { 0.018 })
        })
        .unwrap();
        assert_eq!(best, 0.018);
        assert_eq!(calls, 1 + 30, "short runs: up to 30 timed runs");
        // Long runs stop where measure does: five runs of 100 ms are past 1 ms already.
        let mut calls = 0;
        let best = measure_best(r, 30, 1.0, || {
            calls += 1;
            Ok(100.0)
        })
        .unwrap();
        assert_eq!((best, calls), (100.0, 1 + 3));
    }

    #[test]
    fn bandwidth_in_decimal_gigabytes() {
        assert!((gbps(64 << 20, 1.2) - 55.924).abs() < 1e-3);
    }

    #[test]
    fn long_runs_stop_at_three() {
        let mut calls = 0;
        let s = measure(Repeats { warmup: 1, repeats: 10 }, || {
            calls += 1;
            Ok(100.0)
        })
        .unwrap();
        assert_eq!((calls, s.runs), (4, 3), "three timed runs of 100 ms exceed ENOUGH_MS");
        let s = measure(Repeats { warmup: 0, repeats: 10 }, || Ok(1.0)).unwrap();
        assert_eq!(s.runs, 10);
    }

    #[test]
    fn parts_get_their_own_statistics_and_the_first_decides_when_to_stop() {
        let mut calls = 0.0;
        let [whole, step] = measure_parts(Repeats { warmup: 1, repeats: 10 }, || {
            calls += 1.0;
            Ok([100.0 + calls, calls])
        })
        .unwrap();
        assert_eq!(whole.runs, 3, "three runs of over 100 ms exceed ENOUGH_MS");
        assert_eq!((step.runs, step.min_ms, step.median_ms, step.max_ms), (3, 2.0, 3.0, 4.0));
        let mut laps = Laps::start();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let first = laps.lap();
        assert!(first >= 50.0 && laps.lap() < first, "a lap counts from the one before");
    }

    #[test]
    fn a_budget_cuts_warm_up_and_timed_runs_short() {
        let r = Repeats { warmup: 2, repeats: 10 };
        let mut calls = 0;
        let [s] = measure_parts_within(r, 10.0, || {
            calls += 1;
            Ok([20.0])
        })
        .unwrap();
        assert_eq!((calls, s.runs), (1 + 3, 3), "one warm-up of 20 ms, then three runs");
        let mut calls = 0;
        let [s] = measure_parts_within(r, 10.0, || {
            calls += 1;
            Ok([0.1])
        })
        .unwrap();
        assert_eq!((calls, s.runs), (2 + 10, 10), "short runs: every warm-up and repeat");
        // After a checked run of its own, the caller's run is the first warm-up.
        let after = |first_ms: f64| {
            let mut calls = 0;
            measure_parts_within_after(first_ms, r, 10.0, || {
                calls += 1;
                Ok([0.1])
            })
            .unwrap();
            calls
        };
        assert_eq!(after(2.0), 1 + 10, "a short first run: one more warm-up");
        assert_eq!(after(5.0), 10, "a first run of half the budget: warm already");
    }

    #[test]
    fn measure_discards_warmup() {
        let mut calls = 0;
        let s = measure(Repeats { warmup: 2, repeats: 3 }, || {
            calls += 1;
            Ok(if calls <= 2 { 100.0 } else { calls as f64 })
        })
        .unwrap();
        assert_eq!(calls, 5);
        assert_eq!((s.min_ms, s.median_ms, s.max_ms), (3.0, 4.0, 5.0));
    }
}
