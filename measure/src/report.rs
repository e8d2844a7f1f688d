//! What a person reads: aligned tables, verdicts, sizes, and JSON for machines.

use std::io::IsTerminal as _;

use serde::Serialize;

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

/// Where a lesson's output goes: readable text, or (with `--json`) one JSON document on stdout.
pub struct Output {
    pub json: bool,
    /// The GPUs the run used, for the machine fingerprint of its JSON.
    devices: std::cell::RefCell<Vec<serde_json::Value>>,
}

/// The version of the JSON documents the lessons print: `{"schema_version", "machine", "result"}`.
/// It changes when a document's shape does, so that a comparison of two runs knows what it reads.
pub const SCHEMA_VERSION: u32 = 1;

impl Output {
    pub fn new(json: bool) -> Output {
        Output { json, devices: Default::default() }
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
    /// what ran it (host, CPU, OS, GPUs with driver and link, the command, the time).
    pub fn finish(&self, value: &impl Serialize) -> anyhow::Result<()> {
        if self.json {
            let doc = serde_json::json!({
                "schema_version": SCHEMA_VERSION,
                "machine": fingerprint(&self.devices.borrow()),
                "result": value,
            });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        Ok(())
    }
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
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
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
}
