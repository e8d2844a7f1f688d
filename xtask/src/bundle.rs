//! Packs release builds of the lessons, the test binaries, the benchmarks and this xtask into one
//! folder that runs on a GPU host without Rust:
//!
//! ```text
//! target/bundle/
//!   xtask            `./xtask test` runs every test binary; other tasks run as through cargo
//!   lessons/NAME     each lesson (`./lessons/overlap --help`)
//!   tests/NAME       each test binary (unit tests of common, the GPU tests)
//!   benches/NAME     each criterion benchmark (`./benches/NAME --bench`)
//!   bundle.json      what is inside, and from which commit
//! ```

use std::{
    fs,
    io::BufRead,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

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
    let mut cargo = tools::cargo();
    cargo.envs(nvtx_env);
    let mut child = cargo
        .args([
            "build",
            "--release",
            "--workspace",
            "--features",
            "nvtx",
            "--examples",
            "--tests",
            "--benches",
            "--bins",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting cargo build")?;
    let mut contents = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let msg: serde_json::Value = match serde_json::from_str(&line?) {
            Ok(v) => v,
            Err(_) => continue,
        };
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let name = msg["target"]["name"].as_str().unwrap_or("?");
        let kinds: Vec<&str> =
            msg["target"]["kind"].as_array().map(|k| k.iter().filter_map(|s| s.as_str()).collect()).unwrap_or_default();
        let test = msg["profile"]["test"].as_bool().unwrap_or(false);
        // The compile-fail suite runs cargo itself: it belongs where Rust is, not in the bundle.
        if name == "compile_fail" {
            continue;
        }
        let dest = if kinds.contains(&"example") {
            out.join("lessons").join(name)
        } else if kinds.contains(&"bench") {
            out.join("benches").join(name)
        } else if test {
            let package = msg["package_id"].as_str().and_then(package_name).unwrap_or("x");
            out.join("tests").join(if package == name { name.to_string() } else { format!("{package}-{name}") })
        } else if name == "xtask" {
            out.join("xtask")
        } else {
            continue;
        };
        copy_stripped(Path::new(exe), &dest)?;
        contents.push(dest.strip_prefix(&out).unwrap().display().to_string());
    }
    if !child.wait()?.success() {
        bail!("cargo build failed");
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
    let size: u64 = walk(&out).iter().filter_map(|p| p.metadata().ok()).map(|m| m.len()).sum();
    println!("bundle: {} files, {:.1} MiB in {}", contents.len(), size as f64 / (1 << 20) as f64, out.display());
    Ok(())
}

/// `path+file:///x/common#0.1.0` or `common 0.1.0 (path+file:///...)` -> `common`.
fn package_name(id: &str) -> Option<&str> {
    if let Some((_, frag)) = id.rsplit_once('#') {
        let name = frag.split('@').next()?;
        // `#0.1.0` alone means the name is the last path segment.
        if name.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            return id.rsplit_once('#')?.0.rsplit('/').next();
        }
        return Some(name);
    }
    id.split_whitespace().next()
}

fn copy_stripped(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    // Line tables stay for backtraces; the rest of the debug info is dead weight on the GPU host.
    let _ = Command::new("strip").arg("--strip-debug").arg(to).status();
    Ok(())
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

const README: &str = "\
Release builds of the GPU transfer lessons, for a GPU host without Rust. They need the NVIDIA driver.

  ./lessons/pinned_memory          a lesson (each takes --help)
  ./xtask test                     every test binary (GPU tests run here, not skip)
  ./benches/NAME --bench           a criterion benchmark
";

#[cfg(test)]
mod tests {
    use super::package_name;

    #[test]
    fn package_names_from_ids() {
        assert_eq!(package_name("path+file:///work/main/common#0.1.0"), Some("common"));
        assert_eq!(package_name("path+file:///work/main#gpu-transfers@0.1.0"), Some("gpu-transfers"));
        assert_eq!(package_name("common 0.1.0 (path+file:///work/main/common)"), Some("common"));
    }
}
