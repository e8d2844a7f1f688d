//! Running Nsight Systems: a program under `nsys profile`, the `nsys stats` CSV reports that the
//! profiler reads, and `nsys analyze`'s expert-system rules, condensed to a line each.

use std::{
    ffi::OsStr,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _};

use crate::{
    checks::{self, ApiCall},
    tools,
    trace::{self, Trace},
};

pub fn find() -> Option<PathBuf> {
    tools::nvidia_tool("nsys", "NSYS")
}

pub const INSTALL: &str = "install Nsight Systems (https://developer.nvidia.com/nsight-systems; CUDA toolkits \
                           also ship it) or set NSYS to its nsys";

/// What nsys recorded of one run of a program.
pub struct Recorded {
    pub trace: Trace,
    pub api: Vec<ApiCall>,
    pub report: PathBuf,
    /// What went wrong on the way without stopping the profile, a line each.
    pub notes: Vec<String>,
}

/// Runs `program args` under `nsys profile` (CUDA and NVTX tracing) and reads its report: writes
/// out/STEM.nsys-rep, STEM.sqlite, STEM.log (what nsys and the program printed) and the CSVs
/// STEM_cuda_gpu_trace.csv, STEM_cuda_api_trace.csv and STEM_nvtx_pushpop_trace.csv. With `strict`, a
/// program that fails is an error; otherwise the report covers what it did before it failed.
pub fn record(
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
    let ops = trace::parse_gpu_trace_csv(&stats("cuda_gpu_trace")?).context("reading the CUDA GPU trace")?;
    if ops.is_empty() {
        bail!("nsys recorded no GPU work for {stem}: see {}", log_file.display());
    }
    let mut optional = |kind: &str, what: &str| match stats(kind) {
        Ok(text) => Some(text),
        Err(e) => {
            notes.push(format!("no {what}: {e:#}"));
            None
        }
    };
    let phases = match optional("nvtx_pushpop_trace", "NVTX ranges").map(|t| trace::parse_nvtx_csv(&t)) {
        Some(Ok(p)) => p,
        Some(Err(e)) => bail!("reading the NVTX ranges: {e:#}"),
        None => vec![],
    };
    let api = match optional("cuda_api_trace", "CUDA API trace").map(|t| checks::parse_api_trace_csv(&t)) {
        Some(Ok(a)) => a,
        Some(Err(e)) => bail!("reading the CUDA API trace: {e:#}"),
        None => vec![],
    };
    if api.is_empty() {
        notes.push("the CUDA API trace is empty: no checks, and no segments".into());
    }
    Ok(Recorded { trace: Trace { ops, phases }, api, report, notes })
}

/// The CUDA rules of `nsys analyze`: async copies from pageable memory, synchronous copies and memsets,
/// synchronizing API calls, long GPU gaps (500 ms by default), and stretches of low GPU utilization.
pub const RULES: [&str; 6] =
    ["cuda_memcpy_async", "cuda_memcpy_sync", "cuda_memset_sync", "cuda_api_sync", "gpu_gaps", "gpu_time_util"];

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The rule ran and found nothing; its message.
    Clean(String),
    Found {
        advice: String,
        header: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    Failed(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub name: &'static str,
    pub outcome: Outcome,
}

/// Each rule of [`RULES`] over the run's report (its SQLite export where `nsys stats` made one), one
/// `nsys analyze` per rule, so that a rule this nsys lacks fails alone. All output goes to STEM_analyze.txt.
pub fn analyze(nsys: &Path, rec: &Recorded, (out, stem): (&Path, &str)) -> Vec<Rule> {
    let sqlite = rec.report.with_extension("sqlite");
    let input = if sqlite.is_file() { sqlite } else { rec.report.clone() };
    let mut raw = String::new();
    let rules = RULES
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
                    if o.status.success() {
                        parse_rule_output(&stdout)
                    } else {
                        let said = stderr.lines().chain(stdout.lines()).rfind(|l| !l.trim().is_empty());
                        Outcome::Failed(format!("{} ({})", said.unwrap_or("no output").trim(), o.status))
                    }
                }
            };
            Rule { name, outcome }
        })
        .collect();
    let _ = fs::write(out.join(format!("{stem}_analyze.txt")), raw);
    rules
}

/// One rule's console output with `--format csv`: a title (` ** NAME (rule):`), its advice, and either a
/// table (a CSV header of three or more short names, then rows of as many fields) or a message that
/// nothing was found.
pub fn parse_rule_output(text: &str) -> Outcome {
    let fields = |l: &str| -> Vec<String> {
        let mut r = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(l.as_bytes());
        r.records().next().and_then(Result::ok).map(|r| r.iter().map(str::to_string).collect()).unwrap_or_default()
    };
    let lines: Vec<&str> = text.lines().collect();
    let header_at = (0..lines.len().saturating_sub(1)).find(|&i| {
        let h = fields(lines[i]);
        h.len() >= 3 && h.iter().all(|f| !f.trim().is_empty() && f.len() <= 40) && fields(lines[i + 1]).len() == h.len()
    });
    let (header, rows, table) = match header_at {
        Some(i) => {
            let header = fields(lines[i]);
            let rows: Vec<Vec<String>> =
                lines[i + 1..].iter().map(|l| fields(l)).take_while(|f| f.len() == header.len()).collect();
            let n = rows.len();
            (header, rows, i..i + n + 1)
        }
        None => (vec![], vec![], 0..0),
    };
    let prose: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| !table.contains(i))
        .map(|(_, l)| l.trim())
        .filter(|l| !l.is_empty() && !l.starts_with("Processing") && !l.starts_with("**"))
        .collect();
    let advice = prose.join(" ");
    if rows.is_empty() {
        Outcome::Clean(if advice.is_empty() { "nothing reported".into() } else { advice })
    } else {
        Outcome::Found { advice, header, rows }
    }
}

/// The rules' outcomes, a line each (markdown); times in ms, "at" counted from `t0` (ms on nsys's clock).
pub fn condense(rules: &[Rule], t0: f64) -> Vec<String> {
    let failures: Vec<&str> = rules
        .iter()
        .filter_map(|r| if let Outcome::Failed(m) = &r.outcome { Some(m.as_str()) } else { None })
        .collect();
    if !rules.is_empty() && failures.len() == rules.len() && failures.iter().all(|m| *m == failures[0]) {
        return vec![format!("nsys analyze did not run: {}", failures[0])];
    }
    rules
        .iter()
        .map(|r| match &r.outcome {
            Outcome::Clean(m) => format!("`{}`: {}", r.name, first_sentence(m)),
            Outcome::Failed(m) => format!("`{}`: failed: {m}", r.name),
            Outcome::Found { advice, header, rows } => {
                let top: Vec<String> = header
                    .iter()
                    .zip(&rows[0])
                    .filter(|(h, v)| !h.starts_with('_') && !v.trim().is_empty())
                    .take(6)
                    .map(|(h, v)| match (h.strip_suffix(" (ns)"), v.trim().parse::<f64>()) {
                        (Some(h), Ok(ns)) if h.starts_with("Start") => format!("at {:.3} ms", ns / 1e6 - t0),
                        (Some(h), Ok(ns)) => format!("{h} {:.3} ms", ns / 1e6),
                        _ => format!("{h} {}", v.trim()),
                    })
                    .collect();
                format!(
                    "`{}`: {} found. {} First listed: {}",
                    r.name,
                    rows.len(),
                    first_sentence(advice),
                    top.join(", ")
                )
            }
        })
        .collect()
}

fn first_sentence(s: &str) -> String {
    let end = s.find(". ").map_or(s.len(), |i| i + 1);
    let short: String = s[..end].chars().take(200).collect();
    short.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped as nsys 2024-2025 prints a rule (`nsysstats.ExpertSystemsReport`) with `--format csv`.
    const FOUND: &str = "Processing [/tmp/overlap_pattern.sqlite] with [/opt/nvidia/rules/cuda_memcpy_sync.py]... \n\n \
        ** CUDA Synchronous Memcpy (cuda_memcpy_sync):\n\n\
        The following are synchronous memory transfers that block the host. This does not include host to device \
        transfers of a memory block of 64 KB or less.\n\n\
        Suggestion: Use cudaMemcpy*Async() APIs instead.\n\n\
        \"Duration (ns)\",\"Start (ns)\",\"Src Kind\",\"Dst Kind\",\"Bytes (MB)\",\"PID\",\"Device ID\",\"Context ID\",\"Green Context ID\",\"Stream ID\",\"API Name\"\n\
        340000,1003500000,Pinned,Device,16.777,4242,0,1,,7,cudaMemcpy\n\
        303520,1000319184,Device,Pinned,16.777,4242,0,1,,7,cudaMemcpy\n";

    #[test]
    fn a_rule_with_findings_and_one_without() {
        let Outcome::Found { advice, header, rows } = parse_rule_output(FOUND) else { panic!("{FOUND}") };
        assert_eq!((header.len(), rows.len()), (11, 2));
        assert!(advice.starts_with("The following are synchronous") && advice.ends_with("Async() APIs instead."));
        let clean = "Processing [r.sqlite] with [cuda_memcpy_async.py]...\n\n ** CUDA Async Memcpy with Pageable \
                     Memory (cuda_memcpy_async):\n\nThere were no problems detected related to memcpy operations \
                     using pageable memory.\n";
        let rules = [
            Rule { name: "cuda_memcpy_async", outcome: parse_rule_output(clean) },
            Rule { name: "cuda_memcpy_sync", outcome: parse_rule_output(FOUND) },
            Rule { name: "gpu_gaps", outcome: Outcome::Failed("unknown rule (exit status: 1)".into()) },
        ];
        assert_eq!(
            condense(&rules, 1000.0),
            [
                "`cuda_memcpy_async`: There were no problems detected related to memcpy operations using pageable memory.",
                "`cuda_memcpy_sync`: 2 found. The following are synchronous memory transfers that block the host. \
                 First listed: Duration 0.340 ms, at 3.500 ms, Src Kind Pinned, Dst Kind Device, Bytes (MB) 16.777, PID 4242",
                "`gpu_gaps`: failed: unknown rule (exit status: 1)",
            ]
        );
    }

    #[test]
    fn analyze_missing_everywhere_is_one_line() {
        let failed = Outcome::Failed("unrecognised command 'analyze' (exit status: 1)".into());
        let rules: Vec<Rule> = RULES.iter().map(|&name| Rule { name, outcome: failed.clone() }).collect();
        assert_eq!(
            condense(&rules, 0.0),
            ["nsys analyze did not run: unrecognised command 'analyze' (exit status: 1)"]
        );
    }
}
