//! Kernels of your own: a PTX module, its kernels looked up by name, and launches built argument by
//! argument, each declared as a view the kernel reads, a view it writes, or a value.
//!
//! Loading and looking up are safe. Building the launch ends in [`LaunchBuilder::build`], which is
//! `unsafe`: it is the one promise no type can check, that the kernel touches only the views it was
//! given, in the way they were declared (and, within them, stays in bounds). Everything else is checked:
//! the argument list against the kernel's `.entry` signature in the PTX (count, pointer or value,
//! width) when it is built, and by the scope when it is queued, the views' scope, their overlap
//! (one launch may not read and write the same bytes), the context, and the ordering against other
//! streams, exactly as for copies.

use std::{ffi::CString, marker::PhantomData, sync::Arc};

use anyhow::{bail, Context as _};

use crate::{
    context::Context,
    ffi::{self, check},
    memory::Element,
    view::{Dev, DevAccess, DevRead},
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
                Some(size) if size == p.bits as usize / 8 => {}
                found => bail!(
                    "kernel {name}: the PTX text reads parameter {i} as {}, but the driver compiled {}: refusing to \
                     check launches against a misreading",
                    p.ptx,
                    found.map_or("no such parameter".into(), |s| format!("{s} bytes"))
                ),
            }
        }
        Ok(Kernel { name: name.into(), func, params: params.into(), module: self.loaded.clone() })
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
    func: ffi::CUfunction,
    params: Arc<[Param]>,
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

    /// A launch of this kernel with `config`; declare its arguments in order, then
    /// [`LaunchBuilder::build`] it.
    pub fn launch<'scope>(&self, config: LaunchConfig) -> LaunchBuilder<'scope> {
        LaunchBuilder {
            kernel: self.clone(),
            config,
            args: Vec::new(),
            accesses: Vec::new(),
            invalid: None,
            _scope: PhantomData,
        }
    }
}

/// A launch's grid, block and dynamic shared memory: `<<<grid, block, shared_bytes>>>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// One thread per element in blocks of `block` threads: `(n + block - 1) / block` blocks (at least
    /// one). A grid too large for the GPU is refused when the launch is queued.
    pub fn for_elements(n: usize, block: u32) -> LaunchConfig {
        let blocks = n.div_ceil(block.max(1) as usize).max(1);
        LaunchConfig { grid: (u32::try_from(blocks).unwrap_or(u32::MAX), 1, 1), block: (block, 1, 1), shared_bytes: 0 }
    }

    /// `blocks` blocks of `block` threads.
    pub fn linear(blocks: u32, block: u32) -> LaunchConfig {
        LaunchConfig { grid: (blocks, 1, 1), block: (block, 1, 1), shared_bytes: 0 }
    }
}

/// A value a kernel takes by value: `u32`, `i32`, `u64`, `i64`, `f32`, `f64`. Sealed.
pub trait Value: Copy + sealed::Sealed {
    #[doc(hidden)]
    fn arg(self) -> Arg;
}
mod sealed {
    pub trait Sealed {}
}
macro_rules! value {
    ($($t:ty => $v:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Value for $t {
            fn arg(self) -> Arg {
                Arg::$v(self)
            }
        }
    )*};
}
value!(u32 => U32, i32 => I32, u64 => U64, i64 => I64, f32 => F32, f64 => F64);

/// One argument as it is passed.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    Ptr(u64),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
}

impl Arg {
    /// Whether a parameter the PTX declares can take this argument.
    fn fits(&self, p: &Param) -> bool {
        match self {
            Arg::Ptr(_) => p.bits == 64 && p.class == Class::Int,
            Arg::U32(_) | Arg::I32(_) => p.bits == 32 && p.class == Class::Int && !p.ptr,
            Arg::U64(_) | Arg::I64(_) => p.bits == 64 && p.class == Class::Int && !p.ptr,
            Arg::F32(_) => p.bits == 32 && p.class == Class::Float,
            Arg::F64(_) => p.bits == 64 && p.class == Class::Float,
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            Arg::Ptr(_) => "a device view",
            Arg::U32(_) => "u32",
            Arg::I32(_) => "i32",
            Arg::U64(_) => "u64",
            Arg::I64(_) => "i64",
            Arg::F32(_) => "f32",
            Arg::F64(_) => "f64",
        }
    }
}

/// A kernel parameter as the PTX declares it: `.param .u64 x` (or `.param .u64 .ptr .global x`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Param {
    ptx: String,
    bits: u32,
    class: Class,
    /// Declared a pointer (`.ptr`): only a device view may be passed.
    ptr: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    Int,
    Float,
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
        let params = rest[open + 1..close].split(',').map(str::trim).filter(|p| !p.is_empty()).map(param).collect();
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
            bits,
            class: if kind == b'f' { Class::Float } else { Class::Int },
            ptr: words.contains(&".ptr"),
        }),
        _ => Err(format!(
            "its parameter `{decl}` is not a 32- or 64-bit number or pointer, which is all a launch passes"
        )),
    }
}

/// A launch being declared: [`Kernel::launch`], then each argument in the kernel's order, then
/// [`LaunchBuilder::build`].
pub struct LaunchBuilder<'scope> {
    kernel: Kernel,
    config: LaunchConfig,
    args: Vec<Arg>,
    accesses: Vec<DevAccess>,
    invalid: Option<String>,
    _scope: PhantomData<fn(&'scope ()) -> &'scope ()>,
}

impl<'scope> LaunchBuilder<'scope> {
    /// A view the kernel reads (and does not write): a `const T*` parameter.
    pub fn read<T: Element>(mut self, view: impl Into<DevRead<'scope, T>>) -> Self {
        let view = *view.into().view();
        self.accesses.push(view.access(false));
        self.args.push(Arg::Ptr(view.ptr()));
        self
    }

    /// A view the kernel writes, and may read: a `T*` parameter.
    pub fn write<T: Element>(mut self, view: Dev<'scope, T>) -> Self {
        self.accesses.push(view.access(true));
        self.args.push(Arg::Ptr(view.ptr()));
        self
    }

    /// A value passed by value: `u32`, `i32`, `u64` (for `size_t` and `unsigned long long`), `i64`,
    /// `f32`, `f64`.
    pub fn value(mut self, v: impl Value) -> Self {
        self.args.push(v.arg());
        self
    }

    /// Refuses the launch, saying why, when it is queued: for checks of a launcher's own (lengths that
    /// must agree, say).
    pub fn refuse(mut self, why: impl Into<String>) -> Self {
        self.invalid.get_or_insert(why.into());
        self
    }

    /// The launch, its arguments held against the kernel's parameters ([`crate::Scope::launch`] refuses
    /// it if they do not match, naming the first that does not).
    ///
    /// # Safety
    /// The kernel, run with this configuration and these arguments, reads only the views declared with
    /// [`LaunchBuilder::read`] and writes only those declared with [`LaunchBuilder::write`], within each
    /// view's elements. The scope holds every view's buffer and orders the launch against other work on
    /// exactly those bytes; what the kernel does beyond them nothing can see or stop, and may race with
    /// other work, corrupt memory the host is reading, or fault the context.
    pub unsafe fn build(self) -> Launch<'scope> {
        let params = &self.kernel.params;
        let mismatch = if self.args.len() != params.len() {
            Some(format!("takes {} arguments and was given {}", params.len(), self.args.len()))
        } else {
            self.args.iter().zip(params.iter()).enumerate().find(|(_, (a, p))| !a.fits(p)).map(|(i, (a, p))| {
                let declared = if p.ptr { format!("{} .ptr", p.ptx) } else { p.ptx.clone() };
                format!("argument {i} is {}, but the PTX declares it {declared}", a.describe())
            })
        };
        let (g, b) = (self.config.grid, self.config.block);
        let too_big = (g.0 > i32::MAX as u32 || g.1 > 65535 || g.2 > 65535 || g.0 == 0 || g.1 == 0 || g.2 == 0)
            .then(|| format!("a grid of {g:?} blocks is more than a GPU runs (x up to 2^31-1, y and z up to 65535)"));
        let empty = (b.0 == 0 || b.1 == 0 || b.2 == 0).then(|| "a block of no threads".to_string());
        let invalid = self.invalid.or(mismatch).or(too_big).or(empty);
        Launch {
            kernel: self.kernel,
            config: self.config,
            args: self.args,
            accesses: self.accesses,
            invalid,
            _scope: PhantomData,
        }
    }
}

/// A kernel launch ready for [`crate::Scope::launch`]: made by [`LaunchBuilder::build`].
pub struct Launch<'scope> {
    pub(crate) kernel: Kernel,
    config: LaunchConfig,
    args: Vec<Arg>,
    pub(crate) accesses: Vec<DevAccess>,
    pub(crate) invalid: Option<String>,
    // The views are the scope's; so is the launch.
    _scope: PhantomData<fn(&'scope ()) -> &'scope ()>,
}

impl Launch<'_> {
    pub(crate) fn enqueue(&mut self, stream: ffi::CUstream) -> ffi::CuResult {
        let mut params: Vec<*mut std::ffi::c_void> = self
            .args
            .iter_mut()
            .map(|a| match a {
                Arg::Ptr(v) | Arg::U64(v) => v as *mut u64 as *mut _,
                Arg::I64(v) => v as *mut i64 as *mut _,
                Arg::U32(v) => v as *mut u32 as *mut _,
                Arg::I32(v) => v as *mut i32 as *mut _,
                Arg::F32(v) => v as *mut f32 as *mut _,
                Arg::F64(v) => v as *mut f64 as *mut _,
            })
            .collect();
        let (g, b) = (self.config.grid, self.config.block);
        // SAFETY: `params` points at one value per parameter, each of the width the PTX declares
        // (checked in build(), and a launch that failed the check never reaches here); every pointer
        // is a live device range lent to the scope that orders this launch; the caller of build()
        // promised the kernel stays within them; the function's module is loaded in the scope's
        // context (checked by Scope::launch) and stays loaded until the scope has synchronized.
        unsafe {
            ffi::cuLaunchKernel(
                self.kernel.func,
                g.0,
                g.1,
                g.2,
                b.0,
                b.1,
                b.2,
                self.config.shared_bytes,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
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
        let shape: Vec<(u32, Class, bool)> = saxpy.iter().map(|p| (p.bits, p.class, p.ptr)).collect();
        assert_eq!(
            shape,
            [(64, Class::Int, false), (64, Class::Int, true), (32, Class::Float, false), (32, Class::Int, false)]
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

    #[test]
    fn arguments_fit_by_kind_and_width() {
        let p = |s: &str| param(s).unwrap();
        assert!(Arg::Ptr(0).fits(&p(".param .u64 x")));
        assert!(Arg::U64(1).fits(&p(".param .u64 x")), "a pointer and a 64-bit count look alike in PTX");
        assert!(!Arg::U64(1).fits(&p(".param .u64 .ptr .global x")), "but .ptr says which");
        assert!(!Arg::U32(1).fits(&p(".param .u64 x")));
        assert!(!Arg::F32(1.0).fits(&p(".param .u32 x")));
        assert!(Arg::I32(-1).fits(&p(".param .s32 x")));
        assert!(Arg::F64(1.0).fits(&p(".param .f64 x")));
        assert!(param(".param .u8 x").is_err() && param(".param .b8 x[4]").is_err());
    }

    #[test]
    fn grids_for_elements() {
        assert_eq!(LaunchConfig::for_elements(1000, 256).grid, (4, 1, 1));
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, (1, 1, 1), "at least one block");
        assert_eq!(LaunchConfig::for_elements(usize::MAX, 256).grid.0, u32::MAX, "refused when queued");
    }
}
