//! Reads criterion's results and the limits the benchmark measured in the same run
//! (`gpu-limits.json`), prints our best figures beside them, and draws the copies as users of this field
//! expect to see them: GB/s against transfer size on a log scale, a line per kind of host memory and
//! direction, the link's raw rate across (`rates.svg` beside criterion's reports). The picture is the
//! one `pinned_memory --svg` draws, by the same code (the `chart` crate, std only).
//!
//! A run stopped early is reported as far as it got: the benchmark writes its schedule
//! (`gpu-bench-plan.json`) and its limits before any benchmark, so the report says which scheduled
//! benchmarks it lacks, and leaves out results of earlier runs still in the folder.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _};
use serde_json::Value;

use crate::{flags::BenchReportFlags, tools};

/// Efficiency past which a pipeline beat its bound: `measure::bound::BEATEN_ABOVE`, which xtask does not
/// link (it builds without the GPU crates); a test holds the two equal.
const BEATEN_ABOVE: f64 = 1.02;

/// One benchmark's result: where it is, its median time, its bytes, and when it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchResult {
    pub group: String,
    pub function: String,
    pub value: String,
    pub median_ns: f64,
    pub bytes: u64,
    /// When criterion wrote it, Unix seconds (0 where unknown).
    pub unix: u64,
}

impl BenchResult {
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.median_ns
    }

    /// Its name as criterion and the schedule give it: `htod/pinned/4 KiB`, `buffering/single`.
    pub fn id(&self) -> String {
        [self.group.as_str(), &self.function, &self.value]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// The benchmarks a run scheduled (`gpu-bench-plan.json`), and when it started.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub started_unix: u64,
    pub benchmarks: Vec<String>,
    pub full: bool,
}

impl Schedule {
    pub fn parse(v: &Value) -> Option<Schedule> {
        Some(Schedule {
            started_unix: v["started_unix"].as_u64()?,
            benchmarks: v["benchmarks"].as_array()?.iter().filter_map(|b| b.as_str().map(String::from)).collect(),
            full: v["full"].as_bool().unwrap_or(false),
        })
    }
}

pub fn run(flags: BenchReportFlags) -> anyhow::Result<()> {
    let dir = flags.dir.unwrap_or_else(|| {
        if tools::in_bundle() {
            PathBuf::from("target/criterion")
        } else {
            tools::target_dir().join("criterion")
        }
    });
    let read_json = |name: &str| -> anyhow::Result<Option<Value>> {
        let path = dir.join(name);
        match fs::read_to_string(&path) {
            Ok(text) => {
                Ok(Some(serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?))
            }
            Err(_) => Ok(None),
        }
    };
    let schedule = read_json("gpu-bench-plan.json")?.as_ref().and_then(Schedule::parse);
    let limits = read_json("gpu-limits.json")?;
    let results = read_results(&dir)?;
    if results.is_empty() && limits.is_none() {
        if tools::real_libcuda().is_none() {
            bail!(
                "no benchmark results in {}: the benchmarks measure a GPU, and this machine has no NVIDIA driver. \
                 Run `cargo bench` on a machine with an NVIDIA GPU (or `./benches/transfers --bench` from \
                 `cargo xtask bundle`), then this report there",
                dir.display()
            );
        }
        bail!("no benchmark results in {}: run `cargo bench` first", dir.display());
    }
    print!("{}", report(&results, limits.as_ref(), schedule.as_ref()));
    let (current, _) = this_run(&results, schedule.as_ref());
    let series = rate_series(&current);
    if !series.is_empty() {
        let none = Value::Null;
        let limits = limits.as_ref().unwrap_or(&none);
        let name = limits["device"]["name"].as_str().unwrap_or("the GPU");
        let svg = chart::rate_chart(&format!("Copy rates on {name}, criterion's medians"), &series, &ceilings(limits));
        let path = dir.join("rates.svg");
        fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        println!("\npicture of the copy rates: {}", path.display());
    }
    Ok(())
}

/// The results of the run `schedule` started (written since it started), and how many are older; all of
/// them where there is no schedule (a run before schedules were written).
pub fn this_run(results: &[BenchResult], schedule: Option<&Schedule>) -> (Vec<BenchResult>, usize) {
    let Some(schedule) = schedule else { return (results.to_vec(), 0) };
    // A result written in the second the schedule was, or after (file times and the clock may differ by a
    // second).
    let (current, earlier): (Vec<BenchResult>, Vec<BenchResult>) =
        results.iter().cloned().partition(|r| r.unix == 0 || r.unix + 1 >= schedule.started_unix);
    (current, earlier.len())
}

/// The lines of the picture: each kind of host memory in the `htod` and `dtoh` groups, GB/s at each size.
pub fn rate_series(results: &[BenchResult]) -> Vec<chart::Series> {
    let mut kinds: Vec<&str> = results.iter().filter(|r| r.bytes > 0).map(|r| r.function.as_str()).collect();
    kinds
        .sort_by_key(|k| (["pageable", "pinned", "write-combined", "pinned in place"].iter().position(|x| x == k), *k));
    kinds.dedup();
    let mut out = Vec::new();
    for kind in kinds {
        for (group, dir) in [("htod", "H2D"), ("dtoh", "D2H")] {
            let mut points: Vec<(f64, f64)> = results
                .iter()
                .filter(|r| r.group == group && r.function == kind && r.bytes > 0)
                .map(|r| (r.bytes as f64, r.gbps()))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !points.is_empty() {
                out.push(chart::Series { label: format!("{kind} {dir}"), points });
            }
        }
    }
    out
}

/// The rate drawn across: the link's raw rate the benchmark read (`link_gbps`), or, where it could not,
/// the best pinned copy it measured.
pub fn ceilings(limits: &Value) -> Vec<chart::Ceiling> {
    let (label, gbps) = match limits["link_gbps"].as_f64() {
        Some(l) => ("PCIe link, raw rate per direction", Some(l)),
        None => {
            ("best pinned copy measured (the link's rate was not read)", limits["copy_engine_gbps"]["htod"].as_f64())
        }
    };
    gbps.map(|gbps| chart::Ceiling { label: label.into(), gbps }).into_iter().collect()
}

/// Every `*/new/benchmark.json` with its `estimates.json` under `dir`.
pub fn read_results(dir: &Path) -> anyhow::Result<Vec<BenchResult>> {
    let mut out: Vec<BenchResult> = walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.path().ends_with("new/benchmark.json"))
        .filter_map(|e| read_one(e.path()))
        .collect();
    out.sort_by(|a, b| (&a.group, &a.function, &a.value).cmp(&(&b.group, &b.function, &b.value)));
    Ok(out)
}

fn read_one(benchmark: &Path) -> Option<BenchResult> {
    let b: Value = serde_json::from_str(&fs::read_to_string(benchmark).ok()?).ok()?;
    let estimates = benchmark.with_file_name("estimates.json");
    let e: Value = serde_json::from_str(&fs::read_to_string(&estimates).ok()?).ok()?;
    let bytes = b["throughput"]["Bytes"].as_u64().or_else(|| b["throughput"]["BytesDecimal"].as_u64()).unwrap_or(0);
    let unix = fs::metadata(&estimates)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    Some(BenchResult {
        group: b["group_id"].as_str()?.to_string(),
        function: b["function_id"].as_str().unwrap_or("").to_string(),
        value: b["value_str"].as_str().unwrap_or("").to_string(),
        median_ns: e["median"]["point_estimate"].as_f64()?,
        bytes,
        unix,
    })
}

/// What a run stopped early has and lacks: its limits, and the scheduled benchmarks it did not measure,
/// by group; lines for the report's top.
pub fn missing(
    results: &[BenchResult],
    limits: Option<&Value>,
    schedule: Option<&Schedule>,
    earlier: usize,
) -> Vec<String> {
    let mut lines = Vec::new();
    match limits {
        None => lines.push(
            "no gpu-limits.json: no limits to hold the figures against (a run that stopped before measuring them, \
             or one made before they came first)"
                .to_string(),
        ),
        Some(l) => {
            let bounds = &l["pipeline"]["bound_ms"];
            let chunks: Vec<u64> =
                l["pipeline"]["chunks"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
            let lacking = chunks
                .iter()
                .filter(|c| {
                    let prefix = format!("overlap/{c} chunks/");
                    bounds.as_object().is_none_or(|b| !b.keys().any(|k| k.starts_with(&prefix)))
                })
                .count();
            if lacking > 0 {
                lines.push(format!(
                    "the pipelines' bounds are missing for {lacking} of {} chunk counts: the run stopped while \
                     measuring them",
                    chunks.len()
                ));
            }
        }
    }
    if earlier > 0 {
        lines.push(format!("{earlier} results of earlier runs in the folder left out"));
    }
    let Some(schedule) = schedule else { return lines };
    let have: Vec<String> = results.iter().map(BenchResult::id).collect();
    let lacking: Vec<&String> = schedule.benchmarks.iter().filter(|b| !have.contains(b)).collect();
    if lacking.is_empty() {
        return lines;
    }
    let mut by_group: BTreeMap<&str, usize> = BTreeMap::new();
    for b in &lacking {
        *by_group.entry(b.split('/').next().unwrap_or("")).or_default() += 1;
    }
    let groups: Vec<String> = by_group.iter().map(|(g, n)| format!("{g} ({n})")).collect();
    lines.push(format!(
        "measured {} of {} scheduled benchmarks; not measured: {} (the run stopped before them, or a filter left \
         them out); the first: {}",
        schedule.benchmarks.len() - lacking.len(),
        schedule.benchmarks.len(),
        groups.join(", "),
        lacking[0]
    ));
    lines
}

/// The report: what is missing, then per copy group and host-memory kind, the best rate against the
/// copy-engine limit; the device-memory copy against its peak; the pipeline's times against their
/// bounds. Results older than `schedule`'s run are left out.
pub fn report(results: &[BenchResult], limits: Option<&Value>, schedule: Option<&Schedule>) -> String {
    let (results, earlier) = this_run(results, schedule);
    let results = &results[..];
    let none = Value::Null;
    let limits_or_none = limits.unwrap_or(&none);
    let mut s = String::new();
    for line in missing(results, limits, schedule, earlier) {
        s += &format!("note: {line}\n");
    }
    if results.is_empty() {
        s += "no benchmark results from this run yet: the limits it measured follow\n";
    }
    let lim = |path: &[&str]| path.iter().fold(limits_or_none, |v, k| &v[*k]).as_f64();
    let name = limits_or_none["device"]["name"].as_str().unwrap_or("the GPU");
    s += &format!(
        "\nBest figures of this run on {name}, against references measured first in the same run: the best of \
         large pinned copies (a reference, not a bound: a benchmark may beat it)\n\n"
    );
    s += &format!(
        "{:<8} {:<16} {:>10} {:>10} {:>14} {:>8}\n",
        "group", "host memory", "best GB/s", "at", "reference GB/s", "of it"
    );
    for (group, limit) in [
        ("htod", lim(&["copy_engine_gbps", "htod"])),
        ("dtoh", lim(&["copy_engine_gbps", "dtoh"])),
        ("both", lim(&["copy_engine_gbps", "both_total"])),
    ] {
        let mut best: BTreeMap<&str, &BenchResult> = BTreeMap::new();
        for r in results.iter().filter(|r| r.group == group && r.bytes > 0) {
            let e = best.entry(&r.function).or_insert(r);
            if r.gbps() > e.gbps() {
                *e = r;
            }
        }
        if best.is_empty() {
            if let Some(l) = limit {
                s += &format!("{group:<8} {:<16} {:>10} {:>10} {l:>14.2} {:>8}\n", "not measured", "-", "-", "-");
            }
        }
        for (kind, r) in best {
            let (l, pct) = match limit {
                Some(l) => (format!("{l:.2}"), format!("{:.1}%", 100.0 * r.gbps() / l)),
                None => ("-".into(), "-".into()),
            };
            s += &format!("{group:<8} {kind:<16} {:>10.2} {:>10} {l:>14} {pct:>8}\n", r.gbps(), r.value);
        }
    }
    if let (Some(m), Some(p)) =
        (lim(&["device_memory_gbps", "measured_copy"]), lim(&["device_memory_gbps", "peak_from_clocks"]))
    {
        s += &format!(
            "\ndevice memory (device-to-device copy, read + write): {m:.0} GB/s of a {p:.0} GB/s peak ({:.0}%)\n",
            100.0 * m / p
        );
    }
    let mut overlap: Vec<&BenchResult> = results.iter().filter(|r| r.group == "overlap").collect();
    let count = |s: &str| s.split_whitespace().next().and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
    overlap.sort_by_key(|r| (count(&r.function), count(&r.value)));
    if !overlap.is_empty() {
        s += &format!(
            "\nThe pipelines against the lessons' lower bound, measured first from each run's parts (the best of a \
             few runs each): criterion's median may come under it by timing noise, an efficiency a little above 1; \
             past {BEATEN_ABOVE} the pipeline beat its bound: the machine's copy rates moved between the parts and \
             the benchmark, and the bound does not hold for it\n"
        );
        s += &format!(
            "{:<26} {:>10} {:>10} {:>15}  {}\n",
            "overlap pipeline", "median ms", "bound ms", "efficiency", "limited by"
        );
        for r in overlap {
            let key = format!("overlap/{}/{}", r.function, r.value);
            let bound = limits_or_none["pipeline"]["bound_ms"][&key].as_f64();
            let limited = limits_or_none["pipeline"]["limited_by"][&key].as_str().unwrap_or("-");
            let ms = r.median_ns / 1e6;
            let (b, eff) = match bound {
                Some(b) if b / ms > BEATEN_ABOVE => (format!("{b:.3}"), format!("{:.3}: beaten", b / ms)),
                Some(b) => (format!("{b:.3}"), format!("{:.3}", b / ms)),
                None => ("-".into(), "-".into()),
            };
            s += &format!(
                "{:<26} {:>10.3} {:>10} {:>15}  {limited}\n",
                format!("{} on {}", r.function, r.value),
                ms,
                b,
                eff
            );
        }
    }
    for group in ["buffering", "zero_copy"] {
        let mut rs: Vec<&BenchResult> = results.iter().filter(|r| r.group == group).collect();
        rs.sort_by_key(|r| (r.function.clone(), r.bytes));
        if !rs.is_empty() {
            s += &format!("\n{group}\n");
            for r in rs {
                s += &format!(
                    "  {:<22} {:>10} {:>10.3} ms {:>8.2} GB/s\n",
                    r.function,
                    r.value,
                    r.median_ns / 1e6,
                    r.gbps()
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    /// The efficiency past which a pipeline beat its bound is the lessons' own.
    #[test]
    fn beaten_above_is_the_lessons_own() {
        let bound = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../measure/src/bound.rs")).unwrap();
        let theirs =
            bound.lines().find_map(|l| l.strip_prefix("pub const BEATEN_ABOVE: f64 = ")).expect("the constant");
        assert_eq!(theirs.trim_end_matches(';').parse::<f64>().unwrap(), super::BEATEN_ABOVE);
    }

    use super::*;

    fn write(dir: &Path, group: &str, function: &str, value: &str, bytes: u64, median_ns: f64) {
        let d = dir.join(group).join(function).join(value).join("new");
        fs::create_dir_all(&d).unwrap();
        let b = serde_json::json!({ "group_id": group, "function_id": function, "value_str": value, "throughput": { "Bytes": bytes } });
        fs::write(d.join("benchmark.json"), b.to_string()).unwrap();
        let e = serde_json::json!({ "median": { "point_estimate": median_ns }, "mean": { "point_estimate": median_ns * 1.01 } });
        fs::write(d.join("estimates.json"), e.to_string()).unwrap();
    }

    #[test]
    fn reads_criterion_output_and_reports_against_limits() {
        let dir = std::env::temp_dir().join(format!("bench-report-{}", std::process::id()));
        write(&dir, "htod", "pinned", "1 GiB", 1 << 30, 1_073_741_824.0 / 55.0);
        write(&dir, "htod", "pinned", "4 KiB", 4096, 6000.0);
        write(&dir, "htod", "pageable", "1 GiB", 1 << 30, 1_073_741_824.0 / 9.0);
        write(&dir, "overlap", "32 chunks", "4 streams", 1 << 29, 6.0e6);
        let results = read_results(&dir).unwrap();
        assert_eq!(results.len(), 4);
        assert!(
            (results.iter().find(|r| r.function == "pinned" && r.value == "1 GiB").unwrap().gbps() - 55.0).abs() < 1e-9
        );
        let limits = serde_json::json!({
            "device": { "name": "Test GPU" },
            "copy_engine_gbps": { "htod": 55.0, "dtoh": 55.0, "both_total": 94.0 },
            "device_memory_gbps": { "measured_copy": 4000.0, "peak_from_clocks": 4800.0 },
            "pipeline": { "bound_ms": { "overlap/32 chunks/4 streams": 5.8 }, "limited_by": { "overlap/32 chunks/4 streams": "copies both ways" } },
        });
        let text = report(&results, Some(&limits), None);
        assert!(text.contains("htod     pinned                55.00      1 GiB          55.00   100.0%"), "{text}");
        assert!(text.contains("pageable"));
        assert!(text.contains("32 chunks on 4 streams"), "{text}");
        assert!(text.contains("0.967  copies both ways"), "efficiency of 6.0 ms against a 5.8 ms bound: {text}");
        assert!(text.contains("4000 GB/s of a 4800 GB/s peak (83%)"), "{text}");
        // A pipeline 10% under its bound beat it: said so, not taken for an efficiency.
        let mut beaten = limits.clone();
        beaten["pipeline"]["bound_ms"]["overlap/32 chunks/4 streams"] = serde_json::json!(6.6);
        let text = report(&results, Some(&beaten), None);
        assert!(text.contains("1.100: beaten  copies both ways"), "{text}");
        let _ = fs::remove_dir_all(dir);
    }

    fn limits(bounds: &[&str]) -> Value {
        let mut l = serde_json::json!({
            "device": { "name": "Test GPU" },
            "copy_engine_gbps": { "htod": 55.0, "dtoh": 55.0, "both_total": 94.0 },
            "device_memory_gbps": { "measured_copy": 4000.0, "peak_from_clocks": 4800.0 },
            "pipeline": { "bound_ms": {}, "limited_by": {}, "chunks": [32, 128] },
        });
        for (i, chunks) in bounds.iter().enumerate() {
            for k in [1, 2, 4, 8] {
                let key = format!("overlap/{chunks} chunks/{k} streams");
                l["pipeline"]["bound_ms"][&key] = (6.0 + i as f64).into();
                l["pipeline"]["limited_by"][&key] = "copies both ways".into();
            }
        }
        l
    }

    fn schedule(started_unix: u64) -> Schedule {
        let benchmarks = [
            "htod/pinned/4 KiB",
            "htod/pinned/256 MiB",
            "dtoh/pinned/256 MiB",
            "overlap/32 chunks/4 streams",
            "overlap/128 chunks/4 streams",
            "buffering/single",
            "zero_copy/mapped/64 KiB",
        ];
        Schedule { started_unix, benchmarks: benchmarks.map(String::from).into(), full: false }
    }

    /// A run stopped in the middle of the pipelines: the copies and one overlap run measured, the
    /// limits written (but the second chunk count's bounds), an earlier run's result still in the folder.
    #[test]
    fn a_run_stopped_early_reports_what_it_measured_and_says_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("bench-report-partial-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        write(&dir, "htod", "pinned", "256 MiB", 256 << 20, (256 << 20) as f64 / 54.0);
        write(&dir, "htod", "pinned", "4 KiB", 4096, 6000.0);
        write(&dir, "dtoh", "pinned", "256 MiB", 256 << 20, (256 << 20) as f64 / 53.0);
        write(&dir, "overlap", "32 chunks", "4 streams", 1 << 29, 6.2e6);
        write(&dir, "zero_copy", "mapped", "1 GiB", 2 << 30, 1e8);
        // The last was written by an earlier run, an hour before this one started.
        let old = dir.join("zero_copy/mapped/1 GiB/new/estimates.json");
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        fs::File::options().write(true).open(&old).unwrap().set_modified(hour_ago).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let results = read_results(&dir).unwrap();
        assert_eq!(results.len(), 5);
        let schedule = schedule(now - 60);
        let (current, earlier) = this_run(&results, Some(&schedule));
        assert_eq!((current.len(), earlier), (4, 1));
        let text = report(&results, Some(&limits(&["32"])), Some(&schedule));
        assert!(text.contains("note: the pipelines' bounds are missing for 1 of 2 chunk counts"), "{text}");
        assert!(text.contains("note: 1 results of earlier runs in the folder left out"), "{text}");
        assert!(
            text.contains(
                "note: measured 4 of 7 scheduled benchmarks; not measured: buffering (1), overlap (1), zero_copy (1)"
            ),
            "{text}"
        );
        assert!(text.contains("the first: overlap/128 chunks/4 streams"), "{text}");
        assert!(text.contains("htod     pinned                54.00    256 MiB          55.00    98.2%"), "{text}");
        assert!(
            text.contains("32 chunks on 4 streams          6.200      6.000           0.968  copies both ways"),
            "{text}"
        );
        assert!(!text.contains("zero_copy") || !text.contains("1 GiB"), "the earlier run's result is left out: {text}");
        // Without limits: the figures alone, and why.
        let text = report(&results, None, Some(&schedule));
        assert!(text.contains("note: no gpu-limits.json: no limits to hold the figures against"), "{text}");
        assert!(text.contains("htod     pinned                54.00    256 MiB              -        -"), "{text}");
        assert!(text.contains("32 chunks on 4 streams          6.200          -               -  -"), "{text}");
        // Stopped before any benchmark: the limits alone.
        let text = report(&[], Some(&limits(&[])), Some(&schedule));
        assert!(text.contains("no benchmark results from this run yet"), "{text}");
        assert!(text.contains("measured 0 of 7 scheduled benchmarks"), "{text}");
        assert!(text.contains("htod     not measured              -          -          55.00        -"), "{text}");
        assert!(text.contains("4000 GB/s of a 4800 GB/s peak"), "{text}");
        // Without a schedule (a run before schedules were written), every result counts and nothing is missing.
        let text = report(&results, Some(&limits(&["32", "128"])), None);
        assert!(!text.contains("note:"), "{text}");
        assert_eq!(BenchResult { value: String::new(), ..results[0].clone() }.id(), "dtoh/pinned");
        let parsed =
            Schedule::parse(&serde_json::json!({ "started_unix": 5, "benchmarks": ["a/b"], "full": true })).unwrap();
        assert_eq!((parsed.started_unix, parsed.benchmarks, parsed.full), (5, vec!["a/b".to_string()], true));
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn the_picture_has_a_line_per_kind_and_direction_and_the_link_across() {
        let r = |group: &str, function: &str, bytes: u64, gbps: f64| BenchResult {
            group: group.into(),
            function: function.into(),
            value: String::new(),
            median_ns: bytes as f64 / gbps,
            bytes,
            unix: 0,
        };
        let results = [
            r("htod", "pinned", 1 << 30, 55.0),
            r("htod", "pinned", 4096, 0.7),
            r("dtoh", "pinned", 4096, 0.8),
            r("htod", "pageable", 4096, 0.4),
            r("both", "pinned", 8192, 1.2),
            r("overlap", "32 chunks", 1 << 29, 80.0),
        ];
        let series = rate_series(&results);
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["pageable H2D", "pinned H2D", "pinned D2H"]);
        assert_eq!(series[1].points[0], (4096.0, 0.7), "sorted by size: {:?}", series[1]);
        let limits = serde_json::json!({ "link_gbps": 63.0, "copy_engine_gbps": { "htod": 55.3 } });
        assert_eq!(ceilings(&limits)[0].gbps, 63.0);
        let older = serde_json::json!({ "copy_engine_gbps": { "htod": 55.3 } });
        assert!(ceilings(&older)[0].label.starts_with("best pinned copy measured"));
        let svg = chart::rate_chart("t", &series, &ceilings(&limits));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("PCIe link, raw rate per direction: 63.0 GB/s"));
    }
}
