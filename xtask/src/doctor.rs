//! Says what this machine has for the build, the tests and the lessons, and what to do about what it
//! lacks; fails when something needed is missing.

use std::process::Command;

use anyhow::bail;

use crate::{setup, tools};

/// How much a missing thing matters.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Without it something the README promises fails here: doctor fails.
    Needed,
    /// Only some tasks use it.
    Optional,
}

struct Report {
    missing: Vec<&'static str>,
}

impl Report {
    fn line(&mut self, found: Result<String, String>, what: &'static str, need: Need, fix: &str) {
        match found {
            Ok(detail) => println!("ok       {what:<18} {detail}"),
            Err(detail) => {
                let mark = if need == Need::Needed { "MISSING" } else { "absent " };
                println!("{mark}  {what:<18} {detail}");
                println!("         {:<18} fix: {fix}", "");
                if need == Need::Needed {
                    self.missing.push(what);
                }
            }
        }
    }
}

pub fn run() -> anyhow::Result<()> {
    let mut r = Report { missing: Vec::new() };

    // The build: a C compiler (the linker Rust uses; check-ffi compiles with it too).
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    r.line(
        first_line(Command::new(&cc).arg("--version")).ok_or_else(|| format!("`{cc} --version` did not run")),
        "C compiler",
        Need::Needed,
        "install gcc (Debian: apt-get install gcc), or set CC",
    );

    // The test command: nvcc 13.0 for the check of the committed PTX, from PyPI where the machine has none.
    let nvcc = tools::nvcc();
    let release = nvcc.as_deref().and_then(cuda_find::nvcc_release);
    let has_13 = release.as_deref() == Some(cuda_find::NVCC_RELEASE);
    r.line(
        match &nvcc {
            Some(p) => Ok(format!("{} (release {})", p.display(), release.as_deref().unwrap_or("?"))),
            None => Err("not found: the build uses the committed PTX in kernels/ptx".into()),
        },
        "nvcc",
        Need::Optional,
        "`cargo xtask setup` installs nvcc 13.0 from PyPI (`cargo xtask test` does it by itself), or set NVCC",
    );
    let pypi_need = if has_13 || tools::provisioned_nvcc().is_file() { Need::Optional } else { Need::Needed };
    let python = setup::python().ok();
    r.line(
        python
            .and_then(|p| first_line(Command::new(p).args(["-m", "pip", "--version"])))
            .ok_or_else(|| "no python3 with pip".to_string()),
        "Python with pip",
        pypi_need,
        "install Python 3 and pip (Debian: apt-get install python3-pip): `cargo xtask test` fetches nvcc 13.0 with it",
    );
    if let Some(python) = python {
        r.line(pypi(python), "PyPI", pypi_need, "allow HTTPS to PyPI (or set pip's index-url to a mirror)");
    }

    // The lessons: the driver and a GPU.
    let driver = tools::real_libcuda();
    r.line(
        driver.as_ref().map(|p| p.display().to_string()).ok_or_else(|| "no libcuda.so.1".into()),
        "NVIDIA driver",
        Need::Needed,
        "install the NVIDIA driver for CUDA 13 (580 or newer): the lessons need a GPU; the build and CPU tests do not",
    );
    let smi = Command::new("nvidia-smi")
        .args(["--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader"])
        .output();
    let gpus = match smi {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().replace('\n', "; "),
        _ => String::new(),
    };
    r.line(
        if gpus.is_empty() { Err("nvidia-smi lists none".into()) } else { Ok(gpus) },
        "GPU",
        Need::Needed,
        "run on a machine with an NVIDIA GPU",
    );

    // Profiling and sanitizing.
    let nsys = tools::nvidia_tool("nsys", "NSYS");
    r.line(
        nsys.map(|p| p.display().to_string()).ok_or_else(|| "not found".into()),
        "nsys",
        Need::Optional,
        "install Nsight Systems, or set NSYS (`cargo xtask profile` uses the built-in timeline without it)",
    );
    let sanitizer = tools::nvidia_tool("compute-sanitizer", "COMPUTE_SANITIZER");
    r.line(
        sanitizer.map(|p| p.display().to_string()).ok_or_else(|| "not found".into()),
        "compute-sanitizer",
        Need::Optional,
        "install the CUDA toolkit, or set COMPUTE_SANITIZER (`cargo xtask sanitize` only)",
    );

    if !r.missing.is_empty() {
        bail!("missing: {} (see above)", r.missing.join(", "));
    }
    println!("\neverything the build, the tests and the lessons need is here");
    Ok(())
}

/// The first line a command prints, if it runs and succeeds.
fn first_line(cmd: &mut Command) -> Option<String> {
    let out = tools::output_within(cmd, 10)?;
    let text = String::from_utf8_lossy(&out.stdout);
    out.status.success().then(|| text.lines().next().unwrap_or("").trim().to_string())
}

/// Whether pip reaches its index (PyPI, or the mirror pip is configured with), within 20 s.
fn pypi(python: &str) -> Result<String, String> {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pip", "index", "versions", "nvidia-cuda-nvcc", "--disable-pip-version-check"]);
    match tools::output_within(&mut cmd, 20) {
        None => Err("pip did not answer within 20 s".into()),
        Some(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            Ok(format!("reached: {}", text.lines().next().unwrap_or("").trim()))
        }
        Some(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let why = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("pip failed").trim().to_string();
            Err(format!("not reached: {why}"))
        }
    }
}
