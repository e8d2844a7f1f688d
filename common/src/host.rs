//! Host buffer kinds. Pageable memory is a plain `Vec`; the pinned kinds live here.
//!
//! | kind | how | what it is for |
//! | --- | --- | --- |
//! | pinned | [`PinnedBuffer`] with [`HostAlloc::DEFAULT`] (`cuMemHostAlloc`, like `cudaMallocHost`) | DMA straight from/to it: full-speed, truly async copies |
//! | write-combined | [`HostAlloc::WRITE_COMBINED`] | the CPU writes it without caching: fast for the GPU to read, very slow for the CPU to read |
//! | mapped | [`HostAlloc::MAPPED`] | kernels read and write it across the bus (zero-copy) |
//! | portable | [`HostAlloc::PORTABLE`] | pinned for every context, not only the current one |
//! | pinned in place | [`Registered`] (`cuMemHostRegister`) | an existing allocation (a `Vec`) locked for as long as the guard lives |

use std::{
    ops::{BitOr, Deref, DerefMut},
    ptr::NonNull,
};

use anyhow::{bail, Context as _};
use cust::sys;

use crate::{error::cuda_error_name, report::fmt_bytes};

/// Plain numbers: any bit pattern, all-zero included, is a valid value.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {}
mod sealed {
    pub trait Sealed {}
}
macro_rules! element {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Element for $t {})* };
}
element!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

/// Ordinary pageable memory, `f(i)` for each element, with an error (not an abort) when the host
/// cannot provide it.
pub fn pageable<T: Element>(len: usize, f: impl Fn(usize) -> T + Sync) -> anyhow::Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        anyhow::anyhow!("cannot allocate {} of host memory", fmt_bytes(len.saturating_mul(std::mem::size_of::<T>())))
    })?;
    v.resize(len, f(0));
    crate::verify::par_fill(&mut v, f);
    Ok(v)
}

/// Flags of `cuMemHostAlloc` (`cudaHostAlloc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostAlloc(u32);

impl HostAlloc {
    pub const DEFAULT: HostAlloc = HostAlloc(0);
    pub const PORTABLE: HostAlloc = HostAlloc(sys::CU_MEMHOSTALLOC_PORTABLE);
    pub const MAPPED: HostAlloc = HostAlloc(sys::CU_MEMHOSTALLOC_DEVICEMAP);
    pub const WRITE_COMBINED: HostAlloc = HostAlloc(sys::CU_MEMHOSTALLOC_WRITECOMBINED);

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

/// Page-locked host memory from `cuMemHostAlloc`, zero-filled, freed with `cuMemFreeHost`.
pub struct PinnedBuffer<T: Element> {
    ptr: NonNull<T>,
    len: usize,
    flags: HostAlloc,
}

impl<T: Element> PinnedBuffer<T> {
    /// Pinned memory for `len` elements (like `cudaMallocHost`).
    pub fn new(len: usize) -> anyhow::Result<Self> {
        Self::with_flags(len, HostAlloc::DEFAULT)
    }

    pub fn with_flags(len: usize, flags: HostAlloc) -> anyhow::Result<Self> {
        if len == 0 {
            bail!("a pinned buffer needs at least one element");
        }
        let bytes = len.checked_mul(std::mem::size_of::<T>()).context("pinned allocation size overflows")?;
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer, nonzero size; the flags are the driver's own constants.
        let code = unsafe { sys::cuMemHostAlloc(&mut p, bytes, flags.0) };
        if code != sys::CUresult::CUDA_SUCCESS || p.is_null() {
            bail!(
                "the host refused to pin {} ({}): free memory or raise the locked-memory limit (ulimit -l)",
                fmt_bytes(bytes),
                cuda_error_name(code)
            );
        }
        let ptr = NonNull::new(p.cast::<T>()).unwrap();
        // SAFETY: the allocation holds `bytes` writable bytes; all-zero is a valid T (Element).
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        Ok(PinnedBuffer { ptr, len, flags })
    }

    /// A pinned buffer filled from `f(i)`.
    pub fn from_fn(len: usize, f: impl FnMut(usize) -> T) -> anyhow::Result<Self> {
        let mut b = Self::new(len)?;
        b.iter_mut().enumerate().for_each({
            let mut f = f;
            move |(i, x)| *x = f(i)
        });
        Ok(b)
    }

    pub fn flags(&self) -> HostAlloc {
        self.flags
    }

    /// The address kernels use for this memory (zero-copy); only for [`HostAlloc::MAPPED`] buffers.
    pub(crate) fn device_ptr(&self) -> anyhow::Result<u64> {
        if !self.flags.contains(HostAlloc::MAPPED) {
            bail!("this pinned buffer was not allocated with HostAlloc::MAPPED, so kernels cannot address it");
        }
        let mut d = 0;
        // SAFETY: the pointer is the start of a live mapped allocation; valid out-pointer; flags must be 0.
        let code = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, self.ptr.as_ptr().cast(), 0) };
        crate::error::check(code, || "getting the device address of mapped host memory".into())?;
        Ok(d)
    }
}

// SAFETY: pinned memory belongs to the process, not to a thread; the buffer owns it exclusively.
unsafe impl<T: Element> Send for PinnedBuffer<T> {}

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

impl<T: Element> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc and freed once; no GPU work can still use it, because
        // every scope that lent it to the GPU synchronized before its borrow ended.
        unsafe { sys::cuMemFreeHost(self.ptr.as_ptr().cast()) };
    }
}

/// An existing allocation pinned in place with `cuMemHostRegister` for as long as this guard lives.
/// The borrow keeps the memory from being freed, moved or reallocated while it is registered.
pub struct Registered<'a, T: Element> {
    slice: &'a mut [T],
}

impl<'a, T: Element> Registered<'a, T> {
    pub fn new(slice: &'a mut [T]) -> anyhow::Result<Self> {
        if slice.is_empty() {
            bail!("cannot pin an empty slice");
        }
        let bytes = std::mem::size_of_val(slice);
        // SAFETY: the range is one live allocation that the borrow keeps alive and in place until Drop.
        let code = unsafe { sys::cuMemHostRegister_v2(slice.as_mut_ptr().cast(), bytes, 0) };
        if code != sys::CUresult::CUDA_SUCCESS {
            bail!("the host refused to pin {} in place ({})", fmt_bytes(bytes), cuda_error_name(code));
        }
        Ok(Registered { slice })
    }
}

impl<T: Element> Deref for Registered<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T: Element> DerefMut for Registered<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

impl<T: Element> Drop for Registered<'_, T> {
    fn drop(&mut self) {
        // SAFETY: registered in `new` with this exact base address; unregistered once.
        unsafe { sys::cuMemHostUnregister(self.slice.as_mut_ptr().cast()) };
    }
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
    fn pageable_fills_or_refuses() {
        assert_eq!(pageable(5, |i| i as u32 * 2).unwrap(), vec![0, 2, 4, 6, 8]);
        let err = pageable::<f32>(usize::MAX / 4, |_| 0.0).unwrap_err().to_string();
        assert!(err.starts_with("cannot allocate"), "{err}");
    }

    #[test]
    fn empty_buffers_are_errors_not_panics() {
        assert!(PinnedBuffer::<f32>::new(0).is_err());
        assert!(Registered::<f32>::new(&mut []).is_err());
    }
}
