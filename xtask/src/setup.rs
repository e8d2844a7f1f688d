//! Provisions what the build does not need but some tasks do, into the target directory: nvcc 13.0
//! from PyPI (matching the 580 driver: a newer nvcc emits PTX that driver rejects) where no nvcc is
//! found, for `cargo xtask kernels`, `cargo xtask generate`, the check of the committed PTX and
//! `cargo xtask check-ffi` (nvidia-cuda-runtime brings the `cuda.h` and `cudaTypedefs.h` it reads); and
//! libclang for builds with the `nvtx` feature. The build itself needs neither: without nvcc it uses
//! the committed PTX, and nothing links against the driver (common loads it at run time).

use std::{fs, path::PathBuf, process::Command};

use anyhow::{bail, Context as _};

use crate::tools::{self, run as run_cmd};

/// The PyPI packages that make a working nvcc, pinned to the GPU machine's CUDA 13.0.
const NVCC_PACKAGES: [&str; 4] =
    ["nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88", "nvidia-cuda-runtime==13.0.96"];

pub struct Setup {
    pub nvcc: PathBuf,
}

pub fn run() -> anyhow::Result<Setup> {
    let nvcc = match tools::nvcc() {
        Some(p) => p,
        None => provision_nvcc()?,
    };
    eprintln!("setup: nvcc {}", nvcc.display());
    Ok(Setup { nvcc })
}

/// nvcc of release 13.0, the one the committed PTX is made with: the machine's where it is that
/// release, else ours from PyPI (installed now if missing).
pub fn nvcc_13() -> anyhow::Result<PathBuf> {
    if let Some(found) = tools::nvcc() {
        if cuda_find::nvcc_release(&found).as_deref() == Some(cuda_find::NVCC_RELEASE) {
            return Ok(found);
        }
    }
    let ours = tools::provisioned_nvcc();
    if ours.is_file() {
        return Ok(ours);
    }
    provision_nvcc()
}

/// ptxas of release 13.0, beside [`nvcc_13`] (installed now if missing): the differential test of
/// common's PTX reading compiles with it, as does nvlink beside it.
pub fn ptxas_13() -> anyhow::Result<PathBuf> {
    let nvcc = nvcc_13()?;
    let ptxas = nvcc.with_file_name("ptxas");
    if !ptxas.is_file() {
        bail!("nvcc 13.0 at {} has no ptxas beside it", nvcc.display());
    }
    Ok(ptxas)
}

/// cuobjdump, which reads cubins: the machine's beside ptxas, else ours from PyPI (installed now if
/// missing; it is under 1 MB). None, said in one line, where neither can be had: the differential test
/// then holds common's cubin reader against ptxas alone.
pub fn cuobjdump(ptxas: &std::path::Path) -> Option<PathBuf> {
    let beside = ptxas.with_file_name("cuobjdump");
    if beside.is_file() {
        return Some(beside);
    }
    let dir = tools::target_dir().join("cuobjdump");
    let ours = dir.join("nvidia/cu13/bin/cuobjdump");
    if !ours.is_file() {
        eprintln!("setup: installing cuobjdump from PyPI into {}", dir.display());
        if let Err(e) = pip_install(&dir, &[CUOBJDUMP_PACKAGE], "installing cuobjdump from PyPI") {
            eprintln!("setup: no cuobjdump ({e:#}): the cubin reader is held against ptxas alone");
            return None;
        }
    }
    ours.is_file().then_some(ours)
}

/// The oldest cuobjdump on PyPI (there is none of 13.0); it reads what ptxas 13.0 writes.
const CUOBJDUMP_PACKAGE: &str = "nvidia-cuda-cuobjdump==13.2.78";

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
    // pip warns at length when run as root (CI); what it installs here goes into our own folder.
    run_cmd(cmd.arg(dir).args(packages).env("PIP_ROOT_USER_ACTION", "ignore"), what)
}

pub fn python() -> anyhow::Result<&'static str> {
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
