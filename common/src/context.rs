//! The CUDA context that every resource of one GPU lives in, kept alive by every one of them.
//!
//! Device memory, pinned host memory, streams, events and loaded kernels all belong to a context: when
//! the context goes, the driver frees them all. So each of those types holds an `Arc<Context>`, and the
//! context is released only after the last of them is dropped, in whatever order a program drops
//! things (struct fields drop in declaration order, which is easy to get wrong).

use std::{cell::Cell, sync::Arc};

use crate::error::{NoDriver, NoGpu};
use crate::ffi as sys;

use crate::{error::check, ffi};

thread_local! {
    /// The context `common` last made current on this thread, or null where it does not know: what a
    /// scope's operations take as current without asking the driver ([`Context::is_known_current`]).
    static KNOWN_CURRENT: Cell<sys::CUcontext> = const { Cell::new(std::ptr::null_mut()) };
}

/// A GPU's primary context: the one the CUDA runtime (and Nsight) use too. Retained on creation and
/// released when the last `Arc` goes.
pub(crate) struct Context {
    raw: sys::CUcontext,
    device: sys::CUdevice,
    owned: bool,
}

// SAFETY: a CUcontext handle may be used from any thread; this type only makes it current, compares it
// and releases it once.
unsafe impl Send for Context {}
// SAFETY: as above; no method mutates the handle.
unsafe impl Sync for Context {}

impl Context {
    /// Retains GPU `ordinal`'s primary context and makes it current on this thread.
    pub fn primary(ordinal: u32) -> crate::Result<Arc<Context>> {
        driver_init()?;
        let count = device_count()?;
        if ordinal >= count {
            return Err(NoGpu { asked: ordinal, count }.into());
        }
        let mut device = 0;
        // SAFETY: valid out-pointer; the ordinal was checked against the device count.
        check(unsafe { ffi::cuDeviceGet(&mut device, ordinal as i32) }, || "opening the CUDA device".into())?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device handle.
        check(unsafe { ffi::cuDevicePrimaryCtxRetain(&mut raw, device) }, || "creating a CUDA context".into())?;
        let ctx = Arc::new(Context { raw, device, owned: false });
        ctx.make_current()?;
        Ok(ctx)
    }

    /// A context of its own on GPU 0 (`cuCtxCreate`), as a foreign library might make: for tests that
    /// hand the scope a stream or buffer from another context.
    #[cfg(test)]
    pub fn separate() -> crate::Result<Arc<Context>> {
        driver_init()?;
        let mut device = 0;
        // SAFETY: valid out-pointer.
        check(unsafe { ffi::cuDeviceGet(&mut device, 0) }, || "opening the CUDA device".into())?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device; flags 0.
        check(unsafe { ffi::cuCtxCreate_v2(&mut raw, 0, device) }, || "creating a CUDA context".into())?;
        // cuCtxCreate pushed it: popped, so that the thread's stack is as it was (what `common` knows).
        let mut popped = std::ptr::null_mut();
        // SAFETY: valid out-pointer; pops the context just pushed.
        check(unsafe { ffi::cuCtxPopCurrent_v2(&mut popped) }, || "popping a new CUDA context".into())?;
        Ok(Arc::new(Context { raw, device, owned: true }))
    }

    /// Makes this context current on the calling thread (what `cudaSetDevice` does).
    pub fn make_current(&self) -> crate::Result<()> {
        // SAFETY: a live context handle (self holds a reference on it).
        let made = check(unsafe { ffi::cuCtxSetCurrent(self.raw) }, || "making the GPU's context current".into());
        KNOWN_CURRENT.set(if made.is_ok() { self.raw } else { std::ptr::null_mut() });
        made
    }

    /// Whether `common` made this context current on this thread last, so that it is current unless code
    /// outside `common` (another CUDA library, say) changed it since: one read of a thread-local, where
    /// asking the driver ([`Context::ensure_current`]) is a call. What relies on it must cope with the
    /// other case, as the scope does: a call that fails for it is made again once
    /// [`Context::make_current_if_not`] has made this context current.
    #[inline]
    pub fn is_known_current(&self) -> bool {
        KNOWN_CURRENT.get() == self.raw
    }

    /// Runs `f` with this context current, then restores the caller's: for drops, which can happen on
    /// any thread, with any context current. `None`, without running `f`, if the context could not be
    /// made current.
    pub fn with_current<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let known = KNOWN_CURRENT.get();
        // SAFETY: a live context handle.
        if unsafe { ffi::cuCtxPushCurrent_v2(self.raw) } != ffi::SUCCESS {
            return None;
        }
        let r = f();
        let mut popped = std::ptr::null_mut();
        // SAFETY: valid out-pointer; pops what was pushed above.
        let code = unsafe { ffi::cuCtxPopCurrent_v2(&mut popped) };
        // The caller's context is current again, as it was before the push (what was known of it still is).
        KNOWN_CURRENT.set(if code == ffi::SUCCESS { known } else { std::ptr::null_mut() });
        Some(r)
    }

    /// Makes this context current unless it already is: cheaper than setting it every time.
    pub fn ensure_current(&self) -> crate::Result<()> {
        self.make_current_if_not().map(drop)
    }

    /// [`Context::ensure_current`], saying whether another context (or none) was current.
    pub fn make_current_if_not(&self) -> crate::Result<bool> {
        let mut current = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check(unsafe { ffi::cuCtxGetCurrent(&mut current) }, || "reading the current context".into())?;
        if current == self.raw {
            KNOWN_CURRENT.set(self.raw);
            Ok(false)
        } else {
            self.make_current().map(|()| true)
        }
    }

    /// The handle: for tests that make this context current behind `common`'s back, and to name the
    /// context that pinned a buffer.
    pub fn raw(&self) -> sys::CUcontext {
        self.raw
    }

    pub fn device(&self) -> sys::CUdevice {
        self.device
    }

    /// Whether `raw` is this context's handle: for a handle another library or the driver reports.
    pub fn is_raw(&self, raw: sys::CUcontext) -> bool {
        self.raw == raw
    }

    /// Whether `other` is this very context (two handles on one GPU's primary context are).
    pub fn is(&self, other: &Context) -> bool {
        self.raw == other.raw
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if self.is_known_current() {
            KNOWN_CURRENT.set(std::ptr::null_mut());
        }
        // SAFETY: retained (or created) once in the constructor, released once here; every resource
        // of the context held an Arc of it, so none is left.
        unsafe {
            if self.owned {
                ffi::cuCtxDestroy_v2(self.raw);
            } else {
                ffi::cuDevicePrimaryCtxRelease_v2(self.device);
            }
        }
    }
}

/// Loads the driver's library (`libcuda.so.1`) and calls `cuInit`, with one error for each way a machine
/// can lack a usable GPU.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// match cuda_scope::device::driver_init() {
///     Ok(()) => println!("a driver, and at least one GPU"),
///     Err(e) if e.is_no_gpu() => println!("{e}"), // why not, in one line
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
pub fn driver_init() -> crate::Result<()> {
    if let Err(e) = ffi::load() {
        return Err(match e.symbol {
            None => NoDriver::Library { library: e.library.to_string(), loader: e.message.clone() },
            Some(symbol) => NoDriver::EntryPoint { library: e.library.to_string(), symbol: symbol.to_string() },
        }
        .into());
    }
    // SAFETY: cuInit takes flags (must be 0) and may be called more than once.
    let code = unsafe { ffi::cuInit(0) };
    match code {
        ffi::SUCCESS => Ok(()),
        ffi::ERROR_STUB_LIBRARY => Err(NoDriver::Stub.into()),
        ffi::ERROR_NO_DEVICE => Err(NoGpu { asked: 0, count: 0 }.into()),
        ffi::ERROR_SYSTEM_DRIVER_MISMATCH => Err(NoDriver::VersionMismatch.into()),
        code => Err(NoDriver::Start { code }.into()),
    }
}

/// An attribute of `device` (`cuDeviceGetAttribute`).
pub(crate) fn device_attribute(device: sys::CUdevice, a: sys::CUdevice_attribute) -> crate::Result<i32> {
    let mut v = 0;
    // SAFETY: valid out-pointer and device handle.
    check(unsafe { ffi::cuDeviceGetAttribute(&mut v, a, device) }, || format!("reading device attribute {a}"))?;
    Ok(v)
}

/// How many CUDA devices this machine has (after `CUDA_VISIBLE_DEVICES`).
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// let n = cuda_scope::device::device_count()?;
/// println!("{n} GPUs: CUDA_DEVICE may be 0..{n}");
/// # Ok(()) }
/// ```
pub fn device_count() -> crate::Result<u32> {
    driver_init()?;
    let mut n = 0;
    // SAFETY: valid out-pointer; the driver is initialized.
    check(unsafe { ffi::cuDeviceGetCount(&mut n) }, || "counting CUDA devices".into())?;
    Ok(n as u32)
}
