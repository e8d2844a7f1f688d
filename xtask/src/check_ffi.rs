//! `cargo xtask check-ffi` (and the test command, after the committed files): holds every declaration
//! of `common/src/ffi.rs` against CUDA 13's `cuda.h` and `cudaTypedefs.h`, so that a parameter, result,
//! field or value that differs from the driver's fails here instead of being undefined behaviour at
//! run time. It writes a C file of `_Static_assert`s, one or more per declaration, and compiles it with
//! the host C compiler (`$CC`, else `cc`) and `-Wall -Wextra -Werror` against the headers beside the
//! nvcc 13.0 that `setup` provides; each failure is a line naming the declaration and what the header
//! has. `common/src/ffi.rs`'s module docs give the rules a declaration follows to be checkable.
//!
//! - An entry point is held against the `PFN_<name>_v<N>` typedef its doc names (`/// cudaTypedefs.h:
//!   PFN_cuMemAlloc_v3020`), not against cuda.h's prototype, which maps many names to newer versions.
//!   The line is required, and must be the version the linked symbol is: cudaTypedefs.h has a typedef
//!   for every version of a call, and the k-th of them, counted from the oldest, is the symbol `name`
//!   for k = 1 and `name_vk` after (`cuMemAlloc_v2` is `PFN_cuMemAlloc_v3020`, the second after
//!   `_v2000`). That rule holds for every name CUDA 13.0's cuda.h maps to a `_vk` symbol: the name has
//!   exactly k typedefs. A header where one of the names ffi.rs uses has fewer than k fails the check.
//! - Types are compared whole, with GCC's `__builtin_types_compatible_p`: `c_int` is `int`, `usize` is
//!   `size_t`, a 64-bit integer either of C's 64-bit spellings (`unsigned long long`, `uint64_t`: one
//!   type in the ABI), an alias or struct of ffi.rs the header's type of that name (`CUdeviceptr`, or
//!   the one its `/// cuda.h: NAME` line names: `CuResult` is `CUresult`). An alias is itself held
//!   against the header's type: the same type, or, where C has an enum, an int of its size (an enum is
//!   passed and returned as such an int).
//! - A `#[repr(C)]` struct is held field by field (offset and type) and whole (size, alignment) against
//!   the header's struct of its name.
//! - A `pub const` equals the header's value of its name, or of `CU_`, `CUDA_` or `CUDA_ERROR_` and its
//!   name (`ERROR_INVALID_VALUE` is `CUDA_ERROR_INVALID_VALUE`), or of the name a `/// cuda.h: NAME`
//!   line gives; a pointer constant (`CU_LAUNCH_PARAM_END`) equals the address of cuda.h's `(void*)`
//!   macro. An array's doc names each element, `ILLEGAL_ADDRESS (700)`, in its order. A version
//!   constant's `/// cudaTypedefs.h: PFN_name_vN` line makes it N.

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _};

use crate::{
    decls::{self, Alias, Const, ConstValue, Decls, Func, Header, Struct, Ty, FFI_RS},
    setup, tools,
};

/// The task, and the test command's step after the committed files: ffi.rs must pass, and a copy of
/// it with one parameter of the wrong type ([`wrong_copy`]) must fail, naming that entry point, so
/// that a check that passes everything (a compiler that ignores the assertions) cannot pass unseen.
pub fn run() -> anyhow::Result<()> {
    let decls = decls::read()?;
    let include = include_dir()?;
    let dir = tools::target_dir().join("check-ffi");
    let passed = check(&decls, &include, &dir)?;
    eprintln!(
        "xtask: {FFI_RS} matches CUDA {}'s cuda.h and cudaTypedefs.h: {} entry points, {} types, {} structs, {} \
         constants ({} -Werror on {})",
        release(passed.version),
        passed.counts[0],
        passed.counts[1],
        passed.counts[2],
        passed.counts[3],
        passed.cc,
        relative(&passed.c_file)
    );
    if !passed.newer.is_empty() {
        eprintln!(
            "xtask: not checked, being of a CUDA newer than these headers (looked up at run time only where the \
             driver has them): {}",
            passed.newer.join(", ")
        );
    }
    let said = wrong_copy_fails(&include, &dir.join("wrong"))?;
    eprintln!("xtask: and a copy of {FFI_RS} with `{}` fails it: {said}", WRONG_PARAM.1);
    Ok(())
}

/// The parameter [`wrong_copy`] changes, and what to: `usize` where cudaTypedefs.h has `size_t`.
const WRONG_PARAM: (&str, &str) = ("pub fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize)", "bytes: c_uint");

/// ffi.rs's declarations with [`WRONG_PARAM`]'s parameter of the wrong type.
fn wrong_copy() -> anyhow::Result<Decls> {
    let path = tools::root().join(FFI_RS);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let (decl, wrong) = WRONG_PARAM;
    if !text.contains(decl) {
        bail!("check-ffi: {FFI_RS} no longer declares `{decl}`: name another entry point in check_ffi::WRONG_PARAM");
    }
    let copy = text.replacen(decl, &decl.replace("bytes: usize", wrong), 1);
    decls::parse(&copy).with_context(|| format!("reading a copy of {FFI_RS}"))
}

/// The check of [`wrong_copy`], which must fail on the C compiler's word, naming the entry point: the
/// line that says so.
fn wrong_copy_fails(include: &Path, dir: &Path) -> anyhow::Result<String> {
    let name = WRONG_PARAM.0.trim_start_matches("pub fn ").split('(').next().unwrap_or_default();
    match check(&wrong_copy()?, include, dir) {
        Ok(_) => bail!(
            "check-ffi: a copy of {FFI_RS} with `{}` passed the check: it no longer holds the declarations against \
             the headers",
            WRONG_PARAM.1
        ),
        Err(e) => {
            let said = e.to_string();
            let line = said.lines().find(|l| l.contains(&format!("fn {name}("))).map(str::trim);
            match line {
                Some(line) if line.contains("is not cudaTypedefs.h's") => {
                    Ok(line.trim_start_matches(&format!("check-ffi: {FFI_RS}: ")).to_string())
                }
                _ => {
                    bail!("check-ffi: a copy of {FFI_RS} with `{}` failed, but not as it should: {said}", WRONG_PARAM.1)
                }
            }
        }
    }
}

/// What a check that passed counted, and where.
struct Passed {
    version: u32,
    counts: [usize; 4],
    newer: Vec<String>,
    cc: String,
    c_file: PathBuf,
}

/// Holds `decls` against the headers in `include`, writing the C file into `dir`.
fn check(decls: &Decls, include: &Path, dir: &Path) -> anyhow::Result<Passed> {
    if decls.funcs.is_empty() {
        bail!("check-ffi: {FFI_RS} declares no entry points: is it common's?");
    }
    let read = |name: &str| {
        let p = include.join(name);
        fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    };
    let headers = Headers::parse(&read("cuda.h")?, &read("cudaTypedefs.h")?);
    if headers.version < 13000 {
        bail!(
            "check-ffi: {} is CUDA {}'s, and {FFI_RS} is checked against CUDA 13's",
            include.display(),
            release(headers.version)
        );
    }
    let checklist = checklist(decls, &headers).map_err(|errors| anyhow::anyhow!(report(&errors, &headers, include)))?;
    let source = checklist.source();
    fs::create_dir_all(dir)?;
    let c_file = dir.join("ffi.c");
    fs::write(&c_file, &source.text).with_context(|| format!("writing {}", c_file.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(include)
        .arg(&c_file)
        .output()
        .with_context(|| format!("check-ffi: cannot run the C compiler `{cc}` (set CC to one)"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors = source.failures(&checklist, &stderr, &c_file);
        if errors.is_empty() {
            bail!("check-ffi: {cc} failed on {} ({}): {}", c_file.display(), out.status, stderr.trim());
        }
        bail!(report(&errors, &headers, include));
    }
    Ok(Passed { version: headers.version, counts: checklist.counts, newer: checklist.newer, cc, c_file })
}

fn release(version: u32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

fn relative(p: &Path) -> String {
    p.strip_prefix(tools::root()).unwrap_or(p).display().to_string()
}

/// One line per failure, after one that says where the headers are.
fn report(errors: &[String], headers: &Headers, include: &Path) -> String {
    let whose = format!("CUDA {}'s headers in {}", release(headers.version), include.display());
    match errors {
        [one] => format!("check-ffi: {FFI_RS}: {one} (checked against {whose})"),
        many => format!(
            "check-ffi: {} declarations of {FFI_RS} fail the check against {whose}:\n  {}",
            many.len(),
            many.join("\n  ")
        ),
    }
}

/// cuda.h and cudaTypedefs.h beside nvcc 13.0 (`<toolkit>/bin/nvcc`, `<toolkit>/include`): the machine's
/// toolkit where it is that release, else the one from PyPI (installed now if missing).
fn include_dir() -> anyhow::Result<PathBuf> {
    include_beside(&setup::nvcc_13()?)
}

/// cuda.h and cudaTypedefs.h's folder in the toolkit of `nvcc`.
fn include_beside(nvcc: &Path) -> anyhow::Result<PathBuf> {
    let toolkit = nvcc.parent().and_then(Path::parent).context("nvcc is not in a bin folder")?;
    let candidates = [toolkit.join("include"), toolkit.join("targets/x86_64-linux/include")];
    for dir in &candidates {
        if dir.join("cuda.h").is_file() && dir.join("cudaTypedefs.h").is_file() {
            return Ok(dir.clone());
        }
    }
    bail!(
        "check-ffi: no cuda.h and cudaTypedefs.h beside {} (looked in {}): install the CUDA 13.0 toolkit's \
         headers, or unset NVCC/CUDA_PATH so that `cargo xtask setup`'s toolkit from PyPI is used",
        nvcc.display(),
        candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
    )
}

/// What the check needs to know of the headers, read from their text (comments left out).
#[derive(Debug, Default)]
pub struct Headers {
    /// `CUDA_VERSION`: 13000 for 13.0.
    pub version: u32,
    /// Every identifier of their code.
    idents: HashSet<String>,
    /// The types that are enums (`typedef enum ... } NAME;` and typedefs of those).
    enums: HashSet<String>,
    /// Every `PFN_...` typedef of cudaTypedefs.h.
    pfns: HashMap<String, Pfn>,
    /// An entry point's versions, oldest first (`cuMemAlloc`: 2000, 3020), per-thread forms left out.
    versions: HashMap<String, Vec<u32>>,
    /// The `_vk` that cuda.h maps a name to (`#define cuMemAlloc cuMemAlloc_v2`): 2.
    mapped: HashMap<String, u32>,
    /// Where cuda.h defines each macro and enumerator: `CU_STREAM_NON_BLOCKING = 0x1`.
    values: HashMap<String, String>,
}

#[derive(Debug)]
struct Pfn {
    /// What it is, for messages: `CUresult (CUdeviceptr_v2 *dptr, size_t bytesize)`.
    text: String,
    /// Declared only where `__CUDA_API_VERSION_INTERNAL` is (the driver's own build).
    internal: bool,
}

impl Headers {
    pub fn parse(cuda_h: &str, typedefs_h: &str) -> Headers {
        let cuda_h = strip_comments(cuda_h);
        let typedefs_h = strip_comments(typedefs_h);
        let mut h = Headers::default();
        for text in [&cuda_h, &typedefs_h] {
            h.idents.extend(idents(text).map(String::from));
        }
        h.enums = enums(&cuda_h);
        let mut internal: Vec<bool> = Vec::new();
        for line in typedefs_h.lines().map(str::trim) {
            if line.starts_with("#if") {
                internal.push(line.contains("__CUDA_API_VERSION_INTERNAL"));
            } else if line.starts_with("#el") {
                if let Some(top) = internal.last_mut() {
                    *top = false;
                }
            } else if line.starts_with("#endif") {
                internal.pop();
            } else if let Some(name) = idents(line).find(|i| i.starts_with("PFN_")) {
                if !line.starts_with("typedef") {
                    continue;
                }
                let ret = line["typedef".len()..].split("(CUDAAPI").next().unwrap_or("").trim();
                let params = line.split_once(&format!("{name})")).map_or("", |(_, p)| p.trim().trim_end_matches(';'));
                let text = format!("{ret} {params}");
                h.pfns.insert(name.to_string(), Pfn { text, internal: internal.iter().any(|i| *i) });
                if let Some((base, version, "")) = split_pfn(name) {
                    h.versions.entry(base.to_string()).or_default().push(version);
                }
            }
        }
        for v in h.versions.values_mut() {
            v.sort_unstable();
            v.dedup();
        }
        for line in cuda_h.lines().map(str::trim) {
            let words: Vec<&str> = idents(line).collect();
            if let Some(def) = line.strip_prefix('#').map(str::trim_start).and_then(|l| l.strip_prefix("define")) {
                let Some(name) = words.get(1) else { continue };
                h.values.entry(name.to_string()).or_insert_with(|| format!("#define {}", squeeze(def)));
                if *name == "CUDA_VERSION" {
                    h.version = def.trim()[name.len()..].trim().parse().unwrap_or(0);
                }
                // `#define cuMemAlloc cuMemAlloc_v2`, or `__CUDA_API_PTSZ(cuMemPrefetchAsync_v2)`.
                if let Some(k) = words.last().and_then(|w| w.strip_prefix(name)?.strip_prefix("_v")?.parse().ok()) {
                    h.mapped.insert(name.to_string(), k);
                }
            } else if let Some(name) = words.first().filter(|n| line.starts_with(**n)) {
                // An enumerator: `CU_STREAM_NON_BLOCKING = 0x1,`, or `CU_DEVICE_ATTRIBUTE_MAX` alone.
                let rest = line[name.len()..].trim_start();
                let valued = rest.starts_with('=') && !rest.starts_with("==");
                if valued || rest.trim_end_matches(',').is_empty() {
                    h.values.entry(name.to_string()).or_insert_with(|| squeeze(line.trim_end_matches(',')));
                }
            }
        }
        h
    }
}

fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// C source with comments blanked (line breaks kept), string literals left whole.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
                out.push(' ');
            }
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                out.push(c);
                while let Some(c) = chars.next() {
                    out.push(c);
                    match c {
                        '\\' => out.extend(chars.next()),
                        '"' | '\n' => break,
                        _ => {}
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The identifiers of a text, numbers left out.
fn idents(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                return Some(&text[start..i]);
            }
            if c.is_ascii_digit() {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.') {
                    i += 1;
                }
            } else {
                i += 1;
            }
        }
        None
    })
}

/// The names `typedef enum [tag] { ... } NAME;` defines, and the typedefs of those.
fn enums(text: &str) -> HashSet<String> {
    let code: String = text.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    let mut tokens: Vec<&str> = Vec::new();
    let mut rest = code.as_str();
    while let Some(c) = rest.chars().next() {
        if c.is_ascii_alphanumeric() || c == '_' {
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            tokens.push(&rest[..end]);
            rest = &rest[end..];
        } else {
            if !c.is_whitespace() {
                tokens.push(&rest[..c.len_utf8()]);
            }
            rest = &rest[c.len_utf8()..];
        }
    }
    let mut found = HashSet::new();
    let mut aliases = Vec::new();
    for i in 0..tokens.len() {
        if tokens[i] != "typedef" {
            continue;
        }
        if tokens.get(i + 1) == Some(&"enum") {
            let mut j = i + 2;
            if tokens.get(j).is_some_and(|t| t.starts_with(|c: char| c.is_alphabetic() || c == '_')) {
                j += 1;
            }
            if tokens.get(j) == Some(&"{") {
                let mut depth = 0;
                while j < tokens.len() {
                    match tokens[j] {
                        "{" => depth += 1,
                        "}" => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                    if depth == 0 {
                        break;
                    }
                }
            }
            while j < tokens.len() && tokens[j] != ";" {
                if tokens[j].starts_with(|c: char| c.is_alphabetic() || c == '_') {
                    found.insert(tokens[j].to_string());
                }
                j += 1;
            }
        } else if let [_, from, to, ";"] = tokens[i..tokens.len().min(i + 4)] {
            aliases.push((from, to));
        }
    }
    loop {
        let before = found.len();
        for (from, to) in &aliases {
            if found.contains(*from) {
                found.insert(to.to_string());
            }
        }
        if found.len() == before {
            return found;
        }
    }
}

/// `PFN_cuMemAlloc_v3020` is (`cuMemAlloc`, 3020, ""), `PFN_cuMemcpyAsync_v7000_ptsz` (..., "_ptsz").
pub fn split_pfn(name: &str) -> Option<(&str, u32, &str)> {
    let rest = name.strip_prefix("PFN_")?;
    let (rest, suffix) = ["_ptsz", "_ptds"]
        .iter()
        .find_map(|s| rest.strip_suffix(s).map(|r| (r, &name[name.len() - s.len()..])))
        .unwrap_or((rest, ""));
    let (base, version) = rest.rsplit_once("_v")?;
    Some((base, version.parse().ok()?, suffix))
}

fn ordinal(k: usize) -> String {
    let suffix = match (k % 10, k % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{k}{suffix}")
}

/// The symbol of a call's k-th version (1: the oldest): `name`, then `name_v2`, `name_v3`...
fn symbol_of(base: &str, k: usize, suffix: &str) -> String {
    if k == 1 {
        format!("{base}{suffix}")
    } else {
        format!("{base}_v{k}{suffix}")
    }
}

/// One thing held against the headers: what it is, what a failure means, and its C.
#[derive(Debug)]
pub struct HeaderCheck {
    /// The declaration, as a failure names it: `fn cuInit`, `struct CUmemLocation, field id`.
    decl: String,
    /// What a failure means, in one line.
    what: String,
    /// Its C: declarations and `_Static_assert`s, a line each.
    c: Vec<String>,
}

/// Every check of the declarations, in order, with how many of each kind there are and what is left
/// unchecked.
pub struct Checklist {
    checks: Vec<HeaderCheck>,
    /// Entry points, types (aliases, function pointers), structs, constants.
    counts: [usize; 4],
    /// Declarations of a CUDA newer than the headers, not checked.
    newer: Vec<String>,
}

/// The C and which check each of its lines belongs to.
pub struct Source {
    pub text: String,
    owner: Vec<Option<usize>>,
}

const PRELUDE: &str =
    "/* Made by `cargo xtask check-ffi` from common/src/ffi.rs, and compiled (never run) against CUDA's
 * cuda.h and cudaTypedefs.h with -Wall -Wextra -Werror: each assertion holds one declaration of ffi.rs
 * against its counterpart in the headers. Remade on every check; not committed. */
#include <stddef.h>
#include <stdint.h>
#include <cuda.h>
#include <cudaTypedefs.h>

#define SAME(a, b) __builtin_types_compatible_p(a, b)
_Static_assert(sizeof(void *) == 8 && sizeof(long) == 8 && sizeof(int) == 4, \"ffi.rs is for LP64 (Linux x86-64)\");
";

impl Checklist {
    pub fn source(&self) -> Source {
        let mut text = PRELUDE.to_string();
        let mut owner = vec![None; PRELUDE.lines().count()];
        for (i, check) in self.checks.iter().enumerate() {
            text += &format!("\n/* {} */\n", check.decl);
            owner.extend([None, Some(i)]);
            for line in &check.c {
                text += line;
                text.push('\n');
                owner.push(Some(i));
            }
        }
        Source { text, owner }
    }
}

impl Source {
    /// Each failing check's line, from the compiler's errors (`file:line:col: error: ...`); an error in
    /// no check's lines as the compiler gave it.
    pub fn failures(&self, checklist: &Checklist, stderr: &str, c_file: &Path) -> Vec<String> {
        let prefix = format!("{}:", c_file.display());
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for line in stderr.lines() {
            let Some(rest) = line.strip_prefix(&prefix) else { continue };
            let mut parts = rest.splitn(3, ':');
            let (Some(n), Some(_col), Some(msg)) = (parts.next(), parts.next(), parts.next()) else { continue };
            let msg = msg.trim();
            let Some(msg) = msg.strip_prefix("error:").or_else(|| msg.strip_prefix("fatal error:")) else { continue };
            let msg = msg.trim();
            match n.parse::<usize>().ok().and_then(|n| self.owner.get(n.checked_sub(1)?).copied().flatten()) {
                Some(i) if seen.insert(i) => {
                    let check = &checklist.checks[i];
                    if msg.starts_with("static assertion failed") {
                        out.push(check.what.clone());
                    } else {
                        out.push(format!("{}: the C compiler: {msg} ({})", check.decl, check.what));
                    }
                }
                Some(_) => {}
                None => out.push(format!("the check's own C, line {n}: {msg}")),
            }
        }
        out
    }
}

/// Every check of every declaration, or every declaration that cannot be checked, each in a line.
pub fn checklist(d: &Decls, h: &Headers) -> Result<Checklist, Vec<String>> {
    let names = Names { d, h };
    let mut checks = Vec::new();
    let mut errors = Vec::new();
    let mut counts = [0; 4];
    let mut newer = Vec::new();
    let mut add = |r: anyhow::Result<Vec<HeaderCheck>>| match r {
        Ok(c) => checks.extend(c),
        Err(e) => errors.push(format!("{e:#}")),
    };
    // A declaration of a CUDA newer than the headers (`/// newer than these headers: CUDA 13.2`) has
    // nothing to be held against here: it is named as unchecked, never passed over in silence. Only types
    // and constants may be: an entry point is linked, and must be in the headers.
    let newer_than_headers = |docs: &[String]| docs.iter().any(|l| l.trim().starts_with("newer than these headers:"));
    for a in &d.aliases {
        if newer_than_headers(&a.docs) {
            newer.push(format!("type {}", a.name));
            continue;
        }
        counts[1] += 1;
        add(names.alias(a).map(|c| vec![c]));
    }
    for (i, s) in d.structs.iter().enumerate() {
        if s.repr_c && !s.opaque {
            counts[2] += 1;
            add(names.strukt(i, s));
        } else if !s.repr_c && h.idents.contains(&s.name) {
            add(Err(anyhow::anyhow!("struct {}: cuda.h has a {0}, and this one is not #[repr(C)]", s.name)));
        }
    }
    for c in &d.consts {
        if newer_than_headers(&c.docs) {
            newer.push(format!("const {}", c.name));
            continue;
        }
        counts[3] += 1;
        add(names.constant(c));
    }
    for f in &d.funcs {
        counts[0] += 1;
        add(names.func(f).map(|c| vec![c]));
    }
    if errors.is_empty() {
        Ok(Checklist { checks, counts, newer })
    } else {
        Err(errors)
    }
}

/// Spells ffi.rs's types in C, and names each declaration's counterpart in the headers.
struct Names<'a> {
    d: &'a Decls,
    h: &'a Headers,
}

/// C's spellings of a primitive: more than one where C has several names for one type in the ABI.
fn primitive(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "c_void" => &["void"],
        "c_char" => &["char"],
        "i8" | "c_schar" => &["signed char"],
        "u8" | "c_uchar" => &["unsigned char"],
        "i16" | "c_short" => &["short"],
        "u16" | "c_ushort" => &["unsigned short"],
        "i32" | "c_int" => &["int"],
        "u32" | "c_uint" => &["unsigned int"],
        "i64" | "c_long" | "c_longlong" => &["long long", "long"],
        "u64" | "c_ulong" | "c_ulonglong" => &["unsigned long long", "unsigned long"],
        "isize" => &["ptrdiff_t"],
        "usize" => &["size_t"],
        "f32" | "c_float" => &["float"],
        "f64" | "c_double" => &["double"],
        "bool" => &["_Bool"],
        _ => return None,
    })
}

/// The most spellings one type is tried in (each 64-bit integer doubles them).
const MAX_SPELLINGS: usize = 64;

impl Names<'_> {
    /// The header type an alias or struct stands for: the one its `/// cuda.h:` (or `cudaTypedefs.h:`)
    /// line names, else the header's type of its own name.
    fn counterpart(&self, kind: &str, name: &str, docs: &[String]) -> anyhow::Result<String> {
        let what = format!("{kind} {name}");
        match decls::named(docs, &what)? {
            Some((Header::Typedefs, pfn)) if !self.h.pfns.contains_key(&pfn) => {
                bail!("{what}: its doc names {pfn}, which cudaTypedefs.h does not declare")
            }
            Some((Header::Cuda, c)) if !self.h.idents.contains(&c) => {
                bail!("{what}: its doc names {c}, which cuda.h does not declare")
            }
            Some((_, c)) => Ok(c),
            None if self.h.idents.contains(name) || self.h.pfns.contains_key(name) => Ok(name.to_string()),
            None => {
                let hint = match name.strip_prefix("PFN_").and_then(|b| self.h.versions.get(b).map(|v| (b, v))) {
                    Some((base, v)) => format!(
                        "add `/// cudaTypedefs.h: PFN_{base}_v<N>`, the version you look up ({})",
                        v.iter().map(|v| format!("PFN_{base}_v{v}")).collect::<Vec<_>>().join(", ")
                    ),
                    None => "name the header's type in a `/// cuda.h: NAME` line of its doc".into(),
                };
                bail!("{what}: the headers have no type {name} to hold it against: {hint}")
            }
        }
    }

    /// C's spellings of a named type of ffi.rs.
    fn bases(&self, name: &str) -> anyhow::Result<Vec<String>> {
        if let Some(p) = primitive(name) {
            return Ok(p.iter().map(|s| s.to_string()).collect());
        }
        if let Some(a) = self.d.alias(name) {
            return Ok(vec![self.counterpart("type", &a.name, &a.docs)?]);
        }
        if let Some(s) = self.d.strukt(name) {
            return Ok(vec![if s.opaque {
                format!("struct {name}")
            } else {
                self.counterpart("struct", name, &s.docs)?
            }]);
        }
        bail!("cannot spell the type {name} in C: it is neither a C primitive nor declared in ffi.rs")
    }

    /// C declarations of `inner` as type `ty` (`const`-qualified where `konst`): each spelling, or an
    /// abstract type name where `inner` is empty.
    fn declare(&self, ty: &Ty, konst: bool, inner: &str) -> anyhow::Result<Vec<String>> {
        let q = if konst { " const" } else { "" };
        let spellings = match ty {
            Ty::Named(n) => self.bases(n)?.into_iter().map(|b| format!("{b}{q} {inner}")).collect(),
            Ty::Unit => vec![format!("void {inner}")],
            Ty::Ptr { mutable, to } => self.declare(to, !mutable, &format!("*{q} {inner}"))?,
            Ty::Array(elem, n) => {
                let inner = if inner.starts_with('*') { format!("({inner})") } else { inner.to_string() };
                self.declare(elem, konst, &format!("{inner}[{n}]"))?
            }
            Ty::Fn(sig) => {
                let mut lists = vec![Vec::new()];
                for (_, p) in &sig.params {
                    let each = self.declare(p, false, "")?;
                    lists = lists
                        .iter()
                        .flat_map(|l| each.iter().map(move |e| [l.clone(), vec![e.clone()]].concat()))
                        .collect();
                    if lists.len() > MAX_SPELLINGS {
                        bail!("more than {MAX_SPELLINGS} ways to spell it in C: give its 64-bit integers the header's type names");
                    }
                }
                let mut out = Vec::new();
                for params in lists {
                    let params = if params.is_empty() { "void".to_string() } else { params.join(", ") };
                    out.extend(self.declare(&sig.ret, false, &format!("(*{q} {inner})({params})"))?);
                }
                out
            }
        };
        Ok(spellings.into_iter().map(|s| tidy_c(&s)).collect())
    }

    fn alias(&self, a: &Alias) -> anyhow::Result<HeaderCheck> {
        let c = self.counterpart("type", &a.name, &a.docs)?;
        let decl = format!("type {}", a.name);
        let int32 = matches!(&a.ty, Ty::Named(n) if ["c_int", "c_uint", "i32", "u32"].contains(&n.as_str()));
        let ours = self.declare(&a.ty, false, "").with_context(|| decl.clone())?;
        let (cond, what) = if int32 && self.h.enums.contains(&c) {
            (
                format!("sizeof({c}) == sizeof(int) && (SAME({c}, int) || SAME({c}, unsigned int))"),
                format!("{decl} = {}: cuda.h's {c} is an enum of another size than an int", a.ty),
            )
        } else {
            (
                any(&ours, |o| format!("SAME({c}, {o})")),
                format!("{decl} = {} ({} in C) is not cuda.h's {}", a.ty, ours[0], self.h.described(&c)),
            )
        };
        Ok(HeaderCheck { c: vec![assert(&cond, &decl)], decl, what })
    }

    fn strukt(&self, i: usize, s: &Struct) -> anyhow::Result<Vec<HeaderCheck>> {
        let c = self.counterpart("struct", &s.name, &s.docs)?;
        let mirror = format!("struct check_ffi_{i}");
        let mut body = Vec::new();
        for (j, (_, t)) in s.fields.iter().enumerate() {
            let field = self.declare(t, false, &format!("f{j}")).with_context(|| format!("struct {}", s.name))?;
            body.push(format!("{};", field[0]));
        }
        let decl = format!("struct {}", s.name);
        let mut checks = vec![HeaderCheck {
            c: vec![
                format!("{mirror} {{ {} }};", body.join(" ")),
                assert(&format!("sizeof({mirror}) == sizeof({c}) && _Alignof({mirror}) == _Alignof({c})"), &decl),
            ],
            what: format!("{decl}: its size or alignment differs from cuda.h's {c}"),
            decl,
        }];
        for (j, (name, t)) in s.fields.iter().enumerate() {
            let cfield = name.strip_suffix('_').unwrap_or(name);
            let decl = format!("struct {}, field {name}", s.name);
            let ours = self.declare(t, false, "").with_context(|| decl.clone())?;
            let same = any(&ours, |o| format!("SAME(__typeof__((({c} *)0)->{cfield}), {o})"));
            checks.push(HeaderCheck {
                c: vec![assert(&format!("offsetof({mirror}, f{j}) == offsetof({c}, {cfield}) && ({same})"), &decl)],
                what: format!("{decl}: {t} ({} in C) differs in offset or type from cuda.h's {c}.{cfield}", ours[0]),
                decl,
            });
        }
        Ok(checks)
    }

    /// The header's name of a value ffi.rs names `name`: that name, or with `CU_`, `CUDA_` or
    /// `CUDA_ERROR_` before it; exactly one must be defined.
    fn value_name(&self, name: &str, what: &str) -> anyhow::Result<String> {
        let tried: Vec<String> = ["", "CU_", "CUDA_", "CUDA_ERROR_"].iter().map(|p| format!("{p}{name}")).collect();
        let found: Vec<&String> = tried.iter().filter(|t| self.h.values.contains_key(*t)).collect();
        match found[..] {
            [one] => Ok(one.clone()),
            [] => bail!(
                "{what}: cuda.h defines none of {}: name its value in a `/// cuda.h: NAME` line",
                tried.join(", ")
            ),
            _ => bail!(
                "{what}: cuda.h defines {}: say which in a `/// cuda.h: NAME` line",
                found.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" and ")
            ),
        }
    }

    fn constant(&self, k: &Const) -> anyhow::Result<Vec<HeaderCheck>> {
        let decl = format!("const {}", k.name);
        let named = decls::named(&k.docs, &decl)?;
        if let Some((Header::Typedefs, pfn)) = &named {
            // A version of an entry point, as cuGetProcAddress takes it.
            let Some((_, version, _)) = split_pfn(pfn).filter(|_| self.h.pfns.contains_key(pfn)) else {
                bail!("{decl}: its doc names {pfn}, which cudaTypedefs.h does not declare")
            };
            if k.value != ConstValue::Int(version.into()) {
                bail!("{decl}: its doc names {pfn}, so it should be {version}");
            }
            return Ok(vec![HeaderCheck {
                c: vec![assert(&format!("sizeof({pfn}) == sizeof(void (*)(void))"), &decl)],
                what: format!("{decl}: cudaTypedefs.h's {pfn} is not a function pointer"),
                decl,
            }]);
        }
        let c = match &named {
            Some((_, c)) if self.h.values.contains_key(c) => c.clone(),
            Some((_, c)) => bail!("{decl}: its doc names {c}, which cuda.h does not define"),
            None if !matches!(k.value, ConstValue::Array(_)) => self.value_name(&k.name, &decl)?,
            None => String::new(),
        };
        let check = |c: &str, v: &ConstValue, decl: String, shown: &str| -> HeaderCheck {
            let cond = match v {
                ConstValue::Ptr(p) => format!(
                    "__builtin_classify_type({c}) == __builtin_classify_type((void *)0) && (uintptr_t)({c}) == (uintptr_t){p}ULL"
                ),
                ConstValue::Int(i) => format!(
                    "__builtin_classify_type({c}) == __builtin_classify_type(0) && ({c}) == {i}{}",
                    if *i > i64::MAX as i128 { "ULL" } else { "LL" }
                ),
                ConstValue::Array(_) => unreachable!("checked element by element"),
            };
            HeaderCheck {
                c: vec![assert(&cond, &decl)],
                what: format!("{decl} = {shown} is not cuda.h's {}", self.h.described(c)),
                decl,
            }
        };
        let ConstValue::Array(items) = &k.value else {
            let shown = match k.value {
                ConstValue::Ptr(p) => format!("{p} as {}", k.ty),
                ConstValue::Int(i) => i.to_string(),
                ConstValue::Array(_) => unreachable!(),
            };
            return Ok(vec![check(&c, &k.value, decl, &shown)]);
        };
        // An array: its doc names each element with its value, in order: `ILLEGAL_ADDRESS (700)`.
        let pairs = named_values(&k.docs.join(" "));
        if pairs.len() != items.len() || pairs.iter().zip(items).any(|((_, v), i)| v != i) {
            bail!(
                "{decl}: its doc should name each of its {} elements with its value, in order (`ILLEGAL_ADDRESS (700)`); \
                 it names {}",
                items.len(),
                if pairs.is_empty() {
                    "none".to_string()
                } else {
                    pairs.iter().map(|(n, v)| format!("{n} ({v})")).collect::<Vec<_>>().join(", ")
                }
            );
        }
        pairs
            .iter()
            .enumerate()
            .map(|(i, (name, v))| {
                let decl = format!("{decl}[{i}], {name}");
                Ok(check(&self.value_name(name, &decl)?, &ConstValue::Int(*v), decl, &v.to_string()))
            })
            .collect()
    }

    fn func(&self, f: &Func) -> anyhow::Result<HeaderCheck> {
        let decl = format!("fn {}", f.name);
        let Some((Header::Typedefs, pfn)) = decls::named(&f.docs, &decl)? else {
            bail!("{decl}: its doc has no `cudaTypedefs.h: PFN_<name>_v<N>` line: {}", self.suggest(&f.symbol));
        };
        let Some((base, version, suffix)) = split_pfn(&pfn) else {
            bail!("{decl}: {pfn} is not a name of the form PFN_<name>_v<N>");
        };
        let Some(found) = self.h.pfns.get(&pfn) else {
            bail!("{decl}: cudaTypedefs.h has no {pfn}: {}", self.suggest(&f.symbol));
        };
        if found.internal {
            bail!(
                "{decl}: cudaTypedefs.h declares {pfn} only for the driver's own build (__CUDA_API_VERSION_INTERNAL): \
                 declare a newer version"
            );
        }
        let Some((versions, k)) =
            self.h.versions.get(base).and_then(|v| Some((v, v.iter().position(|v| *v == version)? + 1)))
        else {
            bail!(
                "{decl}: cudaTypedefs.h has {pfn}, but no PFN_{base}_v{version} of the default stream to count it by"
            );
        };
        if let Some(&mapped) = self.h.mapped.get(base) {
            if mapped as usize > versions.len() {
                bail!(
                    "{decl}: cuda.h maps {base} to {base}_v{mapped}, but cudaTypedefs.h has {} versions of it: the rule \
                     that the k-th version is {base}_vk does not hold here, and xtask/src/check_ffi.rs needs another",
                    versions.len()
                );
            }
        }
        let symbol = symbol_of(base, k, suffix);
        if symbol != f.symbol {
            bail!(
                "{decl}: {pfn} is the {} of {base}'s versions ({}), so the symbol {symbol}, not {}: {}",
                ordinal(k),
                versions.iter().map(|v| format!("v{v}")).collect::<Vec<_>>().join(", "),
                f.symbol,
                self.suggest(&f.symbol)
            );
        }
        let ours = self.declare(&Ty::Fn(Box::new(f.sig.clone())), false, "").with_context(|| decl.clone())?;
        Ok(HeaderCheck {
            c: vec![assert(&any(&ours, |o| format!("SAME({o}, {pfn})")), &decl)],
            what: format!("{decl}{} ({} in C) is not cudaTypedefs.h's {pfn}: {}", f.sig, ours[0], found.text),
            decl,
        })
    }

    /// The line a symbol's declaration needs, by the rule (`cuMemAlloc_v2`: `PFN_cuMemAlloc_v3020`).
    fn suggest(&self, symbol: &str) -> String {
        let (plain, suffix) =
            ["_ptsz", "_ptds"].iter().find_map(|s| symbol.strip_suffix(s).map(|p| (p, *s))).unwrap_or((symbol, ""));
        let (base, k) = match plain.rsplit_once("_v").and_then(|(b, k)| Some((b, k.parse::<usize>().ok()?))) {
            Some((base, k)) if self.h.versions.contains_key(base) => (base, k),
            _ => (plain, 1),
        };
        match self.h.versions.get(base).and_then(|v| v.get(k.checked_sub(1)?)) {
            Some(v) => format!("{symbol} is `/// cudaTypedefs.h: PFN_{base}_v{v}{suffix}`"),
            None => format!("cudaTypedefs.h has no version of {base} that is the symbol {symbol}"),
        }
    }
}

impl Headers {
    /// A name with where cuda.h defines it, for messages: `CU_X (CU_X = 16)`.
    fn described(&self, name: &str) -> String {
        match self.values.get(name) {
            Some(def) => format!("{name} ({def})"),
            None => name.to_string(),
        }
    }
}

/// `a || b || ...` of each spelling's condition.
fn any(spellings: &[String], cond: impl Fn(&str) -> String) -> String {
    spellings.iter().map(|s| cond(s)).collect::<Vec<_>>().join(" || ")
}

fn assert(cond: &str, decl: &str) -> String {
    format!("_Static_assert({cond}, \"{decl}\");")
}

/// A C declaration with its spaces tidied: `char const *`, `CUresult (*)(unsigned int)`.
fn tidy_c(s: &str) -> String {
    let mut out = squeeze(s);
    for (from, to) in [("( ", "("), (" )", ")"), ("* *", "**"), (" [", "["), ("* ", "*")] {
        while out.contains(from) {
            out = out.replace(from, to);
        }
    }
    out.replace("*const", "* const").trim().to_string()
}

/// `NAME (value` pairs of a doc, in order: `ECC_UNCORRECTABLE (214), CONTAINED (226, ...)`.
fn named_values(doc: &str) -> Vec<(String, i128)> {
    let mut out = Vec::new();
    for (at, _) in doc.match_indices(" (") {
        let name: String =
            doc[..at].chars().rev().take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_').collect();
        let name: String = name.chars().rev().collect();
        let digits: String = doc[at + 2..].chars().take_while(|c| c.is_ascii_digit()).collect();
        if name.starts_with(|c: char| c.is_ascii_uppercase()) && !digits.is_empty() {
            out.push((name, digits.parse().unwrap_or(0)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few lines in the form of CUDA 13's headers.
    const CUDA_H: &str = r#"
#define CUDA_VERSION 13000
typedef unsigned long long CUdeviceptr_v2;
typedef CUdeviceptr_v2 CUdeviceptr;   /**< CUDA device pointer */
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;
typedef struct CUctx_st *CUcontext;
typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,   /* // not a comment's end */
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_FAILED = 719,
} CUresult;
typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID = 0x0,
    CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
    CU_MEM_LOCATION_TYPE_MAX
} CUmemLocationType_v1;
typedef CUmemLocationType_v1 CUmemLocationType;
typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;
#define CU_LAUNCH_PARAM_END ((void*)0x00)
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define cuMemAlloc cuMemAlloc_v2
#define cuEventElapsedTime cuEventElapsedTime_v2
#define cuMemPrefetchAsync __CUDA_API_PTSZ(cuMemPrefetchAsync_v2)
"#;

    const TYPEDEFS_H: &str = r#"
typedef CUresult (CUDAAPI *PFN_cuInit_v2000)(unsigned int Flags);
typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v3020)(CUdeviceptr_v2 *dptr, size_t bytesize);
typedef CUresult (CUDAAPI *PFN_cuEventElapsedTime_v2000)(float *pMilliseconds, CUevent hStart, CUevent hEnd);
typedef CUresult (CUDAAPI *PFN_cuEventElapsedTime_v12080)(float *pMilliseconds, CUevent hStart, CUevent hEnd);
typedef CUresult (CUDAAPI *PFN_cuMemPrefetchAsync_v8000_ptsz)(CUdeviceptr_v2 devPtr, size_t count, CUdevice_v1 dstDevice, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuMemPrefetchAsync_v8000)(CUdeviceptr_v2 devPtr, size_t count, CUdevice_v1 dstDevice, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuMemPrefetchAsync_v12020)(CUdeviceptr_v2 devPtr, size_t count, CUmemLocation_v1 location, unsigned int flags, CUstream hStream);
#if defined(__CUDA_API_VERSION_INTERNAL)
    typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v2000)(CUdeviceptr_v1 *dptr, unsigned int bytesize);
#endif
"#;

    fn headers() -> Headers {
        Headers::parse(CUDA_H, TYPEDEFS_H)
    }

    #[test]
    fn a_declaration_newer_than_the_headers_is_named_not_checked() {
        let rust = format!(
            "{TYPES}
            /// newer than these headers: CUDA 13.2
            pub type PFN_cuNewer_v13020 = unsafe extern \"C\" fn(x: *mut usize) -> CuResult;
            /// newer than these headers: CUDA 13.2
            pub const NEWER_VERSION: c_int = 13020;
            pub type PFN_cuMissing_v13020 = unsafe extern \"C\" fn(x: *mut usize) -> CuResult;"
        );
        let e = errors_of(&rust);
        assert!(e.contains("PFN_cuMissing_v13020") && !e.contains("PFN_cuNewer"), "{e}");
        let ok = checklist_of(
            &rust.replace("pub type PFN_cuMissing_v13020 = unsafe extern \"C\" fn(x: *mut usize) -> CuResult;", ""),
        )
        .unwrap();
        assert_eq!(ok.newer, ["type PFN_cuNewer_v13020", "const NEWER_VERSION"]);
    }

    fn checklist_of(rust: &str) -> Result<Checklist, Vec<String>> {
        checklist(&decls::parse(rust).unwrap(), &headers())
    }

    fn c_of(rust: &str) -> String {
        match checklist_of(rust) {
            Ok(p) => p.source().text,
            Err(e) => panic!("{e:?}"),
        }
    }

    fn errors_of(rust: &str) -> String {
        checklist_of(rust).err().expect("should not be checkable").join("\n")
    }

    const TYPES: &str = "
        /// cuda.h: CUresult
        pub type CuResult = c_int;
        pub type CUdeviceptr = u64;
        pub type CUdevice = c_int;
        pub type CUmemLocationType = c_int;
    ";

    #[test]
    fn reads_what_the_check_needs_from_the_headers() {
        let h = headers();
        assert_eq!(h.version, 13000);
        assert!(h.enums.contains("CUresult") && h.enums.contains("CUmemLocationType"));
        assert!(!h.enums.contains("CUdevice") && !h.enums.contains("CUmemLocation"));
        assert_eq!(h.versions["cuMemAlloc"], [2000, 3020]);
        assert_eq!(h.versions["cuMemPrefetchAsync"], [8000, 12020]);
        assert!(h.pfns["PFN_cuMemAlloc_v2000"].internal && !h.pfns["PFN_cuMemAlloc_v3020"].internal);
        assert_eq!(h.pfns["PFN_cuMemAlloc_v3020"].text, "CUresult (CUdeviceptr_v2 *dptr, size_t bytesize)");
        assert_eq!(h.mapped["cuMemPrefetchAsync"], 2);
        assert_eq!(h.values["CUDA_ERROR_INVALID_VALUE"], "CUDA_ERROR_INVALID_VALUE = 1");
        assert_eq!(h.values["CU_LAUNCH_PARAM_END"], "#define CU_LAUNCH_PARAM_END ((void*)0x00)");
        assert!(!h.idents.contains("comment"), "comments are left out");
        assert_eq!(split_pfn("PFN_cuMemcpyAsync_v7000_ptsz"), Some(("cuMemcpyAsync", 7000, "_ptsz")));
    }

    #[test]
    fn an_entry_point_is_held_against_the_typedef_its_doc_names() {
        let c = c_of(&format!(
            "{TYPES} entry_points! {{ extern \"C\" {{
                /// cudaTypedefs.h: PFN_cuMemAlloc_v3020
                pub fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> CuResult;
                /// cudaTypedefs.h: PFN_cuEventElapsedTime_v2000
                pub fn cuEventElapsedTime(ms: *mut f32, start: *mut c_void, end: *const *mut c_void) -> CuResult;
            }} }}"
        ));
        assert!(c.contains("_Static_assert(SAME(CUresult (*)(CUdeviceptr *, size_t), PFN_cuMemAlloc_v3020), \"fn cuMemAlloc_v2\");"), "{c}");
        assert!(c.contains("SAME(CUresult (*)(float *, void *, void * const *), PFN_cuEventElapsedTime_v2000)"), "{c}");
    }

    #[test]
    fn the_doc_line_must_be_there_and_be_the_symbols_version() {
        let missing = errors_of(&format!(
            "{TYPES} entry_points! {{ extern \"C\" {{ pub fn cuMemAlloc_v2(p: *mut CUdeviceptr, n: usize) -> CuResult; }} }}"
        ));
        assert!(missing.contains("fn cuMemAlloc_v2: its doc has no `cudaTypedefs.h: PFN_<name>_v<N>` line: cuMemAlloc_v2 is `/// cudaTypedefs.h: PFN_cuMemAlloc_v3020`"), "{missing}");
        let newer = errors_of(&format!(
            "{TYPES} entry_points! {{ extern \"C\" {{ /// cudaTypedefs.h: PFN_cuEventElapsedTime_v12080
            pub fn cuEventElapsedTime(ms: *mut f32) -> CuResult; }} }}"
        ));
        assert!(newer.contains("PFN_cuEventElapsedTime_v12080 is the 2nd of cuEventElapsedTime's versions (v2000, v12080), so the symbol cuEventElapsedTime_v2, not cuEventElapsedTime"), "{newer}");
        let internal = errors_of(&format!(
            "{TYPES} entry_points! {{ extern \"C\" {{ /// cudaTypedefs.h: PFN_cuMemAlloc_v2000
            pub fn cuMemAlloc(p: *mut CUdeviceptr, n: c_uint) -> CuResult; }} }}"
        ));
        assert!(internal.contains("only for the driver's own build"), "{internal}");
        let unknown = errors_of(&format!(
            "{TYPES} entry_points! {{ extern \"C\" {{ /// cudaTypedefs.h: PFN_cuNothing_v1000\n pub fn cuNothing(); }} }}"
        ));
        assert!(unknown.contains("cudaTypedefs.h has no PFN_cuNothing_v1000"), "{unknown}");
    }

    #[test]
    fn a_64_bit_integer_is_tried_in_both_of_cs_spellings() {
        let c = c_of(&format!(
            "{TYPES} entry_points! {{ extern \"C\" {{ /// cudaTypedefs.h: PFN_cuInit_v2000
            pub fn cuInit(flags: u64) -> CuResult; }} }}"
        ));
        assert!(
            c.contains("SAME(CUresult (*)(unsigned long long), PFN_cuInit_v2000) || SAME(CUresult (*)(unsigned long), PFN_cuInit_v2000)"),
            "{c}"
        );
    }

    #[test]
    fn aliases_are_held_against_the_headers_types_and_enums_against_their_size() {
        let c = c_of(TYPES);
        assert!(c.contains("SAME(CUdeviceptr, unsigned long long) || SAME(CUdeviceptr, unsigned long)"), "{c}");
        assert!(c.contains("SAME(CUdevice, int)"), "{c}");
        assert!(c.contains("sizeof(CUmemLocationType) == sizeof(int) && (SAME(CUmemLocationType, int) || SAME(CUmemLocationType, unsigned int))"), "{c}");
        assert!(c.contains("sizeof(CUresult) == sizeof(int)"), "{c}");
        let e = errors_of("pub type CuResult = c_int; pub type PFN_cuMemAlloc = unsafe extern \"C\" fn();");
        assert!(
            e.contains("type CuResult: the headers have no type CuResult to hold it against: name the header's type"),
            "{e}"
        );
        assert!(e.contains("add `/// cudaTypedefs.h: PFN_cuMemAlloc_v<N>`, the version you look up (PFN_cuMemAlloc_v2000, PFN_cuMemAlloc_v3020)"), "{e}");
    }

    #[test]
    fn structs_are_held_field_by_field() {
        let c = c_of(&format!(
            "{TYPES} #[repr(C)] pub struct CUmemLocation {{ pub type_: CUmemLocationType, pub id: c_int }}
            pub struct NotC {{ pub x: String }}"
        ));
        assert!(c.contains("struct check_ffi_0 { CUmemLocationType f0; int f1; };"), "{c}");
        assert!(c.contains("sizeof(struct check_ffi_0) == sizeof(CUmemLocation) && _Alignof(struct check_ffi_0) == _Alignof(CUmemLocation)"), "{c}");
        assert!(c.contains("offsetof(struct check_ffi_0, f0) == offsetof(CUmemLocation, type) && (SAME(__typeof__(((CUmemLocation *)0)->type), CUmemLocationType))"), "{c}");
        let e = errors_of("pub struct CUmemLocation { pub id: i32 }");
        assert!(e.contains("struct CUmemLocation: cuda.h has a CUmemLocation, and this one is not #[repr(C)]"), "{e}");
    }

    #[test]
    fn constants_are_held_against_the_headers_values() {
        let c = c_of(&format!(
            "{TYPES}
            pub const SUCCESS: CuResult = 0;
            pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x01;
            pub const CU_LAUNCH_PARAM_END: *mut c_void = std::ptr::null_mut();
            /// cuda.h: CU_MEM_LOCATION_TYPE_DEVICE
            pub const DEVICE: c_int = 1;
            /// ILLEGAL_ADDRESS (700), LAUNCH_FAILED (719, the launch).
            pub const KILLED: [CuResult; 2] = [700, 719];
            /// cudaTypedefs.h: PFN_cuEventElapsedTime_v12080
            pub const TIMING_VERSION: c_int = 12080;"
        ));
        for expected in [
            "__builtin_classify_type(CUDA_SUCCESS) == __builtin_classify_type(0) && (CUDA_SUCCESS) == 0LL",
            "(CU_MEMHOSTALLOC_PORTABLE) == 1LL",
            "__builtin_classify_type(CU_LAUNCH_PARAM_END) == __builtin_classify_type((void *)0) && (uintptr_t)(CU_LAUNCH_PARAM_END) == (uintptr_t)0ULL",
            "(CU_MEM_LOCATION_TYPE_DEVICE) == 1LL",
            "(CUDA_ERROR_ILLEGAL_ADDRESS) == 700LL, \"const KILLED[0], ILLEGAL_ADDRESS\"",
            "(CUDA_ERROR_LAUNCH_FAILED) == 719LL",
            "sizeof(PFN_cuEventElapsedTime_v12080) == sizeof(void (*)(void))",
        ] {
            assert!(c.contains(expected), "{expected}\n{c}");
        }
        let e = errors_of(&format!(
            "{TYPES} pub const NOWHERE: c_int = 1;
            /// ILLEGAL_ADDRESS (700).
            pub const KILLED: [CuResult; 2] = [700, 719];
            /// cudaTypedefs.h: PFN_cuInit_v2000
            pub const V: c_int = 12080;"
        ));
        assert!(
            e.contains("const NOWHERE: cuda.h defines none of NOWHERE, CU_NOWHERE, CUDA_NOWHERE, CUDA_ERROR_NOWHERE"),
            "{e}"
        );
        assert!(e.contains("const KILLED: its doc should name each of its 2 elements with its value, in order"), "{e}");
        assert!(e.contains("const V: its doc names PFN_cuInit_v2000, so it should be 2000"), "{e}");
    }

    #[test]
    fn compiler_errors_are_told_as_the_declarations_they_check() {
        let p = checklist_of(&format!(
            "{TYPES} entry_points! {{ extern \"C\" {{ /// cudaTypedefs.h: PFN_cuInit_v2000
            pub fn cuInit(flags: c_uint) -> CuResult; }} }}"
        ))
        .unwrap();
        let src = p.source();
        let line = src.text.lines().position(|l| l.contains("\"fn cuInit\"")).unwrap() + 1;
        let alias = src.text.lines().position(|l| l.contains("\"type CUdevice\"")).unwrap() + 1;
        let stderr = format!(
            "/t/ffi.c: In function 'x':\n/t/ffi.c:{line}:1: error: static assertion failed: \"fn cuInit\"\n\
             /t/ffi.c:{line}:1: error: static assertion failed: \"fn cuInit\"\n\
             /t/ffi.c:{alias}:16: error: unknown type name 'CUdevice'\n/t/ffi.c:3:10: fatal error: cuda.h: No such file"
        );
        let failures = src.failures(&p, &stderr, Path::new("/t/ffi.c"));
        assert_eq!(
            failures,
            [
                "fn cuInit(flags: c_uint) -> CuResult (CUresult (*)(unsigned int) in C) is not cudaTypedefs.h's \
                 PFN_cuInit_v2000: CUresult (unsigned int Flags)",
                "type CUdevice: the C compiler: unknown type name 'CUdevice' (type CUdevice = c_int (int in C) is not \
                 cuda.h's CUdevice)",
                "the check's own C, line 3: cuda.h: No such file",
            ]
        );
    }

    #[test]
    fn names_values_in_a_doc() {
        assert_eq!(
            named_values("unusable: ECC_UNCORRECTABLE (214), CONTAINED (226, Hopper's), CUDA 13 (x), A (b)."),
            [("ECC_UNCORRECTABLE".to_string(), 214), ("CONTAINED".to_string(), 226)]
        );
    }

    /// The check itself, with the C compiler and CUDA 13.0's headers where they are already here (`cargo
    /// xtask test` runs check-ffi, which installs them, before the tests; without them this says so
    /// and checks nothing): ffi.rs passes, and a copy of it with one parameter of the wrong type fails,
    /// naming that entry point.
    #[test]
    fn a_copy_of_ffi_rs_with_a_wrong_parameter_fails_against_cuda_13s_headers() {
        let nvcc = tools::nvcc()
            .filter(|n| cuda_find::nvcc_release(n).as_deref() == Some(cuda_find::NVCC_RELEASE))
            .or_else(|| Some(tools::provisioned_nvcc()).filter(|n| n.is_file()));
        let Some(include) = nvcc.and_then(|n| include_beside(&n).ok()) else {
            eprintln!("no CUDA 13.0 headers here yet (`cargo xtask setup` installs them): not checked");
            return;
        };
        let dir = tools::target_dir().join("check-ffi/test");
        check(&decls::read().unwrap(), &include, &dir).unwrap();
        let said = wrong_copy_fails(&include, &dir.join("wrong")).unwrap();
        assert!(said.contains("fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: c_uint) -> CuResult"), "{said}");
    }

    /// Every declaration of the real ffi.rs names its header counterpart where it must (no headers
    /// needed: `cargo test` alone catches a declaration added without its line).
    #[test]
    fn every_entry_point_of_ffi_rs_names_its_typedef() {
        let d = decls::read().unwrap();
        assert!(d.funcs.len() >= 20);
        let missing: Vec<&str> = d
            .funcs
            .iter()
            .filter(|f| !matches!(decls::named(&f.docs, &f.name), Ok(Some((Header::Typedefs, p))) if split_pfn(&p).is_some()))
            .map(|f| f.name.as_str())
            .collect();
        assert!(missing.is_empty(), "add a `/// cudaTypedefs.h: PFN_<name>_v<N>` line to: {}", missing.join(", "));
    }
}
