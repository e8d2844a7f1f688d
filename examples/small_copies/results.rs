//! What the lesson finds: whether every byte came back ([`ByteCheck`]), each way's times over a set
//! ([`WayRun`], [`SetRun`], and their figures for `cargo xtask compare`), and the tables and notes
//! printed from them: the grid at a glance, the winners, where batching, packing and graphs stop
//! mattering, one set in detail, and which ways beat one copy of all the bytes each way.

use anyhow::bail;
use serde::Serialize;

use measure::{
    fit::CopyCost,
    report::{fmt_bytes, Figure, MemoryKind, Table},
    timing::{quantile, Stats},
};

use crate::ways::TransferWay;

/// Whether every byte came back.
#[derive(Clone, Debug, Serialize)]
pub struct ByteCheck {
    pub buffers: usize,
    pub bytes: usize,
    pub wrong_buffers: usize,
    /// The first wrong buffer, in words.
    pub first: Option<String>,
}

impl ByteCheck {
    pub fn of<'a>(expected: impl Iterator<Item = &'a [u8]>, got: impl Iterator<Item = &'a [u8]>) -> ByteCheck {
        let (mut c, mut bytes) = (ByteCheck { buffers: 0, bytes: 0, wrong_buffers: 0, first: None }, 0);
        for (i, (e, g)) in expected.zip(got).enumerate() {
            c.buffers += 1;
            bytes += e.len();
            if e != g {
                c.wrong_buffers += 1;
                if c.first.is_none() {
                    let j = e.iter().zip(g).position(|(a, b)| a != b).unwrap_or(0);
                    c.first = Some(format!("buffer {i}, byte {j}: got {:#04x}, expected {:#04x}", g[j], e[j]));
                }
            }
        }
        c.bytes = bytes;
        c
    }

    pub fn ensure(&self, what: &str) -> anyhow::Result<()> {
        match &self.first {
            None if self.buffers > 0 => Ok(()),
            None => bail!("{what}: nothing was checked"),
            Some(first) => {
                bail!("{what}: {} of {} buffers came back wrong; the first: {first}", self.wrong_buffers, self.buffers)
            }
        }
    }
}

/// One way over one set: its times (median of runs), what it moved, and its check.
#[derive(Clone, Debug, Serialize)]
pub struct WayRun {
    pub way: TransferWay,
    pub name: String,
    /// The round trip as the caller waits for it: from the first byte packed or the first call until
    /// every byte is in its host buffer.
    pub wall: Stats,
    /// The GPU's time, CUDA events around the work.
    pub gpu: Stats,
    /// The host's time in the calls that queue the work (and packing and unpacking, for that way).
    pub host: Stats,
    /// Both ways' bytes over the wall time, GB/s.
    pub gbps: f64,
    /// GPU time over one copy of all the bytes each way.
    pub gpu_vs_one_copy: f64,
    /// Whether that is a bound for this way ([`TransferWay::bounded`]), or a reference.
    pub bounded: bool,
    pub check: ByteCheck,
    /// The graph's capture and instantiation, ms, on the host clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_ms: Option<f64>,
}

/// Every way over one set.
#[derive(Clone, Debug, Serialize)]
pub struct SetRun {
    pub set: String,
    pub count: usize,
    pub bytes: usize,
    pub uniform: Option<(usize, usize)>,
    /// One H2D copy of all the bytes, then one D2H copy of them, ms: the best of runs, GPU time, measured
    /// before the ways and after them (the lesser of the two).
    pub one_copy_ms: f64,
    /// The same as the caller waits for it, the median of runs, ms, the lesser of before and after: what
    /// the wall times compare with.
    pub one_copy_wall_ms: f64,
    pub ways: Vec<WayRun>,
    /// The scope's price for one memcpy per buffer, where it was measured (the first set of each count of
    /// 100 buffers or more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope_price: Option<ScopePrice>,
    /// The packed way's CPU side measured alone, where it was (sets of 100 buffers or more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packed_parts: Option<PackedParts>,
}

/// The packed way's CPU side over a set measured alone, right after every way ran, in the same buffers:
/// packing every buffer into the pinned packed buffer, and unpacking it into the host buffers, each on
/// the threads the packed way shares them among (woken each time, as it wakes them), the best of seven.
#[derive(Clone, Debug, Serialize)]
pub struct PackedParts {
    pub threads: usize,
    pub pack_ms: f64,
    pub unpack_ms: f64,
}

impl PackedParts {
    /// The CPU's side of a round trip: packing then unpacking.
    pub fn cpu_ms(&self) -> f64 {
        self.pack_ms + self.unpack_ms
    }
}

/// The packed way against its parts measured alone, over the sets where they were: a row a set, with
/// the larger of the two parts (the copies, or the CPU's side), a model of the packed way's floor were
/// its overlap perfect, and what the packed way took beyond it.
pub fn packed_table(runs: &[SetRun]) -> Option<Table> {
    let mut t = Table::new(&[
        "buffers",
        "threads",
        "packed, wall µs",
        "one copy each way, wall µs",
        "packing alone",
        "unpacking alone",
        "the larger part",
        "packed / larger part",
    ]);
    let mut any = false;
    for run in runs {
        let (Some(parts), Some(packed)) = (&run.packed_parts, run.ways.iter().find(|w| w.way == TransferWay::Packed))
        else {
            continue;
        };
        any = true;
        let (copies, cpu) = (run.one_copy_wall_ms, parts.cpu_ms());
        let larger =
            if cpu >= copies { format!("the CPU's side, {}", us(cpu)) } else { format!("the copies, {}", us(copies)) };
        t.row(vec![
            run.set.clone(),
            parts.threads.to_string(),
            us(packed.wall.median_ms),
            us(copies),
            us(parts.pack_ms),
            us(parts.unpack_ms),
            larger,
            format!("{:.2}", packed.wall.median_ms / cpu.max(copies)),
        ]);
    }
    any.then_some(t)
}

/// The scope's price for one memcpy per buffer over a set (one stream, from pinned memory): the host's
/// time a copy in the calls through the scope, and in the same calls made bare
/// ([`cuda_scope::probe::bare_round_trip`]), the two in turn in one run.
#[derive(Clone, Debug, Serialize)]
pub struct ScopePrice {
    /// Copies a round trip: two a buffer.
    pub copies: usize,
    /// The host's time a copy, µs: the median of the round trips through the scope, and bare.
    pub scope_us: f64,
    pub bare_us: f64,
    /// The median of each pair's own ratio, scope over bare.
    pub ratio: f64,
    /// The pairs' ratios' first and third quartiles: the middle half of them.
    pub middle_half: [f64; 2],
    pub pairs: usize,
}

/// The first and third quartiles of `v` (not empty), between its sorted values as [`Stats`] takes its
/// third ([`quantile`]).
pub fn quartiles(v: &[f64]) -> [f64; 2] {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    [quantile(&v, 0.25), quantile(&v, 0.75)]
}

/// The scope's price over the sets where it was measured: a row a set.
pub fn price_table(runs: &[SetRun]) -> Option<Table> {
    let mut t = Table::new(&[
        "buffers",
        "through the scope, µs a copy",
        "bare calls, µs a copy",
        "scope / bare",
        "the middle half of the pairs",
    ]);
    for (run, p) in runs.iter().filter_map(|r| r.scope_price.as_ref().map(|p| (r, p))) {
        t.row(vec![
            run.set.clone(),
            format!("{:.2}", p.scope_us),
            format!("{:.2}", p.bare_us),
            format!("{:.3}", p.ratio),
            format!("{:.3}-{:.3}", p.middle_half[0], p.middle_half[1]),
        ]);
    }
    runs.iter().any(|r| r.scope_price.is_some()).then_some(t)
}

impl SetRun {
    /// The fastest way by wall time.
    pub fn fastest(&self) -> &WayRun {
        self.ways.iter().min_by(|a, b| a.wall.median_ms.total_cmp(&b.wall.median_ms)).expect("a way")
    }

    /// The fastest of the ways whose name starts with `family` (`memcpy each`, `batch`), pinned ones
    /// only, and not coalesced by the scope, by wall time.
    pub fn best_of(&self, family: &str) -> Option<&WayRun> {
        self.ways
            .iter()
            .filter(|w| w.name.starts_with(family) && !w.way.pageable() && !w.way.coalesced())
            .min_by(|a, b| a.wall.median_ms.total_cmp(&b.wall.median_ms))
    }

    /// The way named `name`.
    pub fn way(&self, name: &str) -> Option<&WayRun> {
        self.ways.iter().find(|w| w.name == name)
    }
}

/// The scope's model of its coalesced copies, as it fitted it in this run, in one line.
pub fn describe_copy_model(m: &cuda_scope::CopyModel) -> String {
    format!(
        "the scope's model, fitted in this run in {:.1} ms: a copy each way {:.2} µs up, {:.2} down ({:.2} and {:.2} \
         from pageable memory) + n / {:.1} GB/s; the kernel {:.1} µs + n / {:.1} GB/s up, {:.1} down; packing \
         pageable memory {:.1} GB/s",
        m.fit_ms,
        m.each_up_us,
        m.each_down_us,
        m.each_up_pageable_us,
        m.each_down_pageable_us,
        m.engine_gbps,
        m.kernel_us,
        m.kernel_up_gbps,
        m.kernel_down_gbps,
        m.pack_gbps
    )
}

/// The natural loop coalesced by the scope, from pinned and pageable memory, on one stream and on
/// several, against the packed way and the same loop with coalescing off (wall µs, medians): the
/// table, where the run has the coalesced ways.
pub fn coalesced_table(runs: &[SetRun]) -> Option<Table> {
    let ways: Vec<&str> = runs.first()?.ways.iter().filter(|w| w.way.coalesced()).map(|w| w.name.as_str()).collect();
    if ways.is_empty() {
        return None;
    }
    let short: Vec<String> = ways
        .iter()
        .map(|w| w.trim_start_matches("memcpy each").trim_start_matches(", ").replace(", coalesced", ""))
        .collect();
    let mut headers = vec!["buffers", "packed"];
    headers.extend(short.iter().map(|s| if s.is_empty() { "1 stream" } else { s.as_str() }));
    headers.extend(["coalesced / packed", "memcpy each / coalesced"]);
    let mut t = Table::new(&headers);
    for run in runs {
        let packed = run.way("packed + scatter kernel").map(|w| w.wall.median_ms);
        let mut cells = vec![run.set.clone(), packed.map_or("-".into(), us)];
        let mut ratios = Vec::new();
        for name in &ways {
            let w = run.way(name);
            cells.push(w.map_or("-".into(), |w| us(w.wall.median_ms)));
            if let (Some(w), Some(p)) = (w, packed) {
                ratios.push(w.wall.median_ms / p);
            }
        }
        ratios.sort_by(f64::total_cmp);
        cells.push(match (ratios.first(), ratios.last()) {
            (Some(a), Some(b)) => format!("{a:.2}-{b:.2}x"),
            _ => "-".into(),
        });
        let (each, coalesced) = (run.way("memcpy each"), run.way("memcpy each, coalesced"));
        cells.push(match (each, coalesced) {
            (Some(e), Some(c)) => format!("{:.1}x", e.wall.median_ms / c.wall.median_ms),
            _ => "-".into(),
        });
        t.row(cells);
    }
    Some(t)
}

impl SetRun {
    /// Every way's times over the set, named for the JSON document as `SET / WAY / what`:
    /// `1000 x 4 KiB / memcpy each / wall` (as the caller waits), `... / gpu` (CUDA events), `... / host`
    /// (the host in the calls). Each transfer moves one buffer: the set's size, or for a set of mixed
    /// sizes the mean.
    pub fn figures(&self) -> Vec<Figure> {
        let each = self.bytes / self.count.max(1);
        let mut out = Vec::new();
        for w in &self.ways {
            let name = |what: &str| format!("{} / {} / {what}", self.set, w.name);
            let memory = if w.way.pageable() { MemoryKind::Pageable } else { MemoryKind::Pinned };
            let figure = |what: &str, stats: &Stats| Figure::new(name(what), stats).transfers(each).memory(memory);
            out.push(figure("wall", &w.wall).on_host());
            out.push(figure("gpu", &w.gpu).paced_by(&w.host)); // host-paced where its calls took most of it
            out.push(figure("host", &w.host).on_host());
        }
        out
    }
}

/// µs with sensible precision: `6.4`, `82`, `6,013`.
pub fn us(ms: f64) -> String {
    let us = ms * 1e3;
    match us {
        u if u < 10.0 => format!("{u:.1}"),
        u if u < 1e3 => format!("{u:.0}"),
        u => measure::report::fmt_count(u.round() as usize),
    }
}

/// The grid at a glance: a row a set, each way's wall time (µs; batches at their best order, from
/// pinned memory), one copy each way for scale, and the fastest way.
pub fn grid_table(runs: &[SetRun]) -> Table {
    let mut families: Vec<&str> = vec!["memcpy each"];
    let spread = runs
        .iter()
        .flat_map(|r| &r.ways)
        .find(|w| matches!(w.way, TransferWay::Each { streams: 2.., coalesced: false, .. }));
    let spread_name = spread.map(|w| w.name.clone());
    if let Some(name) = &spread_name {
        families.push(name);
    }
    families.extend(["batch", "packed", "graph", "zero-copy"]);
    let mut headers = vec!["buffers", "all", "one copy each way"];
    let short: Vec<String> = families
        .iter()
        .map(|f| match *f {
            "memcpy each" => "each".to_string(),
            f if f.starts_with("memcpy each, ") => format!("each, {}", &f["memcpy each, ".len()..]),
            f => f.to_string(),
        })
        .collect();
    headers.extend(short.iter().map(String::as_str));
    headers.push("fastest");
    let mut t = Table::new(&headers);
    for run in runs {
        let mut cells = vec![run.set.clone(), fmt_bytes(run.bytes), us(run.one_copy_ms)];
        for f in &families {
            let found = match *f {
                "memcpy each" => run
                    .ways
                    .iter()
                    .find(|w| matches!(w.way, TransferWay::Each { streams: 1, pageable: false, coalesced: false })),
                f if f.starts_with("memcpy each, ") => run.ways.iter().find(|w| w.name == f),
                f => run.best_of(f),
            };
            cells.push(found.map_or("-".into(), |w| us(w.wall.median_ms)));
        }
        let (fastest, each) = (run.fastest(), run.best_of("memcpy each"));
        let gain = each.map_or(String::new(), |e| format!(" ({:.1}x)", e.wall.median_ms / fastest.wall.median_ms));
        cells.push(format!("{}{gain}", fastest.name));
        t.row(cells);
    }
    t
}

/// Which way was fastest (wall) where, in a sentence: `zero-copy kernel at 4 of 10 sets (10 x 256 B, ...)`.
pub fn winners(runs: &[SetRun]) -> String {
    let mut by_way: Vec<(String, Vec<&str>)> = Vec::new();
    for run in runs {
        let name = run.fastest().name.clone();
        match by_way.iter_mut().find(|(w, _)| *w == name) {
            Some((_, sets)) => sets.push(&run.set),
            None => by_way.push((name, vec![&run.set])),
        }
    }
    by_way.sort_by_key(|(_, sets)| std::cmp::Reverse(sets.len()));
    let parts: Vec<String> = by_way
        .iter()
        .map(|(way, sets)| format!("{way} at {} of {} ({})", sets.len(), runs.len(), sets.join(", ")))
        .collect();
    format!("fastest by wall time: {}", parts.join("; "))
}

/// Every way over one set: GPU time, the host's time in the calls, the wall time, GB/s, the wall time
/// against one copy of all the bytes each way's, and the GPU time against that copy's (a bound, or a
/// reference: the last column).
pub fn detail_table(run: &SetRun) -> Table {
    let mut t = Table::new(&[
        "way",
        "GPU µs",
        "host µs",
        "wall µs",
        "GB/s",
        "wall / one copy",
        "GPU / one copy",
        "one copy is",
    ]);
    for w in &run.ways {
        t.row(vec![
            w.name.clone(),
            us(w.gpu.median_ms),
            us(w.host.median_ms),
            us(w.wall.median_ms),
            format!("{:.2}", w.gbps),
            format!("{:.2}", w.wall.median_ms / run.one_copy_wall_ms),
            format!("{:.2}", w.gpu_vs_one_copy),
            if w.bounded { "a bound".into() } else { "a reference".into() },
        ]);
    }
    t
}

/// A way's wall time per buffer over sizes, fitted as `α + size/β` (one count, several sizes).
fn per_buffer_fit(runs: &[&SetRun], pick: impl Fn(&SetRun) -> Option<f64>) -> Option<CopyCost> {
    let points: Vec<(usize, f64)> =
        runs.iter().filter_map(|r| Some((r.uniform?.1, pick(r)? / r.count as f64))).collect();
    CopyCost::fit(&points).ok()
}

/// The gain under which a way "stops mattering" against one memcpy per buffer.
pub const MATTERS: f64 = 1.1;

/// Where batching, packing and graphs stop mattering: for each count of the uniform sets, the smallest
/// size from which each is less than [`MATTERS`] times faster (wall) than the faster memcpy per buffer
/// at that size and every larger one tried, and where the fits of both over the sizes (per buffer,
/// `α + size/β`) say the gain falls under it.
pub fn crossover_table(runs: &[SetRun]) -> Option<Table> {
    let mut counts: Vec<usize> = runs.iter().filter_map(|r| r.uniform.map(|u| u.0)).collect();
    counts.sort_unstable();
    counts.dedup();
    let families = ["batch", "packed", "graph"];
    let mut t = Table::new(&["buffers", "batch", "packed", "graph"]);
    let mut any = false;
    for count in counts {
        let mut rows: Vec<&SetRun> = runs.iter().filter(|r| r.uniform.is_some_and(|u| u.0 == count)).collect();
        rows.sort_by_key(|r| r.uniform.map(|u| u.1));
        if rows.len() < 2 {
            continue;
        }
        any = true;
        let mut cells = vec![format!("{count}")];
        for family in families {
            let gain = |r: &SetRun| Some(r.best_of("memcpy each")?.wall.median_ms / r.best_of(family)?.wall.median_ms);
            let gains: Vec<Option<f64>> = rows.iter().map(|r| gain(r)).collect();
            if gains.iter().all(Option::is_none) {
                cells.push("-".into());
                continue;
            }
            let from = (0..rows.len()).find(|&k| gains[k..].iter().all(|g| g.is_some_and(|g| g < MATTERS)));
            let measured = match from {
                Some(k) => format!("from {}", fmt_bytes(rows[k].uniform.unwrap().1)),
                None => {
                    let last = gains.iter().rev().flatten().next().copied().unwrap_or(f64::NAN);
                    format!("not by {} ({last:.1}x)", fmt_bytes(rows[rows.len() - 1].uniform.unwrap().1))
                }
            };
            let each = per_buffer_fit(&rows, |r| Some(r.best_of("memcpy each")?.wall.median_ms));
            let way = per_buffer_fit(&rows, |r| Some(r.best_of(family)?.wall.median_ms));
            let model = match (each, way) {
                (Some(e), Some(w)) => {
                    crossing(&e, &w).map_or("; fits: never".into(), |s| format!("; fits: {}", fmt_bytes(s)))
                }
                _ => String::new(),
            };
            cells.push(format!("{measured}{model}"));
        }
        t.row(cells);
    }
    any.then_some(t)
}

/// The buffer size from which `way` (per buffer `α + s/β`) is less than [`MATTERS`] times faster than
/// `each`, or `None` where it never is.
pub fn crossing(each: &CopyCost, way: &CopyCost) -> Option<usize> {
    let (ae, aw) = (each.alpha_us * 1e-6, way.alpha_us * 1e-6);
    let (xe, xw) = (1.0 / (each.beta_gbps * 1e9), 1.0 / (way.beta_gbps * 1e9));
    // each(s) < MATTERS * way(s)  <=>  s (xe - MATTERS xw) < MATTERS aw - ae
    let (slope, room) = (xe - MATTERS * xw, MATTERS * aw - ae);
    if room > 0.0 {
        return Some(0);
    }
    (slope < 0.0).then(|| (room / slope).ceil() as usize)
}

/// The ways that beat one copy of all the bytes each way, where it is a reference, and whether any
/// way it bounds beat it beyond noise (10%): lines for the notes.
pub fn beaten(runs: &[SetRun]) -> Vec<String> {
    let mut lines = Vec::new();
    for run in runs {
        for w in run.ways.iter().filter(|w| w.gpu_vs_one_copy < 0.9 || (!w.bounded && w.gpu_vs_one_copy < 1.0)) {
            lines.push(format!(
                "{} over {}: GPU time {:.2} of one copy each way ({})",
                w.name,
                run.set,
                w.gpu_vs_one_copy,
                if w.bounded {
                    "a bound it should not beat: timing noise, or a slower copy when it was measured"
                } else {
                    "a reference, which this way can beat"
                }
            ));
        }
    }
    lines
}

#[cfg(test)]
pub(crate) mod tests {
    use cuda_scope::SrcOrder;

    use super::*;
    use crate::buffers::BufferSet;

    fn cost(alpha_us: f64, beta_gbps: f64) -> CopyCost {
        CopyCost { alpha_us, beta_gbps, half_rate_bytes: 0.0, worst_miss: 0.0 }
    }

    #[test]
    fn the_crossover_is_where_the_per_buffer_cost_stops_mattering() {
        // One memcpy per buffer: 6 µs and 55 GB/s; a batch: 1 µs per buffer at the same rate. The batch
        // is less than 1.1x faster once 6 + s/55e3 < 1.1 (1 + s/55e3) µs: s > 49 * 55e3 / 1 bytes.
        let s = crossing(&cost(6.0, 55.0), &cost(1.0, 55.0)).unwrap();
        assert!((s as f64 / (4.9e-6 / 0.1 * 55e9) - 1.0).abs() < 1e-6, "{s}");
        assert_eq!(crossing(&cost(6.0, 55.0), &cost(6.0, 55.0)), Some(0), "no gain at any size");
        assert_eq!(crossing(&cost(6.0, 20.0), &cost(1.0, 55.0)), None, "a faster rate always matters");
    }

    pub(crate) fn stats(ms: f64) -> Stats {
        Stats { median_ms: ms, min_ms: ms, max_ms: ms, q3_ms: ms, runs: 3, cv: 0.0 }
    }

    /// A made-up run: one memcpy per buffer at 6 µs + size/55 GB/s each way, a batch at 1.5 µs a buffer,
    /// packing at 20 µs + 2 µs a buffer, a graph at 3 µs a buffer, zero-copy at 8 µs + size/20 GB/s.
    pub(crate) fn made_up(count: usize, size: usize) -> SetRun {
        let bytes = (count * size) as f64;
        let n = count as f64;
        let link = bytes / 55e6; // ms each way
        let times = [
            (TransferWay::Each { streams: 1, pageable: false, coalesced: false }, n * 0.012 + 2.0 * link),
            (TransferWay::Each { streams: 4, pageable: false, coalesced: false }, n * 0.010 + 2.0 * link),
            (TransferWay::Batch { order: SrcOrder::StreamOrder, pageable: false }, 0.02 + n * 0.0015 + 2.0 * link),
            (TransferWay::Batch { order: SrcOrder::Any, pageable: true }, 0.02 + n * 0.001 + 2.0 * bytes / 10e6),
            (TransferWay::Packed, 0.02 + n * 0.002 + 2.0 * link + bytes / 5e6),
            (TransferWay::Graph, 0.01 + n * 0.003 + 2.0 * link),
            (TransferWay::ZeroCopy, 0.008 + 2.0 * bytes / 20e6),
        ];
        let one_copy_ms = 0.012 + 2.0 * link;
        let ways = times
            .iter()
            .map(|&(way, ms)| WayRun {
                way,
                name: way.name(),
                wall: stats(ms),
                gpu: stats(ms * 0.9),
                host: stats(ms * 0.5),
                gbps: 2.0 * bytes / (ms * 1e6),
                gpu_vs_one_copy: ms * 0.9 / one_copy_ms,
                bounded: way.bounded(),
                check: ByteCheck { buffers: count, bytes: count * size, wrong_buffers: 0, first: None },
                build_ms: None,
            })
            .collect();
        SetRun {
            set: BufferSet::uniform(count, size).name,
            count,
            bytes: count * size,
            uniform: Some((count, size)),
            one_copy_ms,
            one_copy_wall_ms: one_copy_ms + 0.01,
            ways,
            scope_price: None,
            packed_parts: None,
        }
    }

    #[test]
    fn the_tables_say_who_wins_where_and_where_batching_stops_mattering() {
        let runs: Vec<SetRun> =
            [(10, 256), (10, 1 << 20), (10, 16 << 20), (1000, 256), (1000, 4096)].map(|(c, s)| made_up(c, s)).into();
        let grid = grid_table(&runs).render();
        let lines: Vec<&str> = grid.lines().collect();
        assert!(
            lines[0].starts_with("buffers") && lines[0].contains("each, 4 streams") && lines[0].ends_with("fastest")
        );
        assert!(lines[2].starts_with("10 x 256 B") && lines[2].ends_with("zero-copy kernel (12.1x)"), "{}", lines[2]);
        let w = winners(&runs);
        assert!(w.starts_with("fastest by wall time: zero-copy kernel at "), "{w}");
        let cross = crossover_table(&runs).unwrap().render();
        let row10 = cross.lines().find(|l| l.starts_with("10 ")).unwrap();
        // 10 buffers: a batch is 1.16x faster at 1 MiB and 1.01x at 16 MiB; packing is slower from 1 MiB.
        let cells: Vec<&str> = row10.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert!(cells[1].starts_with("from 16 MiB; fits: 1.") && cells[1].ends_with(" MiB"), "{row10}");
        assert!(cells[2].starts_with("from 1 MiB; fits: "), "{row10}");
        assert!(cross.lines().any(|l| l.starts_with("1000 ")), "{cross}");
        let detail = detail_table(&runs[0]).render();
        assert!(detail.contains("a bound") && detail.contains("a reference"), "{detail}");
        let notes = beaten(&runs);
        assert!(notes.iter().any(|l| l.starts_with("zero-copy kernel over 10 x 256 B") && l.contains("a reference")));
        assert!(notes.iter().all(|l| !l.starts_with("memcpy each,") && !l.starts_with("packed")), "{notes:?}");
    }

    #[test]
    fn every_way_names_its_three_times_by_set_way_and_clock() {
        let run = made_up(1000, 4096);
        let figures = run.figures();
        assert_eq!(figures.len(), 3 * run.ways.len());
        let names: Vec<&str> = figures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names[..3],
            [
                "1000 x 4 KiB / memcpy each / wall",
                "1000 x 4 KiB / memcpy each / gpu",
                "1000 x 4 KiB / memcpy each / host"
            ]
        );
        assert!(names.contains(&"1000 x 4 KiB / batch, any order, pageable / host"), "{names:?}");
        use measure::report::Clock;
        let clocks: Vec<Clock> = figures[..3].iter().map(|f| f.clock).collect();
        assert_eq!(clocks, [Clock::Host, Clock::Gpu, Clock::Host]);
        assert!(figures.iter().all(|f| f.transfer_bytes == Some(4096)));
        assert_eq!(figures[1].stats, run.ways[0].gpu);
    }

    #[test]
    fn the_scopes_price_is_a_row_a_set_where_it_was_measured() {
        let mut runs = vec![made_up(10, 4096), made_up(1000, 4096)];
        assert!(price_table(&runs).is_none(), "nothing priced, no table");
        runs[1].scope_price = Some(ScopePrice {
            copies: 2000,
            scope_us: 2.2,
            bare_us: 2.0,
            ratio: 1.08,
            middle_half: [1.05, 1.11],
            pairs: 7,
        });
        let t = price_table(&runs).unwrap().render();
        assert!(t.contains("1000 x 4 KiB") && t.contains("2.20") && t.contains("2.00") && t.contains("1.080"), "{t}");
        assert!(t.contains("1.050-1.110"), "the middle half of the pairs: {t}");
        assert!(!t.contains("10 x 4 KiB"), "{t}");
    }

    #[test]
    fn quartiles_lie_between_the_sorted_values() {
        assert_eq!(quartiles(&[3.0]), [3.0, 3.0]);
        assert_eq!(quartiles(&[4.0, 1.0, 3.0, 2.0, 5.0]), [2.0, 4.0]);
        // Four values: the quarter points fall between them (0.75 and 2.25 of the way along).
        assert_eq!(quartiles(&[10.0, 0.0, 20.0, 30.0]), [7.5, 22.5]);
    }

    #[test]
    fn the_packed_way_is_held_against_the_larger_of_its_parts() {
        let mut runs = vec![made_up(10, 4096), made_up(1000, 4096), made_up(100, 256)];
        assert!(packed_table(&runs).is_none(), "no parts measured, no table");
        // 1000 x 4 KiB: the copies 0.171 ms (wall) outweighed by a CPU side of 0.2 ms.
        runs[1].packed_parts = Some(PackedParts { threads: 6, pack_ms: 0.09, unpack_ms: 0.11 });
        // 100 x 256 B: the copies, 0.0229 ms (wall), outweigh a CPU side of 0.004.
        runs[2].packed_parts = Some(PackedParts { threads: 1, pack_ms: 0.002, unpack_ms: 0.002 });
        let t = packed_table(&runs).unwrap().render();
        let row =
            |set: &str| t.lines().find(|l| l.starts_with(set)).unwrap_or_else(|| panic!("{set}: {t}")).to_string();
        let big = row("1000 x 4 KiB");
        let packed = runs[1].ways.iter().find(|w| w.way == TransferWay::Packed).unwrap().wall.median_ms;
        assert!(big.contains("the CPU's side, 200") && big.ends_with(&format!("{:.2}", packed / 0.2)), "{big}");
        assert!(big.contains(" 6 ") && big.contains(" 90 ") && big.contains(" 110 ") && big.contains(" 171 "), "{big}");
        let small = row("100 x 256 B");
        assert!(small.contains("the copies, 23") && small.contains(" 1 "), "{small}");
        assert!(!t.contains("10 x 4 KiB"), "not measured, no row: {t}");
    }

    #[test]
    fn microseconds_read_at_a_glance() {
        assert_eq!(us(0.0064), "6.4");
        assert_eq!(us(0.082), "82");
        assert_eq!(us(6.013), "6,013");
    }
}
