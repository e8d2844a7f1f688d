//! What a person reads: aligned tables, verdicts, sizes, pictures, and JSON for machines.
//!
//! A lesson names each timed figure it reports ([`Output::figure`], [`Output::sweep`],
//! [`Output::pipeline`]): its `--json` document lists them as `"figures": [{"name", "stats", ...}]`, which
//! `cargo xtask compare` matches between two runs by name (`pinned H2D 4 KiB`, `4 streams`). A figure
//! may say which of the run's settings decide its work beyond its name, which of those the run
//! calibrated, and the lower bound it was held against: two runs that calibrated different work are then
//! compared by each run's time over its own bound, and on the figures the calibration does not touch.
//! The figures and their document follow one schema, the `figures` crate's, which every tool reads: each
//! says its clock, its host memory and its bytes, and no tool reads them from its name.
//!
//! This module sits below the ones whose results it names (timing's `Stats`, fit's sweep, bound's
//! report), so it takes them as they serialize, the shape their `--json` has; its tests hold it to
//! theirs.

use std::{cell::RefCell, io::IsTerminal as _, path::Path};

use serde::Serialize;

use figures::Stats;

pub use chart::{rate_chart, Ceiling, Series};

/// A table printed with aligned columns: the first left-aligned, the rest right-aligned.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table { headers: headers.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut width: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = cells.get(i).map_or("", String::as_str);
                let pad = w - c.chars().count();
                if i == 0 {
                    s += &format!("{c}{}", " ".repeat(pad));
                } else {
                    s += &format!("  {}{c}", " ".repeat(pad));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers);
        out += &line(&width.iter().map(|w| "─".repeat(*w)).collect::<Vec<_>>());
        for r in &self.rows {
            out += &line(r);
        }
        out
    }
}

pub use figures::{Clock, Figure, MemoryKind, SCHEMA_VERSION};

/// Where a lesson's output goes: readable text, or (with `--json`) one JSON document on stdout.
pub struct Output {
    pub json: bool,
    /// The GPUs the run used, for the machine fingerprint of its JSON.
    devices: RefCell<Vec<serde_json::Value>>,
    /// The figures the lesson named, in the order it named them.
    figures: RefCell<Vec<Figure>>,
    /// The flags that repeat the work this run calibrated ([`figures::Document::repeat_with`]).
    repeat_with: RefCell<Vec<String>>,
}

impl Output {
    pub fn new(json: bool) -> Output {
        Output { json, devices: Default::default(), figures: Default::default(), repeat_with: Default::default() }
    }

    /// Records that this run calibrated a setting, and the flags that give another run the same value
    /// (`--iters 1234`), for the JSON document ([`figures::Document::repeat_with`]).
    pub fn repeat_with(&self, flags: &[String]) {
        self.repeat_with.borrow_mut().extend_from_slice(flags);
    }

    /// Names a timed figure for the JSON document, where `cargo xtask compare` finds it by name.
    pub fn figure(&self, name: impl Into<String>, stats: &Stats) {
        self.add(Figure::new(name, stats));
    }

    /// Adds a figure; a name used before gets ` (2)`, ` (3)`... so that every name stays one of a kind.
    pub fn add(&self, mut figure: Figure) {
        let mut figures = self.figures.borrow_mut();
        let base = figure.name.clone();
        let mut n = 1;
        while figures.iter().any(|f| f.name == figure.name) {
            n += 1;
            figure.name = format!("{base} ({n})");
        }
        figures.push(figure);
    }

    /// The figures named so far.
    pub fn figures(&self) -> Vec<Figure> {
        self.figures.borrow().clone()
    }

    /// Names every copy of a sweep by kind, direction and size (`pinned H2D 4 KiB`), in the series of its
    /// kind and direction, for [`Output::rate_chart`]: `times[i][k]` is kind `kinds[k]` (its name and the
    /// host memory it is) at `sizes[i]`, each direction (`fit::DirectionTimes`, `{"htod": Stats, "dtoh":
    /// Stats}`).
    pub fn sweep(&self, sizes: &[usize], kinds: &[(&str, MemoryKind)], times: &impl Serialize) {
        let times = serde_json::to_value(times).unwrap_or_default();
        for (bytes, row) in sizes.iter().zip(times.as_array().into_iter().flatten()) {
            for ((kind, memory), both) in kinds.iter().zip(row.as_array().into_iter().flatten()) {
                for (key, dir) in [("htod", "H2D"), ("dtoh", "D2H")] {
                    let Ok(stats) = serde_json::from_value::<Stats>(both[key].clone()) else { continue };
                    self.add(Figure::sized(format!("{kind} {dir}"), *bytes, &stats).memory(*memory));
                }
            }
        }
    }

    /// Names a pipeline's runs (`bound::PipelineReport`: `one stream`, `4 streams`), each against its bound, and
    /// the bound's parts (best of their runs). Their work depends on the run's `plan`, and, except for
    /// the copies alone, on its `steps` (the kernel), which a lesson may have calibrated: two runs with
    /// different kernels are compared by each run's time over its bound, and on the copies.
    pub fn pipeline(&self, report: &impl Serialize) {
        let r = serde_json::to_value(report).unwrap_or_default();
        for run in r["runs"].as_array().into_iter().flatten() {
            let against = &run["against_bound"];
            let (Some(name), Some(bound)) = (run["name"].as_str(), against["bound"]["ms"].as_f64()) else {
                continue;
            };
            let Ok(measured) = serde_json::from_value::<Stats>(against["measured"].clone()) else { continue };
            self.add(Figure::new(name, &measured).against(bound).depends_on("plan").calibrated("steps"));
        }
        for (name, key, kernel) in [
            ("one chunk's H2D", "htod_ms", false),
            ("one chunk's kernel", "kernel_ms", true),
            ("one chunk's D2H", "dtoh_ms", false),
            ("one chunk's H2D, kernel and D2H in turn", "chain_ms", true),
            ("bound part: H2D copies", "all_htod_ms", true),
            ("bound part: D2H copies", "all_dtoh_ms", true),
            ("bound part: copies both ways", "copies_ms", false),
            ("bound part: kernels", "kernels_ms", true),
        ] {
            let Some(ms) = r["costs"][key].as_f64() else { continue };
            let figure = Figure::best(format!("{name}, best"), ms).depends_on("plan");
            self.add(if kernel { figure.calibrated("steps") } else { figure });
        }
    }

    /// Where `path` is given, writes the picture of the rates of every sized figure (GB/s against size,
    /// a line per series), with `link_gbps`, one direction's raw link rate, drawn across; says where.
    pub fn rate_chart(&self, path: Option<&Path>, link_gbps: Option<f64>) -> anyhow::Result<()> {
        let Some(path) = path else { return Ok(()) };
        let gpu = self.devices.borrow().first().and_then(|d| d["name"].as_str().map(String::from));
        let title = format!("Copy rates on {}, median of the runs", gpu.as_deref().unwrap_or("the GPU"));
        std::fs::write(path, rate_chart(&title, &rate_series(&self.figures.borrow()), &link_ceiling(link_gbps)))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        self.say(format!("picture of the rates: {}", path.display()));
        Ok(())
    }

    /// A line for people; silent in JSON mode.
    pub fn say(&self, text: impl AsRef<str>) {
        if !self.json {
            println!("{}", text.as_ref());
        }
    }

    pub fn table(&self, t: &Table) {
        if !self.json {
            print!("{}", t.render());
        }
    }

    /// A line of progress for long runs, on stderr, so it never mixes with the results; quiet under
    /// `--json` and where stderr is not a terminal.
    pub fn progress(&self, text: impl AsRef<str>) {
        if !self.json && std::io::stderr().is_terminal() {
            eprintln!("  … {}", text.as_ref());
        }
    }

    /// A progress bar of `steps` steps with an estimate of the time left, on stderr; hidden under
    /// `--json` and where stderr is not a terminal. Finish it before printing results.
    pub fn progress_bar(&self, steps: u64, what: &str) -> Progress {
        Progress::new(steps, what, self.json)
    }

    /// Notes a GPU the run used (its report), for the machine fingerprint.
    pub fn note_device(&self, device: &impl Serialize) {
        if let Ok(v) = serde_json::to_value(device) {
            self.devices.borrow_mut().push(v);
        }
    }

    /// The whole result, in JSON mode: `{"schema_version", "machine", "result"}`, where `machine` says
    /// what ran it (host, CPU, OS, GPUs with driver and link, the command, the time), and `"figures"`
    /// where the lesson named any.
    pub fn finish(&self, value: &impl Serialize) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(&self.document(value)?)?);
        }
        Ok(())
    }

    fn document(&self, value: &impl Serialize) -> anyhow::Result<serde_json::Value> {
        let mut doc = serde_json::json!({
            "schema_version": SCHEMA_VERSION,
            "machine": fingerprint(&self.devices.borrow()),
            "result": value,
        });
        if !self.figures.borrow().is_empty() {
            doc["figures"] = serde_json::to_value(&*self.figures.borrow())?;
        }
        if !self.repeat_with.borrow().is_empty() {
            doc["repeat_with"] = serde_json::to_value(&*self.repeat_with.borrow())?;
        }
        Ok(doc)
    }
}

/// The lines of a picture of rates: each series of sized figures, GB/s at each size, in the order named.
pub fn rate_series(figures: &[Figure]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for f in figures {
        let (Some(series), Some(bytes), ms) = (&f.series, f.bytes, f.stats.median_ms) else {
            continue;
        };
        let point = (bytes as f64, bytes as f64 / (ms * 1e-3) / 1e9);
        match out.iter_mut().find(|s| &s.label == series) {
            Some(s) => s.points.push(point),
            None => out.push(Series { label: series.clone(), points: vec![point] }),
        }
    }
    out
}

/// The link's raw rate as a line across a picture, where known.
pub fn link_ceiling(link_gbps: Option<f64>) -> Vec<Ceiling> {
    link_gbps.map(|gbps| Ceiling { label: "PCIe link, raw rate per direction".into(), gbps }).into_iter().collect()
}

/// A progress bar on stderr: `what [=====>    ] 3/8 message, about 12s left`. Every method does nothing
/// where it is hidden (`quiet`, or stderr not a terminal).
pub struct Progress(indicatif::ProgressBar);

impl Progress {
    /// `steps` steps of `what`; hidden if `quiet` (say, under `--json`). For code without an [`Output`],
    /// such as the benchmarks.
    pub fn new(steps: u64, what: &str, quiet: bool) -> Progress {
        let bar = if quiet || !std::io::stderr().is_terminal() {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(steps)
        };
        let template = format!("{what} [{{bar:24}}] {{pos}}/{{len}} {{msg}}, about {{eta}} left");
        if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress(bar)
    }

    /// Starts a step: says what it is (the count moves on at [`Progress::done`]).
    pub fn step(&self, message: impl Into<String>) {
        self.0.set_message(message.into());
    }

    /// One step done.
    pub fn done(&self) {
        self.0.inc(1);
    }

    /// Runs `f` with the bar cleared, for a line printed in the middle of the run.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.suspend(f)
    }

    /// Clears the bar.
    pub fn finish(self) {
        self.0.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// What ran this program: host, CPU, OS, the GPUs noted, the command line, and when (Unix seconds).
pub fn fingerprint(devices: &[serde_json::Value]) -> serde_json::Value {
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|s| s.trim().to_string());
    let cpu = read("/proc/cpuinfo").and_then(|c| {
        c.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|m| m.trim().to_string())
    });
    serde_json::json!({
        "host": read("/proc/sys/kernel/hostname"),
        "cpu": cpu,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "os": read("/proc/sys/kernel/osrelease"),
        "gpus": devices,
        "command": std::env::args().collect::<Vec<_>>(),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    })
}

/// A verdict line: `PASS` or `FAIL` before what was judged.
pub fn verdict(ok: bool, text: &str) -> String {
    format!("{} {text}", if ok { "PASS" } else { "FAIL" })
}

/// `4 KiB`, `64 MiB`, `1.5 GiB`.
pub fn fmt_bytes(bytes: usize) -> String {
    cuda_scope::Bytes(bytes).to_string()
}

/// `67,108,864`.
pub fn fmt_count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Milliseconds with sensible precision: `0.0123 ms`, `1.23 ms`, `123.4 ms`.
pub fn fmt_ms(ms: f64) -> String {
    if ms < 0.1 {
        format!("{ms:.4} ms")
    } else if ms < 10.0 {
        format!("{ms:.3} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts() {
        assert_eq!(fmt_bytes(4096), "4 KiB");
        assert_eq!(fmt_bytes(256 << 20), "256 MiB");
        assert_eq!(fmt_bytes(1536 << 20), "1.5 GiB");
        assert_eq!(fmt_bytes(10), "10 B");
        assert_eq!(fmt_count(67108864), "67,108,864");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_ms(1.23456), "1.235 ms");
    }

    #[test]
    fn the_fingerprint_names_the_machine_and_its_gpus() {
        let f = fingerprint(&[serde_json::json!({ "name": "Test GPU" })]);
        assert_eq!(f["gpus"][0]["name"], "Test GPU");
        assert!(f["cpus"].as_u64().unwrap() >= 1);
        assert!(f["unix_time"].as_u64().unwrap() > 1_700_000_000);
        assert!(f["command"].is_array());
    }

    #[test]
    fn progress_is_quiet_under_json() {
        let out = Output::new(true);
        let bar = out.progress_bar(3, "sweep");
        assert!(bar.0.is_hidden());
        bar.step("4 chunks");
        bar.done();
        assert_eq!(bar.0.position(), 1);
        bar.finish();
    }

    #[test]
    fn tables_align() {
        let mut t = Table::new(&["size", "GB/s"]);
        t.row(vec!["4 KiB".into(), "1.25".into()]);
        t.row(vec!["256 MiB".into(), "55.30".into()]);
        let r = t.render();
        let lines: Vec<_> = r.lines().collect();
        assert_eq!(lines[0], "size      GB/s");
        assert_eq!(lines[2], "4 KiB     1.25");
        assert_eq!(lines[3], "256 MiB  55.30");
    }

    fn stats(ms: f64) -> crate::timing::Stats {
        crate::timing::Stats { median_ms: ms, min_ms: ms, max_ms: ms, q3_ms: ms, runs: 10, cv: 0.01 }
    }

    #[test]
    fn named_figures_go_into_the_document() {
        let out = Output::new(true);
        out.figure("one stream", &stats(16.0));
        out.figure("one stream", &stats(16.1));
        out.add(Figure::new("4 streams", &stats(6.0)).against(5.6).depends_on("plan").calibrated("steps"));
        out.add(Figure::best("one chunk's H2D, best", 0.15));
        out.add(
            Figure::new("pageable H2D 4 B / caller waits", &stats(0.009))
                .on_host()
                .transfers(4)
                .memory(MemoryKind::Pageable),
        );
        assert!(out.document(&1).unwrap().get("repeat_with").is_none(), "nothing calibrated, nothing to repeat");
        out.repeat_with(&crate::args::WorkArgs::flags_for(crate::work::Work::Process(77)).unwrap());
        let doc = out.document(&serde_json::json!({ "plan": 1 })).unwrap();
        assert_eq!(doc["repeat_with"], serde_json::json!(["--iters", "77"]));
        let f = &doc["figures"];
        assert_eq!(f.as_array().unwrap().len(), 5);
        assert_eq!((f[0]["clock"].as_str(), f[4]["clock"].as_str()), (Some("gpu"), Some("host")));
        assert_eq!((f[0].get("transfer_bytes"), f[4]["transfer_bytes"].as_u64()), (None, Some(4)));
        assert_eq!((f[0]["memory"].as_str(), f[4]["memory"].as_str()), (Some("pinned"), Some("pageable")));
        let doc: figures::Document = serde_json::from_value(doc.clone()).unwrap();
        assert_eq!(doc.figures, out.figures(), "the document reads back as the schema's");
        assert_eq!(f[3]["stats"]["q3_ms"], 0.15, "a best time is its own quartile");
        assert_eq!((f[0]["name"].as_str(), f[0]["stats"]["median_ms"].as_f64()), (Some("one stream"), Some(16.0)));
        assert_eq!(f[0]["stats"], serde_json::to_value(stats(16.0)).unwrap(), "the stats as they serialize");
        assert_eq!(f[1]["name"], "one stream (2)", "names stay one of a kind");
        assert_eq!(f[2]["bound_ms"], 5.6);
        assert_eq!(f[2]["depends_on"], serde_json::json!(["plan", "steps"]));
        assert_eq!(f[2]["calibrated"], serde_json::json!(["steps"]));
        assert!(f[0].get("depends_on").is_none() && f[0].get("best").is_none(), "{}", f[0]);
        assert_eq!((f[3]["best"].as_bool(), f[3]["stats"]["runs"].as_u64()), (Some(true), Some(1)));
        assert!(Output::new(true).document(&1).unwrap().get("figures").is_none(), "no names, no list");
    }

    #[test]
    fn a_sweep_is_named_by_kind_direction_and_size_and_drawn() {
        use crate::fit::DirectionTimes;
        let sizes = [4096, 1 << 20];
        let times = vec![
            vec![
                DirectionTimes { htod: stats(0.007), dtoh: stats(0.0065) },
                DirectionTimes { htod: stats(0.010), dtoh: stats(0.011) },
            ],
            vec![
                DirectionTimes { htod: stats(0.025), dtoh: stats(0.024) },
                DirectionTimes { htod: stats(0.2), dtoh: stats(0.25) },
            ],
        ];
        let out = Output::new(true);
        out.sweep(&sizes, &[("pinned", MemoryKind::Pinned), ("pageable", MemoryKind::Pageable)], &times);
        let names: Vec<String> = out.figures().into_iter().map(|f| f.name).collect();
        assert_eq!(names[..4], ["pinned H2D 4 KiB", "pinned D2H 4 KiB", "pageable H2D 4 KiB", "pageable D2H 4 KiB"]);
        assert_eq!((names.len(), names[4].as_str()), (8, "pinned H2D 1 MiB"));
        assert_eq!((out.figures()[7].stats, out.figures()[7].memory), (stats(0.25), MemoryKind::Pageable));
        let lines = rate_series(&out.figures());
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].label, "pinned H2D");
        assert_eq!(lines[0].points[1].0, (1 << 20) as f64);
        assert!((lines[0].points[1].1 - stats(0.025).gbps(1 << 20)).abs() < 1e-9, "{:?}", lines[0]);
        let path = std::env::temp_dir().join(format!("rates-{}.svg", std::process::id()));
        out.rate_chart(Some(&path), Some(63.0)).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("PCIe link, raw rate per direction: 63.0 GB/s") && svg.contains(">pageable D2H<"));
        let _ = std::fs::remove_file(path);
        let sized = Figure::sized("zero-copy, one pass", 1 << 20, &stats(1.0));
        assert_eq!((sized.name.as_str(), sized.transfer_bytes), ("zero-copy, one pass, 1 MiB", Some(1 << 20)));
    }

    #[test]
    fn a_pipeline_report_is_named_run_by_run_and_part_by_part() {
        use crate::{
            bound::{AgainstBound, Bound, BoundedRun, PartCosts, PipelineReport},
            pipeline::Buffering,
        };
        let costs = PartCosts {
            htod_ms: 0.15,
            kernel_ms: 0.16,
            dtoh_ms: 0.14,
            chain_ms: 0.46,
            all_htod_ms: 5.0,
            all_dtoh_ms: 5.1,
            copies_ms: 5.6,
            kernels_ms: 5.2,
            busiest_buffer: vec![(1, 15.6), (4, 3.9)],
            streams: 8,
            empty: vec![],
        };
        let run = |name: &str, ms: f64, streams: usize| BoundedRun {
            name: name.into(),
            buffering: Buffering::per_stream(streams),
            against_bound: AgainstBound::new(stats(ms), Bound::new(&costs, Buffering::per_stream(streams))),
        };
        let out = Output::new(true);
        out.pipeline(&PipelineReport {
            costs: costs.clone(),
            runs: vec![run("one stream", 15.7, 1), run("4 streams", 5.96, 4)],
        });
        let f = out.figures();
        assert_eq!(f.len(), 10);
        assert_eq!((f[0].name.as_str(), f[0].bound_ms), ("one stream", Some(15.6)));
        assert_eq!((f[1].name.as_str(), f[1].bound_ms), ("4 streams", Some(5.6)));
        assert_eq!(f[1].stats.median_ms, 5.96);
        assert_eq!(
            (f[1].depends_on.clone(), f[1].calibrated.clone()),
            (vec!["plan".into(), "steps".into()], vec!["steps".into()])
        );
        let part = |name: &str| f.iter().find(|x| x.name == name).unwrap();
        assert_eq!(part("one chunk's H2D, best").stats.median_ms, 0.15);
        assert!(part("one chunk's H2D, best").best && part("one chunk's H2D, best").calibrated.is_empty());
        assert!(part("bound part: copies both ways, best").calibrated.is_empty());
        assert_eq!(part("bound part: kernels, best").calibrated, ["steps"]);
    }
}
