//! Kernels of your own: a PTX module, its kernels looked up by name, and launches built argument by
//! argument, each declared as a view the kernel reads, a view it writes, or a value.
//!
//! Loading and looking up are safe. A launch ([`crate::ScopeStream::kernel`], see [`crate::launch`])
//! ends in [`crate::LaunchBuilder::launch`], which is `unsafe`: it is the one promise no type can check,
//! that the kernel touches only the views it was given, in the way they were declared (and, within
//! them, stays in bounds). Everything else is checked: the argument list against the kernel's
//! parameters (count, size, number or float, pointer or value where known), the views' scope, their
//! overlap (one launch may not read and write the same bytes), the context, and the ordering against
//! other streams, exactly as for copies.

use std::{ffi::CString, sync::Arc};

use anyhow::{bail, Context as _};

use crate::{
    context::Context,
    ffi::{self, check},
};

/// A loaded module; unloaded when the last [`Module`], [`Kernel`] or queued launch of it is gone.
pub(crate) struct Loaded {
    raw: ffi::CUmodule,
    pub ctx: Arc<Context>,
}

// SAFETY: a module handle may be used from any thread; unloading makes its context current.
unsafe impl Send for Loaded {}
// SAFETY: as above; nothing mutates the handle.
unsafe impl Sync for Loaded {}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: loaded once, unloaded once, in its own context; no launch of it can still run, because
        // every scope that queued one holds this Arc until its streams are synchronized.
        self.ctx.with_current(|| unsafe { ffi::cuModuleUnload(self.raw) });
    }
}

/// A PTX module loaded on a GPU ([`crate::Gpu::load_ptx`]), with the signatures of its kernels.
pub struct Module {
    loaded: Arc<Loaded>,
    entries: Vec<(String, Result<Vec<Param>, String>)>,
}

impl Module {
    pub(crate) fn load(ctx: &Arc<Context>, ptx: &str, what: &str) -> anyhow::Result<Module> {
        let image = CString::new(ptx).with_context(|| format!("{what} has a NUL byte"))?;
        ctx.make_current()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: a NUL-terminated image and a valid out-pointer; the context is current. Loading only
        // compiles the code; nothing runs until a launch.
        check(unsafe { ffi::cuModuleLoadData(&mut raw, image.as_ptr().cast()) }, || format!("loading {what}"))?;
        Ok(Module { loaded: Arc::new(Loaded { raw, ctx: ctx.clone() }), entries: entries(ptx) })
    }

    /// The kernel `name` (declare it `extern "C"` in CUDA C++, so that its name is not mangled).
    pub fn kernel(&self, name: &str) -> anyhow::Result<Kernel> {
        let Some((_, params)) = self.entries.iter().find(|(n, _)| n == name) else {
            let names: Vec<&str> = self.entries.iter().map(|(n, _)| n.as_str()).collect();
            bail!(
                "the PTX has no kernel named {name} (it has: {}; declare kernels extern \"C\" so that their names \
                 are not mangled)",
                if names.is_empty() { "none".into() } else { names.join(", ") }
            );
        };
        let params = params.clone().map_err(|why| anyhow::anyhow!("kernel {name}: {why}"))?;
        let c_name = CString::new(name).context("a kernel name with a NUL byte")?;
        let mut func = std::ptr::null_mut();
        self.loaded.ctx.make_current()?;
        // SAFETY: a loaded module, a NUL-terminated name and a valid out-pointer.
        check(unsafe { ffi::cuModuleGetFunction(&mut func, self.loaded.raw, c_name.as_ptr()) }, || {
            format!("finding kernel {name}")
        })?;
        // The driver's own account of each parameter the PTX text declares, from the code it compiled:
        // it must agree, or the check of a launch's arguments would rest on a misreading. (Only those:
        // asking past the last is an error, which compute-sanitizer reports in every program.)
        for (i, p) in params.iter().enumerate() {
            match param_size(func, i)? {
                Some(size) if size == p.size as usize => {}
                found => bail!(
                    "kernel {name}: the PTX text reads parameter {i} as {}, but the driver compiled {}: refusing to \
                     check launches against a misreading",
                    p.ptx,
                    found.map_or("no such parameter".into(), |s| format!("{s} bytes"))
                ),
            }
        }
        let param_bytes = params.last().map_or(0, |p| p.offset + p.size);
        Ok(Kernel { name: name.into(), func, params: params.into(), param_bytes, module: self.loaded.clone() })
    }

    /// The names of the kernels the PTX declares (`.entry`).
    pub fn kernel_names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kernel_names()).finish()
    }
}

/// The size in bytes of parameter `index` of `func`, as the driver compiled it (`cuFuncGetParamInfo`),
/// or `None` where it has no such parameter.
fn param_size(func: ffi::CUfunction, index: usize) -> anyhow::Result<Option<usize>> {
    let (mut offset, mut size) = (0, 0);
    // SAFETY: a function of a loaded module and two valid out-pointers.
    match unsafe { ffi::cuFuncGetParamInfo(func, index, &mut offset, &mut size) } {
        ffi::SUCCESS => Ok(Some(size)),
        ffi::ERROR_INVALID_VALUE => Ok(None),
        code => check(code, || "reading a kernel's parameters".into()).map(|_| None),
    }
}

/// A kernel of a loaded [`Module`], with its parameters as the PTX declares them. It keeps the module
/// loaded; clone it freely.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) name: Arc<str>,
    pub(crate) func: ffi::CUfunction,
    pub(crate) params: Arc<[Param]>,
    /// The size of the parameter buffer: the end of the last parameter.
    pub(crate) param_bytes: u32,
    pub(crate) module: Arc<Loaded>,
}

// SAFETY: a function handle may be used from any thread; launches go through a scope, which makes the
// module's context current.
unsafe impl Send for Kernel {}
// SAFETY: as above; nothing mutates the handle.
unsafe impl Sync for Kernel {}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name, self.params.iter().map(|p| p.ptx.as_str()).collect::<Vec<_>>().join(", "))
    }
}

impl Kernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A kernel parameter: as the PTX declares it (`.param .u64 x`, `.param .u64 .ptr .global x`), where
/// the driver put it, and how large it is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Param {
    /// The type as the PTX spells it, for messages: `.u64`, `.f32`, `.u64 .ptr`.
    pub ptx: String,
    /// Byte offset in the parameter buffer.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
    /// Alignment in the parameter buffer.
    pub align: u32,
    pub class: Class,
    pub pointer: Pointer,
}

/// What a parameter holds, as the PTX declares it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Class {
    /// `.u`, `.s` or `.b` of 8 to 64 bits: an integer, or an address.
    Int,
    /// `.f32`, `.f64`.
    Float,
    /// An array or structure of bytes.
    Bytes,
}

/// Whether a parameter is a pointer: the PTX says so only with `.ptr`, a C prototype always.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Pointer {
    Yes,
    No,
    Unknown,
}

/// The parameter types of kernel `name` as the PTX text declares them (`.u64`, `.f32`, ...), or why a
/// launch could not pass them; `None` where the PTX has no such kernel. For checking a PTX file before
/// any GPU is started.
pub fn signature(ptx: &str, name: &str) -> Option<Result<Vec<String>, String>> {
    let (_, params) = entries(ptx).into_iter().find(|(n, _)| n == name)?;
    Some(params.map(|ps| ps.into_iter().map(|p| p.ptx).collect()))
}

/// The PTX text without its comments (`// ...` and `/* ... */`), which may mention `.entry` and
/// parentheses that are not code. Strings hold no `//` in PTX but the `.file` paths, which are kept.
fn without_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut rest = ptx;
    while let Some(at) = rest.find('/') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(line) = tail.strip_prefix("//") {
            rest = line.find('\n').map_or("", |nl| &line[nl..]);
        } else if let Some(block) = tail.strip_prefix("/*") {
            out.push(' ');
            rest = block.find("*/").map_or("", |end| &block[end + 2..]);
        } else {
            out.push('/');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Every `.entry NAME(...)` of a PTX text, with its parameters, or why they cannot be passed (a name
/// declared twice is refused, rather than guessed).
fn entries(ptx: &str) -> Vec<(String, Result<Vec<Param>, String>)> {
    let code = without_comments(ptx);
    let mut out: Vec<(String, Result<Vec<Param>, String>)> = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry ") {
        rest = &rest[at + ".entry ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let close = rest[open..].find(')').map_or(rest.len(), |c| open + c);
        let params = rest[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(param)
            .collect::<Result<Vec<Param>, String>>()
            .map(|mut ps| {
                let mut end = 0u32;
                for p in &mut ps {
                    p.offset = end.next_multiple_of(p.align);
                    end = p.offset + p.size;
                }
                ps
            });
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, earlier)) => *earlier = Err("the PTX declares it twice".into()),
            None => out.push((name, params)),
        }
        rest = &rest[close..];
    }
    out
}

/// One `.param ...` declaration.
fn param(decl: &str) -> Result<Param, String> {
    let words: Vec<&str> = decl.split_whitespace().collect();
    let ty = words.iter().find(|w| [".u", ".s", ".b", ".f"].iter().any(|p| w.starts_with(p)) && w.len() > 2);
    let parsed = ty.and_then(|t| Some((t.as_bytes()[1], t.get(2..)?.parse::<u32>().ok()?)));
    match parsed {
        Some((kind, bits @ (32 | 64))) if !decl.contains('[') => Ok(Param {
            ptx: ty.unwrap().to_string(),
            offset: 0,
            size: bits / 8,
            align: bits / 8,
            class: if kind == b'f' { Class::Float } else { Class::Int },
            pointer: if words.contains(&".ptr") { Pointer::Yes } else { Pointer::Unknown },
        }),
        _ => Err(format!(
            "its parameter `{decl}` is not a 32- or 64-bit number or pointer, which is all a launch passes"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "
.visible .entry saxpy(
	.param .u64 saxpy_param_0,
	.param .u64 .ptr .global .align 4 saxpy_param_1,
	.param .f32 saxpy_param_2,
	.param .u32 saxpy_param_3
)
{ ret; }
.visible .entry by_struct(
	.param .align 8 .b8 by_struct_param_0[16]
)
{ ret; }
.entry empty()
{ ret; }";

    #[test]
    fn entries_and_their_parameters_come_from_the_ptx() {
        let e = entries(PTX);
        let names: Vec<&str> = e.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["saxpy", "by_struct", "empty"]);
        let saxpy = e[0].1.as_ref().unwrap();
        let shape: Vec<(u32, u32, Class, Pointer)> =
            saxpy.iter().map(|p| (p.offset, p.size, p.class, p.pointer)).collect();
        assert_eq!(
            shape,
            [
                (0, 8, Class::Int, Pointer::Unknown),
                (8, 8, Class::Int, Pointer::Yes),
                (16, 4, Class::Float, Pointer::Unknown),
                (20, 4, Class::Int, Pointer::Unknown)
            ]
        );
        assert!(e[1].1.as_ref().unwrap_err().contains("by_struct_param_0[16]"), "{:?}", e[1].1);
        assert_eq!(e[2].1, Ok(vec![]));
    }

    #[test]
    fn comments_and_doubles_cannot_mislead_the_reading() {
        let spoof = "// old: .entry k(.param .u64 x)\n.visible .entry k(\n .param .u64 a, /* (x) */\n .param .u64 b\n)\n{ ret; }";
        let e = entries(spoof);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].1.as_ref().unwrap().len(), 2, "{e:?}");
        let twice = ".entry k(.param .u64 a)\n{ ret; }\n.entry k(.param .u32 a)\n{ ret; }";
        assert_eq!(entries(twice)[0].1, Err("the PTX declares it twice".to_string()));
        assert!(param(".param .u32 nº").is_ok() && param("nº .param .u32 n").is_ok(), "no panic on other letters");
    }
}
