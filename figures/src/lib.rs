//! The figures' JSON: one typed schema that the lessons write (through `measure`) under `--json`, and
//! that every tool reads (`cargo xtask compare`, its drift table and its interleaved mode, `cargo
//! xtask results`). A tool reads what a figure says of itself and infers nothing from its name.
//!
//! A lesson's document is `{"schema_version", "machine", "result", "figures"}` ([`Document`]): the
//! machine that ran it, the lesson's own result (free-form), and its timed figures ([`Figure`]), each
//! with its statistics ([`Stats`]), the clock that timed it ([`Clock`]), the host memory its transfers
//! touch ([`MemoryKind`]), the bytes it moved and each of its transfers moved, and the settings of the run
//! its work depends on.
//!
//! ```
//! use figures::{Clock, Document, Figure, MemoryKind, Stats};
//!
//! let stats = Stats::from_samples(&[1.02, 1.00, 1.01])?;
//! let f = Figure::sized("pageable H2D", 64 << 20, &stats).memory(MemoryKind::Pageable);
//! assert_eq!((f.name.as_str(), f.clock, f.memory.cpu_paged()), ("pageable H2D 64 MiB", Clock::Gpu, true));
//! let doc: Document = serde_json::from_value(serde_json::json!({
//!     "schema_version": figures::SCHEMA_VERSION, "machine": {}, "result": {}, "figures": [f],
//! }))?;
//! assert_eq!(doc.figures[0].transfer_bytes, Some(64 << 20));
//! # Ok::<(), anyhow::Error>(())
//! ```

use serde::{Deserialize, Serialize};

/// The version of the documents: 2 since each figure says its memory (1: `cpu_paged`, read as
/// pageable where set and pinned elsewhere). It changes when a document's shape does.
pub const SCHEMA_VERSION: u32 = 2;

/// A lesson's `--json` document.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Document {
    #[serde(default)]
    pub schema_version: u32,
    /// What ran it: host, CPU, OS, GPUs with driver and link, the command line, the time.
    #[serde(default)]
    pub machine: serde_json::Value,
    /// The lesson's own result: its settings (`plan`, `steps`, `sizes`...) and everything it measured.
    #[serde(default)]
    pub result: serde_json::Value,
    /// Its timed figures, in the order it named them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub figures: Vec<Figure>,
    /// The arguments that make another run do this run's work: the settings it calibrated, as flags
    /// (`["--iters", "1234"]`, the kernel's rounds `overlap` fitted to the copies). Empty where it
    /// calibrated nothing. `compare --interleave` passes them to every run of A and B, so that the
    /// pairs time the same work and the calibration's spread is not part of their noise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeat_with: Vec<String>,
}

/// The spread of repeated measurements, in milliseconds.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// The third quartile (linear between the runs around it): with `min_ms`, the interval over which
    /// most runs fell, as nvbench's robust compare takes it (`[min, q3]`: timings spread upwards). Absent
    /// from runs made before it was recorded.
    #[serde(default)]
    pub q3_ms: f64,
    pub runs: usize,
    /// Coefficient of variation: the runs' standard deviation over their mean (0 for one run), as
    /// nvbandwidth reports it: how far apart two runs must be before a difference means something.
    pub cv: f64,
}

impl Stats {
    pub fn from_samples(samples: &[f64]) -> anyhow::Result<Stats> {
        if samples.is_empty() {
            anyhow::bail!("no measurements");
        }
        if let Some(bad) = samples.iter().find(|s| !s.is_finite() || **s < 0.0) {
            anyhow::bail!("a measurement came out as {bad} ms");
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median_ms = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        let q3_ms = quantile(&v, 0.75);
        let mean = v.iter().sum::<f64>() / n as f64;
        let cv = if n > 1 && mean > 0.0 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() / mean
        } else {
            0.0
        };
        Ok(Stats { median_ms, min_ms: v[0], max_ms: v[n - 1], q3_ms, runs: n, cv })
    }

    /// One time, `ms`, as the best of several runs (a bound's part): its own quartile.
    pub fn one(ms: f64) -> Stats {
        Stats { median_ms: ms, min_ms: ms, max_ms: ms, q3_ms: ms, runs: 1, cv: 0.0 }
    }

    /// Bandwidth of moving `bytes` in the median time, GB/s (10^9 bytes per second).
    pub fn gbps(&self, bytes: usize) -> f64 {
        bytes as f64 / (self.median_ms * 1e-3) / 1e9
    }
}

/// The `q` quantile (0 to 1) of `sorted` (ascending, not empty), linear between the values around it.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let at = q * (sorted.len() - 1) as f64;
    let (below, frac) = (at.floor() as usize, at.fract());
    sorted[below] + frac * (sorted[(below + 1).min(sorted.len() - 1)] - sorted[below])
}

/// Which clock timed a figure.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// CUDA events around the GPU's work.
    Gpu,
    /// The host's clock: the time in the calls, or the caller's wait for the work to finish.
    Host,
}

/// The host memory a figure's transfers touch, as the lesson allocated it.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// Page-locked host memory (`cudaMallocHost`): copied by DMA. Also the kind of a figure that
    /// moves no host memory of its own (a kernel, a pipeline's bound part), which a lesson states.
    #[default]
    Pinned,
    /// Pinned and write-combined (`cudaHostAllocWriteCombined`).
    WriteCombined,
    /// Pageable memory pinned in place (`cudaHostRegister`).
    Registered,
    /// Pinned memory the GPU reads and writes in place over the link (zero-copy, `cudaHostAllocMapped`).
    Mapped,
    /// Pageable memory (`malloc`): the driver stages it through pinned buffers of its own, on the CPU.
    Pageable,
    /// Managed memory: the driver migrates its pages, on faults or prefetches.
    Managed,
    /// Device memory alone: no host memory moves.
    Device,
}

impl MemoryKind {
    /// The CPU's side moves its bytes page by page (pageable memory the driver stages, managed memory
    /// migrated on faults): such figures follow the host's memory, its page faults and its clocks, and
    /// move far more from one process to the next.
    pub fn cpu_paged(self) -> bool {
        matches!(self, MemoryKind::Pageable | MemoryKind::Managed)
    }

    /// `pinned`, `pageable`, as the JSON writes it.
    pub fn label(self) -> &'static str {
        match self {
            MemoryKind::Pinned => "pinned",
            MemoryKind::WriteCombined => "write-combined",
            MemoryKind::Registered => "registered",
            MemoryKind::Mapped => "mapped",
            MemoryKind::Pageable => "pageable",
            MemoryKind::Managed => "managed",
            MemoryKind::Device => "device",
        }
    }
}

/// A timed figure a lesson reports, named for what it is, as its JSON lists it under `"figures"`.
///
/// A name says what was timed, from the most general to the most particular, parts apart with ` / `
/// where a figure has several (`1000 x 4 KiB / memcpy each / host`: the set, the way, what was timed;
/// `pinned H2D 4 B / caller waits`); a sweep's names end with the size (`pinned H2D 4 KiB`). Tools
/// match figures of two runs by name, and read the rest from the figure's fields, never from its name.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    /// What it is, in words, one of a kind in its run: `pinned H2D 4 KiB`, `4 streams`.
    pub name: String,
    pub stats: Stats,
    /// The clock that timed it.
    pub clock: Clock,
    /// The host memory its transfers touch. Absent from documents of schema 1: read from their
    /// `cpu_paged` ([`Figure::schema_1`]).
    #[serde(default)]
    pub memory: MemoryKind,
    /// The bytes each transfer it times moves (one copy, one buffer of many, a pipeline's chunk), where
    /// it times transfers: small transfers are ruled by a per-copy cost, which moves more from one
    /// process to the next than a link's rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_bytes: Option<usize>,
    /// Schema 1's word for pageable or managed memory; read, never written.
    #[serde(default, skip_serializing)]
    cpu_paged: bool,
    /// The line of figures over sizes it belongs to (`pinned H2D`), and the bytes it moved: a picture
    /// of rates draws it at that size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
    /// The least of its runs rather than their median (a bound's part): `stats` holds that one time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub best: bool,
    /// A lower bound on its time measured on the same work in the same run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_ms: Option<f64>,
    /// A model's prediction of its time, made from costs measured on the same work in the same run: not
    /// a bound (a run may beat it), but like one it follows the work a run calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_ms: Option<f64>,
    /// Settings of the run (keys of its `result`) that decide the work it measures beyond its name:
    /// where two runs differ in one, their figures measure different work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Of those, the ones the run calibrated (the kernel's rounds, made to take as long as the copies):
    /// where two runs differ in these alone, the figure is compared by its time over its bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calibrated: Vec<String>,
    /// GPU-timed, but paced by the host: the host was in the calls that queued its work for at least
    /// [`HOST_PACED_FROM`] of its GPU time, measured in the same run ([`Figure::paced_by`]). The GPU
    /// cannot start work before the call that queues it, so such a time is the pace of the host's calls
    /// (or of a queue that made them wait), and the host's clocks move it as they move host-timed figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_paced: bool,
}

/// The share of a GPU-timed figure's time that the host spent in the calls that queued its work, from
/// which the figure is paced by the host ([`Figure::host_paced`]).
pub const HOST_PACED_FROM: f64 = 0.85;

impl Figure {
    /// A figure named `name`, of `stats`, timed by CUDA events, of pinned memory (say otherwise with
    /// [`Figure::on_host`], [`Figure::memory`]).
    pub fn new(name: impl Into<String>, stats: &Stats) -> Figure {
        Figure {
            name: name.into(),
            stats: *stats,
            clock: Clock::Gpu,
            memory: MemoryKind::Pinned,
            transfer_bytes: None,
            cpu_paged: false,
            series: None,
            bytes: None,
            best: false,
            bound_ms: None,
            model_ms: None,
            depends_on: Vec::new(),
            calibrated: Vec::new(),
            host_paced: false,
        }
    }

    /// A figure of `bytes` in `series`, each transfer of `bytes`, named by both: `pinned H2D 4 KiB`, or,
    /// where the series is a list, `zero-copy, one pass, 1 MiB`.
    pub fn sized(series: impl Into<String>, bytes: usize, stats: &Stats) -> Figure {
        let series = series.into();
        let size = chart::size_label(bytes as f64);
        let name = if series.contains(',') { format!("{series}, {size}") } else { format!("{series} {size}") };
        Figure { series: Some(series), bytes: Some(bytes), transfer_bytes: Some(bytes), ..Figure::new(name, stats) }
    }

    /// The best (least) time of several runs, `ms`, such as a bound's part.
    pub fn best(name: impl Into<String>, ms: f64) -> Figure {
        Figure { best: true, ..Figure::new(name, &Stats::one(ms)) }
    }

    /// Timed on the host's clock.
    pub fn on_host(self) -> Figure {
        Figure { clock: Clock::Host, ..self }
    }

    /// Its transfers touch host memory of kind `memory`.
    pub fn memory(self, memory: MemoryKind) -> Figure {
        Figure { memory, ..self }
    }

    /// Each transfer it times moves `bytes`.
    pub fn transfers(self, bytes: usize) -> Figure {
        Figure { transfer_bytes: Some(bytes), ..self }
    }

    /// Held against a lower bound of `ms`, measured on the same work in the same run.
    pub fn against(self, bound_ms: f64) -> Figure {
        Figure { bound_ms: Some(bound_ms), ..self }
    }

    /// Held against a model's prediction of `ms`, made from costs measured on the same work in the same
    /// run.
    pub fn against_model(self, model_ms: f64) -> Figure {
        Figure { model_ms: Some(model_ms), ..self }
    }

    /// A GPU-timed figure whose work the host queued in calls that took `host` (their median, measured in
    /// the same run): paced by the host where those took [`HOST_PACED_FROM`] of its GPU time or more.
    pub fn paced_by(self, host: &Stats) -> Figure {
        let paced = self.clock == Clock::Gpu && host.median_ms >= HOST_PACED_FROM * self.stats.median_ms;
        Figure { host_paced: paced, ..self }
    }

    /// Its work depends on the run's setting `key` (a key of the lesson's JSON result).
    pub fn depends_on(mut self, key: &str) -> Figure {
        self.depends_on.push(key.to_string());
        self
    }

    /// Its work depends on the run's setting `key`, which the run calibrated.
    pub fn calibrated(mut self, key: &str) -> Figure {
        self.calibrated.push(key.to_string());
        self.depends_on(key)
    }

    /// A figure read from a document of schema 1, which said `cpu_paged` and not its memory: pageable
    /// where it said so, else pinned.
    pub fn schema_1(self) -> Figure {
        let memory = if self.cpu_paged { MemoryKind::Pageable } else { self.memory };
        Figure { memory, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_writes_and_reads_back() {
        let f = Figure::sized("pinned H2D", 4096, &Stats::one(0.007)).on_host().depends_on("plan");
        let text = serde_json::to_string(&f).unwrap();
        assert!(!text.contains("cpu_paged") && text.contains("\"memory\":\"pinned\""), "{text}");
        assert_eq!(serde_json::from_str::<Figure>(&text).unwrap(), f);
        assert_eq!(Figure::sized("zero-copy, one pass", 1 << 20, &Stats::one(1.0)).name, "zero-copy, one pass, 1 MiB");
        assert_eq!(Figure::sized("pinned H2D", 1536 << 20, &Stats::one(1.0)).name, "pinned H2D 1.5 GiB");
    }

    /// A GPU time the host's calls took most of is paced by the host; one they took less of, or a host
    /// time, is not; and the flag is written only where it is set.
    #[test]
    fn a_gpu_time_the_hosts_calls_filled_is_paced_by_the_host() {
        let gpu = |ms| Figure::new("w / gpu", &Stats::one(ms));
        assert!(gpu(1.0).paced_by(&Stats::one(0.9)).host_paced);
        assert!(!gpu(1.0).paced_by(&Stats::one(0.5)).host_paced);
        assert!(!gpu(1.0).on_host().paced_by(&Stats::one(0.9)).host_paced, "a host time is host-timed already");
        let text = serde_json::to_string(&gpu(1.0).paced_by(&Stats::one(0.9))).unwrap();
        assert!(text.contains("\"host_paced\":true"), "{text}");
        assert!(!serde_json::to_string(&gpu(1.0)).unwrap().contains("host_paced"));
        assert_eq!(serde_json::from_str::<Figure>(&text).unwrap(), gpu(1.0).paced_by(&Stats::one(0.9)));
    }

    #[test]
    fn schema_1_says_cpu_paged_and_reads_as_pageable() {
        let old = r#"{"name": "x", "clock": "gpu", "cpu_paged": true,
            "stats": {"median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0, "runs": 3, "cv": 0.0}}"#;
        let f = serde_json::from_str::<Figure>(old).unwrap().schema_1();
        assert_eq!((f.memory, f.stats.q3_ms), (MemoryKind::Pageable, 0.0));
        let new = serde_json::from_str::<Figure>(&old.replace("true", "false")).unwrap().schema_1();
        assert_eq!(new.memory, MemoryKind::Pinned);
    }

    #[test]
    fn stats_of_samples() {
        let s = Stats::from_samples(&[3.0, 1.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.median_ms, s.min_ms, s.max_ms, s.q3_ms, s.runs), (2.5, 1.0, 4.0, 3.25, 4));
        assert!(Stats::from_samples(&[]).is_err() && Stats::from_samples(&[f64::NAN]).is_err());
        assert!((Stats::one(1.0).gbps(1_000_000) - 1.0).abs() < 1e-12);
    }
}
