//! Runs the lessons, or any CUDA program, under Nsight Systems and answers with numbers and pictures:
//! per NVTX range (per segment where a program has none, cut at host synchronizations), how busy each
//! engine was, how much copying ran under kernels, how much both directions ran at once, how long the
//! GPU sat idle, and what limits it; the checks that matter for transfers; and nsys's own expert-system
//! findings.
//!
//! Lessons (`cargo xtask profile [LESSON...]`): the built-in CUDA-event timeline records the same run, and
//! the report says how well the two agree. Without nsys (or with `--builtin`) the built-in timeline stands
//! alone. Writes, per lesson, into target/profile (or profile/ beside a bundle): LESSON.nsys-rep, the nsys
//! CSV reports, LESSON.timeline.json (opens in ui.perfetto.dev), LESSON.svg and one LESSON-PHASE.svg per
//! phase, LESSON.log (what the lesson printed), LESSON_analyze.txt; and REPORT.md over all of them.
//!
//! Any program (`cargo xtask profile -- COMMAND [ARGS...]`): nsys is required, as only the lessons carry a
//! built-in timeline. Writes the same files for it into target/profile/PROGRAM/, with its own REPORT.md.
//!
//! This task decides what to run, finds nsys and runs it (`nsys profile`, `nsys stats`, `nsys analyze`);
//! the `profiler` crate reads what nsys and the built-in timeline wrote and makes the report.

use std::{
    ffi::OsStr,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _};
use profiler::{
    analyze::{self, Outcome, Rule},
    builtin,
    nsys::{self, Recorded},
    report,
};

use crate::{flags::ProfileFlags, lessons, tools};

pub fn run(flags: ProfileFlags) -> anyhow::Result<()> {
    if !flags.command.is_empty() {
        return run_command(&flags.command);
    }
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
        let found = find_nsys();
        if found.is_none() {
            eprintln!("profile: nsys not found (install Nsight Systems or set NSYS): using the built-in timeline");
        }
        found
    };
    let bins = lessons::binaries(true)?;
    let out = lessons::output_dir("profile");
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut report = report::lessons_heading(nsys.is_some());
    // One step per lesson, with the time left estimated from those done; hidden where stderr is no terminal.
    let bar = progress(names.len());
    for name in &names {
        let args = lessons::LESSONS.iter().find(|l| l.name == name).map(|l| l.profile()).unwrap_or_default();
        bar.set_message(name.clone());
        let timeline = out.join(format!("{name}.timeline.json"));
        let recorded = match &nsys {
            Some(nsys) => {
                let bin = bins.join(name);
                let rec = record(nsys, bin.as_os_str(), &args, Some(("GPU_TIMELINE", &timeline)), (&out, name), true)?;
                let rules = analyze(nsys, &rec, (&out, name));
                Some((rec, rules))
            }
            None => {
                let log = run_lesson(Command::new(bins.join(name)).args(args).env("GPU_TIMELINE", &timeline), name)?;
                fs::write(out.join(format!("{name}.log")), log)?;
                None
            }
        };
        let builtin = builtin::load(&timeline)?;
        let section = report::lesson(name, recorded.as_ref().map(|(r, rules)| (r, rules.as_slice())), &builtin, &out)?;
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

/// `cargo xtask profile -- COMMAND [ARGS...]`.
fn run_command(command: &[String]) -> anyhow::Result<()> {
    let (program, args) = command.split_first().context("no command after `--`")?;
    let nsys = find_nsys().with_context(|| {
        format!(
            "nsys not found: profiling a program needs Nsight Systems (only the lessons carry a built-in \
             timeline): {INSTALL}"
        )
    })?;
    let path = resolve(program)?;
    if tools::real_libcuda().is_none() {
        bail!("no NVIDIA driver on this machine: {program} needs one to run under nsys");
    }
    let stem = stem_of(&path);
    let out = lessons::output_dir("profile").join(&stem);
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    eprintln!("profile: {} under nsys, into {}", command.join(" "), out.display());
    let rec = record(&nsys, path.as_os_str(), args, None, (&out, &stem), false)?;
    let rules = analyze(&nsys, &rec, (&out, &stem));
    let log = fs::read_to_string(out.join(format!("{stem}.log"))).unwrap_or_default();
    let section = report::program(&stem, &command.join(" "), &rec, &rules, &log, &out)?;
    print!("{}", section.terminal);
    let report = out.join("REPORT.md");
    fs::write(&report, section.markdown).with_context(|| format!("writing {}", report.display()))?;
    println!("\nreport: {}", report.display());
    Ok(())
}

/// The program to run: a path where the name has a slash, else found on PATH.
fn resolve(program: &str) -> anyhow::Result<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        if !p.is_file() {
            bail!("no program {program}: no such file");
        }
        return Ok(p);
    }
    which::which(program).with_context(|| format!("{program}: not found on PATH (if it is here, give ./{program})"))
}

/// A file name for the program's folder and files: its stem, letters, digits, `_` and `-` only.
fn stem_of(path: &Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let clean: String =
        stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if clean.is_empty() {
        "program".into()
    } else {
        clean
    }
}

fn find_nsys() -> Option<PathBuf> {
    tools::nvidia_tool("nsys", "NSYS")
}

const INSTALL: &str = "install Nsight Systems (https://developer.nvidia.com/nsight-systems; CUDA toolkits \
                       also ship it) or set NSYS to its nsys";

/// Runs `program args` under `nsys profile` (CUDA and NVTX tracing) and reads its report: writes
/// out/STEM.nsys-rep, STEM.sqlite, STEM.log (what nsys and the program printed) and the CSVs
/// STEM_cuda_gpu_trace.csv, STEM_cuda_api_trace.csv and STEM_nvtx_pushpop_trace.csv. With `strict`, a
/// program that fails is an error; otherwise the report covers what it did before it failed.
fn record(
    nsys: &Path,
    program: &OsStr,
    args: &[impl AsRef<OsStr>],
    env: Option<(&str, &Path)>,
    (out, stem): (&Path, &str),
    strict: bool,
) -> anyhow::Result<Recorded> {
    let rep = out.join(stem);
    let report = out.join(format!("{stem}.nsys-rep"));
    let qdstrm = out.join(format!("{stem}.qdstrm"));
    for stale in [&report, &qdstrm, &out.join(format!("{stem}.sqlite"))] {
        let _ = fs::remove_file(stale);
    }
    let mut cmd = Command::new(nsys);
    cmd.args([
        "profile",
        "--trace=cuda,nvtx",
        "--sample=none",
        "--cpuctxsw=none",
        "--cuda-um-gpu-page-faults=true",
        "--cuda-um-cpu-page-faults=true",
        "--force-overwrite=true",
        "-o",
    ])
    .arg(&rep)
    .arg(program)
    .args(args);
    if let Some((var, value)) = env {
        cmd.env(var, value);
    }
    let o = cmd.output().with_context(|| format!("starting {} profile", nsys.display()))?;
    let log = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let log_file = out.join(format!("{stem}.log"));
    fs::write(&log_file, &log).with_context(|| format!("writing {}", log_file.display()))?;
    let mut notes = Vec::new();
    if !o.status.success() {
        if strict {
            bail!("{stem} failed under nsys ({}): {}", o.status, log.lines().last().unwrap_or(""));
        }
        notes.push(format!("the program (or nsys) ended with {}: see {stem}.log", o.status));
    }
    if !report.is_file() {
        if qdstrm.is_file() {
            bail!(
                "nsys wrote only {} and no report: its importer failed, usually for want of libdw.so.1 \
                 (install libdw1, or put its folder on LD_LIBRARY_PATH)",
                qdstrm.display()
            );
        }
        bail!("nsys wrote no report for {stem}: see {}", log_file.display());
    }
    let stats = |kind: &str| -> anyhow::Result<String> {
        tools::output(
            Command::new(nsys)
                .args(["stats", "--report", kind, "--format", "csv", "--force-export=true", "--output"])
                .arg(&rep)
                .arg(&report),
            &format!("nsys stats {kind}"),
        )?;
        // No file where the run holds no such data (a program without NVTX ranges).
        Ok(fs::read_to_string(out.join(format!("{stem}_{kind}.csv"))).unwrap_or_default())
    };
    nsys::read(stem, report.clone(), &log_file, notes, stats)
}

/// Each rule of [`analyze::RULES`] over the run's report (its SQLite export where `nsys stats` made one),
/// one `nsys analyze` per rule, so that a rule this nsys lacks fails alone. All output goes to
/// STEM_analyze.txt.
fn analyze(nsys: &Path, rec: &Recorded, (out, stem): (&Path, &str)) -> Vec<Rule> {
    let sqlite = rec.report.with_extension("sqlite");
    let input = if sqlite.is_file() { sqlite } else { rec.report.clone() };
    let mut raw = String::new();
    let rules = analyze::RULES
        .iter()
        .map(|&name| {
            let mut cmd = Command::new(nsys);
            cmd.args(["analyze", "--rule", name, "--format", "csv"]).arg(&input);
            let _ = writeln!(raw, "$ nsys analyze --rule {name} --format csv {}", input.display());
            let outcome = match tools::output_within(&mut cmd, 300) {
                None => Outcome::Failed("nsys analyze did not start, or ran over 300 s".into()),
                Some(o) => {
                    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
                    let _ = writeln!(raw, "{stdout}{stderr}[{}]\n", o.status);
                    analyze::outcome(&o)
                }
            };
            Rule { name, outcome }
        })
        .collect();
    let _ = fs::write(out.join(format!("{stem}_analyze.txt")), raw);
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_stems() {
        assert_eq!(stem_of(Path::new("./overlap_pattern")), "overlap_pattern");
        assert_eq!(stem_of(Path::new("/opt/my app.bin")), "my_app");
    }
}
