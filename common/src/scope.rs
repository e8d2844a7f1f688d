//! Stream scopes: async copies and kernel launches that borrow their buffers until the GPU is done.
//!
//! ```no_run
//! # fn main() -> cuda_scope::Result<()> {
//! # use cuda_scope::LaunchConfig;
//! # let gpu = cuda_scope::Gpu::init()?;
//! # let streams = gpu.streams(2)?;
//! # let (h_in, mut h_out) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
//! # let mut d_data = gpu.alloc::<f32>(1024)?;
//! # let module = gpu.load_ptx_file("double.ptx")?;
//! # let double = module.kernel("double")?;
//! gpu.scope(&streams, |s| {
//!     let d = s.device(&mut d_data);                 // d_data is the scope's until it ends
//!     let (copy, work) = (s.stream(0), s.stream(1)); // streams[0] and streams[1], bound to the scope
//!     copy.htod(&h_in, d)?;                          // cudaMemcpyAsync(d, h_in, ..., H2D, streams[0])
//!     let copied = copy.record_event()?;             // cudaEventRecord(copied, streams[0])
//!     work.wait_event(copied)?;                      // cudaStreamWaitEvent(streams[1], copied)
//!     let cfg = LaunchConfig::for_elements(d.len(), 256);
//!     // SAFETY: double(float* x, unsigned long long n) writes x[0..n) and nothing else.
//!     unsafe { work.kernel(&double, cfg).write(d).value(d.len() as u64).launch()? }; // double<<<cfg, 0, streams[1]>>>
//!     work.dtoh(d, &mut h_out)                       // cudaMemcpyAsync(h_out, d, ..., D2H, streams[1])
//! })?;                                               // every stream synchronized: h_out is ready
//! # Ok(()) }
//! ```
//!
//! What makes this safe without `unsafe` in the caller (but the launch's one promise):
//! - Host memory handed to an async copy is borrowed (`&[T]` to read, `&mut [T]` to write) for the whole
//!   scope, and the scope synchronizes every stream before it returns, also on error or panic. Where it
//!   cannot prove that the GPU has stopped (a stream failed, and the context is not dead), it aborts the
//!   process rather than release memory the GPU may still write.
//! - Device buffers (and mapped host buffers, and managed buffers) are borrowed mutably for the scope
//!   and addressed through [`Dev`] handles: the host cannot touch them until every stream is idle. The
//!   scope remembers, per buffer and byte range, the last write and the reads since, and on which
//!   stream. An operation on another stream that touches an overlapping range must be ordered after
//!   them: by the stream, by the waits the program made itself ([`ScopeStream::record_event`],
//!   [`ScopeStream::wait_event`]), or, where those are missing, by a wait the scope adds and reports
//!   ([`Scope::waits`]). The ordering known on each stream is a vector clock, so waits the program made
//!   are recognized, transitively. The events the scope waits on are recorded only where they are
//!   needed (see `order.rs`): work on one stream, or on streams that touch different bytes, costs the
//!   driver call and a little bookkeeping, nothing more.
//! - A prefetch of managed memory ([`ScopeStream::prefetch`]) counts as a write of its range: it moves
//!   the pages, so it is ordered after the work on them and the work after it waits for it. Only managed
//!   views can be prefetched.
//! - One operation may not read and write overlapping bytes (a kernel's input and output views of one
//!   buffer, a copy within one buffer): the result would race.
//! - Work goes only on the scope's own streams: each is named by a [`ScopeStream`] the scope hands out,
//!   so no other stream can be given. Streams, buffers and kernels of another context are refused.
//!   Everything the scope touches keeps its context alive.
//! - Handles are tied to their scope's lifetime (invariant, as in `std::thread::scope`) and carry the
//!   scope's id, so they cannot leak out of the scope or be used in another one.

use std::{
    cell::RefCell,
    io::Write,
    marker::PhantomData,
    sync::{
        atomic::{AtomicU64, Ordering as Atomic},
        Arc,
    },
};

use serde::Serialize;

use crate::{
    coalesce::{self, Coalescer, Coalescing, CopyWay, Group, Held, Staging},
    context::Context,
    error::{check, driver_error},
    error::{refusal, refused, Error, Foreign, Refusal},
    ffi::{self, error_name, CuResult},
    host::PinnedBuffer,
    launch::{Checked, Enqueue, LaunchBuilder, LaunchConfig},
    memory::{DeviceBuffer, Element, ManagedBuffer},
    module::{Kernel, Loaded},
    order::{Book, Op, OpInfo, PlanOne},
    stream::{Event, EventPool, Stream},
    view::{Dev, DevAccess, DevRead, Invariant},
};

pub use crate::order::Waits;

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// Where data goes: where [`ScopeStream::prefetch`] moves managed memory (to the scope's GPU, or back
/// to the host), and which side of a copy a [`crate::Stager`] fills.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(2)?;
/// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
/// # let mut d = gpu.alloc::<f32>(1024)?;
/// use cuda_scope::Destination;
/// let mut m = gpu.managed::<f32>(1 << 20)?;
/// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
///     let m = s.managed(&mut m);
///     s.stream(0).prefetch(m, Destination::Device)?; // before the kernels that touch it
///     s.stream(0).prefetch(m, Destination::Host) // before the host reads it, after the scope
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Destination {
    /// To the scope's GPU.
    Device,
    /// To host memory.
    Host,
}

/// An event recorded on a stream of a scope ([`ScopeStream::record_event`], `cudaEventRecord`), for
/// other streams to wait on and for [`Scope::elapsed_ms`].
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(2)?;
/// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
/// # let mut d = gpu.alloc::<f32>(1024)?;
/// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
///     let (copy, other) = (s.stream(0), s.stream(1));
///     let start = copy.record_event()?;
///     copy.htod(&host, s.device(&mut d))?;
///     let end = copy.record_event()?;
///     other.wait_event(end)?; // stream 1's next work waits for the upload
///     s.synchronize()?;
///     println!("the upload took {:.3} ms", s.elapsed_ms(start, end)?);
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct ScopeEvent<'scope> {
    scope: u64,
    index: usize,
    _marker: Invariant<'scope>,
}

/// One operation a scope queued, as the GPU ran it: what an [`Observer`] is handed.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(2)?;
/// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
/// # let mut d = gpu.alloc::<f32>(1024)?;
/// use std::sync::{Arc, Mutex};
/// struct Keep(Arc<Mutex<Vec<cuda_scope::TimedOp>>>);
/// impl cuda_scope::Observer for Keep {
///     fn record(&mut self, op: cuda_scope::TimedOp) {
///         self.0.lock().unwrap().push(op);
///     }
/// }
/// let (ops, mut gpu) = (Arc::new(Mutex::new(Vec::new())), gpu);
/// gpu.observe(Box::new(Keep(ops.clone())))?;
/// gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?;
/// for op in ops.lock().unwrap().iter() {
///     println!("{} on {:#x}: {:.3} to {:.3} ms", op.name, op.stream, op.start_ms, op.end_ms);
/// }
/// # Ok(()) }
/// ```
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
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(2)?;
/// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
/// # let mut d = gpu.alloc::<f32>(1024)?;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// static PHASE: AtomicUsize = AtomicUsize::new(0);
/// struct Phases;
/// impl cuda_scope::Observer for Phases {
///     fn label(&self) -> String {
///         format!("phase {}", PHASE.load(Ordering::Relaxed)) // as the operation is queued
///     }
///     fn record(&mut self, op: cuda_scope::TimedOp) {
///         println!("{}: {} {:.3} ms", op.label, op.name, op.end_ms - op.start_ms); // once its scope ends
///     }
/// }
/// let mut gpu = gpu;
/// gpu.observe(Box::new(Phases))?;
/// gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?;
/// # Ok(()) }
/// ```
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

/// The work queued on a set of streams, with the buffers it borrows. See the module docs.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(2)?;
/// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
/// # let mut d = gpu.alloc::<f32>(1024)?;
/// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
///     let d = s.device(&mut d); // lent to the scope: a view
///     s.stream(0).htod(&host, d)?; // host borrowed until the scope ends
///     s.stream(1).dtoh(d, &mut back)?; // ordered after the upload: the scope adds the wait
///     println!("{}", s.waits().summary());
///     Ok(())
/// })?; // every stream synchronized
/// # Ok(()) }
/// ```
pub struct Scope<'scope, 'env: 'scope> {
    pub(crate) env: Env<'env>,
    pub(crate) streams: &'env [Stream],
    pub(crate) id: u64,
    /// Whether an observer watches: fixed while the scope lives, since setting one takes the `Gpu`
    /// mutably ([`crate::Gpu::observe`]).
    observed: bool,
    state: RefCell<State>,
    /// The pinned buffer the last copy held reached (first byte, end, device address), or none (0, 0, 0):
    /// the next one is likely in it too.
    pinned: std::cell::Cell<(usize, usize, u64)>,
    /// An error of the flush [`Scope::waits`] made, which it cannot return: kept for the scope's next call
    /// that queues, issues or waits for work, or for its end ([`Scope::kept`]).
    kept: std::cell::Cell<Option<Box<Error>>>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// What a scope needs of its GPU.
#[derive(Clone, Copy)]
pub(crate) struct Env<'env> {
    pub ctx: &'env Context,
    pub events: &'env EventPool,
    pub observer: &'env RefCell<Option<Observing>>,
    /// The state of the last scope that ended, kept for the next so that its vectors need not grow again.
    pub spare: &'env RefCell<Option<Box<State>>>,
    /// The same context, shared: for what coalescing allocates (its staging, its kernel, its model).
    pub gpu: &'env Arc<Context>,
    /// The kernel and model the scope's coalesced copies take.
    pub coalescer: &'env Coalescer,
}

/// A scope's bookkeeping and what it holds until every stream is synchronized. In C's order, what every
/// operation touches first and side by side: the driver's calls between two operations leave little of
/// it in the nearest caches, so each line it spans is a wait.
#[derive(Default)]
#[repr(C)]
pub(crate) struct State {
    /// The event of each fence of the book, by the same index: its handle (the event is owned by
    /// `untimed` or `timed`).
    fences: Vec<ffi::CUevent>,
    /// Events without timing for fences, kept from one scope to the next and taken in order: the first
    /// `taken` are this scope's. Their handles are also in `untimed_raw`, side by side, so that taking
    /// the next reads eight bytes next to the last.
    untimed_raw: Vec<ffi::CUevent>,
    taken: usize,
    /// How many copies are held, on every stream: none, the commonest case, is one look beside `taken`.
    holding: usize,
    book: Book,
    /// The events behind `untimed_raw`, owned: destroyed with the state.
    untimed: Vec<Event>,
    /// The program's events, with timing ([`ScopeStream::record_event`]), with their index as fences.
    timed: Vec<(usize, Event)>,
    /// The modules of the kernels launched, kept loaded until every stream is synchronized.
    modules: Vec<Arc<Loaded>>,
    /// What else queued work needs until every stream is synchronized (the executable graphs launched).
    held: Vec<Box<dyn std::any::Any>>,
    /// Operations to hand the observer once the scope has synchronized.
    pending: Vec<Pending>,
    /// The events of a timed scope's join, kept until every stream is synchronized.
    joins: Vec<Event>,
    /// Whether small copies are held ([`Scope::set_coalescing`]).
    coalescing: Coalescing,
    /// The copies held on each stream.
    groups: Vec<Group>,
    /// A group's copies as it is flushed, and its table: allocations kept from one flush to the next.
    flushing: Vec<Held>,
    table: Vec<u64>,
    /// Pinned staging for the kernel way, kept for the next scope; what lands in it for pageable
    /// destinations, as (staging, destination, bytes), unpacked as the scope ends.
    staging: Staging,
    unpack: Vec<(usize, usize, usize)>,
    /// An event recorded after each part of a group issued in parts that holds pageable downloads, and
    /// its jobs in `unpack` (those of other groups lie between them): unpacked as it lands, as the scope
    /// ends.
    landings: Vec<(ffi::CUevent, std::ops::Range<usize>)>,
    /// A group's pageable uploads as (source, staging, bytes), as it is flushed; its parts.
    pack: Vec<(usize, usize, usize)>,
    parts: Vec<coalesce::Part>,
}

impl State {
    /// Gives back `raw`, an event without timing that this scope took and did not use, whatever it took
    /// after it (a flush between the taking and the giving back may take events of its own, for the
    /// parts of a group, which stay taken): it trades places with the last taken, which is then free.
    fn give_back_untimed(&mut self, raw: ffi::CUevent) {
        if let Some(i) = self.untimed_raw[..self.taken].iter().rposition(|&e| e == raw) {
            self.untimed_raw.swap(i, self.taken - 1);
            self.untimed.swap(i, self.taken - 1);
            self.taken -= 1;
        }
    }

    /// Notes a fence just recorded on stream `k` with event `raw`: its index, the same in the book and in
    /// [`State::fences`].
    #[inline(always)]
    fn add_fence(&mut self, raw: ffi::CUevent, k: usize) -> usize {
        self.fences.push(raw);
        self.book.add_fence(k)
    }
}

/// How an operation was planned, for [`Scope::finish`]: its one access where the short way planned it
/// ([`Book::plan_one`]; else [`Book::normalized`] holds its accesses), the fence it waited for that the
/// book has yet to note, and whether a fence should follow it.
#[derive(Clone, Copy)]
struct Planned<'a> {
    one: Option<&'a DevAccess>,
    waited: Option<usize>,
    shared: bool,
}

#[cfg(test)]
thread_local! {
    /// The codes of the calls the scope made again after making its context current, for the tests.
    static MADE_AGAIN: std::cell::RefCell<Vec<CuResult>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An operation refused before anything was queued: a handle of another scope, or a buffer of another
/// GPU's context.
#[cold]
#[inline(never)]
fn foreign(info: &OpInfo, other_scope: bool) -> Error {
    let why = Refusal::Foreign(if other_scope { Foreign::Scope } else { Foreign::Context });
    refusal(info.label(), why)
}

/// An operation whose ranges the book refused.
#[cold]
#[inline(never)]
fn unplanned(info: &OpInfo, why: crate::Overlap) -> Error {
    match &info.kernel {
        Some(k) => crate::LaunchRefused { kernel: k.to_string(), why: crate::LaunchRefusal::Overlap(why) }.into(),
        None => refusal(info.label(), Refusal::Overlap(why)),
    }
}

/// What an operation does on its stream: a driver call now, or a copy held to coalesce.
pub(crate) enum Call<'a> {
    Now(&'a mut dyn FnMut(ffi::CUstream) -> CuResult),
    Hold(Held),
}

struct Pending {
    start: Event,
    end: Event,
    stream: usize,
    op: usize,
    label: String,
}

/// A pending download: a download whose destination is handed back, for the host to read, once its
/// copy has finished ([`ScopeStream::dtoh_pending`]). Until [`PendingDownload::wait`] says so, the destination stays the scope's;
/// dropped or forgotten, it stays the scope's until the scope ends.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(1)?;
/// let mut d = gpu.alloc::<f32>(1 << 20)?;
/// let mut out = vec![0f32; 1 << 20];
/// let (head, tail) = out.split_at_mut(1 << 10);
/// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
///     let d = s.device(&mut d);
///     let pending = s.stream(0).dtoh_pending(d.slice(0..1 << 10), head)?;
///     s.stream(0).dtoh(d.slice(1 << 10..1 << 20), tail)?;
///     let head = pending.wait()?; // the host's again, while the rest still comes
///     println!("{}", head[0]);
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
#[must_use = "the destination is handed back only by wait(); dropped, it stays the scope's until the scope ends"]
pub struct PendingDownload<'scope, 'env, T> {
    scope: &'scope Scope<'scope, 'env>,
    fence: usize,
    stream: usize,
    ptr: *mut T,
    len: usize,
    _marker: PhantomData<&'scope mut [T]>,
}

/// One stream of a scope ([`Scope::stream`]): what copies, launches, prefetches and events are queued
/// on. Copy it freely; it cannot leave the scope.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(2)?;
/// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
/// # let mut d = gpu.alloc::<f32>(1024)?;
/// gpu.scope(&streams, |s| {
///     let d = s.device(&mut d);
///     let st = s.stream(0); // Copy: hand it to helpers freely
///     st.htod(&host, d)?;
///     st.fill(d.slice(0..16), 0.0)?;
///     st.dtoh(d, &mut back)
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct ScopeStream<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    index: usize,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Stream `index` of the streams the scope was given, to queue work on; panics where there is no
    /// such stream, as indexing a slice does.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let (d, copy, work) = (s.device(&mut d), s.stream(0), s.stream(1));
    ///     copy.htod(&host, d)?;
    ///     work.dtoh(d, &mut back)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn stream(&'scope self, index: usize) -> ScopeStream<'scope, 'env> {
        assert!(index < self.streams.len(), "stream {index} of a scope of {} streams", self.streams.len());
        ScopeStream { scope: self, index }
    }

    /// Every stream of the scope, in order.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let (d, n) = (s.device(&mut d), s.streams().len());
    ///     s.streams().enumerate().try_for_each(|(i, st)| {
    ///         let part = i * 1024 / n..(i + 1) * 1024 / n;
    ///         st.htod(&host[part.clone()], d.slice(part)) // a part a stream
    ///     })
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn streams(&'scope self) -> impl ExactSizeIterator<Item = ScopeStream<'scope, 'env>> + 'scope {
        (0..self.streams.len()).map(move |index| ScopeStream { scope: self, index })
    }

    /// Lends a device buffer to this scope.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let view = s.device(&mut d); // d is the scope's until it ends: the host cannot free or lend it
    ///     s.stream(0).htod(&host, view)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn device<T: Element>(&self, buf: &'scope mut DeviceBuffer<T>) -> Dev<'scope, T> {
        let foreign = !buf.context().is(self.env.ctx);
        self.handle(buf.ptr(), buf.len(), foreign, false)
    }

    /// Lends several device buffers to this scope, one handle each.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// let mut bufs = gpu.alloc_each::<f32>(2, 1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let views = s.devices(&mut bufs);
    ///     s.stream(0).htod(&host, views[0])?;
    ///     s.stream(1).dtod(views[0], views[1]) // waits for the upload by itself
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn devices<T: Element>(&self, bufs: &'scope mut [DeviceBuffer<T>]) -> Vec<Dev<'scope, T>> {
        bufs.iter_mut().map(|b| self.device(b)).collect()
    }

    /// Lends mapped pinned memory ([`crate::HostAlloc::MAPPED`]) to this scope, for kernels to read and
    /// write across the bus. The host cannot touch it until the scope ends.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// let mut m = gpu.pinned_with::<f32>(1024, cuda_scope::HostAlloc::MAPPED)?;
    /// gpu.scope(&streams, |s| {
    ///     let m = s.mapped(&mut m)?; // host memory, addressed by the GPU across the bus
    ///     s.stream(0).dtod(m, s.device(&mut d))
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn mapped<T: Element>(&self, buf: &'scope mut PinnedBuffer<T>) -> crate::Result<Dev<'scope, T>> {
        self.env.ctx.ensure_current()?;
        let foreign = !buf.context().is(self.env.ctx);
        Ok(self.handle(buf.device_ptr()?, buf.len(), foreign, false))
    }

    /// Lends managed memory ([`crate::Gpu::managed`]) to this scope: kernels and prefetches address it,
    /// and the host cannot touch it until the scope ends. Pages that are not on the GPU when a kernel
    /// touches them fault there, one migration at a time, unless a [`ScopeStream::prefetch`] moved them
    /// first.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// let mut m = gpu.managed::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let m = s.managed(&mut m);
    ///     s.stream(0).prefetch(m, cuda_scope::Destination::Device)?;
    ///     s.stream(0).dtoh(m, &mut back)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn managed<T: Element>(&self, buf: &'scope mut ManagedBuffer<T>) -> Dev<'scope, T> {
        let foreign = !buf.context().is(self.env.ctx);
        self.handle(buf.ptr(), buf.len(), foreign, true)
    }

    fn handle<T>(&self, base: u64, len: usize, foreign: bool, managed: bool) -> Dev<'scope, T> {
        let buffer = self.state.borrow_mut().book.lend(foreign, managed);
        Dev { scope: self.id, buffer, base, offset: 0, len, _marker: PhantomData }
    }

    /// `cudaEventElapsedTime(&ms, start, end)`: the GPU time between two events of this scope, once both
    /// have completed (after [`Scope::synchronize`], say); an error (`CUDA_ERROR_NOT_READY`) before.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// let ms = gpu.scope(&streams, |s| {
    ///     let st = s.stream(0);
    ///     let start = st.record_event()?;
    ///     st.htod(&host, s.device(&mut d))?;
    ///     let end = st.record_event()?;
    ///     s.synchronize()?; // both events have completed
    ///     s.elapsed_ms(start, end)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn elapsed_ms(&self, start: ScopeEvent<'scope>, end: ScopeEvent<'scope>) -> crate::Result<f64> {
        if start.scope != self.id || end.scope != self.id {
            return refused("elapsed_ms", Refusal::Foreign(Foreign::Scope));
        }
        self.env.ctx.ensure_current()?;
        let st = self.state.borrow();
        let event = |i: usize| match st.timed.binary_search_by_key(&i, |(at, _)| *at) {
            Ok(k) => Ok(&st.timed[k].1),
            Err(_) => refused("elapsed_ms", Refusal::Untimed),
        };
        event(end.index)?.elapsed_ms(event(start.index)?)
    }

    /// Keeps `what` until every stream of the scope is synchronized: what queued work uses.
    pub(crate) fn hold(&self, what: Box<dyn std::any::Any>) {
        self.state.borrow_mut().held.push(what);
    }

    /// Whether the buffer of a handle of this scope was lent from another GPU's context.
    pub(crate) fn is_foreign(&self, buffer: usize) -> bool {
        self.state.borrow().book.trackers[buffer].foreign
    }

    /// Whether the buffer of a handle of this scope is managed memory.
    pub(crate) fn is_managed(&self, buffer: usize) -> bool {
        self.state.borrow().book.trackers[buffer].managed
    }

    /// How the streams were ordered so far: the program's waits and those the scope added.
    ///
    /// The copies held are flushed first (see the [`coalesce`] module). An error in issuing them cannot
    /// come back from here, so it is kept: the scope's next call that queues, issues or waits for work (an
    /// operation, [`ScopeStream::record_event`], [`ScopeStream::wait_event`], a synchronization,
    /// [`Scope::is_idle`], [`Scope::flush`], [`Scope::set_coalescing`], [`Scope::graph`]) returns it in place
    /// of its own result, having queued and issued nothing (a synchronization still waits, as after any
    /// flush's error). Where no such call comes, the scope's end returns it, unless the closure returned an
    /// error of its own, which comes first as always. Each kept error is returned once. A call refused for
    /// its own reasons before it reaches the streams (copy lengths that differ, say) returns its refusal
    /// and leaves the kept error to the next.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let d = s.device(&mut d);
    ///     s.stream(0).htod(&host, d)?;
    ///     s.stream(1).dtoh(d, &mut back)?; // no wait_event: the scope adds one
    ///     assert_eq!(s.waits().added, 1);
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn waits(&self) -> Waits {
        // The copies held go out first: their waits are counted already, and this settles the stream.
        if let Err(err) = self.flush_streams() {
            self.keep(err);
        }
        self.state.borrow().book.waits.clone()
    }

    /// Keeps an error of the flush [`Scope::waits`] made, for the next call that can return it; where one
    /// is kept already (no call came since an earlier `waits`), the first stays.
    #[cold]
    #[inline(never)]
    fn keep(&self, err: Error) {
        let first = self.kept.take();
        let err = || Box::new(err.doing_also("flushed by Scope::waits, which returns no error"));
        self.kept.set(Some(first.unwrap_or_else(err)));
    }

    /// The error [`Scope::waits`] kept, if any, as the result of the call that asks, which takes it (each
    /// is returned once): at the start of every call that queues, issues or waits for work, and at the
    /// scope's end. A look at one word of the scope, beside those every operation reads.
    #[inline(always)]
    fn kept(&self) -> crate::Result<()> {
        match self.kept.take() {
            None => Ok(()),
            Some(err) => Err(*err),
        }
    }

    /// Blocks until every stream of the scope is idle (`cudaDeviceSynchronize` for these streams).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     s.stream(0).htod(&host, s.device(&mut d))?;
    ///     s.synchronize()?; // every stream idle; an error of any operation so far comes here
    ///     assert!(s.is_idle()?);
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn synchronize(&self) -> crate::Result<()> {
        let flushed = self.flush();
        synchronize_all(self.env.ctx, self.streams)?;
        flushed
    }

    /// Whether every stream has finished its work, without blocking (`cudaStreamQuery`).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     s.stream(0).htod(&host, s.device(&mut d))?;
    ///     while !s.is_idle()? {
    ///         std::thread::yield_now(); // the host's other work, meanwhile
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn is_idle(&self) -> crate::Result<bool> {
        self.flush()?;
        self.env.ctx.ensure_current()?;
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

    /// Queues one operation on stream `j` that touches `accesses` (several, for a launch, a batch or a
    /// graph), ordered after the work on other streams that touches the same bytes and noted for the
    /// work after it. `sequential`: its parts run one after another (a graph captured on one stream), so
    /// its reads and writes of the same bytes do not race. Everything that can fail without queueing the
    /// operation comes before `op`; once it is queued, the book knows it whatever fails after.
    ///
    /// Only the driver call is generic: the checks, waits and bookkeeping around it are one copy, out
    /// of line, shared by every kind of operation ([`Scope::enqueue_dyn`]), and their error paths are
    /// cold.
    #[inline]
    pub(crate) fn enqueue(
        &self,
        j: usize,
        accesses: &[DevAccess],
        sequential: bool,
        info: OpInfo,
        mut op: impl FnMut(ffi::CUstream) -> CuResult,
    ) -> crate::Result<()> {
        self.enqueue_dyn(j, accesses, sequential, info, Call::Now(&mut op))
    }

    /// [`Scope::enqueue`], the driver call behind a pointer: the checks and the waits the operation
    /// needs, the call, then the fence after it where its bytes are shared (recorded right after it,
    /// the two driver calls back to back as a program of bare calls makes them), the book's note of
    /// it, and the observer's events around it where one watches.
    ///
    /// The scope's context must be current for its calls. Where `common` made it current last on this
    /// thread, the driver is not asked ([`Context::is_known_current`]): that would be a call more per
    /// operation. Code outside `common` may have made another current since (or none), and then a call
    /// may fail for it: the first that fails is made again, once, if the scope's context was not current
    /// and now is ([`Scope::call`]). Whatever the driver does with another context current, so, the
    /// operation is queued on the scope's stream or refused with an error, and the book notes only
    /// what was queued.
    ///
    /// The commonest operations take a short way: one access, of a buffer used whole (or appended after
    /// every range of it touched so far, or of exactly one range touched before that no other overlaps:
    /// the copy back of what went up), with no observer and the context known current. Their plan takes
    /// no search but a look where the last one ended ([`Book::plan_one`], which a test holds to the
    /// general plan), and a wait they need is noted with the operation after the driver's calls, so that
    /// the wait, the call and the fence follow one another with none of the book's work between them.
    /// The calls are the same.
    #[inline(never)]
    fn enqueue_dyn(
        &self,
        j: usize,
        accesses: &[DevAccess],
        sequential: bool,
        info: OpInfo,
        op: Call<'_>,
    ) -> crate::Result<()> {
        self.kept()?;
        // The short way, for the commonest operations: one access, of a buffer used whole or of one part
        // of it, no observer, and the scope's context known current. The same calls follow.
        if let ([a], false) = (accesses, self.observed) {
            if self.env.ctx.is_known_current() {
                let mut guard = self.state.borrow_mut();
                let st = &mut *guard;
                if a.scope == self.id && !st.book.trackers[a.buffer].foreign {
                    if st.holding > st.groups[j].held.len() {
                        self.flush_met(st, j, accesses, &mut false)?;
                    }
                    if let Some(plan) = st.book.plan_one(j, a) {
                        return self.queue_planned(st, j, a, plan, info, op);
                    }
                }
            }
        }
        let stream = self.streams[j].raw();
        // The observer's label first: its code may make another context current.
        // Borrowed mutably while the observer speaks, so that a scope its code runs finds it busy and
        // goes unobserved rather than asking it again, without end.
        let label = match self.observed {
            true => self.env.observer.try_borrow_mut().ok().and_then(|o| o.as_ref().map(|o| o.observer.label())),
            false => None,
        };
        // Whether the driver has said the scope's context is current, for this operation.
        let mut asked = self.observed || !self.env.ctx.is_known_current();
        if asked {
            self.env.ctx.ensure_current()?;
        }
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        for a in accesses {
            if a.scope != self.id || st.book.trackers[a.buffer].foreign {
                return Err(foreign(&info, a.scope != self.id));
            }
        }
        if st.holding > st.groups[j].held.len() {
            self.flush_met(st, j, accesses, &mut asked)?;
        }
        let shared = match st.book.plan(j, accesses, sequential) {
            Ok(shared) => shared,
            Err(why) => return Err(unplanned(&info, why)),
        };
        // Conflicting accesses on other streams that nothing orders yet: wait for a fence after each
        // (newest first, since waiting for a later operation of a stream may cover the others).
        for i in 0..st.book.needs.len() {
            let (k, seq) = (st.book.needs[i].stream, st.book.needs[i].seq);
            if st.book.clocks.ordered(j, k, seq) {
                continue;
            }
            let f = match st.book.fence_for(i) {
                Some(f) => f,
                None => self.fence(st, k, &mut asked)?,
            };
            self.wait_fence(st, &mut asked, j, f, &info)?;
            st.book.waited(j, f, Some((i, &|| info.label())));
        }
        let observed = match label {
            Some(label) => {
                let e = self.env.events.timed()?;
                if let Err(err) = e.record_raw(stream) {
                    self.env.events.give([e]);
                    return Err(err);
                }
                Some((e, label))
            }
            None => None,
        };
        let planned = Planned { one: None, waited: None, shared };
        let op = match self.finish(st, (j, stream), planned, info, &mut asked, op) {
            Ok(op) => op,
            Err((err, queued)) => {
                if !queued {
                    self.env.events.give(observed.map(|(e, _)| e));
                }
                return Err(err);
            }
        };
        if let Some((start, label)) = observed {
            let end = self.env.events.timed()?;
            end.record_raw(stream)?;
            st.pending.push(Pending { start, end, stream: stream as usize, op, label });
        }
        Ok(())
    }

    /// [`Scope::enqueue_dyn`]'s short way, once [`Book::plan_one`] has planned the operation: the wait it
    /// needs, if any, then [`Scope::finish`]. Nothing watches, and no call was made yet.
    #[inline(always)]
    fn queue_planned(
        &self,
        st: &mut State,
        j: usize,
        a: &DevAccess,
        plan: PlanOne,
        info: OpInfo,
        op: Call<'_>,
    ) -> crate::Result<()> {
        let stream = self.streams[j].raw();
        let mut asked = false;
        if let Some(f) = plan.wait {
            self.wait_fence(st, &mut asked, j, f, &info)?;
        }
        let planned = Planned { one: Some(a), waited: plan.wait, shared: plan.shared };
        self.finish(st, (j, stream), planned, info, &mut asked, op).map(drop).map_err(|(err, _)| err)
    }

    /// `cudaStreamWaitEvent(stream j, fence f)`, through [`Scope::call`], after the copies held on `j`.
    #[inline(always)]
    fn wait_fence(&self, st: &mut State, asked: &mut bool, j: usize, f: usize, info: &OpInfo) -> crate::Result<()> {
        self.flush_stream(st, j, asked)?;
        let (stream, event) = (self.streams[j].raw(), st.fences[f]);
        // SAFETY: a live stream and an event recorded on another stream of this scope.
        let code = self.call(asked, &mut || unsafe { ffi::cuStreamWaitEvent(stream, event, 0) })?;
        check(code, || format!("{}: waiting for another stream", info.label()))
    }

    /// The operation's driver call on stream `j` (its handle `stream`), and the fence right after it where
    /// its bytes are shared (the two back to back, as a program of bare calls makes them), then the book's
    /// note of it: the operation's index. An error says whether the operation was queued: where it was
    /// not, nothing of it was noted and the fence's event was given back; where it was, the book knows
    /// it, whatever failed after. A wait of the short way, made already, is noted with it either way,
    /// after the driver's calls, so that the book's work stays out of the gaps between them.
    #[inline(always)]
    fn finish(
        &self,
        st: &mut State,
        (j, stream): (usize, ffi::CUstream),
        planned: Planned<'_>,
        info: OpInfo,
        asked: &mut bool,
        op: Call<'_>,
    ) -> Result<usize, (crate::Error, bool)> {
        let note_wait = |st: &mut State| {
            if let Some(f) = planned.waited {
                st.book.waited_again(j, f);
            }
        };
        let fence = match planned.shared {
            true => match self.take_untimed(st) {
                Ok(raw) => Some(raw),
                Err(err) => {
                    note_wait(st);
                    return Err((err, false));
                }
            },
            false => None,
        };
        let queued = match op {
            Call::Now(op) => self.flush_stream(st, j, asked).and_then(|()| self.call(asked, &mut || op(stream))),
            // Held: the book notes its access as its group is issued ([`Book::queued_held`]).
            Call::Hold(held) if fence.is_none() => {
                let held = self.hold_copy(st, j, held, asked);
                note_wait(st);
                return held.map(|()| st.book.held(info)).map_err(|err| (err, false));
            }
            // Bytes another stream touched: issued at once, with the fence after it.
            Call::Hold(held) => self.flush_stream(st, j, asked).and_then(|()| {
                // SAFETY: as for every held copy (`Scope::issue`), issued on its stream now.
                self.call(asked, &mut || unsafe { copy_call(&held, stream) })
            }),
        };
        if let Err(e) = queued.and_then(|code| check(code, || format!("{} on stream {j}", info.label()))) {
            if let Some(raw) = fence {
                st.give_back_untimed(raw);
            }
            note_wait(st);
            return Err((e, false));
        }
        // Another stream touched these bytes before, so one is likely to again: a fence now spares it
        // waiting for whatever this stream queues next.
        let recorded = match fence {
            Some(raw) => self.record(st, asked, raw, j),
            None => Ok(()),
        };
        // Queued: from here on the book knows it, whatever fails.
        note_wait(st);
        let op = st.book.queued(j, planned.one, info, fence.is_some() && recorded.is_ok());
        if let Some(raw) = fence {
            if let Err(err) = recorded {
                st.give_back_untimed(raw);
                let err = err.doing_also("queued, but the event after it could not be recorded");
                return Err((err, true));
            }
            st.add_fence(raw, j);
        }
        Ok(op)
    }

    /// A driver call of an operation's, made again once where it failed and the scope's context turns
    /// out not to have been current (see [`Scope::enqueue_dyn`]); `asked`: whether the driver has
    /// already said it is, for this operation, and so nothing is made again.
    #[inline(always)]
    fn call(&self, asked: &mut bool, f: &mut dyn FnMut() -> CuResult) -> crate::Result<CuResult> {
        match f() {
            ffi::SUCCESS => Ok(ffi::SUCCESS),
            code if *asked => Ok(code),
            code => self.again(asked, code, f),
        }
    }

    /// A call that failed before the driver was asked whether the scope's context is current: made again
    /// if it failed as a call made with another context current (or none) does, and the scope's was not
    /// current and now is; else its error stands. Only errors of a call refused as it was made, which
    /// queued nothing: never one of the errors of earlier work that any call may return.
    #[cold]
    #[inline(never)]
    fn again(&self, asked: &mut bool, code: CuResult, f: &mut dyn FnMut() -> CuResult) -> crate::Result<CuResult> {
        *asked = true;
        let of_the_context = matches!(
            code,
            ffi::ERROR_INVALID_CONTEXT
                | ffi::ERROR_INVALID_HANDLE
                | ffi::ERROR_CONTEXT_IS_DESTROYED
                | ffi::ERROR_INVALID_VALUE
        );
        if !of_the_context || !self.env.ctx.make_current_if_not()? {
            return Ok(code);
        }
        #[cfg(test)]
        MADE_AGAIN.with_borrow_mut(|codes| codes.push(code));
        Ok(f())
    }

    /// `cudaEventRecord(raw, stream k)`, for a fence's event, through [`Scope::call`], after the copies
    /// held on `k`.
    #[inline(always)]
    fn record(&self, st: &mut State, asked: &mut bool, raw: ffi::CUevent, k: usize) -> crate::Result<()> {
        self.flush_stream(st, k, asked)?;
        let stream = self.streams[k].raw();
        // SAFETY: an event of the scope's state, which outlives every use of it (the state is dropped or
        // kept for the next scope only once every stream is synchronized), and a stream of the scope.
        let code = self.call(asked, &mut || unsafe { ffi::cuEventRecord(raw, stream) })?;
        check(code, || "recording an event".into())
    }

    /// Records a fence on stream `k` now: its index in the book.
    fn fence(&self, st: &mut State, k: usize, asked: &mut bool) -> crate::Result<usize> {
        let raw = self.take_untimed(st)?;
        if let Err(err) = self.record(st, asked, raw, k) {
            st.give_back_untimed(raw);
            return Err(err);
        }
        Ok(st.add_fence(raw, k))
    }

    /// The next event without timing for a fence (given back by [`State::give_back_untimed`] where it goes
    /// unused).
    #[inline(always)]
    fn take_untimed(&self, st: &mut State) -> crate::Result<ffi::CUevent> {
        if st.taken == st.untimed_raw.len() {
            self.more_untimed(st)?;
        }
        st.taken += 1;
        Ok(st.untimed_raw[st.taken - 1])
    }

    /// One more event without timing for the fences, from the pool: once per fence a scope records
    /// beyond those of the scopes before it.
    #[cold]
    #[inline(never)]
    fn more_untimed(&self, st: &mut State) -> crate::Result<()> {
        let e = self.env.events.untimed()?;
        st.untimed_raw.push(e.raw());
        st.untimed.push(e);
        Ok(())
    }

    /// [`Scope::enqueue_dyn`] of a copy to hold, the shortest way, where it applies: the scope's context
    /// known current, its device side lent to this scope and not foreign, no group held on another
    /// stream that it may meet (which the long way issues first), and a plan ([`Book::plan_one`]) that
    /// needs no wait and no fence. It then does what the long way does for such a copy, without passing
    /// the copy through it; `None` where it does not apply, and nothing was done.
    #[inline(always)]
    fn hold_short(&self, j: usize, a: &DevAccess, held: Held, info: &OpInfo) -> Option<crate::Result<()>> {
        if !self.env.ctx.is_known_current() {
            return None;
        }
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        if a.scope != self.id || st.book.trackers[a.buffer].foreign {
            return None;
        }
        // Copies held on other streams that it may meet are issued first, by the long way.
        if st.holding > st.groups[j].held.len() && Self::meets_others(st, j, a) {
            return None;
        }
        match st.book.plan_one(j, a)? {
            PlanOne { shared: false, wait: None } => {}
            _ => return None,
        }
        if let Err(err) = self.kept() {
            return Some(Err(err));
        }
        if let Err(err) = self.hold_copy(st, j, held, &mut false) {
            return Some(Err(err));
        }
        st.book.held(info.clone());
        Some(Ok(()))
    }

    /// Whether a group held on a stream other than `j` may meet `a` where either writes: the test
    /// [`Scope::flush_met`] makes of each other group, for one access. Kept apart from it: sharing one
    /// helper over a slice of accesses made a held copy's host time 62 to 71 ns on four streams (33 to 36
    /// on one) with the no-op driver.
    #[inline]
    fn meets_others(st: &State, j: usize, a: &DevAccess) -> bool {
        let others = st.groups.iter().enumerate().filter(|&(k, g)| k != j && !g.held.is_empty());
        others.map(|(_, g)| g).any(|g| g.may_meet(a.buffer, &a.bytes, a.write))
    }

    /// Holds a copy on stream `j` to coalesce it (its waits are queued already): after the group held
    /// there, unless the group cannot take it, which is then flushed first.
    #[inline(always)]
    fn hold_copy(&self, st: &mut State, j: usize, mut held: Held, asked: &mut bool) -> crate::Result<()> {
        held.op = st.book.ops.len();
        if let Err(held) = st.groups[j].try_push(held) {
            self.flush_stream(st, j, asked)?;
            st.groups[j].push(held);
        }
        st.holding += 1;
        Ok(())
    }

    /// Whether a copy of `bytes` would be held now: coalescing is on, nothing watches, and it is small.
    #[inline(always)]
    fn holds(&self, bytes: usize) -> bool {
        !self.observed && coalesce::held(bytes) && self.state.borrow().coalescing != Coalescing::Off
    }

    /// A copy to hold: `host` its host side, `access` and `device` its device side.
    #[inline(always)]
    fn held(&self, up: bool, host: usize, access: &DevAccess, device: u64, bytes: usize) -> Held {
        let (first, end, at) = self.pinned.get();
        let mapped = match host >= first && host + bytes <= end {
            true => Some(at + (host - first) as u64),
            false => crate::host::pinned_buffer_of(self.env.ctx, host, bytes).map(|(first, end, at)| {
                // Kept while the scope lives: the range is borrowed until it ends, so the buffer lives.
                self.pinned.set((first, end, at));
                at + (host - first) as u64
            }),
        };
        let (buffer, range) = (access.buffer, (access.bytes.start, access.bytes.end));
        Held { up, host, mapped, device, bytes, buffer, range, op: 0 }
    }

    /// Issues the copies held on stream `j`, if any: the way the model (or the setting) says. See the
    /// [`coalesce`] module.
    #[inline(always)]
    fn flush_stream(&self, st: &mut State, j: usize, asked: &mut bool) -> crate::Result<()> {
        match st.holding == 0 || st.groups[j].held.is_empty() {
            true => Ok(()),
            false => self.flush_group(st, j, asked),
        }
    }

    /// Issues the copies held on streams other than `j` that `accesses` may meet where either writes (see
    /// [`Group::may_meet`]): before an operation on `j` is planned, so that the book knows them then.
    #[cold]
    #[inline(never)]
    fn flush_met(&self, st: &mut State, j: usize, accesses: &[DevAccess], asked: &mut bool) -> crate::Result<()> {
        for k in 0..st.groups.len() {
            let met = |g: &Group| accesses.iter().any(|a| g.may_meet(a.buffer, &a.bytes, a.write));
            if k != j && !st.groups[k].held.is_empty() && met(&st.groups[k]) {
                self.flush_group(st, k, asked)?;
            }
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn flush_group(&self, st: &mut State, j: usize, asked: &mut bool) -> crate::Result<()> {
        // Noted first: whatever fails after, the book knows the copies as queued.
        st.book.queued_held(j, st.groups[j].accesses());
        let mut held = std::mem::take(&mut st.flushing);
        st.groups[j].take(&mut held);
        st.holding -= held.len();
        let issued = self.issue(st, j, &held, asked);
        st.flushing = held;
        issued
    }

    /// Issues a group's copies on stream `j`.
    fn issue(&self, st: &mut State, j: usize, held: &[Held], asked: &mut bool) -> crate::Result<()> {
        let way = match (st.coalescing, held.len()) {
            (Coalescing::Forced(way), _) => way,
            (_, 1) => CopyWay::Each,
            _ => {
                let streams = self.streams;
                let ctx = self.env.gpu;
                match self.env.coalescer.model(ctx, || synchronize_all(ctx, streams))? {
                    Ok(model) => {
                        let (up, down) = Group::counts(held);
                        model.choose(up, down)
                    }
                    Err(_) => CopyWay::Each,
                }
            }
        };
        if way == CopyWay::Kernel && self.issue_kernel(st, j, held, asked)? {
            return Ok(());
        }
        let stream = self.streams[j].raw();
        for h in held {
            // SAFETY: a copy held by `htod` or `dtoh`, issued on its stream before anything queued after it.
            let code = self.call(asked, &mut || unsafe { copy_call(h, stream) })?;
            check(code, || {
                let op = &st.book.ops[h.op];
                format!(
                    "{} (operation {} of the scope) on stream {j}, issued as its group was flushed",
                    op.label(),
                    h.op
                )
            })?;
        }
        Ok(())
    }

    /// Issues a group's copies on stream `j` by the copy kernel: one launch, or one a part where it moves
    /// a MiB or more of pageable memory ([`coalesce::parts`]), each packed just before its launch and,
    /// where it holds pageable downloads, followed by an event that says when they can be unpacked.
    /// `false` where it cannot (no kernel, or no staging left), and nothing was issued.
    fn issue_kernel(&self, st: &mut State, j: usize, held: &[Held], asked: &mut bool) -> crate::Result<bool> {
        let Ok(kernel) = self.env.coalescer.kernel(self.env.gpu) else { return Ok(false) };
        let staged: usize = held.iter().filter(|h| h.mapped.is_none()).map(|h| h.bytes.div_ceil(16) * 16).sum();
        let entries: usize = held.iter().map(|h| coalesce::entries_of(h.bytes)).sum();
        let taken = st.staging.take(self.env.gpu, entries * 24 + staged).map_err(|e| {
            let (first, last) = (held[0].op, held[held.len() - 1].op);
            e.doing_also(format!("staging {} held copies (operations {first} to {last}) on stream {j}", held.len()))
        });
        let Some((host, device)) = taken? else { return Ok(false) };
        let mut at = entries * 24; // the table first, then the staged bytes
        let (mut unpack, mut pack) = (std::mem::take(&mut st.unpack), std::mem::take(&mut st.pack));
        let mark = unpack.len();
        pack.clear();
        coalesce::table(
            held,
            |h| {
                let (place, off) = (host + at, at as u64);
                match h.up {
                    true => pack.push((h.host, place, h.bytes)),
                    false => unpack.push((place, h.host, h.bytes)),
                }
                at += h.bytes.div_ceil(16) * 16;
                device + off
            },
            &mut st.table,
        );
        // SAFETY: the table's `entries * 24` bytes were taken above for this group, and nothing reads
        // them until the kernel runs.
        unsafe { std::ptr::copy_nonoverlapping(st.table.as_ptr(), host as *mut u64, st.table.len()) };
        let mut parts = std::mem::take(&mut st.parts);
        coalesce::parts(held, &mut parts);
        let mut issued = Ok(());
        for part in &parts {
            let part_of = (held, part, parts.len() > 1);
            if let Err((err, launched)) = self.issue_part(st, (j, kernel, device), part_of, (&pack, mark), asked) {
                // What was launched lands, and is unpacked as the scope ends; the parts after it are dropped.
                unpack.truncate(mark + if launched { part.unpack.end } else { part.unpack.start });
                issued = Err(err);
                break;
            }
        }
        (st.unpack, st.pack, st.parts) = (unpack, pack, parts);
        issued.map(|()| true)
    }

    /// One part of a group issued by the copy kernel ([`Scope::issue_kernel`]) on stream `j`, its table at
    /// device address `table`: its uploads packed, its launch, and after it, where the group goes in parts
    /// and this one holds pageable downloads, the event that says they landed (their jobs end at `mark` +
    /// `part.unpack.end` in the scope's unpacking). An error says whether the part was launched.
    fn issue_part(
        &self,
        st: &mut State,
        (j, kernel, table): (usize, &Kernel, u64),
        (held, part, in_parts): (&[Held], &coalesce::Part, bool),
        (pack, mark): (&[(usize, usize, usize)], usize),
        asked: &mut bool,
    ) -> Result<(), (crate::Error, bool)> {
        // SAFETY: each upload's source is borrowed for the whole scope and nothing writes it; the staging
        // taken for this group holds each at its own place, used by nothing else.
        unsafe { coalesce::copy_all(&pack[part.pack.clone()]) };
        let stream = self.streams[j].raw();
        let table = table + 24 * part.entries.start as u64;
        // SAFETY: each entry is a copy held by `htod` or `dtoh`: its device side a live range this scope
        // orders, its host side borrowed for the whole scope (read in place where it is a pinned buffer,
        // else through this group's own staging, packed above for this part's uploads); no two copies of
        // a group touch bytes another writes (`Group::admits`); this part's entries of the table and its
        // staging stay untouched until it has run (the host packs later parts' own, and unpacks this
        // part's downloads only once its event says it landed).
        let code = self.call(asked, &mut || unsafe { coalesce::launch(kernel, table, part.entries.len(), stream) });
        let copies = &held[part.copies.clone()];
        let (first, last) = (copies[0].op, copies[copies.len() - 1].op);
        let what = || {
            let (n, whole) = (copies.len(), part.copies.len() == held.len());
            let how = if whole { "as one launch" } else { "as one launch of a part of their group" };
            format!("{n} copies (operations {first} to {last} of the scope) on stream {j}, issued {how} as their group was flushed")
        };
        code.and_then(|code| check(code, what)).map_err(|err| (err, false))?;
        if !in_parts || part.unpack.is_empty() {
            return Ok(());
        }
        let raw = self.take_untimed(st).map_err(|err| (err, true))?;
        // SAFETY: an event of the scope's state (kept until every stream is synchronized) and its stream.
        let code = self.call(asked, &mut || unsafe { ffi::cuEventRecord(raw, stream) });
        if let Err(err) = code.and_then(|code| check(code, || format!("recording when {} landed", what()))) {
            st.give_back_untimed(raw);
            return Err((err, true));
        }
        st.landings.push((raw, mark + part.unpack.start..mark + part.unpack.end));
        Ok(())
    }

    /// Issues every copy the scope holds to coalesce now, on every stream (see the [`coalesce`]
    /// module): before the host computes for a while, so that the copies run meanwhile.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// # let (host, mut d) = (vec![1f32; 1024], gpu.alloc::<f32>(1024)?);
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     s.stream(0).htod(&host, s.device(&mut d))?; // held
    ///     s.flush()?; // issued: it runs while the host works
    ///     let _busy: f64 = (0..1_000_000).map(|i| i as f64).sum();
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn flush(&self) -> crate::Result<()> {
        self.kept()?;
        self.flush_streams()
    }

    /// Issues the copies held on every stream, stream by stream, up to the first error.
    fn flush_streams(&self) -> crate::Result<()> {
        let st = &mut *self.state.borrow_mut();
        let mut asked = false;
        (0..self.streams.len()).try_for_each(|j| self.flush_stream(st, j, &mut asked))
    }

    /// Whether the scope holds small copies to coalesce from here on ([`Coalescing::On`], the default),
    /// issues each as it is queued ([`Coalescing::Off`]: for code that measures single copies), or
    /// issues every group one way ([`Coalescing::Forced`]). The copies held so far are issued first.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// # let (host, mut d) = (vec![1f32; 1024], gpu.alloc::<f32>(1024)?);
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     s.set_coalescing(cuda_scope::Coalescing::Off)?;
    ///     let start = s.stream(0).record_event()?;
    ///     s.stream(0).htod(&host, s.device(&mut d))?; // one cuMemcpyAsync, as queued
    ///     let end = s.stream(0).record_event()?;
    ///     s.synchronize()?;
    ///     println!("one copy of 4 KiB: {:.1} µs", 1e3 * s.elapsed_ms(start, end)?);
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn set_coalescing(&self, coalescing: Coalescing) -> crate::Result<()> {
        self.flush()?;
        self.state.borrow_mut().coalescing = coalescing;
        Ok(())
    }

    /// Unpacks what landed in the staging for pageable destinations from the groups issued in parts, part
    /// by part as each lands (its event), while the GPU moves the next: as the scope ends, before its
    /// streams are synchronized. Stops at an event that fails; [`Scope::unpack`] does the rest once every
    /// stream is synchronized.
    fn unpack_landed(&self) {
        let st = &mut *self.state.borrow_mut();
        if st.landings.is_empty() {
            return;
        }
        // The scope's code may have left another context current: the events' waits need the scope's.
        let _ = self.env.ctx.ensure_current();
        let mut landed = 0;
        for (event, jobs) in &st.landings {
            // SAFETY: an event of the scope's state, recorded after a part's launch, kept until the scope
            // ends.
            if unsafe { ffi::cuEventSynchronize(*event) } != ffi::SUCCESS {
                break;
            }
            // SAFETY: the part's kernel has run (its event is complete), so nothing of the GPU writes these
            // bytes of the staging any more (the jobs are this part's alone: other groups' lie between
            // parts' and wait for the scope's synchronization); each destination is borrowed mutably for
            // the whole scope (a `&mut [T]` of an Element, for which any bytes are valid, apart from every
            // other), the staging is this scope's, and the two are apart.
            unsafe { coalesce::copy_all(&st.unpack[jobs.clone()]) };
            landed += 1;
        }
        // The jobs unpacked go, the latest first so that the earlier ranges stay where they are.
        for (_, jobs) in st.landings.drain(..landed).rev() {
            st.unpack.drain(jobs);
        }
        st.landings.clear();
    }

    /// Unpacks what landed in the staging for pageable destinations: once every stream is synchronized.
    fn unpack(&self) {
        let st = &mut *self.state.borrow_mut();
        // SAFETY: every stream is synchronized, so the kernels that wrote the staging have run and nothing
        // of the GPU touches either side; each destination is borrowed mutably for the whole scope (a
        // `&mut [T]` of an Element, for which any bytes are valid, apart from every other), the staging
        // is this scope's, and the two are apart.
        unsafe { coalesce::copy_all(&st.unpack) };
        st.unpack.clear();
        st.landings.clear();
    }

    /// Holds a kernel's module loaded until every stream is synchronized (once for a run of launches).
    fn hold_module(&self, module: &Arc<Loaded>) {
        let mut st = self.state.borrow_mut();
        if !st.modules.last().is_some_and(|m| Arc::ptr_eq(m, module)) {
            st.modules.push(module.clone());
        }
    }
}

impl<'scope, 'env> ScopeStream<'scope, 'env> {
    /// Which of the scope's streams this is (its index in the slice the scope was given).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     for st in s.streams() {
    ///         println!("stream {} of {}", st.index(), streams.len());
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn scope(&self) -> &'scope Scope<'scope, 'env> {
        self.scope
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyHostToDevice, stream)`. From pageable memory the driver
    /// stages the data and returns only when it has; from pinned memory it returns at once.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut d)))?; // host borrowed until the end
    /// # Ok(()) }
    /// ```
    pub fn htod<T: Element>(self, src: &'scope [T], dst: Dev<'scope, T>) -> crate::Result<()> {
        if src.len() != dst.len {
            return refused("htod", Refusal::Lengths { source: src.len(), destination: dst.len });
        }
        let bytes = std::mem::size_of_val(src);
        let info = OpInfo::copy(&Op { kind: "H2D", what: "memcpy HtoD" }, bytes);
        if self.scope.holds(bytes) {
            let access = dst.access(true);
            let held = self.scope.held(true, src.as_ptr() as usize, &access, dst.ptr(), bytes);
            if let Some(done) = self.scope.hold_short(self.index, &access, held, &info) {
                return done;
            }
            return self.scope.enqueue_dyn(self.index, &[access], false, info, Call::Hold(held));
        }
        self.scope.enqueue(self.index, &[dst.access(true)], false, info, |s| {
            // SAFETY: `src` is borrowed for the whole scope, which synchronizes before the borrow ends;
            // `dst` is a live device range of `bytes` bytes (checked above) that this scope orders.
            unsafe { ffi::cuMemcpyHtoDAsync_v2(dst.ptr(), src.as_ptr().cast(), bytes, s) }
        })
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyDeviceToHost, stream)`.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d), &mut back))?;
    /// assert!(back.iter().all(|&x| x == 0.0)); // a new device buffer is zeroed
    /// # Ok(()) }
    /// ```
    pub fn dtoh<T: Element>(self, src: impl Into<DevRead<'scope, T>>, dst: &'scope mut [T]) -> crate::Result<()> {
        self.download(src, dst, true)
    }

    /// [`ScopeStream::dtoh`], held to coalesce where `may_hold` and the scope holds copies of its size.
    fn download<T: Element>(
        self,
        src: impl Into<DevRead<'scope, T>>,
        dst: &'scope mut [T],
        may_hold: bool,
    ) -> crate::Result<()> {
        let src = *src.into().view();
        if src.len != dst.len() {
            return refused("dtoh", Refusal::Lengths { source: src.len, destination: dst.len() });
        }
        let bytes = std::mem::size_of_val(dst);
        let info = OpInfo::copy(&Op { kind: "D2H", what: "memcpy DtoH" }, bytes);
        if may_hold && self.scope.holds(bytes) {
            let access = src.access(false);
            let held = self.scope.held(false, dst.as_mut_ptr() as usize, &access, src.ptr(), bytes);
            if let Some(done) = self.scope.hold_short(self.index, &access, held, &info) {
                return done;
            }
            return self.scope.enqueue_dyn(self.index, &[access], false, info, Call::Hold(held));
        }
        self.scope.enqueue(self.index, &[src.access(false)], false, info, |s| {
            // SAFETY: `dst` is borrowed mutably for the whole scope, which synchronizes before the borrow
            // ends, so nothing else reads or writes it meanwhile; `src` is a live device range of `bytes`;
            // T is an Element, so whatever bits arrive are a valid T.
            unsafe { ffi::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src.ptr(), bytes, s) }
        })
    }

    /// [`ScopeStream::dtoh`], and an event after it, so that [`PendingDownload::wait`] can hand `dst` back to
    /// the host once the copy has finished, while the scope's other work goes on: to use the first part of a
    /// download while the rest arrives.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// let (mut d, mut out) = (gpu.alloc::<f32>(1 << 20)?, vec![0f32; 1 << 20]);
    /// let (head, tail) = out.split_at_mut(1 << 10);
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let d = s.device(&mut d);
    ///     let first = s.stream(0).dtoh_pending(d.slice(0..1 << 10), head)?;
    ///     s.stream(1).dtoh(d.slice(1 << 10..1 << 20), tail)?;
    ///     let head = first.wait()?; // read while stream 1 still copies
    ///     println!("{}", head[0]);
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn dtoh_pending<T: Element>(
        self,
        src: impl Into<DevRead<'scope, T>>,
        dst: &'scope mut [T],
    ) -> crate::Result<PendingDownload<'scope, 'env, T>> {
        let (ptr, len) = (dst.as_mut_ptr(), dst.len());
        self.download(src, dst, false)?; // never held: its destination is handed back when the copy is done
        let st = &mut *self.scope.state.borrow_mut();
        // The fence after the copy, if it has one already (its bytes were shared), else one now.
        let fence = match st.book.fence_after(self.index, st.book.clocks.seq(self.index)) {
            Some(f) => f,
            None => self.scope.fence(st, self.index, &mut false)?,
        };
        Ok(PendingDownload { scope: self.scope, fence, stream: self.index, ptr, len, _marker: PhantomData })
    }

    /// `cudaMemcpyAsync(dst, src, ..., cudaMemcpyDeviceToDevice, stream)`. The ranges may not overlap.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// let mut copy = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let (d, c) = (s.device(&mut d), s.device(&mut copy));
    ///     s.stream(0).htod(&host, d)?;
    ///     s.stream(0).dtod(d, c) // on the device, after the upload in stream order
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn dtod<T: Element>(self, src: impl Into<DevRead<'scope, T>>, dst: Dev<'scope, T>) -> crate::Result<()> {
        let src = *src.into().view();
        if src.len != dst.len {
            return refused("dtod", Refusal::Lengths { source: src.len, destination: dst.len });
        }
        let bytes = src.len * std::mem::size_of::<T>();
        let info = OpInfo::copy(&Op { kind: "DtoD", what: "memcpy DtoD" }, bytes);
        self.scope.enqueue(self.index, &[src.access(false), dst.access(true)], false, info, |s| {
            // SAFETY: two live, non-overlapping (checked by enqueue) device ranges of `bytes` bytes that
            // this scope orders.
            unsafe { ffi::cuMemcpyDtoDAsync_v2(dst.ptr(), src.ptr(), bytes, s) }
        })
    }

    /// `cudaMemsetD32Async`: sets every element to `value` (to poison outputs before a run, say).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| {
    ///     let d = s.device(&mut d);
    ///     s.stream(0).fill(d, f32::NAN)?; // poisoned: whatever a kernel fails to write shows
    ///     s.stream(0).dtoh(d, &mut back)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn fill(self, dst: Dev<'scope, f32>, value: f32) -> crate::Result<()> {
        let info = OpInfo::copy(&Op { kind: "memset", what: "memset" }, dst.len * 4);
        self.scope.enqueue(self.index, &[dst.access(true)], false, info, |s| {
            // SAFETY: `dst` is a live device range of `len` 4-byte words that this scope orders.
            unsafe { ffi::cuMemsetD32Async(dst.ptr(), value.to_bits(), dst.len, s) }
        })
    }

    /// `cudaMemPrefetchAsync(view, bytes, device or cudaCpuDeviceId, stream)`: moves the pages of a
    /// managed view to the scope's GPU or to the host, ahead of the work that will touch them there, in
    /// bulk instead of a page fault at a time. Ordered like a write of the range. The driver widens the
    /// range to whole pages; moving a neighbour's page is safe ("memory accesses to this range are
    /// always coherent and are allowed even when the data is actively being migrated", says
    /// `cuMemPrefetchAsync`'s documentation), and costs only time.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// let mut m = gpu.managed::<f32>(1 << 20)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let m = s.managed(&mut m);
    ///     s.stream(0).prefetch(m, cuda_scope::Destination::Device)?; // in bulk, not a fault a page
    ///     s.stream(0).prefetch(m.slice(0..1024), cuda_scope::Destination::Host) // what the host reads next
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn prefetch<T: Element>(self, view: Dev<'scope, T>, to: Destination) -> crate::Result<()> {
        let op = match to {
            Destination::Device => &Op { kind: "H2D", what: "prefetch to device" },
            Destination::Host => &Op { kind: "D2H", what: "prefetch to host" },
        };
        let name = op.what;
        if view.scope == self.scope.id && !self.scope.is_managed(view.buffer) {
            return refused(name, Refusal::Kind { needed: "managed" });
        }
        let dst = match to {
            Destination::Device => self.scope.env.ctx.device(),
            Destination::Host => ffi::DEVICE_CPU,
        };
        let bytes = view.len * std::mem::size_of::<T>();
        self.scope.enqueue(self.index, &[view.access(true)], false, OpInfo::copy(op, bytes), |s| match bytes {
            0 => ffi::SUCCESS, // the driver refuses an empty range; there is nothing to move
            // SAFETY: a live managed range of `bytes` bytes that this scope orders (the scope's id was
            // checked by enqueue, and the buffer was lent as managed memory); the destination is this
            // scope's device (an ordinal, whichever context is current) or the host.
            _ => unsafe { ffi::cuMemPrefetchAsync(view.ptr(), bytes, dst, s) },
        })
    }

    /// A launch of `kernel` on this stream: `kernel<<<config.grid, config.block, config.shared_bytes,
    /// stream>>>(...)`. Declare its arguments in the kernel's order with
    /// [`LaunchBuilder::read`], [`LaunchBuilder::write`] and [`LaunchBuilder::value`], then
    /// [`LaunchBuilder::launch`] it, in an `unsafe` block that says what the kernel touches.
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
    ///     // SAFETY: saxpy reads x[0..n) and writes y[0..n), nothing else.
    ///     unsafe { launch.read(x).write(y).value(2.0f32).value(1024u64).launch() }
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn kernel<'q>(self, kernel: &'q Kernel, config: LaunchConfig) -> LaunchBuilder<'q, 'scope>
    where
        'scope: 'q,
    {
        LaunchBuilder::new((self.scope, self.index), kernel, config)
    }

    /// `cudaEventRecord(event, stream)`: marks the work queued on this stream so far, for
    /// [`ScopeStream::wait_event`] on another stream and for [`Scope::elapsed_ms`].
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let (d, copy, work) = (s.device(&mut d), s.stream(0), s.stream(1));
    ///     copy.htod(&host, d)?;
    ///     let uploaded = copy.record_event()?; // after the upload
    ///     work.wait_event(uploaded)?;
    ///     work.dtoh(d, &mut back)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn record_event(self) -> crate::Result<ScopeEvent<'scope>> {
        let scope = self.scope;
        scope.kept()?;
        scope.env.ctx.ensure_current()?;
        let mut st = scope.state.borrow_mut();
        scope.flush_stream(&mut st, self.index, &mut false)?;
        let event = scope.env.events.timed()?;
        if let Err(e) = event.record_raw(scope.streams[self.index].raw()) {
            scope.env.events.give([event]);
            return Err(e);
        }
        let index = st.add_fence(event.raw(), self.index);
        st.timed.push((index, event));
        Ok(ScopeEvent { scope: scope.id, index, _marker: PhantomData })
    }

    /// `cudaStreamWaitEvent(stream, event)`: work queued next on this stream waits until the work before
    /// `event` is done.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let (d, copy, work) = (s.device(&mut d), s.stream(0), s.stream(1));
    ///     copy.htod(&host, d)?;
    ///     work.wait_event(copy.record_event()?)?; // the program's own wait: the scope adds none
    ///     work.dtoh(d, &mut back)?;
    ///     assert_eq!((s.waits().made, s.waits().added), (1, 0));
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn wait_event(self, event: ScopeEvent<'scope>) -> crate::Result<()> {
        let scope = self.scope;
        if event.scope != scope.id {
            return refused("wait_event", Refusal::Foreign(Foreign::Scope));
        }
        scope.kept()?;
        let mut st = scope.state.borrow_mut();
        scope.flush_stream(&mut st, self.index, &mut false)?;
        let (stream, raw) = (scope.streams[self.index].raw(), st.fences[event.index]);
        // SAFETY: a live stream and an event recorded in this scope.
        let code = scope.call(&mut false, &mut || unsafe { ffi::cuStreamWaitEvent(stream, raw, 0) })?;
        check(code, || "waiting for an event".into())?;
        st.book.waited(self.index, event.index, None);
        Ok(())
    }

    /// Blocks until the work queued on this stream has finished (`cudaStreamSynchronize`); an error if
    /// it failed.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(2)?;
    /// # let (host, mut back) = (gpu.pinned_from_fn(1024, |i| i as f32)?, gpu.pinned::<f32>(1024)?);
    /// # let mut d = gpu.alloc::<f32>(1024)?;
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     s.stream(0).dtoh(s.device(&mut d), &mut back)?;
    ///     s.stream(0).synchronize()?; // this stream's work is done; back stays the scope's until it ends
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn synchronize(self) -> crate::Result<()> {
        let scope = self.scope;
        let flushed =
            scope.kept().and_then(|()| scope.flush_stream(&mut scope.state.borrow_mut(), self.index, &mut false));
        synchronize_all(self.scope.env.ctx, std::iter::once(&self.scope.streams[self.index]))?;
        flushed
    }
}

impl<'scope, T: Element> PendingDownload<'scope, '_, T> {
    /// Blocks until the download's copy has finished (`cudaEventSynchronize`), then hands its destination back
    /// to the host. Where the stream failed, the destination stays the scope's (which settles it as it
    /// ends) and the error is returned.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// # let streams = gpu.streams(1)?;
    /// # let (mut d, mut back) = (gpu.alloc::<f32>(1024)?, vec![0f32; 1024]);
    /// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
    ///     let pending = s.stream(0).dtoh_pending(s.device(&mut d), &mut back)?;
    ///     let back = pending.wait()?; // the copy has finished: back is the host's
    ///     back[0] += 1.0;
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn wait(self) -> crate::Result<&'scope mut [T]> {
        self.scope.env.ctx.ensure_current()?;
        let st = self.scope.state.borrow();
        // SAFETY: a live event recorded in this scope after the copy.
        check(unsafe { ffi::cuEventSynchronize(st.fences[self.fence]) }, || {
            format!("waiting for a download on stream {} to finish", self.stream)
        })?;
        // SAFETY: `dst` was lent to this download for 'scope and moved into it, so nothing else holds it;
        // the GPU's one access to it was that copy, which the event shows has finished; T is an Element,
        // so whatever bits arrived are a valid T. Nothing queued later can touch it: that takes a borrow,
        // which only this reference gives.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) })
    }
}

impl crate::launch::sealed::QueueSealed for ScopeStream<'_, '_> {}

impl<'scope> crate::launch::Queue<'scope> for ScopeStream<'scope, '_> {
    fn kernel<'q>(&'q self, kernel: &'q Kernel, config: LaunchConfig) -> LaunchBuilder<'q, 'scope> {
        ScopeStream::kernel(*self, kernel, config)
    }
}

impl<'scope> Enqueue<'scope> for Scope<'scope, '_> {
    fn scope_id(&self) -> u64 {
        self.id
    }

    fn launch(&self, Checked { stream, kernel, accesses, queue }: Checked<'_>) -> crate::Result<()> {
        let scope = self;
        if !kernel.module.ctx.is(scope.env.ctx) {
            let why = crate::LaunchRefusal::Foreign(Foreign::Context);
            return Err(crate::LaunchRefused { kernel: kernel.name.to_string(), why }.into());
        }
        // Held before anything is queued, so that no path out of `enqueue` can unload it under the kernel.
        scope.hold_module(&kernel.module);
        let info = OpInfo { op: &Op { kind: "kernel", what: "kernel" }, kernel: Some(kernel.name.clone()), bytes: 0 };
        scope.enqueue(stream, accesses, false, info, queue)
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
/// A held copy's driver call on `stream`: `cudaMemcpyAsync` up or down.
///
/// # Safety
/// `h` is a copy held by `htod` or `dtoh`: its host side is borrowed for the whole scope (which synchronizes
/// before the borrow ends) and its device side is a live range of `bytes` that the scope orders; `stream`
/// is its stream, and nothing queued after it there has been issued.
unsafe fn copy_call(h: &Held, stream: ffi::CUstream) -> CuResult {
    // SAFETY: as the caller promises.
    unsafe {
        match h.up {
            true => ffi::cuMemcpyHtoDAsync_v2(h.device, h.host as *const _, h.bytes, stream),
            false => ffi::cuMemcpyDtoHAsync_v2(h.host as *mut _, h.device, h.bytes, stream),
        }
    }
}

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
pub(crate) fn synchronize_all<'a>(ctx: &Context, streams: impl IntoIterator<Item = &'a Stream>) -> crate::Result<()> {
    // The scope's code may have left another context current, or none (another library's). Where this
    // fails the waits below say so, and the context is pushed for the driver's last word.
    let _ = ctx.ensure_current();
    // SAFETY: live streams; cuCtxSynchronize runs only with this context pushed (with_current).
    let streams_done = streams.into_iter().map(|s| unsafe { ffi::cuStreamSynchronize(s.raw()) });
    match settle(streams_done, || ctx.with_current(|| unsafe { ffi::cuCtxSynchronize() })) {
        Settled::Idle => Ok(()),
        Settled::Failed(code) => Err(driver_error(code, || "running the queued GPU work".into())),
        Settled::Unknown(code) => {
            // Not eprintln!, which panics where stderr is closed (a pipe whose reader left): a panic here
            // would unwind, and release the memory, instead of aborting.
            let _ = writeln!(
                std::io::stderr(),
                "fatal: a GPU stream failed and the driver cannot say whether copies into host memory have \
                 stopped ({}); aborting rather than release that memory",
                error_name(code)
            );
            std::process::abort()
        }
    }
}

/// Runs `f` in a scope over `streams`; see [`crate::Gpu::scope`] and [`crate::Gpu::timed`].
pub(crate) fn run<'env, R, E: From<Error>>(
    env: Env<'env>,
    streams: &'env [Stream],
    timed: bool,
    f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R, E>,
) -> Result<(R, Option<f64>), E> {
    let Some(first) = streams.first() else { return Ok(refused("scope", Refusal::Empty)?) };
    if let Some(i) = streams.iter().position(|s| !s.context().is(env.ctx)) {
        return Ok(refused(format!("scope: stream {i}"), Refusal::Foreign(Foreign::Context))?);
    }
    env.ctx.make_current()?;
    // A borrowed stream's owner may have begun a capture on it, which would take the scope's work into
    // a graph to run later, after the scope has let its borrows go.
    for (i, s) in streams.iter().enumerate().filter(|(_, s)| s.is_borrowed()) {
        if s.is_capturing()? {
            return Ok(refused(format!("scope: stream {i}"), Refusal::Capturing)?);
        }
    }
    let mut state = env.spare.borrow_mut().take().unwrap_or_default();
    state.book.reset(streams.len());
    state.coalescing = Coalescing::default();
    state.groups.resize_with(streams.len(), Group::default);
    let scope = Scope {
        env,
        streams,
        id: NEXT_SCOPE.fetch_add(1, Atomic::Relaxed),
        // An observer's own code (inside `record` or `label`) holds it: a scope it runs goes unobserved.
        observed: env.observer.try_borrow().is_ok_and(|o| o.is_some()),
        state: RefCell::new(*state),
        pinned: std::cell::Cell::new((0, 0, 0)),
        kept: std::cell::Cell::new(None),
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
            let scope = self.scope;
            let synced = self.synced.unwrap_or_else(|| synchronize_all(scope.env.ctx, scope.streams).is_ok());
            let env = self.scope.env;
            let mut st = self.scope.state.borrow_mut();
            let pending = std::mem::take(&mut st.pending);
            // Not while unwinding (an observer that panicked then would abort the process), and not
            // re-entered (an observer that runs a scope of its own GPU finds it busy and misses these).
            let mut observer = env.observer.try_borrow_mut();
            let mut observer =
                observer.as_mut().ok().filter(|_| synced && !std::thread::panicking()).and_then(|o| o.as_mut());
            for p in pending {
                if let Some(o) = observer.as_deref_mut() {
                    if let (Ok(start_ms), Ok(end_ms)) = (p.start.elapsed_ms(&o.origin), p.end.elapsed_ms(&o.origin)) {
                        let info = &st.book.ops[p.op];
                        let (kind, name, bytes) = (info.kind(), info.name().to_string(), info.bytes);
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
                env.events.give([p.start, p.end]);
            }
            // The fences' events stay with the state for the next scope's; the program's, with timing,
            // go back to the pool.
            let st = &mut *st;
            st.taken = 0;
            st.fences.clear();
            env.events.give(st.timed.drain(..).map(|(_, e)| e));
            env.events.give(st.joins.drain(..));
            // Every stream is idle (or the process has aborted): nothing queued needs these any more.
            st.modules.clear();
            st.held.clear();
            // Copies still held (the closure panicked) are dropped, never issued; the staging is free.
            let mut dropped = std::mem::take(&mut st.flushing);
            st.groups.iter_mut().for_each(|g| g.take(&mut dropped));
            dropped.clear();
            st.flushing = dropped;
            st.holding = 0;
            st.unpack.clear();
            st.landings.clear();
            st.staging.reset();
            let state = std::mem::take(st);
            if let Ok(mut spare) = env.spare.try_borrow_mut() {
                *spare = Some(Box::new(state));
            }
        }
    }
    let mut finish = Finish { scope: &scope, synced: None };
    // Timing: `start` on the first stream and every other stream waits for it (fork); at the end the
    // first stream waits for every other stream and records `stop` (join), so stop - start spans all.
    let start = if timed { Some(fork(env.events, first, &streams[1..])?) } else { None };
    let result = f(&scope);
    // The copies still held go out, also where the closure returned an error (as they would have, issued
    // as queued); an error of theirs is the scope's where the closure's is not, and so is one that a flush
    // of `Scope::waits` kept and no call returned, which came first.
    let flushed = scope.flush_streams();
    let flushed = scope.kept().and(flushed);
    if start.is_some() {
        // `f` may have left another context current (another library's): the join's calls need the scope's.
        let _ = env.ctx.ensure_current();
    }
    let stop = match start {
        Some(_) if result.is_ok() && flushed.is_ok() => Some(join(&scope, first)?),
        _ => None,
    };
    // Groups issued in parts are unpacked as each part lands, while the GPU moves the next; the rest
    // once every stream is synchronized.
    scope.unpack_landed();
    let synced = synchronize_all(env.ctx, streams);
    if synced.is_ok() {
        scope.unpack();
    }
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
    flushed?;
    synced?;
    Ok((r, elapsed))
}

fn fork(events: &EventPool, first: &Stream, others: &[Stream]) -> crate::Result<Event> {
    let start = events.timed()?;
    start.record(first)?;
    for s in others {
        // SAFETY: live stream and event handles of this context.
        check(unsafe { ffi::cuStreamWaitEvent(s.raw(), start.raw(), 0) }, || "forking streams".into())?;
    }
    Ok(start)
}

fn join(scope: &Scope<'_, '_>, first: &Stream) -> crate::Result<Event> {
    let events = scope.env.events;
    for s in &scope.streams[1..] {
        let e = events.untimed()?;
        e.record(s)?;
        // SAFETY: live stream and event handles of this context.
        let waited = check(unsafe { ffi::cuStreamWaitEvent(first.raw(), e.raw(), 0) }, || "joining streams".into());
        // Kept until the scope ends: the wait may not have happened yet.
        scope.state.borrow_mut().joins.push(e);
        waited?;
    }
    let stop = events.timed()?;
    stop.record(first)?;
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let err = gpu.scope(std::slice::from_ref(&stream), |_| Ok::<_, crate::Error>(())).unwrap_err();
        assert!(format!("{err:#}").contains("another GPU's context"), "{err:#}");
        let host = [1f32; 16];
        let err = gpu.scope(&mine, |s| s.stream(0).htod(&host, s.device(&mut buf))).unwrap_err();
        assert!(format!("{err:#}").contains("another GPU's context"), "{err:#}");
        drop((gpu, buf, stream)); // the separate context outlives them all, though the Arc named it first
    }

    /// Code outside `common` (another CUDA library, say) may make another context current, or none, while
    /// a scope runs, and the scope does not ask the driver before each operation which is: every kind of
    /// operation still runs on the scope's streams, after what it must wait for, with the results it
    /// should have, and so do the waits, the graph and the timing around them. Prints the codes of the
    /// calls the driver refused and the scope made again.
    #[test]
    #[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
    fn operations_run_whatever_context_other_code_made_current() {
        const N: usize = 1 << 16;
        let gpu = crate::Gpu::init().unwrap();
        let foreign = Context::separate().unwrap();
        let streams = gpu.streams(2).unwrap();
        let saxpy = gpu.load_ptx(include_str!("../tests/ptx/kernels.ptx")).unwrap().kernel("saxpy").unwrap();
        let mut d: Vec<DeviceBuffer<f32>> = (0..4).map(|_| gpu.alloc::<f32>(N).unwrap()).collect();
        let host: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let mut managed = gpu.managed::<f32>(N).unwrap();
        managed.copy_from_slice(&host);
        let want = |v: &[f32]| v.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32 + 1.0);
        let batches = crate::batch::batch_support().is_ok();
        for current in [foreign.raw(), std::ptr::null_mut()] {
            let (mut pinned, mut out, mut handed_back) = (gpu.pinned::<f32>(N).unwrap(), vec![0f32; N], vec![0f32; N]);
            let (mut replayed, mut from_managed, mut batched) = (vec![0f32; N], vec![0f32; N], vec![0f32; N]);
            // Behind `common`'s back, as another library would; checked, so that the test tests it.
            let other = || {
                // SAFETY: a live context, or none; a valid out-pointer.
                unsafe {
                    assert_eq!(ffi::cuCtxSetCurrent(current), ffi::SUCCESS);
                    let mut now = std::ptr::null_mut();
                    assert_eq!(ffi::cuCtxGetCurrent(&mut now), ffi::SUCCESS);
                    assert_eq!(now, current, "the context another library made current");
                }
            };
            MADE_AGAIN.with_borrow_mut(Vec::clear);
            let ms = gpu
                .timed(&streams, |s| {
                    let v = s.devices(&mut d);
                    let (dx, dy, dz, dw) = (v[0], v[1], v[2], v[3]);
                    let m = s.managed(&mut managed);
                    let (up, work) = (s.stream(0), s.stream(1));
                    other();
                    up.htod(&host, dx)?;
                    other();
                    work.fill(dy, 1.0)?;
                    other();
                    let cfg = LaunchConfig::linear(64, 256);
                    // SAFETY: saxpy(x, y, a, n) reads x[0..n) and writes y[0..n). It waits for the upload.
                    unsafe { work.kernel(&saxpy, cfg).read(dx).write(dy).value(2.0f32).value(N as u64).launch()? };
                    other();
                    let done = work.record_event()?;
                    other();
                    up.wait_event(done)?;
                    other();
                    up.dtod(dy, dz)?;
                    other();
                    work.dtoh(dz, &mut pinned)?; // after the copy
                    other();
                    up.dtoh(dy, &mut out)?; // into pageable memory
                    other();
                    let pending = work.dtoh_pending(dz, &mut handed_back)?;
                    other();
                    assert!(want(pending.wait()?), "the download handed back mid-scope");
                    other();
                    let graph = s.graph(|g| g.dtoh(dy, &mut replayed))?;
                    other();
                    work.replay(&graph)?;
                    other();
                    up.prefetch(m, Destination::Device)?;
                    other();
                    up.dtoh(m, &mut from_managed)?;
                    if batches {
                        other();
                        let (a, b) = host.split_at(N / 2);
                        up.htod_batch(&[a, b], &[dw.slice(0..N / 2), dw.slice(N / 2..N)], crate::SrcOrder::Any)?;
                        other();
                        up.dtoh_batch(&[dw], [&mut batched[..]])?;
                    }
                    other();
                    Ok::<_, crate::Error>(())
                })
                .unwrap();
            let again = MADE_AGAIN.with_borrow(Vec::clone);
            eprintln!("with {current:?} current: made again after these codes: {again:?}; {ms:.3} ms");
            assert!(ms > 0.0, "the timed scope's join");
            assert!(want(&out) && want(&pinned) && want(&replayed), "with {current:?} current, the results differ");
            assert!(from_managed == host && (!batches || batched == host), "with {current:?} current");
        }
        drop((gpu, d, managed));
    }

    /// Each trigger the `coalesce` module lists issues the copies held on the stream: two uploads held on
    /// stream 0 are gone from its group after it (or, for a copy that cannot join them, replaced by that
    /// copy alone), and land.
    #[test]
    #[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
    fn every_trigger_issues_the_copies_held() {
        const TRIGGERS: [&str; 16] = [
            "another operation on the stream",
            "a copy that overlaps a held one",
            "an event recorded on the stream",
            "a wait queued on the stream",
            "a conflict on another stream",
            "a pending download on the stream",
            "a graph capture",
            "Scope::synchronize",
            "ScopeStream::synchronize",
            "Scope::is_idle",
            "Scope::waits",
            "Scope::flush",
            "Scope::set_coalescing",
            "a group past GROUP_BYTES",
            "a group past GROUP_COPIES",
            "the scope's end",
        ];
        let gpu = crate::Gpu::init().unwrap();
        let streams = gpu.streams(2).unwrap();
        let host: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
        let mut d = gpu.alloc::<f32>(1 << 21).unwrap();
        let mut out = vec![0f32; 1 << 16];
        for (t, trigger) in TRIGGERS.iter().enumerate() {
            let held = |s: &Scope<'_, '_>| s.state.borrow().groups[0].held.len();
            let left = gpu
                .scope(&streams, |s| -> crate::Result<usize> {
                    s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
                    let dv = s.device(&mut d);
                    let (zero, one) = (s.stream(0), s.stream(1));
                    zero.htod(&host[..1024], dv.slice(0..1024))?;
                    zero.htod(&host[1024..2048], dv.slice(1024..2048))?;
                    assert_eq!(held(s), 2, "two uploads held");
                    let (head, rest) = out.split_at_mut(16);
                    match t {
                        0 => zero.fill(dv.slice(8192..8200), 1.0)?,
                        1 => zero.htod(&host[100..110], dv.slice(100..110))?,
                        2 => drop(zero.record_event()?),
                        3 => zero.wait_event(one.record_event()?)?,
                        4 => one.dtoh(dv.slice(0..16), head)?,
                        5 => drop(zero.dtoh_pending(dv.slice(5000..5016), head)?),
                        6 => drop(s.graph(|g| g.htod(&host[..4], dv.slice(9000..9004)))?),
                        7 => s.synchronize()?,
                        8 => zero.synchronize()?,
                        9 => drop(s.is_idle()?),
                        10 => drop(s.waits()),
                        11 => s.flush()?,
                        12 => s.set_coalescing(Coalescing::Off)?,
                        13 => {
                            let big = 64 << 10; // 256 KiB of f32: the most one held copy takes
                            for i in 0..16 {
                                zero.htod(&host[..big], dv.slice(65536 + i * big..65536 + (i + 1) * big))?;
                            }
                        }
                        14 => {
                            for (i, x) in rest.iter_mut().take(coalesce::GROUP_COPIES).enumerate() {
                                zero.dtoh(dv.slice(4096 + i..4097 + i), std::slice::from_mut(x))?;
                            }
                        }
                        _ => return Ok(held(s)),
                    }
                    Ok(held(s))
                })
                .unwrap();
            let want = match t {
                1 | 13 => 1, // the copy that could not join is held alone
                14 => 2,     // 2 + 16384 copies: a group of 16,384 went out, two are held
                15 => 2,     // issued as the scope ended
                _ => 0,
            };
            assert_eq!(left, want, "{trigger}: copies still held");
            let mut back = vec![0f32; 2048];
            gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d).slice(0..2048), &mut back)).unwrap();
            assert!(back.iter().enumerate().all(|(i, &x)| x == i as f32), "{trigger}: the held uploads landed");
            eprintln!("{trigger}: issued the copies held");
        }
        // A timed scope's join comes after the copies held, which it times.
        let ms = gpu
            .timed(&streams, |s| {
                s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
                let dv = s.device(&mut d);
                (0..64).try_for_each(|i| {
                    s.stream(1).htod(&host[i * 1024..(i + 1) * 1024], dv.slice(i * 1024..(i + 1) * 1024))
                })
            })
            .unwrap();
        assert!(ms > 0.0);
    }

    /// Held copies are noted in the book as their group is issued, so another stream's access that may meet
    /// them issues the group first and is ordered after it (one wait, added); one of other bytes leaves
    /// the group held; and two streams' copies into one arena, slice by slice in turn, stay held and need
    /// no wait at all.
    #[test]
    #[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
    fn another_streams_access_that_meets_a_held_group_issues_it_and_waits() {
        let gpu = crate::Gpu::init().unwrap();
        let streams = gpu.streams(2).unwrap();
        let host: Vec<f32> = (0..4096).map(|i| i as f32).collect();
        let mut d = gpu.alloc::<f32>(8192).unwrap();
        let (mut out, mut back) = (vec![0f32; 100], vec![0f32; 4096]);
        gpu.scope(&streams, |s| -> crate::Result<()> {
            s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
            let held = |k: usize| s.state.borrow().groups[k].held.len();
            let added = || s.state.borrow().book.waits.added;
            let (dv, zero, one) = (s.device(&mut d), s.stream(0), s.stream(1));
            zero.htod(&host[..1024], dv.slice(0..1024))?;
            zero.htod(&host[1024..2048], dv.slice(1024..2048))?;
            one.htod(&host[..1024], dv.slice(4096..5120))?;
            assert_eq!((held(0), held(1), added()), (2, 1, 0), "other bytes: both held, nothing to order");
            one.dtoh(dv.slice(1000..1100), &mut out)?;
            // Stream 0's group issued and waited for; the wait issues stream 1's, and the download (of bytes
            // another stream wrote, so fenced) goes out at once.
            assert_eq!((held(0), held(1), added()), (0, 0, 1));
            Ok(())
        })
        .unwrap();
        assert_eq!(out, host[1000..1100], "the download read what the held uploads wrote");
        gpu.scope(&streams, |s| -> crate::Result<()> {
            s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
            let dv = s.device(&mut d);
            for (i, piece) in host.chunks(256).enumerate() {
                s.stream(i % 2).htod(piece, dv.slice(i * 256..(i + 1) * 256))?;
            }
            let st = s.state.borrow();
            assert_eq!((st.groups[0].held.len(), st.groups[1].held.len(), st.book.waits.added), (8, 8, 0));
            drop(st);
            for (i, piece) in back.chunks_mut(256).enumerate() {
                s.stream(i % 2).dtoh(dv.slice(i * 256..(i + 1) * 256), piece)?;
            }
            assert_eq!(s.state.borrow().book.waits.added, 0, "each stream reads back what it wrote");
            Ok(())
        })
        .unwrap();
        assert_eq!(back, host, "two streams' copies, slice by slice");
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
            unsafe { s.stream(0).kernel(&busy, LaunchConfig::linear(1, 32)).write(m).value(16u64).value(1u32).launch() }
        });
        assert!(format!("{:#}", err.unwrap_err()).contains("another GPU's context"));
        let err = gpu.scope(&streams, |s| s.stream(0).prefetch(s.managed(&mut buf), Destination::Device));
        assert!(format!("{:#}", err.unwrap_err()).contains("another GPU's context"));
        buf[0] = 1.0; // still the host's, and freed in its own context after the Gpu is gone
        drop((gpu, buf));
    }
}
