//! Coalescing: the small copies a scope holds and issues together, so that the loop everyone writes
//! first, one copy per buffer, moves many small buffers at the speed of packing them by hand.
//!
//! ```no_run
//! # fn main() -> cuda_scope::Result<()> {
//! # let gpu = cuda_scope::Gpu::init()?;
//! # let streams = gpu.streams(1)?;
//! let tensors: Vec<Vec<f32>> = (0..1000).map(|i| vec![i as f32; 1024]).collect(); // 1000 x 4 KiB
//! let mut back: Vec<Vec<f32>> = vec![vec![0.0; 1024]; 1000];
//! let mut arena = gpu.alloc::<f32>(1000 * 1024)?;
//! gpu.scope(&streams, |s| {
//!     let (arena, st) = (s.device(&mut arena), s.stream(0));
//!     for (i, t) in tensors.iter().enumerate() {
//!         st.htod(t, arena.slice(i * 1024..(i + 1) * 1024))?; // held: no driver call yet
//!     }
//!     for (i, b) in back.iter_mut().enumerate() {
//!         // The first download reads what an upload writes: the uploads go out first, as one launch.
//!         st.dtoh(arena.slice(i * 1024..(i + 1) * 1024), b)?;
//!     }
//!     Ok::<_, cuda_scope::Error>(())
//! })?; // the downloads go out as one launch, and land
//! # Ok(()) }
//! ```
//!
//! # What is held
//!
//! A copy between host and device memory ([`crate::ScopeStream::htod`], [`crate::ScopeStream::dtoh`]) of at most
//! [`HELD_AT_MOST`] bytes, in a scope that no [`crate::Observer`] watches, is held rather than issued:
//! the scope plans it at once (the waits it needs on other streams are queued as it is queued, and
//! counted by [`crate::Scope::waits`]) but makes no driver call yet, and notes what it touches in its book
//! (what orders other streams' work after it) only as its group is issued: a span of a buffer that a
//! group's copies cover whole, as one access. A copy of bytes that another stream touched in the scope
//! is not held: it goes out as it is queued, with the fence after it that the next conflict needs.
//! Held copies are kept in a group per stream, and a group is issued (*flushed*) before anything could
//! observe its copies or be ordered after them:
//!
//! - any other operation on its stream (a larger copy, a fill, a launch, a batch, a replay), or a copy
//!   whose device bytes overlap a held copy's where either writes them;
//! - an operation on another stream that may touch the group's device bytes where either writes them
//!   (bytes within the span from the first to the last of a buffer that the group writes, or reads where
//!   the operation writes): the group is issued, and noted, before that operation is planned, so the
//!   scope orders it after the group;
//! - an event recorded on its stream or a wait queued there, by the program ([`crate::ScopeStream::record_event`],
//!   [`crate::ScopeStream::wait_event`], [`crate::ScopeStream::dtoh_pending`]) or by the scope (the fences and waits of
//!   cross-stream ordering: so a conflict on another stream flushes it);
//! - [`crate::ScopeStream::synchronize`] on its stream; [`crate::Scope::synchronize`], [`crate::Scope::is_idle`],
//!   [`crate::Scope::waits`], [`crate::Scope::graph`], [`crate::Scope::flush`] and [`crate::Scope::set_coalescing`] on any;
//! - the end of the scope (also where its closure returned an error; not where it panicked: the copies
//!   held then are dropped, never issued), and a timed scope's join;
//! - a group that would pass [`GROUP_BYTES`] or [`GROUP_COPIES`] ([`groups`] gives the groups a run of copies
//!   on one stream makes, by the scope's own rule).
//!
//! Every guarantee of the scope holds as before: a group is issued on its own stream before any other
//! call on that stream, so the stream runs the copies where they were queued, and every event the
//! scope or the program records on a stream comes after them. The copies of one group touch no byte
//! that another of them writes, so they may run in any order among themselves.
//!
//! # How a group is issued
//!
//! By one of two ways ([`CopyWay`]), the one the [`CopyModel`] predicts faster for the group's copies:
//!
//! - **each**: one `cuMemcpyAsync` a copy, as if it had not been held;
//! - **kernel**: one launch of the crate's copy kernel (`src/coalesce.cu`), whose threads move every copy
//!   of the group at once across the bus. Host memory of a [`crate::PinnedBuffer`] is read or written in
//!   place (it is always mapped for the GPU); pageable memory (a `Vec`, memory pinned by another library)
//!   goes through the scope's *staging*, pinned memory the scope keeps: an upload's bytes are packed
//!   into it by the CPU as the group is flushed, and a download lands there and is unpacked into its
//!   destination by the CPU as the scope ends, once every stream is synchronized. A group of a MiB or
//!   more of pageable memory goes in parts, a launch a MiB ([`PARTS_FROM`]): each part is packed just
//!   before its launch, so that the CPU packs the next while the GPU moves it, and the downloads of each
//!   are unpacked as the scope ends once that part has landed (an event after its launch says when),
//!   while the GPU moves the next. The table of copies the kernel reads lies in the staging too.
//!
//! A group the staging cannot hold ([`STAGING_AT_MOST`] a scope) goes each way.
//!
//! # What this changes, and what it costs
//!
//! - **When a copy starts.** A held copy starts on the GPU when its group is flushed, not as it is
//!   queued: code that queues a few copies and then computes on the host before queueing anything else
//!   should call [`crate::Scope::flush`] first, or turn coalescing off.
//! - **Errors.** A held copy cannot fail as it is queued: a driver error in issuing it comes back from
//!   the call that flushed its group, naming the copy (each way) or the group's copies (kernel: or its
//!   part's), and the copies of its group after it are dropped, never issued (those issued before it
//!   land, and are unpacked as the scope ends). [`crate::Scope::waits`], which flushes but
//!   returns no error, keeps it: the scope's next call that queues, issues or waits for work returns it,
//!   or else the scope's end.
//! - **Timing.** [`crate::Scope::elapsed_ms`] and [`crate::Gpu::timed`] cover the GPU's part of a group (the
//!   kernel, or the copies). The CPU's part of the kernel way, packing as the group is flushed and
//!   unpacking pageable downloads as the scope ends, is host time: in a timed scope's wall time, not in
//!   its GPU time.
//! - **What a profiler sees.** One kernel, `coalesced_copy`, for a group issued the kernel way (one a
//!   part, and an event after each part with pageable downloads, for a group issued in parts); each copy
//!   for a group issued each way. An observed scope holds nothing, so an [`crate::Observer`] sees every
//!   copy as the program queued it.
//! - **The first scope that flushes a group of two or more copies** loads the kernel (the driver
//!   compiles it once; its cache keeps it for later processes) and fits the model: see [`CopyModel`].
//!   [`crate::Gpu::copy_model`] does both ahead of time.
//! - **Memory.** The staging grows as a scope needs it, to at most [`STAGING_AT_MOST`] bytes of pinned
//!   memory, and is kept for the next scope: [`crate::Gpu::check_footprint`] counts it as held.
//!
//! [`Coalescing::Off`] (per scope, [`crate::Scope::set_coalescing`]) issues every copy as it is queued: for
//! code that measures single copies. [`Coalescing::Forced`] holds copies and issues every group one way,
//! whatever the model says: for tests, and to measure a way.

use std::{collections::BTreeMap, ops::Range, time::Instant};

use serde::Serialize;

use crate::{
    context::Context,
    error::check,
    ffi,
    host::{HostAlloc, PinnedBuffer},
    launch::LaunchConfig,
    memory::DeviceBuffer,
    module::{Kernel, Module},
    stream::Stream,
};

/// The largest copy a scope holds to coalesce; a larger one is issued as it is queued (after the
/// copies held on its stream). At 256 KiB one copy's fixed cost (a few µs) is already a small part of
/// its time.
pub const HELD_AT_MOST: usize = 256 << 10;
/// The most bytes one group holds; a copy that would pass it flushes the group first.
pub const GROUP_BYTES: usize = 4 << 20;
/// The most copies one group holds.
pub const GROUP_COPIES: usize = 1 << 14;
/// The most pinned staging memory a scope uses for the kernel way's tables and pageable memory.
pub const STAGING_AT_MOST: usize = 32 << 20;
/// What the kernel way moves as one entry of its table: a copy larger than this is cut, so that many
/// blocks share it.
const ENTRY_BYTES: usize = 64 << 10;
/// The staging is allocated in pieces of this size (a group's table and pageable bytes fit in one).
const STAGING_PIECE: usize = 8 << 20;

/// Whether a scope that holds copies holds one of `bytes` (else it issues it as it is queued): the rule
/// of [`groups`] and of the scope's own holding.
#[inline(always)]
pub(crate) const fn held(bytes: usize) -> bool {
    bytes > 0 && bytes <= HELD_AT_MOST
}

/// Whether a group of `copies` copies and `bytes` bytes takes one more of `more` bytes within
/// [`GROUP_COPIES`] and [`GROUP_BYTES`] (else it is flushed first): the rule of [`groups`] and of the
/// scope's own groups ([`Group::admits`]).
#[inline(always)]
const fn within_limits(copies: usize, bytes: usize, more: usize) -> bool {
    copies < GROUP_COPIES && bytes + more <= GROUP_BYTES
}

/// The groups a scope makes of copies queued one after another on one stream, of `sizes` bytes in that
/// order: each group as the range of its copies' places in `sizes`. A copy the scope does not hold (of
/// no bytes, or of more than [`HELD_AT_MOST`]) is a range of its own, issued as it is queued, after the
/// group before it; a group ends where the next copy would pass [`GROUP_BYTES`] or [`GROUP_COPIES`].
///
/// These are the scope's own limits, by the same code. They are all its groups where nothing else
/// flushes them between the copies (see the [module's documentation](self)): no other operation or event
/// on the stream, no conflict on another, and no copy that touches device bytes another of its group
/// writes. A range of one copy goes out by one `cuMemcpyAsync`; a longer one the way the model chooses
/// ([`CopyModel::choose`]).
///
/// ```
/// use cuda_scope::coalesce::groups;
/// let sizes = [vec![4096; 1500], vec![1 << 20], vec![256; 3]].concat();
/// let g: Vec<_> = groups(sizes.iter().copied()).collect();
/// // 1024 copies of 4 KiB fill 4 MiB; the copy of 1 MiB is not held; then one group of three.
/// assert_eq!(g, [0..1024, 1024..1500, 1500..1501, 1501..1504]);
/// ```
pub fn groups(sizes: impl IntoIterator<Item = usize>) -> impl Iterator<Item = Range<usize>> {
    let mut sizes = sizes.into_iter().enumerate().peekable();
    std::iter::from_fn(move || {
        let (first, size) = sizes.next()?;
        let (mut end, mut copies, mut bytes) = (first + 1, 1, size);
        while held(size) {
            match sizes.peek() {
                Some(&(i, more)) if held(more) && within_limits(copies, bytes, more) => {
                    sizes.next();
                    (end, copies, bytes) = (i + 1, copies + 1, bytes + more);
                }
                _ => break,
            }
        }
        Some(first..end)
    })
}

/// Whether a scope holds small copies to coalesce them ([`crate::Scope::set_coalescing`]); see the [module's
/// documentation](self).
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let (streams, host, mut d) = (gpu.streams(1)?, vec![1u8; 4096], gpu.alloc::<u8>(4096)?);
/// use cuda_scope::Coalescing;
/// gpu.scope(&streams, |s| {
///     s.set_coalescing(Coalescing::Off)?; // every copy issued as queued: one cuMemcpyAsync each
///     s.stream(0).htod(&host, s.device(&mut d))
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Coalescing {
    /// Every copy issued as it is queued, one driver call each.
    Off,
    /// Small copies held, and each group issued the way the [`CopyModel`] predicts faster (the default).
    #[default]
    On,
    /// Small copies held, and every group issued this way.
    Forced(CopyWay),
}

/// How a group of held copies is issued; see the [module's documentation](self).
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// use cuda_scope::{Coalescing, CopyWay};
/// let (streams, host, mut d) = (gpu.streams(1)?, vec![1u8; 1 << 20], gpu.alloc::<u8>(1 << 20)?);
/// gpu.scope(&streams, |s| {
///     s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?; // one launch for the 256 copies
///     let d = s.device(&mut d);
///     (0..256).try_for_each(|i| s.stream(0).htod(&host[i * 4096..][..4096], d.slice(i * 4096..(i + 1) * 4096)))
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CopyWay {
    /// One `cuMemcpyAsync` a copy.
    Each,
    /// One launch of the crate's copy kernel for the whole group.
    Kernel,
}

/// What a group of copies moves one way, for [`CopyModel::predict`]: how many copies and bytes, and how
/// many of them are to or from pageable memory (anything but a [`crate::PinnedBuffer`]).
///
/// ```
/// let up = cuda_scope::CopyCounts::default().add(4096, false).add(256, true);
/// assert_eq!((up.copies, up.bytes, up.pageable_copies, up.pageable_bytes), (2, 4352, 1, 256));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CopyCounts {
    /// Copies.
    pub copies: usize,
    /// Bytes, over every copy.
    pub bytes: usize,
    /// Copies to or from pageable memory.
    pub pageable_copies: usize,
    /// Their bytes.
    pub pageable_bytes: usize,
}

impl CopyCounts {
    /// And one copy of `bytes`, to or from pageable memory or not.
    ///
    /// ```
    /// let c = (0..10).fold(cuda_scope::CopyCounts::default(), |c, _| c.add(4096, false));
    /// assert_eq!((c.copies, c.bytes), (10, 40960));
    /// ```
    pub fn add(self, bytes: usize, pageable: bool) -> CopyCounts {
        CopyCounts {
            copies: self.copies + 1,
            bytes: self.bytes + bytes,
            pageable_copies: self.pageable_copies + pageable as usize,
            pageable_bytes: self.pageable_bytes + if pageable { bytes } else { 0 },
        }
    }
}

/// What a group of held copies costs each way, fitted on this GPU and host ([`crate::Gpu::copy_model`]):
/// the model a scope chooses the way by. Every figure is measured by the fit, on a stream of its own,
/// as the wall time a caller waits (the host's calls and the GPU's work, to the stream's end):
/// per-copy costs as the slope from 16 copies to 32 of 4 KiB, rates as the slope from 4 KiB to 1 MiB,
/// each the median of five runs after one to warm up. It takes a few milliseconds, once per [`crate::Gpu`],
/// in the first scope that flushes a group of two or more copies (after synchronizing that scope's
/// streams, so that their work does not slow the fit), or in [`crate::Gpu::copy_model`].
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// use cuda_scope::{CopyCounts, CopyWay};
/// let gpu = cuda_scope::Gpu::init()?;
/// let model = gpu.copy_model()?;
/// let up = (0..1000).fold(CopyCounts::default(), |c, _| c.add(4096, false));
/// for way in [CopyWay::Each, CopyWay::Kernel] {
///     println!("{way:?}: {:.0} µs", model.predict(way, up, CopyCounts::default()));
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CopyModel {
    /// One more upload from pinned memory, each way: µs.
    pub each_up_us: f64,
    /// One more download into pinned memory, each way: µs.
    pub each_down_us: f64,
    /// One more upload from pageable memory, each way: µs.
    pub each_up_pageable_us: f64,
    /// One more download into pageable memory, each way: µs.
    pub each_down_pageable_us: f64,
    /// The copy engine's rate for the bytes past the first 4 KiB of a pinned upload: GB/s.
    pub engine_gbps: f64,
    /// One launch of the kernel way, a copy of 4 KiB: µs.
    pub kernel_us: f64,
    /// The kernel way's rate up, from pinned memory in place: GB/s.
    pub kernel_up_gbps: f64,
    /// The kernel way's rate down, into pinned memory in place: GB/s.
    pub kernel_down_gbps: f64,
    /// The CPU's rate packing pageable memory into the staging (and unpacking it): GB/s.
    pub pack_gbps: f64,
    /// What the fit took, wall time: ms.
    pub fit_ms: f64,
}

impl CopyModel {
    /// The predicted wall time of a group of copies, `up` and `down`, issued `way`: µs.
    ///
    /// ```
    /// # use cuda_scope::{CopyCounts, CopyModel, CopyWay};
    /// # let model = CopyModel { each_up_us: 4.0, each_down_us: 4.0, each_up_pageable_us: 7.0,
    /// #     each_down_pageable_us: 7.0, engine_gbps: 50.0, kernel_us: 8.0, kernel_up_gbps: 40.0,
    /// #     kernel_down_gbps: 45.0, pack_gbps: 10.0, fit_ms: 3.0 };
    /// let one = CopyCounts::default().add(4096, false);
    /// assert!(model.predict(CopyWay::Each, one, CopyCounts::default()) < model.predict(CopyWay::Kernel, one, CopyCounts::default()));
    /// ```
    pub fn predict(&self, way: CopyWay, up: CopyCounts, down: CopyCounts) -> f64 {
        let us = |bytes: usize, gbps: f64| bytes as f64 / (gbps * 1e3);
        match way {
            CopyWay::Each => {
                (up.copies - up.pageable_copies) as f64 * self.each_up_us
                    + up.pageable_copies as f64 * self.each_up_pageable_us
                    + (down.copies - down.pageable_copies) as f64 * self.each_down_us
                    + down.pageable_copies as f64 * self.each_down_pageable_us
                    + us(up.bytes + down.bytes, self.engine_gbps)
            }
            CopyWay::Kernel => {
                // In the parts the scope makes ([`PARTS_FROM`]): the CPU packs (or unpacks) a part while the
                // GPU moves the one before (or after), each part a launch; one part, the two in turn.
                let staged = up.pageable_bytes + down.pageable_bytes;
                let parts = part_count(staged) as f64;
                let gpu = us(up.bytes, self.kernel_up_gbps) + us(down.bytes, self.kernel_down_gbps);
                let (cpu, gpu) = (us(staged, self.pack_gbps) / parts, gpu / parts + self.kernel_us);
                cpu + gpu + (parts - 1.0) * cpu.max(gpu)
            }
        }
    }

    /// The way predicted faster for a group of copies `up` and `down`.
    ///
    /// ```
    /// # use cuda_scope::{CopyCounts, CopyModel, CopyWay};
    /// # let model = CopyModel { each_up_us: 4.0, each_down_us: 4.0, each_up_pageable_us: 7.0,
    /// #     each_down_pageable_us: 7.0, engine_gbps: 50.0, kernel_us: 8.0, kernel_up_gbps: 40.0,
    /// #     kernel_down_gbps: 45.0, pack_gbps: 10.0, fit_ms: 3.0 };
    /// let many = (0..100).fold(CopyCounts::default(), |c, _| c.add(4096, false));
    /// assert_eq!(model.choose(many, CopyCounts::default()), CopyWay::Kernel);
    /// ```
    pub fn choose(&self, up: CopyCounts, down: CopyCounts) -> CopyWay {
        match self.predict(CopyWay::Kernel, up, down) < self.predict(CopyWay::Each, up, down) {
            true => CopyWay::Kernel,
            false => CopyWay::Each,
        }
    }
}

/// What a [`crate::Gpu`] keeps for coalescing: the kernel, loaded at first need, and the model, fitted
/// at first need. Either holds why not, where it could not be had: then every group goes each way.
#[derive(Default)]
pub(crate) struct Coalescer {
    kernel: std::cell::OnceCell<Result<Kernel, String>>,
    model: std::cell::OnceCell<Result<CopyModel, String>>,
}

/// The crate's copy kernel (`src/coalesce.cu`), as nvcc 13.0 made it.
const PTX: &str = include_str!("ptx/coalesce.ptx");

impl Coalescer {
    /// The copy kernel, loaded once.
    pub(crate) fn kernel(&self, ctx: &std::sync::Arc<Context>) -> Result<&Kernel, &str> {
        let k = self.kernel.get_or_init(|| {
            let module = Module::load(ctx, PTX, "cuda-scope's copy kernel", None).map_err(|e| e.to_string())?;
            module.kernel("coalesced_copy").map_err(|e| e.to_string())
        });
        k.as_ref().map_err(|e| e.as_str())
    }

    /// The model, fitted once; `before` runs first, once, where it is fitted now (to synchronize the
    /// streams of the scope that asks).
    pub(crate) fn model(
        &self,
        ctx: &std::sync::Arc<Context>,
        before: impl FnOnce() -> crate::Result<()>,
    ) -> crate::Result<Result<CopyModel, String>> {
        if let Some(m) = self.model.get() {
            return Ok(m.clone());
        }
        before()?;
        let fitted = match self.kernel(ctx) {
            Ok(k) => fit(ctx, k).map_err(|e| e.to_string()),
            Err(why) => Err(why.to_string()),
        };
        Ok(self.model.get_or_init(|| fitted).clone())
    }
}

/// One copy held: which way, its host and device addresses, its bytes, and the operation it is in the
/// scope's book (for errors).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub up: bool,
    /// The host address: the source of an upload, the destination of a download.
    pub host: usize,
    /// The host range's device address, where it lies in a [`PinnedBuffer`] of the scope's context.
    pub mapped: Option<u64>,
    pub device: u64,
    pub bytes: usize,
    /// The buffer and bytes of the device side, as the scope's book knows them.
    pub buffer: usize,
    pub range: (usize, usize),
    pub op: usize,
}

/// The first and last byte a group writes of a buffer, and those it reads, where it does.
type Spans = [Option<Span>; 2];

/// From the first byte to the last of a buffer that a group's copies of one side touch, and whether
/// they touch every byte between: whether each copy met or touched the span of those before it, so
/// that their union is the span itself (the loop over slices of an arena, in either order).
#[derive(Clone, Copy, Debug)]
struct Span {
    lo: usize,
    hi: usize,
    whole: bool,
    /// The operation (in the scope's book) of the last copy in it.
    last: usize,
}

impl Span {
    /// The span with `start..end` of operation `op` added.
    #[inline(always)]
    fn with(span: Option<Span>, (start, end): (usize, usize), op: usize) -> Span {
        match span {
            None => Span { lo: start, hi: end, whole: true, last: op },
            Some(s) => Span {
                lo: s.lo.min(start),
                hi: s.hi.max(end),
                whole: s.whole && start <= s.hi && s.lo <= end,
                last: op,
            },
        }
    }

    /// Whether `start..end` meets the span's bytes: `Some(true)` where it surely meets a copy's (the
    /// span is whole), `Some(false)` where it may (only the copies' own ranges can say), `None` where it
    /// meets none.
    #[inline(always)]
    fn meets(span: Option<Span>, (start, end): (usize, usize)) -> Option<bool> {
        span.filter(|s| start < s.hi && s.lo < end).map(|s| s.whole)
    }
}

/// The copies held on one stream.
#[derive(Default)]
pub(crate) struct Group {
    pub held: Vec<Held>,
    bytes: usize,
    /// For each buffer the group touches: the span from the first byte to the last that it writes
    /// (uploads) and that it reads (downloads). A copy outside the spans it must not meet joins at
    /// once: the loop that copies buffer after buffer, in order, never looks further.
    spans: Vec<(usize, Spans)>,
    /// Where each buffer's spans are in `spans`, plus one, by the buffer's index in the scope (0: none).
    at: Vec<u32>,
    /// The exact bytes the group writes and reads, by buffer and first byte (each a union of ranges,
    /// kept disjoint and apart): made from the copies held, once a copy falls inside a span.
    exact: Option<[BTreeMap<(usize, usize), usize>; 2]>,
}

/// Whether a union of ranges (disjoint, by buffer and first byte) meets `bytes` of `buffer`.
fn meets(set: &BTreeMap<(usize, usize), usize>, buffer: usize, bytes: &Range<usize>) -> bool {
    set.range((buffer, 0)..(buffer, bytes.end)).next_back().is_some_and(|(_, &end)| end > bytes.start)
}

/// Adds `bytes` of `buffer` to a union of ranges, merging those it meets or touches.
fn unite(set: &mut BTreeMap<(usize, usize), usize>, buffer: usize, bytes: Range<usize>) {
    let (mut start, mut end) = (bytes.start, bytes.end);
    while let Some((&(b, s), &e)) = set.range((buffer, 0)..=(buffer, end)).next_back() {
        if b != buffer || e < start {
            break;
        }
        set.remove(&(b, s));
        (start, end) = (start.min(s), end.max(e));
    }
    set.insert((buffer, start), end);
}

impl Group {
    /// Whether `h` may join the group: its device bytes meet none the group writes, nor (for an upload,
    /// which writes them) any it reads, and the group stays within its limits.
    #[inline]
    pub fn admits(&mut self, h: &Held) -> bool {
        if !within_limits(self.held.len(), self.bytes, h.bytes) {
            return false;
        }
        let (start, end) = h.range;
        let Some((_, spans)) = self.spans_of(h.buffer) else { return true };
        // Writes always, reads where `h` writes: spans[0] holds the writes, spans[1] the reads.
        let (writes, reads) = (Span::meets(spans[0], h.range), Span::meets(spans[1], h.range).filter(|_| h.up));
        match (writes, reads) {
            (None, None) => return true,
            // Within a span its copies cover whole: it meets one of them (the first download of what
            // went up), and no search is needed.
            (Some(true), _) | (_, Some(true)) => return false,
            _ => {}
        }
        let exact = self.exact.get_or_insert_with(|| {
            let mut sets = [BTreeMap::new(), BTreeMap::new()];
            for c in &self.held {
                unite(&mut sets[!c.up as usize], c.buffer, c.range.0..c.range.1);
            }
            sets
        });
        let bytes = start..end;
        !(meets(&exact[0], h.buffer, &bytes) || (h.up && meets(&exact[1], h.buffer, &bytes)))
    }

    /// Adds `h` where it may join ([`Group::admits`]), with one look at its buffer's spans in the common
    /// case (a copy beside those before it); else gives it back, and the group is as it was.
    #[inline]
    pub fn try_push(&mut self, h: Held) -> Result<(), Held> {
        let i = self.at.get(h.buffer).copied().unwrap_or(0) as usize;
        if i > 0 && self.exact.is_none() && within_limits(self.held.len(), self.bytes, h.bytes) {
            let spans = &mut self.spans[i - 1].1;
            if Span::meets(spans[0], h.range).is_none() && !(h.up && Span::meets(spans[1], h.range).is_some()) {
                let side = !h.up as usize;
                spans[side] = Some(Span::with(spans[side], h.range, h.op));
                self.bytes += h.bytes;
                self.held.push(h);
                return Ok(());
            }
        }
        self.try_push_searching(h)
    }

    /// [`Group::try_push`] the long way: a buffer new to the group, or a copy within a span.
    #[inline(never)]
    fn try_push_searching(&mut self, h: Held) -> Result<(), Held> {
        if !self.admits(&h) {
            return Err(h);
        }
        self.push(h);
        Ok(())
    }

    #[inline]
    pub fn push(&mut self, h: Held) {
        let side = !h.up as usize;
        let (start, end) = h.range;
        match self.at.get(h.buffer).copied().unwrap_or(0) {
            0 => {
                let mut spans = [None, None];
                spans[side] = Some(Span::with(None, h.range, h.op));
                self.spans.push((h.buffer, spans));
                if self.at.len() <= h.buffer {
                    self.at.resize(h.buffer + 1, 0);
                }
                self.at[h.buffer] = self.spans.len() as u32;
            }
            i => {
                let spans = &mut self.spans[i as usize - 1].1;
                spans[side] = Some(Span::with(spans[side], h.range, h.op));
            }
        }
        if let Some(exact) = &mut self.exact {
            unite(&mut exact[side], h.buffer, start..end);
        }
        self.bytes += h.bytes;
        self.held.push(h);
    }

    /// Whether an access of `bytes` of `buffer` (writing them, or reading) may meet a copy of the group's
    /// where either writes: whether it falls within a span of the group's writes of the buffer, or of its
    /// reads where it writes. An access of another stream's that may is ordered after the group, which is
    /// flushed (and noted in the book) first.
    #[inline]
    pub fn may_meet(&self, buffer: usize, bytes: &Range<usize>, write: bool) -> bool {
        let Some((_, spans)) = self.spans_of(buffer) else { return false };
        let range = (bytes.start, bytes.end);
        Span::meets(spans[0], range).is_some() || write && Span::meets(spans[1], range).is_some()
    }

    /// What the book notes of the group as it is flushed, as (buffer, whether it writes, bytes, operation):
    /// a span its copies cover whole as one access, of the last of them (the group runs as one, so what
    /// waits for one of its copies waits for all); each copy of any other span on its own.
    pub fn accesses(&self) -> impl Iterator<Item = (usize, bool, Range<usize>, usize)> + '_ {
        let whole = |s: &Option<Span>| s.filter(|s| s.whole);
        let spans = self.spans.iter().flat_map(move |&(b, spans)| {
            [0, 1].into_iter().filter_map(move |side| whole(&spans[side]).map(|s| (b, side == 0, s.lo..s.hi, s.last)))
        });
        let each = self
            .held
            .iter()
            .filter(move |h| self.spans_of(h.buffer).is_some_and(|(_, spans)| whole(&spans[!h.up as usize]).is_none()));
        spans.chain(each.map(|h| (h.buffer, h.up, h.range.0..h.range.1, h.op)))
    }

    /// The spans of `buffer`, where the group touches it.
    #[inline]
    fn spans_of(&self, buffer: usize) -> Option<&(usize, Spans)> {
        match self.at.get(buffer).copied().unwrap_or(0) {
            0 => None,
            i => Some(&self.spans[i as usize - 1]),
        }
    }

    /// Empties the group, keeping what it allocated: its copies, for the caller to issue.
    pub fn take(&mut self, into: &mut Vec<Held>) {
        into.clear();
        std::mem::swap(into, &mut self.held); // each keeps its allocation: no copy of the copies
        for (b, _) in self.spans.drain(..) {
            self.at[b] = 0;
        }
        self.exact = None;
        self.bytes = 0;
    }

    /// What the group moves up and down, for the model.
    pub fn counts(held: &[Held]) -> (CopyCounts, CopyCounts) {
        held.iter().fold((CopyCounts::default(), CopyCounts::default()), |(up, down), h| match h.up {
            true => (up.add(h.bytes, h.mapped.is_none()), down),
            false => (up, down.add(h.bytes, h.mapped.is_none())),
        })
    }
}

/// A scope's staging: pinned, mapped pieces, used from the first onwards and reset as the scope ends.
#[derive(Default)]
pub(crate) struct Staging {
    pieces: Vec<(PinnedBuffer<u8>, u64)>,
    /// The piece in use and the bytes of it used.
    at: (usize, usize),
}

impl Staging {
    /// `bytes` of staging no work of this scope has used: host and device addresses of their first
    /// byte (16-byte aligned), or `None` past [`STAGING_AT_MOST`].
    pub fn take(&mut self, ctx: &std::sync::Arc<Context>, bytes: usize) -> crate::Result<Option<(usize, u64)>> {
        let bytes = bytes.div_ceil(16) * 16;
        if bytes > STAGING_PIECE {
            return Ok(None);
        }
        loop {
            let (piece, used) = self.at;
            if let Some((buf, device)) = self.pieces.get(piece) {
                if used + bytes <= buf.len() {
                    self.at.1 += bytes;
                    return Ok(Some((buf.as_ptr() as usize + used, device + used as u64)));
                }
                self.at = (piece + 1, 0);
                continue;
            }
            if (self.pieces.len() + 1) * STAGING_PIECE > STAGING_AT_MOST {
                return Ok(None);
            }
            let buf = PinnedBuffer::<u8>::alloc(ctx, STAGING_PIECE, HostAlloc::MAPPED)?;
            let device = buf.device_ptr()?;
            self.pieces.push((buf, device));
        }
    }

    /// Every byte free again: once every stream of the scope is synchronized.
    pub fn reset(&mut self) {
        self.at = (0, 0);
    }
}

/// A group's table for the kernel way, built in `table` (host memory): its entries (destination, source,
/// bytes), device addresses, copies cut into entries of at most [`ENTRY_BYTES`]; `staged(h)` gives the
/// device address in the staging where a copy without a mapped host side goes.
pub(crate) fn table(held: &[Held], mut staged: impl FnMut(&Held) -> u64, table: &mut Vec<u64>) {
    table.clear();
    for h in held {
        let host = h.mapped.unwrap_or_else(|| staged(h));
        let (to, from) = if h.up { (h.device, host) } else { (host, h.device) };
        let mut at = 0;
        while at < h.bytes {
            let n = (h.bytes - at).min(ENTRY_BYTES);
            table.extend([to + at as u64, from + at as u64, n as u64]);
            at += n;
        }
    }
}

/// A group of pageable bytes (packed into the staging or unpacked from it) of at least this many goes by
/// the kernel way in parts: each part's launch follows its packing, so that the CPU packs the next while
/// the GPU moves it, and (at the scope's end) each part's downloads are unpacked once it has landed, while
/// the GPU moves the next. One thread packs about 1 MiB in the time the kernel moves it with its fixed
/// cost (29 GB/s, and 11 µs + 52 GB/s, on the H200).
pub const PARTS_FROM: usize = 1 << 20;
/// The most parts a group is cut into.
const MOST_PARTS: usize = 8;

/// One part of a group issued the kernel way in parts ([`PARTS_FROM`]): its copies, its table's entries,
/// and its jobs among the group's packing and unpacking ([`table`]'s order: the copies', each where
/// it is not mapped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub copies: Range<usize>,
    pub entries: Range<usize>,
    pub pack: Range<usize>,
    pub unpack: Range<usize>,
}

/// How many parts a group with `staged` pageable bytes goes in: one under [`PARTS_FROM`], else one a MiB
/// (at most [`MOST_PARTS`]).
fn part_count(staged: usize) -> usize {
    match staged < PARTS_FROM {
        true => 1,
        false => staged.div_ceil(PARTS_FROM).min(MOST_PARTS),
    }
}

/// The entries of [`table`] a copy of `bytes` takes.
#[inline]
pub(crate) fn entries_of(bytes: usize) -> usize {
    bytes.div_ceil(ENTRY_BYTES)
}

/// The parts of a group issued the kernel way, in `into`: one where its pageable bytes are fewer than
/// [`PARTS_FROM`], else as many as it has MiB of them (at most [`MOST_PARTS`]), cut between copies where
/// each part's pageable bytes reach its share.
pub(crate) fn parts(held: &[Held], into: &mut Vec<Part>) {
    into.clear();
    let staged: usize = held.iter().filter(|h| h.mapped.is_none()).map(|h| h.bytes).sum();
    let count = part_count(staged);
    let mut part = Part { copies: 0..0, entries: 0..0, pack: 0..0, unpack: 0..0 };
    let mut so_far = 0;
    for (i, h) in held.iter().enumerate() {
        part.copies.end = i + 1;
        part.entries.end += entries_of(h.bytes);
        if h.mapped.is_none() {
            so_far += h.bytes;
            match h.up {
                true => part.pack.end += 1,
                false => part.unpack.end += 1,
            }
        }
        // Cut where this part's share is reached, leaving the last part whatever remains.
        if into.len() + 1 < count && so_far * count >= staged * (into.len() + 1) && i + 1 < held.len() {
            let next = Part {
                copies: i + 1..i + 1,
                entries: part.entries.end..part.entries.end,
                pack: part.pack.end..part.pack.end,
                unpack: part.unpack.end..part.unpack.end,
            };
            into.push(std::mem::replace(&mut part, next));
        }
    }
    into.push(part);
}

/// Copies each `(from, to, bytes)` on the host, on the calling thread: pageable memory into the staging,
/// or out of it. Not on rayon's threads as well: on the H200's host, with them from 256 KiB, the loop
/// from pageable memory took 275 µs more than from pinned at 1000 x 4 KiB, what one thread copies of
/// its 3.9 MiB each way at the model's 29 GB/s, and 115 µs more at 100 x 4 KiB, where one thread copies
/// its 400 KiB each way in 14: waking the pool's threads cost more than they saved.
///
/// # Safety
/// Each `from` holds `bytes` readable bytes and each `to` `bytes` writable ones that nothing else
/// touches meanwhile, and no two ranges of `to` overlap one another or any `from`.
pub(crate) unsafe fn copy_all(jobs: &[(usize, usize, usize)]) {
    for &(from, to, bytes) in jobs {
        // SAFETY: as the caller promises.
        unsafe { std::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, bytes) }
    }
}

/// Queues the copy kernel over `entries` entries of the table at device address `table` on `stream`.
///
/// # Safety
/// Every entry's destination and source are device addresses of live ranges of its bytes that nothing
/// else reads or writes while the kernel may run (the scope's ordering of its stream), no entry writes
/// bytes another reads or writes, and the table itself stays untouched until the kernel has run.
pub(crate) unsafe fn launch(kernel: &Kernel, table: u64, entries: usize, stream: ffi::CUstream) -> ffi::CuResult {
    let mut params = [0u8; 16];
    params[..8].copy_from_slice(&table.to_ne_bytes());
    params[8..12].copy_from_slice(&(entries as u32).to_ne_bytes());
    let config = LaunchConfig { grid: (entries.clamp(1, 1 << 16) as u32, 1, 1), block: (256, 1, 1), shared_bytes: 0 };
    // SAFETY: the kernel takes (const u64* table, u32 count), laid out as above; the caller promises
    // every range it touches.
    unsafe { kernel.enqueue(&config, &mut params, stream) }
}

/// The median of five runs of `run` (each its µs), after one to warm up.
fn median_after_warm_up(mut run: impl FnMut() -> crate::Result<f64>) -> crate::Result<f64> {
    run()?;
    let mut runs = (0..5).map(|_| run()).collect::<crate::Result<Vec<f64>>>()?;
    runs.sort_by(f64::total_cmp);
    Ok(runs[2])
}

/// Fits the model on a stream of its own: see [`CopyModel`].
fn fit(ctx: &std::sync::Arc<Context>, kernel: &Kernel) -> crate::Result<CopyModel> {
    const SMALL: usize = 4 << 10;
    const BIG: usize = 1 << 20;
    const ENTRIES: usize = BIG / SMALL;
    let started = Instant::now();
    let stream = Stream::new(ctx, false)?;
    let device = DeviceBuffer::<u8>::zeroed(ctx, "the GPU", BIG)?;
    let pinned = PinnedBuffer::<u8>::alloc(ctx, BIG + 2 * ENTRIES * 24, HostAlloc::MAPPED)?;
    let mapped = pinned.device_ptr()?;
    let mut pageable = vec![1u8; BIG];
    let (d, s) = (device.ptr(), stream.raw());
    let (host, table_at) = (pinned.as_ptr() as usize, BIG);
    // The median of five timed runs of `f` to the stream's end, after one to warm up: µs.
    let time = |f: &mut dyn FnMut() -> ffi::CuResult| {
        median_after_warm_up(|| {
            let t = Instant::now();
            check(f(), || "fitting the copy model".into())?;
            // SAFETY: the fit's own live stream.
            check(unsafe { ffi::cuStreamSynchronize(s) }, || "fitting the copy model".into())?;
            Ok(t.elapsed().as_secs_f64() * 1e6)
        })
    };
    let copies = |n: usize, up: bool, from: usize| {
        move || -> ffi::CuResult {
            for i in 0..n {
                let (h, dev) = (from + (i % 16) * SMALL, d + ((i % 16) * SMALL) as u64);
                // SAFETY: `h` lies in the pinned or pageable buffer of this fit, `dev` in its device
                // buffer, each 16 x 4 KiB or more; the fit synchronizes the stream before either is dropped
                // or touched by the host.
                let code = unsafe {
                    match up {
                        true => ffi::cuMemcpyHtoDAsync_v2(dev, h as *const _, SMALL, s),
                        false => ffi::cuMemcpyDtoHAsync_v2(h as *mut _, dev, SMALL, s),
                    }
                };
                if code != ffi::SUCCESS {
                    return code;
                }
            }
            ffi::SUCCESS
        }
    };
    let per_copy = |from: usize, up: bool| -> crate::Result<f64> {
        Ok(((time(&mut copies(32, up, from))? - time(&mut copies(16, up, from))?) / 16.0).max(0.05))
    };
    let pageable_at = pageable.as_mut_ptr() as usize;
    let each_up_us = per_copy(host, true)?;
    let each_down_us = per_copy(host, false)?;
    let each_up_pageable_us = per_copy(pageable_at, true)?;
    let each_down_pageable_us = per_copy(pageable_at, false)?;
    let one = |bytes: usize| {
        move || -> ffi::CuResult {
            // SAFETY: the fit's pinned and device buffers, each of BIG bytes or more; synchronized after.
            unsafe { ffi::cuMemcpyHtoDAsync_v2(d, host as *const _, bytes, s) }
        }
    };
    let rate = |small_us: f64, big_us: f64| (BIG - SMALL) as f64 / ((big_us - small_us).max(0.05) * 1e3);
    let engine_gbps = rate(time(&mut one(SMALL))?, time(&mut one(BIG))?);
    // The kernel over 1 entry of 4 KiB, and over 256 of them, each way: two tables, written once.
    let held = |up: bool, i: usize| Held {
        up,
        host: host + i * SMALL,
        mapped: Some(mapped + (i * SMALL) as u64),
        device: d + (i * SMALL) as u64,
        bytes: SMALL,
        buffer: 0,
        range: (i * SMALL, (i + 1) * SMALL),
        op: 0,
    };
    let mut entries = Vec::new();
    for (k, up) in [true, false].into_iter().enumerate() {
        let all: Vec<Held> = (0..ENTRIES).map(|i| held(up, i)).collect();
        table(&all, |_| unreachable!("the fit's copies are all mapped"), &mut entries);
        let at = table_at + k * ENTRIES * 24;
        // SAFETY: the fit's pinned buffer holds 2 tables of ENTRIES entries past BIG; nothing reads it yet.
        unsafe { std::ptr::copy_nonoverlapping(entries.as_ptr(), (host + at) as *mut u64, entries.len()) };
    }
    let launched = |k: usize, n: usize| {
        move || -> ffi::CuResult {
            // SAFETY: the table at k holds ENTRIES entries of the fit's own mapped and device buffers,
            // none touching another's bytes; synchronized after.
            unsafe { launch(kernel, mapped + (table_at + k * ENTRIES * 24) as u64, n, s) }
        }
    };
    let kernel_one = time(&mut launched(0, 1))?;
    let kernel_up_gbps = rate(kernel_one, time(&mut launched(0, ENTRIES))?);
    let kernel_down_gbps = rate(time(&mut launched(1, 1))?, time(&mut launched(1, ENTRIES))?);
    let idle = time(&mut || ffi::SUCCESS)?;
    let kernel_us = (kernel_one - idle).max(0.05);
    let packing = median_after_warm_up(|| {
        let t = Instant::now();
        // SAFETY: the fit's pageable buffer and pinned buffer, BIG bytes each, apart; the GPU touches
        // neither now (the stream is synchronized).
        unsafe { std::ptr::copy_nonoverlapping(pageable.as_ptr(), host as *mut u8, BIG) };
        Ok(t.elapsed().as_secs_f64() * 1e6)
    })?
    .max(0.05);
    std::hint::black_box(&pageable);
    Ok(CopyModel {
        each_up_us,
        each_down_us,
        each_up_pageable_us,
        each_down_pageable_us,
        engine_gbps,
        kernel_us,
        kernel_up_gbps,
        kernel_down_gbps,
        pack_gbps: BIG as f64 / (packing * 1e3),
        fit_ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(up: bool, buffer: usize, range: Range<usize>) -> Held {
        let bytes = range.len();
        Held { up, host: 0, mapped: None, device: 0, bytes, buffer, range: (range.start, range.end), op: 0 }
    }

    #[test]
    fn a_group_admits_no_copy_that_touches_bytes_another_writes() {
        let mut g = Group::default();
        g.push(held(true, 0, 0..4096));
        g.push(held(true, 0, 8192..12288));
        assert!(!g.admits(&held(true, 0, 4000..4100)), "writes what an upload writes");
        assert!(!g.admits(&held(false, 0, 12000..12300)), "reads what an upload writes");
        assert!(g.admits(&held(false, 0, 4096..8192)), "reads bytes no upload writes");
        assert!(g.admits(&held(true, 1, 0..4096)), "another buffer");
        g.push(held(false, 0, 4096..8192));
        g.push(held(false, 0, 5000..6000));
        assert!(g.admits(&held(false, 0, 4096..8192)), "reads may meet reads");
        assert!(!g.admits(&held(true, 0, 7000..7001)), "an upload may not write what a download reads");
        assert!(g.admits(&held(true, 0, 12288..16384)), "touching is not meeting");
    }

    /// The natural loop's groups: copies slice after slice, in either order, cover their span whole, and
    /// a copy that meets it is refused without the exact ranges being made; a gap makes them needed.
    #[test]
    fn a_span_covered_whole_refuses_at_once_and_a_gap_takes_the_exact_ranges() {
        for order in [[0, 1, 2], [2, 1, 0]] {
            let mut g = Group::default();
            order.iter().for_each(|&i| g.push(held(true, 0, i * 256..(i + 1) * 256)));
            assert!(!g.admits(&held(false, 0, 300..301)), "{order:?}: reads what an upload writes");
            assert!(g.exact.is_none(), "{order:?}: decided by the span alone");
            assert!(g.admits(&held(false, 0, 768..1024)), "{order:?}: past the span");
        }
        let mut g = Group::default();
        g.push(held(false, 0, 0..256));
        g.push(held(false, 0, 100..200));
        g.push(held(false, 0, 512..768));
        assert!(g.admits(&held(true, 0, 256..512)), "in the gap between reads");
        assert!(g.exact.is_some(), "a span with a gap needs the exact ranges");
        assert!(!g.admits(&held(true, 0, 255..257)), "meets a read");
    }

    /// What another stream's access may meet, and what the book notes of a group: a whole span as one
    /// access of its last copy, the copies of a span with a gap each on their own.
    #[test]
    fn a_group_says_what_may_meet_it_and_what_the_book_notes() {
        let mut g = Group::default();
        for (op, (buffer, up, range)) in
            [(0, true, 0..256), (0, true, 256..512), (1, false, 0..64), (1, false, 128..192)].into_iter().enumerate()
        {
            g.push(Held { op, ..held(up, buffer, range) });
        }
        assert!(g.may_meet(0, &(500..600), false), "a read of what it writes");
        assert!(!g.may_meet(0, &(512..600), true), "past the span");
        assert!(!g.may_meet(1, &(0..64), false), "a read of what it reads");
        assert!(g.may_meet(1, &(100..140), true), "a write within the span of its reads: it may meet them");
        assert!(!g.may_meet(2, &(0..64), true), "a buffer it does not touch");
        let noted: Vec<_> = g.accesses().collect();
        assert_eq!(noted, vec![(0, true, 0..512, 1), (1, false, 0..64, 2), (1, false, 128..192, 3)]);
    }

    /// [`Group::try_push`] takes what [`Group::admits`] admits and leaves the group as [`Group::push`]
    /// would, over random copies of a few buffers (ranges that meet, touch and nest, either way).
    #[test]
    fn try_push_agrees_with_admits_and_push() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..200 {
            let (mut fast, mut slow) = (Group::default(), Group::default());
            for op in 0..40 {
                let start = next(64) * 16;
                let h = Held { op, ..held(next(2) == 0, next(3), start..start + 16 * (1 + next(8))) };
                let admitted = slow.admits(&h);
                if admitted {
                    slow.push(h);
                }
                assert_eq!(fast.try_push(h).is_ok(), admitted, "{h:?}");
            }
            assert_eq!(fast.accesses().collect::<Vec<_>>(), slow.accesses().collect::<Vec<_>>());
            assert_eq!((fast.held.len(), fast.bytes), (slow.held.len(), slow.bytes));
        }
    }

    #[test]
    fn unions_merge_what_they_meet_and_touch() {
        let mut set = BTreeMap::new();
        for r in [10..20, 30..40, 20..25, 5..12, 50..60, 39..51] {
            unite(&mut set, 7, r);
        }
        unite(&mut set, 8, 0..100);
        assert_eq!(set.into_iter().collect::<Vec<_>>(), vec![((7, 5), 25), ((7, 30), 60), ((8, 0), 100)]);
    }

    #[test]
    fn a_group_keeps_within_its_limits() {
        let mut g = Group::default();
        for i in 0..GROUP_BYTES / (256 << 10) {
            assert!(g.admits(&held(true, 0, i * (256 << 10)..(i + 1) * (256 << 10))));
            g.push(held(true, 0, i * (256 << 10)..(i + 1) * (256 << 10)));
        }
        assert!(!g.admits(&held(true, 1, 0..1)), "a byte past GROUP_BYTES");
        let mut taken = Vec::new();
        g.take(&mut taken);
        assert_eq!((taken.len(), g.held.len(), g.bytes), (16, 0, 0));
        assert!(g.admits(&held(true, 0, 0..1)), "empty again");
    }

    /// [`groups`] ends its groups where a group of the scope's refuses the next copy, or where the scope
    /// holds no copy: over a sequence that meets every limit, copies of buffers apart.
    #[test]
    fn groups_are_those_the_scopes_groups_make() {
        let sizes = [
            vec![4096; 1500],
            vec![HELD_AT_MOST + 1, 0, HELD_AT_MOST],
            vec![HELD_AT_MOST; GROUP_BYTES / HELD_AT_MOST + 3],
            vec![1; GROUP_COPIES + 5],
            vec![1 << 20, 256, 256],
        ]
        .concat();
        let (mut g, mut taken, mut want, mut first) = (Group::default(), Vec::new(), Vec::new(), 0);
        for (i, &bytes) in sizes.iter().enumerate() {
            let h = held(true, i, 0..bytes);
            if !super::held(bytes) || !g.admits(&h) {
                if i > first {
                    want.push(first..i);
                }
                g.take(&mut taken);
                first = i;
            }
            match super::held(bytes) {
                true => g.push(h),
                false => {
                    want.push(i..i + 1);
                    first = i + 1;
                }
            }
        }
        if first < sizes.len() {
            want.push(first..sizes.len());
        }
        assert_eq!(groups(sizes.iter().copied()).collect::<Vec<_>>(), want);
        // 4 MiB of 4 KiB and the rest; two copies not held; 4 MiB of 256 KiB, then four more and 1-byte
        // copies up to GROUP_COPIES, then the last nine; 1 MiB not held; two.
        let lengths: Vec<usize> = want.iter().map(|r| r.len()).collect();
        assert_eq!(lengths, [1024, 476, 1, 1, GROUP_BYTES / HELD_AT_MOST, GROUP_COPIES, 9, 1, 2]);
    }

    #[test]
    fn tables_cut_copies_into_entries_and_send_the_unmapped_through_staging() {
        let mut up = held(true, 0, 0..(ENTRY_BYTES + 100));
        (up.device, up.mapped) = (0x1000_0000, Some(0x7000_0000));
        let mut down = held(false, 0, 0..16);
        down.device = 0x2000_0000;
        let mut t = Vec::new();
        table(&[up, down], |_| 0x9000_0000, &mut t);
        let e = ENTRY_BYTES as u64;
        assert_eq!(
            t,
            vec![0x1000_0000, 0x7000_0000, e, 0x1000_0000 + e, 0x7000_0000 + e, 100, 0x9000_0000, 0x2000_0000, 16]
        );
    }

    /// A group with under 1 MiB of pageable bytes goes in one part; one with more, in a part a MiB (at most
    /// eight), cut between copies, each part's entries and jobs where its copies' are.
    #[test]
    fn a_group_of_pageable_mebibytes_goes_in_parts_a_mebibyte_each() {
        let copy = |i: usize, up: bool, bytes: usize, pinned: bool| Held {
            mapped: pinned.then_some(0x7000_0000),
            ..held(up, 0, i * bytes..(i + 1) * bytes)
        };
        let mut into = Vec::new();
        let small: Vec<Held> = (0..200).map(|i| copy(i, i % 2 == 0, 4096, false)).collect();
        parts(&small, &mut into);
        assert_eq!(into, [Part { copies: 0..200, entries: 0..200, pack: 0..100, unpack: 0..100 }]);
        // 1000 x 4 KiB up from pageable memory (3.9 MiB): four parts of 250 copies.
        let up: Vec<Held> = (0..1000).map(|i| copy(i, true, 4096, false)).collect();
        parts(&up, &mut into);
        assert_eq!(into.iter().map(|p| p.copies.clone()).collect::<Vec<_>>(), [0..250, 250..500, 500..750, 750..1000]);
        assert!(into.iter().all(|p| p.entries == p.copies && p.pack == p.copies && p.unpack == (0..0)));
        // Pinned copies among them take no share, and their jobs are none; large copies take several entries.
        let mixed: Vec<Held> = (0..64).map(|i| copy(i, i % 4 != 0, 256 << 10, i % 2 == 1)).collect();
        parts(&mixed, &mut into);
        let staged = 32 * (256 << 10);
        assert_eq!(into.len(), staged / PARTS_FROM);
        assert_eq!((into[0].copies.start, into.last().unwrap().copies.end), (0, 64));
        for w in into.windows(2) {
            assert_eq!(
                (w[0].copies.end, w[0].entries.end, w[0].pack.end, w[0].unpack.end),
                (w[1].copies.start, w[1].entries.start, w[1].pack.start, w[1].unpack.start)
            );
        }
        let total = |f: fn(&Part) -> usize| into.iter().map(f).sum::<usize>();
        assert_eq!(total(|p| p.entries.len()), 64 * 4);
        assert_eq!((total(|p| p.pack.len()), total(|p| p.unpack.len())), (16, 16));
        // Never more than eight.
        let big: Vec<Held> = (0..64).map(|i| copy(i, true, 256 << 10, false)).collect();
        parts(&big, &mut into);
        assert_eq!(into.len(), MOST_PARTS);
    }

    #[test]
    fn the_model_chooses_the_kernel_for_many_copies_and_each_for_one() {
        let model = CopyModel {
            each_up_us: 4.0,
            each_down_us: 4.0,
            each_up_pageable_us: 8.0,
            each_down_pageable_us: 8.0,
            engine_gbps: 50.0,
            kernel_us: 9.0,
            kernel_up_gbps: 40.0,
            kernel_down_gbps: 45.0,
            pack_gbps: 10.0,
            fit_ms: 2.0,
        };
        let none = CopyCounts::default();
        let n = |count: usize, bytes: usize, pageable: bool| {
            (0..count).fold(CopyCounts::default(), |c, _| c.add(bytes, pageable))
        };
        assert_eq!(model.choose(n(1, 4096, false), none), CopyWay::Each);
        assert_eq!(model.choose(n(10, 4096, false), none), CopyWay::Kernel);
        assert_eq!(model.choose(none, n(1000, 256, true)), CopyWay::Kernel);
        assert_eq!(model.choose(n(2, 256 << 10, false), none), CopyWay::Each, "large copies: the engine is faster");
        let each = model.predict(CopyWay::Each, n(100, 4096, false), none);
        assert!((each - (400.0 + 409_600.0 / 50e3)).abs() < 1e-9, "{each}");
        let kernel = model.predict(CopyWay::Kernel, n(100, 4096, true), n(10, 256, false));
        let want = 9.0 + 409_600.0 / 40e3 + 2560.0 / 45e3 + 409_600.0 / 10e3;
        assert!(
            (kernel - want).abs() < 1e-9,
            "one launch, each direction at its rate, pageable bytes packed: {kernel}"
        );
        // 1000 x 4 KiB up from pageable memory goes in four parts: the CPU packs a part (25.6 µs at 40 GB/s
        // here) while the GPU moves the one before (25.6 µs + 9 for its launch), which sets the pace.
        let model = CopyModel { pack_gbps: 40.0, ..model };
        let parts = model.predict(CopyWay::Kernel, n(1000, 4096, true), none);
        let (pack, gpu): (f64, f64) = (4_096_000.0 / 40e3 / 4.0, 4_096_000.0 / 40e3 / 4.0 + 9.0);
        assert!((parts - (pack + gpu + 3.0 * pack.max(gpu))).abs() < 1e-9, "{parts}");
        let one_after_another = 9.0 + 2.0 * 4_096_000.0 / 40e3;
        assert!(parts < one_after_another && parts > 4.0 * pack.max(gpu), "{parts} against {one_after_another}");
    }
}

#[cfg(test)]
mod timing_probe {
    use super::*;

    #[test]
    #[ignore = "a timing probe, run by hand"]
    fn how_long_holding_takes_on_the_host() {
        let n = 1000;
        let t = Instant::now();
        let mut taken = Vec::new();
        for _ in 0..1000 {
            let mut g = Group::default();
            for i in 0..n {
                let h = Held {
                    up: true,
                    host: 0,
                    mapped: None,
                    device: 0,
                    bytes: 256,
                    buffer: 3,
                    range: (i * 256, (i + 1) * 256),
                    op: 0,
                };
                assert!(g.admits(&h));
                g.push(h);
            }
            g.take(&mut taken);
        }
        eprintln!("admits + push: {:.1} ns a copy", t.elapsed().as_secs_f64() * 1e9 / (1000 * n) as f64);
    }
}
