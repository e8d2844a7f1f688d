//! Compiles every kernel in `../kernels/*.cu` to PTX with nvcc; `src/kernels.rs` embeds the PTX.
//!
//! PTX for compute_75, the oldest architecture CUDA 13 supports: the driver JIT-compiles it for the
//! GPU at hand when the module is loaded.

use std::{
    env,
    path::{Path, PathBuf},
    process::{exit, Command},
};

const ARCH: &str = "compute_75";

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    let kernels = workspace.join("kernels");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    for var in ["NVCC", "CUDA_PATH", "CUDA_HOME", "PATH", "CARGO_TARGET_DIR", "CUDA_LIBRARY_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed={}", kernels.display());

    announce_stub(&out);
    let Some(nvcc) = find_nvcc(&workspace) else {
        eprintln!(
            "error: nvcc not found (looked at $NVCC, $CUDA_PATH, $CUDA_HOME, PATH, /usr/local/cuda and \
             target/cuda/toolkit). Install the CUDA toolkit, set NVCC=/path/to/nvcc, or run `cargo xtask setup` \
             to fetch nvcc 13.0 from PyPI."
        );
        exit(1);
    };
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&kernels)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", kernels.display())))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    for src in sources {
        println!("cargo:rerun-if-changed={}", src.display());
        let ptx = out.join(src.with_extension("ptx").file_name().unwrap());
        let status = Command::new(&nvcc)
            .args(["-ptx", &format!("-arch={ARCH}"), "-lineinfo", "-o"])
            .arg(&ptx)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", nvcc.display())));
        if !status.success() {
            fail(&format!("nvcc failed on {} ({status})", src.display()));
        }
    }
}

/// On a machine without the driver, `cargo xtask setup` makes a link-only `libcuda.so.1` in
/// `$CUDA_LIBRARY_PATH/lib64`. Cargo puts a build script's link paths on the loader path of `cargo run`
/// and `cargo test` only when they lie in the build's output, so copy the stub there: then programs start
/// and say there is no driver, instead of failing to load.
fn announce_stub(out: &Path) {
    let Some(root) = env::var_os("CUDA_LIBRARY_PATH") else {
        return;
    };
    let stub = Path::new(&root).join("lib64/libcuda.so.1");
    println!("cargo:rerun-if-changed={}", stub.display());
    if stub.is_file() {
        let dir = out.join("libcuda-stub");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("creating {}: {e}", dir.display())));
        std::fs::copy(&stub, dir.join("libcuda.so.1"))
            .unwrap_or_else(|e| fail(&format!("copying the libcuda stub: {e}")));
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    exit(1)
}

fn find_nvcc(workspace: &Path) -> Option<PathBuf> {
    let exe = |p: PathBuf| p.is_file().then_some(p);
    if let Some(p) = env::var_os("NVCC") {
        return exe(PathBuf::from(p));
    }
    let from_roots = ["CUDA_PATH", "CUDA_HOME"]
        .iter()
        .filter_map(env::var_os)
        .find_map(|root| exe(Path::new(&root).join("bin/nvcc")));
    let from_path = || env::var_os("PATH").and_then(|p| env::split_paths(&p).find_map(|d| exe(d.join("nvcc"))));
    let target = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    from_roots
        .or_else(from_path)
        .or_else(|| exe(PathBuf::from("/usr/local/cuda/bin/nvcc")))
        .or_else(|| exe(target.join("cuda/toolkit/nvidia/cu13/bin/nvcc")))
}
