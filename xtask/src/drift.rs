//! How far a figure moves from one process to the next on a quiet machine, by kind of figure: the table
//! `cargo xtask compare` holds changes against (`xtask/drift.json`), and the fit that makes it from
//! back-to-back runs (`cargo xtask compare --calibrate DIR`).
//!
//! # Kinds
//!
//! One run's spread says little about the next process for figures the host rules: in this project's
//! runs, one memcpy per buffer of 1000 x 4 KiB held the host 5.4 ms in one run and 8.6 ms in the next,
//! each run within 1% of itself, and a batched copy from pageable memory took 19.5 ms then 48.8; a 64 MiB
//! copy from pinned memory moves by well under 1%. So each figure is put in a kind, by four things a run
//! says of it, and each kind gets its own drift:
//!
//! - the **clock** that timed it: `gpu` (CUDA events) or `host` (the time in the calls, the caller's wait);
//! - the **memory** it copies: `pageable` where the CPU's side moves it page by page (pageable memory
//!   the driver stages through its own pinned buffers, managed memory it migrates on faults: the
//!   figure's `memory`, `figures::MemoryKind::cpu_paged`) or `pinned` (any other: pinned, mapped,
//!   write-combined, registered, device memory);
//! - the **transfers**: `small` when each moves under [`SMALL_BYTES`] (a per-copy cost rules them, paid
//!   by the host and the copy engine, and it moves most), else `large` (also a figure that names no
//!   transfer: kernels, pipelines);
//! - its **time**: under 0.1 ms, 0.1 to 2 ms, 2 ms and more (work of microseconds settles on one of two
//!   times 10 µs apart, such as 18 or 28 µs for the same 64 KiB round trip).
//!
//! A pipeline's run compared by its time over its own bound is a kind of its own.
//!
//! # Drift
//!
//! A kind's drift `d` says that a quiet second process's median lands within a factor `1 + d` of the
//! first's interval (its fastest run to its third quartile), either way. It is fitted from
//! back-to-back runs ([`DriftTable::fit`]): every ordered pair of runs of a lesson, every figure the two
//! have in common, gives one movement, `|ln(B / q3_A)|` or `|ln(B / min_A)|` where B's median lands
//! beyond A's interval and 0 within it (`Comparison::moves`), and a kind's drift is
//! `exp(t) - 1` with `t` the larger of [`MARGIN`] times the largest movement seen and [`SIGMAS`] times
//! their root mean square: wide enough for the worst pair seen and for the tail of many (a kind needs
//! [`MIN_PAIRS`] movements; with fewer it keeps the value it had). Until fitted from runs on a GPU, the
//! table holds provisional values, set wide from what two quiet runs of each lesson showed
//! ([`provisional`]), and says so (see docs/design.md, How figures are taken and compared).

use std::{collections::BTreeMap, fmt, path::Path};

use anyhow::{bail, Context as _};
use figures::Clock;
use serde_json::{json, Value};

/// Transfers of fewer bytes than this are small: under it the per-copy cost is most of a copy's time
/// (a pinned copy reaches half its rate at about 300 KiB in this project's runs).
pub const SMALL_BYTES: usize = 256 << 10;
/// A kind's drift covers this many times the largest movement seen (in log terms)...
pub const MARGIN: f64 = 1.25;
/// ... and this many times the movements' root mean square.
pub const SIGMAS: f64 = 4.0;
/// A kind is fitted from at least this many movements (ordered pairs of runs times figures: two
/// figures of three runs).
pub const MIN_PAIRS: usize = 12;
/// No drift is fitted below this: half a percent, what no number of runs resolves.
pub const FLOOR: f64 = 0.005;

/// A figure's kind (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FigureKind {
    Time {
        clock: Clock,
        pageable: bool,
        small: bool,
        scale: Scale,
    },
    /// A pipeline's time over the lower bound measured on its own work in its own run.
    OverBound,
    /// A pipeline's time over a model's prediction from costs measured in its own run (the planner's).
    OverModel,
}

/// A figure's time: under 0.1 ms, 0.1 to 2 ms, 2 ms and more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scale {
    Short,
    Mid,
    Long,
}

impl Scale {
    pub fn of(ms: f64) -> Scale {
        if ms < 0.1 {
            Scale::Short
        } else if ms < 2.0 {
            Scale::Mid
        } else {
            Scale::Long
        }
    }

    fn label(self) -> &'static str {
        match self {
            Scale::Short => "<0.1 ms",
            Scale::Mid => "0.1-2 ms",
            Scale::Long => ">=2 ms",
        }
    }
}

const SCALES: [Scale; 3] = [Scale::Short, Scale::Mid, Scale::Long];

impl FigureKind {
    /// The kind of a figure timed by `clock`, of `pageable` memory or not, whose transfers move
    /// `transfer_bytes` each (`None`: no transfer named), that took `ms`.
    pub fn of(clock: Clock, pageable: bool, transfer_bytes: Option<usize>, ms: f64) -> FigureKind {
        let small = transfer_bytes.is_some_and(|b| b < SMALL_BYTES);
        FigureKind::Time { clock, pageable, small, scale: Scale::of(ms) }
    }

    /// Every kind, in the table's order.
    pub fn all() -> Vec<FigureKind> {
        let mut v = Vec::new();
        for clock in [Clock::Gpu, Clock::Host] {
            for pageable in [false, true] {
                for small in [false, true] {
                    v.extend(SCALES.map(|scale| FigureKind::Time { clock, pageable, small, scale }));
                }
            }
        }
        v.push(FigureKind::OverBound);
        v.push(FigureKind::OverModel);
        v
    }

    pub fn parse(label: &str) -> Option<FigureKind> {
        FigureKind::all().into_iter().find(|k| k.to_string() == label)
    }
}

impl fmt::Display for FigureKind {
    /// `gpu, pinned, large, 0.1-2 ms`; `over its bound`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FigureKind::OverBound => write!(f, "over its bound"),
            FigureKind::OverModel => write!(f, "over its model"),
            FigureKind::Time { clock, pageable, small, scale } => write!(
                f,
                "{}, {}, {}, {}",
                if *clock == Clock::Gpu { "gpu" } else { "host" },
                if *pageable { "pageable" } else { "pinned" },
                if *small { "small" } else { "large" },
                scale.label()
            ),
        }
    }
}

/// The provisional drift of a kind, before any fit from runs: set wide from what two quiet default runs
/// of each lesson showed (see the module's doc), so that quiet runs stay quiet, while large
/// copies from pinned memory, kernels and pipelines stay near the few percent they move.
pub fn provisional(kind: FigureKind) -> f64 {
    let FigureKind::Time { clock, pageable, small, scale } = kind else { return 0.05 };
    let by_scale = |short, mid, long| match scale {
        Scale::Short => short,
        Scale::Mid => mid,
        Scale::Long => long,
    };
    match (clock, pageable, small) {
        // Large pinned copies, kernels, pipelines: microsecond work settles on one of two times.
        (Clock::Gpu, false, false) => by_scale(0.6, 0.10, 0.05),
        // Many small copies: the GPU waits on the host that queues them.
        (Clock::Gpu, false, true) => by_scale(1.0, 1.0, 1.0),
        // Pageable copies: the driver stages them on the CPU; 64 MiB moved by 35% between quiet runs.
        (Clock::Gpu, true, false) => by_scale(1.0, 0.6, 0.6),
        // Batched copies of small buffers from pageable memory: 19.5 ms, then 48.8.
        (Clock::Gpu, true, true) => 2.5,
        // The host's time in the calls does not depend on the bytes: the host rules it at any size.
        (Clock::Host, false, false) => by_scale(1.0, 1.0, 0.6),
        // One memcpy per buffer of 1000 x 4 KiB held the host 5.4 ms, then 8.6.
        (Clock::Host, false, true) => by_scale(1.5, 1.0, 1.0),
        (Clock::Host, true, _) => 2.5,
    }
}

/// One kind's row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct DriftRow {
    pub kind: FigureKind,
    /// A quiet second process's median lands within a factor `1 + drift` of the first's.
    pub drift: f64,
    /// Whether `drift` was fitted from runs (else it is provisional).
    pub fitted: bool,
    /// The movements it was fitted from; the largest movement of its settled figures (the [`SETTLED`]
    /// share) and the root mean square of their movements, as factors (`exp(|m|) - 1`).
    pub pairs: usize,
    pub largest: Option<f64>,
    pub rms: Option<f64>,
}

/// The drift of every kind, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct DriftTable {
    pub rows: Vec<DriftRow>,
    /// Figures that move more than their kind (`lesson: figure`, the lesson as its command line names
    /// it), each with a drift of its own: a batch of small copies settles, process by process, on one of
    /// two times three times apart.
    pub restless: BTreeMap<String, Restless>,
    /// Where the table came from, in words.
    pub source: String,
    /// What it was fitted from: the runs, the lessons, the GPU and driver (JSON, as written).
    pub fitted_from: Value,
}

/// A figure that moves more than its kind, and the drift fitted for it alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Restless {
    pub drift: f64,
    pub pairs: usize,
    /// Its largest movement, as a factor.
    pub largest: f64,
}

/// One figure's movement in a pair of quiet runs: how far B's median landed beyond A's interval, in log
/// terms (`Comparison::moves`).
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    pub kind: FigureKind,
    /// `lesson: figure`.
    pub figure: String,
    pub beyond: f64,
}

/// The share of a kind's figures whose largest movement its drift is fitted to cover: the rest, the
/// restless, get drifts of their own.
pub const SETTLED: f64 = 0.9;

/// The table shipped with this xtask: `xtask/drift.json`, which `--calibrate` writes.
pub const SHIPPED: &str = include_str!("../drift.json");

impl DriftTable {
    /// Every kind at its provisional drift.
    pub fn provisional() -> DriftTable {
        let rows = FigureKind::all()
            .into_iter()
            .map(|kind| DriftRow { kind, drift: provisional(kind), fitted: false, pairs: 0, largest: None, rms: None })
            .collect();
        DriftTable { rows, restless: BTreeMap::new(), source: "provisional".into(), fitted_from: Value::Null }
    }

    /// The table shipped with this xtask.
    pub fn shipped() -> DriftTable {
        DriftTable::parse(SHIPPED).unwrap_or_else(|e| panic!("xtask/drift.json: {e:#}"))
    }

    pub fn read(path: &Path) -> anyhow::Result<DriftTable> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        DriftTable::parse(&text).with_context(|| format!("{} is not a drift table", path.display()))
    }

    /// A table as [`DriftTable::to_json`] writes it; a kind it lacks gets its provisional drift.
    pub fn parse(text: &str) -> anyhow::Result<DriftTable> {
        let v: Value = serde_json::from_str(text)?;
        let mut table = DriftTable::provisional();
        for r in v["kinds"].as_array().context("no \"kinds\" list")? {
            let label = r["kind"].as_str().context("a row without \"kind\"")?;
            let Some(kind) = FigureKind::parse(label) else { bail!("unknown kind {label:?}") };
            let drift = r["drift"].as_f64().filter(|d| d.is_finite() && *d >= 0.0);
            let Some(drift) = drift else { bail!("{label}: \"drift\" is not a number of 0 or more") };
            let row = table.rows.iter_mut().find(|x| x.kind == kind).expect("every kind has a row");
            *row = DriftRow {
                kind,
                drift,
                fitted: r["fitted"].as_bool().unwrap_or(false),
                pairs: r["pairs"].as_u64().unwrap_or(0) as usize,
                largest: r["largest"].as_f64(),
                rms: r["rms"].as_f64(),
            };
        }
        for r in v["restless"].as_array().into_iter().flatten() {
            let figure = r["figure"].as_str().context("a restless row without \"figure\"")?;
            let drift = r["drift"].as_f64().filter(|d| d.is_finite() && *d >= 0.0);
            let Some(drift) = drift else { bail!("{figure}: \"drift\" is not a number of 0 or more") };
            let (pairs, largest) = (r["pairs"].as_u64().unwrap_or(0) as usize, r["largest"].as_f64().unwrap_or(drift));
            table.restless.insert(figure.to_string(), Restless { drift, pairs, largest });
        }
        table.source = v["source"].as_str().unwrap_or("").to_string();
        table.fitted_from = v["fitted_from"].clone();
        Ok(table)
    }

    /// Whether any kind was fitted from runs.
    pub fn provisional_only(&self) -> bool {
        self.rows.iter().all(|r| !r.fitted)
    }

    pub fn row(&self, kind: FigureKind) -> &DriftRow {
        self.rows.iter().find(|r| r.kind == kind).expect("every kind has a row")
    }

    pub fn drift(&self, kind: FigureKind) -> f64 {
        self.row(kind).drift
    }

    /// The drift `figure` (`lesson: figure`) of `kind` is held to: its own where it is restless (and
    /// wider than its kind's: a figure fitted under another kind, before its run said what it is, may
    /// have a narrower own drift than the kind it is now), else its kind's; and whether it is its own.
    pub fn drift_of(&self, kind: FigureKind, figure: &str) -> (f64, bool) {
        let of_kind = self.drift(kind);
        match self.restless.get(figure) {
            Some(r) if matches!(kind, FigureKind::Time { .. }) && r.drift > of_kind => (r.drift, true),
            _ => (of_kind, false),
        }
    }

    /// The table as a file: JSON, a row per kind.
    pub fn to_json(&self) -> String {
        let provisional = self.provisional_only();
        let about = if provisional {
            "PROVISIONAL: not fitted from runs yet. Each kind's drift is set wide from what two quiet default runs of \
             each lesson showed (xtask/src/drift.rs, `provisional`). Fit it from back-to-back runs of every \
             lesson: `cargo xtask compare --calibrate DIR` (README, Measured)."
        } else {
            "Fitted from back-to-back runs by `cargo xtask compare --calibrate`: a quiet second process's median of a \
             figure of a kind lands within a factor 1 + drift of the first's interval (fastest run to third quartile). \
             Restless figures, which moved beyond their kind, have drifts of their own. Kinds without enough runs keep \
             the value they had (fitted: false)."
        };
        let round = |x: f64| (x * 1e4).round() / 1e4;
        let rows: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"kind\": {}, \"drift\": {}, \"fitted\": {}, \"pairs\": {}, \"largest\": {}, \"rms\": {}}}",
                    json!(r.kind.to_string()),
                    json!(round(r.drift)),
                    r.fitted,
                    r.pairs,
                    json!(r.largest.map(round)),
                    json!(r.rms.map(round))
                )
            })
            .collect();
        // By hand, for a file a person reads: what it is first, then a line per kind.
        let field = |key: &str, v: &Value| format!("  \"{key}\": {},\n", v);
        let mut text = String::from("{\n");
        text += &field("provisional", &json!(provisional));
        text += &field("about", &json!(about));
        text += &field("source", &json!(self.source));
        text += &field("fitted_from", &self.fitted_from);
        let rows: Vec<String> = rows.iter().map(|r| format!("    {r}")).collect();
        let restless: Vec<String> = self
            .restless
            .iter()
            .map(|(figure, r)| {
                format!(
                    "    {{\"figure\": {}, \"drift\": {}, \"pairs\": {}, \"largest\": {}}}",
                    json!(figure),
                    json!(round(r.drift)),
                    r.pairs,
                    json!(round(r.largest))
                )
            })
            .collect();
        text + "  \"kinds\": [\n"
            + &rows.join(",\n")
            + "\n  ],\n  \"restless\": [\n"
            + &restless.join(",\n")
            + "\n  ]\n}\n"
    }

    /// This table fitted to `moves` (of quiet runs: see the module's doc). Each figure's largest
    /// movement is taken; a kind with at least [`MIN_PAIRS`] movements gets the drift that covers
    /// [`SETTLED`] of its figures' largest movements with [`MARGIN`] to spare, and [`SIGMAS`] times the
    /// root mean square of their movements; a figure that moved beyond that gets a drift of its own, by
    /// the same margin. Where `replace` is false (a single baseline run), the fit can only widen a drift:
    /// the few runs it came from say little of a spread.
    pub fn fit(&self, moves: &[Move], replace: bool) -> DriftTable {
        let mut by_figure: BTreeMap<(FigureKind, &str), Vec<f64>> = BTreeMap::new();
        for m in moves.iter().filter(|m| m.beyond.is_finite()) {
            by_figure.entry((m.kind, m.figure.as_str())).or_default().push(m.beyond.abs());
        }
        let mut table = self.clone();
        for row in &mut table.rows {
            let figures: Vec<(&str, &Vec<f64>, f64)> = by_figure
                .iter()
                .filter(|((kind, _), _)| *kind == row.kind)
                .map(|((_, figure), m)| (*figure, m, m.iter().copied().fold(0.0, f64::max)))
                .collect();
            let pairs: usize = figures.iter().map(|f| f.1.len()).sum();
            if pairs < MIN_PAIRS {
                continue;
            }
            let mut largest: Vec<f64> = figures.iter().map(|f| f.2).collect();
            largest.sort_by(f64::total_cmp);
            // The largest movement of the SETTLED share of figures, by nearest rank.
            let settled = largest[((SETTLED * largest.len() as f64).ceil() as usize).clamp(1, largest.len()) - 1];
            let calm: Vec<f64> = figures.iter().filter(|f| f.2 <= settled).flat_map(|f| f.1.iter().copied()).collect();
            let rms = (calm.iter().map(|x| x * x).sum::<f64>() / calm.len().max(1) as f64).sqrt();
            let t = (MARGIN * settled).max(SIGMAS * rms);
            let drift = (t.exp() - 1.0).max(FLOOR);
            let drift = if replace { drift } else { drift.max(row.drift) };
            *row = DriftRow {
                kind: row.kind,
                drift,
                fitted: true,
                pairs,
                largest: Some(settled.exp() - 1.0),
                rms: Some(rms.exp() - 1.0),
            };
            if !matches!(row.kind, FigureKind::Time { .. }) {
                continue;
            }
            for (figure, m, most) in figures.iter().filter(|f| (MARGIN * f.2).exp() - 1.0 > drift) {
                let own = (MARGIN * most).exp() - 1.0;
                let kept = table.restless.get(*figure).map_or(0.0, |r| r.drift);
                let own = if replace { own } else { own.max(kept) };
                table
                    .restless
                    .insert(figure.to_string(), Restless { drift: own, pairs: m.len(), largest: most.exp() - 1.0 });
            }
        }
        table
    }

    /// The table for people: a row per kind, what it was fitted from.
    pub fn describe(&self) -> String {
        let mut s = format!("{:<31} {:>6} {:>9} {:>8} {:>8}  {}\n", "kind", "pairs", "largest", "rms", "drift", "from");
        for r in &self.rows {
            let pct = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.1}%", 100.0 * x));
            s += &format!(
                "{:<31} {:>6} {:>9} {:>8} {:>8}  {}\n",
                r.kind.to_string(),
                r.pairs,
                pct(r.largest),
                pct(r.rms),
                format!("{:.1}%", 100.0 * r.drift),
                if r.fitted { "fitted" } else { "provisional" }
            );
        }
        if !self.restless.is_empty() {
            s += &format!("{} restless figures, each with a drift of its own:\n", self.restless.len());
            for (figure, r) in &self.restless {
                s += &format!(
                    "  {:>8}  {figure} (largest {:.1}% of {} pairs)\n",
                    format!("{:.1}%", 100.0 * r.drift),
                    100.0 * r.largest,
                    r.pairs
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_label_and_reads_back() {
        let all = FigureKind::all();
        assert_eq!(all.len(), 26);
        for k in &all {
            assert_eq!(FigureKind::parse(&k.to_string()), Some(*k), "{k}");
        }
        assert_eq!(FigureKind::of(Clock::Gpu, false, Some(64 << 20), 1.2).to_string(), "gpu, pinned, large, 0.1-2 ms");
        assert_eq!(FigureKind::of(Clock::Host, true, Some(4096), 19.5).to_string(), "host, pageable, small, >=2 ms");
        assert_eq!(FigureKind::of(Clock::Gpu, false, None, 0.006).to_string(), "gpu, pinned, large, <0.1 ms");
    }

    #[test]
    fn the_shipped_table_reads_and_says_whether_it_is_provisional() {
        let shipped = DriftTable::shipped();
        assert_eq!(shipped.rows.len(), 26);
        let text = shipped.to_json();
        assert_eq!(DriftTable::parse(&text).unwrap(), shipped, "it reads back as written");
        if shipped.provisional_only() {
            // XTASK_BLESS=1 cargo test -p xtask drift: writes drift.rs's provisional values into the file.
            if std::env::var_os("XTASK_BLESS").is_some() {
                let path = crate::tools::root().join("xtask/drift.json");
                std::fs::write(path, DriftTable::provisional().to_json()).unwrap();
                return;
            }
            assert!(SHIPPED.contains("\"provisional\": true") && SHIPPED.contains("PROVISIONAL"));
            assert_eq!(
                shipped,
                DriftTable::provisional(),
                "xtask/drift.json holds other values than drift.rs's provisional ones: XTASK_BLESS=1 cargo test -p \
                 xtask drift writes them"
            );
        }
        assert!(DriftTable::parse("{\"kinds\": [{\"kind\": \"gpu, warm\", \"drift\": 1}]}").is_err());
        assert!(DriftTable::parse("{\"kinds\": [{\"kind\": \"over its bound\", \"drift\": -1}]}").is_err());
    }

    fn mv(kind: FigureKind, figure: &str, beyond: f64) -> Move {
        Move { kind, figure: figure.into(), beyond }
    }

    #[test]
    fn a_fit_covers_the_settled_figures_and_the_tail_and_keeps_kinds_it_has_too_few_for() {
        let big = FigureKind::of(Clock::Gpu, false, Some(64 << 20), 1.2);
        let host = FigureKind::of(Clock::Host, false, Some(4096), 5.4);
        // 20 figures that move by 0 to 0.8%, one of them 5% once.
        let mut moves: Vec<Move> = (0..20).map(|i| mv(big, &format!("l: f{i}"), 0.002 * (i % 5) as f64)).collect();
        moves.push(mv(big, "l: f0", -0.05));
        moves.extend([mv(host, "l: h", (8.6f64 / 5.4).ln()), mv(host, "l: h", 0.01)]);
        let t = DriftTable::provisional().fit(&moves, true);
        let row = t.row(big);
        assert!(row.fitted && row.pairs == 21);
        // 90% of the 20 figures moved 0.8% or less: 1.25 x 0.8% against 4 x the rms of their movements.
        let calm: Vec<f64> = moves[1..20].iter().map(|m| m.beyond).collect();
        let rms = (calm.iter().map(|m| m * m).sum::<f64>() / calm.len() as f64).sqrt();
        let want = (1.25f64 * 0.008).max(4.0 * rms).exp() - 1.0;
        assert!((row.drift - want).abs() < 1e-12, "{row:?} against {want}");
        // The figure that moved 5% is restless: its drift covers its own movement with the margin.
        let own = t.restless.get("l: f0").expect("l: f0 moved beyond its kind");
        assert!((own.drift - ((1.25f64 * 0.05).exp() - 1.0)).abs() < 1e-12, "{own:?}");
        assert_eq!(t.drift_of(big, "l: f0"), (own.drift, true));
        assert_eq!(t.drift_of(big, "l: f1"), (row.drift, false));
        // Held as a kind wider than its own drift (its run now says it is pageable), the kind's applies.
        let wide = FigureKind::of(Clock::Gpu, true, Some(64 << 20), 1.2);
        assert!(t.drift(wide) > own.drift);
        assert_eq!(t.drift_of(wide, "l: f0"), (t.drift(wide), false));
        assert_eq!(t.row(host), DriftTable::provisional().row(host), "two movements are too few");
        assert!(!t.provisional_only());
        // With replace off (a single baseline run), a fit only widens.
        let narrow = DriftTable::provisional().fit(&moves, false);
        assert_eq!(narrow.drift(big), provisional(big));
        let text = t.to_json();
        assert!(text.contains("\"provisional\": false") && !text.contains("PROVISIONAL"), "{text}");
        let back = DriftTable::parse(&text).unwrap().restless;
        assert!(back.keys().eq(t.restless.keys()) && (back["l: f0"].drift - own.drift).abs() < 1e-4, "{back:?}");
        assert!(t.describe().contains("gpu, pinned, large, 0.1-2 ms"), "{}", t.describe());
        assert!(t.describe().contains("l: f0"), "{}", t.describe());
    }

    #[test]
    fn a_figure_on_two_times_gets_its_own_drift_and_leaves_its_kind_tight() {
        let small = FigureKind::of(Clock::Gpu, false, Some(4096), 0.2);
        // 30 steady figures (0.5%), and a batch that lands at 0.09 or 0.35 ms process by process.
        let mut moves: Vec<Move> = (0..30).map(|i| mv(small, &format!("s: f{i}"), 0.005)).collect();
        moves.extend([mv(small, "s: batch", (0.35f64 / 0.09).ln()), mv(small, "s: batch", 0.0)]);
        let t = DriftTable::provisional().fit(&moves, true);
        assert!(t.drift(small) < 0.03, "the kind stays tight: {:?}", t.row(small));
        assert!(t.drift_of(small, "s: batch").0 > 3.0, "{:?}", t.restless);
    }
}
