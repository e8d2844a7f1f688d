//! The report on a profiled lesson or program, in two forms at once ([`Section`]): lines for the
//! terminal and markdown for REPORT.md. Per NVTX range (per segment where a program has none, cut at
//! host synchronizations), how busy each engine was, how much copying ran under kernels, how much both
//! directions ran at once, how long the GPU sat idle, and what limits it; the transfer checks;
//! nsys's own expert-system findings; and the SVG timelines beside the report, written here.

use std::{fmt::Write as _, fs, path::Path};

use crate::{
    analyze::{self, Outcome, Rule},
    api::{ApiCall, Calls},
    checks, limits,
    metrics::{self, agreement, Summary},
    nsys::Recorded,
    segments, svg,
    trace::{self, Kind, Op, Phase, Trace},
};

/// The beginning of the lessons' REPORT.md, before their [`lesson`] sections: where the figures come
/// from (`nsys`: Nsight Systems with the built-in timeline beside it, else the built-in timeline alone),
/// and how to read them.
pub fn lessons_heading(nsys: bool) -> String {
    let mut report = String::from("# Profile of the lessons\n\n");
    let _ = writeln!(
        report,
        "Source: {}. Times in ms; \"at\" times count from the lesson's first GPU operation. An operation \
         belongs to the phase in which it starts; a phase run several times is one row, its span from its \
         first operation to its last, the gaps between the runs counted idle.\n",
        if nsys {
            "Nsight Systems, with the built-in CUDA-event timeline of the same run beside it"
        } else {
            "the built-in CUDA-event timeline"
        }
    );
    report
}

/// A part of the report: what the terminal shows, and the markdown for REPORT.md.
#[derive(Default)]
pub struct Section {
    /// Lines for the terminal.
    pub terminal: String,
    /// Markdown for REPORT.md.
    pub markdown: String,
}

impl std::ops::AddAssign for Section {
    fn add_assign(&mut self, other: Section) {
        self.terminal += &other.terminal;
        self.markdown += &other.markdown;
    }
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

type Rows<'a> = Vec<(String, Vec<&'a Op>)>;
type Extra<'a> = (&'a str, &'a dyn Fn(&str, &Summary) -> String);

fn first_start(ops: &[Op]) -> f64 {
    ops.iter().map(|o| o.start).fold(f64::INFINITY, f64::min)
}

/// The section on one lesson: per phase of `nsys`'s trace where it was recorded (with how far the
/// built-in timeline of the same run differs, nsys's rules and the transfer checks), else of the
/// built-in timeline. Writes NAME.svg and one NAME-PHASE.svg per phase into `out`.
pub fn lesson(name: &str, nsys: Option<(&Recorded, &[Rule])>, builtin: &Trace, out: &Path) -> anyhow::Result<Section> {
    let primary = nsys.map_or(builtin, |(r, _)| &r.trace);
    let source = if nsys.is_some() { "nsys" } else { "built-in" };
    fs::write(out.join(format!("{name}.svg")), svg::timeline(primary, &format!("{name} ({source})"), None))?;
    let rows: Rows = trace::by_phase(primary).into_iter().filter(|(_, ops)| !ops.is_empty()).collect();
    let builtin_phases = trace::by_phase(builtin);
    let differs = |phase: &str, s: &Summary| -> String {
        if nsys.is_none() {
            return "-".into();
        }
        match builtin_phases.iter().find(|(p, _)| p == phase) {
            Some((_, o)) => {
                let (busy, span, overlap) = agreement(s, &metrics::summarize(o));
                format!("busy {:.1}%, span {:.1}%, overlap {:.2}", 100.0 * busy, 100.0 * span, overlap)
            }
            None => "-".into(),
        }
    };
    let mut s = Section {
        terminal: format!("\n{name} ({source})\n"),
        markdown: format!("## {name}\n\n![{name}]({name}.svg)\n\n"),
    };
    s += rows_table("phase", &rows, Some(("built-in timeline differs by", &differs)));
    s.markdown += &pictures(name, source, primary, &rows, out)?;
    if let Some((rec, rules)) = nsys {
        s += checks_section(&rec.trace, &rec.api, &rows, "###");
        s += analyze_section(rules, first_start(&rec.trace.ops), name, "###");
        s += notes(&rec.notes);
    }
    Ok(s)
}

/// The report on one program (`cmdline`, run by nsys into files named for `stem`): per NVTX range, or
/// per segment where it has none; the checks over the whole run (per range where it has ranges), nsys's
/// rules, and the first 40 lines of `log` (what nsys and the program printed). Writes STEM.svg and one
/// STEM-ROW.svg per range or segment into `out`.
pub fn program(
    stem: &str,
    cmdline: &str,
    rec: &Recorded,
    rules: &[Rule],
    log: &str,
    out: &Path,
) -> anyhow::Result<Section> {
    let t = &rec.trace;
    let t0 = first_start(&t.ops);
    let segs = if t.phases.is_empty() { segments::split(&t.ops, &rec.api) } else { vec![] };
    let (rows, heading, picture): (Rows, &str, Trace) = if t.phases.is_empty() {
        let phases = segs
            .iter()
            .map(|s| Phase {
                name: s.name.clone(),
                start: s.ops.iter().map(|o| o.start).fold(f64::INFINITY, f64::min),
                end: s.ops.iter().map(|o| o.end).fold(f64::NEG_INFINITY, f64::max),
            })
            .collect();
        let rows = segs.iter().map(|s| (s.name.clone(), s.ops.clone())).collect();
        (rows, "segment", Trace { ops: t.ops.clone(), phases })
    } else {
        let rows = trace::by_phase(t).into_iter().filter(|(_, ops)| !ops.is_empty()).collect();
        (rows, "range", t.clone())
    };
    fs::write(out.join(format!("{stem}.svg")), svg::timeline(&picture, &format!("{stem} (nsys)"), None))?;
    let mut s = Section::default();
    let _ = writeln!(s.terminal, "\n{stem} (nsys): {} {heading}s", rows.len());
    let _ = write!(
        s.markdown,
        "# Profile of `{cmdline}`\n\nSource: Nsight Systems, one run: the CUDA API calls and the GPU work. \
         Times in ms; \"at\" times count from the run's first GPU operation. Beside this report: {stem}.nsys-rep \
         (opens in nsys-ui), the nsys CSVs, {stem}_analyze.txt, {stem}.log.\n\n![{stem}]({stem}.svg)\n\n"
    );
    if heading == "segment" {
        s.markdown += "## Segments\n\nThe run has no NVTX ranges, so it is cut where a device, stream or event \
                       synchronize returned with the GPU idle and nothing queued (synchronous copies and idle \
                       gaps do not cut). An operation belongs to the segment in which it starts.\n\n";
    } else {
        s.markdown += "## NVTX ranges\n\nAn operation belongs to the range in which it starts.\n\n";
    }
    s += rows_table(heading, &rows, None);
    if heading == "segment" {
        for (seg, phase) in segs.iter().zip(&picture.phases) {
            let closed = seg.closed_by.as_deref().map_or("the end of the run".to_string(), |c| format!("{c} returned"));
            let _ = writeln!(
                s.markdown,
                "- {}: {:.3} to {:.3} ms, until {closed}",
                seg.name,
                phase.start - t0,
                phase.end - t0
            );
        }
        s.markdown += "\n";
    }
    s.markdown += &pictures(stem, "nsys", &picture, &rows, out)?;
    let whole: Rows = vec![("whole run".into(), t.ops.iter().collect())];
    s += checks_section(t, &rec.api, if heading == "segment" { &whole } else { &rows }, "##");
    s += analyze_section(rules, t0, stem, "##");
    s += notes(&rec.notes);
    let lines: Vec<&str> = log.lines().collect();
    let shown = lines.len().min(40);
    let _ = write!(s.markdown, "## What nsys and the program printed\n\n```text\n{}\n```\n", lines[..shown].join("\n"));
    if lines.len() > shown {
        let _ = writeln!(s.markdown, "\n({} more lines in {stem}.log)", lines.len() - shown);
    }
    Ok(s)
}

/// The table of rows (phases or segments): engine busy times, overlap and idle, the overlap model and
/// what limits each; then the speedups between neighbouring rows that do the same work.
fn rows_table(heading: &str, rows: &[(String, Vec<&Op>)], extra: Option<Extra>) -> Section {
    let mut term = format!(
        "{heading:<26} {:>9} {:>8} {:>8} {:>8} {:>13} {:>10} {:>8}{}\n",
        "span",
        "H2D",
        "kernels",
        "D2H",
        "copy||kernel",
        "H2D||D2H",
        "idle",
        extra.map_or(String::new(), |(h, _)| format!("  {h}"))
    );
    let mut md = format!(
        "| {heading} | ops | span | H2D busy | kernels busy | D2H busy | copy under kernels | H2D and D2H at once \
         | idle | overlap model | what limits it |{}\n|{}\n",
        extra.map_or(String::new(), |(h, _)| format!(" {h} |")),
        "---|".repeat(11 + usize::from(extra.is_some()))
    );
    let mut limits = String::new();
    for (name, ops) in rows {
        let s = metrics::summarize(ops);
        let cells = [
            format!("{:.3}", s.span),
            format!("{:.3}", s.htod),
            format!("{:.3}", s.kernel),
            format!("{:.3}", s.dtoh),
            format!("{:.0}%", 100.0 * s.overlap_fraction),
            format!("{:.3}", s.both_directions),
            format!("{:.3}", s.idle),
        ];
        let widths = [9, 8, 8, 8, 13, 10, 8];
        let short: String = name.chars().take(26).collect();
        let row: String = cells.iter().zip(widths).map(|(c, w)| format!(" {c:>w$}")).collect();
        let more = extra.map(|(_, f)| f(name, &s));
        let _ = writeln!(term, "{short:<26}{row}{}", more.as_ref().map_or(String::new(), |m| format!("  {m}")));
        let limit = limits::limit(&s);
        let _ = writeln!(limits, "  {short}: {limit}");
        if let Some(um) = unified_memory(ops) {
            let _ = writeln!(limits, "  {short}: {um}");
        }
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {:.3} | {limit} |{}",
            s.ops,
            cells.join(" | "),
            limits::model(&s),
            more.map_or(String::new(), |m| format!(" {m} |"))
        );
    }
    term += &limits;
    md += "\n";
    for line in limits::speedups(rows) {
        let _ = writeln!(term, "  {line}");
        let _ = writeln!(md, "- {line}\n");
    }
    md += "Overlap model: the busiest engine's time, what the work would take were every engine's work fully \
           overlapped with the others' and every operation to keep its measured duration. A model, not a bound: \
           operations change speed when overlapped (copies slow when both directions run at once, kernels when \
           copies compete for memory).\n";
    md += "\n";
    Section { terminal: term, markdown: md }
}

/// The driver's unified-memory migrations among `ops` (nsys names them "[CUDA memcpy Unified
/// Host-to-Device]" and the like, on no stream), in words: what managed memory's page faults moved.
fn unified_memory(ops: &[&Op]) -> Option<String> {
    let um: Vec<&&Op> = ops.iter().filter(|o| o.name.contains("Unified")).collect();
    if um.is_empty() {
        return None;
    }
    let way = |kind: Kind| {
        let v: Vec<&&&Op> = um.iter().filter(|o| o.kind == kind).collect();
        let busy = metrics::length(&metrics::union(v.iter().map(|o| (o.start, o.end)).collect()));
        let bytes: u64 = v.iter().map(|o| o.bytes).sum();
        format!("{} migrations, {:.1} MB, busy {busy:.3} ms", v.len(), bytes as f64 / 1e6)
    };
    Some(format!("unified memory: to the GPU {}; to the host {}", way(Kind::H2D), way(Kind::D2H)))
}

/// One SVG per row, limited to its stretch of time; markdown links to them.
fn pictures(stem: &str, source: &str, t: &Trace, rows: &[(String, Vec<&Op>)], out: &Path) -> anyhow::Result<String> {
    let mut links = String::new();
    for (name, ops) in rows {
        let window = (
            ops.iter().map(|o| o.start).fold(f64::INFINITY, f64::min),
            ops.iter().map(|o| o.end).fold(f64::NEG_INFINITY, f64::max),
        );
        let file = format!("{stem}-{}.svg", slug(name));
        fs::write(out.join(&file), svg::timeline(t, &format!("{stem}: {name} ({source})"), Some(window)))?;
        let _ = write!(links, "[{file}]({file}) ");
    }
    Ok(format!("{}\n\n", links.trim_end()))
}

/// The transfer checks, per range: a table each in markdown, the cases found on the terminal.
fn checks_section(t: &Trace, api: &[ApiCall], ranges: &[(String, Vec<&Op>)], level: &str) -> Section {
    let mut s = Section { terminal: String::new(), markdown: format!("{level} Checks\n\n") };
    if api.is_empty() {
        s.markdown += "No CUDA API trace, so no checks.\n\n";
        s.terminal += "  checks: none (no CUDA API trace)\n";
        return s;
    }
    let calls = Calls::new(api);
    let legacy = checks::legacy_streams(&t.ops, &calls);
    let t0 = first_start(&t.ops);
    s.markdown += &if legacy.is_empty() {
        "Legacy default stream: not identified (the run makes no synchronous copy or memset call).\n\n".to_string()
    } else {
        format!(
            "Legacy default stream: {}, where the GPU work of synchronous copy and memset calls ran (they take \
             no stream argument).\n\n",
            legacy.iter().map(|s| format!("stream {s}")).collect::<Vec<_>>().join(", ")
        )
    };
    let mut found = 0;
    for (range, ops) in ranges {
        if ranges.len() > 1 {
            let _ = write!(s.markdown, "{range}:\n\n");
        }
        s.markdown += "| check | found | time | the first, in words |\n|---|---|---|---|\n";
        for f in checks::run(ops, &t.ops, &calls, &legacy, t0) {
            let dash = |t: &str| if t.is_empty() { "-".to_string() } else { t.to_string() };
            let _ = writeln!(s.markdown, "| {} | {} | {} | {} |", f.check, f.count, dash(&f.time), dash(&f.first));
            if f.count > 0 {
                found += 1;
                let _ =
                    writeln!(s.terminal, "  {range}: {}: {} ({})\n      first: {}", f.check, f.count, f.time, f.first);
            }
        }
        s.markdown += "\n";
    }
    s.markdown += "Why they matter: an async copy touching pageable memory is staged by the driver through a pinned \
                   buffer of its own, and the call returns only once its data is staged (a download, once it is \
                   done), so it neither frees the host nor overlaps as meant. A synchronous copy or memset on the \
                   legacy stream waits for the work queued before it on every blocking stream, the work queued \
                   after it waits for it (streams made with cudaStreamNonBlocking are exempt), and the host waits \
                   too. Streams that never ran at the same time bought no concurrency between them: the work of \
                   one was done before the other's began (dependencies, the legacy stream, or an engine that both \
                   needed).\n\n";
    if found == 0 {
        let _ = writeln!(
            s.terminal,
            "  checks: none found ({}, {}, {})",
            checks::PAGEABLE_ASYNC,
            checks::LEGACY_SYNC,
            checks::NEVER_TOGETHER
        );
    }
    s
}

fn analyze_section(rules: &[Rule], t0: f64, stem: &str, level: &str) -> Section {
    let lines = analyze::condense(rules, t0);
    let mut md = format!("{level} Nsight Systems' expert rules (`nsys analyze`)\n\n");
    for l in &lines {
        let _ = writeln!(md, "- {l}");
    }
    let _ = writeln!(md, "\nAll of its output: [{stem}_analyze.txt]({stem}_analyze.txt)\n");
    let count = |f: fn(&Outcome) -> bool| rules.iter().filter(|r| f(&r.outcome)).count();
    let found: Vec<String> = rules
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Found { rows, .. } => Some(format!("{} {}", r.name, rows.len())),
            _ => None,
        })
        .collect();
    let terminal = if lines.len() == 1 && lines[0].starts_with("nsys analyze did not run") {
        format!("  {}\n", lines[0])
    } else {
        format!(
            "  nsys analyze: {}; {} clean, {} failed ({stem}_analyze.txt)\n",
            if found.is_empty() { "nothing found".to_string() } else { format!("found {}", found.join(", ")) },
            count(|o| matches!(o, Outcome::Clean(_))),
            count(|o| matches!(o, Outcome::Failed(_)))
        )
    };
    Section { terminal, markdown: md }
}

fn notes(notes: &[String]) -> Section {
    let mut s = Section::default();
    for n in notes {
        let _ = writeln!(s.terminal, "  note: {n}");
        let _ = writeln!(s.markdown, "> Note: {n}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::{api::parse_api_trace_csv, builtin};

    #[test]
    fn unified_memory_migrations_are_counted_by_direction() {
        let op = |name: &str, kind, start: f64, bytes| Op {
            start,
            end: start + 0.5,
            stream: String::new(),
            kind,
            name: name.into(),
            bytes,
            corr: None,
            src_kind: String::new(),
            dst_kind: String::new(),
        };
        let ops = [
            op("[CUDA memcpy Unified Host-to-Device]", Kind::H2D, 0.0, 4096),
            op("[CUDA memcpy Unified Host-to-Device]", Kind::H2D, 0.25, 65536),
            op("[CUDA memcpy Unified Device-to-Host]", Kind::D2H, 2.0, 2_000_000),
            op("[CUDA memcpy Host-to-Device]", Kind::H2D, 3.0, 1 << 20),
        ];
        let refs: Vec<&Op> = ops.iter().collect();
        let line = unified_memory(&refs).unwrap();
        assert_eq!(
            line,
            "unified memory: to the GPU 2 migrations, 0.1 MB, busy 0.750 ms; to the host 1 migrations, 2.0 MB, busy 0.500 ms"
        );
        assert_eq!(unified_memory(&refs[3..]), None);
    }

    #[test]
    fn slugs() {
        assert_eq!(slug("4-stream overlap"), "4-stream-overlap");
        assert_eq!(slug("pinned in place 64 MiB"), "pinned-in-place-64-mib");
    }

    #[test]
    fn the_lessons_heading_names_its_source() {
        assert!(lessons_heading(true).starts_with(
            "# Profile of the lessons\n\nSource: Nsight Systems, with the built-in CUDA-event timeline of the same \
             run beside it. Times in ms;"
        ));
        assert!(lessons_heading(false).contains("Source: the built-in CUDA-event timeline. Times in ms;"));
        assert!(lessons_heading(false).ends_with("counted idle.\n\n"));
    }

    #[test]
    fn a_report_from_the_h200_fixtures() {
        let nsys = Recorded {
            trace: Trace {
                ops: trace::parse_gpu_trace_csv(include_str!("../fixtures/h200_overlap_cuda_gpu_trace.csv")).unwrap(),
                phases: vec![],
            },
            api: vec![],
            report: PathBuf::new(),
            notes: vec![],
        };
        let mut builtin = builtin::parse_chrome(
            &serde_json::from_str(include_str!("../fixtures/h200_overlap_builtin.json")).unwrap(),
        )
        .unwrap();
        builtin::correct_engines(&mut builtin.ops);
        let dir = std::env::temp_dir().join(format!("profile-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let s = lesson("overlap", None, &builtin, &dir).unwrap();
        assert!(s.terminal.contains("overlapped") && s.terminal.contains("serialized"));
        assert!(s.markdown.contains("![overlap](overlap.svg)"));
        for f in ["overlap.svg", "overlap-overlapped.svg", "overlap-serialized.svg", "overlap-copies-alone.svg"] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let s = lesson("overlap", Some((&nsys, &[])), &builtin, &dir).unwrap();
        assert!(s.terminal.contains("whole run"), "no NVTX ranges: one phase");
        assert!(s.markdown.contains("No CUDA API trace, so no checks."));
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_report_on_a_program_without_nvtx() {
        let rec = Recorded {
            trace: Trace {
                ops: trace::parse_gpu_trace_csv(include_str!(
                    "../fixtures/synthetic_overlap_pattern_cuda_gpu_trace.csv"
                ))
                .unwrap(),
                phases: vec![],
            },
            api: parse_api_trace_csv(include_str!("../fixtures/synthetic_overlap_pattern_cuda_api_trace.csv")).unwrap(),
            report: PathBuf::new(),
            notes: vec![],
        };
        let rules = [Rule { name: "gpu_gaps", outcome: Outcome::Clean("No gaps found.".into()) }];
        let dir = std::env::temp_dir().join(format!("profile-command-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let s = program("overlap_pattern", "./overlap_pattern", &rec, &rules, "Speedup: 1.17x\n", &dir).unwrap();
        for needle in [
            "overlap_pattern (nsys): 2 segments",
            "segment 1: serialized: H2D 8%, kernels 84%, D2H 8% one after another",
            "segment 2: compute-bound: kernels busy 96% of the span",
            "segment 2 does segment 1's work 1.17x faster (15.990 ms, then 13.664 ms)",
            "whole run: synchronous copies and memsets on the legacy stream: 8 (GPU 2.435 ms;",
            "nsys analyze: nothing found; 1 clean, 0 failed",
        ] {
            assert!(s.terminal.contains(needle), "{needle}:\n{}", s.terminal);
        }
        for needle in [
            "# Profile of `./overlap_pattern`",
            "| segment 1 | 12 | 15.990 | 1.221 | 13.440 | 1.214 | 0% | 0.000 | 0.114 | 13.440 | serialized:",
            "- segment 1: 0.000 to 15.990 ms, until cudaEventSynchronize returned",
            "- segment 2: 16.016 to 29.680 ms, until the end of the run",
            "Legacy default stream: stream 7,",
            "- `gpu_gaps`: No gaps found.",
            "Speedup: 1.17x",
        ] {
            assert!(s.markdown.contains(needle), "{needle}:\n{}", s.markdown);
        }
        for f in ["overlap_pattern.svg", "overlap_pattern-segment-1.svg", "overlap_pattern-segment-2.svg"] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        if std::env::var_os("SHOW_REPORT").is_some() {
            println!("{}\n{}", s.terminal, s.markdown);
        }
        let _ = fs::remove_dir_all(dir);
    }
}
