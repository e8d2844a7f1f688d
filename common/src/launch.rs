//! Launches of any kernel: a builder bound to the stream (or graph) it will queue on, that takes the
//! arguments in the kernel's order, each declared as a view the kernel reads, a view it writes, or a
//! value, and one `unsafe` call that queues it.
//!
//! ```no_run
//! # fn main() -> cuda_scope::Result<()> {
//! # use cuda_scope::LaunchConfig;
//! # let gpu = cuda_scope::Gpu::init()?;
//! # let saxpy = gpu.load_ptx_file("saxpy.ptx")?.kernel("saxpy")?;
//! # let streams = gpu.streams(1)?;
//! # let (mut x, mut y) = (gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
//! gpu.scope(&streams, |s| {
//!     let (x, y) = (s.device(&mut x), s.device(&mut y));
//!     let cfg = LaunchConfig::for_elements(y.len(), 256);
//!     // SAFETY: saxpy(const float* x, float* y, float a, unsigned long long n) reads x[0..n) and
//!     // writes y[0..n), nothing else.
//!     unsafe { s.stream(0).kernel(&saxpy, cfg).read(x).write(y).value(2.0f32).value(y.len() as u64).launch() }
//! })?;
//! # Ok(()) }
//! ```
//!
//! Each argument is held against the kernel's parameter as it is given: its size and offset as the
//! driver compiled them (see [`crate::module`]), whether it is a number or a float as the PTX declares
//! it, and pointer or value where the PTX (`.ptr`) or the kernel's C prototype says. The first mismatch
//! refuses the launch, in one line, before anything is queued. The arguments are packed into one buffer
//! by the driver's offsets and passed as that buffer and its size (`CU_LAUNCH_PARAM_BUFFER_POINTER`,
//! `CU_LAUNCH_PARAM_BUFFER_SIZE`): the driver reads only that buffer, and refuses one of another size
//! than the kernel's parameters, so no argument list can be read past its end.

use std::marker::PhantomData;

use smallvec::SmallVec;

use crate::{
    error::{LaunchRefusal, LaunchRefused},
    ffi::{self, CuResult},
    memory::Element,
    module::{Class, Kernel, Param, Pointer},
    view::{Dev, DevAccess, DevRead, Invariant},
};

/// A launch's grid, block and dynamic shared memory: `<<<grid, block, shared_bytes>>>`.
///
/// ```
/// use cuda_scope::LaunchConfig;
/// let cfg = LaunchConfig { shared_bytes: 256 * 4, ..LaunchConfig::for_elements(1 << 20, 256) };
/// assert_eq!((cfg.grid, cfg.block), ((4096, 1, 1), (256, 1, 1))); // <<<4096, 256, 1024>>>
/// ```
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
    ///
    /// ```
    /// let cfg = cuda_scope::LaunchConfig::for_elements(1000, 256);
    /// assert_eq!(cfg.grid.0, 4); // 1024 threads for 1000 elements: the kernel checks i < n
    /// ```
    pub fn for_elements(n: usize, block: u32) -> LaunchConfig {
        let blocks = n.div_ceil(block.max(1) as usize).max(1);
        LaunchConfig { grid: (u32::try_from(blocks).unwrap_or(u32::MAX), 1, 1), block: (block, 1, 1), shared_bytes: 0 }
    }

    /// `blocks` blocks of `block` threads.
    ///
    /// ```
    /// let cfg = cuda_scope::LaunchConfig::linear(512, 256); // a fixed grid, for a grid-stride loop
    /// assert_eq!((cfg.grid.0, cfg.block.0), (512, 256));
    /// ```
    pub fn linear(blocks: u32, block: u32) -> LaunchConfig {
        LaunchConfig { grid: (blocks, 1, 1), block: (block, 1, 1), shared_bytes: 0 }
    }

    /// Why the GPU cannot run this configuration, if it cannot.
    fn refusal(&self) -> Option<LaunchRefusal> {
        let (g, b) = (self.grid, self.block);
        let bad_grid = g.0 > i32::MAX as u32 || g.1 > 65535 || g.2 > 65535 || g.0 == 0 || g.1 == 0 || g.2 == 0;
        (bad_grid || b.0 == 0 || b.1 == 0 || b.2 == 0).then_some(LaunchRefusal::Config { grid: g, block: b })
    }
}

/// A value a kernel takes by value: `u32`, `i32`, `u64`, `i64`, `f32`, `f64`. Sealed: what a value
/// is named, whether it is a float and how its bytes are written are items of a trait no other crate
/// can name, so no other type can be passed by value.
///
/// ```
/// use cuda_scope::{LaunchBuilder, Value};
/// /// `a` and `n`, the kernel's last two parameters: `a` an `f32` or `f64`, as the kernel was compiled.
/// fn scaled<'q, 's, V: Value>(launch: LaunchBuilder<'q, 's>, a: V, n: usize) -> LaunchBuilder<'q, 's> {
///     launch.value(a).value(n as u64)
/// }
/// ```
pub trait Value: Copy + sealed::ValueBytes {}

/// The seals: public traits in a private module, so that no other crate can name them, and so none can
/// implement [`Value`] or [`Queue`] (a `Queue` of its own could hand a launcher a builder of another
/// kernel than the one the launcher promised about).
pub(crate) mod sealed {
    /// What [`super::Value`] needs of a value, out of other crates' reach.
    pub trait ValueBytes {
        /// The Rust name, for refusals: `u32`.
        const NAME: &'static str;
        /// Whether the PTX must declare the parameter a float.
        const FLOAT: bool;
        /// Writes the value's bytes into `out` (its size).
        fn put(self, out: &mut [u8]);
    }

    /// The seal of [`super::Queue`]: implemented by the scope's streams and the graph builder alone.
    pub trait QueueSealed {}
}

macro_rules! value {
    ($($t:ty => $float:expr),*) => {$(
        impl sealed::ValueBytes for $t {
            const NAME: &'static str = stringify!($t);
            const FLOAT: bool = $float;
            fn put(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_ne_bytes());
            }
        }
        impl Value for $t {}
    )*};
}
value!(u32 => false, i32 => false, u64 => false, i64 => false, f32 => true, f64 => true);

/// Where a launch is queued: a stream of a scope ([`crate::ScopeStream`]) or a graph being captured
/// ([`crate::GraphBuilder`]). For code that launches on either, as the lessons' kernels do. Sealed.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # use cuda_scope::LaunchConfig;
/// # let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?.kernel("saxpy")?;
/// # let (streams, mut x, mut y) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
/// use cuda_scope::{Dev, Kernel, Queue};
/// /// saxpy on a stream of a scope, or captured into a graph: the same code for both.
/// fn saxpy_on<'s>(q: impl Queue<'s>, k: &Kernel, x: Dev<'s, f32>, y: Dev<'s, f32>) -> cuda_scope::Result<()> {
///     let launch = q.kernel(k, LaunchConfig::for_elements(y.len(), 256));
///     // SAFETY: saxpy(const float* x, float* y, float a, unsigned long long n) reads x[0..n), writes y[0..n).
///     unsafe { launch.read(x).write(y).value(2f32).value(1024u64).launch() }
/// }
/// gpu.scope(&streams, |s| {
///     let (x, y) = (s.device(&mut x), s.device(&mut y));
///     saxpy_on(s.stream(0), &saxpy, x, y)?; // queued now
///     let again = s.graph(|g| saxpy_on(g, &saxpy, x, y))?; // captured, to replay
///     s.stream(0).replay(&again)
/// })?;
/// # Ok(()) }
/// ```
pub trait Queue<'scope>: sealed::QueueSealed {
    /// A launch of `kernel` with `config` on this queue: declare its arguments, then
    /// [`LaunchBuilder::launch`].
    fn kernel<'q>(&'q self, kernel: &'q Kernel, config: LaunchConfig) -> LaunchBuilder<'q, 'scope>;
}

/// What a queue does with a launch whose arguments are checked ([`Checked`]): order it against the
/// other streams by its accesses, and call its `queue` on the stream it goes on.
pub(crate) trait Enqueue<'scope> {
    fn scope_id(&self) -> u64;
    fn launch(&self, launch: Checked<'_>) -> crate::Result<()>;
}

/// A launch whose arguments are checked, for its queue to order and queue: the stream it goes on (for
/// a scope, its index), the kernel, the device ranges it reads and writes, and the call that queues it
/// on a driver stream.
pub(crate) struct Checked<'a> {
    pub stream: usize,
    pub kernel: &'a Kernel,
    pub accesses: &'a [DevAccess],
    pub queue: &'a mut dyn FnMut(ffi::CUstream) -> CuResult,
}

/// A launch being declared ([`crate::ScopeStream::kernel`]): each argument in the kernel's order, then
/// [`LaunchBuilder::launch`].
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # use cuda_scope::LaunchConfig;
/// # let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?.kernel("saxpy")?;
/// # let (streams, mut x, mut y) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
/// gpu.scope(&streams, |s| {
///     let (x, y) = (s.device(&mut x), s.device(&mut y));
///     let launch = s.stream(0).kernel(&saxpy, LaunchConfig::for_elements(y.len(), 256));
///     let launch = launch.read(x).write(y).value(2.0f32).value(y.len() as u64); // in the kernel's order
///     // SAFETY: saxpy reads x[0..n) and writes y[0..n), nothing else.
///     unsafe { launch.launch() }
/// })?;
/// # Ok(()) }
/// ```
pub struct LaunchBuilder<'q, 'scope> {
    queue: &'q dyn Enqueue<'scope>,
    stream: usize,
    kernel: &'q Kernel,
    config: LaunchConfig,
    /// The parameter buffer, 8-byte words, laid out by the driver's offsets.
    params: SmallVec<[u64; 8]>,
    /// Arguments given so far.
    given: usize,
    accesses: SmallVec<[DevAccess; 4]>,
    invalid: Option<LaunchRefusal>,
    _scope: Invariant<'scope>,
}

impl<'q, 'scope> LaunchBuilder<'q, 'scope> {
    pub(crate) fn new(
        (queue, stream): (&'q dyn Enqueue<'scope>, usize),
        kernel: &'q Kernel,
        config: LaunchConfig,
    ) -> Self {
        let words = (kernel.param_bytes as usize).div_ceil(8);
        LaunchBuilder {
            queue,
            stream,
            kernel,
            config,
            params: SmallVec::from_elem(0, words),
            given: 0,
            accesses: SmallVec::new(),
            invalid: None,
            _scope: PhantomData,
        }
    }

    /// A view the kernel reads (and does not write): a `const T*` parameter.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # use cuda_scope::LaunchConfig;
    /// # let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?.kernel("saxpy")?;
    /// # let (streams, mut x, mut y) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
    /// gpu.scope(&streams, |s| {
    ///     let (x, y) = (s.device(&mut x), s.device(&mut y));
    ///     let launch = s.stream(0).kernel(&saxpy, LaunchConfig::for_elements(1024, 256));
    ///     // SAFETY: saxpy(const float* x, float* y, float a, unsigned long long n) reads x and writes y.
    ///     unsafe { launch.read(x).write(y).value(2f32).value(1024u64).launch() }
    /// })?; // x declared read: other streams' reads of it need not wait for this launch
    /// # Ok(()) }
    /// ```
    pub fn read<T: Element>(mut self, view: impl Into<DevRead<'scope, T>>) -> Self {
        let view = *view.into().view();
        self.accesses.push(view.access(false));
        self.pointer(view.ptr());
        self
    }

    /// A view the kernel writes, and may read: a `T*` parameter.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # use cuda_scope::LaunchConfig;
    /// # let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?.kernel("saxpy")?;
    /// # let (streams, mut x, mut y) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
    /// # let mut out = vec![0f32; 1024];
    /// gpu.scope(&streams, |s| {
    ///     let (x, y) = (s.device(&mut x), s.device(&mut y));
    ///     let launch = s.stream(0).kernel(&saxpy, LaunchConfig::for_elements(1024, 256));
    ///     // SAFETY: saxpy reads x[0..n) and writes y[0..n), nothing else.
    ///     unsafe { launch.read(x).write(y).value(2f32).value(1024u64).launch()? };
    ///     s.stream(0).dtoh(y, &mut out) // y declared written: work on it on another stream would wait
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn write<T: Element>(mut self, view: Dev<'scope, T>) -> Self {
        self.accesses.push(view.access(true));
        self.pointer(view.ptr());
        self
    }

    /// A value passed by value: `u32` (for `unsigned int`), `i32` (`int`), `u64` (for `size_t` and
    /// `unsigned long long`), `i64`, `f32`, `f64`.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # use cuda_scope::LaunchConfig;
    /// # let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?.kernel("saxpy")?;
    /// # let (streams, mut x, mut y) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
    /// gpu.scope(&streams, |s| {
    ///     let (x, y) = (s.device(&mut x), s.device(&mut y));
    ///     let launch = s.stream(0).kernel(&saxpy, LaunchConfig::for_elements(1024, 256)).read(x).write(y);
    ///     // SAFETY: saxpy reads x[0..n) and writes y[0..n). `float a` takes an f32, `unsigned long long n`
    ///     // a u64: a u32 for `n` would be refused, its size not the parameter's.
    ///     unsafe { launch.value(2.0f32).value(1024u64).launch() }
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn value<V: Value>(mut self, v: V) -> Self {
        let size = std::mem::size_of::<V>();
        if let Some(at) = self.next(V::NAME, value_refusal::<V>) {
            v.put(&mut bytes_mut(&mut self.params)[at..at + size]);
        }
        self
    }

    /// Refuses the launch, saying why, when it is launched: for checks of a launcher's own (lengths
    /// that must agree, say).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # use cuda_scope::LaunchConfig;
    /// # let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?.kernel("saxpy")?;
    /// # let (streams, mut x, mut y) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
    /// gpu.scope(&streams, |s| {
    ///     let (x, y) = (s.device(&mut x), s.device(&mut y));
    ///     let mut launch = s.stream(0).kernel(&saxpy, LaunchConfig::for_elements(y.len(), 256));
    ///     if x.len() != y.len() {
    ///         launch = launch.refuse(format!("x has {} elements and y {}", x.len(), y.len()));
    ///     }
    ///     // SAFETY: saxpy reads x[0..n) and writes y[0..n), nothing else; n is both lengths (checked above).
    ///     unsafe { launch.read(x).write(y).value(2.0f32).value(y.len() as u64).launch() }
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn refuse(mut self, why: impl Into<String>) -> Self {
        self.invalid.get_or_insert(LaunchRefusal::ByLauncher(why.into()));
        self
    }

    /// A device address for the next parameter.
    fn pointer(&mut self, address: u64) {
        if let Some(at) = self.next("a device view", view_refusal) {
            bytes_mut(&mut self.params)[at..at + 8].copy_from_slice(&address.to_ne_bytes());
        }
    }

    /// Takes the next argument, `what`, checked by `refuse` against its parameter: where it goes in
    /// the buffer, or `None` (and the launch refused) where it does not fit or there is no such parameter.
    fn next(&mut self, what: &str, refuse: impl FnOnce(&Param) -> Option<Mismatch>) -> Option<usize> {
        let i = self.given;
        self.given += 1;
        let p = self.kernel.params.get(i)?; // too many: the count says so at launch
        match refuse(p) {
            None => Some(p.offset as usize),
            Some(Mismatch { takes, by_prototype }) => {
                let given = what.to_string();
                self.invalid.get_or_insert(LaunchRefusal::Argument { index: i, given, takes, by_prototype });
                None
            }
        }
    }

    /// Queues the launch, refused before anything is queued where its arguments do not match the
    /// kernel's parameters (their number, each one's size and kind), where it reads and writes
    /// overlapping bytes, where a view is of another scope or its module of another GPU's context, and
    /// where the grid or block is one no GPU runs. Ordered like a copy by the views declared read and
    /// written.
    ///
    /// # Safety
    /// The kernel, run with this configuration and these arguments, reads only the views declared with
    /// [`LaunchBuilder::read`] and writes only those declared with [`LaunchBuilder::write`], within each
    /// view's elements. The scope holds every view's buffer and orders the launch against other work on
    /// exactly those bytes; what the kernel does beyond them nothing can see or stop, and may race with
    /// other work, corrupt memory the host is reading, or fault the context.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # use cuda_scope::LaunchConfig;
    /// # let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?.kernel("saxpy")?;
    /// # let (streams, mut x, mut y) = (gpu.streams(1)?, gpu.alloc::<f32>(1024)?, gpu.alloc::<f32>(1024)?);
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let (x, y, cfg) = (s.device(&mut x), s.device(&mut y), LaunchConfig::for_elements(1024, 256));
    ///     // SAFETY: saxpy reads x[0..n) and writes y[0..n), nothing else.
    ///     let short = unsafe { s.stream(0).kernel(&saxpy, cfg).read(x).write(y).value(2.0f32).launch() };
    ///     assert!(matches!(short, Err(cuda_scope::Error::LaunchRefused(_)))); // n is missing: nothing queued
    ///     // SAFETY: as above.
    ///     unsafe { s.stream(0).kernel(&saxpy, cfg).read(x).write(y).value(2.0f32).value(1024u64).launch() }
    /// })?;
    /// # Ok(()) }
    /// ```
    pub unsafe fn launch(self) -> crate::Result<()> {
        let k = self.kernel;
        let count = k.params.len();
        let refuse = |why| Err(LaunchRefused { kernel: k.name.to_string(), why }.into());
        if self.given != count {
            return refuse(LaunchRefusal::Count { takes: count, given: self.given });
        }
        if let Some(why) = self.invalid.or_else(|| self.config.refusal()) {
            return refuse(why);
        }
        if self.accesses.iter().any(|a| a.scope != self.queue.scope_id()) {
            return refuse(LaunchRefusal::Foreign(crate::Foreign::Scope));
        }
        let (config, mut params) = (self.config, self.params);
        let queue = &mut |stream| {
            // SAFETY: the buffer holds one value per parameter, each at the offset and of the size the
            // driver compiled (checked above, argument by argument), and is the kernel's parameter size
            // (the driver refuses any other); every pointer is a live device range lent to the scope
            // that orders this launch; the caller promised the kernel stays within them; the queue
            // checked the module's context and holds it loaded until the scope has synchronized.
            unsafe { k.enqueue(&config, bytes_mut(&mut params), stream) }
        };
        self.queue.launch(Checked { stream: self.stream, kernel: k, accesses: &self.accesses, queue })
    }
}

/// What a parameter takes that an argument is not: as the PTX declares it (`.u64 .ptr`), or as the
/// kernel's prototype does (`a value (.u64)`).
#[derive(Debug, PartialEq)]
pub(crate) struct Mismatch {
    pub takes: String,
    pub by_prototype: bool,
}

impl Mismatch {
    fn ptx(p: &Param) -> Option<Mismatch> {
        Some(Mismatch { takes: p.ptx.clone(), by_prototype: false })
    }

    fn prototype(what: &str, p: &Param) -> Option<Mismatch> {
        Some(Mismatch { takes: format!("{what} ({})", p.ptx), by_prototype: true })
    }
}

/// Why a device view (an address) cannot be passed for `p`, if it cannot.
pub(crate) fn view_refusal(p: &Param) -> Option<Mismatch> {
    if p.size != 8 || p.class != Class::Int {
        Mismatch::ptx(p)
    } else if p.pointer == Pointer::No {
        Mismatch::prototype("a value", p)
    } else {
        None
    }
}

/// Why a value of type `V` cannot be passed for `p`, if it cannot.
pub(crate) fn value_refusal<V: Value>(p: &Param) -> Option<Mismatch> {
    let fits =
        p.size as usize == std::mem::size_of::<V>() && p.class != Class::Bytes && (p.class == Class::Float) == V::FLOAT;
    match p.pointer {
        _ if !fits => Mismatch::ptx(p),
        // A pointer by the PTX's own word, or only by the prototype's.
        Pointer::Yes if p.ptx.contains(".ptr") => Mismatch::ptx(p),
        Pointer::Yes => Mismatch::prototype("a pointer", p),
        _ => None,
    }
}

/// The words of a parameter buffer as bytes.
fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding and every byte of it is initialized; u8 has no alignment; the length
    // covers exactly the words, which the returned slice borrows mutably.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

impl Kernel {
    /// `cuLaunchKernel` with the arguments in `params` (its first `param_bytes` bytes), on `stream`.
    ///
    /// # Safety
    /// `params` holds the kernel's arguments as its parameters are laid out, every pointer among them
    /// a device range the kernel may touch as it will, and the module is loaded in the stream's context.
    pub(crate) unsafe fn enqueue(&self, config: &LaunchConfig, params: &mut [u8], stream: ffi::CUstream) -> CuResult {
        let (g, b) = (config.grid, config.block);
        let mut size = self.param_bytes as usize;
        debug_assert!(params.len() >= size);
        let mut extra = [
            ffi::CU_LAUNCH_PARAM_BUFFER_POINTER,
            params.as_mut_ptr().cast(),
            ffi::CU_LAUNCH_PARAM_BUFFER_SIZE,
            (&mut size as *mut usize).cast(),
            ffi::CU_LAUNCH_PARAM_END,
        ];
        let extra = if size == 0 { std::ptr::null_mut() } else { extra.as_mut_ptr() };
        // SAFETY: as the caller promises; `extra` lists a buffer of `size` bytes and its size, as
        // cuLaunchKernel documents, or is null for a kernel without parameters.
        unsafe {
            ffi::cuLaunchKernel(
                self.func,
                g.0,
                g.1,
                g.2,
                b.0,
                b.1,
                b.2,
                config.shared_bytes,
                stream,
                std::ptr::null_mut(),
                extra,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{sealed::ValueBytes, *};

    #[test]
    fn grids_for_elements() {
        assert_eq!(LaunchConfig::for_elements(1000, 256).grid, (4, 1, 1));
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, (1, 1, 1), "at least one block");
        assert_eq!(LaunchConfig::for_elements(usize::MAX, 256).grid.0, u32::MAX, "refused when queued");
        let refused = |c: LaunchConfig| LaunchRefused { kernel: "k".into(), why: c.refusal().unwrap() }.to_string();
        assert!(refused(LaunchConfig::for_elements(usize::MAX, 256)).contains("more than a GPU runs"));
        assert_eq!(refused(LaunchConfig::linear(1, 0)), "kernel k: a block of no threads");
        assert_eq!(LaunchConfig::linear(1, 1).refusal(), None);
    }

    fn param(ptx: &str, size: u32, class: Class, pointer: Pointer) -> Param {
        Param { ptx: ptx.into(), offset: 0, size, align: size, class, pointer }
    }

    #[test]
    fn arguments_fit_by_kind_and_width() {
        let int = |size| param(".u", size, Class::Int, Pointer::Unknown);
        assert_eq!(view_refusal(&int(8)), None, "a pointer and a 64-bit count look alike in PTX");
        assert_eq!(value_refusal::<u64>(&int(8)), None);
        let ptr = param(".u64 .ptr", 8, Class::Int, Pointer::Yes);
        assert_eq!(value_refusal::<u64>(&ptr).unwrap().takes, ".u64 .ptr", ".ptr says which");
        let by_prototype = param(".u64", 8, Class::Int, Pointer::No);
        let refusal = view_refusal(&by_prototype).unwrap();
        assert_eq!((refusal.takes.as_str(), refusal.by_prototype), ("a value (.u64)", true));
        assert!(value_refusal::<u32>(&int(8)).is_some() && view_refusal(&int(4)).is_some());
        assert!(
            value_refusal::<f32>(&int(4)).is_some()
                && value_refusal::<u32>(&param(".f32", 4, Class::Float, Pointer::Unknown)).is_some()
        );
        assert_eq!(value_refusal::<i32>(&int(4)), None);
        assert_eq!(value_refusal::<f64>(&param(".f64", 8, Class::Float, Pointer::Unknown)), None);
        let bytes = param(".b8[8]", 8, Class::Bytes, Pointer::Unknown);
        assert!(value_refusal::<u64>(&bytes).is_some() && view_refusal(&bytes).is_some());
    }

    #[test]
    fn values_are_put_in_their_bytes() {
        let mut words = [0u64; 2];
        2.5f32.put(&mut bytes_mut(&mut words)[4..8]);
        7u64.put(&mut bytes_mut(&mut words)[8..16]);
        assert_eq!(f32::from_ne_bytes(bytes_mut(&mut words)[4..8].try_into().unwrap()), 2.5);
        assert_eq!(words[1], 7);
        assert!(f64::FLOAT && !i32::FLOAT && u32::NAME == "u32");
    }
}
