//! Makes what the build needs from CUDA, on any machine, with no setup step:
//!
//! - every `../kernels/*.cu` as `$OUT_DIR/<stem>.ptx` (`src/kernels.rs` embeds them): compiled by nvcc
//!   where one is found, else copied from `../kernels/ptx/`, committed PTX made by nvcc 13.0. PTX for
//!   compute_75, the oldest architecture CUDA 13 supports; the driver JIT-compiles it for the GPU at hand.
//! - a `libcuda.so` to link against, in `$OUT_DIR/libcuda`: a link to the NVIDIA driver where there is
//!   one, else a link-only stub compiled from `libcuda/stub.c`, whose every entry point returns
//!   CUDA_ERROR_STUB_LIBRARY, so that programs start and say there is no driver. Cargo puts that folder
//!   on the loader path of `cargo run` and `cargo test`; the stub is named `libcuda.so.1` there only
//!   where no driver is found, so it never stands in front of a real one.
//!
//! cust's own build script only needs `$CUDA_LIBRARY_PATH/lib64` to exist: `.cargo/config.toml` points
//! it at `libcuda/`, committed for that.

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
    println!("cargo:rerun-if-changed={}", workspace.join("kernels").display());
    println!("cargo:rerun-if-changed={}", manifest.join("libcuda/stub.c").display());
    link_libcuda(&manifest, &out);
    kernels(&workspace, &out);
}

fn kernels(workspace: &Path, out: &Path) {
    let dir = workspace.join("kernels");
    let mut sources: Vec<PathBuf> = fs::read_dir(&dir)
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

/// `$OUT_DIR/libcuda/libcuda.so`: the driver, or the stub (also as `libcuda.so.1`, for the loader).
fn link_libcuda(manifest: &Path, out: &Path) {
    let dir = out.join("libcuda");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("creating {}: {e}", dir.display())));
    let so = dir.join("libcuda.so");
    match cuda_find::real_libcuda() {
        Some(driver) => symlink(&driver, &so),
        None => {
            let stub = manifest.join("libcuda/stub.c");
            let mut cc = cc::Build::new().cargo_metadata(false).get_compiler().to_command();
            cc.args(["-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o"]).arg(&so).arg(&stub);
            let result = cc.output();
            let why = match &result {
                Ok(o) if o.status.success() => None,
                Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = why {
                fail(&format!(
                    "compiling the link-only libcuda stub with {:?} failed (a C compiler is needed: install gcc, \
                     or set CC): {why}",
                    cc.get_program()
                ));
            }
            symlink(Path::new("libcuda.so"), &dir.join("libcuda.so.1"));
        }
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
}

fn symlink(to: &Path, link: &Path) {
    std::os::unix::fs::symlink(to, link)
        .unwrap_or_else(|e| fail(&format!("linking {} to {}: {e}", link.display(), to.display())));
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    exit(1)
}
