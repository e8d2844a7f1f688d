//! The files that nvcc makes and the repository commits, so that a build needs no nvcc:
//! - `kernels/ptx/<stem>.ptx`: what nvcc 13.0 makes of `kernels/<stem>.cu` (the build falls back to
//!   them where it finds no nvcc), `common/tests/ptx/<stem>.ptx` of `common/tests/<stem>.cu` (the
//!   kernels of common's front page and GPU tests) and `examples/ptx/<stem>.ptx` of `examples/<stem>.cu`
//!   (a kernel of one's own, for the example that shows how to launch one).
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
    let mut sources: Vec<PathBuf> = Vec::new();
    for dir in ["kernels", "common/tests", "examples"] {
        sources.extend(
            fs::read_dir(root.join(dir))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "cu")),
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
            path: cuda_find::committed_ptx_path(&src),
            text: cuda_find::committed_ptx(&made, &root, &relative, &source),
        });
    }
    Ok(out)
}
