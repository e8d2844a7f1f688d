//! The GPU: start-up with clear errors, what it is, and everything made on it.

use std::{cell::RefCell, sync::Arc};

use serde::Serialize;

use crate::{
    coalesce::{Coalescer, CopyModel},
    context::Context,
    error::check,
    error::{refused, Error, InputError, Refusal},
    ffi::{self as sys},
    host::{fill, pin_in_place, HostAlloc, PinnedBuffer, Registered},
    memory::{memory_info, room, DeviceBuffer, DeviceRoom, Element, Footprint, ManagedBuffer},
    module::Module,
    scope::{self, Env, Observer, Observing, Scope, State},
    stream::{Event, EventPool, Stream},
};

pub use crate::context::{device_count, driver_init};

/// One GPU: its primary context, made current on the thread that starts it. Everything it makes
/// (buffers, streams, pinned memory, modules) keeps that context alive, so they may be dropped in any
/// order, before or after it.
///
/// ```no_run
///
/// # fn main() -> cuda_scope::Result<()> {
/// let gpu = cuda_scope::Gpu::init()?; // CUDA_DEVICE, or 0; a clear error without a driver or a GPU
/// println!("{}: {} SMs, {} copy engines", gpu.info.name, gpu.info.sms, gpu.info.async_engines);
/// let (host, mut d) = (gpu.pinned_from_fn(1 << 20, |i| i as f32)?, gpu.alloc::<f32>(1 << 20)?);
/// let streams = gpu.streams(1)?;
/// gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?;
/// # Ok(()) }
/// ```
pub struct Gpu {
    /// What the GPU is, read once at start-up.
    pub info: DeviceInfo,
    events: EventPool,
    observer: RefCell<Option<Observing>>,
    /// What the last scope allocated for its bookkeeping, for the next to reuse.
    spare: RefCell<Option<Box<State>>>,
    /// The kernel and model of coalesced copies, made at first need.
    coalescer: Coalescer,
    ctx: Arc<Context>,
}

/// What a program needs to know of the GPU to judge its figures.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// let info = &gpu.info;
/// if info.async_engines < 2 {
///     println!("{} cannot copy both ways at once: expect H2D and D2H to take turns", info.name);
/// }
/// let ((major, minor), (cuda, _)) = (info.compute_capability, info.driver_version);
/// println!("compute capability {major}.{minor}, a driver for CUDA {cuda}");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Serialize)]
pub struct DeviceInfo {
    /// The CUDA device ordinal (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: u32,
    /// The device's name: `NVIDIA H200`.
    pub name: String,
    /// (major, minor): (9, 0) for Hopper.
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Device memory in bytes.
    pub total_memory: usize,
    /// Copy engines that can run at the same time as kernels: 2 or more lets H2D and D2H overlap each other too.
    pub async_engines: u32,
    /// Kernels can address mapped pinned host memory (zero-copy).
    pub can_map_host_memory: bool,
    /// One address space for the host and every GPU.
    pub unified_addressing: bool,
    /// Managed memory (`cudaMallocManaged`) is available, and the CPU and this GPU may touch it at the
    /// same time (`CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`): what [`Gpu::managed`] needs.
    pub managed_memory: bool,
    /// The CUDA version the driver supports: (13, 0).
    pub driver_version: (i32, i32),
    /// `0000:1B:00.0`: where the GPU sits on the PCI bus.
    pub pci_bus_id: String,
    /// Peak device-memory bandwidth from the memory clock and bus width, when the driver reports them.
    pub memory_gbps: Option<f64>,
}

/// The `.cu` file of the same stem as the PTX file at `ptx`: beside it, or above a folder named `ptx`.
fn cu_beside(ptx: &std::path::Path) -> Option<std::path::PathBuf> {
    let beside = ptx.with_extension("cu");
    if beside.is_file() {
        return Some(beside);
    }
    let dir = ptx.parent()?;
    let above = dir.parent()?.join(ptx.file_name()?).with_extension("cu");
    (dir.file_name()? == "ptx" && above.is_file()).then_some(above)
}

impl Gpu {
    /// Starts a GPU, with errors a person can act on: the one whose ordinal the environment variable
    /// `CUDA_DEVICE` gives (`CUDA_DEVICE=1`), else device 0. The ordinal counts the devices the driver
    /// shows this process, after `CUDA_VISIBLE_DEVICES`. A value that is not a number is
    /// [`crate::Error::Input`]; an ordinal past the devices there are is [`crate::Error::NoGpu`], which
    /// says how many there are. [`Gpu::init_device`] takes the ordinal from the program instead.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// match cuda_scope::Gpu::init() {
    ///     Ok(gpu) => println!("{} ({})", gpu.info.name, gpu.info.pci_bus_id),
    ///     Err(e) if e.is_no_gpu() => println!("skipped: {e}"), // no driver, or no GPU: one line
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn init() -> crate::Result<Gpu> {
        let ordinal = match std::env::var("CUDA_DEVICE") {
            Ok(v) => v.parse().map_err(|_| InputError::Variable { name: "CUDA_DEVICE", value: v })?,
            Err(_) => 0,
        };
        Gpu::init_device(ordinal)
    }

    /// Starts GPU `ordinal` and makes its context current on this thread.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// let gpus = (0..cuda_scope::device::device_count()?)
    ///     .map(cuda_scope::Gpu::init_device)
    ///     .collect::<cuda_scope::Result<Vec<_>>>()?; // every GPU, each with its own context
    /// for gpu in &gpus {
    ///     println!("{}: {}", gpu.info.ordinal, gpu.info.name);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn init_device(ordinal: u32) -> crate::Result<Gpu> {
        let ctx = Context::primary(ordinal)?;
        let info = DeviceInfo::query(ordinal, ctx.device())?;
        Ok(Gpu {
            info,
            events: EventPool::new(&ctx),
            observer: RefCell::new(None),
            spare: RefCell::new(None),
            coalescer: Coalescer::default(),
            ctx,
        })
    }

    /// Loads a PTX module (the text of a `.ptx` file, or `include_str!` of one) into this GPU's context:
    /// the driver compiles and links it for the GPU at hand, and the cubin it makes is loaded, each
    /// kernel's parameters read from it. See [`Module`] for its kernels and how to launch them.
    ///
    /// nvcc's PTX does not say which parameters are pointers; [`Gpu::load_ptx_with_prototypes`] adds
    /// the kernels' C prototypes, so that launches are checked for that too.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// // extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned long long n)
    /// let module = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx"))?;
    /// let saxpy = module.kernel("saxpy")?; // its parameters as the driver compiled them
    /// println!("{saxpy:?}");
    /// # Ok(()) }
    /// ```
    pub fn load_ptx(&self, ptx: &str) -> crate::Result<Module> {
        Module::load(&self.ctx, ptx, "the PTX", None)
    }

    /// [`Gpu::load_ptx`], with the kernels' C prototypes: the `.cu` source the PTX was made of (or any C
    /// text declaring the kernels `__global__`), read for which parameters are pointers. A launch that
    /// passes a value for a pointer, or a device view for a value, is then refused. A kernel whose
    /// prototype has another number of parameters than its PTX is refused (a PTX made from another
    /// version of the source); one the source does not show is checked as without it.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let ptx = include_str!("../tests/ptx/kernels.ptx");
    /// let module = gpu.load_ptx_with_prototypes(ptx, include_str!("../tests/kernels.cu"))?;
    /// let saxpy = module.kernel("saxpy")?; // a value passed for `x`, or a view for `n`, is now refused
    /// # let _ = saxpy;
    /// # Ok(()) }
    /// ```
    pub fn load_ptx_with_prototypes(&self, ptx: &str, prototypes: &str) -> crate::Result<Module> {
        Module::load(&self.ctx, ptx, "the PTX", Some(("the prototypes given".into(), prototypes)))
    }

    /// [`Gpu::load_ptx`] of the file at `path`, with the prototypes of its kernels from the `.cu` file
    /// of the same stem beside it (or, for a file in a folder named `ptx`, in the folder above), where
    /// there is one ([`Gpu::load_ptx_with_prototypes`]).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// // Reads kernels.ptx, and the prototypes from kernels.cu beside it or above its folder `ptx`.
    /// let module = gpu.load_ptx_file("common/tests/ptx/kernels.ptx")?;
    /// let names: Vec<&str> = module.kernel_names().collect();
    /// println!("{names:?}");
    /// # Ok(()) }
    /// ```
    pub fn load_ptx_file(&self, path: impl AsRef<std::path::Path>) -> crate::Result<Module> {
        let path = path.as_ref();
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path).map_err(|e| InputError::File { path: path.into(), why: e.to_string() })
        };
        let ptx = read(path)?;
        let source = cu_beside(path);
        let prototypes = match &source {
            Some(cu) => Some(read(cu)?),
            None => None,
        };
        let from = source.map(|cu| cu.display().to_string());
        Module::load(&self.ctx, &ptx, &path.display().to_string(), from.zip(prototypes.as_deref()))
    }

    /// Hands every operation that scopes of this GPU queue from now on to `observer`, timed by CUDA
    /// events placed around it (for a timeline of your own; see [`Observer`]). It costs an event pair per
    /// operation while set; unset, nothing. The observer is dropped with the `Gpu`.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # use cuda_scope::{Observer, TimedOp};
    /// struct Print;
    /// impl Observer for Print {
    ///     fn record(&mut self, op: TimedOp) {
    ///         println!("{} of {} bytes: {:.3} ms", op.name, op.bytes, op.end_ms - op.start_ms);
    ///     }
    /// }
    /// let mut gpu = gpu;
    /// gpu.observe(Box::new(Print))?; // every operation of every scope from now on, once its scope ends
    /// # Ok(()) }
    /// ```
    pub fn observe(&mut self, observer: Box<dyn Observer + Send>) -> crate::Result<()> {
        let origin = Event::new(&self.ctx, true)?;
        let s = Stream::new(&self.ctx, false)?;
        origin.record(&s)?;
        s.synchronize()?;
        *self.observer.get_mut() = Some(Observing { observer, origin });
        Ok(())
    }

    /// `n` streams that run concurrently with each other and with the legacy default stream
    /// (`cudaStreamCreateWithFlags(.., cudaStreamNonBlocking)`).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let streams = gpu.streams(4)?; // one scope may queue on all four
    /// gpu.scope(&streams, |s| {
    ///     s.streams().try_for_each(|st| st.synchronize())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn streams(&self, n: usize) -> crate::Result<Vec<Stream>> {
        (0..n).map(|_| Stream::new(&self.ctx, false)).collect()
    }

    /// `n` streams that synchronize with the legacy default stream (`cudaStreamCreate`): work on
    /// stream 0, as other libraries may queue it, waits for them and they for it.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let streams = gpu.blocking_streams(1)?; // ordered with whatever other libraries queue on stream 0
    /// assert!(streams[0].is_blocking());
    /// # Ok(()) }
    /// ```
    pub fn blocking_streams(&self, n: usize) -> crate::Result<Vec<Stream>> {
        (0..n).map(|_| Stream::new(&self.ctx, true)).collect()
    }

    /// Device memory for `len` elements, zeroed (`cudaMalloc`), with a clear error when the device has
    /// too little free.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let mut d = gpu.alloc::<f32>(1 << 20)?; // 4 MiB, zeroed; TooLarge where the GPU has too little free
    /// let (mut back, streams) = (vec![1f32; 1 << 20], gpu.streams(1)?);
    /// gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d), &mut back))?;
    /// assert!(back.iter().all(|&x| x == 0.0));
    /// # Ok(()) }
    /// ```
    pub fn alloc<T: Element>(&self, len: usize) -> crate::Result<DeviceBuffer<T>> {
        DeviceBuffer::zeroed(&self.ctx, &self.info.name, len)
    }

    /// `count` device buffers of `len` elements each: one per stream, say.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let streams = gpu.streams(4)?;
    /// let mut chunks = gpu.alloc_each::<f32>(streams.len(), 1 << 20)?; // a buffer per stream
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let views = s.devices(&mut chunks);
    ///     s.streams().zip(views).try_for_each(|(st, d)| st.fill(d, 1.0))
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn alloc_each<T: Element>(&self, count: usize, len: usize) -> crate::Result<Vec<DeviceBuffer<T>>> {
        (0..count).map(|_| self.alloc(len)).collect()
    }

    /// Managed memory for `len` elements, zeroed (`cudaMallocManaged(.., cudaMemAttachGlobal)`): one
    /// address for the host and the GPU, its pages moved to whichever touches them. Refused, with the
    /// reason, on a GPU where the host may not touch managed memory while the GPU works, and when the
    /// device has no [`DeviceRoom`] for it: more than its free memory less a margin kept for others.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let mut m = gpu.managed::<f32>(1 << 20)?; // refused, with the reason, where the host may not share it
    /// m[0] = 1.0; // the host's while no scope holds it
    /// let streams = gpu.streams(1)?;
    /// gpu.scope(&streams, |s| s.stream(0).prefetch(s.managed(&mut m), cuda_scope::Destination::Device))?;
    /// # Ok(()) }
    /// ```
    pub fn managed<T: Element>(&self, len: usize) -> crate::Result<ManagedBuffer<T>> {
        ManagedBuffer::zeroed(&self.ctx, &self.info.name, len)
    }

    /// How much memory that may come to rest on the device can still be asked for (see [`DeviceRoom`]): for a
    /// program to check everything it means to allocate before it allocates any of it.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let room = gpu.room()?;
    /// println!("{} may be asked for of {} free", cuda_scope::Bytes(room.available()), cuda_scope::Bytes(room.free));
    /// # Ok(()) }
    /// ```
    pub fn room(&self) -> crate::Result<DeviceRoom> {
        room(&self.ctx)
    }

    /// Checks everything a program means to allocate at once, before it allocates any of it: a
    /// [`TooLarge`](crate::TooLarge) naming each kind of memory that is short (device memory against [`DeviceRoom`],
    /// pinned and pageable host memory against what the host has available, less a twentieth kept
    /// free), or `Ok`. The allocations themselves check again: this only makes the refusal come first.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let n = 1 << 28;
    /// let need = cuda_scope::Footprint::default().pinned::<f32>(2 * n).device::<f32>(2 * n);
    /// gpu.check_footprint(&need)?; // refused here, in one line, before 4 GiB are pinned
    /// let (host, d) = (gpu.pinned::<f32>(2 * n)?, gpu.alloc::<f32>(2 * n)?);
    /// # let _ = (host, d);
    /// # Ok(()) }
    /// ```
    pub fn check_footprint(&self, need: &Footprint) -> crate::Result<()> {
        let host = crate::memory::meminfo();
        // The staging scopes keep for coalesced copies, at its most, is held too.
        let need = need.pinned::<u8>(crate::coalesce::STAGING_AT_MOST);
        Ok(need.check(&self.room()?, host)?)
    }

    /// The model by which scopes choose how to issue the small copies they hold (see
    /// [`crate::coalesce`]), fitted on this GPU now if no scope has fitted it yet (a few milliseconds,
    /// once). Where the crate's copy kernel could not be loaded, [`Error::Unsupported`] says why, and
    /// scopes issue every copy each way.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// let gpu = cuda_scope::Gpu::init()?;
    /// let m = gpu.copy_model()?;
    /// println!("{:.1} µs a copy, or {:.1} µs a launch for them all", m.each_up_us, m.kernel_us);
    /// # Ok(()) }
    /// ```
    pub fn copy_model(&self) -> crate::Result<CopyModel> {
        match self.coalescer.model(&self.ctx, || Ok(()))? {
            Ok(model) => Ok(model),
            Err(why) => Err(crate::Unsupported { what: "the copy kernel".into(), why }.into()),
        }
    }

    /// Pinned host memory for `len` elements, zeroed (`cudaMallocHost`).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let mut host = gpu.pinned::<f32>(1024)?; // page-locked, zeroed: copies from it are truly async
    /// host.copy_from_slice(&[1.0; 1024]); // a slice to the host
    /// let (mut d, streams) = (gpu.alloc::<f32>(1024)?, gpu.streams(1)?);
    /// gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?;
    /// # Ok(()) }
    /// ```
    pub fn pinned<T: Element>(&self, len: usize) -> crate::Result<PinnedBuffer<T>> {
        PinnedBuffer::alloc(&self.ctx, len, HostAlloc::DEFAULT)
    }

    /// Pinned host memory holding `f(i)` at `i`.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let x = gpu.pinned_from_fn(1 << 24, |i| i as f32)?; // filled on every core
    /// assert_eq!(x[10], 10.0);
    /// # Ok(()) }
    /// ```
    pub fn pinned_from_fn<T: Element>(
        &self,
        len: usize,
        f: impl Fn(usize) -> T + Sync,
    ) -> crate::Result<PinnedBuffer<T>> {
        let mut b = self.pinned(len)?;
        fill(&mut b, f);
        Ok(b)
    }

    /// Pinned host memory with `cudaHostAlloc` flags: write-combined, mapped, portable.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// use cuda_scope::HostAlloc;
    /// let staging = gpu.pinned_with::<f32>(1 << 20, HostAlloc::WRITE_COMBINED)?; // for the GPU to read
    /// let shared = gpu.pinned_with::<f32>(1 << 20, HostAlloc::MAPPED | HostAlloc::PORTABLE)?;
    /// assert!(shared.flags().contains(HostAlloc::MAPPED) && !staging.flags().contains(HostAlloc::MAPPED));
    /// # Ok(()) }
    /// ```
    pub fn pinned_with<T: Element>(&self, len: usize, flags: HostAlloc) -> crate::Result<PinnedBuffer<T>> {
        PinnedBuffer::alloc(&self.ctx, len, flags)
    }

    /// Pins a `Vec` in place (`cudaHostRegister`) until [`Registered::into_vec`] gives it back.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let v = gpu.register(vec![1f32; 1 << 20])?; // pinned where it lies, no copy
    /// let (mut d, streams) = (gpu.alloc::<f32>(1 << 20)?, gpu.streams(1)?);
    /// gpu.scope(&streams, |s| s.stream(0).htod(&v, s.device(&mut d)))?;
    /// let v: Vec<f32> = v.into_vec(); // unpinned, and yours again
    /// # Ok(()) }
    /// ```
    pub fn register<T: Element>(&self, vec: Vec<T>) -> crate::Result<Registered<T>> {
        Registered::new(&self.ctx, vec)
    }

    /// Pins `slice` in place for the duration of `f` (`cudaHostRegister`, then `cudaHostUnregister`,
    /// also if `f` panics): for one transfer of part of a larger allocation.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let mut big = vec![0f32; 1 << 24];
    /// let (mut d, streams) = (gpu.alloc::<f32>(1 << 20)?, gpu.streams(1)?);
    /// gpu.pin_in_place(&mut big[..1 << 20], |part| {
    ///     gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d), part)) // at pinned speed
    /// })??;
    /// # Ok(()) }
    /// ```
    pub fn pin_in_place<T: Element, R>(&self, slice: &mut [T], f: impl FnOnce(&mut [T]) -> R) -> crate::Result<R> {
        pin_in_place(&self.ctx, slice, f)
    }

    /// Runs `f`, which queues work on `streams` (each as [`Scope::stream`]), then synchronizes them all
    /// (also on error or panic).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let streams = gpu.streams(2)?;
    /// let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let d = s.device(&mut d);
    ///     s.stream(0).htod(&host, d)?;
    ///     s.stream(1).dtoh(d, &mut back)?; // waits for the upload on stream 0 by itself
    ///     Ok(())
    /// })?; // both streams synchronized: back is the host's again
    /// assert_eq!(back[7], 7.0);
    /// # Ok(()) }
    /// ```
    pub fn scope<'env, R, E: From<Error>>(
        &'env self,
        streams: &'env [Stream],
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R, E>,
    ) -> Result<R, E> {
        scope::run(self.env(), streams, false, f).map(|(r, _)| r)
    }

    /// Like [`Gpu::scope`], and returns the GPU time in milliseconds from before the first operation to
    /// after the last, on any stream (CUDA events: fork on the first stream, join back to it).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let streams = gpu.streams(1)?;
    /// let (host, mut d) = (gpu.pinned::<u8>(1 << 30)?, gpu.alloc::<u8>(1 << 30)?);
    /// let ms = gpu.timed(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?;
    /// println!("{:.1} GB/s", (1u64 << 30) as f64 / ms / 1e6);
    /// # Ok(()) }
    /// ```
    pub fn timed<'env, E: From<Error>>(
        &'env self,
        streams: &'env [Stream],
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<(), E>,
    ) -> Result<f64, E> {
        let (_, ms) = scope::run(self.env(), streams, true, f)?;
        Ok(ms.map_or_else(|| refused("timed", Refusal::NothingTimed), Ok)?)
    }

    /// (free, total) device memory in bytes.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let (free, total) = gpu.memory()?;
    /// println!("{} free of {}", cuda_scope::Bytes(free), cuda_scope::Bytes(total));
    /// # Ok(()) }
    /// ```
    pub fn memory(&self) -> crate::Result<(usize, usize)> {
        memory_info(&self.ctx)
    }

    fn env(&self) -> Env<'_> {
        Env {
            ctx: &self.ctx,
            events: &self.events,
            observer: &self.observer,
            spare: &self.spare,
            gpu: &self.ctx,
            coalescer: &self.coalescer,
        }
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl Stream {
    /// Borrows a stream another library made (cudarc's `CudaStream::cu_stream()`, a C library's
    /// `cudaStream_t`, a framework's) in `gpu`'s context, for scopes of `gpu` to queue work on as on
    /// streams of our own: a scope orders and synchronizes it like them. Never destroyed by us: dropping
    /// the `Stream` leaves the stream to its owner.
    ///
    /// Refused, with the reason: a null handle, the legacy default stream and the per-thread default
    /// stream (`CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`, and cudarc's `default_stream()`, which is
    /// null: each names a different stream in whichever context is current, not one stream); and a
    /// stream of another context than `gpu`'s (`cuStreamGetCtx`).
    ///
    /// # Safety
    ///
    /// - `raw` is a live stream (`CUstream`, or the runtime's `cudaStream_t`, the same handle) and stays
    ///   alive, not destroyed by its owner, for as long as the returned `Stream` lives: the owner
    ///   outlives it. Its context is not destroyed or reset either (`cuDevicePrimaryCtxReset`).
    /// - While the returned `Stream` is lent to a scope ([`crate::Gpu::scope`]), or any other call of
    ///   this crate queues work on it, no other code uses the stream: queues work on it, or begins or
    ///   ends a capture on it. The scope's promise that the GPU is done with borrowed memory when it
    ///   ends rests on synchronizing every stream it queued on; work another thread slips in between, or
    ///   a capture that turns the scope's copies into a graph to be launched later, would break it. A
    ///   capture already begun when a scope starts is refused (`cuStreamIsCapturing`), and
    ///   [`crate::probe::bare_round_trip`] refuses borrowed streams. Between scopes, its owner may use
    ///   it as before.
    ///
    /// What is checked is refused rather than trusted; what cannot be checked (that the handle is a
    /// stream at all, and live) is this promise. Borrowing one stream twice is allowed: the two values
    /// are two names of one queue, which orders their work more, not less.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let foreign_stream: *mut std::ffi::c_void = std::ptr::null_mut();
    /// let gpu = cuda_scope::Gpu::init()?;
    /// // SAFETY: `foreign_stream` is a live stream of the GPU's primary context, which its owner keeps
    /// // alive and leaves alone while `streams` is lent to a scope.
    /// let streams = [unsafe { cuda_scope::Stream::borrow_raw(&gpu, foreign_stream)? }];
    /// gpu.scope(&streams, |s| s.stream(0).synchronize())?;
    /// drop(streams); // the stream is still its owner's, alive
    /// # Ok(()) }
    /// ```
    pub unsafe fn borrow_raw(gpu: &Gpu, raw: *mut std::ffi::c_void) -> crate::Result<Stream> {
        // SAFETY: the caller's promise, which is this function's.
        unsafe { Stream::borrowed(gpu.context(), raw) }
    }
}

impl<T: Element> DeviceBuffer<T> {
    /// Borrows `len` elements of device memory at `ptr` that another library allocated (cudarc's
    /// `CudaSlice::device_ptr`, a C library's `cudaMalloc`, a framework's tensor), for scopes of `gpu` to
    /// lend to copies and kernels as they do buffers of our own. Never freed by us: dropping the
    /// `DeviceBuffer` leaves the memory to its owner. Its contents are as the owner left them (not
    /// zeroed).
    ///
    /// Refused, with the reason, rather than trusted where the driver can tell: a null pointer, zero
    /// elements, a pointer not aligned for `T`, a byte count past `usize`; memory the driver does not
    /// know as device memory (host memory, pinned or not, and managed memory, which the host can
    /// touch); memory of another context than `gpu`'s (or,
    /// for memory no context owns, such as stream-ordered pools (`cudaMallocAsync`, which cudarc uses)
    /// and `cuMemMap`, of another device); and a range that runs past the allocation holding `ptr`
    /// (`cuMemGetAddressRange`). `ptr` may point inside an allocation.
    ///
    /// It takes nothing from [`DeviceRoom`] and belongs in no [`Footprint`] of this program's: the
    /// memory was taken when its owner allocated it, and the driver's free memory already shows that.
    ///
    /// # Safety
    ///
    /// - The `len * size_of::<T>()` bytes at `ptr` stay allocated, not freed by their owner, for as long
    ///   as the returned buffer lives: the owner outlives it. (A stream-ordered allocation's free is
    ///   queued after its owner's work: the returned buffer must be gone before that free is queued.)
    /// - For as long as the returned buffer lives, nothing else reads or writes those bytes while this
    ///   crate may (a scope it is lent to, [`crate::Stager`]'s copies, [`crate::probe::bare_round_trip`]):
    ///   no other code touches them meanwhile, and what other code
    ///   queued on them before has finished (or is ordered before the scope's work: queued on a stream
    ///   that is borrowed into the scope, ahead of it). In particular no other `DeviceBuffer`, borrowed
    ///   or ours, covers any of those bytes: the scope orders work by buffer, and could not see that two
    ///   buffers share bytes.
    /// - Any bits are a valid `T` ([`Element`]s are plain numbers), so the contents need not be
    ///   initialized by a kernel; but the memory must be the device memory it says it is, in a context
    ///   that stays alive (not destroyed or reset) while the buffer lives.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let (foreign_ptr, n): (u64, usize) = (0, 1024);
    /// let gpu = cuda_scope::Gpu::init()?;
    /// // SAFETY: `foreign_ptr` holds `n` f32s of device memory in the GPU's context, which its owner
    /// // keeps allocated while `d` lives and leaves alone while `d` is lent to a scope.
    /// let mut d = unsafe { cuda_scope::DeviceBuffer::<f32>::borrow_raw(&gpu, foreign_ptr, n)? };
    /// let (host, streams) = (gpu.pinned_from_fn(n, |i| i as f32)?, gpu.streams(1)?);
    /// gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?;
    /// drop(d); // the memory is still its owner's, holding 0, 1, 2, ...
    /// # Ok(()) }
    /// ```
    pub unsafe fn borrow_raw(gpu: &Gpu, ptr: u64, len: usize) -> crate::Result<DeviceBuffer<T>> {
        // SAFETY: the caller's promise, which is this function's.
        unsafe { DeviceBuffer::borrowed(gpu.context(), gpu.info.ordinal, ptr, len) }
    }
}

impl DeviceInfo {
    fn query(ordinal: u32, device: sys::CUdevice) -> crate::Result<DeviceInfo> {
        let attr = |a| crate::context::device_attribute(device, a);
        let mut version = 0;
        // SAFETY: one valid out-pointer.
        check(unsafe { sys::cuDriverGetVersion(&mut version) }, || "reading the driver version".into())?;
        let mut bus = [0 as std::os::raw::c_char; 32];
        // SAFETY: the buffer is 32 bytes long and we pass its length; the driver NUL-terminates it.
        check(unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, device) }, || {
            "reading the PCI bus id".into()
        })?;
        // SAFETY: NUL-terminated by the driver, within the buffer.
        let pci_bus_id = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().into_owned();
        let mut name = [0 as std::os::raw::c_char; 256];
        // SAFETY: as above, 256 bytes.
        check(unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device) }, || {
            "reading the device name".into()
        })?;
        // SAFETY: NUL-terminated by the driver, within the buffer.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        let mut total_memory = 0;
        // SAFETY: valid out-pointer and device handle.
        check(unsafe { sys::cuDeviceTotalMem_v2(&mut total_memory, device) }, || {
            "reading the device memory size".into()
        })?;
        let memory_gbps = match (
            attr(sys::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            attr(sys::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        ) {
            (Ok(khz), Ok(bits)) if khz > 0 && bits > 0 => Some(2.0 * khz as f64 * 1e3 * bits as f64 / 8.0 / 1e9),
            _ => None,
        };
        Ok(DeviceInfo {
            ordinal,
            name,
            compute_capability: (
                attr(sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            sms: attr(sys::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            total_memory,
            async_engines: attr(sys::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)? as u32,
            can_map_host_memory: attr(sys::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? != 0,
            unified_addressing: attr(sys::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? != 0,
            managed_memory: crate::memory::managed_support(device, "managed memory").is_ok(),
            driver_version: (version / 1000, version % 1000 / 10),
            pci_bus_id,
            memory_gbps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine without a driver this must be one clear error, never a panic; with a GPU it must start.
    #[test]
    fn init_is_an_error_or_a_gpu() {
        match Gpu::init() {
            Ok(gpu) => assert!(gpu.info.sms > 0),
            Err(e) => {
                let msg = format!("{e:#}");
                assert!(msg.starts_with("no NVIDIA driver") || msg.starts_with("no CUDA GPU"), "{msg}");
                assert!(!msg.contains('\n'), "{msg}");
            }
        }
    }
}
