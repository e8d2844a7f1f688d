//! The files that nvcc makes and the repository commits, so that a build needs no nvcc:
//! - `kernels/ptx/<stem>.ptx`: what nvcc 13.0 makes of `kernels/<stem>.cu` (the build falls back to
//!   them where it finds no nvcc), `common/src/ptx/<stem>.ptx` of `common/src/<stem>.cu` (the core
//!   crate's own kernel, which it embeds), `common/tests/ptx/<stem>.ptx` of `common/tests/<stem>.cu` (the
//!   kernels of common's front page and GPU tests) and `examples/NAME/<stem>.ptx` beside
//!   `examples/NAME/<stem>.cu` (a lesson's kernel of its own: the example that shows how to launch one).
//!
//! `cargo xtask generate` remakes them; `check` (part of `cargo xtask test`) fails where a committed
//! file differs from what the tools make now.

use std::{fs, path::PathBuf};

use anyhow::{bail, Context as _};

use crate::{setup, tools};

struct Generated {
    path: PathBuf,
    text: String,
}

pub fn run() -> anyhow::Result<()> {
    for g in make()? {
        let old = fs::read_to_string(&g.path).unwrap_or_default();
        if old != g.text {
            fs::create_dir_all(g.path.parent().unwrap())?;
            fs::write(&g.path, &g.text).with_context(|| format!("writing {}", g.path.display()))?;
            println!("generate: wrote {}", relative(&g.path));
        } else {
            println!("generate: {} is current", relative(&g.path));
        }
    }
    Ok(())
}

/// Fails, naming them, where committed files are not what the tools make of today's sources.
pub fn check() -> anyhow::Result<()> {
    let stale: Vec<String> = make()?
        .into_iter()
        .filter(|g| fs::read_to_string(&g.path).ok().as_deref() != Some(g.text.as_str()))
        .map(|g| relative(&g.path))
        .collect();
    if !stale.is_empty() {
        bail!(
            "{} not what the tools make of the sources now: run `cargo xtask generate` and commit the result",
            if stale.len() == 1 { format!("{} is", stale[0]) } else { format!("{} are", stale.join(", ")) }
        );
    }
    eprintln!("xtask: the committed PTX is what nvcc {} makes", cuda_find::NVCC_RELEASE);
    Ok(())
}

fn relative(p: &std::path::Path) -> String {
    p.strip_prefix(tools::root()).unwrap_or(p).display().to_string()
}

fn make() -> anyhow::Result<Vec<Generated>> {
    let nvcc = setup::nvcc_13()?;
    let root = tools::root();
    let scratch = tools::target_dir().join("generate");
    fs::create_dir_all(&scratch)?;
    let lessons: Vec<PathBuf> =
        fs::read_dir(root.join("examples"))?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    let mut sources: Vec<PathBuf> = Vec::new();
    for dir in [root.join("kernels"), root.join("common/src"), root.join("common/tests")].into_iter().chain(lessons) {
        sources.extend(
            fs::read_dir(dir)?.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "cu")),
        );
    }
    sources.sort();
    let mut out = Vec::new();
    for src in sources {
        let relative = relative(&src);
        let ptx = scratch.join(src.with_extension("ptx").file_name().unwrap());
        tools::output(&mut cuda_find::ptx_command(&nvcc, &src, &ptx), &format!("compiling {relative}"))?;
        let made = fs::read_to_string(&ptx)?;
        let source = fs::read(&src)?;
        out.push(Generated {
            path: committed_path(&root, &src),
            text: cuda_find::committed_ptx(&made, &root, &relative, &source),
        });
    }
    Ok(out)
}

/// Where the PTX of `src` is committed: beside a lesson's own kernel (`examples/NAME/<stem>.ptx`), in
/// the `ptx/` folder beside the source otherwise.
fn committed_path(root: &std::path::Path, src: &std::path::Path) -> PathBuf {
    if src.starts_with(root.join("examples")) {
        src.with_extension("ptx")
    } else {
        cuda_find::committed_ptx_path(src)
    }
}
