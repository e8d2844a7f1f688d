//! Streams and events of our own: each keeps its context alive, and none offers a way to queue work
//! that the scope does not see.

use std::{cell::RefCell, sync::Arc};

use crate::ffi as sys;

use crate::{context::Context, error::check, ffi};

/// A CUDA stream. Made by [`crate::Gpu::streams`] as `cudaStreamNonBlocking`: it runs concurrently
/// with the legacy default stream (stream 0), which other libraries in the process may use.
///
/// Or another library's stream, borrowed ([`Stream::borrow_raw`]): it behaves as ours in a scope, and
/// is never destroyed by us.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// let streams = gpu.streams(2)?; // cudaStreamNonBlocking, destroyed when dropped
/// gpu.scope(&streams, |s| s.stream(1).synchronize())?; // lent to a scope, which queues work on them
/// streams[0].synchronize()?;
/// # Ok(()) }
/// ```
pub struct Stream {
    raw: sys::CUstream,
    blocking: bool,
    /// Made by us, and destroyed on drop; `false` for a stream borrowed from another library.
    owned: bool,
    ctx: Arc<Context>,
}

// SAFETY: the driver's stream handles may be used from any thread: calls that take one identify its
// context from the handle. Not Sync: a scope's bookkeeping assumes one thread queues on its streams.
unsafe impl Send for Stream {}

impl Stream {
    pub(crate) fn new(ctx: &Arc<Context>, blocking: bool) -> crate::Result<Stream> {
        ctx.make_current()?;
        let flags = if blocking { sys::CU_STREAM_DEFAULT } else { sys::CU_STREAM_NON_BLOCKING };
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the flags are the driver's own; the context is current.
        check(unsafe { ffi::cuStreamCreate(&mut raw, flags) }, || "creating a stream".into())?;
        Ok(Stream { raw, blocking, owned: true, ctx: ctx.clone() })
    }

    /// Another library's stream, borrowed in `ctx`: see [`Stream::borrow_raw`], whose promise the caller
    /// makes.
    ///
    /// # Safety
    /// As [`Stream::borrow_raw`]'s.
    pub(crate) unsafe fn borrowed(ctx: &Arc<Context>, raw: *mut std::ffi::c_void) -> crate::Result<Stream> {
        // A null handle, and cuda.h's CU_STREAM_LEGACY and CU_STREAM_PER_THREAD ((CUstream)0x1 and 0x2).
        if (raw as usize) < 3 {
            return crate::error::refused("borrowing a stream", crate::Refusal::DefaultStream);
        }
        let raw: sys::CUstream = raw.cast();
        let mut of = std::ptr::null_mut();
        // SAFETY: a live stream (the caller's promise) and a valid out-pointer.
        check(unsafe { ffi::cuStreamGetCtx(raw, &mut of) }, || "borrowing a stream: reading its context".into())?;
        if !ctx.is_raw(of) {
            // The GPU's context is its primary context, which the CUDA runtime and cudarc's
            // CudaContext::new use too.
            return crate::error::refused("borrowing a stream", crate::Refusal::Foreign(crate::Foreign::Context));
        }
        let mut flags = 0;
        // SAFETY: as above.
        check(unsafe { ffi::cuStreamGetFlags(raw, &mut flags) }, || "borrowing a stream: reading its flags".into())?;
        let blocking = flags & sys::CU_STREAM_NON_BLOCKING == 0;
        Ok(Stream { raw, blocking, owned: false, ctx: ctx.clone() })
    }

    /// Whether this stream was borrowed from another library ([`Stream::borrow_raw`]), rather than made
    /// by us: if so, dropping it leaves the stream alive, its owner's.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let streams = gpu.streams(1)?;
    /// assert!(!streams[0].is_borrowed()); // ours: destroyed when dropped
    /// # Ok(()) }
    /// ```
    pub fn is_borrowed(&self) -> bool {
        !self.owned
    }

    /// Whether the stream is capturing into a graph (`cuStreamIsCapturing`): asked of a borrowed stream
    /// before a scope queues on it, since its owner may have begun a capture that would take the scope's
    /// work into a graph to run later.
    pub(crate) fn is_capturing(&self) -> crate::Result<bool> {
        let mut status = sys::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a live stream (ours, or borrowed under its owner's promise) and a valid out-pointer.
        check(unsafe { ffi::cuStreamIsCapturing(self.raw, &mut status) }, || {
            "asking whether a stream captures".into()
        })?;
        Ok(status != sys::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Whether this stream waits for the legacy default stream and it for this one (`cudaStreamCreate`
    /// without flags), rather than running independently of it (`cudaStreamNonBlocking`).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let (free, tied) = (gpu.streams(1)?, gpu.blocking_streams(1)?);
    /// assert!(!free[0].is_blocking() && tied[0].is_blocking());
    /// # Ok(()) }
    /// ```
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// The flags the driver reports for this stream: `CU_STREAM_NON_BLOCKING` (1) or 0.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let streams = gpu.streams(1)?;
    /// assert_eq!(streams[0].driver_flags()?, 1); // CU_STREAM_NON_BLOCKING
    /// # Ok(()) }
    /// ```
    pub fn driver_flags(&self) -> crate::Result<u32> {
        let mut flags = 0;
        // SAFETY: a live stream and a valid out-pointer.
        check(unsafe { ffi::cuStreamGetFlags(self.raw, &mut flags) }, || "reading a stream's flags".into())?;
        Ok(flags)
    }

    /// Blocks until the work queued on this stream has finished (`cudaStreamSynchronize`).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let streams = gpu.streams(1)?;
    /// streams[0].synchronize()?; // nothing queued: returns at once
    /// # Ok(()) }
    /// ```
    pub fn synchronize(&self) -> crate::Result<()> {
        // SAFETY: a live stream.
        check(unsafe { ffi::cuStreamSynchronize(self.raw) }, || "waiting for a stream".into())
    }

    pub(crate) fn raw(&self) -> sys::CUstream {
        self.raw
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.blocking { "blocking" } else { "non-blocking" };
        write!(f, "Stream({:p}, {kind}{})", self.raw, if self.owned { "" } else { ", borrowed" })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return; // another library's: its owner destroys it
        }
        // SAFETY: created once, destroyed once; the driver finishes queued work before releasing it.
        self.ctx.with_current(|| unsafe { ffi::cuStreamDestroy_v2(self.raw) });
    }
}

/// A CUDA event (`cudaEventCreate`): with timing, for [`Event::elapsed_ms`], or without
/// (`CU_EVENT_DISABLE_TIMING`), which is all ordering needs and costs the driver less to record and wait on.
pub(crate) struct Event {
    raw: sys::CUevent,
    timing: bool,
    ctx: Arc<Context>,
}

// SAFETY: the driver's event handles may be used from any thread: calls that take one identify its
// context from the handle.
unsafe impl Send for Event {}

impl Event {
    pub fn new(ctx: &Arc<Context>, timing: bool) -> crate::Result<Event> {
        let mut raw = std::ptr::null_mut();
        let flags = if timing { 0 } else { sys::CU_EVENT_DISABLE_TIMING };
        // SAFETY: valid out-pointer; the driver's own flags; the context is pushed for the call.
        let code = ctx.with_current(|| unsafe { ffi::cuEventCreate(&mut raw, flags) });
        check(code.unwrap_or(ffi::ERROR_INVALID_CONTEXT), || "creating an event".into())?;
        Ok(Event { raw, timing, ctx: ctx.clone() })
    }

    /// `cudaEventRecord(event, stream)`.
    pub fn record(&self, stream: &Stream) -> crate::Result<()> {
        self.record_raw(stream.raw())
    }

    pub fn record_raw(&self, stream: sys::CUstream) -> crate::Result<()> {
        // SAFETY: a live event and stream of one context.
        check(unsafe { ffi::cuEventRecord(self.raw, stream) }, || "recording an event".into())
    }

    /// Milliseconds from `start` to this event; both must have completed, and both have timing.
    pub fn elapsed_ms(&self, start: &Event) -> crate::Result<f64> {
        if !(self.timing && start.timing) {
            return crate::error::refused("elapsed_ms", crate::Refusal::Untimed);
        }
        let mut ms = 0f32;
        // SAFETY: two live events and a valid out-pointer.
        check(unsafe { ffi::cuEventElapsedTime(&mut ms, start.raw, self.raw) }, || "reading the GPU timer".into())?;
        Ok(ms as f64)
    }

    /// Blocks the calling thread until the work before the event's last record has finished.
    pub fn synchronize(&self) -> crate::Result<()> {
        // SAFETY: a live event.
        check(unsafe { ffi::cuEventSynchronize(self.raw) }, || "waiting for an event".into())
    }

    pub fn raw(&self) -> sys::CUevent {
        self.raw
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once; the driver defers it while still pending.
        self.ctx.with_current(|| unsafe { ffi::cuEventDestroy_v2(self.raw) });
    }
}

/// Events of one context kept for reuse, with timing and without: creating one costs more than
/// recording it.
pub(crate) struct EventPool {
    ctx: Arc<Context>,
    timed: RefCell<Vec<Event>>,
    untimed: RefCell<Vec<Event>>,
}

impl EventPool {
    pub fn new(ctx: &Arc<Context>) -> EventPool {
        EventPool { ctx: ctx.clone(), timed: RefCell::new(Vec::new()), untimed: RefCell::new(Vec::new()) }
    }

    /// An event with timing: for `elapsed_ms`, the observer and timed scopes.
    pub fn timed(&self) -> crate::Result<Event> {
        match self.timed.borrow_mut().pop() {
            Some(e) => Ok(e),
            None => Event::new(&self.ctx, true),
        }
    }

    /// An event without timing: for ordering streams.
    pub fn untimed(&self) -> crate::Result<Event> {
        match self.untimed.borrow_mut().pop() {
            Some(e) => Ok(e),
            None => Event::new(&self.ctx, false),
        }
    }

    pub fn give(&self, events: impl IntoIterator<Item = Event>) {
        let (mut timed, mut untimed) = (self.timed.borrow_mut(), self.untimed.borrow_mut());
        for e in events {
            match e.timing {
                true => timed.push(e),
                false => untimed.push(e),
            }
        }
    }
}
