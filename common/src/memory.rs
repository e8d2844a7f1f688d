//! Device memory, managed memory, and the element types that may live in any buffer a copy fills.

use std::{
    collections::BTreeMap,
    marker::PhantomData,
    ops::{Deref, DerefMut},
    sync::{Arc, Mutex, MutexGuard},
};

use crate::ffi as sys;
use serde::Serialize;

use crate::{
    context::{device_attribute, Context},
    error::check,
    error::{refused, too_large, Foreign, Memory, Refusal, TooLarge, Unsupported},
    ffi,
};

/// Plain numbers: every bit pattern, all-zero included, is a valid value. Only these may be copied
/// back from the GPU, which can write any bits (a `bool` holding 2 would be undefined behaviour).
/// Sealed: the list below is complete.
///
/// ```no_run
/// /// `data` to the GPU and back: for any plain number type.
/// fn round_trip<T: cuda_scope::Element>(gpu: &cuda_scope::Gpu, data: &[T]) -> cuda_scope::Result<Vec<T>> {
///     let (mut d, mut back, streams) = (gpu.alloc::<T>(data.len())?, data.to_vec(), gpu.streams(1)?);
///     gpu.scope(&streams, |s| {
///         let d = s.device(&mut d);
///         s.stream(0).htod(data, d)?;
///         s.stream(0).dtoh(d, &mut back)
///     })?;
///     Ok(back)
/// }
/// ```
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {}
mod sealed {
    pub trait Sealed {}
}
macro_rules! element {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Element for $t {})* };
}
element!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

/// [`TooLarge`] for `len` elements of `T`, more bytes than an address counts.
pub(crate) fn overflow<T, R>(len: usize) -> crate::Result<R> {
    let size = std::mem::size_of::<T>();
    let line = format!("{len} elements of {size} bytes are more bytes than a pointer can hold");
    let needed = (len as u128 * size as u128).min(u64::MAX as u128) as u64;
    Err(TooLarge::new(Memory::Addressable, needed, None, line).into())
}

/// A byte count that prints as a person reads it: `64 MiB`, `1.5 GiB`, `300 B`.
///
/// ```
/// use cuda_scope::Bytes;
/// assert_eq!(Bytes(64 << 20).to_string(), "64 MiB");
/// assert_eq!(Bytes(1536 << 20).to_string(), "1.5 GiB");
/// assert_eq!(format!("{} copied", Bytes(300)), "300 B copied");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub usize);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let (mut v, mut u) = (self.0 as f64, 0);
        while v >= 1024.0 && u < UNITS.len() - 1 {
            v /= 1024.0;
            u += 1;
        }
        match v.fract() == 0.0 {
            true => write!(f, "{v:.0} {}", UNITS[u]),
            false => write!(f, "{v:.1} {}", UNITS[u]),
        }
    }
}

/// `len` elements of device memory (`cudaMalloc`), zeroed, freed on drop. It has no methods that
/// touch its memory: a [`crate::Scope`] lends it to copies and kernels and orders them.
///
/// Or another library's device memory, borrowed ([`DeviceBuffer::borrow_raw`]): lent to scopes as ours
/// is, and never freed by us.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// let mut d = gpu.alloc::<f32>(1 << 20)?; // cudaMalloc, zeroed; freed when dropped
/// let (host, streams) = (gpu.pinned_from_fn(1 << 20, |i| i as f32)?, gpu.streams(1)?);
/// gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?; // lent to the scope's copy
/// drop(d); // cudaFree: the scope has synchronized
/// # Ok(()) }
/// ```
pub struct DeviceBuffer<T: Element> {
    ptr: sys::CUdeviceptr,
    len: usize,
    /// Allocated by us, and freed on drop; `false` for memory borrowed from another library.
    owned: bool,
    ctx: Arc<Context>,
    _elements: PhantomData<T>,
}

// Send and Sync follow from the fields: device memory belongs to the context, not to a thread, and a
// shared reference offers only the length and reads (`Stager::download`), which may run at once.

impl<T: Element> DeviceBuffer<T> {
    /// Allocates and zeroes `len` elements in `ctx`, with a clear error when the device has too little free.
    pub(crate) fn zeroed(ctx: &Arc<Context>, name: &str, len: usize) -> crate::Result<Self> {
        if len == 0 {
            return refused("a device buffer", Refusal::Empty);
        }
        let Some(bytes) = len.checked_mul(std::mem::size_of::<T>()) else {
            return overflow::<T, _>(len);
        };
        // Under the lock on managed memory held: what this process's managed buffers may bring to the
        // device is taken, so that device buffers cannot leave them no room.
        let held = managed_held();
        let room = room_holding(ctx, &held)?;
        let usable = room.free.saturating_sub(room.managed_held);
        if bytes > usable {
            let managed = match room.managed_held {
                0 => String::new(),
                h => format!(" once the {} of managed memory this process holds there may come", Bytes(h)),
            };
            let line =
                format!("needs {} of device memory, but {name} has only {} free{managed}", Bytes(bytes), Bytes(usable));
            return too_large(Memory::Device, bytes, Some(usable), line);
        }
        let mut ptr = 0;
        // SAFETY: valid out-pointer, nonzero size; the context is current (memory_info made it so).
        check(unsafe { ffi::cuMemAlloc_v2(&mut ptr, bytes) }, || {
            format!("allocating {} of device memory", Bytes(bytes))
        })?;
        drop(held);
        let buf = DeviceBuffer { ptr, len, owned: true, ctx: ctx.clone(), _elements: PhantomData };
        zero(ptr, bytes)?;
        Ok(buf)
    }

    /// Another library's device memory, borrowed in `ctx`, the context of device `ordinal`: see
    /// [`DeviceBuffer::borrow_raw`], whose promise the caller makes.
    ///
    /// # Safety
    /// As [`DeviceBuffer::borrow_raw`]'s.
    pub(crate) unsafe fn borrowed(ctx: &Arc<Context>, ordinal: u32, ptr: u64, len: usize) -> crate::Result<Self> {
        let what = || format!("borrowing {len} elements of {} at {ptr:#x}", std::any::type_name::<T>());
        if ptr == 0 {
            return refused(what(), Refusal::Null);
        }
        if len == 0 {
            return refused(what(), Refusal::Empty);
        }
        let align = std::mem::align_of::<T>() as u64;
        if ptr % align != 0 {
            return refused(what(), Refusal::Misaligned { align: align as usize });
        }
        let Some(bytes) = len.checked_mul(std::mem::size_of::<T>()) else {
            return overflow::<T, _>(len);
        };
        let Some(end) = ptr.checked_add(bytes as u64) else {
            return overflow::<T, _>(len);
        };
        // cuMemGetAddressRange asks the current context; the attributes do not mind.
        ctx.ensure_current()?;
        let mut memory_type: sys::CUmemorytype = 0;
        // SAFETY: a valid out-pointer of the attribute's type (CUmemorytype, an unsigned int); any address
        // may be asked about.
        let code = unsafe {
            ffi::cuPointerGetAttribute(
                (&mut memory_type as *mut sys::CUmemorytype).cast(),
                sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr,
            )
        };
        if code == ffi::ERROR_INVALID_VALUE {
            return refused(what(), Refusal::UnknownMemory);
        }
        check(code, || format!("{}: reading where its memory is", what()))?;
        if memory_type != sys::CU_MEMORYTYPE_DEVICE {
            return refused(what(), Refusal::NotDeviceMemory);
        }
        // Managed memory may say it is device memory, and the host can touch it: refused too.
        let mut managed: std::ffi::c_uint = 0;
        // SAFETY: a valid out-pointer of the attribute's type (an unsigned int).
        let code = unsafe {
            ffi::cuPointerGetAttribute(
                (&mut managed as *mut std::ffi::c_uint).cast(),
                sys::CU_POINTER_ATTRIBUTE_IS_MANAGED,
                ptr,
            )
        };
        check(code, || format!("{}: asking whether it is managed memory", what()))?;
        if managed != 0 {
            return refused(what(), Refusal::NotDeviceMemory);
        }
        let mut owner: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer of the attribute's type (CUcontext).
        check(
            unsafe {
                ffi::cuPointerGetAttribute(
                    (&mut owner as *mut sys::CUcontext).cast(),
                    sys::CU_POINTER_ATTRIBUTE_CONTEXT,
                    ptr,
                )
            },
            || format!("{}: reading its context", what()),
        )?;
        if owner.is_null() {
            // Memory no context owns (a stream-ordered pool's, or cuMemMap's): its device must be ours.
            let mut device: std::ffi::c_int = -1;
            // SAFETY: a valid out-pointer of the attribute's type (int).
            check(
                unsafe {
                    ffi::cuPointerGetAttribute(
                        (&mut device as *mut std::ffi::c_int).cast(),
                        sys::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                        ptr,
                    )
                },
                || format!("{}: reading its device", what()),
            )?;
            if i64::from(device) != i64::from(ordinal) {
                return refused(what(), Refusal::Foreign(Foreign::Device));
            }
        } else if !ctx.is_raw(owner) {
            // The GPU's context is its primary context, which the CUDA runtime and cudarc's
            // CudaContext::new use too.
            return refused(what(), Refusal::Foreign(Foreign::Context));
        }
        let (mut base, mut size) = (0, 0);
        // SAFETY: two valid out-pointers; the GPU's context is current.
        check(unsafe { ffi::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) }, || {
            format!("{}: reading the allocation that holds it", what())
        })?;
        let alloc_end = base.saturating_add(size as u64);
        if end > alloc_end {
            // In bytes from the pointer: the range asked for, and what the allocation holds from there.
            let range = 0..bytes;
            return refused(what(), Refusal::OutOfBounds { range, len: (alloc_end - ptr) as usize });
        }
        Ok(DeviceBuffer { ptr, len, owned: false, ctx: ctx.clone(), _elements: PhantomData })
    }

    /// Whether this buffer was borrowed from another library ([`DeviceBuffer::borrow_raw`]), rather
    /// than allocated by us: if so, dropping it leaves the memory allocated, its owner's.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let d = gpu.alloc::<f32>(1024)?;
    /// assert!(!d.is_borrowed()); // ours: freed when dropped
    /// # Ok(()) }
    /// ```
    pub fn is_borrowed(&self) -> bool {
        !self.owned
    }

    /// Elements in the buffer.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// assert_eq!(gpu.alloc::<f64>(1000)?.len(), 1000);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements (never: a buffer has at least one).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// assert!(!gpu.alloc::<u8>(1)?.is_empty()); // gpu.alloc::<u8>(0) is refused
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let borrowed = if self.owned { "" } else { ", borrowed" };
        write!(f, "DeviceBuffer<{}>[{}{borrowed}]", std::any::type_name::<T>(), self.len)
    }
}

impl<T: Element> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if !self.owned {
            return; // another library's: its owner frees it
        }
        // SAFETY: allocated once, freed once, in its own context (kept alive by self.ctx). No GPU work
        // uses it: every scope and stager that lent it synchronized before its borrow ended.
        self.ctx.with_current(|| unsafe { ffi::cuMemFree_v2(self.ptr) });
    }
}

/// Zeroes `bytes` bytes of a new device allocation at `ptr` (of the current context)
/// and waits until the zeros are in place, before anyone can use the buffer.
fn zero(ptr: sys::CUdeviceptr, bytes: usize) -> crate::Result<()> {
    // SAFETY: the `bytes` bytes just allocated at `ptr`, which nothing else uses yet. The memset is
    // queued on the legacy default stream, which is then synchronized.
    check(unsafe { ffi::cuMemsetD8_v2(ptr, 0, bytes) }, || "zeroing new memory".into())?;
    // SAFETY: the legacy default stream (handle 0) of the current context.
    check(unsafe { ffi::cuStreamSynchronize(std::ptr::null_mut()) }, || "zeroing new memory".into())
}

/// Zeroes `bytes` of new managed memory at `ptr` from the host, on all cores: its pages then start on
/// the host, and the device's free memory does not drop for them (a memset on the GPU would put every
/// page there, and the room would count them twice).
fn zero_from_host(ptr: sys::CUdeviceptr, bytes: usize) {
    use rayon::prelude::*;
    const PIECE: usize = 1 << 20;
    (0..bytes.div_ceil(PIECE)).into_par_iter().for_each(|i| {
        let at = ptr as usize + i * PIECE;
        // SAFETY: bytes [i * PIECE, min((i + 1) * PIECE, bytes)) of a managed allocation of `bytes` bytes
        // just made, which nothing else can reach yet, and which the host may write (the GPU has
        // concurrent managed access, checked before it was allocated); pieces are disjoint.
        unsafe { std::ptr::write_bytes(at as *mut u8, 0, PIECE.min(bytes - i * PIECE)) };
    });
}

/// Managed memory this process holds, in bytes, per GPU (see [`DeviceRoom::managed_held`]). Held locked from
/// a check to the allocation it allows (managed or device), so that two threads cannot both take the
/// last room.
static MANAGED_HELD: Mutex<BTreeMap<sys::CUdevice, usize>> = Mutex::new(BTreeMap::new());

type Held = MutexGuard<'static, BTreeMap<sys::CUdevice, usize>>;

fn managed_held() -> Held {
    MANAGED_HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// How much more memory that may all come to rest on the device (managed memory, and the device
/// buffers beside it) a program may ask for. Asking for more than the device has free is what a
/// shared machine must not see: device buffers fail, but managed memory is granted, and its pages
/// then evict each other, and other programs' managed pages, back and forth across the bus.
///
/// ```
/// let room = cuda_scope::DeviceRoom { free: 100 << 30, total: 140 << 30, managed_held: 0 };
/// assert_eq!(room.margin(), 14 << 30); // a tenth of the device, left to others
/// assert_eq!(room.available(), 86 << 30);
/// assert!(room.check(80 << 30).is_ok() && room.check(90 << 30).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceRoom {
    /// Free device memory, as the driver reports it (`cuMemGetInfo`).
    pub free: usize,
    /// Device memory in all, as the driver reports it.
    pub total: usize,
    /// Managed memory this process holds already on this GPU. The driver's free figure counts only the
    /// pages that are on the device now, and the rest may come: so all of it counts. Managed buffers are
    /// zeroed by the host, so their pages start there; pages the GPU has touched since count twice, which
    /// errs on the side of refusing.
    pub managed_held: usize,
}

impl DeviceRoom {
    /// Left free for the rest of the machine: a tenth of the device's memory, and at least 1 GiB.
    ///
    /// ```
    /// use cuda_scope::DeviceRoom;
    /// assert_eq!(DeviceRoom { free: 70 << 30, total: 80 << 30, managed_held: 0 }.margin(), 8 << 30);
    /// assert_eq!(DeviceRoom { free: 7 << 30, total: 8 << 30, managed_held: 0 }.margin(), 1 << 30); // at least 1 GiB
    /// ```
    pub fn margin(&self) -> usize {
        (self.total / 10).max(1 << 30)
    }

    /// How many bytes more may be asked for.
    ///
    /// ```
    /// let room = cuda_scope::DeviceRoom { free: 100 << 30, total: 140 << 30, managed_held: 6 << 30 };
    /// assert_eq!(room.available(), 80 << 30); // 100 free, less 14 kept, less 6 of managed memory that may come
    /// ```
    pub fn available(&self) -> usize {
        self.free.saturating_sub(self.margin()).saturating_sub(self.managed_held)
    }

    /// Whether `bytes` more fit; if not, why not, in words.
    ///
    /// ```
    /// let room = cuda_scope::DeviceRoom { free: 20 << 30, total: 80 << 30, managed_held: 0 };
    /// let why = room.check(16 << 30).unwrap_err();
    /// assert!(why.starts_with("needs 16 GiB of device memory, and at most 12 GiB may be asked for"), "{why}");
    /// ```
    pub fn check(&self, bytes: usize) -> Result<(), String> {
        if bytes <= self.available() {
            return Ok(());
        }
        let held = match self.managed_held {
            0 => String::new(),
            h => format!(" and {} of managed memory this process holds already", Bytes(h)),
        };
        Err(format!(
            "needs {} of device memory, and at most {} may be asked for: {} free of {}, less {} kept free for \
             others{held}",
            Bytes(bytes),
            Bytes(self.available()),
            Bytes(self.free),
            Bytes(self.total),
            Bytes(self.margin()),
        ))
    }
}

/// The memory a program means to hold at its peak, by kind: checked at once against the machine
/// ([`crate::Gpu::check_footprint`]) before any of it is allocated, so that a size past the machine is
/// refused in a moment, with what it needs and what there is, rather than after pinning 80 GiB of the
/// first of three vectors. Sums saturate: a size past `usize` is simply too large.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// let gpu = cuda_scope::Gpu::init()?;
/// let n = 1 << 28;
/// let need = cuda_scope::Footprint::default().pinned::<f32>(3 * n).device::<f32>(3 * n);
/// gpu.check_footprint(&need)?; // TooLarge, naming the memory that is short, before anything is pinned
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Footprint {
    /// Device memory, and managed memory (which may all come to rest on the device).
    pub device: usize,
    /// Pinned (page-locked) host memory: host memory the system cannot page out.
    pub pinned: usize,
    /// Ordinary pageable host memory.
    pub pageable: usize,
}

impl Footprint {
    fn bytes<T>(len: usize) -> usize {
        len.saturating_mul(std::mem::size_of::<T>())
    }

    /// And `len` elements of `T` in device memory.
    ///
    /// ```
    /// let need = cuda_scope::Footprint::default().device::<f32>(1 << 20).device::<u8>(1024);
    /// assert_eq!(need.device, (4 << 20) + 1024);
    /// ```
    pub fn device<T: Element>(self, len: usize) -> Footprint {
        Footprint { device: self.device.saturating_add(Self::bytes::<T>(len)), ..self }
    }

    /// And `len` elements of `T` in pinned host memory.
    ///
    /// ```
    /// let need = cuda_scope::Footprint::default().pinned::<f64>(1000);
    /// assert_eq!((need.pinned, need.device), (8000, 0));
    /// ```
    pub fn pinned<T: Element>(self, len: usize) -> Footprint {
        Footprint { pinned: self.pinned.saturating_add(Self::bytes::<T>(len)), ..self }
    }

    /// And `len` elements of `T` in pageable host memory.
    ///
    /// ```
    /// let need = cuda_scope::Footprint::default().pageable::<f32>(usize::MAX); // saturates: too large, not wrapped
    /// assert_eq!(need.pageable, usize::MAX);
    /// ```
    pub fn pageable<T: Element>(self, len: usize) -> Footprint {
        Footprint { pageable: self.pageable.saturating_add(Self::bytes::<T>(len)), ..self }
    }

    /// Both at once.
    ///
    /// ```
    /// use cuda_scope::Footprint;
    /// let (input, output) = (Footprint::default().pinned::<f32>(100), Footprint::default().device::<f32>(100));
    /// assert_eq!(input.and(output), Footprint { device: 400, pinned: 400, pageable: 0 }); // held at once
    /// ```
    pub fn and(self, other: Footprint) -> Footprint {
        Footprint {
            device: self.device.saturating_add(other.device),
            pinned: self.pinned.saturating_add(other.pinned),
            pageable: self.pageable.saturating_add(other.pageable),
        }
    }

    /// The larger of each kind: for a program that holds one and then the other.
    ///
    /// ```
    /// use cuda_scope::Footprint;
    /// let first = Footprint::default().pinned::<u8>(300);
    /// let then = Footprint::default().pinned::<u8>(200).device::<u8>(50);
    /// assert_eq!(first.max(then), Footprint { device: 50, pinned: 300, pageable: 0 }); // one, then the other
    /// ```
    pub fn max(self, other: Footprint) -> Footprint {
        Footprint {
            device: self.device.max(other.device),
            pinned: self.pinned.max(other.pinned),
            pageable: self.pageable.max(other.pageable),
        }
    }

    /// Whether it fits `device` and the host's memory, as `(available, total)` bytes (`None`: unknown,
    /// not checked); if not, why not, in words: every kind that is short.
    pub(crate) fn check(&self, device: &DeviceRoom, host: Option<(usize, usize)>) -> Result<(), TooLarge> {
        let mut short = Vec::new();
        let mut first = None;
        if let Err(why) = device.check(self.device) {
            short.push(why);
            first = Some((Memory::Device, self.device, device.available()));
        }
        let host_bytes = self.pinned.saturating_add(self.pageable);
        if let Some((available, total)) = host {
            let margin = host_margin(total);
            if host_bytes > available.saturating_sub(margin) {
                let kinds = match (self.pinned, self.pageable) {
                    (0, _) => format!("{} of pageable", Bytes(self.pageable)),
                    (_, 0) => format!("{} of pinned", Bytes(self.pinned)),
                    (p, q) => format!("{} of pinned and {} of pageable", Bytes(p), Bytes(q)),
                };
                short.push(format!(
                    "needs {kinds} host memory, and this host has {} available of {}, less {} kept free",
                    Bytes(available),
                    Bytes(total),
                    Bytes(margin)
                ));
                let memory = if self.pageable == 0 { Memory::Pinned } else { Memory::Host };
                first.get_or_insert((memory, host_bytes, available.saturating_sub(margin)));
            }
        }
        match first {
            None => Ok(()),
            Some((memory, needed, available)) => {
                Err(TooLarge::new(memory, needed as u64, Some(available as u64), short.join("; ")))
            }
        }
    }
}

/// What is kept free of a host with `total` bytes of memory: a twentieth, and at least 1 GiB.
pub(crate) fn host_margin(total: usize) -> usize {
    (total / 20).max(1 << 30)
}

/// (MemAvailable, MemTotal) in bytes, from `/proc/meminfo`.
pub(crate) fn meminfo() -> Option<(usize, usize)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<usize> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<usize>().ok()? * 1024)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

/// The room on `ctx`'s GPU now (see [`DeviceRoom`]); makes `ctx` current.
pub(crate) fn room(ctx: &Context) -> crate::Result<DeviceRoom> {
    room_holding(ctx, &managed_held())
}

/// The room on `ctx`'s GPU, with the lock on the managed memory held taken.
fn room_holding(ctx: &Context, held: &Held) -> crate::Result<DeviceRoom> {
    let (free, total) = memory_info(ctx)?;
    Ok(DeviceRoom { free, total, managed_held: held.get(&ctx.device()).copied().unwrap_or(0) })
}

/// Whether `device` can hold managed memory that the CPU may touch while the GPU works on other
/// things: without concurrent managed access, any host access while any kernel runs faults the CPU.
pub(crate) fn managed_support(device: sys::CUdevice, what: &str) -> crate::Result<()> {
    let what = || what.to_string();
    if device_attribute(device, sys::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? == 0 {
        return Err(Unsupported { what: what(), why: "this GPU does not support it (cudaMallocManaged)".into() }.into());
    }
    if device_attribute(device, sys::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)? == 0 {
        let why = "this GPU cannot share managed memory with the CPU while it works (no concurrent managed access: \
                   a GPU older than Pascal, Windows, or a virtual GPU without it), so the host could fault touching \
                   it during any kernel: managed buffers are refused here";
        return Err(Unsupported { what: what(), why: why.into() }.into());
    }
    Ok(())
}

/// `len` elements of managed memory (`cudaMallocManaged(.., cudaMemAttachGlobal)`), zeroed, freed on
/// drop: one address for the CPU and the GPU. The driver moves each page to whichever touches it (a
/// page fault each time it is not there), or ahead of time where a scope prefetches it
/// ([`crate::ScopeStream::prefetch`]).
///
/// The host reads and writes it as a slice, but only while no scope holds it: a scope takes it by
/// `&mut` ([`crate::Scope::managed`]) and synchronizes every stream before it gives it back. Made by
/// [`crate::Gpu::managed`], which refuses a GPU where the CPU may not touch managed memory while the GPU
/// works, and a size the device has no [`DeviceRoom`] for.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// let mut m = gpu.managed::<f32>(1 << 20)?;
/// m.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32); // the host writes it in place
/// let streams = gpu.streams(1)?;
/// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
///     let v = s.managed(&mut m); // the scope's until it ends: the host cannot touch it
///     s.stream(0).prefetch(v, cuda_scope::Destination::Device)?; // its pages to the GPU, in bulk
///     s.stream(0).prefetch(v, cuda_scope::Destination::Host)
/// })?;
/// assert_eq!(m[3], 3.0);
/// # Ok(()) }
/// ```
pub struct ManagedBuffer<T: Element> {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: Arc<Context>,
    _elements: PhantomData<T>,
}

// Send and Sync follow from the fields, as for DeviceBuffer: the memory belongs to the process, and a
// shared reference offers only reads of it.

impl<T: Element> ManagedBuffer<T> {
    /// Allocates and zeroes `len` elements in `ctx`, or says why not.
    pub(crate) fn zeroed(ctx: &Arc<Context>, name: &str, len: usize) -> crate::Result<Self> {
        if len == 0 {
            return refused("a managed buffer", Refusal::Empty);
        }
        let Some(bytes) = len.checked_mul(std::mem::size_of::<T>()) else {
            return overflow::<T, _>(len);
        };
        managed_support(ctx.device(), &format!("managed memory on {name}"))?;
        let mut held = managed_held();
        let room = room_holding(ctx, &held)?;
        if let Err(why) = room.check(bytes) {
            return too_large(
                Memory::Managed,
                bytes,
                Some(room.available()),
                format!("managed memory on {name}: {why}"),
            );
        }
        let mut ptr = 0;
        // SAFETY: valid out-pointer, nonzero size, the driver's own flag; the context is current
        // (memory_info made it so).
        check(unsafe { ffi::cuMemAllocManaged(&mut ptr, bytes, ffi::MEM_ATTACH_GLOBAL) }, || {
            format!("allocating {} of managed memory", Bytes(bytes))
        })?;
        *held.entry(ctx.device()).or_insert(0) += bytes;
        drop(held);
        let buf = ManagedBuffer { ptr, len, ctx: ctx.clone(), _elements: PhantomData };
        zero_from_host(ptr, bytes);
        Ok(buf)
    }

    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl<T: Element> Deref for ManagedBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: one live allocation of `len` elements, owned by self and zeroed when made, so every
        // element is initialized (and any bits are a valid T: Element); the allocation is aligned for
        // any type. Managed memory is addressable by the host at its device address, and on a GPU with
        // concurrent managed access (checked when made) the host may touch it while the GPU runs other
        // work. Nothing on the GPU touches it now: only a scope can queue work on it, and a scope holds it
        // by &mut and synchronizes every stream before that borrow ends.
        unsafe { std::slice::from_raw_parts(self.ptr as usize as *const T, self.len) }
    }
}

impl<T: Element> DerefMut for ManagedBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and &mut self makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as usize as *mut T, self.len) }
    }
}

impl<T: Element> std::fmt::Debug for ManagedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ManagedBuffer<{}>[{}]", std::any::type_name::<T>(), self.len)
    }
}

impl<T: Element> Drop for ManagedBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated once, freed once, in its own context (kept alive by self.ctx). No GPU work
        // uses it: every scope that lent it synchronized before its borrow ended.
        self.ctx.with_current(|| unsafe { ffi::cuMemFree_v2(self.ptr) });
        // Counted free even where the free failed (a dead context): the claim on the device is gone.
        if let Some(h) = managed_held().get_mut(&self.ctx.device()) {
            *h = h.saturating_sub(self.len * std::mem::size_of::<T>());
        }
    }
}

/// (free, total) device memory of `ctx`'s GPU in bytes; makes `ctx` current.
pub(crate) fn memory_info(ctx: &Context) -> crate::Result<(usize, usize)> {
    ctx.make_current()?;
    let (mut free, mut total) = (0, 0);
    // SAFETY: two valid out-pointers; the context is current.
    check(unsafe { ffi::cuMemGetInfo_v2(&mut free, &mut total) }, || "querying device memory".into())?;
    Ok((free, total))
}

#[cfg(test)]
mod tests {
    use super::{DeviceRoom, Footprint};

    const GIB: usize = 1 << 30;

    #[test]
    fn the_margin_is_a_tenth_of_the_device_and_at_least_a_gibibyte() {
        let room = |total| DeviceRoom { free: total, total, managed_held: 0 };
        assert_eq!(room(141 * GIB).margin(), 141 * GIB / 10);
        assert_eq!(room(8 * GIB).margin(), GIB);
        assert_eq!(room(GIB / 2).available(), 0, "a device smaller than the margin has no room");
    }

    #[test]
    fn room_is_free_memory_less_the_margin_and_managed_memory_held() {
        let r = DeviceRoom { free: 100 * GIB, total: 140 * GIB, managed_held: 0 };
        assert_eq!(r.available(), 86 * GIB);
        assert!(r.check(86 * GIB).is_ok());
        let why = r.check(86 * GIB + 4).unwrap_err();
        assert!(why.starts_with("needs 86.0 GiB of device memory, and at most 86 GiB may be asked for"), "{why}");
        assert!(why.contains("100 GiB free of 140 GiB, less 14 GiB kept free for others"), "{why}");
        let held = DeviceRoom { managed_held: 80 * GIB, ..r };
        assert_eq!(held.available(), 6 * GIB);
        let why = held.check(8 * GIB).unwrap_err();
        assert!(why.ends_with("and 80 GiB of managed memory this process holds already"), "{why}");
    }

    #[test]
    fn nothing_fits_when_free_memory_is_below_the_margin() {
        let r = DeviceRoom { free: 2 * GIB, total: 40 * GIB, managed_held: 0 };
        assert_eq!(r.available(), 0);
        assert!(r.check(1).is_err());
        assert!(r.check(0).is_ok(), "asking for nothing always fits");
        let crowded = DeviceRoom { free: 20 * GIB, total: 40 * GIB, managed_held: 30 * GIB };
        assert_eq!(crowded.available(), 0, "held memory beyond free memory leaves none, without overflow");
    }

    #[test]
    fn a_footprint_names_every_kind_of_memory_that_is_short_and_saturates() {
        let device = DeviceRoom { free: 100 * GIB, total: 140 * GIB, managed_held: 0 };
        let host = Some((200 * GIB, 256 * GIB)); // 12.8 GiB kept free: 187.2 GiB may be asked for
        let fits = Footprint::default().device::<f32>(GIB).pinned::<f32>(GIB).pageable::<u8>(GIB);
        assert_eq!((fits.device, fits.pinned, fits.pageable), (4 * GIB, 4 * GIB, GIB));
        assert!(fits.check(&device, host).is_ok());
        // vector_add_streams -n 20G: three vectors of 20G floats pinned, and their chunks on the device.
        let n = 20 * GIB;
        let big = Footprint::default().pinned::<f32>(3 * n).device::<f32>(3 * n / 16);
        let why = big.check(&device, host).unwrap_err().to_string();
        assert!(why.contains("needs 240 GiB of pinned host memory, and this host has 200 GiB available"), "{why}");
        assert!(!why.contains("device memory"), "15 GiB fits the device: {why}");
        let both = big.and(Footprint::default().device::<f32>(n));
        let why = both.check(&device, host).unwrap_err();
        assert_eq!(why.memory, crate::Memory::Device, "the device is named first");
        let why = why.to_string();
        assert!(why.starts_with("needs 95 GiB of device memory") && why.contains("; needs 240 GiB of pinned"), "{why}");
        assert!(both.check(&device, None).is_err(), "an unknown host still checks the device");
        assert!(big.check(&device, None).is_ok(), "and does not refuse host memory it cannot see");
        let huge = Footprint::default().pageable::<f64>(usize::MAX).pinned::<f64>(usize::MAX);
        assert_eq!((huge.pageable, huge.pinned), (usize::MAX, usize::MAX), "saturates rather than wraps");
        assert!(huge.check(&device, host).unwrap_err().to_string().contains("pinned and"), "both host kinds are named");
        assert_eq!(fits.max(big).pinned, big.pinned);
    }
}
