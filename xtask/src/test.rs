//! The README's test command: check the committed PTX against nvcc 13.0 (installing it from PyPI where
//! it is missing) and common's driver declarations against CUDA 13's headers beside it (`check_ffi`),
//! build the lessons, and run every test. The GPU tests are
//! `#[ignore]`d, so that a machine without a GPU reports them as ignored rather than passed; where an
//! NVIDIA driver is found they run too. The differential test of common's PTX reading against ptxas
//! is `#[ignore]`d too (it needs ptxas), and run here on every run, with the ptxas, nvlink and
//! cuobjdump this installs: it fails, not skips, where they cannot be had. From a bundle, it runs the
//! bundled test binaries instead. Each test command's output is passed on as it comes, and the last
//! line sums their `test result:` lines: `xtask: 412 passed, 0 failed, 37 ignored`.

use std::{
    fs,
    io::{Read as _, Write},
    process::{Command, ExitCode, Stdio},
};

use anyhow::Context as _;

use crate::{check_ffi, flags::TestFlags, generate, setup, tools};

/// Runs the tests, then ends with one line on stdout, `xtask: N passed, N failed, N ignored`, the sum of
/// the `test result:` lines of every test binary run; exits 1 where a test failed, a test command
/// failed, or the checks before them did (said on stderr, above the line).
pub fn main(flags: TestFlags) -> ExitCode {
    let mut tally = Tally::default();
    let result = run(&flags, &mut tally);
    if let Err(e) = &result {
        eprintln!("error: {e:#}");
    }
    println!("xtask: {}", tally.line());
    if result.is_ok() && tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The tests, counted into `tally`; an error where a check or a test command failed (every test
/// command is run first, so that the count covers them all).
fn run(flags: &TestFlags, tally: &mut Tally) -> anyhow::Result<()> {
    if tools::in_bundle() {
        return run_bundled(&flags.args, tally);
    }
    generate::check()?;
    check_ffi::run()?;
    let ptxas = setup::ptxas_13()?;
    let tools_env: Vec<(&str, std::path::PathBuf)> =
        [("PTXAS", Some(ptxas.clone())), ("CUOBJDUMP", setup::cuobjdump(&ptxas))]
            .into_iter()
            .filter_map(|(var, path)| Some((var, path?)))
            .collect();
    // The CLI tests run the lesson programs; `--all-targets` builds examples only as test binaries.
    tools::run(tools::cargo().args(["build", "--workspace", "--examples"]), "building the lessons")?;
    let gpu = gpu_flag();
    let mut failed = Vec::new();
    let mut cmd = tools::cargo();
    cmd.args(["test", "--workspace", "--all-targets", "--no-fail-fast", "--"]).args(gpu).args(&flags.args);
    if !counted(cmd.envs(tools_env.iter().cloned()), tally, &mut std::io::stdout())? {
        failed.push("the tests");
    }
    if gpu.is_none() {
        // Where the ignored tests ran (a driver found), the differential test ran among them.
        eprintln!("xtask test: common's PTX reading against ptxas {} ({})", cuda_find::NVCC_RELEASE, ptxas.display());
        let mut cmd = tools::cargo();
        cmd.args(["test", "-p", "cuda-scope", "--lib", "ptx_differential", "--", "--ignored"]).args(&flags.args);
        if !flags.args.iter().any(|a| a == "--nocapture") {
            cmd.arg("--nocapture"); // its one line of figures
        }
        if !counted(cmd.envs(tools_env), tally, &mut std::io::stdout())? {
            failed.push("the differential test of common's PTX reading against ptxas");
        }
    }
    anyhow::ensure!(failed.is_empty(), "{} failed", failed.join(" and "));
    Ok(())
}

/// Tests passed, failed and ignored, summed over libtest's `test result:` lines.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Tally {
    /// Adds a `test result: ok. 51 passed; 0 failed; 2 ignored; ...` line; any other line is left out.
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else { return };
        // `ok. 51 passed`, ` 0 failed`, ...: a count, then its word.
        let count = |word: &str| -> u64 {
            rest.split(';')
                .filter_map(|part| {
                    let mut w = part.split_whitespace().rev();
                    (w.next() == Some(word)).then(|| w.next()?.parse::<u64>().ok()).flatten()
                })
                .sum()
        };
        self.passed += count("passed");
        self.failed += count("failed");
        self.ignored += count("ignored");
    }

    /// `N passed, N failed, N ignored`.
    fn line(&self) -> String {
        format!("{} passed, {} failed, {} ignored", self.passed, self.failed, self.ignored)
    }
}

/// Runs `cmd`, its stdout passed on to `out` as it comes and its `test result:` lines counted into
/// `tally`; whether it exited with success.
fn counted(cmd: &mut Command, tally: &mut Tally, out: &mut impl Write) -> anyhow::Result<bool> {
    let what = format!("{:?}", cmd.get_program());
    let mut child = cmd.stdout(Stdio::piped()).spawn().with_context(|| format!("cannot start {what}"))?;
    let mut pipe = child.stdout.take().context("the child's stdout")?;
    let (mut buf, mut line) = ([0u8; 8192], Vec::new());
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("reading the output of {what}")),
        };
        out.write_all(&buf[..n])?;
        out.flush()?;
        for &b in &buf[..n] {
            if b == b'\n' {
                tally.add_line(&String::from_utf8_lossy(&line));
                line.clear();
            } else {
                line.push(b);
            }
        }
    }
    tally.add_line(&String::from_utf8_lossy(&line));
    Ok(child.wait().with_context(|| format!("waiting for {what}"))?.success())
}

/// `--include-ignored` where a driver is found (the GPU tests are the ignored ones), said in one line.
fn gpu_flag() -> Option<&'static str> {
    match tools::real_libcuda() {
        Some(driver) => {
            eprintln!(
                "xtask test: NVIDIA driver found ({}): running the GPU tests too (--include-ignored)",
                driver.display()
            );
            Some("--include-ignored")
        }
        None => {
            eprintln!(
                "xtask test: no NVIDIA driver here: the GPU tests are reported as ignored (they run where one is)"
            );
            None
        }
    }
}

fn run_bundled(args: &[String], tally: &mut Tally) -> anyhow::Result<()> {
    let dir = tools::root().join("tests");
    let mut bins: Vec<_> =
        fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?.flatten().map(|e| e.path()).collect();
    bins.sort();
    let gpu = gpu_flag();
    let mut failed = Vec::new();
    for bin in &bins {
        eprintln!("xtask test: {}", bin.file_name().unwrap().to_string_lossy());
        if !counted(Command::new(bin).args(gpu).args(args), tally, &mut std::io::stdout())? {
            failed.push(bin.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    anyhow::ensure!(failed.is_empty(), "failing test binaries: {}", failed.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_sums_the_test_result_lines() {
        let mut t = Tally::default();
        for line in [
            "running 3 tests",
            "test tidy::a ... ok",
            "test result: ok. 51 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.31s",
            "test result: FAILED. 1 passed; 3 failed; 0 ignored; 0 measured; 4 filtered out; finished in 0.00s",
            "   test result: ok. 0 passed; 0 failed; 37 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "a line that says 5 passed; 5 failed",
        ] {
            t.add_line(line);
        }
        assert_eq!(t, Tally { passed: 52, failed: 3, ignored: 39 });
        assert_eq!(t.line(), "52 passed, 3 failed, 39 ignored");
    }

    #[test]
    fn a_command_is_counted_and_its_exit_status_kept() {
        let script = "printf 'test a ... ok\\ntest result: ok. 2 passed; 1 failed; 3 ignored; 0 measured\\n'; exit 1";
        let (mut t, mut out) = (Tally::default(), Vec::new());
        assert!(!counted(Command::new("sh").args(["-c", script]), &mut t, &mut out).unwrap());
        assert_eq!(t, Tally { passed: 2, failed: 1, ignored: 3 });
        assert!(
            counted(Command::new("sh").args(["-c", "printf 'test result: ok. 4 passed'"]), &mut t, &mut out).unwrap()
        );
        assert_eq!(t.passed, 6, "a last line without its newline counts too");
        let passed_on = String::from_utf8(out).unwrap();
        assert!(passed_on.starts_with("test a ... ok\n") && passed_on.ends_with("4 passed"), "{passed_on}");
    }
}
