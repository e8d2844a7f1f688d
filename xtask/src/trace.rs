//! Traces of the lessons, from Nsight Systems (`nsys stats` CSV) or from the built-in timeline (Chrome
//! trace JSON): parsing, the overlap metrics, and the timeline picture.

use std::{collections::BTreeMap, fmt::Write as _};

use anyhow::{bail, Context as _};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    H2D,
    Kernel,
    D2H,
    Memset,
    Other,
}

impl Kind {
    fn colour(self) -> &'static str {
        match self {
            Kind::H2D => "#4e79a7",
            Kind::Kernel => "#59a14f",
            Kind::D2H => "#f28e2b",
            Kind::Memset => "#bab0ac",
            Kind::Other => "#b07aa1",
        }
    }
}

/// One GPU operation; times in ms. From nsys also the correlation id of the API call that made it, and
/// the memory kinds a copy read and wrote ("Pageable", "Pinned", "Device", "Managed"...; empty if unknown).
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub start: f64,
    pub end: f64,
    pub stream: String,
    pub kind: Kind,
    pub name: String,
    pub bytes: u64,
    pub corr: Option<u64>,
    pub src_kind: String,
    pub dst_kind: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: String,
    pub start: f64,
    pub end: f64,
}

#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub ops: Vec<Op>,
    pub phases: Vec<Phase>,
}

/// The rows of a CSV with a header (nsys stats output), as maps from column name to value. Quoted
/// fields may hold commas (kernel names do); lines before the header that are blank are skipped.
pub fn csv_rows(text: &str) -> anyhow::Result<Vec<BTreeMap<String, String>>> {
    let text = text.trim_start_matches('\u{feff}');
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(text.trim_start().as_bytes());
    let header: Vec<String> = reader.headers().context("reading the CSV header")?.iter().map(str::to_string).collect();
    reader
        .records()
        .enumerate()
        .map(|(i, r)| {
            let r = r.with_context(|| format!("reading CSV row {}", i + 1))?;
            Ok(header.iter().cloned().zip(r.iter().map(str::to_string)).collect())
        })
        .collect()
}

/// The value of the first of `names` that the row has, by name or prefix, ignoring ASCII case (nsys
/// spells the correlation id "CorrId" in one report and "CorrID" in another).
pub fn column<'a>(row: &'a BTreeMap<String, String>, names: &[&str]) -> Option<&'a str> {
    let lower = |s: &str| s.to_ascii_lowercase();
    names.iter().find_map(|n| {
        let n = lower(n);
        row.iter().find(|(k, _)| lower(k).starts_with(&n)).map(|(_, v)| v.as_str())
    })
}

/// `nsys stats --report cuda_gpu_trace --format csv`.
pub fn parse_gpu_trace_csv(text: &str) -> anyhow::Result<Vec<Op>> {
    let mut ops = Vec::new();
    for (i, row) in csv_rows(text)?.iter().enumerate() {
        let num = |names: &[&str]| -> anyhow::Result<f64> {
            let v = column(row, names).with_context(|| format!("row {}: no column {names:?}", i + 1))?;
            v.trim().parse::<f64>().with_context(|| format!("row {}: {names:?} is {v:?}", i + 1))
        };
        let name = column(row, &["Name"]).context("no Name column")?.to_string();
        // Copies and memsets are named in brackets ("[CUDA memcpy Host-to-Device]", "[CUDA memcpy HtoD]" in
        // older nsys, "[CUDA memset]"); anything else is a kernel, whatever its name says.
        let kind = match name.strip_prefix('[') {
            Some(n) if n.contains("Host-to-Device") || n.contains("HtoD") => Kind::H2D,
            Some(n) if n.contains("Device-to-Host") || n.contains("DtoH") => Kind::D2H,
            Some(n) if n.contains("memset") => Kind::Memset,
            Some(_) => Kind::Other,
            None => Kind::Kernel,
        };
        let start = num(&["Start (ns)"])? / 1e6;
        let bytes = column(row, &["Bytes (MB)"])
            .and_then(|b| b.trim().parse::<f64>().ok())
            .map_or(0, |mb| (mb * 1e6).round() as u64);
        ops.push(Op {
            start,
            end: start + num(&["Duration (ns)"])? / 1e6,
            stream: column(row, &["Strm"]).unwrap_or("?").to_string(),
            kind,
            name,
            bytes,
            corr: column(row, &["CorrId", "Correlation"]).and_then(|c| c.trim().parse().ok()),
            src_kind: column(row, &["SrcMemKd", "Src Kind", "SrcMemKind"]).unwrap_or("").trim().to_string(),
            dst_kind: column(row, &["DstMemKd", "Dst Kind", "DstMemKind"]).unwrap_or("").trim().to_string(),
        });
    }
    Ok(ops)
}

/// NVTX ranges from `nsys stats` (`nvtx_pushpop_trace` or `nvtx_gpu_proj_trace`), whatever the exact columns.
pub fn parse_nvtx_csv(text: &str) -> anyhow::Result<Vec<Phase>> {
    let mut phases = Vec::new();
    for row in csv_rows(text)? {
        let get = |names: &[&str]| column(&row, names).and_then(|v| v.trim().parse::<f64>().ok());
        let start = get(&["Start (ns)", "Projected Start (ns)", "Start"]).context("an NVTX row without a start")?;
        let end = match get(&["End (ns)", "Projected End (ns)", "End"]) {
            Some(e) => e,
            None => {
                start
                    + get(&["Duration (ns)", "Projected Duration (ns)", "Duration"])
                        .context("an NVTX row without an end")?
            }
        };
        let name = column(&row, &["Name", "Range"]).unwrap_or("").trim_start_matches(':').to_string();
        phases.push(Phase { name, start: start / 1e6, end: end / 1e6 });
    }
    phases.sort_by(|a, b| a.start.total_cmp(&b.start));
    Ok(phases)
}

/// The built-in timeline's Chrome trace (microseconds); see `common::timeline`.
pub fn parse_chrome(json: &serde_json::Value) -> anyhow::Result<Trace> {
    let events = json["traceEvents"].as_array().context("no traceEvents")?;
    let mut t = Trace::default();
    for e in events {
        let (ts, dur) = (e["ts"].as_f64().context("an event without ts")?, e["dur"].as_f64().unwrap_or(0.0));
        let (start, end) = (ts / 1e3, (ts + dur) / 1e3);
        let name = e["name"].as_str().unwrap_or("").to_string();
        let kind = match e["cat"].as_str().unwrap_or("") {
            "phase" => {
                t.phases.push(Phase { name, start, end });
                continue;
            }
            "H2D" => Kind::H2D,
            "D2H" => Kind::D2H,
            "kernel" => Kind::Kernel,
            "memset" => Kind::Memset,
            _ => Kind::Other,
        };
        let stream = match &e["tid"] {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        let bytes = e["args"]["bytes"].as_u64().unwrap_or(0);
        t.ops.push(Op {
            start,
            end,
            stream,
            kind,
            name,
            bytes,
            corr: None,
            src_kind: String::new(),
            dst_kind: String::new(),
        });
    }
    if t.ops.is_empty() {
        bail!("the timeline holds no operations");
    }
    Ok(t)
}

/// The built-in timeline's start events fire when a stream reaches an operation, which can be while its
/// engine still runs another stream's: each copy direction and the kernels run one at a time (seen in
/// nsys traces of these lessons), so an operation starts no earlier than the one before it on its engine ends.
pub fn correct_engines(ops: &mut [Op]) {
    for kind in [Kind::H2D, Kind::D2H, Kind::Kernel] {
        let mut idx: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].kind == kind).collect();
        idx.sort_by(|&a, &b| ops[a].end.total_cmp(&ops[b].end));
        let mut last_end = f64::NEG_INFINITY;
        for i in idx {
            ops[i].start = ops[i].start.max(last_end).min(ops[i].end);
            last_end = ops[i].end;
        }
    }
}

pub fn union(mut iv: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (s, e) in iv {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

pub fn length(u: &[(f64, f64)]) -> f64 {
    // fold from +0.0: f64's `sum` starts at -0.0, which prints as "-0.000"
    u.iter().fold(0.0, |a, (s, e)| a + (e - s))
}

pub fn overlap(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    let (mut i, mut j, mut total) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if e > s {
            total += e - s;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

/// What a stretch of trace did: engine busy times, how much copying ran under kernels, how much both
/// copy directions ran at once, and how long the GPU was idle. Times in ms.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    pub ops: usize,
    pub span: f64,
    pub h2d: f64,
    pub d2h: f64,
    pub kernel: f64,
    /// Copy time (either direction) during which a kernel ran.
    pub copy_under_kernel: f64,
    /// copy_under_kernel over all copy time.
    pub overlap_fraction: f64,
    /// Time during which an H2D and a D2H copy ran at once.
    pub both_directions: f64,
    /// Time in the span during which nothing ran.
    pub idle: f64,
}

pub fn summarize(ops: &[&Op]) -> Summary {
    let of = |k: Kind| union(ops.iter().filter(|o| o.kind == k).map(|o| (o.start, o.end)).collect());
    let (h, d, k) = (of(Kind::H2D), of(Kind::D2H), of(Kind::Kernel));
    let copies = union(h.iter().chain(&d).copied().collect());
    let all = union(ops.iter().map(|o| (o.start, o.end)).collect());
    let span = match (all.first(), all.last()) {
        (Some(f), Some(l)) => l.1 - f.0,
        _ => 0.0,
    };
    let copy_under_kernel = overlap(&copies, &k);
    let copy_time = length(&copies);
    Summary {
        ops: ops.len(),
        span,
        h2d: length(&h),
        d2h: length(&d),
        kernel: length(&k),
        copy_under_kernel,
        overlap_fraction: if copy_time > 0.0 { copy_under_kernel / copy_time } else { 0.0 },
        both_directions: overlap(&h, &d),
        idle: span - length(&all),
    }
}

/// The operations of each phase (an operation belongs to the phase in which it starts), in phase
/// order; everything when there are no phases.
pub fn by_phase(t: &Trace) -> Vec<(String, Vec<&Op>)> {
    if t.phases.is_empty() {
        return vec![("whole run".into(), t.ops.iter().collect())];
    }
    let mut out: Vec<(String, Vec<&Op>)> = Vec::new();
    for p in &t.phases {
        let ops: Vec<&Op> = t.ops.iter().filter(|o| o.start >= p.start && o.start < p.end).collect();
        match out.iter_mut().find(|(n, _)| *n == p.name) {
            Some((_, v)) => v.extend(ops),
            None => out.push((p.name.clone(), ops)),
        }
    }
    out
}

/// The timeline as SVG: a row per stream, then a row per engine (what ran on it at all), the phases
/// on top, coloured by operation, with a time axis. `window` limits it to [start, end) ms.
pub fn svg(t: &Trace, title: &str, window: Option<(f64, f64)>) -> String {
    let ops: Vec<&Op> = t.ops.iter().filter(|o| window.is_none_or(|(s, e)| o.end > s && o.start < e)).collect();
    let (t0, t1) = window.unwrap_or_else(|| {
        let s = ops.iter().map(|o| o.start).fold(f64::INFINITY, f64::min);
        let e = ops.iter().map(|o| o.end).fold(f64::NEG_INFINITY, f64::max);
        (s, e)
    });
    let span = (t1 - t0).max(1e-9);
    let (label_w, plot_w, row_h, top) = (150.0, 1250.0, 22.0, 60.0);
    let x = |ms: f64| label_w + (ms.clamp(t0, t1) - t0) / span * plot_w;
    let mut streams: Vec<&str> = ops.iter().map(|o| o.stream.as_str()).collect();
    streams.sort_by_key(|s| (s.parse::<i64>().unwrap_or(i64::MAX), s.to_string()));
    streams.dedup();
    let phases: Vec<&Phase> = t.phases.iter().filter(|p| p.end > t0 && p.start < t1).collect();
    let rows = 1 + streams.len() + 3;
    let height = top + rows as f64 * row_h + 70.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="12">"#,
        label_w + plot_w + 20.0
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#, xml(title));
    let sum = summarize(&ops);
    let _ = writeln!(
        s,
        r#"<text x="10" y="42">{:.3} ms: H2D busy {:.3}, kernels {:.3}, D2H {:.3} ms; {:.0}% of copy time under a kernel; both directions at once {:.3} ms; idle {:.3} ms</text>"#,
        span,
        sum.h2d,
        sum.kernel,
        sum.d2h,
        100.0 * sum.overlap_fraction,
        sum.both_directions,
        sum.idle
    );
    let row_y = |r: usize| top + r as f64 * row_h;
    let label = |s: &mut String, r: usize, text: &str| {
        let _ = writeln!(s, r#"<text x="10" y="{}">{}</text>"#, row_y(r) + 15.0, xml(text));
    };
    label(&mut s, 0, "phases");
    for (i, p) in phases.iter().enumerate() {
        let (a, b) = (x(p.start), x(p.end));
        let fill = if i % 2 == 0 { "#eeeeee" } else { "#dddddd" };
        let _ = writeln!(
            s,
            r#"<rect x="{a:.2}" y="{:.2}" width="{:.2}" height="{}" fill="{fill}"><title>{}</title></rect>"#,
            row_y(0),
            (b - a).max(0.5),
            row_h - 4.0,
            xml(&p.name)
        );
        if b - a > 8.0 * p.name.len() as f64 * 0.75 {
            let _ = writeln!(
                s,
                r#"<text x="{:.2}" y="{:.2}" font-size="11">{}</text>"#,
                a + 3.0,
                row_y(0) + 13.0,
                xml(&p.name)
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{a:.2}" x2="{a:.2}" y1="{}" y2="{}" stroke="gray" stroke-dasharray="3,3"/>"#,
            row_y(1),
            row_y(rows)
        );
    }
    let rect = |s: &mut String, r: usize, o: &Op| {
        let (a, b) = (x(o.start), x(o.end));
        let _ = writeln!(
            s,
            r#"<rect x="{a:.2}" y="{:.2}" width="{:.2}" height="{}" fill="{}"><title>{} {:.4} ms{}</title></rect>"#,
            row_y(r) + 2.0,
            (b - a).max(0.4),
            row_h - 6.0,
            o.kind.colour(),
            xml(&o.name),
            o.end - o.start,
            if o.bytes > 0 { format!(", {} bytes", o.bytes) } else { String::new() }
        );
    };
    for (i, st) in streams.iter().enumerate() {
        label(&mut s, 1 + i, &format!("stream {st}"));
        for o in ops.iter().filter(|o| o.stream == *st) {
            rect(&mut s, 1 + i, o);
        }
    }
    for (j, (name, kind)) in
        [("H2D engine", Kind::H2D), ("SMs (kernels)", Kind::Kernel), ("D2H engine", Kind::D2H)].iter().enumerate()
    {
        let r = 1 + streams.len() + j;
        label(&mut s, r, name);
        for o in ops.iter().filter(|o| o.kind == *kind) {
            rect(&mut s, r, o);
        }
    }
    let axis_y = row_y(rows) + 8.0;
    let _ =
        writeln!(s, r#"<line x1="{label_w}" x2="{}" y1="{axis_y}" y2="{axis_y}" stroke="black"/>"#, label_w + plot_w);
    let step = nice_step(span / 10.0);
    let mut tick = (t0 / step).ceil() * step;
    while tick <= t1 + 1e-12 {
        let tx = x(tick);
        let _ = writeln!(
            s,
            r#"<line x1="{tx:.2}" x2="{tx:.2}" y1="{axis_y}" y2="{}" stroke="black"/><text x="{tx:.2}" y="{}" text-anchor="middle">{}</text>"#,
            axis_y + 5.0,
            axis_y + 18.0,
            fmt_tick(tick - t0, step)
        );
        tick += step;
    }
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">ms</text>"#, label_w + plot_w, axis_y + 32.0);
    for (i, (name, kind)) in
        [("H2D copy", Kind::H2D), ("kernel", Kind::Kernel), ("D2H copy", Kind::D2H), ("memset", Kind::Memset)]
            .iter()
            .enumerate()
    {
        let lx = label_w + i as f64 * 120.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="14" height="12" fill="{}"/><text x="{}" y="{}">{name}</text>"#,
            axis_y + 24.0,
            kind.colour(),
            lx + 18.0,
            axis_y + 34.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-9).log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(stream: &str, kind: Kind, start: f64, end: f64) -> Op {
        Op {
            start,
            end,
            stream: stream.into(),
            kind,
            name: format!("{kind:?}"),
            bytes: 0,
            corr: None,
            src_kind: String::new(),
            dst_kind: String::new(),
        }
    }

    const NSYS: &str = include_str!("../fixtures/h200_overlap_cuda_gpu_trace.csv");
    const BUILTIN: &str = include_str!("../fixtures/h200_overlap_builtin.json");

    #[test]
    fn csv_quotes() {
        let rows = csv_rows("\u{feff}a,Name,c\n\n1,\"void k<int, 2>(float*)\",3\n\"a \"\"b\"\"\",x,c\n").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["Name"], "void k<int, 2>(float*)");
        assert_eq!(rows[1]["a"], r#"a "b""#);
    }

    #[test]
    fn summary_of_a_known_pipeline() {
        // Serialized: H2D 0-1, kernel 1-2, D2H 2-3. Then overlapped: two chunks on two streams.
        let ops = [
            op("1", Kind::H2D, 0.0, 1.0),
            op("1", Kind::Kernel, 1.0, 2.0),
            op("2", Kind::H2D, 1.0, 2.0),
            op("1", Kind::D2H, 2.0, 3.0),
            op("2", Kind::Kernel, 2.0, 3.0),
            op("2", Kind::D2H, 3.0, 4.0),
        ];
        let s = summarize(&ops.iter().collect::<Vec<_>>());
        assert_eq!((s.ops, s.span, s.h2d, s.kernel, s.d2h), (6, 4.0, 2.0, 2.0, 2.0));
        assert_eq!(s.copy_under_kernel, 2.0, "H2D 1-2 under kernel 1-2, D2H 2-3 under kernel 2-3");
        assert_eq!(s.overlap_fraction, 0.5);
        assert_eq!(s.both_directions, 0.0);
        assert_eq!(s.idle, 0.0);
    }

    #[test]
    fn idle_gaps_and_both_directions() {
        let ops = [op("1", Kind::H2D, 0.0, 2.0), op("2", Kind::D2H, 1.0, 3.0), op("1", Kind::Kernel, 5.0, 6.0)];
        let s = summarize(&ops.iter().collect::<Vec<_>>());
        assert_eq!((s.span, s.both_directions, s.idle, s.overlap_fraction), (6.0, 1.0, 2.0, 0.0));
    }

    #[test]
    fn engine_correction_serializes_each_engine() {
        // Stream 2's upload was reached at 0.5 but the H2D engine was busy until 1.0.
        let mut ops = vec![op("1", Kind::H2D, 0.0, 1.0), op("2", Kind::H2D, 0.5, 2.0), op("1", Kind::Kernel, 1.0, 3.0)];
        correct_engines(&mut ops);
        assert_eq!((ops[1].start, ops[1].end), (1.0, 2.0));
        assert_eq!(ops[2].start, 1.0, "other engines are untouched");
    }

    #[test]
    fn the_h200_nsys_trace_parses() {
        let ops = parse_gpu_trace_csv(NSYS).unwrap();
        let count = |k| ops.iter().filter(|o| o.kind == k).count();
        assert_eq!((count(Kind::H2D), count(Kind::D2H), count(Kind::Kernel), count(Kind::Memset)), (54, 54, 51, 7));
        let h = ops.iter().find(|o| o.kind == Kind::H2D).unwrap();
        assert_eq!(h.bytes, 2_097_000, "nsys reports MB = 10^6 bytes, to 3 decimals");
        assert_eq!(
            (h.corr, h.src_kind.as_str(), h.dst_kind.as_str(), h.stream.as_str()),
            (Some(70), "Pinned", "Device", "18")
        );
        let m = ops.iter().find(|o| o.kind == Kind::Memset).unwrap();
        assert_eq!((m.corr, m.src_kind.as_str(), m.dst_kind.as_str()), (Some(36), "Device", ""));
        assert!(ops.iter().all(|o| o.end > o.start));
        assert!(ops.iter().all(|o| o.kind != Kind::Kernel || o.name == "process"));
    }

    /// Short operations (this run's copies take ~40 us): the built-in timeline counts the few microseconds
    /// between a stream reaching an operation and its engine starting it, nsys does not.
    #[test]
    fn the_builtin_timeline_overcounts_short_ops_by_a_bounded_latency() {
        let nsys = parse_gpu_trace_csv(NSYS).unwrap();
        let mut builtin = parse_chrome(&serde_json::from_str(BUILTIN).unwrap()).unwrap();
        correct_engines(&mut builtin.ops);
        assert_eq!(
            builtin.phases.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["copies alone", "kernel alone", "serialized", "overlapped"]
        );
        // Busy times of each engine over the whole run, without the allocation memsets nsys also sees.
        let engines =
            |ops: Vec<&Op>| summarize(&ops.into_iter().filter(|o| o.kind != Kind::Memset).collect::<Vec<_>>());
        let (n, b) = (engines(nsys.iter().collect()), engines(builtin.ops.iter().collect()));
        for (what, count, x, y) in
            [("H2D", 54.0, n.h2d, b.h2d), ("D2H", 54.0, n.d2h, b.d2h), ("kernel", 51.0, n.kernel, b.kernel)]
        {
            let excess_us = (y - x) / count * 1e3;
            assert!(
                (0.0..12.0).contains(&excess_us),
                "{what}: nsys {x} ms, built-in {y} ms: {excess_us:.1} us per operation"
            );
        }
        assert!((n.span - b.span).abs() / n.span < 0.01, "span: nsys {}, built-in {}", n.span, b.span);
    }

    /// The default overlap workload (8 MiB chunks, ~160 us operations), profiled on an H200: nsys and the
    /// built-in timeline of the same run, phase by phase.
    #[test]
    fn on_the_default_workload_the_timelines_agree() {
        let nsys = Trace {
            ops: parse_gpu_trace_csv(include_str!("../fixtures/h200_overlap_default_cuda_gpu_trace.csv")).unwrap(),
            phases: parse_nvtx_csv(include_str!("../fixtures/h200_overlap_default_nvtx_pushpop_trace.csv")).unwrap(),
        };
        let mut builtin =
            parse_chrome(&serde_json::from_str(include_str!("../fixtures/h200_overlap_default_builtin.json")).unwrap())
                .unwrap();
        correct_engines(&mut builtin.ops);
        let (n, b) = (by_phase(&nsys), by_phase(&builtin));
        for phase in ["serialized", "overlapped"] {
            let get = |p: &Vec<(String, Vec<&Op>)>| summarize(&p.iter().find(|(name, _)| name == phase).unwrap().1);
            let (ns, bs) = (get(&n), get(&b));
            assert_eq!(ns.ops, bs.ops, "{phase}: the same operations");
            let (busy, span, overlap) = crate::profile::agreement(&ns, &bs);
            assert!(span < 0.02, "{phase}: span nsys {} ms, built-in {} ms", ns.span, bs.span);
            assert!(overlap < 0.03, "{phase}: overlap nsys {}, built-in {}", ns.overlap_fraction, bs.overlap_fraction);
            assert!(busy < 0.12, "{phase}: busy times differ by {:.1}%", 100.0 * busy);
        }
    }

    #[test]
    fn phases_split_the_ops() {
        let t = Trace {
            ops: vec![op("1", Kind::H2D, 0.0, 1.0), op("1", Kind::Kernel, 1.0, 2.0), op("1", Kind::D2H, 5.0, 6.0)],
            phases: vec![
                Phase { name: "a".into(), start: 0.0, end: 3.0 },
                Phase { name: "b".into(), start: 4.0, end: 7.0 },
            ],
        };
        let p = by_phase(&t);
        assert_eq!(p.iter().map(|(n, o)| (n.as_str(), o.len())).collect::<Vec<_>>(), [("a", 2), ("b", 1)]);
    }

    #[test]
    fn nvtx_ranges_from_either_report() {
        let pushpop = "Start (ns),End (ns),Duration (ns),DurChild (ns),DurNonChild (ns),Name,PID,TID,Lvl,NumChild,RangeId,ParentId,RangeStack,NameId\n\
                       2000000,5000000,3000000,0,3000000,serialized,1,1,0,0,1,,:1,5\n1000000,1500000,500000,0,500000,copies alone,1,1,0,0,2,,:2,6\n";
        let p = parse_nvtx_csv(pushpop).unwrap();
        assert_eq!(
            p,
            vec![
                Phase { name: "copies alone".into(), start: 1.0, end: 1.5 },
                Phase { name: "serialized".into(), start: 2.0, end: 5.0 }
            ]
        );
        let proj =
            "Name,Projected Start (ns),Projected Duration (ns),Orig Start (ns)\n:overlapped,10000000,2000000,9000000\n";
        assert_eq!(parse_nvtx_csv(proj).unwrap(), vec![Phase { name: "overlapped".into(), start: 10.0, end: 12.0 }]);
    }

    #[test]
    fn svg_draws_every_op_and_phase() {
        let mut t = parse_chrome(&serde_json::from_str(BUILTIN).unwrap()).unwrap();
        correct_engines(&mut t.ops);
        let pic = svg(&t, "overlap", None);
        assert!(pic.starts_with("<svg") && pic.trim_end().ends_with("</svg>"));
        // each op twice (its stream's row and its engine's row), plus phase bands and legend boxes
        assert_eq!(pic.matches("<rect").count(), 1 + 2 * t.ops.len() + t.phases.len() + 4);
        assert!(pic.contains(">overlapped<") && pic.contains("stream 0"));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(4.0), 5.0);
        assert_eq!(fmt_tick(0.4, 0.2), "0.4");
    }
}
