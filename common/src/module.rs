//! Kernels of your own: a PTX module, its kernels looked up by name, and launches built argument by
//! argument, each declared as a view the kernel reads, a view it writes, or a value.
//!
//! Loading and looking up are safe. Building the launch ends in [`LaunchBuilder::build`], which is
//! `unsafe`: it is the one promise no type can check, that the kernel touches only the views it was
//! given, in the way they were declared (and, within them, stays in bounds). Everything else is checked:
//! the argument list against the kernel's parameters (count, pointer or value, width) when it is
//! built, and by the scope when it is queued, the views' scope, their overlap (one launch may not read
//! and write the same bytes), the context, and the ordering against other streams, exactly as for
//! copies.
//!
//! # Whose account of a kernel's parameters
//!
//! The driver's. [`crate::Gpu::load_ptx`] has the driver compile and link the PTX for the GPU
//! (`cuLinkCreate`, `cuLinkAddData` with the PTX, `cuLinkComplete`), reads each kernel's parameter
//! records from the cubin it made ([`crate::cubin`]: every parameter's offset and size, and the size of
//! the parameter space), and loads *that* cubin (`cuModuleLoadData`): the code that runs is the code
//! whose records were read. A launch passes exactly as many arguments as those records count, each of
//! the recorded size, so `cuLaunchKernel` never reads past the argument array it is given.
//!
//! The PTX text is read too ([`crate::ptx`], a reading that knows PTX's strings, comments and
//! whitespace as ptxas does), for what the cubin does not record: whether each parameter is an
//! integer, a float or bytes, declared `.ptr`, and its alignment. [`Module::kernel`] refuses a kernel,
//! in one line, wherever the text and the cubin disagree on the count of parameters, on any size, or on
//! an alignment, and wherever the driver disagrees with the cubin: `cuFuncGetParamCount` where the
//! driver has it (CUDA 13.2), and `cuFuncGetParamInfo` for every parameter the cubin records. Only
//! those: asking `cuFuncGetParamInfo` for the index past the last and requiring it to fail would
//! also find the count, but that failing call is an error compute-sanitizer reports in every program
//! that loads a kernel, and `cargo xtask sanitize` holds every lesson clean. Each parameter's offset
//! and the parameter space's size are kept too (`Param::offset`, `Kernel::param_bytes`), for a launch
//! that packs its arguments into one buffer of exactly that layout.
//!
//! # Pointer or value
//!
//! nvcc's PTX marks no pointer `.ptr`: `float* x` and `unsigned long long n` are both `.param .u64`.
//! Where the kernel's C prototype is given ([`crate::Gpu::load_ptx_with_prototypes`], or a `.cu` file
//! beside the one [`crate::Gpu::load_ptx_file`] loads), a view passed for a value, or a value for a
//! pointer, is refused too (`common/src/prototype.rs` says how the prototype is read). Without one, a 64-bit
//! integer parameter takes either: the width and kind are checked, pointer against value is not.

use std::{
    ffi::{c_uint, c_void, CStr, CString},
    marker::PhantomData,
    sync::Arc,
};

use anyhow::{anyhow, bail, Context as _};

pub(crate) use crate::ptx::{Class, Pointer};
use crate::{
    context::Context,
    cubin,
    ffi::{self, check},
    memory::Element,
    prototype, ptx,
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

/// A PTX module loaded on a GPU ([`crate::Gpu::load_ptx`]): the cubin the driver compiled of it, with
/// each kernel's parameters as that cubin records them and as the PTX text declares them.
pub struct Module {
    loaded: Arc<Loaded>,
    /// Each kernel's parameters as the PTX text declares them, or why the text cannot be read.
    entries: Result<Vec<ptx::Entry>, String>,
    /// Each kernel's parameter layout as the loaded cubin records it, or why the cubin cannot be read.
    layouts: Result<cubin::Kernels, String>,
    /// Where the kernels' C prototypes came from, and which of each kernel's parameters are pointers.
    prototypes: Option<(String, prototype::Kernels)>,
}

impl Module {
    /// Compiles and links `ptx` for the context's GPU, reads the cubin it makes, and loads that cubin.
    /// `prototypes` is C source declaring the kernels, and where it came from (for messages).
    pub(crate) fn load(
        ctx: &Arc<Context>,
        ptx: &str,
        what: &str,
        prototypes: Option<(String, &str)>,
    ) -> anyhow::Result<Module> {
        let text = CString::new(ptx).with_context(|| format!("{what} has a NUL byte"))?;
        ctx.make_current()?;
        let cubin = jit_link(&text, what)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: a cubin image the driver's own linker made (8-byte aligned), and a valid out-pointer;
        // the context is current. Loading only places the code; nothing runs until a launch.
        check(unsafe { ffi::cuModuleLoadData(&mut raw, cubin.as_ptr().cast()) }, || {
            format!("loading the cubin the driver compiled of {what}")
        })?;
        let loaded = Arc::new(Loaded { raw, ctx: ctx.clone() });
        let layouts = cubin::kernels(bytes(&cubin));
        let prototypes = prototypes.map(|(from, source)| (from, prototype::kernels(source)));
        Ok(Module { loaded, entries: ptx::entries(ptx), layouts, prototypes })
    }

    /// The kernel `name` (declare it `extern "C"` in CUDA C++, so that its name is not mangled), with
    /// its parameters as the driver compiled them. Refused, in one line, where the PTX text and the
    /// driver's account of its parameters disagree (see the [module's documentation](self)), or where
    /// its C prototype, if given, disagrees with the PTX.
    pub fn kernel(&self, name: &str) -> anyhow::Result<Kernel> {
        let entries = self.entries.as_ref().map_err(|why| anyhow!("kernel {name}: the PTX cannot be read: {why}"))?;
        let Some(entry) = entries.iter().find(|e| e.name == name) else {
            let names: Vec<&str> = self.kernel_names().collect();
            bail!(
                "the PTX has no kernel named {name} (it has: {}; declare kernels extern \"C\" so that their names \
                 are not mangled)",
                if names.is_empty() { "none".into() } else { names.join(", ") }
            );
        };
        let text = entry.params.as_ref().map_err(|why| anyhow!("kernel {name}: {why}"))?;
        let layout = match &self.layouts {
            Err(why) => bail!("kernel {name}: the cubin the driver compiled cannot be read: {why}"),
            Ok(layouts) => match layouts.iter().find(|(n, _)| n == name) {
                None => bail!("kernel {name}: the cubin the driver compiled has no parameter records of it"),
                Some((_, Err(why))) => bail!("kernel {name}: the cubin the driver compiled: {why}"),
                Some((_, Ok(layout))) => layout,
            },
        };
        let prototype = self.prototypes.as_ref().and_then(|(from, kernels)| {
            kernels.iter().find(|(n, _)| n == name).map(|(_, pointers)| (from.as_str(), pointers.as_slice()))
        });
        let params = params(text, layout, prototype).map_err(|why| anyhow!("kernel {name}: {why}"))?;
        let c_name = CString::new(name).context("a kernel name with a NUL byte")?;
        let mut func = std::ptr::null_mut();
        self.loaded.ctx.make_current()?;
        // SAFETY: a loaded module, a NUL-terminated name and a valid out-pointer.
        check(unsafe { ffi::cuModuleGetFunction(&mut func, self.loaded.raw, c_name.as_ptr()) }, || {
            format!("finding kernel {name}")
        })?;
        if let Err(why) = driver_agrees(func, layout)? {
            bail!("kernel {name}: {why}: refusing to check launches against a misreading");
        }
        Ok(Kernel {
            name: name.into(),
            func,
            params: params.into(),
            param_bytes: layout.bytes,
            module: self.loaded.clone(),
        })
    }

    /// The names of the kernels the PTX defines (`.entry`).
    pub fn kernel_names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().flatten().map(|e| e.name.as_str())
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kernel_names()).finish()
    }
}

/// A cubin image, 8-byte aligned.
fn bytes(image: &[u64]) -> &[u8] {
    // SAFETY: any initialized u64s are as many initialized bytes, in the same allocation.
    unsafe { std::slice::from_raw_parts(image.as_ptr().cast(), std::mem::size_of_val(image)) }
}

/// The cubin the driver's JIT linker makes of `ptx` for the current context's GPU (8-byte aligned,
/// padded with zeros), or the driver's error with its log.
fn jit_link(ptx: &CStr, what: &str) -> anyhow::Result<Vec<u64>> {
    const LOG_BYTES: usize = 16 << 10;
    let mut log = vec![0u8; LOG_BYTES];
    let mut options = [ffi::CU_JIT_ERROR_LOG_BUFFER, ffi::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    // The size is passed by value in the pointer's place, as cuda.h documents; the driver writes back
    // how much of the log it filled there, so `values` lives as long as the link state.
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), LOG_BYTES as c_uint as usize as *mut c_void];
    let mut state = std::ptr::null_mut();
    // SAFETY: two options with their values (a buffer of LOG_BYTES bytes and its size), which outlive the
    // state (dropped after `link` below), and a valid out-pointer; the context is current.
    check(unsafe { ffi::cuLinkCreate_v2(2, options.as_mut_ptr(), values.as_mut_ptr(), &mut state) }, || {
        format!("JIT-compiling {what}: starting the driver's linker")
    })?;
    let link = LinkState(state);
    let failed = |code, doing: &str, log: &[u8]| {
        let log = String::from_utf8_lossy(&log[..log.iter().position(|&c| c == 0).unwrap_or(log.len())]).into_owned();
        let log: Vec<&str> = log.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let said = if log.is_empty() { String::new() } else { format!(" (the driver says: {})", log.join("; ")) };
        anyhow::Error::from(ffi::DriverError { code, doing: format!("JIT-compiling {what}: {doing}{said}") })
    };
    let input = ptx.to_bytes_with_nul();
    let name = CString::new(what).unwrap_or_else(|_| c"the PTX".into());
    // SAFETY: the NUL-terminated PTX and its length with the NUL, a NUL-terminated name, no options; the
    // driver keeps no reference to the input after the call.
    let code = unsafe {
        ffi::cuLinkAddData_v2(
            link.0,
            ffi::CU_JIT_INPUT_PTX,
            input.as_ptr() as *mut c_void,
            input.len(),
            name.as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if code != ffi::SUCCESS {
        return Err(failed(code, "compiling the PTX", &log));
    }
    let (mut image, mut size) = (std::ptr::null_mut(), 0usize);
    // SAFETY: a link state with its input added, and two valid out-pointers.
    let code = unsafe { ffi::cuLinkComplete(link.0, &mut image, &mut size) };
    if code != ffi::SUCCESS {
        return Err(failed(code, "linking", &log));
    }
    if image.is_null() || size == 0 {
        bail!("JIT-compiling {what}: the driver's linker made an empty cubin");
    }
    let mut cubin = vec![0u64; size.div_ceil(8)];
    // SAFETY: the driver's image is `size` bytes, owned by the link state (alive until `link` is dropped,
    // below); `cubin` holds at least `size` bytes; they do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(image as *const u8, cubin.as_mut_ptr().cast::<u8>(), size) };
    drop(link);
    Ok(cubin)
}

/// A JIT linker invocation, destroyed on drop.
struct LinkState(ffi::CUlinkState);

impl Drop for LinkState {
    fn drop(&mut self) {
        // SAFETY: created once by cuLinkCreate, destroyed once; its cubin has been copied out.
        unsafe { ffi::cuLinkDestroy(self.0) };
    }
}

/// The kernel's parameters: the PTX text's reading held against the cubin's records
/// ([`cubin::agree`]), and each one's pointer-ness from `.ptr` or the C prototype (`prototype`: where it
/// came from, and which parameters it declares pointers).
fn params(
    text: &[ptx::TextParam],
    layout: &cubin::Layout,
    prototype: Option<(&str, &[Pointer])>,
) -> Result<Vec<Param>, String> {
    cubin::agree(text, layout)?;
    if let Some((from, pointers)) = prototype {
        if pointers.len() != text.len() {
            return Err(format!(
                "its prototype in {from} has {} parameters, but the PTX {}: is the PTX made from another version \
                 of it?",
                pointers.len(),
                text.len()
            ));
        }
    }
    text.iter()
        .zip(&layout.params)
        .enumerate()
        .map(|(i, (t, r))| {
            let said = prototype.map(|(from, pointers)| (from, pointers[i]));
            let pointer = match (t.ptr, said) {
                (true, Some((from, Pointer::No))) => {
                    return Err(format!(
                        "the PTX declares parameter {i} {}, but its prototype in {from} a value",
                        t.ptx
                    ))
                }
                (true, _) => Pointer::Yes,
                (false, Some((from, Pointer::Yes))) if !(t.size == 8 && t.class == Class::Int) => {
                    return Err(format!(
                        "its prototype in {from} declares parameter {i} a pointer, but the PTX {}",
                        t.ptx
                    ))
                }
                (false, Some((_, said))) => said,
                (false, None) => Pointer::Unknown,
            };
            Ok(Param { ptx: t.ptx.clone(), offset: r.offset, size: r.size, align: t.align, class: t.class, pointer })
        })
        .collect()
}

/// Whether the driver's account of the function agrees with its cubin's records: its count
/// (`cuFuncGetParamCount`, where the driver has it), and each recorded parameter's offset and size
/// (`cuFuncGetParamInfo`, never asked past the last record). The outer error is a driver call's.
fn driver_agrees(func: ffi::CUfunction, layout: &cubin::Layout) -> anyhow::Result<Result<(), String>> {
    if let Ok(count) = ffi::func_param_count() {
        let mut n = 0usize;
        // SAFETY: the driver's cuFuncGetParamCount, a function of a loaded module and a valid out-pointer.
        check(unsafe { count(func, &mut n) }, || "reading a kernel's parameter count".into())?;
        if n != layout.params.len() {
            return Ok(Err(format!("the driver counts {n} parameters, but its cubin records {}", layout.params.len())));
        }
    }
    for r in &layout.params {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: a function of a loaded module, an index below the count its cubin records, and two
        // valid out-pointers.
        let code = unsafe { ffi::cuFuncGetParamInfo(func, r.ordinal as usize, &mut offset, &mut size) };
        check(code, || format!("reading parameter {} of a kernel", r.ordinal))?;
        if (offset, size) != (r.offset as usize, r.size as usize) {
            return Ok(Err(format!(
                "the driver places parameter {} at byte {offset} ({size} bytes), its cubin at byte {} ({} bytes)",
                r.ordinal, r.offset, r.size
            )));
        }
    }
    Ok(Ok(()))
}

/// A kernel of a loaded [`Module`], with its parameters as the PTX declares them. It keeps the module
/// loaded; clone it freely.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) name: Arc<str>,
    func: ffi::CUfunction,
    /// Its parameters, as many as the compiled cubin records, each of the size recorded there.
    pub(crate) params: Arc<[Param]>,
    /// The size of its parameter space in bytes, from the compiled cubin.
    #[allow(dead_code, reason = "for a launch that packs its arguments into one buffer")]
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
    /// Whether a parameter can take this argument: its width and kind, and, where known, whether it is
    /// a pointer.
    fn fits(&self, p: &Param) -> bool {
        self.fits_width(p)
            && match self {
                Arg::Ptr(_) => p.pointer != Pointer::No,
                Arg::U32(_) | Arg::I32(_) | Arg::U64(_) | Arg::I64(_) => p.pointer != Pointer::Yes,
                Arg::F32(_) | Arg::F64(_) => true,
            }
    }

    /// Whether a parameter takes an argument of this width and kind.
    fn fits_width(&self, p: &Param) -> bool {
        match self {
            Arg::Ptr(_) | Arg::U64(_) | Arg::I64(_) => p.size == 8 && p.class == Class::Int,
            Arg::U32(_) | Arg::I32(_) => p.size == 4 && p.class == Class::Int,
            Arg::F32(_) => p.size == 4 && p.class == Class::Float,
            Arg::F64(_) => p.size == 8 && p.class == Class::Float,
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

    /// Why `p` cannot take this argument, in words (for one that does not fit).
    fn mismatch(&self, i: usize, p: &Param) -> String {
        let declared = match p.pointer {
            // Only the prototype can have said so: the width and kind fit.
            Pointer::Yes if self.fits_width(p) && !p.ptx.contains(".ptr") => {
                format!("the kernel's prototype declares it a pointer ({})", p.ptx)
            }
            Pointer::No if self.fits_width(p) => format!("the kernel's prototype declares it a value ({})", p.ptx),
            _ => format!("the PTX declares it {}", p.ptx),
        };
        format!("argument {i} is {}, but {declared}", self.describe())
    }
}

/// A kernel parameter: its type as the PTX text declares it (`.u64`, `.u64 .ptr .global`, `.b8[16]`),
/// its place and size as the compiled cubin records them, and whether it is a pointer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Param {
    /// The type as PTX spells it, for messages: `.u64`, `.f32`, `.b8[16]`, `.u64 .ptr .global`.
    pub ptx: String,
    /// Its byte offset in the parameter space, from the compiled cubin.
    #[allow(dead_code, reason = "for a launch that packs its arguments into one buffer")]
    pub offset: u32,
    /// Its size in bytes, from the compiled cubin (the text's, or the kernel was refused).
    pub size: u32,
    /// Its alignment, from the text (its `.align`, or the type's own size), held against the cubin.
    #[allow(dead_code, reason = "for a launch that packs its arguments into one buffer")]
    pub align: u32,
    /// What it holds: an integer, a float, or bytes (an array, a struct).
    pub class: Class,
    /// Whether it is a pointer: declared `.ptr`, or by the kernel's C prototype.
    pub pointer: Pointer,
}

/// The parameter types of kernel `name` as the PTX text declares them (`.u64`, `.f32`, `.b8[16]`;
/// without `.ptr`), or why the text or the kernel cannot be read; `None` where the PTX has no such
/// kernel. For checking a PTX file before any GPU is started: [`Module::kernel`] holds this reading
/// against the cubin the driver compiles.
pub fn signature(ptx: &str, name: &str) -> Option<Result<Vec<String>, String>> {
    match ptx::entries(ptx) {
        Err(why) => Some(Err(why)),
        Ok(entries) => {
            let entry = entries.into_iter().find(|e| e.name == name)?;
            Some(entry.params.map(|ps| ps.into_iter().map(|p| p.ty).collect()))
        }
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
            self.args
                .iter()
                .zip(params.iter())
                .enumerate()
                .find(|(_, (a, p))| !a.fits(p))
                .map(|(i, (a, p))| a.mismatch(i, p))
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
        // SAFETY: `params` points at one value per parameter of the function, each of the size the
        // driver compiled it with: build() held the arguments to the kernel's parameters, which are as
        // many as its loaded cubin records, each of the recorded size (Module::kernel refuses a kernel
        // whose driver or PTX text disagrees), and a launch that failed the check never reaches here,
        // so the driver reads no entry past the array nor a byte past any value; every pointer
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
    use cubin::{Layout, Record};

    /// `(ptx, size, align, class, ptr)` as the text reads it, with the layout a cubin would record.
    fn kernel(ptx: &str) -> (Vec<ptx::TextParam>, Layout) {
        let entry = ptx::entries(ptx).unwrap().remove(0);
        let text = entry.params.unwrap();
        let mut end = 0u32;
        let records = text
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let offset = end.next_multiple_of(t.align);
                end = offset + t.size;
                Record { ordinal: i as u32, offset, size: t.size }
            })
            .collect();
        (text, Layout { params: records, bytes: end, bank_offset: Some(0x210) })
    }

    const SAXPY: &str = ".visible .entry saxpy(.param .u64 x, .param .u64 .ptr .global .align 4 y, .param .f32 a, \
                         .param .u32 n, .param .align 8 .b8 s[16]) { ret; }";

    #[test]
    fn parameters_are_the_cubins_with_the_texts_kinds() {
        let (text, layout) = kernel(SAXPY);
        let p = params(&text, &layout, None).unwrap();
        let shape: Vec<(&str, u32, u32, Class, Pointer)> =
            p.iter().map(|p| (p.ptx.as_str(), p.offset, p.size, p.class, p.pointer)).collect();
        assert_eq!(
            shape,
            [
                (".u64", 0, 8, Class::Int, Pointer::Unknown),
                (".u64 .ptr .global", 8, 8, Class::Int, Pointer::Yes),
                (".f32", 16, 4, Class::Float, Pointer::Unknown),
                (".u32", 20, 4, Class::Int, Pointer::Unknown),
                (".b8[16]", 24, 16, Class::Bytes, Pointer::Unknown),
            ]
        );
        let protos = [Pointer::Yes, Pointer::Yes, Pointer::No, Pointer::No, Pointer::Unknown];
        let p = params(&text, &layout, Some(("k.cu", &protos))).unwrap();
        assert_eq!(p.iter().map(|p| p.pointer).collect::<Vec<_>>(), protos);
    }

    #[test]
    fn a_text_and_a_cubin_that_disagree_are_refused() {
        let (text, mut layout) = kernel(SAXPY);
        let mut more = layout.clone();
        more.params.push(Record { ordinal: 5, offset: 40, size: 8 });
        more.bytes = 48;
        let e = params(&text, &more, None).unwrap_err();
        assert!(e.contains("the PTX text declares 5 parameters, but the driver compiled 6"), "{e}");
        layout.params[2].size = 8;
        let e = params(&text, &layout, None).unwrap_err();
        assert!(e.contains("reads parameter 2 as .f32, 4 bytes, but the driver compiled 8"), "{e}");
        let (text, mut layout) = kernel(SAXPY);
        layout.params[4].offset = 28;
        let e = params(&text, &layout, None).unwrap_err();
        assert!(e.contains("aligns parameter 4 (.b8[16]) to 8 bytes, but the driver placed it at byte 28"), "{e}");
        let (text, layout) = kernel(SAXPY);
        let e = params(&text, &layout, Some(("k.cu", &[Pointer::Yes; 4]))).unwrap_err();
        assert!(e.contains("its prototype in k.cu has 4 parameters, but the PTX 5"), "{e}");
        let e = params(&text, &layout, Some(("k.cu", &[Pointer::No; 5]))).unwrap_err();
        assert!(e.contains("the PTX declares parameter 1 .u64 .ptr .global, but its prototype in k.cu a value"), "{e}");
        let e = params(
            &text,
            &layout,
            Some(("k.cu", &[Pointer::Unknown, Pointer::Unknown, Pointer::Yes, Pointer::Unknown, Pointer::Unknown])),
        )
        .unwrap_err();
        assert!(e.contains("declares parameter 2 a pointer, but the PTX .f32"), "{e}");
    }

    #[test]
    fn arguments_fit_by_kind_width_and_pointer() {
        let (text, layout) = kernel(
            ".entry k(.param .u64 x, .param .u64 .ptr .global y, .param .s32 z, .param .f64 w, .param .u8 b, .param .b8 s[8]) { ret; }",
        );
        let p = params(&text, &layout, None).unwrap();
        assert!(Arg::Ptr(0).fits(&p[0]));
        assert!(Arg::U64(1).fits(&p[0]), "a pointer and a 64-bit count look alike in PTX");
        assert!(!Arg::U64(1).fits(&p[1]), "but .ptr says which");
        assert_eq!(Arg::U64(1).mismatch(1, &p[1]), "argument 1 is u64, but the PTX declares it .u64 .ptr .global");
        assert!(!Arg::U32(1).fits(&p[0]));
        assert!(!Arg::F32(1.0).fits(&p[2]));
        assert!(Arg::I32(-1).fits(&p[2]));
        assert!(Arg::F64(1.0).fits(&p[3]));
        assert!(
            !Arg::U32(1).fits(&p[4]) && !Arg::Ptr(0).fits(&p[5]) && !Arg::U64(0).fits(&p[5]),
            "no argument passes these"
        );
        let protos = [Pointer::Yes, Pointer::Yes, Pointer::No, Pointer::No, Pointer::No, Pointer::No];
        let p = params(&text, &layout, Some(("k.cu", &protos))).unwrap();
        assert!(!Arg::U64(1).fits(&p[0]));
        assert_eq!(
            Arg::U64(1).mismatch(0, &p[0]),
            "argument 0 is u64, but the kernel's prototype declares it a pointer (.u64)"
        );
        let (text, layout) = kernel(".entry k(.param .u64 n) { ret; }");
        let p = params(&text, &layout, Some(("k.cu", &[Pointer::No]))).unwrap();
        assert_eq!(
            Arg::Ptr(0).mismatch(0, &p[0]),
            "argument 0 is a device view, but the kernel's prototype declares it a value (.u64)"
        );
        assert_eq!(Arg::F32(0.0).mismatch(0, &p[0]), "argument 0 is f32, but the PTX declares it .u64");
    }

    #[test]
    fn signatures_without_a_gpu() {
        let ptx = include_str!("../tests/ptx/kernels.ptx");
        assert_eq!(signature(ptx, "saxpy"), Some(Ok(vec![".u64".into(), ".u64".into(), ".f32".into(), ".u64".into()])));
        assert_eq!(signature(ptx, "nope"), None);
        assert_eq!(
            signature(".entry k(.param .u64 .ptr x, .param .b8 s[4]) { ret; }", "k"),
            Some(Ok(vec![".u64".into(), ".b8[4]".into()]))
        );
        assert!(signature("#line 1 \"x\"", "k").unwrap().is_err());
    }

    #[test]
    fn grids_for_elements() {
        assert_eq!(LaunchConfig::for_elements(1000, 256).grid, (4, 1, 1));
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, (1, 1, 1), "at least one block");
        assert_eq!(LaunchConfig::for_elements(usize::MAX, 256).grid.0, u32::MAX, "refused when queued");
    }
}
