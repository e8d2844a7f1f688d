//! Stream scopes: async copies and kernel launches that borrow their buffers until the GPU is done.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! # use common::LaunchConfig;
//! # let gpu = common::Gpu::init()?;
//! # let streams = gpu.streams(2)?;
//! # let (h_in, mut h_out) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
//! # let mut d_data = gpu.alloc::<f32>(1024)?;
//! # let module = gpu.load_ptx_file("double.ptx")?;
//! # let double = module.kernel("double")?;
//! gpu.scope(&streams, |s| {
//!     let d = s.device(&mut d_data);                 // d_data is the scope's until it ends
//!     s.htod(&streams[0], &h_in, d)?;                // cudaMemcpyAsync(d, h_in, ..., H2D, streams[0])
//!     let copied = s.event_record(&streams[0])?;     // cudaEventRecord(copied, streams[0])
//!     s.stream_wait_event(&streams[1], copied)?;     // cudaStreamWaitEvent(streams[1], copied)
//!     let cfg = LaunchConfig::for_elements(d.len(), 256);
//!     // SAFETY: double(float* x, unsigned long long n) writes x[0..n) and nothing else.
//!     let launch = unsafe { double.launch(cfg).write(d).value(d.len() as u64).build() };
//!     s.launch(&streams[1], launch)?;                // double<<<cfg, 0, streams[1]>>>(d, n)
//!     s.dtoh(&streams[1], d, &mut h_out)             // cudaMemcpyAsync(h_out, d, ..., D2H, streams[1])
//! })?;                                               // every stream synchronized: h_out is ready
//! # Ok(()) }
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
//!   scope adds and reports ([`Scope::waits`]). The ordering known on each stream is a vector clock,
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
    collections::BTreeMap,
    marker::PhantomData,
    ops::Range,
    sync::{
        atomic::{AtomicU64, Ordering as Atomic},
        Arc,
    },
};

use anyhow::{anyhow, bail, Context as _};
use serde::Serialize;

use crate::{
    context::Context,
    ffi::{self, check, error_name, CuResult},
    host::PinnedBuffer,
    memory::{Bytes, DeviceBuffer, Element, ManagedBuffer},
    module::{Launch, Loaded},
    stream::{Event, EventPool, Stream},
    view::{Dev, DevAccess, DevRead, Invariant},
};

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// Where [`Scope::prefetch`] moves managed memory: to the scope's GPU, or back to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum To {
    /// To the scope's GPU.
    Device,
    /// To host memory.
    Host,
}

/// An event recorded on a stream of a scope (`cudaEventRecord`), for other streams to wait on.
#[derive(Clone, Copy)]
pub struct ScopeEvent<'scope> {
    scope: u64,
    index: usize,
    _marker: Invariant<'scope>,
}

/// What the scope saw of the ordering between streams ([`Scope::waits`]): the waits the program made
/// itself, and those the scope had to add because two operations on different streams touched the same
/// bytes and nothing ordered them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Waits {
    /// `stream_wait_event` calls the program made.
    pub made: usize,
    /// Waits the scope added where the program's own were missing.
    pub added: usize,
    /// The first conflict the scope had to order, in words.
    pub first_added: Option<String>,
}

impl Waits {
    /// One line for a program's output.
    pub fn summary(&self) -> String {
        let s = |n: usize| if n == 1 { "" } else { "s" };
        match &self.first_added {
            None => format!(
                "the scope found every cross-stream conflict ordered by the program's {} wait{}: none added",
                self.made,
                s(self.made)
            ),
            Some(first) => format!(
                "the scope had to add {} wait{} the program lacked (it made {}); the first: {first}",
                self.added,
                s(self.added),
                self.made
            ),
        }
    }
}

/// One operation a scope queued, as the GPU ran it: what an [`Observer`] is handed.
#[derive(Clone, Debug)]
pub struct TimedOp {
    /// What [`Observer::label`] returned as the operation was queued.
    pub label: String,
    /// The stream's handle, as a number: the same for every operation of one stream.
    pub stream: usize,
    /// `H2D`, `D2H`, `DtoD`, `memset` or `kernel`.
    pub kind: &'static str,
    /// `memcpy HtoD`, `prefetch to device`, or the kernel's name.
    pub name: String,
    /// Bytes moved (0 for kernels).
    pub bytes: usize,
    /// When the GPU reached the operation, in ms since [`crate::Gpu::observe`] was called.
    pub start_ms: f64,
    /// When it ended, in ms since [`crate::Gpu::observe`] was called.
    pub end_ms: f64,
}

/// Sees every operation the scopes of a GPU queue ([`crate::Gpu::observe`]): the hook a timeline of
/// your own is built on. Each operation gets a CUDA event before and after it; an event before an
/// operation fires when its stream reaches it, which can be a little before its engine starts it.
pub trait Observer {
    /// Called as each operation is queued: a label to keep with it (the phase of the program, say).
    fn label(&self) -> String {
        String::new()
    }

    /// Called for each operation once its scope has synchronized, in the order they were queued.
    fn record(&mut self, op: TimedOp);
}

/// An observer, and the event its times count from.
pub(crate) struct Observing {
    pub observer: Box<dyn Observer + Send>,
    pub origin: Event,
}

/// Per lent buffer: the operations whose completion later operations on other streams may have to wait for.
#[derive(Default, Debug)]
pub(crate) struct Tracker {
    /// Lent from another context: every operation on it is refused.
    foreign: bool,
    /// Managed memory: the only kind a prefetch may move.
    managed: bool,
    /// The accesses remembered, by where their bytes start (and a serial number, to keep several
    /// that start at one byte): a batch of thousands of small copies must not cost the host a pass
    /// over every earlier access for each new one.
    accesses: BTreeMap<(usize, u64), Access>,
    /// How many accesses of each length are remembered: the longest bounds how far before a range
    /// an access that overlaps it can start.
    lengths: BTreeMap<usize, usize>,
    serial: u64,
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
    /// The accesses that may overlap `bytes`: those that start before its end, no further before its
    /// start than the longest access remembered.
    fn near<'a>(&'a self, bytes: &Range<usize>) -> impl Iterator<Item = &'a Access> {
        let longest = self.lengths.last_key_value().map_or(0, |(l, _)| *l);
        let from = bytes.start.saturating_sub(longest);
        self.accesses.range((from, 0)..(bytes.end.max(from), 0)).map(|(_, a)| a)
    }

    /// Accesses that conflict with one on `stream` (at least one of the two a write, overlapping
    /// bytes) made on other streams.
    pub fn conflicts<'a>(
        &'a self,
        stream: usize,
        write: bool,
        bytes: &'a Range<usize>,
    ) -> impl Iterator<Item = &'a Access> {
        self.near(bytes).filter(move |a| a.stream != stream && (write || a.write) && overlaps(&a.bytes, bytes))
    }

    /// Remembers an access, forgetting those it makes redundant: a write is ordered after everything
    /// it overlaps, so it stands for what it covers; a read stands for earlier reads of its stream that it covers.
    pub fn record(&mut self, access: Access) {
        let redundant: Vec<(usize, u64)> = self
            .accesses
            .range((access.bytes.start, 0)..=(access.bytes.end, u64::MAX))
            .filter(|(_, a)| {
                covers(&access.bytes, &a.bytes) && (access.write || (!a.write && a.stream == access.stream))
            })
            .map(|(k, _)| *k)
            .collect();
        for k in redundant {
            if let Some(a) = self.accesses.remove(&k) {
                self.forget_length(a.bytes.len());
            }
        }
        *self.lengths.entry(access.bytes.len()).or_insert(0) += 1;
        self.serial += 1;
        self.accesses.insert((access.bytes.start, self.serial), access);
    }

    fn forget_length(&mut self, len: usize) {
        if let Some(n) = self.lengths.get_mut(&len) {
            *n -= 1;
            if *n == 0 {
                self.lengths.remove(&len);
            }
        }
    }
}

/// The ranges one operation touches, checked and merged: sorted by buffer, then by kind (read before
/// write) and start, with ranges of one kind that overlap or touch made one. Unless the operation's parts
/// run one after another (`sequential`: a graph captured on one stream), two ranges of one buffer that
/// overlap with at least one written are refused, in words: the operation's result would race.
/// Linear in the ranges where they come sorted (a batch over a buffer, in order), n log n otherwise.
pub(crate) fn normalize(accesses: &[DevAccess], sequential: bool) -> Result<Vec<DevAccess>, String> {
    if accesses.len() <= 1 {
        return Ok(accesses.to_vec()); // a copy's one range: nothing to check or merge
    }
    let by_place = |a: &DevAccess| (a.buffer, a.bytes.start, a.bytes.end);
    let mut sorted = accesses.to_vec();
    if !sorted.windows(2).all(|w| by_place(&w[0]) <= by_place(&w[1])) {
        sorted.sort_by_key(by_place);
    }
    if !sequential {
        // In order of start (and end), an access overlaps an earlier one of its buffer exactly when it
        // starts before the furthest end of those: so the furthest-reaching earlier write, and earlier
        // access of either kind, say whether it conflicts, and with which.
        #[derive(Clone, Copy)]
        struct Furthest {
            buffer: usize,
            write: Option<usize>,
            any: Option<usize>,
        }
        let mut f = Furthest { buffer: usize::MAX, write: None, any: None };
        for (i, a) in sorted.iter().enumerate() {
            if f.buffer != a.buffer {
                f = Furthest { buffer: a.buffer, write: None, any: None };
            }
            let against = if a.write { f.any } else { f.write };
            if let Some(b) = against.map(|k| &sorted[k]).filter(|b| a.bytes.start < b.bytes.end) {
                let (x, y) = (&b.bytes, &a.bytes);
                let what = if a.write && b.write {
                    "writes overlapping bytes of one buffer twice"
                } else {
                    "reads and writes overlapping bytes of one buffer"
                };
                return Err(format!(
                    "{what} ({}..{} and {}..{}), so its result would race",
                    x.start, x.end, y.start, y.end
                ));
            }
            let further = |k: Option<usize>| match k {
                Some(k) if sorted[k].bytes.end >= a.bytes.end => Some(k),
                _ => Some(i),
            };
            f.any = further(f.any);
            if a.write {
                f.write = further(f.write);
            }
        }
    }
    let by_kind = |a: &DevAccess| (a.buffer, a.write, a.bytes.start, a.bytes.end);
    if !sorted.windows(2).all(|w| by_kind(&w[0]) <= by_kind(&w[1])) {
        sorted.sort_by_key(by_kind);
    }
    let mut merged: Vec<DevAccess> = Vec::with_capacity(sorted.len().min(16));
    for a in sorted {
        match merged.last_mut() {
            Some(m) if m.buffer == a.buffer && m.write == a.write && a.bytes.start <= m.bytes.end => {
                m.bytes.end = m.bytes.end.max(a.bytes.end)
            }
            _ => merged.push(a),
        }
    }
    Ok(merged)
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
    pub(crate) env: Env<'env>,
    pub(crate) streams: &'env [Stream],
    pub(crate) id: u64,
    state: RefCell<State>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// What a scope needs of its GPU.
#[derive(Clone, Copy)]
pub(crate) struct Env<'env> {
    pub ctx: &'env Context,
    pub events: &'env EventPool,
    pub observer: &'env RefCell<Option<Observing>>,
}

struct State {
    trackers: Vec<Tracker>,
    /// Events recorded in this scope, each with what it knows (its stream's vector clock then).
    events: Vec<(Event, Vec<u64>)>,
    /// Operations queued: (stream, what it is, event recorded after it).
    ops: Vec<(usize, OpInfo, usize)>,
    clocks: Clocks,
    waits: Waits,
    /// The modules of the kernels launched, kept loaded until every stream is synchronized.
    modules: Vec<Arc<Loaded>>,
    /// What else queued work needs until every stream is synchronized (the executable graphs launched).
    held: Vec<Box<dyn std::any::Any>>,
    /// Set when an operation was queued but could not be tracked: nothing more may be queued.
    broken: Option<String>,
    /// Operations to put on the built-in timeline once the scope has synchronized.
    pending: Vec<Pending>,
}

/// What an operation is: its kind (`H2D`), what it does (`memcpy HtoD`) or the kernel's name, and the
/// bytes it moves.
#[derive(Clone)]
pub(crate) struct OpInfo {
    pub kind: &'static str,
    pub what: &'static str,
    pub kernel: Option<Arc<str>>,
    pub bytes: usize,
}

impl OpInfo {
    pub(crate) fn copy(kind: &'static str, what: &'static str, bytes: usize) -> OpInfo {
        OpInfo { kind, what, kernel: None, bytes }
    }

    /// `memcpy HtoD`, or the kernel's name.
    fn name(&self) -> &str {
        self.kernel.as_deref().unwrap_or(self.what)
    }

    /// The operation in words: `memcpy HtoD`, `kernel process`.
    fn label(&self) -> String {
        match &self.kernel {
            Some(k) => format!("kernel {k}"),
            None => self.what.to_string(),
        }
    }
}

struct Pending {
    start: usize,
    end: usize,
    stream: usize,
    op: OpInfo,
    label: String,
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
        st.trackers.push(Tracker { foreign, managed, ..Tracker::default() });
        Dev { scope: self.id, buffer: st.trackers.len() - 1, base, offset: 0, len, _marker: PhantomData }
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyHostToDevice, stream)`. From pageable memory the driver
    /// stages the data and returns only when it has; from pinned memory it returns at once.
    pub fn htod<T: Element>(&self, stream: &Stream, src: &'scope [T], dst: Dev<'scope, T>) -> anyhow::Result<()> {
        if src.len() != dst.len {
            bail!("htod: source has {} elements, destination {}", src.len(), dst.len);
        }
        let bytes = std::mem::size_of_val(src);
        self.enqueue(stream, &[dst.access(true)], OpInfo::copy("H2D", "memcpy HtoD", bytes), |s| {
            // SAFETY: `src` is borrowed for the whole scope, which synchronizes before the borrow ends;
            // `dst` is a live device range of `bytes` bytes (checked above) that this scope orders.
            unsafe { ffi::cuMemcpyHtoDAsync_v2(dst.ptr(), src.as_ptr().cast(), bytes, s) }
        })
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyDeviceToHost, stream)`.
    pub fn dtoh<T: Element>(
        &self,
        stream: &Stream,
        src: impl Into<DevRead<'scope, T>>,
        dst: &'scope mut [T],
    ) -> anyhow::Result<()> {
        let src = *src.into().view();
        if src.len != dst.len() {
            bail!("dtoh: source has {} elements, destination {}", src.len, dst.len());
        }
        let bytes = std::mem::size_of_val(dst);
        self.enqueue(stream, &[src.access(false)], OpInfo::copy("D2H", "memcpy DtoH", bytes), |s| {
            // SAFETY: `dst` is borrowed mutably for the whole scope, which synchronizes before the borrow
            // ends, so nothing else reads or writes it meanwhile; `src` is a live device range of `bytes`;
            // T is an Element, so whatever bits arrive are a valid T.
            unsafe { ffi::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src.ptr(), bytes, s) }
        })
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyDeviceToDevice, stream)`. The ranges may not overlap.
    pub fn dtod<T: Element>(
        &self,
        stream: &Stream,
        src: impl Into<DevRead<'scope, T>>,
        dst: Dev<'scope, T>,
    ) -> anyhow::Result<()> {
        let src = *src.into().view();
        if src.len != dst.len {
            bail!("dtod: source has {} elements, destination {}", src.len, dst.len);
        }
        let bytes = src.len * std::mem::size_of::<T>();
        let info = OpInfo::copy("DtoD", "memcpy DtoD", bytes);
        self.enqueue(stream, &[src.access(false), dst.access(true)], info, |s| {
            // SAFETY: two live, non-overlapping (checked by enqueue) device ranges of `bytes` bytes that
            // this scope orders.
            unsafe { ffi::cuMemcpyDtoDAsync_v2(dst.ptr(), src.ptr(), bytes, s) }
        })
    }

    /// `cudaMemsetD32Async`: sets every element to `value` (to poison outputs before a run, say).
    pub fn fill(&self, stream: &Stream, dst: Dev<'scope, f32>, value: f32) -> anyhow::Result<()> {
        self.enqueue(stream, &[dst.access(true)], OpInfo::copy("memset", "memset", dst.len * 4), |s| {
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
        if view.scope == self.id && !self.is_managed(view.buffer) {
            bail!("{name}: only managed memory (Gpu::managed) prefetches, and this view is device or mapped memory");
        }
        let (kind, dst) = match to {
            To::Device => ("H2D", self.env.ctx.device()),
            To::Host => ("D2H", ffi::DEVICE_CPU),
        };
        let bytes = view.len * std::mem::size_of::<T>();
        self.enqueue(stream, &[view.access(true)], OpInfo::copy(kind, name, bytes), |s| match bytes {
            0 => ffi::SUCCESS, // the driver refuses an empty range; there is nothing to move
            // SAFETY: a live managed range of `bytes` bytes that this scope orders (the scope's id was
            // checked by enqueue, and the buffer was lent as managed memory); the destination is this
            // scope's device, whose context is current, or the host.
            _ => unsafe { ffi::cuMemPrefetchAsync(view.ptr(), bytes, dst, s) },
        })
    }

    /// `kernel<<<grid, block, shared, stream>>>(args...)`: queues a launch made by
    /// [`crate::LaunchBuilder::build`], ordered like a copy by the views it declared as read and
    /// written. Refused, before anything is queued, where its arguments do not match the kernel's
    /// parameters in the PTX, where it reads and writes overlapping bytes, and where its module was
    /// loaded in another GPU's context.
    pub fn launch(&self, stream: &Stream, mut launch: Launch<'scope>) -> anyhow::Result<()> {
        let name = launch.kernel.name.clone();
        if let Some(e) = launch.invalid.take() {
            bail!("kernel {name}: {e}");
        }
        if !launch.kernel.module.ctx.is(self.env.ctx) {
            bail!("kernel {name}: its module was loaded by another GPU's context");
        }
        let accesses = std::mem::take(&mut launch.accesses);
        let info = OpInfo { kind: "kernel", what: "kernel", kernel: Some(name), bytes: 0 };
        // Held before anything is queued, so that no path out of `enqueue` can unload it under the kernel.
        self.state.borrow_mut().modules.push(launch.kernel.module.clone());
        self.enqueue(stream, &accesses, info, |s| launch.enqueue(s))
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
        st.waits.made += 1;
        Ok(())
    }

    /// `cudaEventElapsedTime(&ms, start, end)`: the GPU time between two events of this scope, once both
    /// have completed (after [`Scope::synchronize`], say); an error (`CUDA_ERROR_NOT_READY`) before.
    pub fn elapsed_ms(&self, start: ScopeEvent<'scope>, end: ScopeEvent<'scope>) -> anyhow::Result<f64> {
        if start.scope != self.id || end.scope != self.id {
            bail!("elapsed_ms: an event of another scope");
        }
        let st = self.state.borrow();
        st.events[end.index].0.elapsed_ms(&st.events[start.index].0)
    }

    /// Keeps `what` until every stream of the scope is synchronized: what queued work uses.
    pub(crate) fn hold(&self, what: Box<dyn std::any::Any>) {
        self.state.borrow_mut().held.push(what);
    }

    /// Whether the buffer of a handle of this scope was lent from another GPU's context.
    pub(crate) fn is_foreign(&self, buffer: usize) -> bool {
        self.state.borrow().trackers[buffer].foreign
    }

    /// Whether the buffer of a handle of this scope is managed memory.
    pub(crate) fn is_managed(&self, buffer: usize) -> bool {
        self.state.borrow().trackers[buffer].managed
    }

    /// How the streams were ordered so far: the program's waits and those the scope added.
    pub fn waits(&self) -> Waits {
        self.state.borrow().waits.clone()
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

    pub(crate) fn stream_index(&self, stream: &Stream) -> anyhow::Result<usize> {
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
        op: impl FnOnce(ffi::CUstream) -> CuResult,
    ) -> anyhow::Result<()> {
        self.enqueue_parts(stream, accesses, false, info, op)
    }

    /// Queues one operation that touches `accesses` (several, for a batch or a graph), ordered after
    /// the work on other streams that touches the same bytes and recorded for the work after it.
    /// `sequential`: its parts run one after another (a graph captured on one stream), so its reads and
    /// writes of the same bytes do not race.
    pub(crate) fn enqueue_parts(
        &self,
        stream: &Stream,
        accesses: &[DevAccess],
        sequential: bool,
        info: OpInfo,
        op: impl FnOnce(ffi::CUstream) -> CuResult,
    ) -> anyhow::Result<()> {
        // The operation in words, made only where a message needs it, not for every operation.
        let name = || info.label();
        let mut st = self.state.borrow_mut();
        if let Some(why) = &st.broken {
            bail!("{}: refused, because an earlier operation of this scope could not be tracked ({why})", name());
        }
        let j = self.stream_index(stream).with_context(name)?;
        // The observer's label first: its code may make another context current, as may the closure's.
        let observed = self.env.observer.borrow().as_ref().map(|o| o.observer.label());
        self.env.ctx.ensure_current()?;
        for a in accesses {
            if a.scope != self.id {
                bail!("{}: a device handle from another scope", name());
            }
            if st.trackers[a.buffer].foreign {
                bail!("{}: a buffer of another GPU's context", name());
            }
        }
        let accesses = normalize(accesses, sequential).map_err(|why| anyhow!("{}: {why}", name()))?;
        // Everything that can fail without queuing the operation comes first.
        let end = self.env.events.take()?;
        let start = match observed.is_some() {
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
                format!("{}: waiting for another stream", name())
            })?;
            let snapshot = st.events[event].1.clone();
            st.clocks.wait(j, &snapshot);
            st.waits.added += 1;
            if st.waits.first_added.is_none() {
                let (k, ref other, _) = st.ops[c.op];
                let other = other.label();
                let a = &accesses[i];
                let both = a.bytes.start.max(c.bytes.start)..a.bytes.end.min(c.bytes.end);
                let name = name();
                st.waits.first_added = Some(format!(
                    "{name} on stream {j} {} bytes {}..{} ({}) of lent buffer {buffer}, which {other} on stream {k} \
                     {} earlier, and nothing ordered the two",
                    if a.write { "writes" } else { "reads" },
                    both.start,
                    both.end,
                    Bytes(both.len()),
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
        if let Err(e) = check(op(stream.raw()), || format!("{} on stream {j}", name())) {
            self.env.events.give([end].into_iter().chain(start));
            return Err(e);
        }
        // Queued: from here on the operation is tracked whatever fails.
        let (seq, snapshot) = st.clocks.queue(j);
        let recorded = end.record(stream);
        st.events.push((end, snapshot));
        let event = st.events.len() - 1;
        let op_index = st.ops.len();
        st.ops.push((j, info.clone(), event));
        if let Err(e) = recorded {
            // Later operations could not be ordered after this one: the scope takes no more.
            st.broken = Some(format!("{e:#}"));
            return Err(e.context(format!("{}: queued, but its completion cannot be tracked", name())));
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
        if let (Some(s), Some(label)) = (start, observed) {
            st.events.push((s, Vec::new()));
            let start = st.events.len() - 1;
            st.pending.push(Pending { start, end: event, stream: stream.raw() as usize, op: info, label });
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
            waits: Waits::default(),
            modules: Vec::new(),
            held: Vec::new(),
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
            // Not while unwinding (an observer that panicked then would abort the process), and not
            // re-entered (an observer that runs a scope of its own GPU finds it busy and misses these).
            let mut observer = self.scope.env.observer.try_borrow_mut();
            let observer = observer.as_mut().ok().filter(|_| !std::thread::panicking()).and_then(|o| o.as_mut());
            if let (true, Some(o)) = (synced, observer) {
                for p in pending {
                    let (Ok(start_ms), Ok(end_ms)) =
                        (st.events[p.start].0.elapsed_ms(&o.origin), st.events[p.end].0.elapsed_ms(&o.origin))
                    else {
                        continue;
                    };
                    let (kind, name, bytes) = (p.op.kind, p.op.name().to_string(), p.op.bytes);
                    o.observer.record(TimedOp {
                        label: p.label,
                        stream: p.stream,
                        kind,
                        name,
                        bytes,
                        start_ms,
                        end_ms,
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
    use crate::LaunchConfig;

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
        assert_eq!(t.accesses.values().cloned().collect::<Vec<_>>(), vec![acc(3, 2, true, 0..100)]);
        assert_eq!(t.lengths.iter().collect::<Vec<_>>(), [(&100, &1)], "the forgotten lengths too");
        assert_eq!(conflicts(&t, 0, false, 10..20), vec![3]);
    }

    #[test]
    fn a_read_keeps_an_earlier_write_of_its_own_stream() {
        let mut t = Tracker::default();
        t.record(acc(1, 0, true, 0..100));
        t.record(acc(2, 0, false, 0..100));
        assert_eq!(conflicts(&t, 1, false, 0..100), vec![1], "a reader elsewhere still conflicts with the write");
    }

    /// A tiny deterministic generator for the randomized tests.
    fn lcg(state: &mut u64) -> usize {
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*state >> 33) as usize
    }

    /// The tracker as it was, a list searched in full: what the ordered one must agree with.
    #[derive(Default)]
    struct Plain(Vec<Access>);

    impl Plain {
        fn conflicts(&self, stream: usize, write: bool, bytes: &Range<usize>) -> Vec<usize> {
            let mut v: Vec<usize> = self
                .0
                .iter()
                .filter(|a| a.stream != stream && (write || a.write) && overlaps(&a.bytes, bytes))
                .map(|a| a.op)
                .collect();
            v.sort();
            v
        }

        fn record(&mut self, access: Access) {
            self.0.retain(|a| {
                let covered = covers(&access.bytes, &a.bytes);
                !(covered && (access.write || (!a.write && a.stream == access.stream)))
            });
            self.0.push(access);
        }
    }

    #[test]
    fn the_ordered_tracker_finds_what_a_full_search_finds() {
        let mut seed = 7;
        for _ in 0..200 {
            let (mut t, mut plain) = (Tracker::default(), Plain::default());
            for op in 0..40 {
                let start = lcg(&mut seed) % 100;
                let len = [0, 1, 4, 16, 60][lcg(&mut seed) % 5];
                let (stream, write) = (lcg(&mut seed) % 3, lcg(&mut seed) % 2 == 0);
                let bytes = start..start + len;
                let mut found = conflicts(&t, stream, write, bytes.clone());
                found.sort();
                assert_eq!(found, plain.conflicts(stream, write, &bytes), "op {op}: {stream} {write} {bytes:?}");
                t.record(acc(op, stream, write, bytes.clone()));
                plain.record(acc(op, stream, write, bytes));
            }
            assert_eq!(t.accesses.len(), plain.0.len());
        }
    }

    #[test]
    fn thousands_of_small_ranges_stay_cheap_to_search() {
        let mut t = Tracker::default();
        for i in 0..10_000 {
            t.record(acc(i, i % 4, true, i * 256..(i + 1) * 256));
        }
        assert_eq!(conflicts(&t, 9, false, 5000 * 256 + 10..5001 * 256 + 10), vec![5000, 5001]);
        assert_eq!(t.near(&(5000 * 256..5000 * 256 + 1)).count(), 2, "only the neighbours are looked at");
        t.record(acc(10_000, 0, true, 0..10_000 * 256));
        assert_eq!(t.accesses.len(), 1, "a write over all of them stands for them");
        assert_eq!(t.lengths.len(), 1);
    }

    fn dev_access(buffer: usize, write: bool, bytes: Range<usize>) -> DevAccess {
        DevAccess { scope: 1, buffer, bytes, write }
    }

    #[test]
    fn one_operations_ranges_are_checked_and_merged() {
        let a = |b, w, r| dev_access(b, w, r);
        // A batch of writes in order, touching: one range.
        let batch: Vec<_> = (0..1000).map(|i| a(0, true, i * 16..(i + 1) * 16)).collect();
        let merged = normalize(&batch, false).unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].bytes, 0..16_000);
        // With gaps, out of order, over two buffers.
        let m =
            normalize(&[a(1, true, 40..50), a(0, true, 0..10), a(1, true, 0..10), a(0, true, 10..20)], false).unwrap();
        let got: Vec<_> = m.iter().map(|x| (x.buffer, x.bytes.clone())).collect();
        assert_eq!(got, [(0, 0..20), (1, 0..10), (1, 40..50)]);
        // Two writes of the same bytes race; so do a read and a write; two reads do not.
        let e = normalize(&[a(0, true, 0..10), a(0, true, 5..6)], false).unwrap_err();
        assert!(e.starts_with("writes overlapping bytes of one buffer twice (0..10 and 5..6)"), "{e}");
        let e = normalize(&[a(0, false, 0..10), a(0, true, 9..12)], false).unwrap_err();
        assert!(e.starts_with("reads and writes overlapping bytes of one buffer"), "{e}");
        assert_eq!(normalize(&[a(0, false, 0..10), a(0, false, 5..12)], false).unwrap().len(), 1);
        // One after another (a graph), a write then a read of the same bytes is no race.
        let m = normalize(&[a(0, true, 0..10), a(0, false, 0..10), a(0, true, 5..20)], true).unwrap();
        let got: Vec<_> = m.iter().map(|x| (x.write, x.bytes.clone())).collect();
        assert_eq!(got, [(false, 0..10), (true, 0..20)]);
    }

    #[test]
    fn the_check_of_one_operation_agrees_with_every_pair() {
        let mut seed = 11;
        for _ in 0..2000 {
            let n = 1 + lcg(&mut seed) % 6;
            let v: Vec<DevAccess> = (0..n)
                .map(|_| {
                    let start = lcg(&mut seed) % 24;
                    dev_access(lcg(&mut seed) % 2, lcg(&mut seed) % 2 == 0, start..start + lcg(&mut seed) % 6)
                })
                .collect();
            let pairwise = v.iter().enumerate().any(|(i, x)| {
                v[i + 1..].iter().any(|y| x.buffer == y.buffer && (x.write || y.write) && overlaps(&x.bytes, &y.bytes))
            });
            let got = normalize(&v, false);
            assert_eq!(got.is_err(), pairwise, "{v:?}");
            // What is merged covers exactly the bytes of each buffer and kind that the ranges covered.
            let merged = normalize(&v, true).unwrap();
            for buffer in 0..2 {
                for write in [false, true] {
                    for byte in 0..30 {
                        let inside = |r: &DevAccess| r.buffer == buffer && r.write == write && r.bytes.contains(&byte);
                        assert_eq!(v.iter().any(inside), merged.iter().any(inside), "{v:?} -> {merged:?}");
                    }
                }
            }
        }
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
        let busy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx")).unwrap().kernel("busy").unwrap();
        let err = gpu.scope(&streams, |s| {
            let m = s.managed(&mut buf);
            // SAFETY: busy(x, n, iters) touches x[0..n) only.
            s.launch(&streams[0], unsafe {
                busy.launch(LaunchConfig::linear(1, 32)).write(m).value(16u64).value(1u32).build()
            })
        });
        assert!(format!("{:#}", err.unwrap_err()).contains("another GPU's context"));
        let err = gpu.scope(&streams, |s| s.prefetch(&streams[0], s.managed(&mut buf), To::Device));
        assert!(format!("{:#}", err.unwrap_err()).contains("another GPU's context"));
        buf[0] = 1.0; // still the host's, and freed in its own context after the Gpu is gone
        drop((gpu, buf));
    }
}
