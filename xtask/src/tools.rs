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
    cuda_find::target_dir(&root())
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

/// nvcc, where the build looks for it ($NVCC, $CUDA_PATH, $CUDA_HOME, PATH, /usr/local/cuda, ours).
pub fn nvcc() -> Option<PathBuf> {
    cuda_find::nvcc(&target_dir())
}

pub fn provisioned_nvcc() -> PathBuf {
    cuda_find::provisioned_nvcc(&target_dir())
}

/// The real driver library, if this machine has one.
pub fn real_libcuda() -> Option<PathBuf> {
    cuda_find::real_libcuda()
}

/// The workspace's packages and their locked dependencies (`cargo metadata --locked`).
pub fn metadata() -> anyhow::Result<cargo_metadata::Metadata> {
    let mut cmd = cargo_metadata::MetadataCommand::new();
    if let Some(cargo) = env::var_os("CARGO") {
        cmd.cargo_path(cargo);
    }
    cmd.current_dir(root()).other_options(vec!["--locked".to_string()]).exec().context("reading cargo metadata")
}

/// Runs a command, killing it after `secs`; None if it could not start or ran out of time.
pub fn output_within(cmd: &mut Command, secs: u64) -> Option<Output> {
    use std::{process::Stdio, time::Instant};
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().ok()?;
    let start = Instant::now();
    while child.try_wait().ok()?.is_none() {
        if start.elapsed().as_secs() >= secs {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().ok()
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
    which::which(name).ok().or_else(|| dirs.into_iter().find_map(|d| file(d.join(name))))
}
