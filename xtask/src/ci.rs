//! CI's checks beyond `cargo xtask test` (`.ci/run` runs both), each from what a user has:
//! - `msrv`: the workspace built by the Rust its `rust-version` names, installed with rustup;
//! - `cuda-path`: a machine with the CUDA toolkit. The toolkit from PyPI is laid out like an installed
//!   one (`bin/nvcc`, `include/cuda.h`, `lib64`), `CUDA_PATH` points at it, and a clean clone of this
//!   commit builds every example and bench with no setup step, its kernels compiled by that nvcc (no
//!   `lib64/stubs/libcuda.so` is needed: nothing links against the driver, `common` loads it at run time);
//! - `first-command`: a machine without CUDA. In a clean clone, README's first command,
//!   `cargo run --release --example overlap`, builds and the lesson says in one line why it cannot run;
//!   and so does the binary it built, `target/release/examples/overlap`, run directly with no
//!   `LD_LIBRARY_PATH` (cargo sets one for what it runs), exiting 3 (no GPU) rather than failing in the
//!   dynamic loader;
//! - `lift`: a user's crate that depends on `common` alone, by path (`lift/`, outside the workspace),
//!   builds in a clean clone with nothing set and without CUDA, and its tests pass; its dependencies
//!   hold nothing of the lessons' rig;
//! - `package`: the core crate as the registry takes it. `cargo package -p cuda-scope` packs it and
//!   builds the packed copy alone (the core has no path dependencies, so no other crate is packed with
//!   it; CI's stable toolchain does it), and `cargo doc -p cuda-scope --no-deps` builds its
//!   documentation with `-D warnings`, as docs.rs would, without CUDA.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, Context as _};

use crate::{
    flags::{CiFlags, CiStep},
    setup, tools,
};

/// Variables that would point the build at a toolkit other than the one a step means to test.
const CUDA_VARS: [&str; 7] =
    ["CUDA_PATH", "CUDA_HOME", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR", "CUDA_LIBRARY_PATH", "NVCC", "CARGO_TARGET_DIR"];

pub fn run(flags: CiFlags) -> anyhow::Result<()> {
    let steps = if flags.steps.is_empty() {
        vec![CiStep::Msrv, CiStep::CudaPath, CiStep::FirstCommand, CiStep::Lift, CiStep::Package]
    } else {
        flags.steps
    };
    for step in steps {
        let start = Instant::now();
        let what = match step {
            CiStep::Msrv => msrv()?,
            CiStep::CudaPath => cuda_path()?,
            CiStep::FirstCommand => first_command()?,
            CiStep::Lift => lift()?,
            CiStep::Package => package()?,
        };
        eprintln!("ci: {what} ({:.0} s)", start.elapsed().as_secs_f64());
    }
    Ok(())
}

/// The core crate packed as the registry would take it, the packed copy built; and its documentation
/// with every rustdoc warning an error.
fn package() -> anyhow::Result<String> {
    let root = tools::root();
    let mut pack = Command::new(cargo_program());
    pack.current_dir(&root).args(["package", "-p", CORE, "--locked", "--allow-dirty"]);
    tools::run(&mut pack, "packaging the core crate (cargo package builds what it packed)")?;
    let mut list = Command::new(cargo_program());
    list.current_dir(&root).args(["package", "-p", CORE, "--list", "--allow-dirty"]);
    let files = tools::output(&mut list, "listing what the package holds")?;
    let files = String::from_utf8_lossy(&files.stdout).lines().count();
    let mut doc = Command::new(cargo_program());
    doc.current_dir(&root).env("RUSTDOCFLAGS", "-D warnings").args(["doc", "-p", CORE, "--no-deps", "--locked"]);
    tools::run(&mut doc, "building the core crate's documentation with warnings denied")?;
    Ok(format!("package: {CORE} packs ({files} files) and its packed copy builds; its docs build with -D warnings"))
}

/// The core crate's package name.
const CORE: &str = "cuda-scope";

fn msrv() -> anyhow::Result<String> {
    let meta = tools::metadata()?;
    let root = meta.root_package().context("the workspace has no root package")?;
    let version = root.rust_version.as_ref().context("the workspace declares no rust-version")?;
    let toolchain = format!("{}.{}", version.major, version.minor);
    if which::which("rustup").is_err() {
        return Ok(format!(
            "msrv: no rustup here to install Rust {toolchain}: the MSRV is held only by the lock test and clippy"
        ));
    }
    let install = Command::new("rustup").args(["toolchain", "install", &toolchain, "--profile", "minimal"]).output();
    if !install.as_ref().is_ok_and(|o| o.status.success()) {
        let why = install.map_or_else(|e| e.to_string(), |o| last_line(&o.stderr));
        return Ok(format!(
            "msrv: rustup could not install Rust {toolchain} ({why}): the MSRV is held only by the lock test and clippy"
        ));
    }
    let rustc = tools::output(
        Command::new("rustup").args(["run", &toolchain, "rustc", "--version"]),
        "asking the MSRV toolchain its version",
    )?;
    eprintln!("ci: msrv: building the workspace with {}", String::from_utf8_lossy(&rustc.stdout).trim());
    let target = Scratch::new(tools::target_dir().join("msrv"));
    let mut cargo = Command::new("rustup");
    cargo
        .args(["run", &toolchain, "cargo", "build", "--workspace", "--all-targets", "--locked"])
        .current_dir(tools::root())
        .env("CARGO_TARGET_DIR", &target.0)
        .env("CARGO_PROFILE_DEV_DEBUG", "0");
    for var in ["CARGO", "RUSTC", "RUSTDOC", "RUSTUP_TOOLCHAIN", "RUSTC_WRAPPER", "RUSTFLAGS"] {
        cargo.env_remove(var);
    }
    tools::run(&mut cargo, &format!("building with Rust {toolchain}"))?;
    Ok(format!("msrv: the workspace builds with Rust {toolchain}, its rust-version"))
}

fn cuda_path() -> anyhow::Result<String> {
    let toolkit = toolkit_layout()?;
    let clone = clean_clone()?;
    let target = Scratch::new(clone.join("target")); // a cold build, as on a user's machine
    let target = &target.0;
    let mut cargo = clean_env(Command::new(cargo_program()), &clone, target);
    cargo.env("CUDA_PATH", &toolkit).args(["build", "--locked", "--examples", "--benches"]);
    eprintln!(
        "ci: cuda-path: CUDA_PATH={}: cargo build --examples --benches in {}",
        toolkit.display(),
        clone.display()
    );
    tools::run(&mut cargo, "building against the installed-like toolkit")?;
    let nvcc = toolkit.join("bin/nvcc");
    let from = kernels_built_by(&target.join("debug"))?;
    if from != format!("compiled by {}", nvcc.display()) {
        bail!("the kernels were not compiled by $CUDA_PATH/bin/nvcc: the build says they were {from}");
    }
    let mut run = clean_env(Command::new(cargo_program()), &clone, target);
    run.env("CUDA_PATH", &toolkit).args(["run", "--locked", "--quiet", "--example", "overlap"]);
    let said = lesson_says(&mut run)?;
    Ok(format!("cuda-path: every example and bench builds against $CUDA_PATH, kernels by its nvcc; overlap: {said}"))
}

fn first_command() -> anyhow::Result<String> {
    let clone = clean_clone()?;
    let target = Scratch::new(clone.join("target-first-command"));
    let target = &target.0;
    let mut run = clean_env(Command::new(cargo_program()), &clone, target);
    run.args(["run", "--release", "--example", "overlap"]);
    eprintln!("ci: first-command: cargo run --release --example overlap, in {} without CUDA", clone.display());
    let said = lesson_says(&mut run)?;
    let from = kernels_built_by(&target.join("release"))?;
    if !from.starts_with("the committed PTX") {
        bail!("without CUDA the kernels should come from the committed PTX, but were {from}");
    }
    let direct = run_directly(&target.join("release/examples/overlap"))?;
    Ok(format!("first-command: builds with no setup step (kernels from the committed PTX); overlap: {said}; {direct}"))
}

/// A lesson's release binary run as a user runs what they built, not through cargo: with no
/// `LD_LIBRARY_PATH` (nor `LD_PRELOAD`), so that nothing but the system's own folders can give it a
/// `libcuda`. Without a driver it must start, print one line that names the missing driver, and exit 3
/// (no GPU): a binary linked against `libcuda` would die in the dynamic loader instead (exit 127).
fn run_directly(bin: &Path) -> anyhow::Result<String> {
    let name = bin.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    if tools::real_libcuda().is_some() {
        return Ok(format!("{name} run directly: not checked, this machine has a driver"));
    }
    let mut cmd = Command::new(bin);
    cmd.env_remove("LD_LIBRARY_PATH").env_remove("LD_PRELOAD");
    eprintln!("ci: first-command: {} run directly, with no LD_LIBRARY_PATH", bin.display());
    let out = cmd.output().with_context(|| format!("running {}", bin.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let ok = out.status.code() == Some(3)
        && out.stdout.is_empty()
        && lines.len() == 1
        && lines[0].starts_with("error: no NVIDIA driver");
    if !ok {
        bail!(
            "{} run directly without a driver should print one line, `error: no NVIDIA driver...`, and exit 3 (no \
             GPU); it exited {} with stdout {:?} and stderr {stderr:?}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(format!("{name} run directly: exit 3, \"{}\"", lines[0]))
}

/// What a crate that depends on `common` must not bring in: the lessons' rig and its tools.
const NOT_IN_COMMON: [&str; 8] =
    ["measure", "kernels", "clap", "indicatif", "nvml-wrapper", "serde_json", "cust", "nvtx"];

fn lift() -> anyhow::Result<String> {
    let clone = clean_clone()?;
    let target = Scratch::new(clone.join("target-lift"));
    let target = &target.0;
    let manifest = clone.join("lift/Cargo.toml");
    let mut test = clean_env(Command::new(cargo_program()), &clone.join("lift"), target);
    test.args(["test", "--manifest-path"]).arg(&manifest);
    eprintln!("ci: lift: cargo test in {}, a crate on common alone, with nothing set", clone.join("lift").display());
    let out = output_echoing_stderr(&mut test)?;
    if !out.status.success() {
        bail!("the crate on common alone failed its tests ({}): {}", out.status, last_line(&out.stderr));
    }
    let mut tree = clean_env(Command::new(cargo_program()), &clone.join("lift"), target);
    tree.args(["tree", "--prefix", "none", "--edges", "normal,build", "--manifest-path"]).arg(&manifest);
    let tree = tools::output(&mut tree, "listing the dependencies of the crate on common")?;
    let names: Vec<String> = String::from_utf8_lossy(&tree.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let brought: Vec<&String> = names.iter().filter(|n| NOT_IN_COMMON.contains(&n.as_str())).collect();
    if !brought.is_empty() {
        bail!("common brings in what its core does not need: {brought:?}");
    }
    Ok(format!(
        "lift: a crate on common alone builds with nothing set and passes its tests; it depends on {} crates: {}",
        names.len(),
        names.join(", ")
    ))
}

/// Runs a lesson and checks what a user would see: without a driver one line on stderr (after cargo's
/// own lines) that names the missing driver and a failing exit; with one, success.
fn lesson_says(cmd: &mut Command) -> anyhow::Result<String> {
    let out = output_echoing_stderr(cmd)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if tools::real_libcuda().is_some() {
        if !out.status.success() {
            bail!("the lesson failed on a machine with a driver ({}): {}", out.status, last_line(&out.stderr));
        }
        return Ok("ran".into());
    }
    // What the lesson printed: what follows cargo's "     Running `...`" line (all of it under --quiet).
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines.iter().rposition(|l| l.trim_start().starts_with("Running `")).map_or(0, |i| i + 1);
    let own: Vec<&str> = lines[start..].iter().copied().filter(|l| !l.trim().is_empty()).collect();
    let ok = !out.status.success() && stdout.trim().is_empty() && own.len() == 1 && own[0].contains("NVIDIA driver");
    if !ok {
        bail!(
            "without a driver the lesson should fail with one line naming the driver; it exited {} with stdout \
             {stdout:?} and stderr {stderr:?}",
            out.status
        );
    }
    Ok(format!("exit {}, \"{}\"", out.status.code().map_or("by signal".into(), |c| c.to_string()), own[0]))
}

/// Runs a command to completion, capturing its output, and showing its stderr (cargo's progress) as it comes.
fn output_echoing_stderr(cmd: &mut Command) -> anyhow::Result<std::process::Output> {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("starting cargo")?;
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).map(|_| buf)
    });
    let mut stderr = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).split(b'\n') {
        let line = line?;
        eprintln!("{}", String::from_utf8_lossy(&line));
        stderr.extend_from_slice(&line);
        stderr.push(b'\n');
    }
    let status = child.wait()?;
    let stdout = reader.join().map_err(|_| anyhow::anyhow!("reading stdout failed"))??;
    Ok(std::process::Output { status, stdout, stderr })
}

/// What the kernels crate's build script says it used for the kernels (a plain line it prints, which cargo keeps).
fn kernels_built_by(profile_dir: &Path) -> anyhow::Result<String> {
    let build = profile_dir.join("build");
    for e in fs::read_dir(&build).with_context(|| format!("reading {}", build.display()))?.flatten() {
        if e.file_name().to_string_lossy().starts_with("kernels-") {
            if let Ok(text) = fs::read_to_string(e.path().join("output")) {
                if let Some(l) = text.lines().find_map(|l| l.strip_prefix("kernels: ")) {
                    return Ok(l.to_string());
                }
            }
        }
    }
    bail!("the kernels crate's build script left no output under {}", build.display())
}

/// The PyPI toolkit, laid out as the CUDA installer lays out /usr/local/cuda, in target/ci/cuda.
fn toolkit_layout() -> anyhow::Result<PathBuf> {
    let nvcc = setup::nvcc_13()?;
    let pypi = nvcc.parent().and_then(Path::parent).context("nvcc is not in a bin folder")?.to_path_buf();
    let root = tools::target_dir().join("ci/cuda");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(root.join("lib64"))?;
    for dir in ["bin", "include", "nvvm"] {
        std::os::unix::fs::symlink(pypi.join(dir), root.join(dir)).with_context(|| format!("linking {dir}"))?;
    }
    for e in fs::read_dir(pypi.join("lib"))?.flatten() {
        std::os::unix::fs::symlink(e.path(), root.join("lib64").join(e.file_name()))?;
    }
    for need in ["bin/nvcc", "include/cuda.h"] {
        if !root.join(need).is_file() {
            bail!("the toolkit layout lacks {need}");
        }
    }
    Ok(root)
}

/// A clean clone of this commit in target/ci/clone (made once per `cargo xtask ci`).
fn clean_clone() -> anyhow::Result<PathBuf> {
    let clone = tools::target_dir().join("ci/clone");
    let head =
        tools::output(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(tools::root()), "git rev-parse")?;
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let current = Command::new("git").args(["rev-parse", "HEAD"]).current_dir(&clone).output();
    if current.is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == head) {
        return Ok(clone);
    }
    let _ = fs::remove_dir_all(&clone);
    tools::run(
        Command::new("git").args(["clone", "--quiet", "--no-checkout"]).arg(tools::root()).arg(&clone),
        "cloning the repository",
    )?;
    tools::run(
        Command::new("git").args(["checkout", "--quiet", "--detach", &head]).current_dir(&clone),
        "checking out this commit",
    )?;
    let dirty =
        tools::output(Command::new("git").args(["status", "--porcelain"]).current_dir(tools::root()), "git status")?;
    if !dirty.stdout.is_empty() {
        eprintln!("ci: the clone has commit {head}; changes not committed here are not in it");
    }
    Ok(clone)
}

/// A build folder of one step's own: empty when made, removed when the step ends however it ends, so
/// that the steps' builds never lie on the disk together (a fresh CI machine may have a few GiB free).
struct Scratch(PathBuf);

impl Scratch {
    fn new(dir: PathBuf) -> Self {
        let _ = fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// cargo in `dir`, building into `target`, with no CUDA variable of ours and no nvcc on PATH.
fn clean_env(mut cmd: Command, dir: &Path, target: &Path) -> Command {
    cmd.current_dir(dir).env("CARGO_TARGET_DIR", target);
    for var in CUDA_VARS.iter().filter(|v| **v != "CARGO_TARGET_DIR") {
        cmd.env_remove(var);
    }
    if let Some(path) = env::var_os("PATH") {
        let kept: Vec<PathBuf> = env::split_paths(&path).filter(|d| !d.join("nvcc").is_file()).collect();
        cmd.env("PATH", env::join_paths(kept).unwrap_or(path));
    }
    cmd
}

fn cargo_program() -> std::ffi::OsString {
    env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
}
