//! `cargo xtask compare --interleave A B`: two builds' lessons run in turn on this GPU machine, and each
//! figure judged from the pairs ([`super::paired`]).
//!
//! Two runs made apart drift: a process lands on other pages, other clocks, another NUMA node, and a
//! figure moves by its kind's drift (up to 10x for host-timed figures of pageable memory), which the
//! two-process compare must let pass. Run in turn, A and B meet the same machine: for each pair, each
//! lesson runs once from A and once from B, back to back, A first in one pair and B first in the next
//! (so that neither always meets the machine as the other left it), and the lessons go round so that a
//! slow change of the machine meets every lesson alike. Each figure's median in each run makes one
//! pair; the pairs judge it.
//!
//! A and B are bundle folders (`cargo xtask bundle`: their `lessons/`), or folders of lesson binaries,
//! or the same folder twice: a lesson against itself (what no change looks like), or with two settings
//! (`--a-arg`, `--b-arg`, `--a-env`, `--b-env`), or beside a load (`--b-beside`). Figures are compared
//! by their times. A lesson that calibrates its work (`overlap`'s kernel, fitted to the copies in each
//! run) is run once from A first, untimed, and the work it calibrated is given to every run of A and B
//! ([`pin_calibration`]), so that the pairs time the same work.
//!
//! The figures are reported in two groups. GPU-timed figures of memory the GPU reaches by DMA or
//! directly (pinned, write-combined, registered, mapped, device) follow the GPU, its link and its
//! copy engines. Figures of pageable or managed memory, host-timed ones, and GPU-timed ones paced by
//! the host (its calls that queued the work took most of the GPU's time, as the run measured:
//! [`Figure::host_paced`], small_copies' ways of a call per buffer on small buffers) follow the host: its
//! memory (the driver stages pageable memory through its own buffers, on the CPU), page faults (managed
//! memory, a first touch), and the CPU's clocks and scheduling; they move most from one process to the
//! next, so the two-process compare can see in them only changes beyond their drift, while run in turn
//! they are judged as the others are, from their own pairs, and their wider spread shows in what they
//! could detect.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};
use figures::{Clock, Document, Figure, MemoryKind};
use serde::Serialize;

use super::{
    paired::{judge, least_pairs, pairs_for, Paired, FAMILY_ALPHA, FIGURE_ALPHA},
    Verdict,
};
use crate::{flags::CompareFlags, lessons};

/// A figure under this time is `short`: the share of the GPU's figures of 0.1 ms or more that could
/// detect 5% is reported apart.
pub const SHORT_MS: f64 = 0.1;

/// One build, and how its lessons run.
#[derive(Clone, Debug, Serialize)]
pub struct Build {
    /// The folder of its lesson binaries.
    pub lessons: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// A shell command run beside each of its runs.
    pub beside: Option<String>,
}

/// A figure of a lesson over its pairs, judged.
#[derive(Clone, Debug, Serialize)]
pub struct Judged {
    pub name: String,
    pub clock: Clock,
    pub memory: MemoryKind,
    pub transfer_bytes: Option<usize>,
    /// GPU-timed but paced by the host's calls, in A's first run ([`Figure::host_paced`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub host_paced: bool,
    /// The median of each run's median, A's and B's, ms.
    pub a_ms: f64,
    pub b_ms: f64,
    /// Each pair's medians, in the order they ran, ms.
    pub pairs_ms: Vec<(f64, f64)>,
    pub verdict: &'static str,
    /// B / A, and its interval at the lesson's level.
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    /// The smallest changes that would have shown, slower and faster (fractions; null where none would).
    pub detect_slower: Option<f64>,
    pub detect_faster: Option<f64>,
    #[serde(skip)]
    pub paired: Paired,
}

impl Judged {
    /// GPU-timed, of memory the GPU reaches without the CPU's help, and not paced by the host's calls.
    pub fn on_the_gpu(&self) -> bool {
        self.clock == Clock::Gpu && !self.memory.cpu_paged() && !self.host_paced
    }
}

/// A lesson's figures judged from its pairs.
#[derive(Clone, Debug, Serialize)]
pub struct LessonJudged {
    pub lesson: String,
    pub pairs: usize,
    /// The fewest pairs with which a lesson of this many figures can call one.
    pub least_pairs: usize,
    pub figures: Vec<Judged>,
    /// Runs that failed, with their error line.
    pub errors: Vec<String>,
    /// Each run's time, A's and B's, s.
    pub wall_s: (Vec<f64>, Vec<f64>),
    /// What the lesson's B says it planted (its result's `planted`), if anything.
    pub planted: serde_json::Value,
    /// The flags every run was given to repeat the work A's first run calibrated ([`pin_calibration`]).
    pub pinned: Vec<String>,
}

/// The pairs of a lesson's runs: each run's figures, A's and B's.
pub type RunPairs = Vec<(Vec<Figure>, Vec<Figure>)>;

/// Judges each figure of a lesson from `runs`, A's figures in the order A's first run names them.
pub fn judge_lesson(lesson: &str, runs: &RunPairs) -> LessonJudged {
    let mut order: Vec<&Figure> = Vec::new();
    for (a, _) in runs {
        for f in a {
            if order.iter().all(|o| o.name != f.name) {
                order.push(f);
            }
        }
    }
    let mut by_name: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for (a, b) in runs {
        for fa in a {
            if let Some(fb) = b.iter().find(|f| f.name == fa.name) {
                by_name.entry(fa.name.as_str()).or_default().push((fa.stats.median_ms, fb.stats.median_ms));
            }
        }
    }
    let m = by_name.len();
    let figures = order
        .into_iter()
        .filter_map(|f| {
            let pairs = by_name.get(f.name.as_str())?;
            let paired = judge(pairs, m)?;
            let finite = |x: f64| x.is_finite().then_some(x);
            Some(Judged {
                name: f.name.clone(),
                clock: f.clock,
                memory: f.memory,
                transfer_bytes: f.transfer_bytes,
                host_paced: f.host_paced,
                a_ms: median(pairs.iter().map(|p| p.0)),
                b_ms: median(pairs.iter().map(|p| p.1)),
                pairs_ms: pairs.clone(),
                verdict: paired.verdict.tag(),
                ratio: paired.ratio,
                lo: paired.lo,
                hi: paired.hi,
                detect_slower: finite(paired.detect_slower),
                detect_faster: finite(paired.detect_faster),
                paired,
            })
        })
        .collect();
    LessonJudged {
        lesson: lesson.into(),
        pairs: runs.len(),
        least_pairs: least_pairs(m),
        figures,
        errors: Vec::new(),
        wall_s: (Vec::new(), Vec::new()),
        planted: serde_json::Value::Null,
        pinned: Vec::new(),
    }
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// `+3.1% / -2.9%`, or `none would show` where the pairs cannot reach the lesson's level.
fn detectable(p: &Paired) -> String {
    if p.detect_slower.is_finite() && p.detect_faster.is_finite() {
        format!("+{} / -{}", pct(p.detect_slower), pct(p.detect_faster))
    } else {
        "none would show".into()
    }
}

/// One line of counts, and what "same" means, for a group of figures.
fn group_line(figures: &[&Judged]) -> String {
    let count = |v: Verdict| figures.iter().filter(|f| f.paired.verdict == v).count();
    let mut slower: Vec<f64> = figures.iter().map(|f| f.paired.detect_slower).collect();
    slower.sort_by(f64::total_cmp);
    let long: Vec<&&Judged> = figures.iter().filter(|f| f.a_ms >= SHORT_MS).collect();
    let five = long.iter().filter(|f| f.paired.detect_slower <= 0.05).count();
    let median_detect = match slower.get(slower.len() / 2) {
        Some(x) if x.is_finite() => format!("+{}", pct(*x)),
        Some(_) => "none".into(),
        None => "-".into(),
    };
    format!(
        "{} figures: {} SLOW, {} FAST, {} AMBG, {} SAME; the median figure would show a change of {median_detect} or more; {five} \
         of {} of {SHORT_MS} ms or more would show 5% slower",
        figures.len(),
        count(Verdict::Slower),
        count(Verdict::Faster),
        count(Verdict::Ambiguous),
        count(Verdict::Same),
        long.len()
    )
}

/// The two groups a lesson's figures are reported in.
pub const GPU_GROUP: &str =
    "GPU-timed, of memory the GPU reaches itself (pinned, write-combined, registered, mapped, device)";
pub const HOST_GROUP: &str = "of pageable or managed memory, host-timed, or paced by the host's calls";

/// What moves the figures of pageable or managed memory and the host-timed ones, and what each mode
/// can see of them.
pub const HOST_MOVES: &str = "moved by the host: its memory and copy rate (the driver stages pageable memory \
through its own buffers on the CPU), page faults (managed memory, first touches), the CPU's clocks and \
scheduling (a GPU time paced by the host's calls, which took most of it, moves with their speed). Run in turn, each is judged from its own pairs, its wider spread showing in what it could detect; apart (two-process compare) only a change \
beyond its kind's drift shows (xtask/drift.json: up to 10x), and a change of the host itself (a BIOS setting, a \
busier machine) is a change of these figures, not noise.";

/// What a person reads of a lesson: its counts, the figures that did not stay the same (every one with
/// `all`), the GPU's figures apart from the host's.
pub fn report(l: &LessonJudged, all: bool) -> String {
    let mut s = format!("\n== {}: {} pairs", l.lesson, l.pairs);
    if l.pairs < l.least_pairs {
        s += &format!(
            " (a lesson of {} figures needs {} to call any at {:.0}% for them all: --pairs {})",
            l.figures.len(),
            l.least_pairs,
            100.0 * FAMILY_ALPHA,
            l.least_pairs + 2
        );
    }
    let wall = |w: &[f64]| if w.is_empty() { "-".into() } else { format!("{:.1} s", median(w.iter().copied())) };
    s += &format!(", a run of A {}, of B {}\n", wall(&l.wall_s.0), wall(&l.wall_s.1));
    if !l.pinned.is_empty() {
        s += &format!("its work as A's first run calibrated it, in every run: {}\n", l.pinned.join(" "));
    }
    for e in &l.errors {
        s += &format!("note: a run failed: {e}\n");
    }
    if let Some(line) = planted_line(l) {
        s += &line;
    }
    let (gpu, host): (Vec<&Judged>, Vec<&Judged>) = l.figures.iter().partition(|f| f.on_the_gpu());
    for (title, group) in [(GPU_GROUP, &gpu), (HOST_GROUP, &host)] {
        if group.is_empty() {
            continue;
        }
        s += &format!("{title}: {}\n", group_line(group));
        let mut shown: Vec<&&Judged> = group.iter().filter(|f| all || f.paired.verdict != Verdict::Same).collect();
        // Most changed first within a verdict.
        shown.sort_by(|x, y| (y.paired.ratio.ln().abs()).total_cmp(&x.paired.ratio.ln().abs()));
        shown.sort_by_key(|f| f.paired.verdict);
        if shown.is_empty() {
            continue;
        }
        let mut rows = Vec::new();
        for f in shown {
            let interval = if f.paired.lo > 0.0 && f.paired.hi.is_finite() {
                format!("{:.3}-{:.3}", f.paired.lo, f.paired.hi)
            } else {
                "-".into()
            };
            rows.push([
                f.name.clone(),
                ms(f.a_ms),
                ms(f.b_ms),
                format!("{:.3}", f.paired.ratio),
                interval,
                f.verdict.into(),
                detectable(&f.paired),
            ]);
        }
        s += &table(["figure", "A", "B", "B/A", "interval", "verdict", "would show"], &rows);
    }
    s
}

/// Rows under their headers, indented by two, the figure's name left-aligned and the rest right-aligned.
fn table<const N: usize>(headers: [&str; N], rows: &[[String; N]]) -> String {
    let mut width = headers.map(|h| h.chars().count());
    for r in rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut l = String::from(" ");
        for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
            let pad = " ".repeat(w - cell.chars().count());
            l += &if i == 0 { format!(" {cell}{pad}") } else { format!("  {pad}{cell}") };
        }
        l.trim_end().to_string() + "\n"
    };
    let mut s = line(&headers.map(String::from));
    for r in rows {
        s += &line(r);
    }
    s
}

/// Where B says it planted a change (`{"percent", "figures"}`): how many of the figures it touches are
/// SLOW, and how many others are not SAME.
fn planted_line(l: &LessonJudged) -> Option<String> {
    let touched: Vec<&str> = l.planted["figures"].as_array()?.iter().filter_map(|f| f.as_str()).collect();
    let percent = l.planted["percent"].as_u64().map_or("a".into(), |p| format!("a {p}%"));
    let (mine, others): (Vec<&Judged>, Vec<&Judged>) =
        l.figures.iter().partition(|f| touched.contains(&f.name.as_str()));
    let slow = mine.iter().filter(|f| f.paired.verdict == Verdict::Slower).count();
    let moved = others.iter().filter(|f| f.paired.verdict != Verdict::Same).count();
    Some(format!(
        "planted: B says it made {percent} change to {} figures: {slow} of {} judged are SLOW; {moved} of the {} others \
         are not SAME\n",
        touched.len(),
        mine.len(),
        others.len()
    ))
}

fn ms(v: f64) -> String {
    if v < 0.1 {
        format!("{:.2} µs", v * 1e3)
    } else {
        format!("{v:.3} ms")
    }
}

/// The folder of a build's lesson binaries: its `lessons/` (a bundle), else the folder itself.
pub fn lessons_in(dir: &Path) -> anyhow::Result<PathBuf> {
    let inner = dir.join("lessons");
    let folder = if inner.is_dir() { inner } else { dir.to_path_buf() };
    if !folder.is_dir() {
        bail!("{} is not a bundle (cargo xtask bundle) or a folder of lesson binaries", dir.display());
    }
    Ok(folder)
}

fn key_values(list: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    list.iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').with_context(|| format!("{kv}: an environment variable is KEY=VALUE"))?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// A command beside a run: its own process group, so that stopping it stops what it started.
struct Beside(Child);

impl Beside {
    fn start(command: &str) -> anyhow::Result<Beside> {
        use std::os::unix::process::CommandExt as _;
        let child = Command::new("sh")
            .args(["-c", command])
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        // Long enough for a CUDA program to start and be copying.
        std::thread::sleep(Duration::from_secs(1));
        Ok(Beside(child))
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        // The whole group it leads: a shell's loop and the program it is running.
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.0.wait();
    }
}

/// One run of `lesson` from `build`, with `pinned` after the build's own arguments: its figures, its
/// time, or its error line.
fn run_once(build: &Build, lesson: &str, pinned: &[String]) -> (Result<Document, String>, f64) {
    let _beside = match build.beside.as_deref().map(Beside::start) {
        Some(Err(e)) => return (Err(format!("{e:#}")), 0.0),
        b => b,
    };
    let t = Instant::now();
    let out = Command::new(build.lessons.join(lesson))
        .arg("--json")
        .args(&build.args)
        .args(pinned)
        .envs(build.env.iter().map(|(k, v)| (k, v)))
        .output();
    let wall = t.elapsed().as_secs_f64();
    let doc = match out {
        Err(e) => Err(format!("running {lesson}: {e}")),
        Ok(o) => match serde_json::from_slice::<serde_json::Value>(&o.stdout) {
            Ok(v) if o.status.success() => {
                let figures = crate::results::figures_of(&v);
                Ok(Document { figures, ..serde_json::from_value(v).unwrap_or_else(|_| empty()) })
            }
            Ok(v) => Err(v["error"].as_str().unwrap_or("failed").to_string()),
            // A lesson that prints no JSON (your_kernel) and checked its result: no figures.
            Err(_) if o.status.success() => Ok(empty()),
            Err(_) => {
                Err(format!("exit {}: {}", o.status, String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")))
            }
        },
    };
    (doc, wall)
}

fn empty() -> Document {
    Document {
        schema_version: 0,
        machine: serde_json::Value::Null,
        result: serde_json::Value::Null,
        figures: vec![],
        repeat_with: vec![],
    }
}

/// The flags that make every run of `lesson` do the same work: where a run of A (untimed, a warm-up of
/// the lesson) calibrated its work (`overlap`'s kernel rounds, fitted to the copies in each run), the
/// flags that repeat it ([`Document::repeat_with`]), given to every run of A and of B. Without them each
/// run would time the work it calibrated: a process that measured its copies a little slow runs a
/// longer kernel, and every figure of the run moves with it (overlap_sweep's by 10% from one run to the
/// next on the H200), which no number of pairs averages down to a few per cent. With them, B runs A's
/// work: a change that would have calibrated differently is timed on the same work.
///
/// Where B's own arguments already set what A calibrated (`--b-arg --iters --b-arg 900`), B keeps its
/// setting and nothing is pinned: a lesson takes a flag once.
fn pin_calibration(a: &Build, b: &Build, lesson: &str) -> Vec<String> {
    let flags = match run_once(a, lesson, &[]).0 {
        Ok(doc) => doc.repeat_with,
        Err(_) => Vec::new(), // the pairs meet the error again, and report it
    };
    let set_by_b = flags.iter().filter(|f| f.starts_with("--")).find(|f| b.args.contains(f));
    if let Some(flag) = set_by_b {
        eprintln!("interleaved: {lesson} calibrates its work, but B sets {flag} itself: each run calibrates its own");
        return Vec::new();
    }
    if !flags.is_empty() {
        eprintln!("interleaved: {lesson} calibrates its work: every run of A and B gets {}", flags.join(" "));
    }
    flags
}

/// What the whole comparison writes with `--json`.
#[derive(Serialize)]
struct Written<'a> {
    about: &'static str,
    family_alpha: f64,
    figure_alpha: f64,
    /// The builds (absent where kept runs were judged again).
    a: Option<&'a Build>,
    b: Option<&'a Build>,
    lessons: &'a [LessonJudged],
}

/// What the runs of each lesson gave, gathered as they ran (or read back from a `--keep` folder).
#[derive(Default)]
pub struct Gathered {
    pub runs: BTreeMap<String, RunPairs>,
    pub errors: BTreeMap<String, Vec<String>>,
    pub walls: BTreeMap<String, (Vec<f64>, Vec<f64>)>,
    pub planted: BTreeMap<String, serde_json::Value>,
    pub pinned: BTreeMap<String, Vec<String>>,
}

impl Gathered {
    fn pairs(&self, lesson: &str) -> usize {
        self.runs.get(lesson).map_or(0, Vec::len)
    }

    /// One pair's documents, A's and B's; where both ran, `Some(figures)` (A's count of them).
    fn add(&mut self, lesson: &str, (da, ta): Ran, (db, tb): Ran) -> Option<usize> {
        let w = self.walls.entry(lesson.into()).or_default();
        w.0.push(ta);
        w.1.push(tb);
        match (da, db) {
            (Ok(da), Ok(db)) => {
                if !db.result["planted"].is_null() {
                    self.planted.insert(lesson.into(), db.result["planted"].clone());
                }
                let n = da.figures.len();
                if n > 0 {
                    self.runs.entry(lesson.into()).or_default().push((da.figures, db.figures));
                }
                Some(n)
            }
            (da, db) => {
                let e = self.errors.entry(lesson.into()).or_default();
                e.extend(da.err().map(|x| format!("A: {x}")));
                e.extend(db.err().map(|x| format!("B: {x}")));
                None
            }
        }
    }
}

/// A run's document or its error line, and its time, s.
type Ran = (Result<Document, String>, f64);

/// Writes a pair's documents as `dir/pair-N/a/LESSON.json` and `.../b/...`.
fn keep(dir: &Path, n: usize, lesson: &str, pair: [&Result<Document, String>; 2]) -> anyhow::Result<()> {
    for (side, doc) in ["a", "b"].into_iter().zip(pair) {
        let Ok(doc) = doc else { continue };
        let folder = dir.join(format!("pair-{n}")).join(side);
        std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
        std::fs::write(folder.join(format!("{lesson}.json")), serde_json::to_string_pretty(doc)?)?;
    }
    Ok(())
}

/// Runs the lessons in turn and judges them; 1 where a figure is SLOW, else 0.
pub fn run(flags: &CompareFlags) -> anyhow::Result<u8> {
    let f = &flags.interleave;
    if let Some(dir) = &f.rejudge {
        let (names, got) = read_kept(dir)?;
        println!("interleaved: the runs kept in {} judged again ({} lessons)", dir.display(), names.len());
        return finish(flags, &names, got, None, None, Instant::now());
    }
    let (Some(a), Some(b)) = (&flags.a, &flags.b) else { bail!("--interleave needs two builds, A and B") };
    let build = |dir: &Path, args: &[String], env: &[String], beside: Option<String>| -> anyhow::Result<Build> {
        Ok(Build { lessons: lessons_in(dir)?, args: args.to_vec(), env: key_values(env)?, beside })
    };
    let (a, b) = (build(a, &f.a_args, &f.a_env, None)?, build(b, &f.b_args, &f.b_env, f.b_beside.clone())?);
    let names: Vec<String> = lessons::select(&f.lessons)?
        .iter()
        .map(|l| l.name.to_string())
        .filter(|n| a.lessons.join(n).is_file() && b.lessons.join(n).is_file())
        .collect();
    if names.is_empty() {
        bail!("no lesson is in both {} and {}", a.lessons.display(), b.lessons.display());
    }
    println!(
        "interleaved: {} lessons, {} pairs each (a lesson of many figures two more than it needs to call one), A and B in turn (A first in every other pair); a lesson against \
         itself shows a SLOW or FAST figure with a chance of at most {:.0}% (Bonferroni over its figures), a figure \
         AMBG at most {:.1}%",
        names.len(),
        f.pairs,
        100.0 * FAMILY_ALPHA,
        100.0 * FIGURE_ALPHA
    );
    let started = Instant::now();
    let got = run_pairs(f, &names, &a, &b, started)?;
    finish(flags, &names, got, Some(&a), Some(&b), started)
}

/// Each lesson's pairs, round after round, until each has the pairs it wants or `--within` would run
/// out before the next round ends.
fn run_pairs(
    f: &crate::flags::InterleaveFlags,
    names: &[String],
    a: &Build,
    b: &Build,
    started: Instant,
) -> anyhow::Result<Gathered> {
    let mut got = Gathered::default();
    let mut want: BTreeMap<&str, usize> = names.iter().map(|n| (n.as_str(), f.pairs as usize)).collect();
    let mut round_s = 0.0f64;
    for pair in 0..400 {
        let left: Vec<&str> = names.iter().map(String::as_str).filter(|n| got.pairs(n) < want[n]).collect();
        if left.is_empty() {
            break;
        }
        let elapsed = started.elapsed().as_secs_f64();
        if let Some(within) = f.within.filter(|w| pair > 0 && elapsed + round_s > *w) {
            eprintln!(
                "interleaved: stopped after {elapsed:.0} s, as a round of {round_s:.0} s more would pass --within {within:.0}: \
                 each lesson is judged from the pairs it has"
            );
            break;
        }
        let round_started = Instant::now();
        for (i, lesson) in left.iter().enumerate() {
            if pair == 0 {
                got.pinned.insert(lesson.to_string(), pin_calibration(a, b, lesson));
            }
            let pinned = got.pinned[*lesson].clone();
            let a_first = (pair + i) % 2 == 0;
            let (first, second) = if a_first { (a, b) } else { (b, a) };
            let (x, y) = (run_once(first, lesson, &pinned), run_once(second, lesson, &pinned));
            let (ra, rb) = if a_first { (x, y) } else { (y, x) };
            if let Some(dir) = &f.keep {
                keep(dir, got.pairs(lesson) + 1, lesson, [&ra.0, &rb.0])?;
            }
            let (ta, tb) = (ra.1, rb.1);
            match got.add(lesson, ra, rb) {
                Some(0) => {
                    eprintln!("interleaved: {lesson} names no figures: left out");
                    want.insert(lesson, 0);
                }
                // A lesson of many figures needs more pairs to call any of them.
                Some(figures) if got.pairs(lesson) == 1 => _ = want.insert(lesson, pairs_for(want[lesson], figures)),
                // Three failures end a lesson's runs: it is judged from the pairs it has.
                None if got.errors[*lesson].len() >= 3 => _ = want.insert(lesson, got.pairs(lesson)),
                _ => {}
            }
            eprintln!(
                "interleaved: pair {}/{} of {lesson:<20} A {ta:>5.1} s, B {tb:>5.1} s ({:.0} s so far)",
                got.pairs(lesson),
                want[lesson],
                started.elapsed().as_secs_f64()
            );
        }
        round_s = round_started.elapsed().as_secs_f64();
        if pair == 0 {
            let rounds = want.values().max().copied().unwrap_or(0);
            eprintln!(
                "interleaved: a round of every lesson took {round_s:.0} s: about {:.0} s for all {rounds} rounds",
                round_s * rounds as f64
            );
        }
    }
    Ok(got)
}

/// The lessons and their pairs in a `--keep` folder: `pair-N/a/LESSON.json` and `pair-N/b/LESSON.json`,
/// pair by pair; a pair that lacks one side is left out.
pub fn read_kept(dir: &Path) -> anyhow::Result<(Vec<String>, Gathered)> {
    let mut got = Gathered::default();
    let mut n = 1;
    while dir.join(format!("pair-{n}")).is_dir() {
        let folder = dir.join(format!("pair-{n}"));
        let lessons = std::fs::read_dir(folder.join("a")).with_context(|| format!("reading {}", folder.display()))?;
        let mut lessons: Vec<String> =
            lessons.filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".json").map(String::from)).collect();
        lessons.sort();
        for lesson in lessons {
            let read = |side: &str| -> Ran {
                let path = folder.join(side).join(format!("{lesson}.json"));
                let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()));
                (text.and_then(|t| serde_json::from_str(&t).map_err(|e| format!("{}: {e}", path.display()))), 0.0)
            };
            let (ra, rb) = (read("a"), read("b"));
            // What was pinned is not kept: a run given its calibration calibrates nothing, so says nothing.
            if ra.0.is_ok() && rb.0.is_ok() {
                got.add(&lesson, ra, rb);
            }
        }
        n += 1;
    }
    if n == 1 {
        bail!("{} holds no pair-1 folder: not what --keep writes", dir.display());
    }
    got.walls.clear(); // not kept
    let names = got.runs.keys().cloned().collect();
    Ok((names, got))
}

/// Judges and reports each lesson of `names` from what was gathered; writes `--json`; 1 where a figure
/// is SLOW, else 0.
fn finish(
    flags: &CompareFlags,
    names: &[String],
    mut got: Gathered,
    a: Option<&Build>,
    b: Option<&Build>,
    started: Instant,
) -> anyhow::Result<u8> {
    let mut judged = Vec::new();
    for lesson in names {
        let Some(r) = got.runs.get(lesson) else {
            let why = got.errors.get(lesson).and_then(|e| e.first().cloned()).unwrap_or("names no figures".into());
            println!("\n== {lesson}: left out: {why}");
            continue;
        };
        let mut l = judge_lesson(lesson, r);
        l.errors = got.errors.remove(lesson).unwrap_or_default();
        l.wall_s = got.walls.remove(lesson).unwrap_or_default();
        l.planted = got.planted.remove(lesson).unwrap_or_default();
        l.pinned = got.pinned.remove(lesson).unwrap_or_default();
        print!("{}", report(&l, flags.all));
        judged.push(l);
    }
    let all: Vec<&Judged> = judged.iter().flat_map(|l| &l.figures).collect();
    let slower = all.iter().filter(|f| f.paired.verdict == Verdict::Slower).count();
    let (gpu, host): (Vec<&Judged>, Vec<&Judged>) = all.iter().partition(|f| f.on_the_gpu());
    println!("\nin all, {:.0} s:", started.elapsed().as_secs_f64());
    println!("  {GPU_GROUP}: {}", group_line(&gpu));
    println!("  {HOST_GROUP}: {}", group_line(&host));
    println!("  The latter are {HOST_MOVES}");
    if let Some(path) = &flags.interleave.json {
        let about = "compare --interleave: each lesson of A and of B run in turn; for each figure, each pair's medians \
                     (A, B) in ms, B/A (Hodges-Lehmann) with its Wilcoxon signed-rank interval at the lesson's level \
                     (family_alpha over its figures, Bonferroni), its verdict, and the smallest changes that would have \
                     shown (xtask/src/compare/paired.rs)";
        let w = Written { about, family_alpha: FAMILY_ALPHA, figure_alpha: FIGURE_ALPHA, a, b, lessons: &judged };
        std::fs::write(path, serde_json::to_string_pretty(&w)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!("written: {}", path.display());
    }
    Ok(if slower > 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests;
