//! Runs the lessons under Nsight Systems and answers with numbers and pictures: per phase, how busy
//! each engine was, how much copying ran under kernels, how much both directions ran at once, how long
//! the GPU sat idle. The built-in CUDA-event timeline records the same run, and the report says how
//! well the two agree. Without nsys (or with `--builtin`) the built-in timeline stands alone.
//!
//! Writes, per lesson, into target/profile (or profile/ beside a bundle): LESSON.nsys-rep, the nsys
//! CSV reports, LESSON.timeline.json (opens in ui.perfetto.dev), LESSON.svg and one LESSON-PHASE.svg
//! per phase, LESSON.log (what the lesson printed); and REPORT.md over all of them.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _};

use crate::{
    flags::ProfileFlags,
    lessons, tools,
    trace::{self, Summary, Trace},
};

pub fn run(flags: ProfileFlags) -> anyhow::Result<()> {
    let names: Vec<String> = if flags.lessons.is_empty() {
        lessons::LESSONS.iter().map(|l| l.name.to_string()).collect()
    } else {
        flags.lessons.clone()
    };
    lessons::select(&names)?;
    lessons::need_gpu("profile")?;
    let nsys = if flags.builtin {
        None
    } else {
        let found = tools::nvidia_tool("nsys", "NSYS");
        if found.is_none() {
            eprintln!("profile: nsys not found (install Nsight Systems or set NSYS): using the built-in timeline");
        }
        found
    };
    let bins = lessons::binaries(true)?;
    let out = lessons::output_dir("profile");
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut report = String::from("# Profile of the lessons\n\n");
    let _ = writeln!(
        report,
        "Source: {}. Times in ms. An operation belongs to the phase in which it starts.\n",
        if nsys.is_some() {
            "Nsight Systems, with the built-in CUDA-event timeline of the same run beside it"
        } else {
            "the built-in CUDA-event timeline"
        }
    );
    // One step per lesson, with the time left estimated from those done; hidden where stderr is no terminal.
    let bar = progress(names.len());
    for name in &names {
        let args = lessons::LESSONS.iter().find(|l| l.name == name).map(|l| l.profile).unwrap_or(&[]);
        bar.set_message(name.clone());
        let timeline = out.join(format!("{name}.timeline.json"));
        let nsys_trace = match &nsys {
            Some(nsys) => Some(profile_with_nsys(nsys, &bins.join(name), args, &out, name, &timeline)?),
            None => {
                let log = run_lesson(Command::new(bins.join(name)).args(args).env("GPU_TIMELINE", &timeline), name)?;
                fs::write(out.join(format!("{name}.log")), log)?;
                None
            }
        };
        let json: serde_json::Value = serde_json::from_str(
            &fs::read_to_string(&timeline).with_context(|| format!("reading {}", timeline.display()))?,
        )?;
        let mut builtin = trace::parse_chrome(&json).with_context(|| format!("reading {}", timeline.display()))?;
        trace::correct_engines(&mut builtin.ops);
        let section = lesson_report(name, nsys_trace.as_ref(), &builtin, &out)?;
        bar.suspend(|| print!("{}", section.terminal));
        report += &section.markdown;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let path = out.join("REPORT.md");
    fs::write(&path, report)?;
    println!("\nreport: {}", path.display());
    Ok(())
}

fn progress(lessons: usize) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(lessons as u64);
    let style = indicatif::ProgressStyle::with_template("profile {pos}/{len} [{bar:24}] {msg}, about {eta} left")
        .expect("a valid template")
        .progress_chars("=> ");
    bar.set_style(style);
    bar
}

fn run_lesson(cmd: &mut Command, name: &str) -> anyhow::Result<String> {
    let o = cmd.output().with_context(|| format!("running {name}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() {
        bail!("{name} failed ({}): {}", o.status, text.lines().last().unwrap_or(""));
    }
    Ok(text)
}

fn profile_with_nsys(
    nsys: &Path,
    bin: &Path,
    args: &[&str],
    out: &Path,
    name: &str,
    timeline: &Path,
) -> anyhow::Result<Trace> {
    let rep = out.join(name);
    let _ = fs::remove_file(rep.with_extension("nsys-rep"));
    let _ = fs::remove_file(rep.with_extension("qdstrm"));
    let log = run_lesson(
        Command::new(nsys)
            .args(["profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true", "-o"])
            .arg(&rep)
            .arg(bin)
            .args(args)
            .env("GPU_TIMELINE", timeline),
        name,
    )?;
    fs::write(out.join(format!("{name}.log")), &log)?;
    let report = rep.with_extension("nsys-rep");
    if !report.is_file() {
        if rep.with_extension("qdstrm").is_file() {
            bail!(
                "nsys wrote only {} and no report: its importer failed, usually for want of libdw.so.1 \
                 (install libdw1, or put its folder on LD_LIBRARY_PATH)",
                rep.with_extension("qdstrm").display()
            );
        }
        bail!("nsys wrote no report for {name}: see {}", out.join(format!("{name}.log")).display());
    }
    let stats = |kind: &str| -> anyhow::Result<String> {
        tools::output(
            Command::new(nsys)
                .args(["stats", "--report", kind, "--format", "csv", "--force-export=true", "--output"])
                .arg(&rep)
                .arg(&report),
            &format!("nsys stats {kind}"),
        )?;
        let csv = out.join(format!("{name}_{kind}.csv"));
        Ok(fs::read_to_string(&csv).unwrap_or_default())
    };
    let ops = trace::parse_gpu_trace_csv(&stats("cuda_gpu_trace")?).context("reading the CUDA GPU trace")?;
    let phases = trace::parse_nvtx_csv(&stats("nvtx_pushpop_trace")?).context("reading the NVTX ranges")?;
    if ops.is_empty() {
        bail!("nsys recorded no GPU work for {name}");
    }
    Ok(Trace { ops, phases })
}

struct Section {
    terminal: String,
    markdown: String,
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

/// How far `b` (the built-in timeline) is from `a` (nsys): the largest relative difference in engine
/// busy times, the relative difference in span, and the difference in overlap fraction.
pub fn agreement(a: &Summary, b: &Summary) -> (f64, f64, f64) {
    let rel = |x: f64, y: f64| if x.max(y) < 1e-3 { 0.0 } else { (x - y).abs() / x.max(y) };
    let busy = rel(a.h2d, b.h2d).max(rel(a.d2h, b.d2h)).max(rel(a.kernel, b.kernel));
    (busy, rel(a.span, b.span), (a.overlap_fraction - b.overlap_fraction).abs())
}

fn lesson_report(name: &str, nsys: Option<&Trace>, builtin: &Trace, out: &Path) -> anyhow::Result<Section> {
    let primary = nsys.unwrap_or(builtin);
    let source = if nsys.is_some() { "nsys" } else { "built-in" };
    let mut pictures: Vec<PathBuf> = vec![out.join(format!("{name}.svg"))];
    fs::write(&pictures[0], trace::svg(primary, &format!("{name} ({source})"), None))?;
    let mut term = format!("\n{name} ({source})\n");
    let _ = writeln!(
        term,
        "{:<26} {:>9} {:>8} {:>8} {:>8} {:>13} {:>10} {:>8}  built-in timeline differs by",
        "phase", "span", "H2D", "kernels", "D2H", "copy||kernel", "H2D||D2H", "idle"
    );
    let mut md = format!("## {name}\n\n![{name}]({name}.svg)\n\n| phase | ops | span | H2D busy | kernels busy | D2H busy | copy under kernels | H2D and D2H at once | idle | built-in timeline differs by |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let builtin_phases = trace::by_phase(builtin);
    for (phase, ops) in trace::by_phase(primary) {
        if ops.is_empty() {
            continue;
        }
        let s = trace::summarize(&ops);
        let other = if nsys.is_some() {
            builtin_phases.iter().find(|(p, _)| *p == phase).map(|(_, o)| trace::summarize(o))
        } else {
            None
        };
        let differs = match &other {
            Some(b) => {
                let (busy, span, overlap) = agreement(&s, b);
                format!("busy {:.1}%, span {:.1}%, overlap {:.2}", 100.0 * busy, 100.0 * span, overlap)
            }
            None => "-".into(),
        };
        let cells = [
            format!("{:.3}", s.span),
            format!("{:.3}", s.h2d),
            format!("{:.3}", s.kernel),
            format!("{:.3}", s.d2h),
            format!("{:.0}%", 100.0 * s.overlap_fraction),
            format!("{:.3}", s.both_directions),
            format!("{:.3}", s.idle),
        ];
        let widths = [9, 8, 8, 8, 13, 10, 8];
        let short: String = phase.chars().take(26).collect();
        let row: String = cells.iter().zip(widths).map(|(c, w)| format!(" {c:>w$}")).collect();
        let _ = writeln!(term, "{short:<26}{row}  {differs}");
        let _ = writeln!(md, "| {phase} | {} | {} | {differs} |", s.ops, cells.join(" | "));
        let window = (
            ops.iter().map(|o| o.start).fold(f64::INFINITY, f64::min),
            ops.iter().map(|o| o.end).fold(f64::NEG_INFINITY, f64::max),
        );
        let pic = out.join(format!("{name}-{}.svg", slug(&phase)));
        fs::write(&pic, trace::svg(primary, &format!("{name}: {phase} ({source})"), Some(window)))?;
        pictures.push(pic);
    }
    md += "\n";
    for p in pictures.iter().skip(1) {
        let f = p.file_name().unwrap().to_string_lossy();
        let _ = write!(md, "[{f}]({f}) ");
    }
    md += "\n\n";
    Ok(Section { terminal: term, markdown: md })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_and_agreement() {
        assert_eq!(slug("4-stream overlap"), "4-stream-overlap");
        assert_eq!(slug("pinned in place 64 MiB"), "pinned-in-place-64-mib");
        let a = Summary { h2d: 10.0, d2h: 10.0, kernel: 10.0, overlap_fraction: 0.9, ..Default::default() };
        let b = Summary { h2d: 10.5, d2h: 10.0, kernel: 9.9, overlap_fraction: 0.88, ..Default::default() };
        let (busy, span, overlap) = agreement(&a, &b);
        assert!((busy - 0.5 / 10.5).abs() < 1e-12 && (overlap - 0.02).abs() < 1e-12 && span == 0.0);
    }

    #[test]
    fn a_report_from_the_h200_fixtures() {
        let nsys = Trace {
            ops: trace::parse_gpu_trace_csv(include_str!("../fixtures/h200_overlap_cuda_gpu_trace.csv")).unwrap(),
            phases: vec![],
        };
        let mut builtin =
            trace::parse_chrome(&serde_json::from_str(include_str!("../fixtures/h200_overlap_builtin.json")).unwrap())
                .unwrap();
        trace::correct_engines(&mut builtin.ops);
        let dir = std::env::temp_dir().join(format!("profile-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let s = lesson_report("overlap", None, &builtin, &dir).unwrap();
        assert!(s.terminal.contains("overlapped") && s.terminal.contains("serialized"));
        assert!(s.markdown.contains("![overlap](overlap.svg)"));
        for f in ["overlap.svg", "overlap-overlapped.svg", "overlap-serialized.svg", "overlap-copies-alone.svg"] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let s = lesson_report("overlap", Some(&nsys), &builtin, &dir).unwrap();
        assert!(s.terminal.contains("whole run"), "no NVTX ranges: one phase");
        let _ = fs::remove_dir_all(dir);
    }
}
