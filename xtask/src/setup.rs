//! Provisions what the build needs where the machine lacks it, into the target directory:
//! - nvcc 13.0 from PyPI (matching the 580 driver: a newer nvcc emits PTX that driver rejects);
//! - `target/cuda/libcuda/lib64/libcuda.so` for cust's build script (via `CUDA_LIBRARY_PATH`, set in
//!   `.cargo/config.toml`): a link to the real driver where there is one, else a link-only stub whose
//!   every entry point returns `CUDA_ERROR_STUB_LIBRARY`, so programs start and say there is no driver.

use std::{fs, path::PathBuf, process::Command};

use anyhow::{bail, Context as _};

use crate::tools::{self, output, run as run_cmd};

/// The PyPI packages that make a working nvcc, pinned to the GPU machine's CUDA 13.0.
const NVCC_PACKAGES: [&str; 4] =
    ["nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88", "nvidia-cuda-runtime==13.0.96"];

/// CUDA_ERROR_STUB_LIBRARY
const STUB_RESULT: u32 = 34;

pub struct Setup {
    pub nvcc: PathBuf,
}

pub fn run() -> anyhow::Result<Setup> {
    let nvcc = match tools::nvcc() {
        Some(p) => p,
        None => provision_nvcc()?,
    };
    let driver = tools::real_libcuda();
    link_libcuda(driver.as_deref())?;
    eprintln!("setup: nvcc {}", nvcc.display());
    match &driver {
        Some(d) => eprintln!("setup: NVIDIA driver {}", d.display()),
        None => eprintln!("setup: no NVIDIA driver here: linking against a stub (programs will say there is no GPU)"),
    }
    Ok(Setup { nvcc })
}

/// The environment for builds with the `nvtx` feature. NVIDIA's nvtx crate generates its bindings with
/// bindgen, which needs libclang: none is added where the machine has it, else a copy from PyPI in the
/// target directory, with the host C compiler's builtin headers (that copy ships none).
pub fn nvtx_build_env() -> anyhow::Result<Vec<(&'static str, std::ffi::OsString)>> {
    let Some(lib) = libclang()? else { return Ok(Vec::new()) };
    let mut env = vec![("LIBCLANG_PATH", lib.into_os_string())];
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if let Ok(o) = Command::new(cc).arg("-print-file-name=include").output() {
        let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && std::path::Path::new(&dir).join("stddef.h").is_file() {
            env.push(("BINDGEN_EXTRA_CLANG_ARGS", format!("-I{dir}").into()));
        }
    }
    Ok(env)
}

fn libclang() -> anyhow::Result<Option<PathBuf>> {
    if std::env::var_os("LIBCLANG_PATH").is_some() || system_libclang() {
        return Ok(None);
    }
    let dir = tools::target_dir().join("cuda/libclang");
    let lib = dir.join("clang/native");
    if !lib.join("libclang.so").is_file() {
        eprintln!(
            "setup: no libclang found (the nvtx crate's bindgen needs it); installing it from PyPI into {}",
            dir.display()
        );
        pip_install(&dir, &[LIBCLANG_PACKAGE], "installing libclang from PyPI")?;
    }
    if !lib.join("libclang.so").is_file() {
        bail!("pip installed {LIBCLANG_PACKAGE} but {} is missing", lib.join("libclang.so").display());
    }
    Ok(Some(lib))
}

const LIBCLANG_PACKAGE: &str = "libclang==18.1.1";

fn system_libclang() -> bool {
    let mut dirs =
        vec![PathBuf::from("/usr/lib/x86_64-linux-gnu"), PathBuf::from("/usr/lib64"), PathBuf::from("/usr/lib")];
    if let Ok(entries) = fs::read_dir("/usr/lib") {
        dirs.extend(
            entries.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().contains("llvm")).map(|p| p.join("lib")),
        );
    }
    dirs.iter().any(|d| {
        fs::read_dir(d).is_ok_and(|es| {
            es.flatten().any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                // libclang.so, libclang.so.1, libclang-14.so.1; not libclang-cpp.so, a different library.
                n.starts_with("libclang.so")
                    || (n.strip_prefix("libclang-").is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
                        && n.contains(".so"))
            })
        })
    })
}

/// `pip install --target dir packages`, quietly, with no dependencies (each list is complete).
fn pip_install(dir: &std::path::Path, packages: &[&str], what: &str) -> anyhow::Result<()> {
    let mut cmd = Command::new(python()?);
    cmd.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--upgrade", "--target"]);
    run_cmd(cmd.arg(dir).args(packages), what)
}

fn python() -> anyhow::Result<&'static str> {
    ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .context("python3 is needed to fetch build tools from PyPI: install Python, or the CUDA toolkit and libclang")
}

fn provision_nvcc() -> anyhow::Result<PathBuf> {
    let dir = tools::target_dir().join("cuda/toolkit");
    eprintln!("setup: no nvcc found; installing nvcc 13.0 from PyPI into {}", dir.display());
    pip_install(&dir, &NVCC_PACKAGES, "installing nvcc from PyPI")?;
    let nvcc = tools::provisioned_nvcc();
    if !nvcc.is_file() {
        bail!("pip installed the CUDA packages but {} is missing", nvcc.display());
    }
    Ok(nvcc)
}

fn link_libcuda(driver: Option<&std::path::Path>) -> anyhow::Result<()> {
    let lib64 = tools::target_dir().join("cuda/libcuda/lib64");
    fs::create_dir_all(&lib64).with_context(|| format!("creating {}", lib64.display()))?;
    let so = lib64.join("libcuda.so");
    let so1 = lib64.join("libcuda.so.1");
    for p in [&so, &so1] {
        let _ = fs::remove_file(p);
    }
    match driver {
        Some(real) => {
            // Link against the real driver; no libcuda.so.1 here, so the loader finds the system's at run time.
            std::os::unix::fs::symlink(real, &so).context("linking to the NVIDIA driver")?;
        }
        None => {
            let c = lib64.join("stub.c");
            fs::write(&c, stub_source()?).context("writing the libcuda stub")?;
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            output(
                Command::new(cc).args(["-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o"]).arg(&so).arg(&c),
                "compiling the libcuda stub",
            )?;
            std::os::unix::fs::symlink("libcuda.so", &so1).context("naming the stub libcuda.so.1")?;
        }
    }
    Ok(())
}

/// C source defining every `cu*` entry point that cust's bindings declare, each returning
/// CUDA_ERROR_STUB_LIBRARY, like the toolkit's `lib64/stubs/libcuda.so`.
fn stub_source() -> anyhow::Result<String> {
    let meta = output(tools::cargo().args(["metadata", "--format-version", "1"]), "reading cargo metadata")?;
    let meta: serde_json::Value = serde_json::from_slice(&meta.stdout).context("parsing cargo metadata")?;
    let manifest = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "cust_raw"))
        .and_then(|p| p["manifest_path"].as_str())
        .context("cust_raw is not among the dependencies")?;
    let bindings = PathBuf::from(manifest).with_file_name("src/cuda.rs");
    let text = fs::read_to_string(&bindings).with_context(|| format!("reading {}", bindings.display()))?;
    let mut names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub fn "))
        .filter_map(|l| l.split('(').next())
        .filter(|n| n.starts_with("cu"))
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.len() < 100 {
        bail!("found only {} entry points in {}", names.len(), bindings.display());
    }
    let mut src = String::from("/* Generated by `cargo xtask setup`: a link-only libcuda. */\n");
    for n in names {
        src += &format!("int {n}(void) {{ return {STUB_RESULT}; }}\n");
    }
    Ok(src)
}
