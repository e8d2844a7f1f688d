//! The paired judgement on exact cases, and on this project's own run-to-run noise: every lesson's
//! default run 8 times on an H200 (`results/nvidia-h200-x1/a-against-a.json`).

use super::*;

#[test]
fn the_signed_rank_distribution_and_its_cuts_are_the_tables() {
    for k in [1, 5, 12] {
        let p = signed_rank_distribution(k);
        assert_eq!(p.len(), k * (k + 1) / 2 + 1);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
    // The tables' two-sided 5% critical values: T <= 8 for 10 pairs, T <= 25 for 15, T <= 52 for 20.
    assert_eq!((cut(10, 0.05), cut(15, 0.05), cut(20, 0.05)), (9, 26, 53));
    assert_eq!(cut(5, 0.05), 0, "5 pairs cannot reach 5%: 2 / 2^5 = 6.25%");
    assert_eq!((least_pairs(1), least_pairs(4), least_pairs(64), least_pairs(360)), (8, 10, 14, 17));
}

#[test]
fn a_steady_shift_is_slower_and_no_shift_is_the_same() {
    // 15 pairs whose ratios wander by a percent: 5% more in B is slower, its interval around 1.05.
    let wobble = |i: usize| 1.0 + 0.01 * (((i * 7) % 11) as f64 / 5.0 - 1.0);
    let pairs = |shift: f64| -> Vec<(f64, f64)> { (0..15).map(|i| (1.0, shift * wobble(i))).collect() };
    let slow = judge(&pairs(1.05), 10).unwrap();
    assert_eq!((slow.verdict, slow.pairs), (Verdict::Slower, 15));
    assert!(slow.lo > 1.0 && slow.lo < 1.05 && slow.hi > 1.05 && (slow.ratio - 1.05).abs() < 0.01, "{slow:?}");
    let fast = judge(&pairs(1.0 / 1.05), 10).unwrap();
    assert_eq!(fast.verdict, Verdict::Faster);
    // Ratios that fall either way: the same, and the changes that would have shown are the interval's.
    let same = judge(&(0..15).map(|i| (1.0, wobble(i) / wobble(i + 3))).collect::<Vec<_>>(), 10).unwrap();
    assert_eq!(same.verdict, Verdict::Same, "{same:?}");
    assert!((same.detect_slower - (same.ratio / same.lo - 1.0)).abs() < 1e-12 && same.detect_slower < 0.03, "{same:?}");
    assert!((same.detect_faster - (1.0 - same.ratio / same.hi)).abs() < 1e-12, "{same:?}");
    // The reach is the noise's, whatever the verdict: 5% slower could show as much again.
    assert!((slow.ratio / slow.lo - 1.0 - slow.detect_slower).abs() < 1e-12 && slow.detect_slower < 0.03, "{slow:?}");
    // Too few pairs for the lesson's figures: never a verdict, and nothing it could detect.
    let few = judge(&pairs(2.0)[..8], 360).unwrap();
    assert_eq!((few.verdict, few.lo, few.detect_slower), (Verdict::Same, 0.0, f64::INFINITY));
    assert!(judge(&[(0.0, 1.0)], 1).is_none());
}

/// One figure of `a-against-a.json`: its runs' medians, in run order.
pub struct Noise {
    pub lesson: String,
    pub name: String,
    pub gpu_pinned_long: bool,
    pub figures_in_lesson: usize,
    pub runs_ms: Vec<f64>,
}

/// Every figure of every lesson in `a-against-a.json`.
pub fn noise() -> Vec<Noise> {
    let path = crate::tools::root().join("results/nvidia-h200-x1/a-against-a.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for (lesson, figures) in v["lessons"].as_object().unwrap() {
        let figures = figures.as_array().unwrap();
        for f in figures {
            let runs_ms: Vec<f64> = f["runs_ms"].as_array().unwrap().iter().filter_map(|x| x.as_f64()).collect();
            let mut sorted = runs_ms.clone();
            sorted.sort_by(f64::total_cmp);
            // This file says `cpu_paged`, as figures of schema 1 did: pageable or managed memory.
            let pinned = !f["cpu_paged"].as_bool().unwrap();
            let gpu_pinned_long = f["clock"] == "gpu" && pinned && sorted[sorted.len() / 2] >= 0.1;
            out.push(Noise {
                lesson: lesson.clone(),
                name: f["name"].as_str().unwrap().into(),
                gpu_pinned_long,
                figures_in_lesson: figures.len(),
                runs_ms,
            });
        }
    }
    out
}

/// A seeded generator (splitmix64), for drawing pairs.
pub struct Draw(u64);

impl Draw {
    pub fn new(seed: u64) -> Draw {
        Draw(seed)
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// `k` pairs of two different runs of `runs`, drawn at random, each way round at random, B's time times
/// `shift`: pairs with the project's own run-to-run noise (though not independent: 8 runs make 28
/// pairs).
pub fn pairs_of(runs: &[f64], k: usize, shift: f64, draw: &mut Draw) -> Vec<(f64, f64)> {
    (0..k)
        .map(|_| {
            let i = draw.below(runs.len());
            let j = (i + 1 + draw.below(runs.len() - 1)) % runs.len();
            (runs[i], runs[j] * shift)
        })
        .collect()
}

/// Each figure judged from `k` pairs drawn from its runs (B times `shift`), a lesson's figures together.
fn judged(noise: &[Noise], k: usize, shift: f64, seed: u64) -> Vec<(&Noise, Paired)> {
    let mut draw = Draw::new(seed);
    noise
        .iter()
        .filter_map(|n| {
            let pairs = pairs_of(&n.runs_ms, pairs_for(k, n.figures_in_lesson), shift, &mut draw);
            Some((n, judge(&pairs, n.figures_in_lesson)?))
        })
        .collect()
}

#[test]
fn a_against_itself_on_the_h200s_noise_shows_nothing_slower_or_faster() {
    let noise = noise();
    assert!(noise.len() > 600, "{}", noise.len());
    for seed in 1..=3 {
        let j = judged(&noise, 15, 1.0, seed);
        let moved: Vec<String> = j
            .iter()
            .filter(|(_, p)| matches!(p.verdict, Verdict::Slower | Verdict::Faster))
            .map(|(n, p)| format!("{}: {} {:?} {:.3}", n.lesson, n.name, p.verdict, p.ratio))
            .collect();
        assert!(moved.is_empty(), "seed {seed}: {moved:#?}");
        let ambiguous = j.iter().filter(|(_, p)| p.verdict == Verdict::Ambiguous).count();
        assert!(ambiguous * 100 <= j.len(), "seed {seed}: {ambiguous} of {} ambiguous", j.len());
    }
}

/// Of the GPU-timed figures of pinned memory of 0.1 ms or more (of `lessons`, or all): the share that 5%
/// slower in B shows as slower, and the share whose detectable change (A against itself) is 5% or less,
/// with `k` pairs.
fn five_percent(noise: &[Noise], lessons: Option<&[&str]>, k: usize, seed: u64) -> (f64, f64) {
    let long: Vec<&Noise> =
        noise.iter().filter(|n| n.gpu_pinned_long && lessons.is_none_or(|l| l.contains(&n.lesson.as_str()))).collect();
    let mut draw = Draw::new(seed);
    let (mut shown, mut small) = (0, 0);
    for n in &long {
        let k = pairs_for(k, n.figures_in_lesson);
        let slow = judge(&pairs_of(&n.runs_ms, k, 1.05, &mut draw), n.figures_in_lesson).unwrap();
        let same = judge(&pairs_of(&n.runs_ms, k, 1.0, &mut draw), n.figures_in_lesson).unwrap();
        shown += (slow.verdict == Verdict::Slower) as usize;
        small += (same.detect_slower <= 0.05) as usize;
    }
    (shown as f64 / long.len() as f64, small as f64 / long.len() as f64)
}

/// The lessons whose pinned GPU figures move by 5-40% from one process to the next on the H200: a
/// pipeline's whole run lands 10-17% high or low (overlap_sweep, planner), and small_copies' batches
/// settle on one of two times twice apart.
const RESTLESS: [&str; 3] = ["overlap_sweep", "planner", "small_copies"];

#[test]
fn five_percent_slower_shows_where_processes_agree_within_a_few_percent() {
    let noise = noise();
    let quiet: Vec<&str> = noise
        .iter()
        .map(|n| n.lesson.as_str())
        .filter(|l| !RESTLESS.contains(l))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let (shown, detectable) = five_percent(&noise, Some(&quiet), 15, 7);
    // On the H200: 80% of them at 15 pairs; the rest move from process to process by 5-20% (bidirectional's
    // both at once, managed_memory's explicit copies of 16 MiB, overlap's 4 streams).
    assert!(shown >= 0.75 && detectable >= 0.75, "{:.0}% shown, {:.0}% detectable", 100.0 * shown, 100.0 * detectable);
    // Over every lesson, what the H200's runs allow with 15 pairs (the default) is less than half: the
    // restless lessons' figures are half of these, and pairs of processes do not make them agree.
    let (shown, detectable) = five_percent(&noise, None, 15, 7);
    assert!(shown >= 0.35 && detectable >= 0.35, "{:.0}% shown, {:.0}% detectable", 100.0 * shown, 100.0 * detectable);
}

/// How the shares grow with pairs, on the H200's noise (`cargo test -p xtask pairs_needed -- --ignored
/// --nocapture`): what `--pairs` buys.
#[test]
#[ignore]
fn pairs_needed() {
    let noise = noise();
    let quiet: Vec<&str> = noise.iter().map(|n| n.lesson.as_str()).filter(|l| !RESTLESS.contains(l)).collect();
    for k in [10, 12, 15, 20, 25, 30, 40, 60] {
        let (shown, detectable) = five_percent(&noise, None, k, 7);
        let (s1, d1) = five_percent(&noise, Some(&quiet), k, 7);
        let (s2, d2) = five_percent(&noise, Some(&RESTLESS), k, 7);
        let pct = |x: f64| format!("{:.0}%", 100.0 * x);
        println!(
            "{k:>3} pairs: 5% slower shown on {} (other lessons {}, restless {}), detectable within 5% on {} ({}, {})",
            pct(shown),
            pct(s1),
            pct(s2),
            pct(detectable),
            pct(d1),
            pct(d2)
        );
    }
}
