//! Device memory, and the element types that may live in any buffer a copy fills.

use std::{marker::PhantomData, sync::Arc};

use anyhow::{bail, Context as _};
use cust::sys;

use crate::{
    context::Context,
    ffi::{self, check},
    report::fmt_bytes,
};

/// Plain numbers: every bit pattern, all-zero included, is a valid value. Only these may be copied
/// back from the GPU, which can write any bits (a `bool` holding 2 would be undefined behaviour).
/// Sealed: the list below is complete.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {}
mod sealed {
    pub trait Sealed {}
}
macro_rules! element {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Element for $t {})* };
}
element!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

/// `len` elements of device memory (`cudaMalloc`), zeroed, freed on drop. It has no methods that
/// touch its memory: a [`crate::Scope`] lends it to copies and kernels and orders them.
pub struct DeviceBuffer<T: Element> {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: Arc<Context>,
    _elements: PhantomData<T>,
}

// Send and Sync follow from the fields: device memory belongs to the context, not to a thread, and a
// shared reference offers only the length and reads (`Stager::download`), which may run at once.

impl<T: Element> DeviceBuffer<T> {
    /// Allocates and zeroes `len` elements in `ctx`, with a clear error when the device has too little free.
    pub(crate) fn zeroed(ctx: &Arc<Context>, name: &str, len: usize) -> anyhow::Result<Self> {
        if len == 0 {
            bail!("a device buffer needs at least one element");
        }
        let bytes = len.checked_mul(std::mem::size_of::<T>()).context("allocation size overflows")?;
        let (free, _) = memory_info(ctx)?;
        if bytes > free {
            bail!(
                "needs {} of device memory, but {name} has only {} free: choose a smaller size",
                fmt_bytes(bytes),
                fmt_bytes(free)
            );
        }
        let mut ptr = 0;
        // SAFETY: valid out-pointer, nonzero size; the context is current (memory_info made it so).
        check(unsafe { ffi::cuMemAlloc_v2(&mut ptr, bytes) }, || {
            format!("allocating {} of device memory", fmt_bytes(bytes))
        })?;
        let buf = DeviceBuffer { ptr, len, ctx: ctx.clone(), _elements: PhantomData };
        // SAFETY: the `bytes` bytes just allocated. The memset is queued on the legacy default stream,
        // which is then synchronized, so the zeros are in place before anyone can use the buffer.
        check(unsafe { ffi::cuMemsetD8_v2(ptr, 0, bytes) }, || "zeroing new device memory".into())?;
        // SAFETY: the legacy default stream (handle 0) of the current context.
        check(unsafe { ffi::cuStreamSynchronize(std::ptr::null_mut()) }, || "zeroing new device memory".into())?;
        Ok(buf)
    }

    pub fn len(&self) -> usize {
        self.len
    }

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
        write!(f, "DeviceBuffer<{}>[{}]", std::any::type_name::<T>(), self.len)
    }
}

impl<T: Element> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated once, freed once, in its own context (kept alive by self.ctx). No GPU work
        // uses it: every scope and stager that lent it synchronized before its borrow ended.
        self.ctx.with_current(|| unsafe { ffi::cuMemFree_v2(self.ptr) });
    }
}

/// (free, total) device memory of `ctx`'s GPU in bytes; makes `ctx` current.
pub(crate) fn memory_info(ctx: &Context) -> anyhow::Result<(usize, usize)> {
    ctx.make_current()?;
    let (mut free, mut total) = (0, 0);
    // SAFETY: two valid out-pointers; the context is current.
    check(unsafe { ffi::cuMemGetInfo_v2(&mut free, &mut total) }, || "querying device memory".into())?;
    Ok((free, total))
}
