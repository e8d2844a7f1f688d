//! The reading of PTX text (`cuda_scope::ptx`) against what ptxas 13.0 compiles of it, read from the cubin
//! (`cuda_scope::cubin`): seeded files of generated kernels in every form the reading supports (and those
//! it refuses), each compiled whole-program and, as the driver's JIT linker does, relocatable then
//! linked with nvlink; the crafted PTX of the tests too. For each kernel: the count, sizes and
//! alignments the generator meant, the text's reading and the cubin's records must agree exactly (the
//! offsets too, each where its alignment puts it in the constant bank), or the reading must refuse a
//! form the README lists as unsupported; and neither may see a kernel the file does not define. Where
//! cuobjdump is found (`CUOBJDUMP`, or beside ptxas), the cubin reader is held against
//! `cuobjdump -elf` on a sample too.
//!
//! It needs ptxas 13.0 (`PTXAS`, or the one `cargo xtask setup` installs in `target/cuda/`), so it is
//! ignored by a plain `cargo test`; `cargo xtask test` runs it on every run, and it fails there, not
//! skips, where ptxas is missing. `PTX_DIFFERENTIAL_SEED` picks another seed, `PTX_DIFFERENTIAL_FILES`
//! another number of files (each of 24 kernels); a failing file is kept in the folder it names.

// Shared with the launch tests (tests/launch.rs), which use what this test does not.
#[allow(dead_code)]
#[path = "../tests/support/ptxgen.rs"]
mod ptxgen;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
    time::Instant,
};

use crate::{cubin, prototype, ptx};
use ptxgen::{Expect, File, Variant};

const KERNELS_PER_FILE: usize = 24;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// ptxas 13.0: `$PTXAS`, else ours in the target directory, else on PATH.
fn ptxas() -> PathBuf {
    if let Some(p) = std::env::var_os("PTXAS") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "PTXAS={} is not a file", p.display());
        return p;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let ours = target.join("cuda/toolkit/nvidia/cu13/bin/ptxas");
    if ours.is_file() {
        return ours;
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("ptxas")).find(|p| p.is_file()));
    on_path.unwrap_or_else(|| {
        panic!("no ptxas: set PTXAS to ptxas 13.0, or run `cargo xtask test` (which installs it and runs this test)")
    })
}

fn tool_beside(ptxas: &Path, var: &str, name: &str) -> Option<PathBuf> {
    std::env::var_os(var).map(PathBuf::from).or_else(|| Some(ptxas.parent()?.join(name))).filter(|p| p.is_file())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("")
        ))
    }
}

/// The ways a file is compiled: whole-program by ptxas, and relocatable by ptxas then linked by
/// nvlink (as the driver's JIT linker compiles PTX).
fn compile(
    ptxas: &Path,
    nvlink: Option<&Path>,
    src: &Path,
    arch: &str,
) -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    let whole = src.with_extension("cubin");
    run(Command::new(ptxas).arg(format!("-arch={arch}")).arg("-o").arg(&whole).arg(src))?;
    let mut out = vec![("ptxas", std::fs::read(&whole).map_err(|e| e.to_string())?)];
    if let Some(nvlink) = nvlink {
        let (object, linked) = (src.with_extension("o"), src.with_extension("linked.cubin"));
        run(Command::new(ptxas).arg(format!("-arch={arch}")).arg("-c").arg("-o").arg(&object).arg(src))?;
        run(Command::new(nvlink).arg(format!("-arch={arch}")).arg("-o").arg(&linked).arg(&object))?;
        out.push(("ptxas -c, nvlink", std::fs::read(&linked).map_err(|e| e.to_string())?));
    }
    Ok(out)
}

/// Every disagreement between what a kernel means, the text's reading and a cubin's records.
fn check(file: &File, how: &str, cubin_bytes: &[u8], problems: &mut Vec<String>) {
    let entries = match ptx::entries(&file.ptx) {
        Ok(e) => e,
        Err(why) => return problems.push(format!("the text cannot be read: {why}")),
    };
    let layouts = match cubin::kernels(cubin_bytes) {
        Ok(l) => l,
        Err(why) => return problems.push(format!("{how}: the cubin cannot be read: {why}")),
    };
    let mut meant: Vec<&str> = file.kernels.iter().map(|k| k.name.as_str()).collect();
    let mut read: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    let mut compiled: Vec<&str> = layouts.iter().map(|(n, _)| n.as_str()).collect();
    meant.sort_unstable();
    read.sort_unstable();
    compiled.sort_unstable();
    if read != meant {
        problems.push(format!("the text's kernels are {read:?}, the file's {meant:?}"));
    }
    // A linked cubin records the functions it calls too (`__cuda_sm20_sqrt_rn_f32_slowpath`).
    if meant.iter().any(|m| !compiled.contains(m)) {
        problems.push(format!("{how}: the cubin's kernels are {compiled:?}, the file's {meant:?}"));
    }
    for Variant { name, expect } in &file.kernels {
        let Some(entry) = entries.iter().find(|e| e.name == *name) else { continue };
        let layout = layouts.iter().find(|(n, _)| n == name).map(|(_, l)| l);
        match (expect, &entry.params) {
            (Expect::Refused(why), Err(said)) if said.contains(why) => {}
            (Expect::Refused(why), said) => {
                problems.push(format!("{name}: meant to be refused ({why}), read as {said:?}"))
            }
            (Expect::Params(_), Err(said)) => problems.push(format!("{name}: refused: {said}")),
            (Expect::Params(meant), Ok(text)) => {
                let read: Vec<(u32, u32)> = text.iter().map(|p| (p.size, p.align)).collect();
                if read != *meant {
                    problems.push(format!("{name}: read as (size, align) {read:?}, meant {meant:?}"));
                }
                let layout = match layout {
                    Some(Ok(l)) => l,
                    Some(Err(why)) => return problems.push(format!("{how}: {name}: the cubin's records: {why}")),
                    None => continue,
                };
                if let Err(why) = cubin::agree(text, layout) {
                    problems.push(format!("{how}: {name}: {why}"));
                }
                // Exactly where each alignment puts it, counted in the constant bank (or, where ptxas moved
                // a large space, in the space: see cubin::agree).
                let recorded: Vec<(u32, u32)> = layout.params.iter().map(|r| (r.offset, r.size)).collect();
                let bank = layout.bank_offset.unwrap_or(0);
                let placed = |base: u32| {
                    let mut end = 0u32;
                    let offsets: Vec<(u32, u32)> = meant
                        .iter()
                        .map(|&(size, align)| {
                            let offset = (base + end).next_multiple_of(align) - base;
                            end = offset + size;
                            (offset, size)
                        })
                        .collect();
                    (offsets, end)
                };
                let (in_bank, in_space) = (placed(bank), placed(0));
                let fits = |(offsets, end): &(Vec<(u32, u32)>, u32)| *offsets == recorded && layout.bytes == *end;
                if !fits(&in_bank) && !fits(&in_space) {
                    problems.push(format!(
                        "{how}: {name}: the cubin records (offset, size) {recorded:?} in {} bytes, meant {:?} in {} \
                         (bank offset {bank:#x}), or {:?} in {} aligned in the space",
                        layout.bytes, in_bank.0, in_bank.1, in_space.0, in_space.1
                    ));
                }
            }
        }
    }
}

/// A kernel's name, its (ordinal, offset, size) records, and its parameter space's size.
type Dumped = (String, Vec<(u32, u32, u32)>, Option<u32>);

/// `cuobjdump -elf`'s parameter records: for each `.nv.info.NAME` section, its (ordinal, offset, size)
/// and its `EIATTR_CBANK_PARAM_SIZE`.
fn cuobjdump_records(cuobjdump: &Path, cubin: &Path) -> Result<Vec<Dumped>, String> {
    let out = Command::new(cuobjdump).arg("-elf").arg(cubin).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("cuobjdump failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = |s: &str| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok();
    let mut sections: Vec<Dumped> = Vec::new();
    let mut attribute = String::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix(".nv.info.") {
            sections.push((name.trim().to_string(), Vec::new(), None));
            continue;
        }
        if line.starts_with('.') {
            // Another section: the records that follow are not a kernel's.
            sections.push((String::new(), Vec::new(), None));
            continue;
        }
        let Some(current) = sections.last_mut() else { continue };
        let line = line.trim();
        if let Some(a) = line.strip_prefix("Attribute:") {
            attribute = a.trim().to_string();
        } else if let Some(v) = line.strip_prefix("Value:") {
            if attribute.starts_with("EIATTR_KPARAM_INFO") {
                let field = |name: &str| {
                    v.split(name)
                        .nth(1)
                        .and_then(|r| r.trim_start_matches([' ', ':']).split_whitespace().next())
                        .and_then(hex)
                };
                match (field("Ordinal"), field("Offset"), field("Size")) {
                    (Some(o), Some(off), Some(s)) => current.1.push((o, off, s)),
                    _ => return Err(format!("cannot read cuobjdump's line `{line}`")),
                }
            } else if attribute == "EIATTR_CBANK_PARAM_SIZE" {
                current.2 = hex(v);
            }
        }
    }
    sections.retain(|(n, _, _)| !n.is_empty());
    Ok(sections)
}

#[test]
#[ignore = "needs ptxas 13.0; cargo xtask test runs it on every run"]
fn the_ptx_reading_agrees_with_the_cubin_ptxas_compiles() {
    let start = Instant::now();
    let ptxas = ptxas();
    let nvlink = tool_beside(&ptxas, "NVLINK", "nvlink");
    let cuobjdump = tool_beside(&ptxas, "CUOBJDUMP", "cuobjdump");
    let seed = env_number("PTX_DIFFERENTIAL_SEED", 24);
    let files = env_number("PTX_DIFFERENTIAL_FILES", 96);
    let dir = std::env::temp_dir().join(format!("cuda-scope-ptx-differential-{seed}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The crafted PTX of the tests, whose kernels are read from the text (they define every kernel they
    // name, and none is refused), then the generated files.
    let mut all: Vec<(String, File)> = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["tests/ptx", "tests/cubin", "../kernels/ptx", "../examples/your_kernel"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap();
            let kernels = ptx::entries(&text)
                .unwrap()
                .into_iter()
                .map(|e| Variant {
                    expect: Expect::Params(e.params.unwrap().iter().map(|p| (p.size, p.align)).collect()),
                    name: e.name,
                })
                .collect();
            let target = if text.contains(".target sm_75") { "sm_75" } else { "sm_90" };
            all.push((path.file_name().unwrap().to_string_lossy().into_owned(), File { ptx: text, target, kernels }));
        }
    }
    let crafted = all.len();
    for i in 0..files {
        all.push((format!("f{i:03}.ptx"), ptxgen::file(seed, i, KERNELS_PER_FILE)));
    }
    let variants = all[crafted..].iter().map(|(_, f)| f.kernels.len()).sum::<usize>();
    let refused =
        all[crafted..].iter().flat_map(|(_, f)| &f.kernels).filter(|k| matches!(k.expect, Expect::Refused(_))).count();

    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let sampled = Mutex::new(0usize);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((name, file)) = all.get(i) else { break };
                let src = dir.join(name);
                std::fs::write(&src, &file.ptx).unwrap();
                let mut problems = Vec::new();
                // Every other generated file also relocatable and linked; the crafted ones always.
                let link = if i < crafted || i % 2 == 0 { nvlink.as_deref() } else { None };
                match compile(&ptxas, link, &src, file.target) {
                    Err(why) => problems.push(format!("ptxas refused it: {why}")),
                    Ok(cubins) => {
                        for (how, bytes) in &cubins {
                            check(file, how, bytes, &mut problems);
                        }
                        // cuobjdump's reading of the same records, on every fourth file.
                        if let Some(cuobjdump) = cuobjdump.as_deref().filter(|_| i % 4 == 0) {
                            let ours = cubin::kernels(&cubins[0].1).unwrap_or_default();
                            match cuobjdump_records(cuobjdump, &src.with_extension("cubin")) {
                                Err(why) => problems.push(why),
                                Ok(theirs) => {
                                    *sampled.lock().unwrap() += theirs.len();
                                    for (kernel, mut records, size) in theirs {
                                        records.sort_unstable();
                                        let mine = ours.iter().find(|(n, _)| *n == kernel).map(|(_, l)| l);
                                        let same = match mine {
                                            Some(Ok(l)) => {
                                                l.params.iter().map(|r| (r.ordinal, r.offset, r.size)).collect::<Vec<_>>() == records
                                                    && size.unwrap_or(0) == l.bytes
                                            }
                                            // What the reader refuses (a .texref's records) cuobjdump prints anyway.
                                            Some(Err(_)) => file.kernels.iter().any(|k| k.name == kernel && matches!(k.expect, Expect::Refused(_))),
                                            None => false,
                                        };
                                        if !same {
                                            problems.push(format!("{kernel}: cuobjdump reads {records:?} in {size:?} bytes, cuda_scope::cubin {mine:?}"));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                if problems.is_empty() {
                    for ext in ["ptx", "cubin", "o", "linked.cubin"] {
                        let _ = std::fs::remove_file(src.with_extension(ext));
                    }
                } else {
                    failures.lock().unwrap().push(format!("{}:\n    {}", src.display(), problems.join("\n    ")));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let sampled = sampled.into_inner().unwrap();
    eprintln!(
        "ptx differential: seed {seed}: {variants} generated kernels ({refused} of forms refused as unsupported) in {files} files \
         and {crafted} crafted files, compiled by {} on {threads} threads{}{}: {} files disagree ({:.1} s)",
        ptxas.display(),
        if nvlink.is_some() { ", half of them also relocatable and linked by nvlink" } else { " (no nvlink beside it: not linked)" },
        match &cuobjdump {
            Some(_) => format!(", {sampled} kernels' records held against cuobjdump -elf"),
            None => ", no cuobjdump found".into(),
        },
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} files disagree:\n{}",
        failures.len(),
        failures.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(variants >= 1000 || files < 96, "only {variants} variants");
}

/// The prototype reader on every `.cu` of the repository against the PTX nvcc 13.0 made of it: each
/// kernel found has as many parameters as its PTX, each pointer a 64-bit integer, and a kernel of each
/// file is found. (No ptxas needed.)
#[test]
fn the_prototypes_of_the_repositorys_kernels_agree_with_their_ptx() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = 0;
    for (cu, ptx) in [
        ("common/tests/kernels.cu", "common/tests/ptx/kernels.ptx"),
        ("kernels/pipeline.cu", "kernels/ptx/pipeline.ptx"),
        ("kernels/vector_add.cu", "kernels/ptx/vector_add.ptx"),
        ("kernels/zero_copy.cu", "kernels/ptx/zero_copy.ptx"),
        ("kernels/small_copies.cu", "kernels/ptx/small_copies.ptx"),
        ("examples/your_kernel/your_kernel.cu", "examples/your_kernel/your_kernel.ptx"),
    ] {
        let source = std::fs::read_to_string(root.join(cu)).unwrap();
        let text = std::fs::read_to_string(root.join(ptx)).unwrap();
        let entries = ptx::entries(&text).unwrap();
        let kernels = prototype::kernels(&source);
        assert!(!kernels.is_empty(), "{cu}: no kernel found");
        for (name, pointers) in kernels {
            let entry =
                entries.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{cu}: {name} is not in {ptx}"));
            let params = entry.params.as_ref().unwrap();
            assert_eq!(pointers.len(), params.len(), "{cu}: {name}");
            for (p, t) in pointers.iter().zip(params) {
                assert!(*p != ptx::Pointer::Yes || (t.size == 8 && t.class == ptx::Class::Int), "{cu}: {name}: {t:?}");
                assert!(*p != ptx::Pointer::Unknown, "{cu}: {name}: every parameter of ours is a pointer or a number");
            }
            found += 1;
        }
    }
    let saxpy =
        prototype::kernels(include_str!("../tests/kernels.cu")).into_iter().find(|(n, _)| n == "saxpy").unwrap().1;
    use ptx::Pointer::{No, Yes};
    assert_eq!(saxpy, [Yes, Yes, No, No]);
    assert!(found >= 10, "{found} kernels");
}
