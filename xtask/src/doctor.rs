//! Says what this machine has for the lessons, and what to do about what it lacks.

use std::process::Command;

use crate::tools;

pub fn run() -> anyhow::Result<()> {
    let mut missing = 0;
    let mut line = |ok: bool, what: &str, detail: String, fix: &str| {
        println!("{} {what:<18} {detail}", if ok { "ok     " } else { "MISSING" });
        if !ok {
            missing += 1;
            println!("        {:<18} fix: {fix}", "");
        }
    };
    let driver = tools::real_libcuda();
    line(
        driver.is_some(),
        "NVIDIA driver",
        driver.as_ref().map_or("no libcuda.so.1".into(), |p| p.display().to_string()),
        "install the NVIDIA driver (lessons need a GPU; the build and CPU tests do not)",
    );
    let smi = Command::new("nvidia-smi")
        .args(["--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader"])
        .output();
    let gpus = match smi {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().replace('\n', "; "),
        _ => String::new(),
    };
    line(
        !gpus.is_empty(),
        "GPU",
        if gpus.is_empty() { "nvidia-smi lists none".into() } else { gpus },
        "run on a machine with an NVIDIA GPU",
    );
    let nvcc = tools::nvcc();
    let version = nvcc.as_ref().and_then(|p| Command::new(p).arg("--version").output().ok()).map(|o| {
        String::from_utf8_lossy(&o.stdout).lines().find(|l| l.contains("release")).unwrap_or("").trim().to_string()
    });
    line(
        nvcc.is_some(),
        "nvcc",
        nvcc.as_ref().map_or("not found".into(), |p| format!("{} ({})", p.display(), version.unwrap_or_default())),
        "`cargo xtask setup` installs nvcc 13.0 from PyPI, or set NVCC",
    );
    let nsys = tools::nvidia_tool("nsys", "NSYS");
    line(
        nsys.is_some(),
        "nsys",
        nsys.map_or("not found".into(), |p| p.display().to_string()),
        "install Nsight Systems, or set NSYS (profiling only)",
    );
    let sanitizer = tools::nvidia_tool("compute-sanitizer", "COMPUTE_SANITIZER");
    line(
        sanitizer.is_some(),
        "compute-sanitizer",
        sanitizer.map_or("not found".into(), |p| p.display().to_string()),
        "install the CUDA toolkit, or set COMPUTE_SANITIZER (sanitizing only)",
    );
    let link = tools::target_dir().join("cuda/libcuda/lib64/libcuda.so");
    let link_state = match std::fs::read_link(&link) {
        Ok(to) => format!("links to {}", to.display()),
        Err(_) if link.is_file() => "the link-only stub (no driver here)".into(),
        Err(_) => "not set up".into(),
    };
    line(link.exists() || driver.is_some(), "link libcuda", link_state, "`cargo xtask setup`");
    if missing == 0 {
        println!("\neverything the lessons need is here");
    }
    Ok(())
}
