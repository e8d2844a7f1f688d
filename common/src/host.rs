//! Host buffer kinds. Pageable memory is a plain `Vec`; the pinned kinds live here.
//!
//! | kind | how | what it is for |
//! | --- | --- | --- |
//! | pinned | [`PinnedBuffer`] with [`HostAlloc::DEFAULT`] (`cuMemHostAlloc`, like `cudaMallocHost`) | DMA straight from/to it: full-speed, truly async copies |
//! | write-combined | [`HostAlloc::WRITE_COMBINED`] | the CPU writes it without caching: fast for the GPU to read, very slow for the CPU to read |
//! | mapped | [`HostAlloc::MAPPED`] | kernels read and write it across the bus (zero-copy) |
//! | portable | [`HostAlloc::PORTABLE`] | pinned for every context, not only the current one |
//! | pinned in place | [`Registered`] and [`crate::Gpu::pin_in_place`] (`cuMemHostRegister`) | an existing allocation (a `Vec`) locked while it is lent |

use std::{
    collections::BTreeMap,
    ops::{BitOr, Deref, DerefMut},
    ptr::NonNull,
    sync::{
        atomic::{AtomicUsize, Ordering::Relaxed},
        Arc, RwLock,
    },
};

use crate::ffi as sys;

use crate::{
    context::Context,
    error::{refused, too_large, Memory, Refusal},
    ffi::{self, error_name},
    memory::{host_margin, meminfo, overflow, Bytes, Element},
};

/// Ordinary pageable memory, `f(i)` for each element, with an error (not an abort) when the host
/// cannot provide it.
///
/// ```
/// # fn main() -> cuda_scope::Result<()> {
/// let v = cuda_scope::pageable(1 << 20, |i| i as u32)?; // TooLarge, not an abort, past the host's memory
/// assert_eq!(v[5], 5);
/// # Ok(()) }
/// ```
pub fn pageable<T: Element>(len: usize, f: impl Fn(usize) -> T + Sync) -> crate::Result<Vec<T>> {
    let mut v = Vec::new();
    if len == 0 {
        return Ok(v);
    }
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    host_room(bytes, Memory::Host)?;
    if v.try_reserve_exact(len).is_err() {
        return too_large(Memory::Host, bytes, None, format!("cannot allocate {} of host memory", Bytes(bytes)));
    }
    v.resize(len, f(0));
    fill(&mut v, f);
    Ok(v)
}

/// Refuses `bytes` more of host memory where the host has not that much available and a margin beside
/// it (a twentieth of its memory, at least 1 GiB): past it, Linux would overcommit and its out-of-memory
/// killer end this process, or another, with no message. Where `/proc/meminfo` cannot be read, allows it.
fn host_room(bytes: usize, memory: Memory) -> crate::Result<()> {
    let Some((available, total)) = meminfo() else { return Ok(()) };
    let margin = host_margin(total);
    if bytes > available.saturating_sub(margin) {
        let what = if memory == Memory::Pinned { "pinned host memory" } else { "host memory" };
        let line = format!(
            "needs {} of {what}, and this host has {} available of {}, less {} kept free",
            Bytes(bytes),
            Bytes(available),
            Bytes(total),
            Bytes(margin)
        );
        return too_large(memory, bytes, Some(available.saturating_sub(margin)), line);
    }
    Ok(())
}

/// Sets `out[i] = f(i)` on every core (up to 64 threads): filling a large pinned buffer on one thread
/// takes longer than copying it to the GPU.
///
/// ```
/// let mut v = vec![0u64; 1 << 16];
/// cuda_scope::host::fill(&mut v, |i| (i * i) as u64); // on every core
/// assert_eq!(v[300], 90_000);
/// ```
pub fn fill<T: Send>(out: &mut [T], f: impl Fn(usize) -> T + Sync) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(64);
    let part = out.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (k, chunk) in out.chunks_mut(part).enumerate() {
            let f = &f;
            s.spawn(move || chunk.iter_mut().enumerate().for_each(|(j, x)| *x = f(k * part + j)));
        }
    });
}

/// Flags of `cuMemHostAlloc` (`cudaHostAlloc`).
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// use cuda_scope::HostAlloc;
/// let mut mapped = gpu.pinned_with::<f32>(1024, HostAlloc::MAPPED)?; // kernels address it across the bus
/// let streams = gpu.streams(1)?;
/// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
///     let zero_copy = s.mapped(&mut mapped)?; // a view, as of device memory
///     s.stream(0).fill(zero_copy, 1.0)
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostAlloc(u32);

impl HostAlloc {
    /// Plain pinned memory (`cudaMallocHost`).
    pub const DEFAULT: HostAlloc = HostAlloc(0);
    /// Pinned for every context, not only the current one (`cudaHostAllocPortable`).
    pub const PORTABLE: HostAlloc = HostAlloc(sys::CU_MEMHOSTALLOC_PORTABLE);
    /// Mapped into the device's address space, for kernels to read and write (`cudaHostAllocMapped`).
    pub const MAPPED: HostAlloc = HostAlloc(sys::CU_MEMHOSTALLOC_DEVICEMAP);
    /// Write-combined: fast for the GPU to read, very slow for the CPU to read (`cudaHostAllocWriteCombined`).
    pub const WRITE_COMBINED: HostAlloc = HostAlloc(sys::CU_MEMHOSTALLOC_WRITECOMBINED);

    /// Whether every flag of `other` is set here.
    ///
    /// ```
    /// use cuda_scope::HostAlloc;
    /// let flags = HostAlloc::MAPPED | HostAlloc::PORTABLE;
    /// assert!(flags.contains(HostAlloc::MAPPED) && !flags.contains(HostAlloc::WRITE_COMBINED));
    /// ```
    pub fn contains(self, other: HostAlloc) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for HostAlloc {
    type Output = HostAlloc;
    fn bitor(self, rhs: HostAlloc) -> HostAlloc {
        HostAlloc(self.0 | rhs.0)
    }
}

/// Page-locked host memory from `cuMemHostAlloc`, zero-filled, freed with `cuMemFreeHost`. Made by
/// [`crate::Gpu::pinned`]; it keeps that GPU's context alive, since the context owns the pinning.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// let mut h = gpu.pinned::<f32>(1 << 20)?; // cuMemHostAlloc, zeroed; a slice to the host
/// h.fill(2.0);
/// let (mut d, streams) = (gpu.alloc::<f32>(1 << 20)?, gpu.streams(1)?);
/// gpu.scope(&streams, |s| s.stream(0).htod(&h, s.device(&mut d)))?; // DMA straight from it
/// # Ok(()) }
/// ```
pub struct PinnedBuffer<T: Element> {
    ptr: NonNull<T>,
    len: usize,
    flags: HostAlloc,
    ctx: Arc<Context>,
}

impl<T: Element> PinnedBuffer<T> {
    pub(crate) fn alloc(ctx: &Arc<Context>, len: usize, flags: HostAlloc) -> crate::Result<Self> {
        if len == 0 {
            return refused("a pinned buffer", Refusal::Empty);
        }
        let Some(bytes) = len.checked_mul(std::mem::size_of::<T>()) else {
            return overflow::<T, _>(len);
        };
        host_room(bytes, Memory::Pinned)?;
        ctx.make_current()?;
        let mut p = std::ptr::null_mut();
        // Mapped always, whatever the flags say (the flags the buffer reports are the caller's): with one
        // address space that costs nothing, and it lets a scope's coalesced copies reach it in place.
        // SAFETY: valid out-pointer, nonzero size; the flags are the driver's own constants; the
        // context is current.
        let code = unsafe { ffi::cuMemHostAlloc(&mut p, bytes, flags.0 | sys::CU_MEMHOSTALLOC_DEVICEMAP) };
        if code != ffi::SUCCESS || p.is_null() {
            let line = format!(
                "the host refused to pin {} ({}); free memory or raise the locked-memory limit (ulimit -l)",
                Bytes(bytes),
                error_name(code)
            );
            return too_large(Memory::Pinned, bytes, None, line);
        }
        let ptr = NonNull::new(p.cast::<T>()).unwrap();
        // SAFETY: the allocation holds `bytes` writable bytes; all-zero is a valid T (Element).
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        let mut device = 0;
        // SAFETY: the start of the live allocation just made, mapped; a valid out-pointer; flags 0.
        if unsafe { ffi::cuMemHostGetDevicePointer_v2(&mut device, p, 0) } == ffi::SUCCESS {
            let start = p as usize;
            let place = Mapped { end: start + bytes, device, context: ctx.raw() as usize };
            PINNED.write().unwrap_or_else(|e| e.into_inner()).insert(start, place);
            PINNED_LOW.fetch_min(start, Relaxed);
            PINNED_HIGH.fetch_max(start + bytes, Relaxed);
        }
        Ok(PinnedBuffer { ptr, len, flags, ctx: ctx.clone() })
    }

    /// The flags it was allocated with.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// use cuda_scope::HostAlloc;
    /// let h = gpu.pinned_with::<u8>(4096, HostAlloc::WRITE_COMBINED)?;
    /// assert!(h.flags().contains(HostAlloc::WRITE_COMBINED)); // fast for the GPU to read, slow for the CPU
    /// # Ok(()) }
    /// ```
    pub fn flags(&self) -> HostAlloc {
        self.flags
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The address kernels use for this memory (zero-copy); only for [`HostAlloc::MAPPED`] buffers.
    pub(crate) fn device_ptr(&self) -> crate::Result<u64> {
        if !self.flags.contains(HostAlloc::MAPPED) {
            return refused("mapped", Refusal::Kind { needed: "mapped" });
        }
        let mut d = 0;
        // SAFETY: the pointer is the start of a live mapped allocation; valid out-pointer; flags must be 0.
        let code = unsafe { ffi::cuMemHostGetDevicePointer_v2(&mut d, self.ptr.as_ptr().cast(), 0) };
        crate::error::check(code, || "getting the device address of mapped host memory".into())?;
        Ok(d)
    }
}

// SAFETY: pinned memory belongs to the process, not to a thread; the buffer owns it exclusively.
unsafe impl<T: Element> Send for PinnedBuffer<T> {}
// SAFETY: a shared reference gives only reads (`&[T]` of plain numbers, the flags, the device address),
// which threads may make at once; writing takes `&mut`, which excludes every other reference, and the
// GPU writes it only while a scope holds that `&mut`.
unsafe impl<T: Element> Sync for PinnedBuffer<T> {}

impl<T: Element> Deref for PinnedBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr/len describe one live, initialized allocation owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> DerefMut for PinnedBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and &mut self makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> std::fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedBuffer<{}>[{}] ({:?})", std::any::type_name::<T>(), self.len, self.flags)
    }
}

impl<T: Element> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        PINNED.write().unwrap_or_else(|e| e.into_inner()).remove(&(self.ptr.as_ptr() as usize));
        // SAFETY: allocated by cuMemHostAlloc in self.ctx (alive: self holds it) and freed once; no GPU
        // work can still use it, because every scope that lent it synchronized before its borrow ended.
        self.ctx.with_current(|| unsafe { ffi::cuMemFreeHost(self.ptr.as_ptr().cast()) });
    }
}

/// Where a live [`PinnedBuffer`] lies, for the kernel of a scope's coalesced copies.
struct Mapped {
    /// One past its last byte.
    end: usize,
    /// The device address of its first byte.
    device: u64,
    /// The context it was pinned in (its handle, as a number).
    context: usize,
}

/// Every live [`PinnedBuffer`], by its first byte's address: entered as it is allocated, removed before
/// it is freed. A forgotten buffer (`mem::forget`) is never freed, so its entry stays true.
static PINNED: RwLock<BTreeMap<usize, Mapped>> = RwLock::new(BTreeMap::new());

/// The lowest first byte and the highest end of every [`PinnedBuffer`] allocated so far (never narrowed
/// as buffers are freed): an address outside them is in no pinned buffer, known without the lock.
static PINNED_LOW: AtomicUsize = AtomicUsize::new(usize::MAX);
static PINNED_HIGH: AtomicUsize = AtomicUsize::new(0);

/// The live [`PinnedBuffer`] of context `ctx` that holds the host range `start..start + bytes`, where
/// one does: its first byte's and its end's host addresses, and its first byte's device address, what a
/// kernel of that context reads or writes in place of it. `None` for any other memory (pageable, pinned
/// by another library, of another context). The answer stays true while the range is borrowed: the
/// buffer cannot be freed meanwhile.
pub(crate) fn pinned_buffer_of(ctx: &Context, start: usize, bytes: usize) -> Option<(usize, usize, u64)> {
    // Entered before the bounds widen: a buffer whose bounds a thread sees is in the map it then reads.
    if start < PINNED_LOW.load(Relaxed) || start >= PINNED_HIGH.load(Relaxed) {
        return None;
    }
    let map = PINNED.read().unwrap_or_else(|e| e.into_inner());
    let (&first, m) = map.range(..=start).next_back()?;
    let inside = start.checked_add(bytes).is_some_and(|end| end <= m.end);
    (inside && m.context == ctx.raw() as usize).then_some((first, m.end, m.device))
}

/// A `Vec` pinned in place with `cuMemHostRegister` (`cudaHostRegister`). It owns the `Vec`, so the
/// memory cannot be freed or moved while it is registered; [`Registered::into_vec`] unregisters and
/// gives it back. Forgetting it (`mem::forget`) leaks the memory, still pinned: nothing worse.
/// Made by [`crate::Gpu::register`]; for one transfer of part of a `Vec`, see [`crate::Gpu::pin_in_place`].
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// let mut v = gpu.register(vec![0f32; 1 << 20])?; // cuMemHostRegister: pinned where it lies
/// let (mut d, streams) = (gpu.alloc::<f32>(1 << 20)?, gpu.streams(1)?);
/// gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d), &mut v))?; // at pinned speed
/// let v: Vec<f32> = v.into_vec();
/// # Ok(()) }
/// ```
pub struct Registered<T: Element> {
    vec: Vec<T>,
    ctx: Arc<Context>,
}

impl<T: Element> Registered<T> {
    pub(crate) fn new(ctx: &Arc<Context>, vec: Vec<T>) -> crate::Result<Self> {
        register(ctx, &vec)?;
        Ok(Registered { vec, ctx: ctx.clone() })
    }

    /// Unregisters the memory and returns the `Vec`.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let v = gpu.register(vec![1u8; 4096])?;
    /// let v: Vec<u8> = v.into_vec(); // cuMemHostUnregister; the same allocation, pageable again
    /// assert_eq!(v.len(), 4096);
    /// # Ok(()) }
    /// ```
    pub fn into_vec(mut self) -> Vec<T> {
        unregister(&self.ctx, &self.vec);
        std::mem::take(&mut self.vec) // an empty Vec is never registered, so Drop does nothing more
    }
}

impl<T: Element> Deref for Registered<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.vec
    }
}

impl<T: Element> DerefMut for Registered<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.vec
    }
}

impl<T: Element> std::fmt::Debug for Registered<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registered<{}>[{}]", std::any::type_name::<T>(), self.vec.len())
    }
}

impl<T: Element> Drop for Registered<T> {
    fn drop(&mut self) {
        if !self.vec.is_empty() {
            unregister(&self.ctx, &self.vec);
        }
    }
}

/// Pins `slice` in place, runs `f` on it, and unregisters it, also if `f` panics. The registration
/// cannot outlive the borrow: no guard is handed out that could be forgotten.
pub(crate) fn pin_in_place<T: Element, R>(
    ctx: &Arc<Context>,
    slice: &mut [T],
    f: impl FnOnce(&mut [T]) -> R,
) -> crate::Result<R> {
    struct Unregister<'a, T> {
        ctx: &'a Context,
        base: *const T,
    }
    impl<T> Drop for Unregister<'_, T> {
        fn drop(&mut self) {
            // SAFETY: registered below with this base address; unregistered once.
            self.ctx.with_current(|| unsafe { ffi::cuMemHostUnregister(self.base as *mut _) });
        }
    }
    register(ctx, slice)?;
    let _guard = Unregister { ctx, base: slice.as_ptr() };
    Ok(f(slice))
}

fn register<T>(ctx: &Context, slice: &[T]) -> crate::Result<()> {
    if slice.is_empty() {
        return refused("pin in place", Refusal::Empty);
    }
    let bytes = std::mem::size_of_val(slice);
    ctx.make_current()?;
    // SAFETY: the range is one live allocation, which the caller keeps alive and in place until it
    // unregisters it. The driver only pins it; it does not write it.
    let code = unsafe { ffi::cuMemHostRegister_v2(slice.as_ptr() as *mut _, bytes, 0) };
    crate::error::check(code, || format!("pinning {} in place (cuMemHostRegister)", Bytes(bytes)))
}

fn unregister<T>(ctx: &Context, slice: &[T]) {
    // SAFETY: registered by `register` with this base address; unregistered once.
    ctx.with_current(|| unsafe { ffi::cuMemHostUnregister(slice.as_ptr() as *mut _) });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine() {
        let f = HostAlloc::MAPPED | HostAlloc::PORTABLE;
        assert!(f.contains(HostAlloc::MAPPED) && f.contains(HostAlloc::PORTABLE));
        assert!(!f.contains(HostAlloc::WRITE_COMBINED));
        assert!(HostAlloc::DEFAULT.contains(HostAlloc::DEFAULT));
    }

    #[test]
    fn fill_sets_every_element() {
        let mut v = vec![0u32; 10_007];
        fill(&mut v, |i| i as u32 * 3);
        assert!(v.iter().enumerate().all(|(i, x)| *x == i as u32 * 3));
    }

    #[test]
    fn pageable_fills_or_refuses_what_the_host_cannot_hold() {
        assert_eq!(pageable(5, |i| i as u32 * 2).unwrap(), vec![0, 2, 4, 6, 8]);
        let err = pageable::<f32>(usize::MAX / 4, |_| 0.0).unwrap_err();
        assert!(matches!(err, crate::Error::TooLarge(ref t) if t.memory == Memory::Host), "{err}");
        let (available, _) = meminfo().expect("Linux has /proc/meminfo");
        let err = pageable::<u8>(available, |_| 0).unwrap_err();
        assert!(matches!(err, crate::Error::TooLarge(_)) && err.to_string().contains("kept free"), "{err}");
    }
}
