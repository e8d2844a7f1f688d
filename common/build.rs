//! Makes the one thing the build needs from CUDA, on any machine, with no setup step and nothing set: a
//! `libcuda.so` to link against, in `$OUT_DIR/libcuda`. It is a link to the NVIDIA driver where there is
//! one, else a link-only stub compiled from `libcuda/stub.c` (a C compiler is all it takes), whose every
//! entry point returns CUDA_ERROR_STUB_LIBRARY, so that programs start and say there is no driver. Cargo
//! puts that folder on the loader path of `cargo run` and `cargo test`; the stub is named `libcuda.so.1`
//! there only where no driver is found, so it never stands in front of a real one.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::exit,
};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    for var in cuda_find::ENV_VARS {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed={}", manifest.join("libcuda/stub.c").display());
    link_libcuda(&manifest, &out);
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
