//! Packs release builds of the lessons, the test binaries, the benchmarks and this xtask into one
//! folder that runs on a GPU host without Rust:
//!
//! ```text
//! target/bundle/
//!   xtask            `./xtask test` runs every test binary; other tasks run as through cargo
//!   lessons/NAME     each lesson (`./lessons/overlap --help`)
//!   tests/NAME       each test binary (unit tests of common, the GPU tests; lesson-NAME: a lesson's own)
//!   benches/NAME     each criterion benchmark (`./benches/NAME --bench`)
//!   bundle.json      what is inside, and from which commit
//! ```

use std::{
    collections::HashMap,
    fs,
    path::Path,
    process::{Command, Stdio},
};

use cargo_metadata::{Message, TargetKind};

use anyhow::{bail, Context as _};

use crate::{flags::BundleFlags, setup, tools};

pub fn run(flags: BundleFlags) -> anyhow::Result<()> {
    setup::run()?;
    let nvtx_env = setup::nvtx_build_env()?;
    let out = if flags.out.is_absolute() { flags.out } else { tools::root().join(flags.out) };
    let _ = fs::remove_dir_all(&out);
    for d in ["lessons", "tests", "benches"] {
        fs::create_dir_all(out.join(d)).with_context(|| format!("creating {}", out.join(d).display()))?;
    }
    // The lessons, the test binaries, the benchmarks and the xtask; then the lessons' own unit and GPU
    // tests (an example's tests are built only when asked for: `cargo test --examples`).
    let build =
        ["build", "--release", "--workspace", "--features", "nvtx", "--examples", "--tests", "--benches", "--bins"];
    let lesson_tests = ["test", "--no-run", "--release", "--workspace", "--features", "nvtx", "--examples"];
    let mut contents = Vec::new();
    for args in [&build[..], &lesson_tests[..]] {
        for (exe, dest) in artifacts(args, &nvtx_env, &out)? {
            copy_stripped(&exe, &dest)?;
            contents.push(dest.strip_prefix(&out).unwrap().display().to_string());
        }
    }
    contents.sort();
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(tools::root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let manifest = serde_json::json!({ "commit": commit, "contents": contents });
    fs::write(out.join("bundle.json"), serde_json::to_string_pretty(&manifest)?)?;
    fs::write(out.join("README.txt"), README)?;
    let size: u64 = walkdir::WalkDir::new(&out)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!("bundle: {} files, {:.1} MiB in {}", contents.len(), size as f64 / (1 << 20) as f64, out.display());
    Ok(())
}

/// What `cargo ARGS` builds, and where each belongs in the bundle in `out`.
fn artifacts(
    args: &[&str],
    env: &[(&str, std::ffi::OsString)],
    out: &Path,
) -> anyhow::Result<Vec<(std::path::PathBuf, std::path::PathBuf)>> {
    let mut child = tools::cargo()
        .envs(env.iter().cloned())
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .spawn()
        .context("starting cargo")?;
    let packages: HashMap<_, _> =
        tools::metadata()?.packages.into_iter().map(|p| (p.id.clone(), p.name.to_string())).collect();
    let mut found = Vec::new();
    for msg in Message::parse_stream(std::io::BufReader::new(child.stdout.take().unwrap())) {
        let Message::CompilerArtifact(a) = msg.context("reading cargo's messages")? else {
            continue;
        };
        let Some(exe) = a.executable else {
            continue;
        };
        let name = &a.target.name;
        let package = packages.get(&a.package_id).map_or("?", String::as_str);
        // The compile-fail suite runs cargo itself, and the differential test of the PTX reading runs
        // ptxas: they belong where Rust and the toolkit are, not in the bundle.
        if name == "compile_fail" || name == "ptx_differential" {
            continue;
        }
        let dest = if a.target.is_kind(TargetKind::Example) && a.profile.test {
            out.join("tests").join(format!("lesson-{name}"))
        } else if a.target.is_kind(TargetKind::Example) {
            out.join("lessons").join(name)
        } else if a.target.is_kind(TargetKind::Bench) {
            out.join("benches").join(name)
        } else if a.profile.test && package != "xtask" && package != "profiler" {
            // The xtask's own tests check the repository (they need cargo and its sources), and those of the
            // profiler it links need no GPU and run where it is built: not for a GPU host.
            out.join("tests").join(if package == name { name.to_string() } else { format!("{package}-{name}") })
        } else if name == "xtask" && !a.profile.test {
            out.join("xtask")
        } else {
            continue;
        };
        found.push((exe.into_std_path_buf(), dest));
    }
    if !child.wait()?.success() {
        bail!("cargo {} failed", args[0]);
    }
    Ok(found)
}

fn copy_stripped(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    // Line tables stay for backtraces; the rest of the debug info is dead weight on the GPU host.
    let _ = Command::new("strip").arg("--strip-debug").arg(to).status();
    Ok(())
}

const README: &str = "\
Release builds of the GPU transfer lessons, for a GPU host without Rust. They need the NVIDIA driver.

  ./lessons/pinned_memory          a lesson (each takes --help)
  ./xtask test                     every test binary (the GPU tests run where the driver is found)
  ./benches/NAME --bench           a criterion benchmark
";
