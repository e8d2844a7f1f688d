//! `cargo xtask compare A.json B.json`: which timed figures of two runs of a lesson (`--json`) changed
//! beyond their noise, by how much, and how sure that is. Keep a run; compare after a driver update, a
//! BIOS change, a change of your own.
//!
//! # Which figures
//!
//! A lesson names its figures (`"figures": [{"name": "pinned H2D 4 KiB", "stats": {...}}]`, see
//! `measure::report::Figure`), and figures of the same name are compared. Files without names (older
//! runs, lessons that name none) are compared figure by figure at the same place in their `result`
//! (`copies[1][0].d2h`), every `Stats` object there (`median_ms`, `runs`, `cv`).
//!
//! The settings that decide what a run measures (`plan`, `work`, `sizes`, ...) are compared first, and
//! each difference is named. A figure that depends on a setting that differs measures different work,
//! and is left out, with one exception: a setting the run *calibrated* (the kernel's rounds, which
//! `overlap` fits to the copies' time in each run, so that no two default runs have the same kernel).
//! A figure held against a lower bound measured on its own work in its own run is then compared by its
//! time over that bound (how near the run came to what its work allows), and figures that do not depend
//! on the calibration (the copies) as they are. The output says which was done. Files without names mark
//! nothing, so there every timed figure is taken to depend on `work`, and pipeline runs (`judged`: a
//! measured time beside its bound) to be compared over their bound.
//!
//! # The noise model
//!
//! A figure is the median of one run's samples. Two runs of the same work on a quiet machine differ in it
//! for two reasons, which add as variances (relative to the figure):
//!
//! - **its spread within the run**, `cv`, the samples' coefficient of variation. Not divided by √n: the
//!   samples are taken one after another and are not independent, and short GPU work takes one of two
//!   times (18 or 28 µs for the same 64 KiB round trip on an H200), between which a median can jump.
//! - **what changes from one process to the next**, which one run cannot show: where the OS placed its
//!   memory, the link's and clocks' state, which of those two times short work settles on. It is taken as
//!   `sqrt(1.5%² + (2.5 µs / t)²)`, `t` the faster of the two runs' times: a relative drift that long
//!   figures keep, and an absolute one that dominates short ones. 2.5 µs is what lets a pair of runs of
//!   18 µs work that settled on its two times, 18 and 28 µs, pass as noise (55% against 3 x √2 x
//!   14%); a 7 µs copy gets ±36% from it, a 1 MiB copy (25 µs) ±10%, a 1 ms pipeline ±1.5%. And it is at
//!   least the figure's own `cv`: a figure that wobbles within a run is taken to wobble as much between.
//!
//! The noise of a change is the square root of the sum of both runs' two terms: one standard deviation
//! of `(B - A) / A` as two quiet runs would give it. A change counts when it exceeds three times its
//! noise: with normal errors one figure in 370 of two quiet runs would pass that, 0.17 false changes over
//! `pinned_memory`'s 64 figures. Larger multiples are said in words: 3-5x "likely", 5-10x "very likely",
//! over 10x "clear". Without baselines, for figures steady within their runs, a change counts from about
//! 150% at 7 µs, 55% at 20 µs, 12% at 100 µs and 6.5% from a millisecond on: what one pair of runs tells.
//!
//! With `--baseline` runs made as A was, the spread of A's figure over A and those runs is measured, and
//! replaces the assumed drift (with only one baseline run it can only widen it: two values say little
//! about a spread); it never falls below what no number of runs resolves, half a percent and the events'
//! resolution (half a microsecond, 0.15 µs as a standard deviation). That is how to compare microsecond
//! figures more finely than the assumption allows.

use std::{collections::BTreeSet, path::Path};

use anyhow::{bail, Context as _};
use serde_json::Value;

use crate::flags::CompareFlags;

/// A change counts when it exceeds this many times its noise.
pub const COUNTS_AT: f64 = 3.0;
/// What a figure may drift by from one process to the next, relative to it, where no baseline says.
pub const DRIFT: f64 = 0.015;
/// ... and in absolute terms, ms, at the faster run's time: short work settles on one of two times about
/// 10 µs apart.
pub const JITTER_MS: f64 = 0.0025;
/// What no number of runs resolves, relative and in ms: CUDA events resolve about half a microsecond,
/// 0.5/√12 µs as a standard deviation.
pub const RESOLVED: f64 = 0.005;
pub const RESOLVED_MS: f64 = 0.000_15;

/// The settings that decide what a run measures, where its `result` has them.
const SETTINGS: [&str; 6] = ["plan", "work", "sizes", "bytes", "repeats", "size"];

/// How a figure is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Its time.
    Time,
    /// Its time over the lower bound measured on its own work in its own run (1 / efficiency).
    OverBound,
}

/// One figure as one run has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub name: String,
    pub ms: f64,
    pub cv: f64,
    pub bound_ms: Option<f64>,
    pub depends_on: Vec<String>,
    pub calibrated: Vec<String>,
}

/// One figure in both runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub name: String,
    pub measure: Measure,
    /// Each run's value: ms, or time over bound.
    pub a: f64,
    pub b: f64,
    /// (b - a) / a
    pub change: f64,
    /// One standard deviation of `change` under the noise model, relative.
    pub noise: f64,
    /// Each run's spread within itself (cv), and the drift allowed between runs, relative.
    spread: (f64, f64),
    drift: (f64, f64),
    /// The times the drift is judged by (A's, B's), ms.
    ms: (f64, f64),
}

/// The drift assumed of a figure of `ms` from one process to the next, relative (see the module's doc).
pub fn assumed_drift(ms: f64) -> f64 {
    DRIFT.hypot(JITTER_MS / ms)
}

fn resolved(ms: f64) -> f64 {
    RESOLVED.hypot(RESOLVED_MS / ms)
}

impl Change {
    fn new(name: String, measure: Measure, a: &Reading, b: &Reading) -> Option<Change> {
        let value = |r: &Reading| match measure {
            Measure::Time => Some(r.ms),
            Measure::OverBound => r.bound_ms.filter(|b| *b > 0.0).map(|b| r.ms / b),
        };
        let (va, vb) = (value(a)?, value(b)?);
        if !(va > 0.0 && vb.is_finite()) {
            return None;
        }
        // The absolute part is judged at the faster run's time: a jump between two times is as likely
        // either way.
        let (t, bound) = (a.ms.min(b.ms), a.bound_ms.unwrap_or(0.0).min(b.bound_ms.unwrap_or(0.0)));
        let drift = |r: &Reading| {
            let d = assumed_drift(t).max(r.cv);
            if measure == Measure::OverBound {
                d.hypot(assumed_drift(bound))
            } else {
                d
            }
        };
        let mut c = Change {
            name,
            measure,
            a: va,
            b: vb,
            change: (vb - va) / va,
            noise: 0.0,
            spread: (a.cv, b.cv),
            drift: (drift(a), drift(b)),
            ms: (a.ms, b.ms),
        };
        c.update_noise();
        Some(c)
    }

    fn update_noise(&mut self) {
        let (s, d) = (self.spread, self.drift);
        self.noise = (s.0 * s.0 + s.1 * s.1 + d.0 * d.0 + d.1 * d.1).sqrt();
    }

    pub fn beyond_noise(&self) -> bool {
        self.change.abs() > COUNTS_AT * self.noise
    }

    /// How many times its noise the change is.
    pub fn times_noise(&self) -> f64 {
        self.change.abs() / self.noise.max(1e-12)
    }

    /// `slower by 12.0%, 4.1x its noise: likely`, or `within noise (0.4x)`.
    pub fn verdict(&self) -> String {
        let x = self.times_noise();
        if !self.beyond_noise() {
            return format!("within noise ({x:.1}x)");
        }
        let way = match (self.measure, self.change > 0.0) {
            (Measure::Time, true) => "slower",
            (Measure::Time, false) => "faster",
            (Measure::OverBound, true) => "further from its bound",
            (Measure::OverBound, false) => "nearer its bound",
        };
        let sure = if x >= 10.0 {
            "clear"
        } else if x >= 5.0 {
            "very likely"
        } else {
            "likely"
        };
        format!("{way} by {:.1}%, {x:.1}x its noise: {sure}", 100.0 * self.change.abs())
    }

    fn value(&self, v: f64) -> String {
        match self.measure {
            Measure::OverBound => format!("{v:.3}x bound"),
            Measure::Time if v < 0.1 => format!("{:.2} µs", v * 1e3),
            Measure::Time => format!("{v:.3} ms"),
        }
    }
}

/// Two runs compared.
#[derive(Debug, Default)]
pub struct Comparison {
    pub changes: Vec<Change>,
    /// Figures of both runs that were not compared, and why.
    pub left_out: Vec<(String, String)>,
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Whether the figures were matched by their names (else by their places in the JSON).
    pub named: bool,
    /// (setting, A's, B's) where the runs differ.
    pub differing: Vec<(String, String, String)>,
    /// The differing settings that some figure names as calibrated.
    pub calibrated: Vec<String>,
}

pub fn run(flags: CompareFlags) -> anyhow::Result<()> {
    let (a, b) = (read(&flags.a)?, read(&flags.b)?);
    if a["schema_version"] != b["schema_version"] {
        bail!(
            "the two files have different schema versions ({} and {}): they cannot be compared",
            a["schema_version"],
            b["schema_version"]
        );
    }
    for (what, key) in [("GPU", "name"), ("driver", "driver_version")] {
        let (x, y) = (&a["machine"]["gpus"][0][key], &b["machine"]["gpus"][0][key]);
        if x != y {
            println!("note: the {what} differs: {x} against {y}");
        }
    }
    let mut cmp = compare(&a, &b);
    let mut baselines = Vec::new();
    for path in &flags.baseline {
        let e = compare(&a, &read(path)?);
        if e.changes.is_empty() {
            println!("note: the baseline run {} has no figure in common with A: left out", path.display());
        } else {
            baselines.push(e);
        }
    }
    widen(&mut cmp.changes, &baselines);
    if cmp.changes.is_empty() {
        match cmp.left_out.first() {
            Some((name, why)) => bail!("no figure could be compared: {name} and the others {why}"),
            None => bail!("no timed figures in common: are these two runs of the same lesson (with --json)?"),
        }
    }
    print!("{}", report(&cmp, baselines.len(), flags.all));
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a lesson's JSON output", path.display()))
}

/// Compares two lessons' documents (`{"result", "figures"}`; a bare result is read as one without names).
pub fn compare(a: &Value, b: &Value) -> Comparison {
    let (ra, rb) = (a.get("result").unwrap_or(a), b.get("result").unwrap_or(b));
    let (na, nb) = (named(a), named(b));
    let named = !na.is_empty() && !nb.is_empty();
    let (fa, fb) = if named { (na, nb) } else { (by_place(ra), by_place(rb)) };
    let mut keys: BTreeSet<String> = SETTINGS.iter().map(|s| s.to_string()).collect();
    keys.extend(fa.iter().chain(&fb).flat_map(|f| f.depends_on.iter().cloned()));
    let differing = differing_settings(ra, rb, &keys);
    let differs = |k: &String| differing.iter().any(|d| &d.0 == k);
    let mut cmp = Comparison { named, differing: differing.clone(), ..Comparison::default() };
    for x in &fa {
        let Some(y) = fb.iter().find(|y| y.name == x.name) else {
            cmp.only_in_a.push(x.name.clone());
            continue;
        };
        let depends: BTreeSet<&String> = x.depends_on.iter().chain(&y.depends_on).filter(|k| differs(k)).collect();
        let calibrated = |k: &String| x.calibrated.contains(k) || y.calibrated.contains(k);
        let measure = if depends.is_empty() {
            Measure::Time
        } else if depends.iter().all(|k| calibrated(k)) && x.bound_ms.is_some() && y.bound_ms.is_some() {
            Measure::OverBound
        } else {
            let keys: Vec<&str> = depends.iter().map(|k| k.as_str()).collect();
            let why = if depends.iter().all(|k| calibrated(k)) {
                format!("measure the work calibrated in each run ({} differs)", keys.join(", "))
            } else {
                format!("measure different work ({} differs)", keys.join(", "))
            };
            cmp.left_out.push((x.name.clone(), why));
            continue;
        };
        for k in depends.iter().filter(|k| calibrated(k)) {
            if !cmp.calibrated.contains(*k) {
                cmp.calibrated.push(k.to_string());
            }
        }
        cmp.changes.extend(Change::new(x.name.clone(), measure, x, y));
    }
    cmp.only_in_b = fb.iter().filter(|y| fa.iter().all(|x| x.name != y.name)).map(|y| y.name.clone()).collect();
    cmp
}

/// Sets each change's drift to the spread of A's figure over A and the baseline runs (`baselines[i]`
/// compares A with the i-th), as the module's doc says.
pub fn widen(changes: &mut [Change], baselines: &[Comparison]) {
    for c in changes.iter_mut() {
        let mut values = vec![c.a];
        values.extend(
            baselines
                .iter()
                .filter_map(|e| e.changes.iter().find(|x| x.name == c.name && x.measure == c.measure))
                .map(|x| x.b),
        );
        if values.len() < 2 {
            continue;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let spread = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() / mean;
        let floor = resolved(c.ms.0.min(c.ms.1));
        let d = if values.len() >= 3 { spread.max(floor) } else { spread.max(c.drift.0).max(c.drift.1) };
        c.drift = (d, d);
        c.update_noise();
    }
}

/// The settings among `keys` that both results have and that differ: (setting, A's, B's).
pub fn differing_settings(a: &Value, b: &Value, keys: &BTreeSet<String>) -> Vec<(String, String, String)> {
    let (Some(x), Some(y)) = (a.as_object(), b.as_object()) else { return Vec::new() };
    keys.iter()
        .filter_map(|k| Some((k, x.get(k)?, y.get(k)?)))
        .filter(|(_, p, q)| p != q)
        .map(|(k, p, q)| (k.clone(), p.to_string(), q.to_string()))
        .collect()
}

/// What a person reads: the settings that differ and what was done about them, the noise, the figures
/// that changed beyond it (all with `all`), and one line.
pub fn report(cmp: &Comparison, baselines: usize, all: bool) -> String {
    let mut s = String::new();
    for (key, x, y) in &cmp.differing {
        s += &format!("note: the runs were set up differently: {key} is {x} in A and {y} in B\n");
    }
    let left = |why: &str| cmp.left_out.iter().filter(|l| l.1.contains(why)).count();
    for key in &cmp.calibrated {
        let over = cmp.changes.iter().filter(|c| c.measure == Measure::OverBound).count();
        s += &format!(
            "      {key} was calibrated anew in each run, so the runs' times measure different work: {over} pipeline \
             runs are\n      compared by their time over their own bound (measured on the run's own work), {} figures \
             that do not\n      depend on {key} as they are; {} figures of the calibrated work are left out (the same \
             --iters for both\n      compares times)\n",
            cmp.changes.len() - over,
            left("calibrated")
        );
    }
    let different = left("different work");
    if different > 0 {
        s += &format!("      {different} figures measure different work in the two runs: left out\n");
    }
    let only = |n: &[String], run: &str| {
        let first: Vec<&str> = n.iter().take(3).map(String::as_str).collect();
        let more = if n.len() > 3 { ", ..." } else { "" };
        format!("note: {} figures only in {run}: {}{more}\n", n.len(), first.join(", "))
    };
    if !cmp.only_in_a.is_empty() {
        s += &only(&cmp.only_in_a, "A");
    }
    if !cmp.only_in_b.is_empty() {
        s += &only(&cmp.only_in_b, "B");
    }
    if !cmp.named {
        s += "note: figures matched by their places in the JSON (these runs name none: an older build, or a lesson that does not name its figures)\n";
    }
    if baselines == 0 {
        s += &format!(
            "noise: each figure's spread within its run, and what may change from one process to the next ({:.1}% and \
             {:.1} µs:\n       more room for microsecond figures; --baseline runs made as A was measure it); a change \
             counts at {COUNTS_AT}x its noise\n",
            100.0 * DRIFT,
            JITTER_MS * 1e3
        );
    } else {
        s += &format!(
            "noise: each figure's spread within its run, and its spread over {} runs made as A was (--baseline); a \
             change counts at {COUNTS_AT}x its noise\n",
            baselines + 1
        );
    }
    let shown: Vec<&Change> = cmp.changes.iter().filter(|c| all || c.beyond_noise()).collect();
    if !shown.is_empty() {
        let width = shown.iter().map(|c| c.name.chars().count()).max().unwrap_or(0).max(6);
        s += &format!("{:<width$}  {:>13}  {:>13}  {:>7}  {:>6}  verdict\n", "figure", "A", "B", "change", "noise");
        for c in shown {
            s += &format!(
                "{:<width$}  {:>13}  {:>13}  {:>+6.1}%  ±{:>4.1}%  {}\n",
                c.name,
                c.value(c.a),
                c.value(c.b),
                100.0 * c.change,
                100.0 * c.noise,
                c.verdict()
            );
        }
    }
    let beyond: Vec<&Change> = cmp.changes.iter().filter(|c| c.beyond_noise()).collect();
    let n = cmp.changes.len();
    let left_out = if cmp.left_out.is_empty() { String::new() } else { format!("; {} left out", cmp.left_out.len()) };
    if beyond.is_empty() {
        s += &format!("no figure changed beyond its noise ({n} compared{left_out})\n");
    } else {
        let slower = beyond.iter().filter(|c| c.change > 0.0).count();
        s += &format!(
            "{} of {n} figures changed beyond their noise: {slower} slower, {} faster{left_out}\n",
            beyond.len(),
            beyond.len() - slower
        );
    }
    s
}

/// The figures a document names, if any.
fn named(doc: &Value) -> Vec<Reading> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
    };
    let Some(list) = doc.get("figures").and_then(Value::as_array) else { return Vec::new() };
    list.iter()
        .filter_map(|f| {
            Some(Reading {
                name: f["name"].as_str()?.to_string(),
                ms: f["stats"]["median_ms"].as_f64()?,
                cv: f["stats"]["cv"].as_f64().unwrap_or(0.0),
                bound_ms: f["bound_ms"].as_f64(),
                depends_on: strings(&f["depends_on"]),
                calibrated: strings(&f["calibrated"]),
            })
        })
        .collect()
}

/// Every `Stats` object in a result, named by its place (`report.runs[4 streams].judged.measured`). A
/// pipeline run's `judged` (a measured time beside its bound) carries its bound. Nothing is marked in
/// such files, so every figure is taken to depend on the `work`, which pipeline runs calibrated.
fn by_place(result: &Value) -> Vec<Reading> {
    let mut out = Vec::new();
    walk(result, String::new(), &mut out);
    for r in &mut out {
        r.depends_on.push("work".into());
        if r.bound_ms.is_some() {
            r.calibrated.push("work".into());
        }
    }
    out
}

fn stats(v: &Value) -> Option<(f64, f64)> {
    let o = v.as_object()?;
    (o.contains_key("runs")).then_some(())?;
    Some((o.get("median_ms")?.as_f64()?, o.get("cv").and_then(Value::as_f64).unwrap_or(0.0)))
}

fn walk(v: &Value, path: String, out: &mut Vec<Reading>) {
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    if let Some((ms, cv)) = stats(v) {
        out.push(Reading { name: path, ms, cv, bound_ms: None, depends_on: Vec::new(), calibrated: Vec::new() });
        return;
    }
    if let (Some((ms, cv)), Some(bound)) = (stats(&v["measured"]), v["bound"]["ms"].as_f64()) {
        let name = join("measured");
        out.push(Reading { name, ms, cv, bound_ms: Some(bound), depends_on: Vec::new(), calibrated: Vec::new() });
        return;
    }
    match v {
        Value::Object(x) => x.iter().for_each(|(k, v)| walk(v, join(k), out)),
        Value::Array(x) => {
            for (i, v) in x.iter().enumerate() {
                // Name an element by its name where it has one (a run, a layout), else by its index.
                let label = v
                    .get("name")
                    .or_else(|| v.get("layout"))
                    .and_then(Value::as_str)
                    .map_or(i.to_string(), String::from);
                walk(v, format!("{path}[{label}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stats(median: f64, cv: f64) -> Value {
        json!({ "median_ms": median, "min_ms": median, "max_ms": median, "runs": 10, "cv": cv })
    }

    fn figure(name: &str, median: f64, cv: f64) -> Value {
        json!({ "name": name, "stats": stats(median, cv) })
    }

    fn doc(result: Value, figures: Vec<Value>) -> Value {
        json!({ "schema_version": 1, "machine": {}, "result": result, "figures": figures })
    }

    /// pinned_memory's 64 figures: four kinds, both ways, 4 KiB to 64 MiB, with an H200's times and
    /// spreads (a pinned copy 5.9 µs + n / 55 GB/s; pageable slower and noisier).
    fn pinned_sweep(wobble: impl Fn(usize, f64, f64) -> f64) -> Value {
        let mut figures = Vec::new();
        let mut i = 0;
        for p in 0..8 {
            let bytes = 4096.0 * 4f64.powi(p);
            for (kind, alpha_us, gbps, cv) in [
                ("pageable", 9.0, 10.0, 0.04),
                ("pinned", 5.9, 55.0, 0.02),
                ("write-combined", 6.0, 54.0, 0.02),
                ("pinned in place", 6.1, 54.5, 0.02),
            ] {
                for dir in ["H2D", "D2H"] {
                    let ms = alpha_us * 1e-3 + bytes / (gbps * 1e9) * 1e3;
                    let cv = if ms < 0.05 { 2.0 * cv } else { cv / 4.0 };
                    let size = if bytes < 1048576.0 {
                        format!("{} KiB", bytes / 1024.0)
                    } else {
                        format!("{} MiB", bytes / 1048576.0)
                    };
                    figures.push(figure(&format!("{kind} {dir} {size}"), ms * wobble(i, ms, cv), cv));
                    i += 1;
                }
            }
        }
        doc(json!({ "sizes": [4096] }), figures)
    }

    /// A deterministic number in [-1, 1] for figure `i`.
    fn jiggle(i: usize) -> f64 {
        ((i as f64 * 0.618_034).fract() * 2.0) - 1.0
    }

    #[test]
    fn two_quiet_runs_show_no_change() {
        let a = pinned_sweep(|_, _, _| 1.0);
        // B moves each figure by up to its own spread, 1% and 1 µs: a quiet second run, by the H200's.
        let b = pinned_sweep(|i, ms, cv| 1.0 + jiggle(i) * (cv + 0.01 + 0.001 / ms));
        let c = compare(&a, &b);
        assert!(c.named);
        assert_eq!(c.changes.len(), 64);
        let text = report(&c, 0, false);
        assert!(text.ends_with("no figure changed beyond its noise (64 compared)\n"), "{text}");
        assert!(!text.contains("verdict"), "a quiet run lists nothing: {text}");
        // The rule before this model (3x the two runs' spreads, at least 1%) flagged such runs.
        let old = c.changes.iter().filter(|c| c.change.abs() > (3.0 * c.spread.0.hypot(c.spread.1)).max(0.01)).count();
        assert!(old >= 5, "{old}");
    }

    #[test]
    fn a_ten_percent_slowdown_of_a_ten_ms_figure_is_found() {
        let a = doc(json!({}), vec![figure("4 streams", 10.0, 0.005), figure("one stream", 25.0, 0.004)]);
        let b = doc(json!({}), vec![figure("4 streams", 11.0, 0.006), figure("one stream", 25.2, 0.004)]);
        let c = compare(&a, &b);
        let slow = &c.changes[0];
        assert!(slow.beyond_noise(), "{slow:?}");
        assert!(slow.verdict().starts_with("slower by 10.0%, "), "{}", slow.verdict());
        assert!(slow.verdict().ends_with("x its noise: likely"), "10% against about 2.2% of noise: {}", slow.verdict());
        assert!(!c.changes[1].beyond_noise(), "0.8% is not: {:?}", c.changes[1]);
        let text = report(&c, 0, false);
        assert!(
            text.contains("4 streams      10.000 ms      11.000 ms   +10.0%  ± 2.3%  slower by 10.0%, 4.4x"),
            "{text}"
        );
        assert!(text.ends_with("1 of 2 figures changed beyond their noise: 1 slower, 0 faster\n"), "{text}");
        let text = report(&c, 0, true);
        assert!(text.contains("within noise (0.4x)"), "--all lists the rest: {text}");
    }

    #[test]
    fn a_fifteen_percent_wobble_of_a_seven_microsecond_figure_is_not_flagged() {
        let a = doc(json!({}), vec![figure("pinned H2D 4 KiB", 0.0070, 0.03)]);
        let b = doc(json!({}), vec![figure("pinned H2D 4 KiB", 0.00805, 0.03)]);
        let c = compare(&a, &b).changes.remove(0);
        assert!(!c.beyond_noise(), "{c:?}");
        // The same 15% of a 10 ms figure is a change, and so is a 7 µs copy that takes three times as long.
        let long = Change::new("x".into(), Measure::Time, &reading(10.0, 0.01), &reading(11.5, 0.01)).unwrap();
        assert!(long.beyond_noise() && long.verdict().ends_with("very likely"), "{}", long.verdict());
        let slow = Change::new("x".into(), Measure::Time, &reading(0.007, 0.03), &reading(0.021, 0.03)).unwrap();
        assert!(slow.beyond_noise(), "{slow:?}");
        // Short work that settled on its other time, 18 or 28 µs, in either run: noise.
        for (a, b) in [(0.018, 0.028), (0.028, 0.018)] {
            let c = Change::new("x".into(), Measure::Time, &reading(a, 0.0), &reading(b, 0.0)).unwrap();
            assert!(!c.beyond_noise(), "{c:?}");
        }
    }

    fn reading(ms: f64, cv: f64) -> Reading {
        Reading { name: "x".into(), ms, cv, bound_ms: None, depends_on: vec![], calibrated: vec![] }
    }

    #[test]
    fn figures_are_matched_by_name() {
        let a = doc(json!({}), vec![figure("pinned H2D 4 KiB", 0.007, 0.02), figure("pinned H2D 64 MiB", 1.22, 0.001)]);
        let b = doc(
            json!({}),
            vec![
                figure("pinned H2D 64 MiB", 1.5, 0.001),
                figure("pinned H2D 1 GiB", 19.6, 0.001),
                figure("pinned H2D 4 KiB", 0.007, 0.02),
            ],
        );
        let c = compare(&a, &b);
        assert_eq!(c.changes.len(), 2);
        assert_eq!((c.changes[1].name.as_str(), c.changes[1].a, c.changes[1].b), ("pinned H2D 64 MiB", 1.22, 1.5));
        assert_eq!((c.only_in_a.len(), c.only_in_b.clone()), (0, vec!["pinned H2D 1 GiB".to_string()]));
        let text = report(&c, 0, false);
        assert!(text.contains("note: 1 figures only in B: pinned H2D 1 GiB"), "{text}");
        assert!(text.contains("pinned H2D 64 MiB  ") && text.contains("slower by 23.0%"), "{text}");
    }

    #[test]
    fn files_without_names_are_compared_by_place() {
        let run = |name: &str, ms: f64| json!({ "name": name, "judged": { "measured": stats(ms, 0.002) } });
        let a = json!({ "report": { "runs": [run("one stream", 16.0), run("4 streams", 6.0)] }, "other": 3 });
        let b = json!({ "report": { "runs": [run("one stream", 16.1), run("4 streams", 6.6)] } });
        let c = compare(&json!({ "schema_version": 1, "result": a }), &json!({ "schema_version": 1, "result": b }));
        assert!(!c.named);
        assert_eq!(c.changes.len(), 2);
        assert_eq!(c.changes[0].name, "report.runs[one stream].judged.measured");
        assert!(!c.changes[0].beyond_noise() && c.changes[1].beyond_noise(), "{:?}", c.changes);
        let copies = |ms: f64| json!({ "copies": [[{ "h2d": stats(ms, 0.001), "d2h": stats(ms, 0.001) }]] });
        let c = compare(&copies(1.0), &copies(1.2));
        assert_eq!(c.changes[0].name, "copies[0][0].d2h");
        assert!(report(&c, 0, false).contains("matched by their places"));
        // One file with names and one without: both by place.
        let named = doc(copies(1.0), vec![figure("pinned H2D 4 KiB", 1.0, 0.0)]);
        assert!(!compare(&named, &json!({ "result": copies(1.0) })).named);
    }

    /// An overlap run's figures as `measure::report::Output::pipeline` names them.
    fn overlap(iters: u32, one: (f64, f64), four: (f64, f64), upload: f64, kernel: f64) -> Value {
        let run = |name: &str, (ms, bound): (f64, f64)| json!({ "name": name, "stats": stats(ms, 0.004), "bound_ms": bound, "depends_on": ["plan", "work"], "calibrated": ["work"] });
        let part = |name: &str, ms: f64, work: bool| {
            let mut f = json!({ "name": name, "stats": { "median_ms": ms, "min_ms": ms, "max_ms": ms, "runs": 1, "cv": 0.0 }, "best": true, "depends_on": ["plan"] });
            if work {
                f["depends_on"] = json!(["plan", "work"]);
                f["calibrated"] = json!(["work"]);
            }
            f
        };
        doc(
            json!({ "plan": { "chunks": 32, "streams": 4 }, "work": { "Process": iters }, "repeats": { "warmup": 2, "repeats": 10 } }),
            vec![
                run("one stream", one),
                run("4 streams", four),
                part("one chunk's upload, best", upload, false),
                part("one chunk's kernel, best", kernel, true),
                part("bound part: copies both ways", 5.6, false),
            ],
        )
    }

    #[test]
    fn overlap_runs_with_different_calibrations_are_compared_on_what_does_not_depend_on_it() {
        let a = overlap(1198, (15.7, 15.68), (5.96, 5.65), 0.153, 0.150);
        let b = overlap(1172, (15.4, 15.38), (5.90, 5.58), 0.154, 0.147);
        let c = compare(&a, &b);
        assert_eq!(c.calibrated, ["work"]);
        let how: Vec<(&str, Measure)> = c.changes.iter().map(|c| (c.name.as_str(), c.measure)).collect();
        assert_eq!(
            how,
            [
                ("one stream", Measure::OverBound),
                ("4 streams", Measure::OverBound),
                ("one chunk's upload, best", Measure::Time),
                ("bound part: copies both ways", Measure::Time),
            ]
        );
        assert_eq!(c.left_out.len(), 1, "the kernel's own time measures different work: {:?}", c.left_out);
        assert!(c.changes.iter().all(|c| !c.beyond_noise()), "{:?}", c.changes);
        let text = report(&c, 0, false);
        assert!(text.contains("work is {\"Process\":1198} in A and {\"Process\":1172} in B"), "{text}");
        assert!(text.contains("work was calibrated anew in each run"), "{text}");
        assert!(text.contains("2 pipeline runs are\n      compared by their time over their own bound"), "{text}");
        assert!(text.ends_with("no figure changed beyond its noise (4 compared; 1 left out)\n"), "{text}");
        // A run that came 10% further from its bound is found, whatever its kernel.
        let slow = overlap(1172, (15.4, 15.38), (6.50, 5.58), 0.154, 0.147);
        let c = compare(&a, &slow);
        assert!(c.changes[1].beyond_noise(), "{:?}", c.changes[1]);
        assert!(c.changes[1].verdict().starts_with("further from its bound by 10.4%"), "{}", c.changes[1].verdict());
        // The same --iters in both: times are compared.
        let c = compare(&a, &overlap(1198, (15.8, 15.7), (5.97, 5.66), 0.153, 0.150));
        assert!(c.changes.iter().all(|c| c.measure == Measure::Time) && c.changes.len() == 5);
        // A different plan is different work, for every figure.
        let mut other = overlap(1198, (15.7, 15.68), (5.96, 5.65), 0.153, 0.150);
        other["result"]["plan"]["chunks"] = json!(16);
        let c = compare(&a, &other);
        assert!(c.changes.is_empty() && c.left_out.len() == 5, "{:?}", c.left_out);
        assert!(c.left_out[0].1.contains("different work (plan"), "{:?}", c.left_out);
    }

    #[test]
    fn old_overlap_files_with_different_calibrations_compare_their_runs_over_their_bounds() {
        let result = |iters: u32, ms: f64, bound: f64| {
            json!({ "work": { "Process": iters }, "report": { "runs": [
                { "name": "4 streams", "judged": { "measured": stats(ms, 0.004), "bound": { "ms": bound }, "efficiency": bound / ms } },
            ], "copies": { "h2d": stats(0.15, 0.01) } } })
        };
        let c = compare(&json!({ "result": result(1198, 5.96, 5.65) }), &json!({ "result": result(1172, 5.90, 5.58) }));
        assert_eq!(c.changes.len(), 1);
        assert_eq!(
            (c.changes[0].name.as_str(), c.changes[0].measure),
            ("report.runs[4 streams].judged.measured", Measure::OverBound)
        );
        assert_eq!(c.left_out.len(), 1, "a figure of the work itself: {:?}", c.left_out);
    }

    #[test]
    fn baseline_runs_measure_the_drift() {
        let a = doc(json!({}), vec![figure("x", 10.0, 0.001), figure("y", 5.0, 0.001), figure("tiny", 0.007, 0.01)]);
        let b = doc(json!({}), vec![figure("x", 11.0, 0.001), figure("y", 5.5, 0.001), figure("tiny", 0.0091, 0.01)]);
        let a2 = doc(json!({}), vec![figure("x", 11.5, 0.001), figure("y", 5.0, 0.001), figure("tiny", 0.00701, 0.01)]);
        let a3 = doc(json!({}), vec![figure("x", 8.5, 0.001), figure("y", 5.01, 0.001), figure("tiny", 0.00699, 0.01)]);
        let mut c = compare(&a, &b);
        assert!(c.changes[0].beyond_noise() && c.changes[1].beyond_noise(), "10% of long figures counts");
        assert!(!c.changes[2].beyond_noise(), "a 30% change of a 7 µs figure is within its assumed drift");
        widen(&mut c.changes, &[compare(&a, &a2), compare(&a, &a3)]);
        assert!(!c.changes[0].beyond_noise(), "x's baseline runs spread 8.5 to 11.5: {:?}", c.changes[0]);
        assert!(c.changes[1].beyond_noise(), "y's agree to 0.2%: {:?}", c.changes[1]);
        assert!(c.changes[2].beyond_noise(), "tiny's baseline runs agree to 0.2%, so 30% counts: {:?}", c.changes[2]);
        assert!(report(&c, 2, false).contains("its spread over 3 runs made as A was"));
        // One baseline run can only widen the noise.
        let mut c = compare(&a, &b);
        widen(&mut c.changes, &[compare(&a, &a2)]);
        assert!(!c.changes[2].beyond_noise(), "{:?}", c.changes[2]);
    }

    #[test]
    fn runs_that_did_different_work_are_named() {
        let a = json!({ "work": { "Process": 1200 }, "plan": { "chunks": 32 }, "sizes": [1, 2] });
        let b = json!({ "work": { "Process": 1310 }, "plan": { "chunks": 32 }, "sizes": [1] });
        let keys = SETTINGS.iter().map(|s| s.to_string()).collect();
        let d = differing_settings(&a, &b, &keys);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].0, "sizes");
        assert_eq!(d[1], ("work".into(), "{\"Process\":1200}".into(), "{\"Process\":1310}".into()));
    }

    #[test]
    fn a_noisy_figure_needs_a_larger_change() {
        let a = doc(json!({}), vec![figure("x", 10.0, 0.05)]);
        let b = doc(json!({}), vec![figure("x", 11.0, 0.05)]);
        let c = &compare(&a, &b).changes[0];
        assert!(!c.beyond_noise(), "10% against 3 x 10%: {c:?}");
        assert!((c.noise - (4.0f64 * 0.05 * 0.05).sqrt()).abs() < 1e-9, "{c:?}");
    }
}
