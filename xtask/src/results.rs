//! `cargo xtask results` (`./xtask results` in a bundle): every lesson's default run, several times,
//! the benchmarks, and the references given (NVIDIA's nvbandwidth, the seeds' C++ programs), all on the
//! GPU machine it runs on, in one call; written to `results/<gpu model>-x<count>/`:
//!
//! ```text
//! results/nvidia-h100-80gb-hbm3-x1/
//!   figures.json   every figure: each run's median and the median over runs, the machine, the commit
//!   README.md      the same as tables a person reads
//!   *.svg          the sweeps' rates against size, one picture a lesson that sweeps
//! ```
//!
//! The lessons run in turn, round after round (every lesson once, then again), so that whatever drifts
//! on the machine meets each lesson alike. README.md's lesson table and headline figures are made from
//! `figures.json` (`--readme` remakes them without running anything), between markers, and a tidy
//! test fails when README and the file disagree.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, Context as _};
use figures::{Clock, Figure, MemoryKind};
use serde::{Deserialize, Serialize};

use crate::{flags::ResultsFlags, lessons, tools};

/// The file a run writes, in its machine's folder.
pub const FIGURES: &str = "figures.json";

/// What `results` measured on one machine.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct MachineResults {
    /// The folder's name: the GPU's model and how many the machine has (`nvidia-h100-80gb-hbm3-x1`).
    pub machine_id: String,
    /// The GPU's name as the driver gives it, the machine's GPU count, its driver and host.
    pub gpu: String,
    pub gpus: usize,
    pub driver: Option<String>,
    pub cpu: Option<String>,
    /// The commit the lessons were built from, and the command that made this file.
    pub commit: Option<String>,
    pub command: String,
    /// Runs of each lesson.
    pub runs: usize,
    pub lessons: BTreeMap<String, LessonResults>,
    /// Programs outside the repository run in the same call, labelled (nvbandwidth, the seeds' C++).
    pub references: Vec<Reference>,
    /// `benches/scope`: the scope's price per operation against the bare driver call, each case's
    /// median ratio over processes.
    pub scope_price: Vec<ScopeCase>,
}

/// One lesson's figures over its runs.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct LessonResults {
    pub figures: Vec<FigureResult>,
    /// Runs that failed, with their error line.
    pub errors: Vec<String>,
    /// Wall time of each run, s.
    pub wall_s: Vec<f64>,
}

/// One figure over the runs: each run's median, and their median.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct FigureResult {
    pub name: String,
    pub clock: Clock,
    /// The host memory its transfers touch, as the lesson said (absent from files made before
    /// figures said it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryKind>,
    /// Bytes moved by what was timed, where the lesson says.
    pub bytes: Option<usize>,
    /// The median over runs of each run's median, ms.
    pub median_ms: f64,
    /// Each run's median, ms, in run order.
    pub runs_ms: Vec<f64>,
    /// The bound the lesson held it against, ms, where it did (the median over runs).
    pub bound_ms: Option<f64>,
}

impl FigureResult {
    /// GB/s over the bytes moved, where the lesson gave them.
    pub fn gbps(&self) -> Option<f64> {
        self.bytes.map(|b| b as f64 / (self.median_ms * 1e-3) / 1e9)
    }

    /// The runs' spread: (lowest, highest) of their medians, ms.
    pub fn range_ms(&self) -> (f64, f64) {
        range(&self.runs_ms)
    }
}

/// The lowest and the highest of `v`.
pub fn range(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

/// A program outside the repository, run in the same call.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Reference {
    /// What it is: `nvbandwidth host_to_device_memcpy_ce`, `seed overlap_pattern.cu`.
    pub label: String,
    /// Its figures by name (GB/s for nvbandwidth's, ms for a seed's), each run's.
    pub values: BTreeMap<String, Vec<f64>>,
    /// The unit of the values.
    pub unit: String,
}

/// One case of `benches/scope`.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ScopeCase {
    pub case: String,
    pub us_per_op: f64,
    #[serde(default)]
    pub against: Option<String>,
    /// The median over processes of the case's ratio to what it is held against.
    pub ratio: Option<f64>,
    /// Each process's ratio.
    #[serde(rename = "ratio_in_each_process", default)]
    pub ratios: Vec<f64>,
}

pub fn run(flags: ResultsFlags) -> anyhow::Result<()> {
    if flags.readme {
        return write_readme();
    }
    lessons::need_gpu("results")?;
    let selected = lessons::select(&flags.lessons)?;
    let bins = lessons::binaries(false)?;
    let runs = flags.runs.max(1);
    let mut docs: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
    let mut lesson_results: BTreeMap<String, LessonResults> = BTreeMap::new();
    let started = Instant::now();
    let raw = lessons::output_dir("results").join("runs");
    fs::create_dir_all(&raw).with_context(|| format!("creating {}", raw.display()))?;
    for round in 0..runs {
        for l in &selected {
            let t = Instant::now();
            let out = Command::new(bins.join(l.name))
                .arg("--json")
                .output()
                .with_context(|| format!("running {}", l.name))?;
            let wall = t.elapsed().as_secs_f64();
            let entry = lesson_results.entry(l.name.to_string()).or_default();
            entry.wall_s.push(wall);
            // Each run's own document is kept beside the task's output, so that nothing measured is lost
            // where a later step fails.
            let _ = fs::write(raw.join(format!("{}-{}.json", l.name, round + 1)), &out.stdout);
            let doc: Option<serde_json::Value> = serde_json::from_slice(&out.stdout).ok();
            match doc {
                Some(doc) if out.status.success() => docs.entry(l.name).or_default().push(doc),
                Some(doc) => entry.errors.push(doc["error"].as_str().unwrap_or("failed").to_string()),
                // A lesson that prints no JSON (your_kernel) and checked its result: nothing to record.
                None if out.status.success() => {}
                None => entry.errors.push(format!(
                    "exit {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
                )),
            }
            eprintln!(
                "results: round {}/{runs}: {:<20} {:>6.1} s{}",
                round + 1,
                l.name,
                wall,
                if out.status.success() { "" } else { "  FAILED" }
            );
        }
    }
    for (name, runs_of) in &docs {
        lesson_results.entry(name.to_string()).or_default().figures = over_runs(runs_of);
    }
    let first = docs.values().flatten().next().context("no lesson ran: nothing to write")?;
    let machine = &first["machine"];
    let gpu = machine["gpus"][0]["name"].as_str().unwrap_or("unknown GPU").to_string();
    let gpus = gpu_count().unwrap_or(1);
    let mut references = Vec::new();
    if let Some(nvb) = &flags.nvbandwidth {
        references.push(nvbandwidth(nvb, runs)?);
    }
    for seed in &flags.seed {
        references.push(seed_program(seed, runs)?);
    }
    let scope_price = match flags.no_benches {
        true => Vec::new(),
        false => scope_bench(flags.processes).unwrap_or_else(|e| {
            eprintln!("results: benches/scope gave nothing to record: {e:#}");
            Vec::new()
        }),
    };
    let results = MachineResults {
        machine_id: machine_id(&gpu, gpus),
        driver: machine["gpus"][0]["driver"].as_str().map(String::from).or_else(driver_version),
        cpu: machine["cpu"].as_str().map(String::from),
        gpu,
        gpus,
        commit: commit(),
        command: std::env::args().skip(1).collect::<Vec<_>>().join(" "),
        runs,
        lessons: lesson_results,
        references,
        scope_price,
    };
    let dir = flags.out.unwrap_or_else(|| tools::root().join("results")).join(&results.machine_id);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::write(dir.join(FIGURES), serde_json::to_string_pretty(&results)? + "\n")?;
    fs::write(dir.join("README.md"), page(&results))?;
    for (lesson, svg) in pictures(&docs) {
        fs::write(dir.join(format!("{lesson}.svg")), svg)?;
    }
    eprintln!(
        "results: {} lessons x {runs} runs in {:.0} s: {}",
        docs.len(),
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    if !tools::in_bundle() {
        write_readme()?;
    }
    Ok(())
}

/// A document's figures, as the `figures` crate reads them (schema 1's as [`Figure::schema_1`] says);
/// none where it has none, or they do not read.
pub fn figures_of(doc: &serde_json::Value) -> Vec<Figure> {
    let schema_1 = doc["schema_version"].as_u64().is_some_and(|v| v < 2);
    let list: Vec<Figure> = doc.get("figures").and_then(|f| serde_json::from_value(f.clone()).ok()).unwrap_or_default();
    list.into_iter().map(|f| if schema_1 { f.schema_1() } else { f }).collect()
}

/// Each figure over the runs of a lesson, in the order the first run lists them.
fn over_runs(docs: &[serde_json::Value]) -> Vec<FigureResult> {
    let mut order: Vec<String> = Vec::new();
    let mut by_name: BTreeMap<String, Vec<Figure>> = BTreeMap::new();
    for doc in docs {
        for f in figures_of(doc) {
            if !by_name.contains_key(&f.name) {
                order.push(f.name.clone());
            }
            by_name.entry(f.name.clone()).or_default().push(f);
        }
    }
    order
        .into_iter()
        .filter_map(|name| {
            let fs = &by_name[&name];
            let runs_ms: Vec<f64> = fs.iter().map(|f| f.stats.median_ms).collect();
            let bounds: Vec<f64> = fs.iter().filter_map(|f| f.bound_ms).collect();
            let f = &fs[0];
            let bytes = f.transfer_bytes.or(f.bytes);
            Some(FigureResult {
                clock: f.clock,
                memory: Some(f.memory),
                bytes,
                median_ms: median(&runs_ms)?,
                bound_ms: median(&bounds),
                runs_ms,
                name,
            })
        })
        .collect()
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// `nvidia-h100-80gb-hbm3-x1`.
pub fn machine_id(gpu: &str, count: usize) -> String {
    let mut id = String::new();
    for c in gpu.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c);
        } else if !id.ends_with('-') {
            id.push('-');
        }
    }
    format!("{}-x{count}", id.trim_matches('-'))
}

fn gpu_count() -> Option<usize> {
    let out = Command::new("nvidia-smi").arg("-L").output().ok()?;
    let n = String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("GPU ")).count();
    (n > 0).then_some(n)
}

fn driver_version() -> Option<String> {
    let out = Command::new("nvidia-smi").args(["--query-gpu=driver_version", "--format=csv,noheader"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().next().map(|s| s.trim().to_string())
}

fn commit() -> Option<String> {
    if tools::in_bundle() {
        let manifest = fs::read_to_string(tools::root().join("bundle.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&manifest).ok()?;
        return v["commit"].as_str().map(String::from);
    }
    let out = Command::new("git").args(["rev-parse", "--short", "HEAD"]).current_dir(tools::root()).output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

/// nvbandwidth's pinned copies by the copy engine, each direction, `runs` times: its `SUM` lines, GB/s.
fn nvbandwidth(exe: &Path, runs: usize) -> anyhow::Result<Reference> {
    let tests = ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce"];
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for _ in 0..runs {
        let mut cmd = Command::new(exe);
        for t in tests {
            cmd.args(["-t", t]);
        }
        let out = cmd.output().with_context(|| format!("running {}", exe.display()))?;
        if !out.status.success() {
            bail!("{} failed: {}", exe.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        for (test, gbps) in nvbandwidth_sums(&String::from_utf8_lossy(&out.stdout)) {
            values.entry(test).or_default().push(gbps);
        }
    }
    Ok(Reference {
        label: "nvbandwidth (NVIDIA), pinned copies by the copy engine".into(),
        values,
        unit: "GB/s".into(),
    })
}

/// The `SUM <test> <GB/s>` lines of nvbandwidth's output.
pub fn nvbandwidth_sums(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "SUM").then_some(())?;
            let test = w.next()?.to_string();
            Some((test, w.next()?.parse().ok()?))
        })
        .collect()
}

/// A seed's C++ program (`NAME=PATH`), `runs` times: every `label: N ms` line it prints, ms.
fn seed_program(spec: &str, runs: usize) -> anyhow::Result<Reference> {
    let (name, exe) = spec.split_once('=').context("--seed takes NAME=PATH")?;
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for _ in 0..runs {
        let out = Command::new(exe).output().with_context(|| format!("running {exe}"))?;
        for (label, ms) in ms_lines(&String::from_utf8_lossy(&out.stdout)) {
            values.entry(label).or_default().push(ms);
        }
    }
    Ok(Reference { label: format!("{name}, the seed's C++ (nvcc -O3)"), values, unit: "ms".into() })
}

/// `Without overlap: 12.3 ms` and `Pinned H2D:   2.51 ms (26.7 GB/s)` lines: the label, and the
/// number before the first `ms`.
pub fn ms_lines(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|l| {
            let (label, rest) = l.split_once(':')?;
            let words: Vec<&str> = rest.split_whitespace().collect();
            let number = words.windows(2).find(|w| w[1] == "ms")?[0].parse().ok()?;
            Some((label.trim().to_string(), number))
        })
        .collect()
}

/// `benches/scope --processes N --json`: each case's ratio to the bare calls.
fn scope_bench(processes: usize) -> anyhow::Result<Vec<ScopeCase>> {
    let json = lessons::output_dir("results").join("scope.json");
    fs::create_dir_all(json.parent().unwrap())?;
    let mut cmd = if tools::in_bundle() {
        let mut c = Command::new(tools::root().join("benches/scope"));
        c.arg("--bench");
        c
    } else {
        let mut c = tools::cargo();
        c.args(["bench", "-p", "cuda-scope", "--bench", "scope", "--"]);
        c
    };
    cmd.args(["--processes", &processes.to_string(), "--json"]).arg(&json);
    tools::run(&mut cmd, "running benches/scope")?;
    Ok(serde_json::from_str(&fs::read_to_string(&json)?)?)
}

/// The results as a page of tables.
pub fn page(r: &MachineResults) -> String {
    let mut s = format!(
        "# Results on {} (x{})\n\nMade by `cargo xtask {}` from commit {}: every lesson's default run {} times, \
         round after round; each figure is the median over the runs of each run's median, with the runs' range. \
         Driver {}; CPU {}.\n",
        r.gpu,
        r.gpus,
        r.command,
        r.commit.as_deref().unwrap_or("unknown"),
        r.runs,
        r.driver.as_deref().unwrap_or("unknown"),
        r.cpu.as_deref().unwrap_or("unknown"),
    );
    if !r.references.is_empty() {
        s += "\n## References measured in the same call\n\n| program | figure | runs |\n| --- | --- | --- |\n";
        for rf in &r.references {
            for (name, v) in &rf.values {
                let vs: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
                s += &format!("| {} | {name} | {} {} |\n", rf.label, vs.join(", "), rf.unit);
            }
        }
    }
    if !r.scope_price.is_empty() {
        s += "\n## The scope's price (`benches/scope`)\n\n| case | µs an operation | against | ratio (median over processes) | each process |\n| --- | --- | --- | --- | --- |\n";
        for c in &r.scope_price {
            let ratios: Vec<String> = c.ratios.iter().map(|x| format!("{x:.3}")).collect();
            s += &format!(
                "| {} | {:.3} | {} | {} | {} |\n",
                c.case,
                c.us_per_op,
                c.against.as_deref().unwrap_or("-"),
                c.ratio.map_or("-".into(), |x| format!("{x:.3}x")),
                ratios.join(", ")
            );
        }
    }
    for (name, l) in &r.lessons {
        s += &format!("\n## {name}\n\n");
        let walls: Vec<String> = l.wall_s.iter().map(|w| format!("{w:.1}")).collect();
        s += &format!("Wall time of each run: {} s.\n", walls.join(", "));
        for e in &l.errors {
            s += &format!("\nA run failed: {e}\n");
        }
        if l.figures.is_empty() {
            continue;
        }
        s += "\n| figure | clock | memory | median, ms | runs' range, ms | GB/s | bound, ms |\n| --- | --- | --- | --- | --- | --- | --- |\n";
        for f in &l.figures {
            let (lo, hi) = f.range_ms();
            s += &format!(
                "| {} | {} | {} | {:.4} | {:.4}-{:.4} | {} | {} |\n",
                f.name,
                if f.clock == Clock::Gpu { "gpu" } else { "host" },
                f.memory.map_or("-", MemoryKind::label),
                f.median_ms,
                lo,
                hi,
                f.gbps().map_or("-".into(), |g| format!("{g:.2}")),
                f.bound_ms.map_or("-".into(), |b| format!("{b:.4}"))
            );
        }
    }
    s
}

/// A picture of rates against size for each lesson whose figures are sized series (`series` and `bytes`
/// in its JSON), from its first run.
fn pictures(docs: &BTreeMap<&str, Vec<serde_json::Value>>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (lesson, runs) in docs {
        let Some(doc) = runs.first() else { continue };
        let mut series: Vec<chart::Series> = Vec::new();
        for f in doc["figures"].as_array().into_iter().flatten() {
            let (Some(label), Some(bytes), Some(ms)) =
                (f["series"].as_str(), f["bytes"].as_u64(), f["stats"]["median_ms"].as_f64())
            else {
                continue;
            };
            let point = (bytes as f64, bytes as f64 / (ms * 1e-3) / 1e9);
            match series.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push(point),
                None => series.push(chart::Series { label: label.to_string(), points: vec![point] }),
            }
        }
        if series.iter().any(|s| s.points.len() >= 2) {
            out.push((lesson.to_string(), chart::rate_chart(&format!("{lesson}: GB/s against size"), &series, &[])));
        }
    }
    out
}

/// Every machine's results under `results/`.
pub fn all_results(root: &Path) -> anyhow::Result<Vec<MachineResults>> {
    let mut out = Vec::new();
    let dir = root.join("results");
    let Ok(entries) = fs::read_dir(&dir) else { return Ok(out) };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path().join(FIGURES)).filter(|p| p.is_file()).collect();
    paths.sort();
    for p in paths {
        let text = fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        out.push(serde_json::from_str(&text).with_context(|| format!("reading {}", p.display()))?);
    }
    Ok(out)
}

/// The markers between which README.md holds what `readme_block` makes.
pub const BEGIN: &str =
    "<!-- results: made by `cargo xtask results --readme` from results/*/figures.json; do not edit -->";
pub const END: &str = "<!-- results: end -->";

/// README's block: made from the results of the machine named first in `results/`.
pub fn readme_block(all: &[MachineResults]) -> String {
    match all.first() {
        None => "No results yet: run `cargo xtask results` on a GPU machine.\n".into(),
        Some(r) => crate::readme::block(r),
    }
}

/// Remakes README.md's block from `results/`.
fn write_readme() -> anyhow::Result<()> {
    let root = tools::root();
    let all = all_results(&root)?;
    let path = root.join("README.md");
    let text = fs::read_to_string(&path)?;
    let new = replace_block(&text, &readme_block(&all)).context("README.md has no results markers")?;
    if new != text {
        fs::write(&path, new)?;
        eprintln!("results: README.md's figures remade from results/");
    }
    Ok(())
}

/// `text` with what lies between the markers replaced by `block`.
pub fn replace_block(text: &str, block: &str) -> Option<String> {
    let a = text.find(BEGIN)? + BEGIN.len();
    let b = text[a..].find(END)? + a;
    Some(format!("{}\n{}{}", &text[..a], block, &text[b..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_benchmarks_json_is_read() {
        let json = r#"[{"case":"memset: bare","us_per_op":0.7443,"processes":5},
{"case":"memset: scope, one stream","us_per_op":0.7988,"against":"memset: bare","ratio":1.0766,"ratio_in_each_process":[1.0766,1.0661],"processes":5}]"#;
        let cases: Vec<ScopeCase> = serde_json::from_str(json).unwrap();
        assert_eq!((cases[0].ratio, cases[0].ratios.len()), (None, 0));
        assert_eq!((cases[1].ratio, cases[1].ratios.clone()), (Some(1.0766), vec![1.0766, 1.0661]));
    }

    #[test]
    fn machine_ids_are_folder_names() {
        assert_eq!(machine_id("NVIDIA H100 80GB HBM3", 1), "nvidia-h100-80gb-hbm3-x1");
        assert_eq!(machine_id("NVIDIA H200", 4), "nvidia-h200-x4");
    }

    #[test]
    fn nvbandwidth_and_seed_lines_are_read() {
        let nvb = "Running host_to_device_memcpy_ce.\nmemcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n          0\n 0     55.15\n\nSUM host_to_device_memcpy_ce 55.15\n";
        assert_eq!(nvbandwidth_sums(nvb), vec![("host_to_device_memcpy_ce".to_string(), 55.15)]);
        let seed =
            "Without overlap: 13.66 ms\nWith overlap:    5.12 ms\nSpeedup: 2.67x\nPinned H2D:   2.51 ms (26.7 GB/s)\n";
        let lines = [("Without overlap".into(), 13.66), ("With overlap".into(), 5.12), ("Pinned H2D".into(), 2.51)];
        assert_eq!(ms_lines(seed), lines);
    }

    #[test]
    fn figures_over_runs_take_the_median_of_medians() {
        let doc = |ms: f64| serde_json::json!({"schema_version": 2, "figures": [{"name": "a", "clock": "gpu", "memory": "pageable", "stats": figures::Stats::one(ms), "transfer_bytes": 1000000}]});
        let f = over_runs(&[doc(1.0), doc(3.0), doc(2.0)]);
        assert_eq!((f[0].median_ms, f[0].runs_ms.clone()), (2.0, vec![1.0, 3.0, 2.0]));
        assert!((f[0].gbps().unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(f[0].range_ms(), (1.0, 3.0));
        assert_eq!((f[0].clock, f[0].memory), (Clock::Gpu, Some(MemoryKind::Pageable)));
    }

    #[test]
    fn the_block_goes_between_the_markers() {
        let text = format!("a\n{BEGIN}\nold\n{END}\nb\n");
        assert_eq!(replace_block(&text, "new\n").unwrap(), format!("a\n{BEGIN}\nnew\n{END}\nb\n"));
        assert!(replace_block("no markers", "x").is_none());
    }
}
