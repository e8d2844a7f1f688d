//! Compiles every `*.cu` beside this crate's manifest to `$OUT_DIR/<stem>.ptx`, which `src/lib.rs`
//! embeds: with nvcc where one is found, else the committed PTX in `ptx/` (made by nvcc 13.0) is copied.
//! PTX for compute_75, the oldest architecture CUDA 13 supports; the driver JIT-compiles it for the GPU
//! at hand when the module is loaded.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::exit,
};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    for var in cuda_find::ENV_VARS {
        println!("cargo:rerun-if-env-changed={var}");
    }
    kernels(&manifest, &workspace, &out);
}

fn kernels(dir: &Path, workspace: &Path, out: &Path) {
    println!("cargo:rerun-if-changed={}", dir.join("ptx").display());
    let mut sources: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", dir.display())))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    let nvcc = cuda_find::nvcc(&cuda_find::target_dir(workspace));
    // Not a `cargo:` line: cargo ignores it, but keeps it in the build's `output` file, where CI checks it.
    match &nvcc {
        Some(nvcc) => println!("kernels: compiled by {}", nvcc.display()),
        None => println!("kernels: the committed PTX in {}", dir.join("ptx").display()),
    }
    for src in sources {
        println!("cargo:rerun-if-changed={}", src.display());
        let ptx = out.join(src.with_extension("ptx").file_name().unwrap());
        match &nvcc {
            Some(nvcc) => compile(nvcc, &src, &ptx),
            None => copy_committed(workspace, &src, &ptx),
        }
    }
}

fn compile(nvcc: &Path, src: &Path, ptx: &Path) {
    let status = cuda_find::ptx_command(nvcc, src, ptx)
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", nvcc.display())));
    if !status.success() {
        fail(&format!("{} failed on {} ({status})", nvcc.display(), src.display()));
    }
}

fn copy_committed(workspace: &Path, src: &Path, ptx: &Path) {
    let relative = src.strip_prefix(workspace).unwrap_or(src).display().to_string();
    let committed = cuda_find::committed_ptx_path(src);
    let remake = "`cargo xtask setup` installs nvcc 13.0 from PyPI (or install the CUDA toolkit), and \
                  `cargo xtask generate` remakes the committed PTX";
    let Ok(text) = fs::read_to_string(&committed) else {
        fail(&format!("no nvcc found and {relative} has no committed PTX ({}): {remake}", committed.display()));
    };
    let source = fs::read(src).unwrap_or_else(|e| fail(&format!("reading {}: {e}", src.display())));
    if !cuda_find::ptx_matches_source(&text, &relative, &source) {
        fail(&format!(
            "{relative} changed since {} was made from it, and no nvcc is found to compile it: {remake}",
            committed.display()
        ));
    }
    fs::write(ptx, text).unwrap_or_else(|e| fail(&format!("writing {}: {e}", ptx.display())));
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    exit(1)
}
