//! `cargo xtask compare A.json B.json`: which timed figures of two runs of a lesson (`--json`) changed
//! beyond what moves from one process to the next, which way, and which could not be told. Keep a run;
//! compare after a driver update, a BIOS change, a change of your own. Two folders compare their files
//! of the same name. It exits 1 when a figure is confirmed slower, so that CI can use it.
//!
//! Two runs made apart cannot see a change smaller than their drift (below); to see a few per cent, run
//! the two builds in turn on one machine: `compare --interleave A B` ([`interleave`], judged by
//! [`paired`]).
//!
//! # Which figures
//!
//! A lesson names its figures (`"figures": [{"name": "pinned H2D 4 KiB", "stats": {...}}]`, see
//! `figures::Figure`, the schema every tool reads: a figure says its clock, its memory and its bytes,
//! and nothing is read from its name), and figures of the same name are compared. A run made before its
//! lesson named them is named here as the lesson names them now, where this module knows the lesson's old
//! form ([`learned`]: `small_copies`'s `sets[7].ways[batch, any order].gpu` is `model-like / batch, any
//! order / gpu`; `latency`'s `copies[0].host` is `pinned H2D 4 B / caller waits`). Other files without
//! names are compared figure by figure at the same place in their `result`, every `Stats` object there.
//!
//! The settings that decide what a run measures (`plan`, `work`, `sizes`, ...) are compared first, and
//! each difference is named. A figure that depends on a setting that differs measures different work,
//! and is left out, with one exception: a setting the run *calibrated* (the kernel's rounds, which
//! `overlap` fits to the copies' time in each run, so that no two default runs have the same kernel).
//! A figure held against a lower bound measured on its own work in its own run is then compared by its
//! time over that bound, and figures that do not depend on the calibration (the copies) as they are.
//!
//! # The verdict
//!
//! After nvbench's robust compare (`nvbench-compare-robust`), each run's figure is its median with an
//! interval, from its fastest run to its third quartile (`min_ms`, `q3_ms`: timings spread upwards; a
//! run made before the quartile was recorded gives `median + 0.675 cv`, the quartile of a normal spread,
//! at most its slowest run). What one run cannot show is how far the next process lands: that is the
//! figure's *drift*, from a table by kind of figure (`crate::drift`: the clock, pageable memory or not,
//! small or large transfers, the time), fitted from back-to-back runs. Then, with `d` the drift and
//! `B/A` the ratio of the medians:
//!
//! - **same**: `B/A` within a factor `1 + d` either way: no more than quiet processes move;
//! - **slower**: B's median above A's interval widened by the drift (`q3_A (1 + d)`): beyond the drift
//!   and beyond any run A had;
//! - **faster**: B's median below `min_A / (1 + d)`;
//! - **ambiguous**: past the drift, but within A's own runs widened by it: A's runs reached as far, so
//!   one pair of runs cannot say; or within the drift, but one run's own runs reach past the other's
//!   by more than the drift (a run beside a load, its median one of many places it lands). Run both
//!   again, or give `--baseline` runs, or run them in turn (`--interleave`).
//!
//! A regression is a figure found slower: the command exits 1 when there is one, 0 when every figure
//! is the same, faster or ambiguous, and 2 when the files could not be compared.
//!
//! With `--baseline` runs made as A was, the drift of each kind they have figures of is fitted from
//! them and A, as `--calibrate` fits the shipped table (with a single baseline run it can only widen
//! it: two runs say little of a spread).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{bail, Context as _};
use figures::{Clock, Figure, MemoryKind};
use serde_json::Value;

use crate::{
    drift::{DriftTable, FigureKind, Move},
    flags::CompareFlags,
    tools,
};

/// What no number of runs resolves in ms: CUDA events resolve about half a microsecond, so two medians
/// may differ by a microsecond.
pub const RESOLVED_MS: f64 = 0.001;

/// The settings that decide what a run measures, where its `result` has them.
const SETTINGS: [&str; 7] = ["plan", "steps", "work", "sizes", "bytes", "repeats", "size"];

/// How a figure is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Its time.
    Time,
    /// Its time over the lower bound measured on its own work in its own run (1 / efficiency).
    OverBound,
    /// Its time over a model's prediction made from costs measured on its own work in its own run.
    OverModel,
}

/// One figure as one run has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub name: String,
    /// Its median, and its interval: the fastest run to the third quartile, ms.
    pub ms: f64,
    pub lo_ms: f64,
    pub hi_ms: f64,
    /// The clock that timed it, and the host memory its transfers touch, as the run says.
    pub clock: Clock,
    pub memory: MemoryKind,
    /// The bytes each of its transfers moves, where the run says.
    pub transfer_bytes: Option<usize>,
    pub bound_ms: Option<f64>,
    pub model_ms: Option<f64>,
    pub depends_on: Vec<String>,
    pub calibrated: Vec<String>,
    /// GPU-timed, paced by the host's calls, as the run says ([`Figure::host_paced`]).
    pub host_paced: bool,
}

impl Reading {
    /// A figure of a `Stats` object (`median_ms`, `runs`, and where it has them `min_ms`, `q3_ms`,
    /// `max_ms`, `cv`), or `None` where `stats` is not one; timed by `clock`, of `memory`.
    fn of(name: String, stats: &Value, clock: Clock, memory: MemoryKind) -> Option<Reading> {
        let o = stats.as_object()?;
        o.contains_key("runs").then_some(())?;
        let ms = o.get("median_ms")?.as_f64()?;
        let get = |k: &str| o.get(k).and_then(Value::as_f64).filter(|x| x.is_finite() && *x > 0.0);
        let lo_ms = get("min_ms").unwrap_or(ms).min(ms);
        let hi_ms = match get("q3_ms") {
            Some(q3) => q3,
            // Before the quartile was recorded: a normal spread's, within the slowest run.
            None => {
                let cv = o.get("cv").and_then(Value::as_f64).unwrap_or(0.0);
                (ms * (1.0 + 0.675 * cv)).min(get("max_ms").unwrap_or(f64::INFINITY))
            }
        }
        .max(ms);
        Some(Reading {
            name,
            ms,
            lo_ms,
            hi_ms,
            clock,
            memory,
            transfer_bytes: None,
            bound_ms: None,
            model_ms: None,
            depends_on: Vec::new(),
            calibrated: Vec::new(),
            host_paced: false,
        })
    }
}

/// `4 KiB`, `1.5 MiB`, as the lessons write sizes (`cuda_scope::Bytes`).
pub fn fmt_bytes(bytes: usize) -> String {
    chart::size_label(bytes as f64)
}

/// One run's figure in a comparison: its median and interval, ms or time over bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Side {
    pub center: f64,
    pub lo: f64,
    pub hi: f64,
}

/// What became of a figure from A to B (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Slower,
    Faster,
    Ambiguous,
    Same,
}

impl Verdict {
    /// As nvbench's robust compare writes it: `SLOW`, `FAST`, `AMBG`, `SAME`.
    pub fn tag(self) -> &'static str {
        match self {
            Verdict::Slower => "SLOW",
            Verdict::Faster => "FAST",
            Verdict::Ambiguous => "AMBG",
            Verdict::Same => "SAME",
        }
    }
}

/// One figure in both runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub name: String,
    /// `lesson: name`, as the drift table names a restless figure.
    pub figure: String,
    pub kind: FigureKind,
    /// Whether its drift is its own (a restless figure's) rather than its kind's.
    pub own: bool,
    pub measure: Measure,
    pub a: Side,
    pub b: Side,
    /// How far a quiet second process may land, as a factor `1 + drift` either way.
    pub drift: f64,
    pub verdict: Verdict,
    /// GPU-timed but paced by the host's calls in either run ([`Reading::host_paced`]).
    pub host_paced: bool,
}

impl Change {
    fn new(
        name: String,
        lesson: &str,
        measure: Measure,
        a: &Reading,
        b: &Reading,
        table: &DriftTable,
    ) -> Option<Change> {
        let side = |r: &Reading| -> Option<Side> {
            let over = match measure {
                Measure::Time => 1.0,
                Measure::OverBound => r.bound_ms.filter(|b| *b > 0.0)?,
                Measure::OverModel => r.model_ms.filter(|m| *m > 0.0)?,
            };
            Some(Side { center: r.ms / over, lo: r.lo_ms / over, hi: r.hi_ms / over })
        };
        let (sa, sb) = (side(a)?, side(b)?);
        if !(sa.center > 0.0 && sb.center > 0.0 && sb.center.is_finite()) {
            return None;
        }
        // The faster run's time decides the kind's scale: a jump to a slower time is judged by the
        // figure's quiet one.
        let fast = a.ms.min(b.ms);
        let kind = match measure {
            Measure::OverBound => FigureKind::OverBound,
            Measure::OverModel => FigureKind::OverModel,
            Measure::Time => {
                let pageable = a.memory.cpu_paged() || b.memory.cpu_paged();
                FigureKind::of(a.clock, pageable, a.transfer_bytes.or(b.transfer_bytes), fast)
            }
        };
        let resolution = if measure == Measure::Time { RESOLVED_MS / fast } else { 0.0 };
        let figure = format!("{lesson}: {name}");
        let (drift, own) = table.drift_of(kind, &figure);
        let drift = drift.max(resolution);
        let host_paced = a.host_paced || b.host_paced;
        let verdict = Verdict::Same;
        let mut c = Change { name, figure, kind, own, measure, a: sa, b: sb, drift, verdict, host_paced };
        c.verdict = c.judge();
        Some(c)
    }

    fn judge(&self) -> Verdict {
        let up = 1.0 + self.drift;
        let ratio = self.b.center / self.a.center;
        if self.within_drift() {
            if self.spread_past_drift() {
                Verdict::Ambiguous
            } else {
                Verdict::Same
            }
        } else if ratio > up {
            if self.b.center > self.a.hi * up {
                Verdict::Slower
            } else {
                Verdict::Ambiguous
            }
        } else if self.b.center < self.a.lo / up {
            Verdict::Faster
        } else {
            Verdict::Ambiguous
        }
    }

    /// Whether B's median lies within a factor `1 + drift` of A's, either way.
    fn within_drift(&self) -> bool {
        let (up, ratio) = (1.0 + self.drift, self.b.center / self.a.center);
        ratio <= up && ratio >= 1.0 / up
    }

    /// Whether one run's own spread reaches past the other's by more than the drift (B's third quartile
    /// past A's times `1 + drift`, or its fastest run below A's over it, or A's past B's), or whether its
    /// span (third quartile over fastest run) is more than `1 + drift` times the other's: its median then
    /// says little of where the next run of it would land (a figure whose runs always spread wide spans
    /// alike in both, and is judged by its medians). Beside a load, pageable D2H 64 KiB had a median 80% over
    /// A's, within its drift, but a third quartile 50 times A's, and moved 31-fold over long runs; D2H
    /// 16 MiB, +240% within a drift of 393%, spanned 5.3x in its own runs and moved +517% over long
    /// runs: one pair of runs cannot call either the same.
    fn spread_past_drift(&self) -> bool {
        let up = 1.0 + self.drift;
        let span = |x: &Side| x.hi / x.lo;
        let past = |x: &Side, y: &Side| x.hi > y.hi * up || x.lo < y.lo / up || span(x) > span(y) * up;
        past(&self.b, &self.a) || past(&self.a, &self.b)
    }

    /// The smallest changes this comparison would have called a change, as fractions of A's median:
    /// (slower, faster). A slower B must pass both its drift (`1 + drift`) and A's third quartile times
    /// it; a faster one both its drift and A's fastest run over it ([`Change::judge`]). A change under
    /// these reads "same" however real it is.
    pub fn detectable(&self) -> (f64, f64) {
        let up = 1.0 + self.drift;
        let slower = (self.a.hi / self.a.center).max(1.0) * up - 1.0;
        let faster = 1.0 - (self.a.lo / self.a.center).min(1.0) / up;
        (slower, faster)
    }

    /// GPU-timed, of memory the GPU reaches itself (or a pipeline over its bound or model), and not paced
    /// by the host's calls: not moved by the host's memory, page faults and clocks as pageable, managed,
    /// host-timed and host-paced figures are.
    pub fn on_the_gpu(&self) -> bool {
        match self.kind {
            FigureKind::Time { clock, pageable, .. } => clock == Clock::Gpu && !pageable && !self.host_paced,
            FigureKind::OverBound | FigureKind::OverModel => true,
        }
    }

    /// (B - A) / A, of the medians.
    pub fn change(&self) -> f64 {
        self.b.center / self.a.center - 1.0
    }

    /// The verdict with its reason: `slower: past its drift and A's runs (q3 +0.4%)`.
    pub fn why(&self) -> String {
        let pct = |x: f64| format!("{:+.1}%", 100.0 * x);
        let (q3, min) = (self.a.hi / self.a.center - 1.0, self.a.lo / self.a.center - 1.0);
        let (further, nearer) = match self.measure {
            Measure::Time => ("slower", "faster"),
            Measure::OverBound => ("slower: further from its bound", "faster: nearer its bound"),
            Measure::OverModel => ("slower: further over its model", "faster: nearer its model"),
        };
        match self.verdict {
            Verdict::Same => {
                let (slower, faster) = self.detectable();
                format!("same: a change under +{:.1}% / -{:.1}% would not show here", 100.0 * slower, 100.0 * faster)
            }
            Verdict::Slower => format!("{further}, past its drift and A's runs (q3 {})", pct(q3)),
            Verdict::Faster => format!("{nearer}, past its drift and A's runs (fastest {})", pct(min)),
            // Within its drift, ambiguous only by the runs' spread (`judge`).
            Verdict::Ambiguous if self.within_drift() => {
                "ambiguous: within its drift, but one run's own spread reaches past the other's with it".into()
            }
            Verdict::Ambiguous if self.change() > 0.0 => {
                format!("ambiguous: past its drift, not A's runs with it (q3 {})", pct(q3))
            }
            Verdict::Ambiguous => format!("ambiguous: past its drift, not A's runs with it (fastest {})", pct(min)),
        }
    }

    fn value(&self, v: f64) -> String {
        match self.measure {
            Measure::OverBound => format!("{v:.3}x bound"),
            Measure::OverModel => format!("{v:.3}x model"),
            Measure::Time if v < 0.1 => format!("{:.2} µs", v * 1e3),
            Measure::Time => format!("{v:.3} ms"),
        }
    }
}

/// How the two runs' figures were matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matched {
    /// By the names the runs gave them.
    Names,
    /// By name, the older run's (`"A"`, `"B"`, `"A and B"`) named here as its lesson names them now.
    Learned(&'static str),
    /// By their places in the JSON.
    Places,
}

/// Two runs compared.
#[derive(Debug)]
pub struct Comparison {
    pub changes: Vec<Change>,
    /// Figures of both runs that were not compared, and why.
    pub left_out: Vec<(String, String)>,
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    pub matched: Matched,
    /// (setting, A's, B's) where the runs differ.
    pub differing: Vec<(String, String, String)>,
    /// The differing settings that some figure names as calibrated.
    pub calibrated: Vec<String>,
}

impl Comparison {
    pub fn count(&self, v: Verdict) -> usize {
        self.changes.iter().filter(|c| c.verdict == v).count()
    }

    /// Every figure's movement, for a fit of the drift: its kind and how far B's median lands beyond
    /// A's interval, `ln(B / q3_A)` above it, `ln(B / min_A)` below it, 0 within it. That is what the
    /// drift must cover for a quiet B never to be called slower or faster.
    pub fn moves(&self) -> Vec<Move> {
        self.changes
            .iter()
            .map(|c| {
                let (b, a) = (c.b.center, &c.a);
                let beyond = if b > a.hi {
                    (b / a.hi).ln()
                } else if b < a.lo {
                    (b / a.lo).ln()
                } else {
                    0.0
                };
                Move { kind: c.kind, figure: c.figure.clone(), beyond }
            })
            .collect()
    }
}

/// The exit code: 2 where the files could not be compared, else 1 where a figure is slower, else 0.
pub fn main(flags: CompareFlags) -> ExitCode {
    match run(flags) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Compares, or calibrates, or runs two builds in turn; 1 where a figure was found slower, else 0.
pub fn run(flags: CompareFlags) -> anyhow::Result<u8> {
    if flags.interleave.interleave {
        return interleave::run(&flags);
    }
    if let Some(dir) = &flags.calibrate {
        let (table, text) = calibrate(dir)?;
        let out = flags.out.clone().unwrap_or_else(default_table_path);
        std::fs::write(&out, table.to_json()).with_context(|| format!("writing {}", out.display()))?;
        print!("{text}");
        let used = if tools::in_bundle() || flags.out.is_some() {
            format!("`compare --drift {}` holds changes against it", out.display())
        } else {
            "compare holds changes against it from the next build (commit it)".into()
        };
        println!("drift table written to {}: {used}", out.display());
        return Ok(0);
    }
    let (Some(a), Some(b)) = (&flags.a, &flags.b) else {
        bail!("compare needs two runs (A.json B.json, or two folders of them), or --calibrate DIR")
    };
    let table = match &flags.drift {
        Some(path) => DriftTable::read(path)?,
        None => default_table()?,
    };
    let pairs = pairs(a, b)?;
    if !flags.baseline.is_empty() && pairs.len() > 1 {
        bail!("--baseline goes with one pair of files, not folders");
    }
    println!("{}", describe_table(&table, flags.drift.as_deref()));
    let (mut slower, mut totals, mut compared) = (0, [0usize; 4], 0);
    let mut every: Vec<Change> = Vec::new();
    for (pa, pb) in &pairs {
        let label = label(pa, pb);
        if pairs.len() > 1 {
            println!("\n== {label}");
        }
        let (da, db) = (read(pa)?, read(pb)?);
        for d in [&da, &db] {
            if d["schema_version"].as_u64().is_some_and(|v| v > figures::SCHEMA_VERSION as u64) {
                bail!("{label}: schema version {} is newer than this xtask reads: build it anew", d["schema_version"]);
            }
        }
        for (what, key) in [("GPU", "name"), ("driver", "driver_version")] {
            let (x, y) = (&da["machine"]["gpus"][0][key], &db["machine"]["gpus"][0][key]);
            if x != y {
                println!("note: the {what} differs: {x} against {y}");
            }
        }
        let mut held = table.clone();
        if !flags.baseline.is_empty() {
            let mut runs = vec![da.clone()];
            for path in &flags.baseline {
                runs.push(read(path)?);
            }
            let mut moves = Vec::new();
            for i in 0..runs.len() {
                for j in (0..runs.len()).filter(|j| *j != i) {
                    moves.extend(compare(&runs[i], &runs[j], &table).moves());
                }
            }
            if moves.is_empty() {
                println!("note: the baseline runs have no figure in common with A: left out");
            }
            held = table.fit(&moves, flags.baseline.len() >= 2);
            let fitted = held.rows.iter().zip(&table.rows).filter(|(x, y)| x != y).count();
            println!(
                "drift: {fitted} kinds fitted from A and {} baseline runs{}",
                flags.baseline.len(),
                if flags.baseline.len() < 2 { " (one baseline run can only widen a drift)" } else { "" }
            );
        }
        let cmp = compare(&da, &db, &held);
        if cmp.changes.is_empty() {
            let why = match cmp.left_out.first() {
                Some((name, why)) => format!("no figure could be compared: {name} and the others {why}"),
                None => "no timed figures in common: are these two runs of the same lesson (with --json)?".into(),
            };
            if pairs.len() == 1 {
                bail!(why);
            }
            println!("{label}: {why}");
            continue;
        }
        compared += 1;
        print!("{}", report(&cmp, flags.all));
        println!("{label}: {}", summary(&cmp));
        for line in group_lines(&cmp.changes) {
            println!("{label}: {line}");
        }
        every.extend(cmp.changes.iter().cloned());
        slower += cmp.count(Verdict::Slower);
        for (i, v) in [Verdict::Slower, Verdict::Faster, Verdict::Ambiguous, Verdict::Same].iter().enumerate() {
            totals[i] += cmp.count(*v);
        }
    }
    if pairs.len() > 1 {
        let n: usize = totals.iter().sum();
        println!(
            "\nin all, {compared} of {} pairs compared: {} of {n} figures changed: {} slower, {} faster; {} ambiguous",
            pairs.len(),
            totals[0] + totals[1],
            totals[0],
            totals[1],
            totals[2]
        );
        for line in group_lines(&every) {
            println!("in all, {line}");
        }
    }
    if every.iter().any(|c| !c.on_the_gpu()) {
        println!("{HOST_APART}");
    }
    Ok(if slower > 0 { 1 } else { 0 })
}

/// The pairs of files to compare: `a` and `b`, or where both are folders, their `.json` files of the
/// same name.
fn pairs(a: &Path, b: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    match (a.is_dir(), b.is_dir()) {
        (false, false) => Ok(vec![(a.to_path_buf(), b.to_path_buf())]),
        (true, true) => {
            let names = |d: &Path| -> anyhow::Result<BTreeSet<std::ffi::OsString>> {
                Ok(std::fs::read_dir(d)
                    .with_context(|| format!("reading {}", d.display()))?
                    .flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .map(|e| e.file_name())
                    .collect())
            };
            let (na, nb) = (names(a)?, names(b)?);
            let both: Vec<PathBuf> = na.intersection(&nb).map(PathBuf::from).collect();
            if both.is_empty() {
                bail!("{} and {} have no .json file of the same name", a.display(), b.display());
            }
            for lone in na.symmetric_difference(&nb) {
                println!("note: {} is in one folder only: left out", lone.to_string_lossy());
            }
            Ok(both.into_iter().map(|n| (a.join(&n), b.join(&n))).collect())
        }
        _ => bail!("compare two files, or two folders of files: {} and {}", a.display(), b.display()),
    }
}

fn label(a: &Path, b: &Path) -> String {
    let name = |p: &Path| p.file_name().map_or(p.display().to_string(), |n| n.to_string_lossy().into_owned());
    if name(a) == name(b) {
        name(a)
    } else {
        format!("{} against {}", name(a), name(b))
    }
}

fn read(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a lesson's JSON output", path.display()))
}

/// Where the drift table lives: `xtask/drift.json` (compiled in), or `drift.json` in a bundle.
fn default_table_path() -> PathBuf {
    if tools::in_bundle() {
        tools::root().join("drift.json")
    } else {
        tools::root().join("xtask/drift.json")
    }
}

/// The table compare uses without `--drift`: in a bundle, a `drift.json` written there by
/// `--calibrate`, else the one compiled in.
fn default_table() -> anyhow::Result<DriftTable> {
    let path = default_table_path();
    if tools::in_bundle() && path.is_file() {
        return DriftTable::read(&path);
    }
    Ok(DriftTable::shipped())
}

fn describe_table(table: &DriftTable, path: Option<&Path>) -> String {
    let from = path.map_or("the shipped table, xtask/drift.json".to_string(), |p| p.display().to_string());
    if table.provisional_only() {
        format!(
            "drift: PROVISIONAL values by kind of figure ({from}): not yet fitted from runs on a GPU; \
             `cargo xtask compare --calibrate DIR` fits them (README)"
        )
    } else {
        format!("drift: by kind of figure, {} ({from})", table.source)
    }
}

/// Compares two lessons' documents (`{"result", "figures"}`; a bare result is read as one without names).
pub fn compare(a: &Value, b: &Value, table: &DriftTable) -> Comparison {
    let (ra, rb) = (learned_settings(a.get("result").unwrap_or(a)), learned_settings(b.get("result").unwrap_or(b)));
    let (ra, rb) = (&ra, &rb);
    let lesson = lesson_in(a).or_else(|| lesson_in(b)).unwrap_or_default();
    let ((na, la), (nb, lb)) = (readings(a), readings(b));
    let named = !na.is_empty() && !nb.is_empty();
    let matched = match (named, la, lb) {
        (false, ..) => Matched::Places,
        (true, true, true) => Matched::Learned("A and B"),
        (true, true, false) => Matched::Learned("A"),
        (true, false, true) => Matched::Learned("B"),
        (true, false, false) => Matched::Names,
    };
    let (mut fa, mut fb) = if named { (na, nb) } else { (by_place(ra), by_place(rb)) };
    // Where `work` was learned as `steps`, the figures that named it name `steps`.
    for (f, doc, learned) in [(&mut fa, a, ra), (&mut fb, b, rb)] {
        let result = doc.get("result").unwrap_or(doc);
        if learned.get("steps").is_some() && result.get("steps").is_none() {
            for k in f.iter_mut().flat_map(|r| r.depends_on.iter_mut().chain(r.calibrated.iter_mut())) {
                if k == "work" {
                    *k = "steps".into();
                }
            }
        }
    }
    let mut keys: BTreeSet<String> = SETTINGS.iter().map(|s| s.to_string()).collect();
    let depended: BTreeSet<String> = fa.iter().chain(&fb).flat_map(|f| f.depends_on.iter().cloned()).collect();
    keys.extend(depended.iter().cloned());
    let mut differing = differing_settings(ra, rb, &keys);
    // A setting a figure depends on that one run has and the other lacks (renamed between them, as
    // `work` became `steps`) cannot be taken as the same.
    for k in depended.iter().filter(|k| ra.get(k.as_str()).is_some() != rb.get(k.as_str()).is_some()) {
        let show = |r: &Value| r.get(k.as_str()).map_or("absent".to_string(), Value::to_string);
        differing.push((k.clone(), show(ra), show(rb)));
    }
    let differs = |k: &String| differing.iter().any(|d| &d.0 == k);
    let mut cmp = Comparison {
        changes: Vec::new(),
        left_out: Vec::new(),
        only_in_a: Vec::new(),
        only_in_b: Vec::new(),
        matched,
        differing: differing.clone(),
        calibrated: Vec::new(),
    };
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
        } else if depends.iter().all(|k| calibrated(k)) && x.model_ms.is_some() && y.model_ms.is_some() {
            Measure::OverModel
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
        cmp.changes.extend(Change::new(x.name.clone(), &lesson, measure, x, y, table));
    }
    cmp.only_in_b = fb.iter().filter(|y| fa.iter().all(|x| x.name != y.name)).map(|y| y.name.clone()).collect();
    cmp
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

/// What a person reads: the settings that differ and what was done about them, a table of the figures
/// that did not stay the same (every figure with `all`), and notes.
pub fn report(cmp: &Comparison, all: bool) -> String {
    let mut s = String::new();
    for (key, x, y) in &cmp.differing {
        s += &format!("note: the runs were set up differently: {key} is {x} in A and {y} in B\n");
    }
    let left = |why: &str| cmp.left_out.iter().filter(|l| l.1.contains(why)).count();
    for key in &cmp.calibrated {
        let over = cmp.changes.iter().filter(|c| c.measure != Measure::Time).count();
        s += &format!(
            "      {key} was calibrated anew in each run, so the runs' times measure different work: {over} pipeline \
             runs are\n      compared by their time over their own bound or model (measured on the run's own work), {} figures \
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
    match cmp.matched {
        Matched::Places => {
            s += "note: figures matched by their places in the JSON (these runs name none: an older \
                                 build, or a lesson that does not name its figures); read as GPU-timed, of pinned \
                                 memory (they say neither)\n"
        }
        Matched::Learned(which) => {
            s += &format!(
                "note: {which} named no figures (made before its lesson named them): named here as the lesson \
                 names them now\n"
            )
        }
        Matched::Names => {}
    }
    let mut shown: Vec<&Change> = cmp.changes.iter().filter(|c| all || c.verdict != Verdict::Same).collect();
    // The GPU's figures first, then the host's; within each, by verdict.
    shown.sort_by_key(|c| (!c.on_the_gpu(), c.verdict));
    let split = shown.iter().position(|c| !c.on_the_gpu()).filter(|i| *i > 0);
    if !shown.is_empty() {
        let rows: Vec<[String; 7]> = shown
            .iter()
            .map(|c| {
                [
                    c.name.clone(),
                    c.kind.to_string(),
                    c.value(c.a.center),
                    c.value(c.b.center),
                    format!("{:+.1}%", 100.0 * c.change()),
                    format!("±{:.1}%", 100.0 * c.drift),
                    c.why(),
                ]
            })
            .collect();
        let headers = ["figure", "kind", "A", "B", "change", "drift", "verdict"];
        let mut width = headers.map(|h| h.chars().count());
        for r in &rows {
            for (w, cell) in width.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
                let pad = " ".repeat(w - cell.chars().count());
                l += &match i {
                    0 | 1 | 6 => format!("{cell}{pad}  "),
                    _ => format!("{pad}{cell}  "),
                };
            }
            l.trim_end().to_string() + "\n"
        };
        s += &line(&headers.map(String::from));
        for (i, r) in rows.iter().enumerate() {
            if Some(i) == split {
                s += &format!("{}:\n", interleave::HOST_GROUP);
            }
            s += &line(r);
        }
    }
    s
}

/// One line: `0 of 360 figures changed; 3 ambiguous`, or `2 of 64 figures changed: 2 slower, 0 faster;
/// 1 ambiguous`.
pub fn summary(cmp: &Comparison) -> String {
    let n = cmp.changes.len();
    let (slower, faster, ambiguous) =
        (cmp.count(Verdict::Slower), cmp.count(Verdict::Faster), cmp.count(Verdict::Ambiguous));
    let changed = if slower + faster == 0 {
        format!("0 of {n} figures changed")
    } else {
        let regression = if slower > 0 { " (a regression)" } else { "" };
        format!("{} of {n} figures changed: {slower} slower{regression}, {faster} faster", slower + faster)
    };
    let left_out = if cmp.left_out.is_empty() { String::new() } else { format!("; {} left out", cmp.left_out.len()) };
    format!("{changed}; {ambiguous} ambiguous{left_out}")
}

/// What moves the figures of pageable or managed memory and the host-timed ones, and what two runs made
/// apart can see of them.
pub const HOST_APART: &str = "Figures of pageable or managed memory, host-timed ones and GPU times paced by the \
host's calls follow the host: its memory and copy rate (the driver stages pageable memory on the CPU), page \
faults, the CPU's clocks; two runs made \
apart see only a change beyond their kind's drift, and `compare --interleave` judges them from pairs run in turn.";

/// What "same" means, a line for each group of figures: the GPU-timed ones of memory the GPU reaches
/// itself, and the others ([`Change::on_the_gpu`]).
pub fn group_lines(changes: &[Change]) -> Vec<String> {
    let (gpu, host): (Vec<Change>, Vec<Change>) = changes.iter().cloned().partition(Change::on_the_gpu);
    let mut out = Vec::new();
    for (title, group) in [(interleave::GPU_GROUP, gpu), (interleave::HOST_GROUP, host)] {
        if !group.is_empty() {
            out.push(format!("{title}: {}", detectable_summary(&group)));
        }
    }
    out
}

/// What "same" means for compared figures, in one line: the median figure's smallest detectable change
/// each way, and how many figures would show a change of 5% each way.
pub fn detectable_summary(changes: &[Change]) -> String {
    let mut slower: Vec<f64> = changes.iter().map(|c| c.detectable().0).collect();
    let mut faster: Vec<f64> = changes.iter().map(|c| c.detectable().1).collect();
    if slower.is_empty() {
        return "same: no figure compared".into();
    }
    slower.sort_by(f64::total_cmp);
    faster.sort_by(f64::total_cmp);
    let n = slower.len();
    let five = |v: &[f64]| v.iter().filter(|x| **x <= 0.05).count();
    format!(
        "same means: a change under +{:.1}% / -{:.1}% would not show for the median figure (from +{:.1}% / -{:.1}% \
         to +{:.1}% / -{:.1}%); {} of {n} figures would show 5% slower, {} of {n} 5% faster (`--all` lists each)",
        100.0 * slower[n / 2],
        100.0 * faster[n / 2],
        100.0 * slower[0],
        100.0 * faster[0],
        100.0 * slower[n - 1],
        100.0 * faster[n - 1],
        five(&slower),
        five(&faster),
    )
}

/// A document's figures by name, and whether they were named here from an older form ([`learned`]);
/// nothing where it names none and its form is not known.
fn readings(doc: &Value) -> (Vec<Reading>, bool) {
    let named = named(doc);
    if !named.is_empty() {
        return (named, false);
    }
    let learned = learned(doc.get("result").unwrap_or(doc));
    let any = !learned.is_empty();
    (learned, any)
}

/// Figures renamed since a run was made: (the old name, the name now). A run's old names are read as
/// the new ones, so that a run from before a rename still compares. Names only change with a reason:
/// one spelling of each direction (H2D, D2H) in the pipelines' parts.
pub const RENAMED: [(&str, &str); 5] = [
    ("one chunk's upload, best", "one chunk's H2D, best"),
    ("one chunk's download, best", "one chunk's D2H, best"),
    ("one chunk's upload, kernel and download in turn, best", "one chunk's H2D, kernel and D2H in turn, best"),
    ("bound part: uploads, best", "bound part: H2D copies, best"),
    ("bound part: downloads, best", "bound part: D2H copies, best"),
];

/// `name` as it is called now ([`RENAMED`]).
fn renamed(name: &str) -> String {
    RENAMED.iter().find(|(old, _)| *old == name).map_or(name, |(_, new)| new).to_string()
}

/// The figures a document names (the `figures` crate's schema; schema 1's read as
/// [`Figure::schema_1`] says), if any.
fn named(doc: &Value) -> Vec<Reading> {
    let schema_1 = doc["schema_version"].as_u64().is_some_and(|v| v < 2);
    let list: Vec<Figure> = doc.get("figures").and_then(|f| serde_json::from_value(f.clone()).ok()).unwrap_or_default();
    list.into_iter()
        .filter_map(|f| {
            let f = if schema_1 { f.schema_1() } else { f };
            let stats = serde_json::to_value(f.stats).ok()?;
            let mut r = Reading::of(renamed(&f.name), &stats, f.clock, f.memory)?;
            r.transfer_bytes = f.transfer_bytes;
            (r.bound_ms, r.model_ms) = (f.bound_ms, f.model_ms);
            (r.depends_on, r.calibrated, r.host_paced) = (f.depends_on, f.calibrated, f.host_paced);
            Some(r)
        })
        .collect()
}

/// The figures of a run made before its lesson named them, named as the lesson names them now: the
/// lessons whose old form is known here, `small_copies` (`sets[i].ways[way].wall` is `SET / WAY /
/// wall`, and `--plan`'s `plan.run`) and `latency` (`copies[i].gpu` is `pinned H2D 4 B / gpu`,
/// `.host` is `... / caller waits`; `reads[i].launch` is `mapped host memory, chase of 4096 reads / gpu`).
/// Their clocks are those of the old form's fields; their memory is latency's `copies[i].memory` and
/// the chases' `reads[i].memory`, and small_copies' ways are pinned but for those the lesson itself named
/// `..., pageable` (the form had no other word for it).
pub fn learned(result: &Value) -> Vec<Reading> {
    let mut out = Vec::new();
    let mut add = |name: String, stats: &Value, clock: Clock, memory: MemoryKind, bytes: Option<usize>| {
        if let Some(mut r) = Reading::of(name, stats, clock, memory) {
            r.transfer_bytes = bytes;
            out.push(r);
        }
    };
    let sets = result["sets"].as_array().into_iter().flatten().chain(Some(&result["plan"]["run"]));
    for run in sets {
        let (Some(set), Some(ways)) = (run["set"].as_str(), run["ways"].as_array()) else { continue };
        let each = match (run["bytes"].as_u64(), run["count"].as_u64()) {
            (Some(bytes), Some(count)) if count > 0 => Some((bytes / count) as usize),
            _ => None,
        };
        for w in ways {
            let Some(way) = w["name"].as_str() else { continue };
            let memory = if way.ends_with(", pageable") { MemoryKind::Pageable } else { MemoryKind::Pinned };
            for (what, clock) in [("wall", Clock::Host), ("gpu", Clock::Gpu), ("host", Clock::Host)] {
                add(format!("{set} / {way} / {what}"), &w[what], clock, memory, each);
            }
        }
    }
    for c in result["copies"].as_array().into_iter().flatten() {
        let (Some(memory), Some(dir), Some(bytes)) =
            (c["memory"].as_str(), c["direction"].as_str(), c["bytes"].as_u64())
        else {
            continue;
        };
        let name = format!("{memory} {dir} {}", fmt_bytes(bytes as usize));
        let kind = if memory == "pageable" { MemoryKind::Pageable } else { MemoryKind::Pinned };
        add(format!("{name} / gpu"), &c["gpu"], Clock::Gpu, kind, Some(bytes as usize));
        add(format!("{name} / caller waits"), &c["host"], Clock::Host, kind, Some(bytes as usize));
    }
    for r in result["reads"].as_array().into_iter().flatten() {
        let (Some(memory), Some(n)) = (r["memory"].as_str(), r["accesses"].as_u64()) else { continue };
        let kind = if memory == "device" { MemoryKind::Device } else { MemoryKind::Mapped };
        add(format!("{memory} memory, chase of {n} reads / gpu"), &r["launch"], Clock::Gpu, kind, None);
        add(format!("{memory} memory, chase of {} reads / gpu", n / 2), &r["half_launch"], Clock::Gpu, kind, None);
    }
    out
}

/// Every `Stats` object in a result, named by its place (`report.runs[4 streams].judged.measured`). A
/// pipeline run's `judged` (a measured time beside its bound) carries its bound. Nothing is marked in
/// such files, so every figure is taken to depend on the `work`, which pipeline runs calibrated, and
/// is read as GPU-timed, of pinned memory: such a file says neither, and no name is read for it.
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

fn walk(v: &Value, path: String, out: &mut Vec<Reading>) {
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    let of = |name: String, stats: &Value| Reading::of(name, stats, Clock::Gpu, MemoryKind::Pinned);
    if let Some(r) = of(path.clone(), v) {
        out.push(r);
        return;
    }
    if let (Some(mut r), Some(bound)) = (of(join("measured"), &v["measured"]), v["bound"]["ms"].as_f64()) {
        r.bound_ms = Some(bound);
        out.push(r);
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

/// The drift table fitted from the back-to-back runs in `dir` (every `.json` under it: each lesson's
/// `--json` output, two runs of it or more), and what it was fitted from, in words. Runs of a lesson are
/// told apart from others by their command line (`machine.command`: the program's name and its flags),
/// else by their file's name without its number (`latency-2.json`).
pub fn calibrate(dir: &Path) -> anyhow::Result<(DriftTable, String)> {
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .map(|e| e.into_path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no .json files in {}: run each lesson with --json, two times or more, into it (README)", dir.display());
    }
    let mut text = String::new();
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let (mut gpus, mut drivers, mut latest) = (BTreeSet::new(), BTreeSet::new(), 0u64);
    for path in &files {
        let doc = match read(path) {
            Ok(d) if d.get("result").is_some() => d,
            Ok(_) => {
                text +=
                    &format!("note: {} has no result (an error, or not a lesson's output): left out\n", path.display());
                continue;
            }
            Err(e) => {
                text += &format!("note: {e:#}: left out\n");
                continue;
            }
        };
        let gpu = &doc["machine"]["gpus"][0];
        gpus.extend(gpu["name"].as_str().map(String::from));
        // `[13, 0]` as the lessons write it (a string in older runs).
        let version = match &gpu["driver_version"] {
            Value::Array(parts) => Some(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(".")),
            v => v.as_str().map(String::from),
        };
        drivers.extend(version);
        latest = latest.max(doc["machine"]["unix_time"].as_u64().unwrap_or(0));
        groups.entry(lesson_of(&doc, path)).or_default().push(doc);
    }
    if gpus.len() > 1 {
        text += &format!(
            "note: the runs come from {} different GPUs ({}): a table is for one machine\n",
            gpus.len(),
            gpus.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let base = DriftTable::provisional();
    let (mut moves, mut lessons, mut runs) = (Vec::new(), serde_json::Map::new(), 0);
    for (lesson, docs) in &groups {
        if docs.len() < 2 {
            text += &format!("note: {lesson}: one run only: left out (each lesson needs two runs or more)\n");
            continue;
        }
        let before = moves.len();
        // Each way round: the movement is measured from A's interval.
        for i in 0..docs.len() {
            for j in (0..docs.len()).filter(|j| *j != i) {
                moves.extend(compare(&docs[i], &docs[j], &base).moves());
            }
        }
        text += &format!("{lesson}: {} runs, {} movements\n", docs.len(), moves.len() - before);
        lessons.insert(lesson.clone(), docs.len().into());
        runs += docs.len();
    }
    if moves.is_empty() {
        bail!("no lesson in {} has two runs with figures in common: nothing to fit", dir.display());
    }
    let mut table = base.fit(&moves, true);
    let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    table.source = format!(
        "fitted from {runs} runs of {} lessons on {} (driver {})",
        lessons.len(),
        if gpus.is_empty() { "an unnamed GPU".into() } else { join(&gpus) },
        if drivers.is_empty() { "unknown".into() } else { join(&drivers) }
    );
    table.fitted_from = serde_json::json!({
        "runs": runs, "lessons": lessons, "gpus": gpus, "drivers": drivers, "latest_unix_time": latest,
    });
    text += &table.describe();
    let kept = table.rows.iter().filter(|r| !r.fitted).count();
    if kept > 0 {
        text += &format!(
            "{kept} kinds had fewer than {} movements and keep their provisional drift\n",
            crate::drift::MIN_PAIRS
        );
    }
    Ok((table, text))
}

/// Which lesson, run how, a document is: its command line without the program's folder and without
/// `--json`, else its file's name without a trailing number.
fn lesson_of(doc: &Value, path: &Path) -> String {
    if let Some(lesson) = lesson_in(doc) {
        return lesson;
    }
    let stem = path.file_stem().map_or(String::new(), |s| s.to_string_lossy().into_owned());
    stem.trim_end_matches(|c: char| c.is_ascii_digit() || "-_. ".contains(c)).to_string()
}

/// A run's settings named as its lesson names them now: a pipeline lesson's kernel, `work` before it
/// was `steps` (`{"Process": 812}` is `{"InPlace": {"Process": 812}}`), and the sin * cos work by the
/// kernel that ran ([`sincos_by_kernel`]).
fn learned_settings(result: &Value) -> Value {
    let mut r = result.clone();
    let pipeline = result.get("report").is_some() || result.get("points").is_some(); // overlap_sweep's
    if let (Some(o), true) = (r.as_object_mut(), pipeline) {
        if let (Some(work), false) = (o.get("work").cloned(), o.contains_key("steps")) {
            o.insert("steps".into(), serde_json::json!({ "InPlace": work }));
        }
    }
    for key in ["work", "steps"] {
        if let Some(v) = r.get_mut(key) {
            sincos_by_kernel(v);
        }
    }
    r
}

/// `{"SinCos": N}`, in `v` or its `InPlace`, as the kernel it ran is named now: 500 rounds ran
/// overlap_pattern.cu's own kernel (`"OverlapPattern"`), any other count `process_sincos`
/// (`{"ProcessSincos": N}`). A run writes neither name under `SinCos`, so only an older run is renamed.
fn sincos_by_kernel(v: &mut Value) {
    if let Some(inner) = v.get_mut("InPlace") {
        sincos_by_kernel(inner);
    }
    let Some(rounds) = v.get("SinCos").and_then(Value::as_u64) else { return };
    *v = if rounds == 500 { Value::from("OverlapPattern") } else { serde_json::json!({ "ProcessSincos": rounds }) };
}

/// Which lesson, run how, a document says it is: its command line without the program's folder and
/// without `--json` (`overlap --seed`).
fn lesson_in(doc: &Value) -> Option<String> {
    let command: Vec<&str> =
        doc["machine"]["command"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let (program, args) = command.split_first()?;
    let name = Path::new(program).file_name().map_or(program.to_string(), |n| n.to_string_lossy().into_owned());
    // `--seed` was overlap's `--original` before it was named so.
    let args =
        args.iter().filter(|a| **a != "--json").map(|a| if *a == "--seed" { "--original" } else { a }.to_string());
    Some([name].into_iter().chain(args).collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests;

pub mod interleave;
pub mod paired;
