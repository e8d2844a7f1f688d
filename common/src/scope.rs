//! Stream scopes: async copies and kernel launches that borrow their buffers until the GPU is done.
//!
//! ```ignore
//! gpu.scope(&streams, |s| {
//!     let d = s.device(&mut d_data);                 // d_data is the scope's until it ends
//!     s.htod(&streams[0], &h_in, d)?;                // cudaMemcpyAsync(d, h_in, ..., H2D, streams[0])
//!     let copied = s.event_record(&streams[0])?;     // cudaEventRecord(copied, streams[0])
//!     s.stream_wait_event(&streams[1], copied)?;     // cudaStreamWaitEvent(streams[1], copied)
//!     s.launch(&streams[1], gpu.kernels.process(d, 100))?;
//!     s.dtoh(&streams[1], d, &mut h_out)?;
//!     Ok(())
//! })?;                                               // every stream synchronized: h_out is ready
//! ```
//!
//! What makes this safe without `unsafe` in the caller:
//! - Host memory handed to an async copy is borrowed (`&[T]` to read, `&mut [T]` to write) for the whole
//!   scope, and the scope synchronizes every stream before it returns, also on error or panic. Where it
//!   cannot prove that the GPU has stopped (a stream failed, and the context is not dead), it aborts the
//!   process rather than release memory the GPU may still write.
//! - Device buffers (and mapped host buffers, and managed buffers) are borrowed mutably for the scope
//!   and addressed through [`Dev`] handles: the host cannot touch them until every stream is idle. Like
//!   cudarc, the scope records an event after each operation and remembers, per buffer and byte range,
//!   the last write and the reads since. An operation on another stream that touches an overlapping
//!   range must be ordered after them: by the stream, by the waits the program made itself
//!   ([`Scope::event_record`], [`Scope::stream_wait_event`]), or, where those are missing, by a wait the
//!   scope adds and reports ([`Scope::ordering`]). The ordering known on each stream is a vector clock,
//!   so waits the program made are recognized, transitively.
//! - A prefetch of managed memory ([`Scope::prefetch`]) counts as a write of its range: it moves the
//!   pages, so it is ordered after the work on them and the work after it waits for it. Only managed
//!   views can be prefetched.
//! - One operation may not read and write overlapping bytes (a kernel's input and output views of one
//!   buffer, a copy within one buffer): the result would race.
//! - Streams, buffers and kernels of another context are refused. Everything the scope touches keeps
//!   its context alive.
//! - Handles are tied to their scope's lifetime (invariant, as in `std::thread::scope`) and carry the
//!   scope's id, so they cannot leak out of the scope or be used in another one.

use std::{
    cell::RefCell,
    ffi::c_void,
    marker::PhantomData,
    ops::Range,
    sync::atomic::{AtomicU64, Ordering as Atomic},
};

use anyhow::{anyhow, bail, Context as _};
use cust::sys;
use serde::Serialize;

use crate::{
    context::Context,
    ffi::{self, check, error_name, CuResult},
    host::PinnedBuffer,
    memory::{DeviceBuffer, Element, ManagedBuffer},
    report::fmt_bytes,
    stream::{Event, EventPool, Stream},
    timeline::{current_phase, Record, Recorder},
};

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// Invariant in `'scope`, like `std::thread::Scope`: a handle of one scope never fits another.
type Invariant<'scope> = PhantomData<fn(&'scope ()) -> &'scope ()>;

/// A device buffer (or mapped host buffer, or managed buffer) lent to a scope, or a sub-range of one.
/// Copy it freely.
pub struct Dev<'scope, T> {
    scope: u64,
    buffer: usize,
    /// Device address of element 0 of the whole buffer.
    base: u64,
    offset: usize,
    len: usize,
    _marker: PhantomData<(Invariant<'scope>, *const T)>,
}

impl<T> Clone for Dev<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Dev<'_, T> {}

impl<'scope, T> Dev<'scope, T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `range` of this view, like `&v[range]` (and, like it, panics when out of bounds).
    pub fn slice(self, range: Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "device range {range:?} out of bounds for length {}",
            self.len
        );
        Dev { offset: self.offset + range.start, len: range.end - range.start, ..self }
    }

    /// The device address of the first element of this view.
    pub(crate) fn ptr(&self) -> u64 {
        self.base + (self.offset * std::mem::size_of::<T>()) as u64
    }

    /// This view, read (`write == false`) or written by an operation.
    pub(crate) fn access(&self, write: bool) -> DevAccess {
        let size = std::mem::size_of::<T>();
        DevAccess {
            scope: self.scope,
            buffer: self.buffer,
            bytes: self.offset * size..(self.offset + self.len) * size,
            write,
        }
    }
}

/// Where [`Scope::prefetch`] moves managed memory: to the scope's GPU, or back to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum To {
    Device,
    Host,
}

/// An event recorded on a stream of a scope (`cudaEventRecord`), for other streams to wait on.
#[derive(Clone, Copy)]
pub struct ScopeEvent<'scope> {
    scope: u64,
    index: usize,
    _marker: Invariant<'scope>,
}

/// What the scope saw of the ordering between streams: the waits the program made itself, and those
/// the scope had to add because two operations on different streams touched the same bytes and
/// nothing ordered them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ordering {
    /// `stream_wait_event` calls the program made.
    pub waits_made: usize,
    /// Waits the scope added where the program's own were missing.
    pub waits_added: usize,
    /// The first conflict the scope had to order, in words.
    pub first_added: Option<String>,
}

impl Ordering {
    /// One line for a lesson's output.
    pub fn summary(&self) -> String {
        match &self.first_added {
            None => format!(
                "the scope found every cross-stream conflict ordered by the program's {} wait{}: none added",
                self.waits_made,
                if self.waits_made == 1 { "" } else { "s" }
            ),
            Some(first) => format!(
                "the scope had to add {} wait{} the program lacked (it made {}); the first: {first}",
                self.waits_added,
                if self.waits_added == 1 { "" } else { "s" },
                self.waits_made
            ),
        }
    }
}

/// One buffer range an operation reads or writes.
#[derive(Clone, Debug)]
pub(crate) struct DevAccess {
    scope: u64,
    buffer: usize,
    bytes: Range<usize>,
    write: bool,
}

/// A kernel launch, ready for [`Scope::launch`]; [`crate::kernels::Kernels`] makes them.
pub struct Launch<'scope> {
    name: &'static str,
    func: sys::CUfunction,
    context: sys::CUcontext,
    grid: u32,
    block: u32,
    params: Vec<Param>,
    accesses: Vec<DevAccess>,
    invalid: Option<String>,
    _scope: Invariant<'scope>,
}

/// One kernel argument, as the kernel declares it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Param {
    Ptr(u64),
    U64(u64),
    U32(u32),
    I32(i32),
    F32(f32),
}

impl<'scope> Launch<'scope> {
    pub(crate) fn new(
        name: &'static str,
        func: sys::CUfunction,
        context: sys::CUcontext,
        (grid, block): (u32, u32),
        params: Vec<Param>,
        accesses: Vec<DevAccess>,
    ) -> Launch<'scope> {
        Launch { name, func, context, grid, block, params, accesses, invalid: None, _scope: PhantomData }
    }

    /// Marks the launch as one that must not run, saying why ([`Scope::launch`] returns the error).
    pub(crate) fn refuse(mut self, why: String) -> Self {
        self.invalid.get_or_insert(why);
        self
    }

    fn enqueue(&mut self, stream: sys::CUstream) -> CuResult {
        let mut args: Vec<*mut c_void> = self
            .params
            .iter_mut()
            .map(|p| match p {
                Param::Ptr(v) | Param::U64(v) => v as *mut u64 as *mut c_void,
                Param::U32(v) => v as *mut u32 as *mut c_void,
                Param::I32(v) => v as *mut i32 as *mut c_void,
                Param::F32(v) => v as *mut f32 as *mut c_void,
            })
            .collect();
        // SAFETY: the launchers in kernels.rs build `params` to match each kernel's signature (a test
        // checks them against the PTX); every pointer is a live device range of the length passed,
        // lent to the scope that orders this launch; the function lives in this scope's context.
        unsafe {
            ffi::cuLaunchKernel(
                self.func,
                self.grid,
                1,
                1,
                self.block,
                1,
                1,
                0,
                stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    }
}

/// Per lent buffer: the operations whose completion later operations on other streams may have to wait for.
#[derive(Default, Debug)]
pub(crate) struct Tracker {
    /// Lent from another context: every operation on it is refused.
    foreign: bool,
    /// Managed memory: the only kind a prefetch may move.
    managed: bool,
    accesses: Vec<Access>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Access {
    pub op: usize,
    pub stream: usize,
    pub seq: u64,
    pub write: bool,
    pub bytes: Range<usize>,
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

fn covers(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

impl Tracker {
    /// Accesses that conflict with one on `stream` (at least one of the two a write, overlapping
    /// bytes) made on other streams.
    pub fn conflicts<'a>(
        &'a self,
        stream: usize,
        write: bool,
        bytes: &'a Range<usize>,
    ) -> impl Iterator<Item = &'a Access> {
        self.accesses.iter().filter(move |a| a.stream != stream && (write || a.write) && overlaps(&a.bytes, bytes))
    }

    /// Remembers an access, forgetting those it makes redundant: a write is ordered after everything
    /// it overlaps, so it stands for what it covers; a read stands for earlier reads of its stream that it covers.
    pub fn record(&mut self, access: Access) {
        self.accesses.retain(|a| {
            let covered = covers(&access.bytes, &a.bytes);
            !(covered && (access.write || (!a.write && a.stream == access.stream)))
        });
        self.accesses.push(access);
    }
}

/// The ordering known on each stream: `clock[j][k]` is the last operation of stream k (by sequence
/// number) that is complete before anything queued next on stream j.
#[derive(Clone, Debug, Default)]
pub(crate) struct Clocks {
    clock: Vec<Vec<u64>>,
    seq: Vec<u64>,
}

impl Clocks {
    pub fn new(streams: usize) -> Clocks {
        Clocks { clock: vec![vec![0; streams]; streams], seq: vec![0; streams] }
    }

    /// Whether operation `seq` of stream `k` is ordered before what stream `j` queues next.
    pub fn ordered(&self, j: usize, k: usize, seq: u64) -> bool {
        j == k || self.clock[j][k] >= seq
    }

    /// Queues an operation on stream `j`: its sequence number, and what an event recorded right after
    /// it knows (everything before it on `j`, and everything `j` had waited for).
    pub fn queue(&mut self, j: usize) -> (u64, Vec<u64>) {
        self.seq[j] += 1;
        (self.seq[j], self.snapshot(j))
    }

    /// What stream `j` knows after waiting for an event that knew `snapshot`.
    pub fn wait(&mut self, j: usize, snapshot: &[u64]) {
        for (c, s) in self.clock[j].iter_mut().zip(snapshot) {
            *c = (*c).max(*s);
        }
    }

    /// What an event recorded now on stream `j` knows.
    pub fn snapshot(&self, j: usize) -> Vec<u64> {
        let mut s = self.clock[j].clone();
        s[j] = self.seq[j];
        s
    }
}

/// The work queued on a set of streams, with the buffers it borrows. See the module docs.
pub struct Scope<'scope, 'env: 'scope> {
    env: Env<'env>,
    streams: &'env [Stream],
    id: u64,
    state: RefCell<State>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// What a scope needs of its GPU.
#[derive(Clone, Copy)]
pub(crate) struct Env<'env> {
    pub ctx: &'env Context,
    pub events: &'env EventPool,
    pub recorder: &'env RefCell<Option<Recorder>>,
}

struct State {
    trackers: Vec<Tracker>,
    /// Events recorded in this scope, each with what it knows (its stream's vector clock then).
    events: Vec<(Event, Vec<u64>)>,
    /// Operations queued: (stream, what it is, event recorded after it).
    ops: Vec<(usize, OpInfo, usize)>,
    clocks: Clocks,
    ordering: Ordering,
    /// Set when an operation was queued but could not be tracked: nothing more may be queued.
    broken: Option<String>,
    /// Operations to put on the built-in timeline once the scope has synchronized.
    pending: Vec<Pending>,
}

/// What an operation is, for the built-in timeline: (kind, name, bytes moved).
type OpInfo = (&'static str, &'static str, usize);

/// An operation in words: `memcpy HtoD`, `kernel process`.
fn label(info: &OpInfo) -> String {
    match info.0 {
        "kernel" => format!("kernel {}", info.1),
        _ => info.1.to_string(),
    }
}

struct Pending {
    start: usize,
    end: usize,
    stream: usize,
    op: OpInfo,
    phase: String,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Lends a device buffer to this scope.
    pub fn device<T: Element>(&self, buf: &'scope mut DeviceBuffer<T>) -> Dev<'scope, T> {
        let foreign = !buf.context().is(self.env.ctx);
        self.handle(buf.ptr(), buf.len(), foreign, false)
    }

    /// Lends several device buffers to this scope, one handle each.
    pub fn devices<T: Element>(&self, bufs: &'scope mut [DeviceBuffer<T>]) -> Vec<Dev<'scope, T>> {
        bufs.iter_mut().map(|b| self.device(b)).collect()
    }

    /// Lends mapped pinned memory ([`crate::HostAlloc::MAPPED`]) to this scope, for kernels to read and
    /// write across the bus. The host cannot touch it until the scope ends.
    pub fn mapped<T: Element>(&self, buf: &'scope mut PinnedBuffer<T>) -> anyhow::Result<Dev<'scope, T>> {
        self.env.ctx.ensure_current()?;
        let foreign = !buf.context().is(self.env.ctx);
        Ok(self.handle(buf.device_ptr()?, buf.len(), foreign, false))
    }

    /// Lends managed memory ([`crate::Gpu::managed`]) to this scope: kernels and prefetches address it,
    /// and the host cannot touch it until the scope ends. Pages that are not on the GPU when a kernel
    /// touches them fault there, one migration at a time, unless a [`Scope::prefetch`] moved them first.
    pub fn managed<T: Element>(&self, buf: &'scope mut ManagedBuffer<T>) -> Dev<'scope, T> {
        let foreign = !buf.context().is(self.env.ctx);
        self.handle(buf.ptr(), buf.len(), foreign, true)
    }

    fn handle<T>(&self, base: u64, len: usize, foreign: bool, managed: bool) -> Dev<'scope, T> {
        let mut st = self.state.borrow_mut();
        st.trackers.push(Tracker { foreign, managed, accesses: Vec::new() });
        Dev { scope: self.id, buffer: st.trackers.len() - 1, base, offset: 0, len, _marker: PhantomData }
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyHostToDevice, stream)`. From pageable memory the driver
    /// stages the data and returns only when it has; from pinned memory it returns at once.
    pub fn htod<T: Element>(&self, stream: &Stream, src: &'scope [T], dst: Dev<'scope, T>) -> anyhow::Result<()> {
        if src.len() != dst.len {
            bail!("htod: source has {} elements, destination {}", src.len(), dst.len);
        }
        let bytes = std::mem::size_of_val(src);
        self.enqueue(stream, &[dst.access(true)], ("H2D", "memcpy HtoD", bytes), |s| {
            // SAFETY: `src` is borrowed for the whole scope, which synchronizes before the borrow ends;
            // `dst` is a live device range of `bytes` bytes (checked above) that this scope orders.
            unsafe { ffi::cuMemcpyHtoDAsync_v2(dst.ptr(), src.as_ptr().cast(), bytes, s) }
        })
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyDeviceToHost, stream)`.
    pub fn dtoh<T: Element>(&self, stream: &Stream, src: Dev<'scope, T>, dst: &'scope mut [T]) -> anyhow::Result<()> {
        if src.len != dst.len() {
            bail!("dtoh: source has {} elements, destination {}", src.len, dst.len());
        }
        let bytes = std::mem::size_of_val(dst);
        self.enqueue(stream, &[src.access(false)], ("D2H", "memcpy DtoH", bytes), |s| {
            // SAFETY: `dst` is borrowed mutably for the whole scope, which synchronizes before the borrow
            // ends, so nothing else reads or writes it meanwhile; `src` is a live device range of `bytes`;
            // T is an Element, so whatever bits arrive are a valid T.
            unsafe { ffi::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src.ptr(), bytes, s) }
        })
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyDeviceToDevice, stream)`. The ranges may not overlap.
    pub fn dtod<T: Element>(&self, stream: &Stream, src: Dev<'scope, T>, dst: Dev<'scope, T>) -> anyhow::Result<()> {
        if src.len != dst.len {
            bail!("dtod: source has {} elements, destination {}", src.len, dst.len);
        }
        let bytes = src.len * std::mem::size_of::<T>();
        self.enqueue(stream, &[src.access(false), dst.access(true)], ("DtoD", "memcpy DtoD", bytes), |s| {
            // SAFETY: two live, non-overlapping (checked by enqueue) device ranges of `bytes` bytes that
            // this scope orders.
            unsafe { ffi::cuMemcpyDtoDAsync_v2(dst.ptr(), src.ptr(), bytes, s) }
        })
    }

    /// `cudaMemsetD32Async`: sets every element to `value` (to poison outputs before a run, say).
    pub fn fill(&self, stream: &Stream, dst: Dev<'scope, f32>, value: f32) -> anyhow::Result<()> {
        self.enqueue(stream, &[dst.access(true)], ("memset", "memset", dst.len * 4), |s| {
            // SAFETY: `dst` is a live device range of `len` 4-byte words that this scope orders.
            unsafe { ffi::cuMemsetD32Async(dst.ptr(), value.to_bits(), dst.len, s) }
        })
    }

    /// `cudaMemPrefetchAsync(view, bytes, device or cudaCpuDeviceId, stream)`: moves the pages of a
    /// managed view to the scope's GPU or to the host on `stream`, ahead of the work that will touch them
    /// there, in bulk instead of a page fault at a time. Ordered like a write of the range. The driver
    /// widens the range to whole pages; moving a neighbour's page is safe ("memory accesses to this
    /// range are always coherent and are allowed even when the data is actively being migrated", says
    /// `cuMemPrefetchAsync`'s documentation), and costs only time.
    pub fn prefetch<T: Element>(&self, stream: &Stream, view: Dev<'scope, T>, to: To) -> anyhow::Result<()> {
        let name = match to {
            To::Device => "prefetch to device",
            To::Host => "prefetch to host",
        };
        if view.scope == self.id && !self.state.borrow().trackers[view.buffer].managed {
            bail!("{name}: only managed memory (Gpu::managed) prefetches, and this view is device or mapped memory");
        }
        let (kind, dst) = match to {
            To::Device => ("H2D", self.env.ctx.device()),
            To::Host => ("D2H", ffi::DEVICE_CPU),
        };
        let bytes = view.len * std::mem::size_of::<T>();
        self.enqueue(stream, &[view.access(true)], (kind, name, bytes), |s| match bytes {
            0 => ffi::SUCCESS, // the driver refuses an empty range; there is nothing to move
            // SAFETY: a live managed range of `bytes` bytes that this scope orders (the scope's id was
            // checked by enqueue, and the buffer was lent as managed memory); the destination is this
            // scope's device, whose context is current, or the host.
            _ => unsafe { ffi::cuMemPrefetchAsync(view.ptr(), bytes, dst, s) },
        })
    }

    /// Launches a kernel; the [`Launch`] (from [`crate::kernels::Kernels`]) says what it reads and writes.
    pub fn launch(&self, stream: &Stream, mut launch: Launch<'scope>) -> anyhow::Result<()> {
        let name = launch.name;
        if let Some(e) = launch.invalid.take() {
            bail!("kernel {name}: {e}");
        }
        if launch.context != self.env.ctx.raw() {
            bail!("kernel {name}: its module was loaded by another GPU's context");
        }
        let accesses = std::mem::take(&mut launch.accesses);
        self.enqueue(stream, &accesses, ("kernel", name, 0), |s| launch.enqueue(s))
    }

    /// `cudaEventRecord(event, stream)`: marks the work queued on `stream` so far, for
    /// [`Scope::stream_wait_event`].
    pub fn event_record(&self, stream: &Stream) -> anyhow::Result<ScopeEvent<'scope>> {
        let j = self.stream_index(stream)?;
        self.env.ctx.ensure_current()?;
        let mut st = self.state.borrow_mut();
        let event = self.env.events.take()?;
        event.record(stream)?;
        let snapshot = st.clocks.snapshot(j);
        st.events.push((event, snapshot));
        Ok(ScopeEvent { scope: self.id, index: st.events.len() - 1, _marker: PhantomData })
    }

    /// `cudaStreamWaitEvent(stream, event)`: work queued next on `stream` waits until the work before
    /// `event` is done.
    pub fn stream_wait_event(&self, stream: &Stream, event: ScopeEvent<'scope>) -> anyhow::Result<()> {
        if event.scope != self.id {
            bail!("stream_wait_event: an event of another scope");
        }
        let j = self.stream_index(stream)?;
        let mut st = self.state.borrow_mut();
        // SAFETY: a live stream and an event recorded in this scope.
        check(unsafe { ffi::cuStreamWaitEvent(stream.raw(), st.events[event.index].0.raw(), 0) }, || {
            "waiting for an event".into()
        })?;
        let snapshot = st.events[event.index].1.clone();
        st.clocks.wait(j, &snapshot);
        st.ordering.waits_made += 1;
        Ok(())
    }

    /// How the streams were ordered so far: the program's waits and those the scope added.
    pub fn ordering(&self) -> Ordering {
        self.state.borrow().ordering.clone()
    }

    /// Blocks until every stream of the scope is idle (`cudaDeviceSynchronize` for these streams).
    pub fn synchronize(&self) -> anyhow::Result<()> {
        synchronize_all(self.env.ctx, self.streams)
    }

    /// Whether every stream has finished its work, without blocking (`cudaStreamQuery`).
    pub fn is_idle(&self) -> anyhow::Result<bool> {
        for s in self.streams {
            // SAFETY: a live stream.
            match unsafe { ffi::cuStreamQuery(s.raw()) } {
                ffi::SUCCESS => {}
                ffi::ERROR_NOT_READY => return Ok(false),
                e => check(e, || "querying a stream".into())?,
            }
        }
        Ok(true)
    }

    fn stream_index(&self, stream: &Stream) -> anyhow::Result<usize> {
        self.streams
            .iter()
            .position(|s| s.raw() == stream.raw())
            .context("this stream is not one of the scope's streams")
    }

    fn enqueue(
        &self,
        stream: &Stream,
        accesses: &[DevAccess],
        info: OpInfo,
        op: impl FnOnce(sys::CUstream) -> CuResult,
    ) -> anyhow::Result<()> {
        let name = label(&info);
        let mut st = self.state.borrow_mut();
        if let Some(why) = &st.broken {
            bail!("{name}: refused, because an earlier operation of this scope could not be tracked ({why})");
        }
        let j = self.stream_index(stream).with_context(|| name.clone())?;
        // Code in the closure may have made another GPU's context current (by allocating on it, say).
        self.env.ctx.ensure_current()?;
        for (i, a) in accesses.iter().enumerate() {
            if a.scope != self.id {
                bail!("{name}: a device handle from another scope");
            }
            if st.trackers[a.buffer].foreign {
                bail!("{name}: a buffer of another GPU's context");
            }
            if let Some(b) = accesses[i + 1..]
                .iter()
                .find(|b| b.buffer == a.buffer && (a.write || b.write) && overlaps(&a.bytes, &b.bytes))
            {
                bail!(
                    "{name}: reads and writes overlapping bytes of one buffer ({}..{} and {}..{}), so its result would race",
                    a.bytes.start,
                    a.bytes.end,
                    b.bytes.start,
                    b.bytes.end
                );
            }
        }
        // Everything that can fail without queuing the operation comes first.
        let end = self.env.events.take()?;
        let start = match self.env.recorder.borrow().is_some() {
            true => Some(self.env.events.take()?),
            false => None,
        };
        // Conflicting accesses on other streams that nothing orders yet: wait for each (newest first,
        // since waiting for a later operation of a stream covers the earlier ones).
        let mut pending: Vec<(usize, usize, Access)> = Vec::new();
        for (i, a) in accesses.iter().enumerate() {
            pending.extend(st.trackers[a.buffer].conflicts(j, a.write, &a.bytes).map(|c| (i, a.buffer, c.clone())));
        }
        pending.sort_by_key(|x| std::cmp::Reverse(x.2.op));
        for (i, buffer, c) in pending {
            if st.clocks.ordered(j, c.stream, c.seq) {
                continue;
            }
            let (_, _, event) = st.ops[c.op];
            // SAFETY: a live stream and an event recorded after operation `c.op` in this scope.
            check(unsafe { ffi::cuStreamWaitEvent(stream.raw(), st.events[event].0.raw(), 0) }, || {
                format!("{name}: waiting for another stream")
            })?;
            let snapshot = st.events[event].1.clone();
            st.clocks.wait(j, &snapshot);
            st.ordering.waits_added += 1;
            if st.ordering.first_added.is_none() {
                let (k, other, _) = st.ops[c.op];
                let other = label(&other);
                let a = &accesses[i];
                let both = a.bytes.start.max(c.bytes.start)..a.bytes.end.min(c.bytes.end);
                st.ordering.first_added = Some(format!(
                    "{name} on stream {j} {} bytes {}..{} ({}) of lent buffer {buffer}, which {other} on stream {k} \
                     {} earlier, and nothing ordered the two",
                    if a.write { "writes" } else { "reads" },
                    both.start,
                    both.end,
                    fmt_bytes(both.len()),
                    if c.write { "writes" } else { "reads" }
                ));
            }
        }
        if let Some(s) = &start {
            if let Err(e) = s.record(stream) {
                self.env.events.give([end]);
                return Err(e);
            }
        }
        if let Err(e) = check(op(stream.raw()), || format!("{name} on stream {j}")) {
            self.env.events.give([end].into_iter().chain(start));
            return Err(e);
        }
        // Queued: from here on the operation is tracked whatever fails.
        let (seq, snapshot) = st.clocks.queue(j);
        let recorded = end.record(stream);
        st.events.push((end, snapshot));
        let event = st.events.len() - 1;
        let op_index = st.ops.len();
        st.ops.push((j, info, event));
        if let Err(e) = recorded {
            // Later operations could not be ordered after this one: the scope takes no more.
            st.broken = Some(format!("{e:#}"));
            return Err(e.context(format!("{name}: queued, but its completion cannot be tracked")));
        }
        for a in accesses {
            st.trackers[a.buffer].record(Access {
                op: op_index,
                stream: j,
                seq,
                write: a.write,
                bytes: a.bytes.clone(),
            });
        }
        if let Some(s) = start {
            st.events.push((s, Vec::new()));
            let start = st.events.len() - 1;
            st.pending.push(Pending {
                start,
                end: event,
                stream: stream.raw() as usize,
                op: info,
                phase: current_phase(),
            });
        }
        Ok(())
    }
}

/// How a set of streams ended: idle, stopped by an error that killed the context, or unknown.
#[derive(Debug, PartialEq)]
pub(crate) enum Settled {
    Idle,
    /// A stream failed, and the GPU is proven to have stopped: the context is idle or dead.
    Failed(CuResult),
    /// A stream failed and nothing proves the GPU has stopped writing.
    Unknown(CuResult),
}

/// Waits for every stream (all of them, whatever the first returns), then decides how they ended. If
/// one failed, `context_sync` (`cuCtxSynchronize`) must show the whole context idle or dead.
/// `context_sync` returns `None` when it could not even make the context current.
pub(crate) fn settle(
    streams: impl Iterator<Item = CuResult>,
    context_sync: impl FnOnce() -> Option<CuResult>,
) -> Settled {
    let first_error = streams.fold(None, |first, r| first.or((r != ffi::SUCCESS).then_some(r)));
    let Some(error) = first_error else { return Settled::Idle };
    match context_sync() {
        Some(ffi::SUCCESS) => Settled::Failed(error),
        Some(c) if ffi::CONTEXT_KILLED.contains(&c) => Settled::Failed(error),
        Some(other) => Settled::Unknown(other),
        None => Settled::Unknown(error),
    }
}

/// Synchronizes every stream. Returns an error when one failed and the GPU has stopped; aborts the
/// process when the GPU may still be writing into memory whose borrow would end on return.
pub(crate) fn synchronize_all<'a>(ctx: &Context, streams: impl IntoIterator<Item = &'a Stream>) -> anyhow::Result<()> {
    // SAFETY: live streams; cuCtxSynchronize runs only with this context pushed (with_current).
    let streams_done = streams.into_iter().map(|s| unsafe { ffi::cuStreamSynchronize(s.raw()) });
    match settle(streams_done, || ctx.with_current(|| unsafe { ffi::cuCtxSynchronize() })) {
        Settled::Idle => Ok(()),
        Settled::Failed(code) => Err(anyhow!("running the queued GPU work: {}", error_name(code))),
        Settled::Unknown(code) => {
            eprintln!(
                "fatal: a GPU stream failed and the driver cannot say whether copies into host memory have \
                 stopped ({}); aborting rather than release that memory",
                error_name(code)
            );
            std::process::abort()
        }
    }
}

/// Runs `f` in a scope over `streams`; see [`crate::Gpu::scope`] and [`crate::Gpu::timed`].
pub(crate) fn run<'env, R>(
    env: Env<'env>,
    streams: &'env [Stream],
    timed: bool,
    f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> anyhow::Result<R>,
) -> anyhow::Result<(R, Option<f64>)> {
    let Some(first) = streams.first() else { bail!("a scope needs at least one stream") };
    if let Some(i) = streams.iter().position(|s| !s.context().is(env.ctx)) {
        bail!("stream {i} of this scope belongs to another GPU's context");
    }
    env.ctx.make_current()?;
    let scope = Scope {
        env,
        streams,
        id: NEXT_SCOPE.fetch_add(1, Atomic::Relaxed),
        state: RefCell::new(State {
            trackers: Vec::new(),
            events: Vec::new(),
            ops: Vec::new(),
            clocks: Clocks::new(streams.len()),
            ordering: Ordering::default(),
            broken: None,
            pending: Vec::new(),
        }),
        _scope: PhantomData,
        _env: PhantomData,
    };
    // Whatever happens below, the streams are synchronized before the borrows end: once on the way out
    // (`synced` says how that went), or here if an early return or a panic skipped it.
    struct Finish<'a, 'env> {
        scope: &'a Scope<'a, 'env>,
        synced: Option<bool>,
    }
    impl Drop for Finish<'_, '_> {
        fn drop(&mut self) {
            let synced = self.synced.unwrap_or_else(|| self.scope.synchronize().is_ok());
            let mut st = self.scope.state.borrow_mut();
            let pending = std::mem::take(&mut st.pending);
            if let (true, Some(rec)) = (synced, self.scope.env.recorder.borrow_mut().as_mut()) {
                for p in pending {
                    let (Ok(start_ms), Ok(end_ms)) =
                        (st.events[p.start].0.elapsed_ms(&rec.origin), st.events[p.end].0.elapsed_ms(&rec.origin))
                    else {
                        continue;
                    };
                    let stream = rec.stream_id(p.stream);
                    let (kind, name, bytes) = p.op;
                    rec.records.push(Record {
                        device: rec.device,
                        phase: p.phase,
                        stream,
                        kind,
                        name: name.to_string(),
                        bytes,
                        start_ms: rec.origin_ms + start_ms,
                        end_ms: rec.origin_ms + end_ms,
                    });
                }
            }
            let events = std::mem::take(&mut st.events);
            self.scope.env.events.give(events.into_iter().map(|e| e.0));
        }
    }
    let mut finish = Finish { scope: &scope, synced: None };
    // Timing: `start` on the first stream and every other stream waits for it (fork); at the end the
    // first stream waits for every other stream and records `stop` (join), so stop - start spans all.
    let start = if timed { Some(fork(env.events, first, &streams[1..])?) } else { None };
    let result = f(&scope);
    let stop = match start {
        Some(_) if result.is_ok() => Some(join(&scope, first)?),
        _ => None,
    };
    let synced = scope.synchronize();
    finish.synced = Some(synced.is_ok());
    let elapsed = match (start, stop) {
        (Some(start), Some(stop)) if synced.is_ok() => {
            let ms = stop.elapsed_ms(&start);
            env.events.give([start, stop]);
            Some(ms?)
        }
        _ => None,
    };
    drop(finish);
    let r = result?;
    synced?;
    Ok((r, elapsed))
}

fn fork(events: &EventPool, first: &Stream, others: &[Stream]) -> anyhow::Result<Event> {
    let start = events.take()?;
    start.record(first)?;
    for s in others {
        // SAFETY: live stream and event handles of this context.
        check(unsafe { ffi::cuStreamWaitEvent(s.raw(), start.raw(), 0) }, || "forking streams".into())?;
    }
    Ok(start)
}

fn join(scope: &Scope<'_, '_>, first: &Stream) -> anyhow::Result<Event> {
    let events = scope.env.events;
    for s in &scope.streams[1..] {
        let e = events.take()?;
        e.record(s)?;
        // SAFETY: live stream and event handles of this context.
        let waited = check(unsafe { ffi::cuStreamWaitEvent(first.raw(), e.raw(), 0) }, || "joining streams".into());
        scope.state.borrow_mut().events.push((e, Vec::new()));
        waited?;
    }
    let stop = events.take()?;
    stop.record(first)?;
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(op: usize, stream: usize, write: bool, bytes: Range<usize>) -> Access {
        Access { op, stream, seq: op as u64 + 1, write, bytes }
    }

    fn conflicts(t: &Tracker, stream: usize, write: bool, bytes: Range<usize>) -> Vec<usize> {
        t.conflicts(stream, write, &bytes).map(|a| a.op).collect()
    }

    #[test]
    fn same_stream_never_conflicts() {
        let mut t = Tracker::default();
        t.record(acc(0, 0, true, 0..100));
        assert!(conflicts(&t, 0, false, 0..100).is_empty());
        assert!(conflicts(&t, 0, true, 0..100).is_empty());
    }

    #[test]
    fn read_after_write_on_another_stream_conflicts() {
        let mut t = Tracker::default();
        t.record(acc(7, 0, true, 0..100));
        assert_eq!(conflicts(&t, 1, false, 50..60), vec![7]);
        assert_eq!(conflicts(&t, 1, true, 99..200), vec![7]);
        assert!(conflicts(&t, 1, false, 100..200).is_empty(), "disjoint ranges are independent");
    }

    #[test]
    fn reads_do_not_conflict_with_reads() {
        let mut t = Tracker::default();
        t.record(acc(1, 0, false, 0..100));
        assert!(conflicts(&t, 1, false, 0..100).is_empty());
        assert_eq!(conflicts(&t, 1, true, 0..10), vec![1], "write after read");
    }

    #[test]
    fn a_covering_write_replaces_what_it_covers() {
        let mut t = Tracker::default();
        t.record(acc(1, 0, true, 0..50));
        t.record(acc(2, 1, false, 0..50));
        t.record(acc(3, 2, true, 0..100));
        assert_eq!(t.accesses, vec![acc(3, 2, true, 0..100)]);
        assert_eq!(conflicts(&t, 0, false, 10..20), vec![3]);
    }

    #[test]
    fn a_read_keeps_an_earlier_write_of_its_own_stream() {
        let mut t = Tracker::default();
        t.record(acc(1, 0, true, 0..100));
        t.record(acc(2, 0, false, 0..100));
        assert_eq!(conflicts(&t, 1, false, 0..100), vec![1], "a reader elsewhere still conflicts with the write");
    }

    #[test]
    fn clocks_know_what_a_wait_covers_transitively() {
        // stream 0 writes (op 1); stream 1 waits for it, then reads; stream 2 waits for stream 1.
        let mut c = Clocks::new(3);
        let (s0, snap0) = c.queue(0);
        assert!(!c.ordered(1, 0, s0), "nothing ordered yet");
        c.wait(1, &snap0);
        assert!(c.ordered(1, 0, s0));
        let (s1, _) = c.queue(1);
        let snap1 = c.snapshot(1);
        c.wait(2, &snap1);
        assert!(c.ordered(2, 1, s1) && c.ordered(2, 0, s0), "waiting for stream 1 orders after what it waited for");
        let (s0b, _) = c.queue(0);
        assert!(!c.ordered(2, 0, s0b), "later work on stream 0 is not covered");
    }

    #[test]
    fn settling_waits_for_every_stream_and_proves_the_gpu_stopped() {
        const ILLEGAL_ADDRESS: CuResult = 700;
        const CONTAINED: CuResult = 226;
        const UNKNOWN: CuResult = 999;
        const OPERATING_SYSTEM: CuResult = 304;
        let mut visited = 0;
        let results = [ILLEGAL_ADDRESS, ffi::SUCCESS, ffi::SUCCESS];
        let s = settle(
            results.iter().map(|r| {
                visited += 1;
                *r
            }),
            || Some(ILLEGAL_ADDRESS),
        );
        assert_eq!(visited, 3, "every stream is synchronized even after the first fails");
        assert_eq!(s, Settled::Failed(ILLEGAL_ADDRESS));
        assert_eq!(settle([ffi::SUCCESS; 2].into_iter(), || unreachable!()), Settled::Idle);
        assert_eq!(settle([UNKNOWN].into_iter(), || Some(ffi::SUCCESS)), Settled::Failed(UNKNOWN));
        assert_eq!(
            settle([CONTAINED].into_iter(), || Some(CONTAINED)),
            Settled::Failed(CONTAINED),
            "Hopper's contained faults"
        );
        assert_eq!(
            settle([UNKNOWN].into_iter(), || Some(OPERATING_SYSTEM)),
            Settled::Unknown(OPERATING_SYSTEM),
            "a failure that does not prove the GPU stopped"
        );
        assert_eq!(
            settle([UNKNOWN].into_iter(), || None),
            Settled::Unknown(UNKNOWN),
            "the context could not be made current"
        );
    }

    #[test]
    fn dev_slices_compute_addresses_and_byte_ranges() {
        let d: Dev<'_, f32> = Dev { scope: 1, buffer: 0, base: 0x1000, offset: 0, len: 100, _marker: PhantomData };
        let s = d.slice(10..30).slice(5..10);
        assert_eq!((s.offset, s.len), (15, 5));
        assert_eq!(s.ptr(), 0x1000 + 60);
        assert_eq!(s.access(true).bytes, 60..80);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn dev_slice_out_of_bounds_panics_like_a_slice() {
        let d: Dev<'_, f32> = Dev { scope: 1, buffer: 0, base: 0, offset: 0, len: 10, _marker: PhantomData };
        let _ = d.slice(5..11);
    }

    /// A stream and a buffer of a context the scope's GPU did not make (as another library would) are
    /// refused, and nothing is queued.
    #[test]
    #[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
    fn another_contexts_stream_and_buffer_are_refused() {
        let gpu = crate::Gpu::init().unwrap();
        let foreign = Context::separate().unwrap();
        let stream = Stream::new(&foreign, false).unwrap();
        let mut buf = DeviceBuffer::<f32>::zeroed(&foreign, "GPU 0", 16).unwrap();
        let mine = gpu.streams(1).unwrap();
        let err = gpu.scope(std::slice::from_ref(&stream), |_| Ok(())).unwrap_err();
        assert!(format!("{err:#}").contains("another GPU's context"), "{err:#}");
        let host = [1f32; 16];
        let err = gpu.scope(&mine, |s| s.htod(&mine[0], &host, s.device(&mut buf))).unwrap_err();
        assert!(format!("{err:#}").contains("another GPU's context"), "{err:#}");
        drop((gpu, buf, stream)); // the separate context outlives them all, though the Arc named it first
    }

    /// Managed memory of another context is refused like its device buffers: by kernels and by prefetches.
    #[test]
    #[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
    fn another_contexts_managed_memory_is_refused() {
        let gpu = crate::Gpu::init().unwrap();
        let foreign = Context::separate().unwrap();
        let mut buf = crate::ManagedBuffer::<f32>::zeroed(&foreign, "GPU 0", 16).unwrap();
        let streams = gpu.streams(1).unwrap();
        let err = gpu.scope(&streams, |s| s.launch(&streams[0], gpu.kernels.process(s.managed(&mut buf), 1)));
        assert!(format!("{:#}", err.unwrap_err()).contains("another GPU's context"));
        let err = gpu.scope(&streams, |s| s.prefetch(&streams[0], s.managed(&mut buf), To::Device));
        assert!(format!("{:#}", err.unwrap_err()).contains("another GPU's context"));
        buf[0] = 1.0; // still the host's, and freed in its own context after the Gpu is gone
        drop((gpu, buf));
    }
}
