//! Finding the workspace and external programs, and running them with errors that say what was being done.

use std::{
    env,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::{bail, Context as _};

/// The workspace root, whether run through cargo or from a bundle (where it is the bundle folder).
pub fn root() -> PathBuf {
    match env::var_os("CARGO_MANIFEST_DIR") {
        Some(d) => PathBuf::from(d).parent().unwrap().to_path_buf(),
        None => env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)).unwrap_or_else(|| ".".into()),
    }
}

/// Whether this xtask runs from a bundle made by `cargo xtask bundle`.
pub fn in_bundle() -> bool {
    env::var_os("CARGO_MANIFEST_DIR").is_none() && root().join("bundle.json").is_file()
}

pub fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

pub fn cargo() -> Command {
    let mut c = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs a command to completion, inheriting stdio; fails with `what` if it fails.
pub fn run(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("{what}: cannot start {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{what}: {:?} failed ({status})", cmd.get_program());
    }
    Ok(())
}

/// Runs a command and captures its output; fails with `what` (and its stderr) if it fails.
pub fn output(cmd: &mut Command, what: &str) -> anyhow::Result<Output> {
    let out = cmd.output().with_context(|| format!("{what}: cannot start {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{what}: {:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

fn file(p: PathBuf) -> Option<PathBuf> {
    p.is_file().then_some(p)
}

fn on_path(name: &str) -> Option<PathBuf> {
    env::var_os("PATH").and_then(|p| env::split_paths(&p).find_map(|d| file(d.join(name))))
}

/// nvcc, in the order the build script looks: $NVCC, $CUDA_PATH, $CUDA_HOME, PATH, /usr/local/cuda, ours.
pub fn nvcc() -> Option<PathBuf> {
    if let Some(p) = env::var_os("NVCC") {
        return file(PathBuf::from(p));
    }
    ["CUDA_PATH", "CUDA_HOME"]
        .iter()
        .filter_map(env::var_os)
        .find_map(|r| file(Path::new(&r).join("bin/nvcc")))
        .or_else(|| on_path("nvcc"))
        .or_else(|| file("/usr/local/cuda/bin/nvcc".into()))
        .or_else(|| file(provisioned_nvcc()))
}

pub fn provisioned_nvcc() -> PathBuf {
    target_dir().join("cuda/toolkit/nvidia/cu13/bin/nvcc")
}

/// An NVIDIA tool that ships with the CUDA toolkit or Nsight: $VAR, PATH, the toolkit, /opt/nvidia.
pub fn nvidia_tool(name: &str, var: &str) -> Option<PathBuf> {
    if let Some(p) = env::var_os(var) {
        return file(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> =
        ["CUDA_PATH", "CUDA_HOME"].iter().filter_map(env::var_os).map(|r| Path::new(&r).join("bin")).collect();
    dirs.push("/usr/local/cuda/bin".into());
    dirs.push("/usr/local/cuda/compute-sanitizer".into());
    for pattern in [
        "/opt/nvidia/nsight-systems",
        "/opt/nvidia/nsight-compute",
        "/usr/local/cuda/nsight-systems",
        "/usr/local/cuda",
    ] {
        let (parent, prefix) = pattern.rsplit_once('/').unwrap();
        if let Ok(entries) = std::fs::read_dir(parent) {
            let mut found: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(prefix)))
                .collect();
            found.sort();
            for d in found.into_iter().rev() {
                dirs.push(d.join("bin"));
                dirs.push(d.join("target-linux-x64"));
                if let Ok(versions) = std::fs::read_dir(&d) {
                    for v in versions.flatten() {
                        dirs.push(v.path().join("bin"));
                        dirs.push(v.path().join("target-linux-x64"));
                        dirs.push(v.path().join("host/target-linux-x64"));
                    }
                }
            }
        }
    }
    on_path(name).or_else(|| dirs.into_iter().find_map(|d| file(d.join(name))))
}

/// The real driver library, if this machine has one.
pub fn real_libcuda() -> Option<PathBuf> {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
        "/usr/lib/wsl/lib",
        "/usr/local/cuda/compat",
    ];
    dirs.iter().find_map(|d| file(Path::new(d).join("libcuda.so.1"))).or_else(|| {
        let out = Command::new("ldconfig").arg("-p").output().ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.trim_start().starts_with("libcuda.so.1 "))
            .find_map(|l| l.rsplit_once("=> ").map(|(_, p)| PathBuf::from(p.trim())))
    })
}
