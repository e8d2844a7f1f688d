//! Runs the lessons under compute-sanitizer's four tools at quick sizes, and fails on any error.

use std::{fs, process::Command};

use anyhow::{bail, Context as _};

use crate::{
    flags::{SanitizeFlags, SANITIZER_TOOLS},
    lessons, tools,
};

/// The error count of a summary line: "ERROR SUMMARY: 0 errors" (memcheck, synccheck, initcheck) or
/// "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)".
fn errors_in(line: &str) -> Option<u64> {
    let i = line.find(" error")?;
    line[..i].rsplit(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Bytes memcheck's leak check reports: "LEAK SUMMARY: 0 bytes leaked in 0 allocations".
fn leaked_bytes(line: &str) -> Option<u64> {
    let rest = line.split("LEAK SUMMARY:").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

pub fn run(flags: SanitizeFlags) -> anyhow::Result<()> {
    // The flags' lesson and tool names were checked when they were read; then the machine.
    let selected = lessons::select(&flags.lessons)?;
    let tools_to_run: Vec<&str> = if flags.tools.is_empty() {
        SANITIZER_TOOLS.to_vec()
    } else {
        flags.tools.iter().map(String::as_str).collect()
    };
    lessons::need_gpu("sanitize")?;
    let sanitizer = tools::nvidia_tool("compute-sanitizer", "COMPUTE_SANITIZER")
        .context("compute-sanitizer not found: install the CUDA toolkit or set COMPUTE_SANITIZER")?;
    let bins = lessons::binaries(false)?;
    let logs = lessons::output_dir("sanitize");
    fs::create_dir_all(&logs)?;
    println!("{:<20} {}", "lesson", tools_to_run.iter().map(|t| format!("{t:>11}")).collect::<String>());
    let mut failures = Vec::new();
    for l in selected {
        let (lesson, args) = (l.name, l.quick());
        let mut row = format!("{lesson:<20} ");
        for tool in &tools_to_run {
            let mut cmd = Command::new(&sanitizer);
            cmd.args(["--tool", tool, "--error-exitcode", "99"]);
            if *tool == "memcheck" {
                cmd.args(["--leak-check", "full"]);
            }
            let out = cmd
                .arg(bins.join(lesson))
                .args(&args)
                .output()
                .with_context(|| format!("running compute-sanitizer on {lesson}"))?;
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let log = logs.join(format!("{lesson}-{tool}.log"));
            fs::write(&log, &text)?;
            let summary = text.lines().find(|l| l.contains("SUMMARY") && errors_in(l).is_some()).map(str::to_string);
            let leaked = text.lines().filter_map(leaked_bytes).sum::<u64>();
            let clean = out.status.success() && summary.as_deref().and_then(errors_in) == Some(0) && leaked == 0;
            row += &format!("{:>11}", if clean { "clean" } else { "ERRORS" });
            if !clean {
                failures.push(format!(
                    "{lesson} under {tool}: {} (see {})",
                    summary.unwrap_or_else(|| format!("exit {}", out.status)),
                    log.display()
                ));
            }
        }
        println!("{row}");
    }
    if !failures.is_empty() {
        bail!("compute-sanitizer found problems:\n  {}", failures.join("\n  "));
    }
    println!("\nevery lesson is clean under {}; logs in {}", tools_to_run.join(", "), logs.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{errors_in, leaked_bytes};

    #[test]
    fn reads_every_tools_summary() {
        assert_eq!(errors_in("========= ERROR SUMMARY: 0 errors"), Some(0));
        assert_eq!(errors_in("========= ERROR SUMMARY: 12 errors"), Some(12));
        assert_eq!(errors_in("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"), Some(0));
        assert_eq!(errors_in("========= RACECHECK SUMMARY: 3 hazards displayed (10 errors, 0 warnings)"), Some(10));
        assert_eq!(errors_in("========= ERROR SUMMARY: 1 error"), Some(1));
        assert_eq!(errors_in("no summary"), None);
        assert_eq!(errors_in("========= LEAK SUMMARY: 0 bytes leaked in 0 allocations"), None);
        assert_eq!(leaked_bytes("========= LEAK SUMMARY: 0 bytes leaked in 0 allocations"), Some(0));
        assert_eq!(leaked_bytes("========= LEAK SUMMARY: 4096 bytes leaked in 1 allocations"), Some(4096));
        assert_eq!(leaked_bytes("========= ERROR SUMMARY: 0 errors"), None);
    }
}
