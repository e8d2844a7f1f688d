//! Where the CUDA pieces of this machine are, in one place for the `kernels` build script and the xtask:
//! nvcc, the NVIDIA driver library, and the PTX committed beside the kernels for machines without nvcc.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

/// The CUDA release of the nvcc that `cargo xtask setup` installs and that made `kernels/ptx/`: the
/// release of the 580 driver, which rejects PTX from a newer nvcc.
pub const NVCC_RELEASE: &str = "13.0";

/// The architecture the PTX is made for: compute_75, the oldest CUDA 13 supports. The driver JIT-compiles
/// it for the GPU at hand when the module is loaded.
pub const PTX_ARCH: &str = "compute_75";

/// `nvcc -ptx` for `source` into `ptx`, as the build and `cargo xtask generate` both run it.
pub fn ptx_command(nvcc: &Path, source: &Path, ptx: &Path) -> Command {
    let mut cmd = Command::new(nvcc);
    cmd.args(["-ptx", &format!("-arch={PTX_ARCH}"), "-lineinfo", "-o"]).arg(ptx).arg(source);
    cmd
}

/// The environment variables the searches below read: a build script reruns when one changes.
pub const ENV_VARS: [&str; 5] = ["NVCC", "CUDA_PATH", "CUDA_HOME", "PATH", "CARGO_TARGET_DIR"];

/// The target directory of the workspace at `workspace` (`$CARGO_TARGET_DIR`, else `target/`).
pub fn target_dir(workspace: &Path) -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).map_or_else(|| workspace.join("target"), |t| workspace.join(t))
}

/// nvcc, searched in this order: `$NVCC`, `$CUDA_PATH/bin`, `$CUDA_HOME/bin`, `PATH`, `/usr/local/cuda/bin`,
/// and the copy `cargo xtask setup` installs into the target directory.
pub fn nvcc(target_dir: &Path) -> Option<PathBuf> {
    if let Some(p) = env::var_os("NVCC") {
        return file(PathBuf::from(p));
    }
    ["CUDA_PATH", "CUDA_HOME"]
        .iter()
        .filter_map(env::var_os)
        .find_map(|root| file(Path::new(&root).join("bin/nvcc")))
        .or_else(|| which::which("nvcc").ok())
        .or_else(|| file("/usr/local/cuda/bin/nvcc".into()))
        .or_else(|| file(provisioned_nvcc(target_dir)))
}

/// Where `cargo xtask setup` puts nvcc from PyPI.
pub fn provisioned_nvcc(target_dir: &Path) -> PathBuf {
    target_dir.join("cuda/toolkit/nvidia/cu13/bin/nvcc")
}

/// The release an nvcc reports (`13.0` from "Cuda compilation tools, release 13.0, V13.0.88").
pub fn nvcc_release(nvcc: &Path) -> Option<String> {
    let out = Command::new(nvcc).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("release "))?;
    Some(line.split("release ").nth(1)?.split(',').next()?.trim().to_string())
}

/// The NVIDIA driver library (`libcuda.so.1`) of this machine, if it has one: the usual folders, then
/// the loader's cache.
pub fn real_libcuda() -> Option<PathBuf> {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
        "/usr/lib/wsl/lib",
        "/usr/local/cuda/compat",
    ];
    dirs.iter().find_map(|d| file(Path::new(d).join("libcuda.so.1"))).or_else(|| {
        // ldconfig often lies outside a user's PATH; a driver it knows must not be missed, or the xtask
        // would take a machine with a GPU for one without (and skip its GPU tests).
        let out = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .iter()
            .find_map(|l| Command::new(l).arg("-p").output().ok().filter(|o| o.status.success()))?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.trim_start().starts_with("libcuda.so.1 "))
            .find_map(|l| l.rsplit_once("=> ").map(|(_, p)| PathBuf::from(p.trim())))
            .and_then(file)
    })
}

fn file(p: PathBuf) -> Option<PathBuf> {
    p.is_file().then_some(p)
}

/// The committed PTX of a kernel source: `kernels/ptx/<stem>.ptx` beside `kernels/<stem>.cu`.
pub fn committed_ptx_path(source: &Path) -> PathBuf {
    let stem = source.file_stem().unwrap_or_default();
    source.with_file_name("ptx").join(Path::new(stem).with_extension("ptx"))
}

/// FNV-1a, 64 bits: enough to notice that a kernel source changed since its PTX was committed.
pub fn source_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The first line of a committed PTX file: which source it was made from, and that source's hash.
pub fn ptx_header(relative_source: &str, source: &[u8]) -> String {
    format!(
        "// {relative_source} fnv1a64 {:016x}: made by `cargo xtask generate` with nvcc {NVCC_RELEASE}. Do not edit.\n",
        source_hash(source)
    )
}

/// The committed form of nvcc's PTX for `relative_source` (a path from the workspace root): the header
/// line, then nvcc's output with the absolute path of the source (in `.file`) made relative, so the file
/// is the same whichever folder it was made in.
pub fn committed_ptx(nvcc_output: &str, workspace: &Path, relative_source: &str, source: &[u8]) -> String {
    let absolute = format!("\"{}\"", workspace.join(relative_source).display());
    ptx_header(relative_source, source) + &nvcc_output.replace(&absolute, &format!("\"{relative_source}\""))
}

/// Whether committed PTX was made from exactly this source (its header names the source's hash).
pub fn ptx_matches_source(committed: &str, relative_source: &str, source: &[u8]) -> bool {
    committed.lines().next().is_some_and(|first| format!("{first}\n") == ptx_header(relative_source, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_ptx_is_relative_and_tied_to_its_source() {
        let src = b"extern \"C\" __global__ void k() {}\n";
        let out = ".version 9.0\n\t.file\t1 \"/home/me/gpu-transfers/kernels/k.cu\"\n";
        let ptx = committed_ptx(out, Path::new("/home/me/gpu-transfers"), "kernels/k.cu", src);
        assert!(ptx.ends_with(".version 9.0\n\t.file\t1 \"kernels/k.cu\"\n"), "{ptx}");
        assert!(ptx_matches_source(&ptx, "kernels/k.cu", src));
        assert!(!ptx_matches_source(&ptx, "kernels/k.cu", b"changed"));
        assert_eq!(committed_ptx_path(Path::new("/w/kernels/k.cu")), Path::new("/w/kernels/ptx/k.ptx"));
    }

    #[test]
    fn fnv1a_known_values() {
        assert_eq!(source_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(source_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
