//! `cargo xtask compare A.json B.json`: which timed figures of two runs of a lesson (`--json`) changed
//! beyond the runs' own noise, and by how much. Keep a baseline; compare after a driver update or a
//! BIOS change.
//!
//! Every timed figure in a lesson's JSON is a `Stats` object (`median_ms`, `runs`, `cv`). A change of the
//! median counts when it exceeds three times the two runs' combined coefficient of variation, and at
//! least 1% (a figure of one run has no spread of its own). A run's own spread misses what changes from
//! one run to the next (a process's memory placement, the host's state): with `--baseline` runs made as A
//! was, the noise is also at least three times the spread of A's figure over them.

use std::path::Path;

use anyhow::{bail, Context as _};
use serde_json::Value;

use crate::flags::CompareFlags;

/// One timed figure in both runs.
#[derive(Debug, PartialEq)]
pub struct Change {
    pub path: String,
    pub a_ms: f64,
    pub b_ms: f64,
    /// (b - a) / a
    pub change: f64,
    /// The change that counts: 3 x sqrt(cv_a^2 + cv_b^2), at least 1%.
    pub noise: f64,
}

impl Change {
    pub fn beyond_noise(&self) -> bool {
        self.change.abs() > self.noise
    }
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
    for (key, x, y) in differing_settings(&a["result"], &b["result"]) {
        println!("note: the runs were set up differently: {key} is {x} in A and {y} in B, so their figures measure different work");
        if key.ends_with("work") {
            println!(
                "      (the kernel was calibrated anew in each run: pass the same --iters to both to compare them)"
            );
        }
    }
    let mut changes = compare(&a["result"], &b["result"]);
    let extra: Vec<Vec<Change>> = flags
        .baseline
        .iter()
        .map(|p| read(p).map(|e| compare(&a["result"], &e["result"])))
        .collect::<anyhow::Result<_>>()?;
    if extra.is_empty() {
        println!("note: one baseline run: its noise is each run's own spread, which misses run-to-run variation; add --baseline with more runs made as A was");
    } else {
        widen(&mut changes, &extra);
        println!(
            "noise: each figure's own spread, or three times its spread over {} baseline runs, whichever is larger",
            extra.len() + 1
        );
    }
    if changes.is_empty() {
        bail!("no timed figures in common: are these two runs of the same lesson (with --json)?");
    }
    println!("{:<64} {:>11} {:>11} {:>8} {:>8}", "figure (median)", "A ms", "B ms", "change", "noise");
    for c in changes.iter().filter(|c| flags.all || c.beyond_noise()) {
        println!(
            "{:<64} {:>11.4} {:>11.4} {:>+7.1}% {:>7.1}%{}",
            c.path,
            c.a_ms,
            c.b_ms,
            100.0 * c.change,
            100.0 * c.noise,
            if c.beyond_noise() { "" } else { "  (within noise)" }
        );
    }
    let beyond: Vec<&Change> = changes.iter().filter(|c| c.beyond_noise()).collect();
    let slower = beyond.iter().filter(|c| c.change > 0.0).count();
    println!(
        "{} of {} timed figures changed beyond their noise: {slower} slower, {} faster",
        beyond.len(),
        changes.len(),
        beyond.len() - slower
    );
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a lesson's JSON output", path.display()))
}

/// Every `Stats` object found at the same place in both trees.
pub fn compare(a: &Value, b: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    walk(a, b, String::new(), &mut out);
    out
}

/// Widens each change's noise to three times the coefficient of variation of A's figure over the
/// baseline runs (`extra[i]` compares A with the i-th further baseline run).
pub fn widen(changes: &mut [Change], extra: &[Vec<Change>]) {
    for c in changes.iter_mut() {
        let mut medians = vec![c.a_ms];
        medians.extend(extra.iter().filter_map(|e| e.iter().find(|x| x.path == c.path)).map(|x| x.b_ms));
        if medians.len() < 2 {
            continue;
        }
        let mean = medians.iter().sum::<f64>() / medians.len() as f64;
        let var = medians.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (medians.len() - 1) as f64;
        c.noise = c.noise.max(3.0 * var.sqrt() / mean);
    }
}

/// The settings that decide what a run measures (its plan, its work, its sizes), where the two differ.
pub fn differing_settings(a: &Value, b: &Value) -> Vec<(String, String, String)> {
    const SETTINGS: [&str; 6] = ["plan", "work", "sizes", "bytes", "repeats", "size"];
    let (Some(x), Some(y)) = (a.as_object(), b.as_object()) else { return Vec::new() };
    SETTINGS
        .iter()
        .filter_map(|k| Some((k, x.get(*k)?, y.get(*k)?)))
        .filter(|(_, p, q)| p != q)
        .map(|(k, p, q)| (k.to_string(), p.to_string(), q.to_string()))
        .collect()
}

fn stats(v: &Value) -> Option<(f64, f64)> {
    let o = v.as_object()?;
    (o.contains_key("runs")).then_some(())?;
    Some((o.get("median_ms")?.as_f64()?, o.get("cv").and_then(Value::as_f64).unwrap_or(0.0)))
}

fn walk(a: &Value, b: &Value, path: String, out: &mut Vec<Change>) {
    if let (Some((a_ms, a_cv)), Some((b_ms, b_cv))) = (stats(a), stats(b)) {
        if a_ms > 0.0 {
            let noise = (3.0 * (a_cv * a_cv + b_cv * b_cv).sqrt()).max(0.01);
            out.push(Change { path, a_ms, b_ms, change: (b_ms - a_ms) / a_ms, noise });
        }
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                if let Some(vb) = y.get(k) {
                    walk(va, vb, if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, out);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                // Name an element by its name where it has one (a run, a layout), else by its index.
                let label = va
                    .get("name")
                    .or_else(|| va.get("layout"))
                    .and_then(Value::as_str)
                    .map_or(i.to_string(), String::from);
                walk(va, vb, format!("{path}[{label}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(median: f64, cv: f64) -> Value {
        serde_json::json!({ "median_ms": median, "min_ms": median, "max_ms": median, "runs": 10, "cv": cv })
    }

    #[test]
    fn changes_beyond_the_runs_noise_are_told_apart_from_those_within() {
        let a = serde_json::json!({ "report": { "runs": [
            { "name": "one stream", "judged": { "measured": stats(16.0, 0.002) } },
            { "name": "4 streams", "judged": { "measured": stats(6.0, 0.01) } },
        ] }, "other": 3 });
        let b = serde_json::json!({ "report": { "runs": [
            { "name": "one stream", "judged": { "measured": stats(16.1, 0.002) } },
            { "name": "4 streams", "judged": { "measured": stats(6.6, 0.01) } },
        ] } });
        let c = compare(&a, &b);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].path, "report.runs[one stream].judged.measured");
        assert!(!c[0].beyond_noise(), "0.6% against a 1% floor: {:?}", c[0]);
        assert!(c[1].beyond_noise() && (c[1].change - 0.1).abs() < 1e-9, "{:?}", c[1]);
        assert!((c[1].noise - 3.0 * 0.02f64.sqrt() * 0.1).abs() < 1e-9, "{:?}", c[1]);
    }

    #[test]
    fn baseline_runs_widen_the_noise_to_their_own_spread() {
        let a = serde_json::json!({ "x": stats(10.0, 0.001), "y": stats(5.0, 0.001) });
        let b = serde_json::json!({ "x": stats(11.0, 0.001), "y": stats(6.0, 0.001) });
        let a2 = serde_json::json!({ "x": stats(11.5, 0.001), "y": stats(5.0, 0.001) });
        let a3 = serde_json::json!({ "x": stats(8.5, 0.001), "y": stats(5.01, 0.001) });
        let mut c = compare(&a, &b);
        assert!(c.iter().all(Change::beyond_noise), "with one baseline run both changes count");
        widen(&mut c, &[compare(&a, &a2), compare(&a, &a3)]);
        assert!(!c[0].beyond_noise(), "x moves 10 to 11, but its baseline runs spread 8.5 to 11.5: {:?}", c[0]);
        assert!(c[1].beyond_noise(), "y's baseline runs agree to 0.2%, so 5 to 6 counts: {:?}", c[1]);
        assert!((c[0].noise - 3.0 * 1.5 / 10.0).abs() < 1e-9, "{:?}", c[0]);
    }

    #[test]
    fn runs_that_did_different_work_are_named() {
        let a = serde_json::json!({ "work": { "Process": 1200 }, "plan": { "chunks": 32 }, "sizes": [1, 2] });
        let b = serde_json::json!({ "work": { "Process": 1310 }, "plan": { "chunks": 32 }, "sizes": [1] });
        let d = differing_settings(&a, &b);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0], ("work".into(), "{\"Process\":1200}".into(), "{\"Process\":1310}".into()));
        assert_eq!(d[1].0, "sizes");
    }

    #[test]
    fn a_noisy_figure_needs_a_larger_change() {
        let c = compare(&stats(10.0, 0.05), &stats(11.0, 0.05));
        assert!(!c[0].beyond_noise(), "10% against 3 x 7.1%: {:?}", c[0]);
    }
}
