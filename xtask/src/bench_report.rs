//! Reads criterion's results and the limits the benchmark measured in the same run
//! (`gpu-limits.json`), prints our best figures beside them, and draws the copies as users of this field
//! expect to see them: GB/s against transfer size on a log scale, a line per kind of host memory and
//! direction, the link's raw rate across (`rates.svg` beside criterion's reports). The picture is the
//! one `pinned_memory --svg` draws, by the same code (`measure/src/report/chart.rs`, std only).

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _};
use serde_json::Value;

use crate::{flags::BenchReportFlags, tools};

#[path = "../../measure/src/report/chart.rs"]
mod chart;

/// One benchmark's result: where it is, its median time, its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Result {
    pub group: String,
    pub function: String,
    pub value: String,
    pub median_ns: f64,
    pub bytes: u64,
}

impl Result {
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.median_ns
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
    let results = read_results(&dir)?;
    if results.is_empty() {
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
    let limits: Value = serde_json::from_str(
        &fs::read_to_string(dir.join("gpu-limits.json"))
            .context("no gpu-limits.json: the benchmark measures it, run `cargo bench`")?,
    )?;
    print!("{}", report(&results, &limits));
    let series = rate_series(&results);
    if !series.is_empty() {
        let name = limits["device"]["name"].as_str().unwrap_or("the GPU");
        let svg = chart::rate_chart(&format!("Copy rates on {name}, criterion's medians"), &series, &ceilings(&limits));
        let path = dir.join("rates.svg");
        fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        println!("\npicture of the copy rates: {}", path.display());
    }
    Ok(())
}

/// The lines of the picture: each kind of host memory in the `h2d` and `d2h` groups, GB/s at each size.
pub fn rate_series(results: &[Result]) -> Vec<chart::Series> {
    let mut kinds: Vec<&str> = results.iter().filter(|r| r.bytes > 0).map(|r| r.function.as_str()).collect();
    kinds
        .sort_by_key(|k| (["pageable", "pinned", "write-combined", "pinned in place"].iter().position(|x| x == k), *k));
    kinds.dedup();
    let mut out = Vec::new();
    for kind in kinds {
        for (group, dir) in [("h2d", "H2D"), ("d2h", "D2H")] {
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
            ("best pinned copy measured (the link's rate was not read)", limits["copy_engine_gbps"]["h2d"].as_f64())
        }
    };
    gbps.map(|gbps| chart::Ceiling { label: label.into(), gbps }).into_iter().collect()
}

/// Every `*/new/benchmark.json` with its `estimates.json` under `dir`.
pub fn read_results(dir: &Path) -> anyhow::Result<Vec<Result>> {
    let mut out: Vec<Result> = walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.path().ends_with("new/benchmark.json"))
        .filter_map(|e| read_one(e.path()))
        .collect();
    out.sort_by(|a, b| (&a.group, &a.function, &a.value).cmp(&(&b.group, &b.function, &b.value)));
    Ok(out)
}

fn read_one(benchmark: &Path) -> Option<Result> {
    let b: Value = serde_json::from_str(&fs::read_to_string(benchmark).ok()?).ok()?;
    let e: Value = serde_json::from_str(&fs::read_to_string(benchmark.with_file_name("estimates.json")).ok()?).ok()?;
    let bytes = b["throughput"]["Bytes"].as_u64().or_else(|| b["throughput"]["BytesDecimal"].as_u64()).unwrap_or(0);
    Some(Result {
        group: b["group_id"].as_str()?.to_string(),
        function: b["function_id"].as_str().unwrap_or("").to_string(),
        value: b["value_str"].as_str().unwrap_or("").to_string(),
        median_ns: e["median"]["point_estimate"].as_f64()?,
        bytes,
    })
}

/// The report: per copy group and host-memory kind, the best rate against the copy-engine limit;
/// the device-memory copy against its peak; the pipeline's times against their bounds.
pub fn report(results: &[Result], limits: &Value) -> String {
    let mut s = String::new();
    let lim = |path: &[&str]| path.iter().fold(limits, |v, k| &v[*k]).as_f64();
    let name = limits["device"]["name"].as_str().unwrap_or("the GPU");
    s += &format!("Best figures of this run on {name}, against the limits measured in the same run\n\n");
    s += &format!(
        "{:<8} {:<16} {:>10} {:>10} {:>12} {:>8}\n",
        "group", "host memory", "best GB/s", "at", "limit GB/s", "of limit"
    );
    for (group, limit) in [
        ("h2d", lim(&["copy_engine_gbps", "h2d"])),
        ("d2h", lim(&["copy_engine_gbps", "d2h"])),
        ("both", lim(&["copy_engine_gbps", "both_total"])),
    ] {
        let mut best: BTreeMap<&str, &Result> = BTreeMap::new();
        for r in results.iter().filter(|r| r.group == group && r.bytes > 0) {
            let e = best.entry(&r.function).or_insert(r);
            if r.gbps() > e.gbps() {
                *e = r;
            }
        }
        for (kind, r) in best {
            let (l, pct) = match limit {
                Some(l) => (format!("{l:.2}"), format!("{:.1}%", 100.0 * r.gbps() / l)),
                None => ("-".into(), "-".into()),
            };
            s += &format!("{group:<8} {kind:<16} {:>10.2} {:>10} {l:>12} {pct:>8}\n", r.gbps(), r.value);
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
    let mut overlap: Vec<&Result> = results.iter().filter(|r| r.group == "overlap").collect();
    let count = |s: &str| s.split_whitespace().next().and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
    overlap.sort_by_key(|r| (count(&r.function), count(&r.value)));
    if !overlap.is_empty() {
        s += &format!(
            "\n{:<26} {:>10} {:>10} {:>11}  {}\n",
            "overlap pipeline", "median ms", "bound ms", "efficiency", "limited by"
        );
        for r in overlap {
            let key = format!("overlap/{}/{}", r.function, r.value);
            let bound = limits["pipeline"]["bound_ms"][&key].as_f64();
            let limited = limits["pipeline"]["limited_by"][&key].as_str().unwrap_or("-");
            let ms = r.median_ns / 1e6;
            let (b, eff) = match bound {
                Some(b) => (format!("{b:.3}"), format!("{:.3}", b / ms)),
                None => ("-".into(), "-".into()),
            };
            s += &format!(
                "{:<26} {:>10.3} {:>10} {:>11}  {limited}\n",
                format!("{} on {}", r.function, r.value),
                ms,
                b,
                eff
            );
        }
    }
    for group in ["buffering", "zero_copy"] {
        let mut rs: Vec<&Result> = results.iter().filter(|r| r.group == group).collect();
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
        write(&dir, "h2d", "pinned", "1 GiB", 1 << 30, 1_073_741_824.0 / 55.0);
        write(&dir, "h2d", "pinned", "4 KiB", 4096, 6000.0);
        write(&dir, "h2d", "pageable", "1 GiB", 1 << 30, 1_073_741_824.0 / 9.0);
        write(&dir, "overlap", "32 chunks", "4 streams", 1 << 29, 6.0e6);
        let results = read_results(&dir).unwrap();
        assert_eq!(results.len(), 4);
        assert!(
            (results.iter().find(|r| r.function == "pinned" && r.value == "1 GiB").unwrap().gbps() - 55.0).abs() < 1e-9
        );
        let limits = serde_json::json!({
            "device": { "name": "Test GPU" },
            "copy_engine_gbps": { "h2d": 55.0, "d2h": 55.0, "both_total": 94.0 },
            "device_memory_gbps": { "measured_copy": 4000.0, "peak_from_clocks": 4800.0 },
            "pipeline": { "bound_ms": { "overlap/32 chunks/4 streams": 5.8 }, "limited_by": { "overlap/32 chunks/4 streams": "copies both ways" } },
        });
        let text = report(&results, &limits);
        assert!(text.contains("h2d      pinned                55.00      1 GiB        55.00   100.0%"), "{text}");
        assert!(text.contains("pageable"));
        assert!(text.contains("32 chunks on 4 streams"), "{text}");
        assert!(text.contains("0.967  copies both ways"), "efficiency of 6.0 ms against a 5.8 ms bound: {text}");
        assert!(text.contains("4000 GB/s of a 4800 GB/s peak (83%)"), "{text}");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn the_picture_has_a_line_per_kind_and_direction_and_the_link_across() {
        let r = |group: &str, function: &str, bytes: u64, gbps: f64| Result {
            group: group.into(),
            function: function.into(),
            value: String::new(),
            median_ns: bytes as f64 / gbps,
            bytes,
        };
        let results = [
            r("h2d", "pinned", 1 << 30, 55.0),
            r("h2d", "pinned", 4096, 0.7),
            r("d2h", "pinned", 4096, 0.8),
            r("h2d", "pageable", 4096, 0.4),
            r("both", "pinned", 8192, 1.2),
            r("overlap", "32 chunks", 1 << 29, 80.0),
        ];
        let series = rate_series(&results);
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["pageable H2D", "pinned H2D", "pinned D2H"]);
        assert_eq!(series[1].points[0], (4096.0, 0.7), "sorted by size: {:?}", series[1]);
        let limits = serde_json::json!({ "link_gbps": 63.0, "copy_engine_gbps": { "h2d": 55.3 } });
        assert_eq!(ceilings(&limits)[0].gbps, 63.0);
        let older = serde_json::json!({ "copy_engine_gbps": { "h2d": 55.3 } });
        assert!(ceilings(&older)[0].label.starts_with("best pinned copy measured"));
        let svg = chart::rate_chart("t", &series, &ceilings(&limits));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("PCIe link, raw rate per direction: 63.0 GB/s"));
    }
}
