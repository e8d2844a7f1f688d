//! Nsight Systems' expert-system rules (`nsys analyze`): which rules the profiler asks for, each rule's
//! output read into an [`Outcome`], and the outcomes condensed to a line each. Running `nsys analyze`
//! is the caller's.

use std::process::Output;

/// The CUDA rules of `nsys analyze`: async copies from pageable memory, synchronous copies and memsets,
/// synchronizing API calls, long GPU gaps (500 ms by default), and stretches of low GPU utilization.
pub const RULES: [&str; 6] =
    ["cuda_memcpy_async", "cuda_memcpy_sync", "cuda_memset_sync", "cuda_api_sync", "gpu_gaps", "gpu_time_util"];

/// What one rule said of a run.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The rule ran and found nothing; its message.
    Clean(String),
    /// The rule found something: its advice, and its table.
    Found {
        /// What the rule says of what it found, and what to do.
        advice: String,
        /// The table's column names.
        header: Vec<String>,
        /// The table's rows, as many fields each as the header.
        rows: Vec<Vec<String>>,
    },
    /// The rule did not run; why, in the words of nsys (or of the caller).
    Failed(String),
}

/// One rule of [`RULES`] and its outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// The rule's name, as `nsys analyze --rule` takes it.
    pub name: &'static str,
    /// What it found.
    pub outcome: Outcome,
}

/// One rule's outcome from a finished `nsys analyze --rule NAME --format csv`: where it succeeded, its
/// output read by [`parse_rule_output`]; else its last line of output, and how it ended.
pub fn outcome(o: &Output) -> Outcome {
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if o.status.success() {
        parse_rule_output(&stdout)
    } else {
        let said = stderr.lines().chain(stdout.lines()).rfind(|l| !l.trim().is_empty());
        Outcome::Failed(format!("{} ({})", said.unwrap_or("no output").trim(), o.status))
    }
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

    #[cfg(unix)]
    #[test]
    fn a_run_of_a_rule() {
        use std::os::unix::process::ExitStatusExt as _;
        let run = |code: i32, stdout: &str, stderr: &str| Output {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: stdout.into(),
            stderr: stderr.into(),
        };
        assert_eq!(outcome(&run(0, FOUND, "")), parse_rule_output(FOUND));
        assert_eq!(
            outcome(&run(1, "", "ERROR: unknown rule gpu_gaps\n\n")),
            Outcome::Failed("ERROR: unknown rule gpu_gaps (exit status: 1)".into())
        );
        assert_eq!(outcome(&run(1, "usage: nsys\n", "")), Outcome::Failed("usage: nsys (exit status: 1)".into()));
        assert_eq!(outcome(&run(2, "", "")), Outcome::Failed("no output (exit status: 2)".into()));
    }
}
