//! Ordinary (pageable) memory to and from the device at near-pinned speed, through a ring of pinned
//! staging buffers.
//!
//! The driver's own path for pageable memory copies through one staging buffer at a time and reaches
//! a fraction of the link. A [`Stager`] runs `threads` workers; worker w takes chunks w, w + T, w + 2T ...
//! and owns a stream and two pinned slots. Uploading, it copies a chunk into a slot with the CPU while
//! the copy engine drains its other slot (an event says when a slot is free again); downloading, the
//! engine fills one slot while the CPU empties the other. Several workers keep the copy engine fed
//! even though one CPU thread copies memory slower than the link. A transfer is cut so that every
//! worker it uses gets at least two chunks; one under 8 MiB goes through the driver's own path, which
//! is as fast there and has no threads to start.
//!
//! Both calls return when the transfer is complete, so the borrows they take end with the work.
//!
//! A [`PartedSlice`] is the other half of moving many small buffers: several threads pack them into one
//! pinned buffer, a part each, and each piece of it can be copied as soon as its parts are packed.

use std::{
    marker::PhantomData,
    ops::Range,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
};

use crate::error::{refused, Foreign, Refusal, Unsupported};

use crate::{
    context::Context,
    error::check,
    ffi,
    memory::{DeviceBuffer, Element},
    stream::{Event, Stream},
    Gpu, PinnedBuffer,
};

/// Transfers smaller than this go through the driver's own path for pageable memory: below it,
/// starting threads costs more than staging saves.
const DIRECT_BELOW: usize = 8 << 20;

/// Downloads this large copy out of the slots with streaming stores: the destination's lines are then
/// written without being read first, which raised a 1 GiB staged download from about two thirds of the
/// pinned rate to about nine tenths in this project's runs. Smaller ones copy as usual (their destination may stay in cache), as do
/// uploads, whose slots the copy engine reads faster from cache.
pub const STREAM_DOWNLOADS_FROM: usize = 64 << 20;

/// One worker's stream and its two pinned slots, each with the event of its last copy.
struct Worker<T: Element> {
    stream: Stream,
    slots: [PinnedBuffer<T>; 2],
    done: [Option<Event>; 2],
}

/// A reusable ring of pinned staging buffers; see the module docs.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// let mut stager = gpu.stager::<f32>(4, 8 << 20)?; // 4 threads, two 8 MiB pinned slots each
/// let data = vec![1f32; 1 << 28]; // 1 GiB of pageable memory
/// let mut d = gpu.alloc::<f32>(data.len())?;
/// stager.upload(&data, &mut d)?; // returns when the copy is done
/// stager.download(&d, &mut vec![0f32; 1 << 28])?;
/// # Ok(()) }
/// ```
pub struct Stager<T: Element> {
    ctx: Arc<Context>,
    chunk: usize,
    workers: Vec<Worker<T>>,
    /// Threads kept for the stager's life: starting them anew for every transfer cost more than a
    /// 16 MiB transfer takes.
    pool: rayon::ThreadPool,
}

impl Gpu {
    /// A stager with `threads` workers and staging slots of `chunk_bytes` each (2 per worker).
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let stager = gpu.stager::<u8>(6, 16 << 20)?; // streams, pinned slots and threads, made once, reused
    /// # let _ = stager;
    /// # Ok(()) }
    /// ```
    pub fn stager<T: Element>(&self, threads: usize, chunk_bytes: usize) -> crate::Result<Stager<T>> {
        if threads == 0 {
            return refused("stager", Refusal::Empty);
        }
        let chunk = (chunk_bytes / std::mem::size_of::<T>()).max(1);
        let workers = self
            .streams(threads)?
            .into_iter()
            .map(|stream| -> crate::Result<Worker<T>> {
                Ok(Worker { stream, slots: [self.pinned(chunk)?, self.pinned(chunk)?], done: [None, None] })
            })
            .collect::<crate::Result<_>>()?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("stager-{i}"))
            .build()
            .map_err(|e| Unsupported { what: "starting the staging threads".into(), why: e.to_string() })?;
        Ok(Stager { ctx: self.context().clone(), chunk, workers, pool })
    }
}

impl<T: Element> Stager<T> {
    /// Copies pageable `src` into the start of `dst` through the staging ring; returns when done.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let mut stager = gpu.stager::<f32>(4, 8 << 20)?;
    /// let data: Vec<f32> = (0..1 << 28).map(|i| i as f32).collect();
    /// let mut d = gpu.alloc::<f32>(1 << 28)?;
    /// stager.upload(&data, &mut d)?; // data and d are free again: the copy is done
    /// # Ok(()) }
    /// ```
    pub fn upload(&mut self, src: &[T], dst: &mut DeviceBuffer<T>) -> crate::Result<()> {
        if src.len() > dst.len() {
            return refused("staged upload", Refusal::OutOfBounds { range: 0..src.len(), len: dst.len() });
        }
        if !dst.context().is(&self.ctx) {
            return refused("staged upload", Refusal::Foreign(Foreign::Context));
        }
        let base = dst.ptr();
        let bytes = std::mem::size_of_val(src);
        if bytes < DIRECT_BELOW {
            // SAFETY: `src` and `dst` (at least as long, checked above) are borrowed until `direct`
            // returns, which is after the stream is synchronized (or the process aborts).
            return self.direct("upload from pageable memory", |s| unsafe {
                ffi::cuMemcpyHtoDAsync_v2(base, src.as_ptr().cast(), bytes, s)
            });
        }
        self.run(src.len(), |w, k, range| {
            let slot = k % 2;
            w.wait(slot)?; // the slot's previous upload has left it
            let staged = &mut w.slots[slot][..range.len()];
            staged.copy_from_slice(&src[range.clone()]);
            let bytes = std::mem::size_of_val(staged);
            let at = base + (range.start * std::mem::size_of::<T>()) as u64;
            // SAFETY: the slot stays untouched until `wait(slot)` has seen this copy finish, and the
            // stager outlives every copy (run() synchronizes all streams); `at..at+bytes` lies within dst,
            // which is borrowed mutably until upload() returns, and distinct workers write distinct ranges.
            check(unsafe { ffi::cuMemcpyHtoDAsync_v2(at, staged.as_ptr().cast(), bytes, w.stream.raw()) }, || {
                "staged upload".into()
            })?;
            w.record(slot)
        })
    }

    /// Copies the start of `src` into pageable `dst` through the staging ring; returns when done.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let mut stager = gpu.stager::<f32>(4, 8 << 20)?;
    /// let d = gpu.alloc::<f32>(1 << 28)?;
    /// let mut back = vec![1f32; 1 << 28];
    /// stager.download(&d, &mut back)?;
    /// assert!(back.iter().all(|&x| x == 0.0));
    /// # Ok(()) }
    /// ```
    pub fn download(&mut self, src: &DeviceBuffer<T>, dst: &mut [T]) -> crate::Result<()> {
        if dst.len() > src.len() {
            return refused("staged download", Refusal::OutOfBounds { range: 0..dst.len(), len: src.len() });
        }
        if !src.context().is(&self.ctx) {
            return refused("staged download", Refusal::Foreign(Foreign::Context));
        }
        let base = src.ptr();
        let (n, bytes) = (dst.len(), std::mem::size_of_val(dst));
        if bytes < DIRECT_BELOW {
            let to = dst.as_mut_ptr().cast();
            // SAFETY: as in upload: both sides borrowed until `direct` returns, after the stream is synchronized.
            return self
                .direct("download into pageable memory", |s| unsafe { ffi::cuMemcpyDtoHAsync_v2(to, base, bytes, s) });
        }
        let (chunk, threads) = self.split(n);
        let streaming = bytes >= STREAM_DOWNLOADS_FROM;
        // Each worker writes only its own chunks of dst: hand it the address, not a shared &mut.
        let out = SendPtr(dst.as_mut_ptr());
        let enqueue = move |w: &mut Worker<T>, slot: usize, range: &Range<usize>| -> crate::Result<()> {
            let bytes = range.len() * std::mem::size_of::<T>();
            let from = base + (range.start * std::mem::size_of::<T>()) as u64;
            // SAFETY: the slot is free (its previous contents were copied out before it is reused) and
            // the stager outlives the copy; `from..from+bytes` lies within src (dst.len() <= src.len()), borrowed until return.
            check(
                unsafe { ffi::cuMemcpyDtoHAsync_v2(w.slots[slot].as_mut_ptr().cast(), from, bytes, w.stream.raw()) },
                || "staged download".into(),
            )?;
            w.record(slot)
        };
        self.run_workers(threads, |t, w| {
            let mine: Vec<Range<usize>> =
                (t..n.div_ceil(chunk)).step_by(threads).map(|i| i * chunk..((i + 1) * chunk).min(n)).collect();
            if let Some(first) = mine.first() {
                enqueue(w, 0, first)?;
            }
            for (k, range) in mine.iter().enumerate() {
                if let Some(next) = mine.get(k + 1) {
                    enqueue(w, (k + 1) % 2, next)?; // the engine fills the other slot meanwhile
                }
                let slot = k % 2;
                w.wait(slot)?;
                // SAFETY: `range` is one of this worker's chunks, disjoint from every other worker's, within
                // dst, which is borrowed mutably until download() returns (run_workers joins first).
                let dst = unsafe { std::slice::from_raw_parts_mut(out.get().add(range.start), range.len()) };
                if streaming {
                    stream_copy(dst, &w.slots[slot][..range.len()]);
                } else {
                    dst.copy_from_slice(&w.slots[slot][..range.len()]);
                }
            }
            Ok(())
        })
    }

    /// The host's side of a staged transfer alone, with nothing on the GPU: the same threads copying
    /// the same chunks of `host` into the same pinned slots, in turn (`Destination::Device`, an upload's side), or
    /// out of them into `host` (`Destination::Host`, a download's, with streaming stores where a download uses
    /// them). A staged transfer large enough to be staged cannot beat this rate: it does the same CPU
    /// work, with DMA beside it.
    ///
    /// ```no_run
    /// # fn main() -> cuda_scope::Result<()> {
    /// # let gpu = cuda_scope::Gpu::init()?;
    /// let mut stager = gpu.stager::<f32>(4, 8 << 20)?;
    /// let mut data = vec![1f32; 1 << 28];
    /// let t = std::time::Instant::now();
    /// stager.host_side_only(&mut data, cuda_scope::Destination::Device)?; // an upload's CPU work alone
    /// println!("staged uploads cannot beat {:.1} GB/s", (1u64 << 30) as f64 / t.elapsed().as_secs_f64() / 1e9);
    /// # Ok(()) }
    /// ```
    pub fn host_side_only(&mut self, host: &mut [T], direction: crate::Destination) -> crate::Result<()> {
        let (n, bytes) = (host.len(), std::mem::size_of_val(host));
        let (streaming, to_device) = (bytes >= STREAM_DOWNLOADS_FROM, direction == crate::Destination::Device);
        let at = SendPtr(host.as_mut_ptr());
        self.run(n, |w, k, range| {
            // SAFETY: `range` is one of this worker's chunks, disjoint from every other worker's, within
            // `host`, which is borrowed mutably until this returns (run() joins every worker first).
            let part = unsafe { std::slice::from_raw_parts_mut(at.get().add(range.start), range.len()) };
            let slot = &mut w.slots[k % 2][..range.len()];
            match (to_device, streaming) {
                (true, _) => slot.copy_from_slice(part),
                (false, true) => stream_copy(part, slot),
                (false, false) => part.copy_from_slice(slot),
            }
            Ok(())
        })
    }

    /// A small transfer through the driver's own path for pageable memory, which is as fast there and
    /// has nothing to start: `copy` queued on the first worker's stream, which is then synchronized
    /// (or the process aborts, as a scope does) before the borrows end.
    fn direct(&self, what: &str, copy: impl FnOnce(ffi::CUstream) -> ffi::CuResult) -> crate::Result<()> {
        let stream = &self.workers[0].stream;
        let queued = check(copy(stream.raw()), || what.into());
        let done = crate::scope::synchronize_all(&self.ctx, [stream]);
        queued.and(done)
    }

    /// How `n` elements are cut; see [`split`]. (chunk, workers).
    fn split(&self, n: usize) -> (usize, usize) {
        split(n, self.workers.len(), self.chunk, std::mem::size_of::<T>())
    }

    /// Runs `step(worker, k, range)` for the k-th chunk of each worker, in order, on T threads.
    fn run(
        &mut self,
        n: usize,
        step: impl Fn(&mut Worker<T>, usize, Range<usize>) -> crate::Result<()> + Sync,
    ) -> crate::Result<()> {
        let (chunk, threads) = self.split(n);
        self.run_workers(threads, |t, w| {
            for (k, i) in (t..n.div_ceil(chunk)).step_by(threads).enumerate() {
                step(w, k, i * chunk..((i + 1) * chunk).min(n))?;
            }
            Ok(())
        })
    }

    /// One scoped thread per worker, the context current on each. Every stream is synchronized before
    /// return, after all threads have ended (also by panicking): where that cannot be shown, the process
    /// aborts, as a scope does, rather than end the borrows while a copy may still run.
    fn run_workers(
        &mut self,
        threads: usize,
        body: impl Fn(usize, &mut Worker<T>) -> crate::Result<()> + Sync,
    ) -> crate::Result<()> {
        let ctx = &*self.ctx;
        let (pool, workers) = (&self.pool, &mut self.workers);
        let mut results: Vec<crate::Result<()>> = (0..threads).map(|_| Ok(())).collect();
        // One task per worker on the pool's threads. Every task ends (a panic in one is held until all
        // have) before the streams are synchronized and the borrows end.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.scope(|s| {
                for ((t, w), result) in workers.iter_mut().take(threads).enumerate().zip(results.iter_mut()) {
                    let body = &body;
                    s.spawn(move |_| *result = ctx.ensure_current().and_then(|()| body(t, w)));
                }
            })
        }));
        let synced = crate::scope::synchronize_all(ctx, self.workers.iter().map(|w| &w.stream));
        if let Err(panic) = ran {
            std::panic::resume_unwind(panic); // every stream is synchronized: nothing queued is left to run
        }
        results.into_iter().collect::<crate::Result<()>>()?;
        synced
    }
}

impl<T: Element> Worker<T> {
    /// Blocks until the last copy that used `slot` has finished.
    fn wait(&mut self, slot: usize) -> crate::Result<()> {
        if let Some(e) = &self.done[slot] {
            e.synchronize()?;
        }
        Ok(())
    }

    fn record(&mut self, slot: usize) -> crate::Result<()> {
        if self.done[slot].is_none() {
            self.done[slot] = Some(Event::new(self.stream.context(), false)?);
        }
        self.done[slot].as_ref().unwrap().record(&self.stream)
    }
}

/// How `n` elements of `size` bytes are cut for `workers` workers with slots of `slot` elements: chunks
/// that give every worker about six (so that each overlaps its CPU copy with its DMA, and the last wave
/// of DMAs after the last copies is short), no smaller than 1 MiB nor larger than a slot; and only as
/// many workers as there are two chunks for, so that each can overlap. (chunk, workers).
///
/// 1 MiB is about three times the size at which a pinned copy reaches half its rate (a fixed cost of a
/// few µs a copy, which `pinned_memory` measures): with 256 KiB chunks about half of every DMA went to
/// that cost, and a 16 MiB staged upload ran 15-40% slower than with 1 MiB chunks.
fn split(n: usize, workers: usize, slot: usize, size: usize) -> (usize, usize) {
    let min_chunk = ((1 << 20) / size).clamp(1, slot.max(1));
    let chunk = n.div_ceil(6 * workers.max(1)).clamp(min_chunk, slot.max(1));
    (chunk, (n.div_ceil(chunk) / 2).clamp(1, workers.max(1)))
}

#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: used only to hand each staging thread the base of a buffer whose chunks they touch
// disjointly while the owner's &mut borrow is held by download() or host_side_only().
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// A slice that several threads write at once, a part each, and that is read back a piece at a time (a
/// run of consecutive parts) as soon as every part of the piece is written: how many small buffers are
/// packed into one pinned buffer on several threads, each piece copied to the GPU as soon as it is
/// packed, while the threads pack the next.
///
/// Each part is handed out once, by [`PartedSlice::claim`], as a [`Part`] that writes it; dropping the
/// `Part` marks it written. [`PartedSlice::piece`] hands a piece out, shared, only once every part of it
/// is written, and for as long as the slice was lent: no part of it can be written again. A `Part`
/// forgotten (`mem::forget`) leaves its piece unwritten for good; one dropped while its thread panics
/// marks the slice failed ([`PartedSlice::failed`]) instead, and its piece is never handed out.
///
/// ```
/// # fn main() -> cuda_scope::Result<()> {
/// let mut packed = vec![0u8; 12];
/// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
/// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
/// std::thread::scope(|t| {
///     for i in 0..slice.parts() {
///         let slice = &slice;
///         t.spawn(move || slice.claim(i).unwrap().fill(i as u8 + 1)); // a part a thread
///     }
/// });
/// assert_eq!(slice.piece(0), Some(&[1, 1, 1, 1, 2, 2, 2, 2][..])); // to copy while others pack
/// # Ok(()) }
/// ```
pub struct PartedSlice<'a, T> {
    ptr: *mut T,
    /// Part i is `ends[i - 1]..ends[i]` (the first from 0); the last end is the slice's length.
    ends: Vec<usize>,
    /// Piece p is parts `piece_ends[p - 1]..piece_ends[p]`; the last is the number of parts.
    piece_ends: Vec<usize>,
    claimed: Vec<AtomicBool>,
    /// Each piece's parts not yet written.
    unwritten: Vec<AtomicUsize>,
    failed: AtomicBool,
    _lent: PhantomData<&'a mut [T]>,
}

// SAFETY: a PartedSlice holds a `&'a mut [T]` in all but name: moving it to another thread moves that
// borrow, which needs `T: Send`.
unsafe impl<T: Send> Send for PartedSlice<'_, T> {}
// SAFETY: shared between threads it hands each part's `&mut` to one thread (`T: Send`, as
// `split_at_mut` and threads do) and whole pieces as `&[T]` to any (`T: Sync`); the atomics order them.
unsafe impl<T: Send + Sync> Sync for PartedSlice<'_, T> {}

impl<'a, T> PartedSlice<'a, T> {
    /// `slice` cut into parts that end at `part_ends` (ascending, the last the slice's length), grouped
    /// into pieces that end at `piece_ends` (numbers of parts, ascending, the last the number of parts).
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut v = vec![0f32; 10];
    /// assert!(cuda_scope::PartedSlice::new(&mut v, vec![5, 3, 10], vec![3]).is_err()); // ends out of order
    /// let slice = cuda_scope::PartedSlice::new(&mut v, vec![3, 10], vec![1, 2])?; // a piece a part
    /// assert_eq!(slice.pieces(), 2);
    /// # Ok(()) }
    /// ```
    pub fn new(slice: &'a mut [T], part_ends: Vec<usize>, piece_ends: Vec<usize>) -> crate::Result<Self> {
        let ascending = |v: &[usize]| v.windows(2).all(|w| w[0] <= w[1]);
        if !ascending(&part_ends) || part_ends.last().copied().unwrap_or(0) != slice.len() {
            return refused("parted slice: parts", Refusal::Unordered { len: slice.len() });
        }
        if !ascending(&piece_ends) || piece_ends.last().copied().unwrap_or(0) != part_ends.len() {
            return refused("parted slice: pieces", Refusal::Unordered { len: part_ends.len() });
        }
        let unwritten = (0..piece_ends.len())
            .map(|p| AtomicUsize::new(piece_ends[p] - if p == 0 { 0 } else { piece_ends[p - 1] }))
            .collect();
        Ok(PartedSlice {
            ptr: slice.as_mut_ptr(),
            claimed: part_ends.iter().map(|_| AtomicBool::new(false)).collect(),
            ends: part_ends,
            piece_ends,
            unwritten,
            failed: AtomicBool::new(false),
            _lent: PhantomData,
        })
    }

    /// How many parts there are.
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut packed = vec![0u8; 12];
    /// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
    /// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
    /// assert_eq!(slice.parts(), 3);
    /// # Ok(()) }
    /// ```
    pub fn parts(&self) -> usize {
        self.ends.len()
    }

    /// How many pieces there are.
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut packed = vec![0u8; 12];
    /// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
    /// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
    /// assert_eq!(slice.pieces(), 2);
    /// # Ok(()) }
    /// ```
    pub fn pieces(&self) -> usize {
        self.piece_ends.len()
    }

    /// Where part `i` lies in the slice.
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut packed = vec![0u8; 12];
    /// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
    /// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
    /// assert_eq!(slice.part_range(1), 4..8);
    /// # Ok(()) }
    /// ```
    pub fn part_range(&self, i: usize) -> Range<usize> {
        (if i == 0 { 0 } else { self.ends[i - 1] })..self.ends[i]
    }

    /// Where piece `p` lies in the slice.
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut packed = vec![0u8; 12];
    /// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
    /// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
    /// assert_eq!((slice.piece_range(0), slice.piece_range(1)), (0..8, 8..12)); // where to copy it to
    /// # Ok(()) }
    /// ```
    pub fn piece_range(&self, p: usize) -> Range<usize> {
        let parts = self.piece_parts(p);
        let start = if parts.start == 0 { 0 } else { self.ends[parts.start - 1] };
        start..if parts.end == 0 { 0 } else { self.ends[parts.end - 1] }
    }

    /// Which parts piece `p` is made of.
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut packed = vec![0u8; 12];
    /// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
    /// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
    /// assert_eq!(slice.piece_parts(0), 0..2);
    /// # Ok(()) }
    /// ```
    pub fn piece_parts(&self, p: usize) -> Range<usize> {
        (if p == 0 { 0 } else { self.piece_ends[p - 1] })..self.piece_ends[p]
    }

    /// Part `i` to write, if nobody has claimed it before (each is handed out once).
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut packed = vec![0u8; 12];
    /// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
    /// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
    /// let mut part = slice.claim(0).expect("nobody has it");
    /// part.copy_from_slice(b"abcd");
    /// assert!(slice.claim(0).is_none()); // handed out once
    /// drop(part); // written
    /// # Ok(()) }
    /// ```
    pub fn claim(&self, i: usize) -> Option<Part<'_, T>> {
        if i >= self.ends.len() || self.claimed[i].swap(true, Ordering::AcqRel) {
            return None;
        }
        let range = self.part_range(i);
        let piece = self.piece_ends.partition_point(|&end| end <= i);
        // SAFETY: `range` lies within the slice (the ends ascend to its length, checked in `new`) and
        // overlaps no other part's; this part is handed out once (the swap above), and no piece holding
        // it is handed out until its `Part` is dropped. The slice is lent to `self` for 'a.
        let slice = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) };
        Some(Part { slice, unwritten: &self.unwritten[piece], failed: &self.failed })
    }

    /// Piece `p`, once every part of it is written; `None` before (or for good, where a part was
    /// forgotten or dropped in a panic).
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut packed = vec![0u8; 12];
    /// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
    /// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
    /// slice.claim(0).unwrap().fill(1);
    /// assert!(slice.piece(0).is_none()); // part 1 is not written yet
    /// slice.claim(1).unwrap().fill(2);
    /// assert_eq!(slice.piece(0).map(|p| p.len()), Some(8));
    /// # Ok(()) }
    /// ```
    pub fn piece(&self, p: usize) -> Option<&'a [T]> {
        if self.unwritten[p].load(Ordering::Acquire) != 0 {
            return None;
        }
        let range = self.piece_range(p);
        // SAFETY: every part of the piece was claimed (each once) and its `Part` dropped without a panic
        // (the count reached 0; Acquire sees their writes), so no `&mut` to these elements exists or can
        // be made again; the slice stays lent for 'a, so nothing else writes them either.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(range.start), range.len()) })
    }

    /// Whether a part was dropped while its thread panicked: its piece will never be handed out.
    ///
    /// ```
    /// # fn main() -> cuda_scope::Result<()> {
    /// let mut packed = vec![0u8; 12];
    /// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
    /// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
    /// let packing = std::thread::scope(|t| t.spawn(|| {
    ///     let _part = slice.claim(0);
    ///     panic!("a bad buffer"); // the part is dropped while its thread panics
    /// }).join());
    /// assert!(packing.is_err() && slice.failed() && slice.piece(0).is_none());
    /// # Ok(()) }
    /// ```
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
}

/// One part of a [`PartedSlice`], to write; dropping it marks the part written.
///
/// ```
/// # fn main() -> cuda_scope::Result<()> {
/// let mut packed = vec![0u8; 12];
/// // Parts of 4 bytes; piece 0 is parts 0 and 1, piece 1 is part 2.
/// let slice = cuda_scope::PartedSlice::new(&mut packed, vec![4, 8, 12], vec![2, 3])?;
/// let mut part = slice.claim(2).unwrap(); // part 2, to this thread alone
/// part.copy_from_slice(&[7; 4]);
/// drop(part); // written: piece 1 may be handed out
/// assert_eq!(slice.piece(1), Some(&[7u8; 4][..]));
/// # Ok(()) }
/// ```
pub struct Part<'p, T> {
    slice: &'p mut [T],
    unwritten: &'p AtomicUsize,
    failed: &'p AtomicBool,
}

impl<T> std::ops::Deref for Part<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T> std::ops::DerefMut for Part<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

impl<T> Drop for Part<'_, T> {
    fn drop(&mut self) {
        match std::thread::panicking() {
            true => self.failed.store(true, Ordering::Release),
            false => drop(self.unwritten.fetch_sub(1, Ordering::Release)),
        }
    }
}

/// `dst.copy_from_slice(src)`, with non-temporal (streaming) stores for copies of 4 KiB or more on
/// x86-64: the destination's lines are written without first being read into the cache, which halves the
/// memory traffic of a copy that will not be read again soon, as staging's are. Ends with a store fence
/// (smaller copies too), so the data is in memory before a DMA that follows reads it. For many small
/// sources into one destination, [`stream_gather`] makes one store fence for them all.
///
/// ```
/// let src = vec![1u32; 1 << 20];
/// let mut staged = vec![0u32; 1 << 20]; // a pinned slot, in a stager
/// cuda_scope::staging::stream_copy(&mut staged, &src); // around the cache, then a store fence
/// assert_eq!(staged, src);
/// ```
pub fn stream_copy<T: Element>(dst: &mut [T], src: &[T]) {
    assert_eq!(dst.len(), src.len(), "stream_copy: lengths differ");
    let _fence = StoreFence;
    // SAFETY: the store fence, dropped on return or unwinding, follows the streaming stores before anything
    // else can touch `dst`, which is borrowed mutably until then.
    unsafe { copy_unfenced(dst, src) };
}

/// Copies each of `parts`, (where it starts in `dst`, its source), into its place in `dst`, as
/// [`stream_copy`] copies one, and makes one store fence, after the last. A store fence waits until
/// every streaming store before it has left the core, so one a part is costly: six threads packing 1000
/// buffers of 4 KiB took about a third longer with a store fence a buffer than with one every 64 KiB.
/// Parts may overlap, and the later one wins, as with copies one after another: a part
/// that meets bytes streamed since the last store fence gets a store fence before it (nothing may touch
/// what a streaming store wrote before a store fence), so parts in order pay one. Panics, like slicing,
/// where a part does not fit in `dst`; the parts before it are copied, and a store fence follows them all
/// the same.
///
/// ```
/// let (a, b) = (vec![1u8; 4096], vec![2u8; 8192]);
/// let mut packed = vec![0u8; 4096 + 8192];
/// cuda_scope::staging::stream_gather(&mut packed, [(0, &a[..]), (4096, &b[..])]); // one store fence
/// assert_eq!((packed[0], packed[4096]), (1, 2));
/// ```
pub fn stream_gather<'s, T: Element + 's>(dst: &mut [T], parts: impl IntoIterator<Item = (usize, &'s [T])>) {
    let _fence = StoreFence;
    // Around every element streamed since the last store fence (one range: parts in order grow it at its end).
    let mut streamed = 0..0;
    for (at, src) in parts {
        let end = at.checked_add(src.len()).filter(|&end| end <= dst.len());
        let Some(end) = end else {
            panic!("stream_gather: a part of {} elements at {at} in a destination of {}", src.len(), dst.len());
        };
        if at < streamed.end && streamed.start < end {
            store_fence();
            streamed = 0..0;
        }
        // SAFETY: the store fence above kept this part from bytes streamed before it; the one dropped on
        // return or unwinding follows its own streaming stores before anything else can touch `dst`.
        if unsafe { copy_unfenced(&mut dst[at..end], src) } {
            streamed = match streamed.is_empty() {
                true => at..end,
                false => streamed.start.min(at)..streamed.end.max(end),
            };
        }
    }
}

/// A store fence when dropped, unwinding included: the streaming stores before it are ordered before
/// anything after it, whatever returned or panicked between.
struct StoreFence;

impl Drop for StoreFence {
    fn drop(&mut self) {
        store_fence();
    }
}

/// `sfence`: the streaming stores before it are ordered before anything after it.
fn store_fence() {
    #[cfg(test)]
    FENCES.with(|n| n.set(n.get() + 1));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` (SSE, baseline on x86-64) has no operands and touches no memory.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
thread_local! {
    /// The store fences this thread made, for the tests.
    static FENCES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `dst.copy_from_slice(src)` (same lengths), with streaming stores from 4 KiB on x86-64, and no store fence;
/// whether it streamed.
///
/// # Safety
/// Where it streamed, a store fence must follow before anything reads or writes `dst` again, on this
/// thread or another (a [`StoreFence`] of the caller's, or [`store_fence`]).
#[inline]
unsafe fn copy_unfenced<T: Element>(dst: &mut [T], src: &[T]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::mem::size_of_val(src) >= 4 << 10 {
        assert_eq!(dst.len(), src.len());
        // SAFETY: two valid, non-overlapping ranges (one borrowed mutably, one shared) of the same byte
        // length; Element types are plain data, so copying their bytes copies them. The store fence that must
        // follow is the caller's promise.
        unsafe { nt_copy(dst.as_mut_ptr().cast(), src.as_ptr().cast(), std::mem::size_of_val(src)) };
        return true;
    }
    dst.copy_from_slice(src);
    false
}

/// Copies `bytes` bytes with SSE2 (baseline on x86-64) streaming stores, 64 bytes a step, with no store fence.
///
/// # Safety
/// `src` must be valid for `bytes` reads and `dst` for `bytes` writes, and they must not overlap. A store
/// store fence must follow before anything else reads or writes `dst` (a [`StoreFence`] of the caller's).
#[cfg(target_arch = "x86_64")]
unsafe fn nt_copy(dst: *mut u8, src: *const u8, bytes: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let head = dst.align_offset(16).min(bytes);
    // SAFETY: the head, `0..head`, lies within both ranges, which the caller promises valid and disjoint.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let mut i = head;
    while i + 64 <= bytes {
        // SAFETY: `i..i + 64` lies within both ranges; `dst + i` is 16-byte aligned (the head made
        // `dst + head` so, and `i` grows by 64), as the streaming stores need.
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let (a, b, c, d) =
                (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            let t = dst.add(i).cast::<__m128i>();
            _mm_stream_si128(t, a);
            _mm_stream_si128(t.add(1), b);
            _mm_stream_si128(t.add(2), c);
            _mm_stream_si128(t.add(3), d);
        }
        i += 64;
    }
    // SAFETY: the tail, `i..bytes`, within both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), bytes - i) };
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{split, stream_copy, stream_gather, PartedSlice, FENCES};

    #[test]
    fn a_piece_is_handed_out_once_every_part_of_it_is_written_and_each_part_once() {
        let mut buf = vec![0u32; 10];
        // Parts 0..3, 3..3 (empty), 3..7, 7..10; pieces: parts 0..2 and 2..4.
        let parted = PartedSlice::new(&mut buf, vec![3, 3, 7, 10], vec![2, 4]).unwrap();
        assert_eq!((parted.parts(), parted.pieces()), (4, 2));
        assert_eq!((parted.piece_range(0), parted.piece_range(1)), (0..3, 3..10));
        let mut a = parted.claim(0).unwrap();
        assert!(parted.claim(0).is_none(), "a part is handed out once");
        a.fill(1);
        assert!(parted.piece(0).is_none(), "part 0 is still being written, and part 1 unclaimed");
        drop(a);
        assert!(parted.piece(0).is_none(), "part 1, empty, is not written yet");
        drop(parted.claim(1).unwrap());
        assert_eq!(parted.piece(0).unwrap(), &[1, 1, 1]);
        assert!(parted.claim(1).is_none() && parted.claim(4).is_none());
        let (mut c, d) = (parted.claim(2).unwrap(), parted.claim(3).unwrap());
        c.fill(2);
        drop(c);
        std::mem::forget(d);
        assert!(parted.piece(1).is_none(), "a forgotten part leaves its piece unwritten for good");
        assert!(!parted.failed());
        let first = parted.piece(0).unwrap();
        drop(parted);
        assert_eq!(first, &[1, 1, 1], "a piece handed out stays readable for as long as the slice was lent");
    }

    #[test]
    fn layouts_that_do_not_tile_the_slice_are_refused() {
        let mut buf = vec![0u8; 8];
        assert!(PartedSlice::new(&mut buf, vec![4, 2, 8], vec![3]).is_err(), "parts out of order");
        assert!(PartedSlice::new(&mut buf, vec![4, 7], vec![2]).is_err(), "parts short of the slice");
        assert!(PartedSlice::new(&mut buf, vec![4, 9], vec![2]).is_err(), "parts past the slice");
        assert!(PartedSlice::new(&mut buf, vec![4, 8], vec![1]).is_err(), "pieces short of the parts");
        assert!(PartedSlice::new(&mut buf, vec![4, 8], vec![2, 1]).is_err(), "pieces out of order");
        assert!(PartedSlice::new(&mut buf, vec![4, 8], vec![1, 2]).is_ok());
    }

    #[test]
    fn a_part_dropped_in_a_panic_fails_the_slice_and_never_completes_its_piece() {
        let mut buf = vec![0u8; 4];
        let parted = PartedSlice::new(&mut buf, vec![2, 4], vec![2]).unwrap();
        drop(parted.claim(1).unwrap());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut part = parted.claim(0).unwrap();
            part[0] = 7;
            panic!("packing failed halfway");
        }));
        assert!(caught.is_err());
        assert!(parted.failed() && parted.piece(0).is_none());
    }

    #[test]
    fn threads_writing_parts_hand_over_whole_pieces_in_order() {
        let n = 1 << 16;
        let mut buf = vec![0u32; n];
        let ends: Vec<usize> = (1..=256).map(|i| i * n / 256).collect();
        let parted = PartedSlice::new(&mut buf, ends, (1..=16).map(|p| p * 16).collect()).unwrap();
        let next = AtomicUsize::new(0);
        let pack = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(mut part) = parted.claim(i) else { break };
            part.iter_mut().for_each(|x| *x = i as u32 + 1);
        };
        std::thread::scope(|t| {
            for _ in 0..3 {
                t.spawn(pack);
            }
            for p in 0..parted.pieces() {
                let piece = loop {
                    match parted.piece(p) {
                        Some(piece) => break piece,
                        None => std::hint::spin_loop(),
                    }
                };
                let start = parted.piece_range(p).start;
                for part in parted.piece_parts(p) {
                    let r = parted.part_range(part);
                    let whole = piece[r.start - start..r.end - start].iter().all(|&x| x == part as u32 + 1);
                    assert!(whole, "piece {p}: part {part} written whole before the piece is handed out");
                }
            }
        });
    }
    #[test]
    fn stream_copy_copies_every_byte_at_any_alignment() {
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for (offset, len) in [(0, 300_000 - 3), (1, 70_001), (13, 65_536), (5, 100)] {
            let mut buf = vec![0u8; len + 16];
            let dst = &mut buf[offset % 16..offset % 16 + len]; // destinations at any alignment too
            stream_copy(dst, &src[offset..offset + len]);
            assert_eq!(dst, &src[offset..offset + len], "offset {offset}, length {len}");
        }
    }

    #[test]
    fn stream_gather_puts_every_part_in_its_place_and_makes_a_store_fence_after_a_panic_too() {
        let src: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
        // Parts of every kind of size (under 4 KiB, 4 KiB, larger, empty), at any alignment, out of order.
        let parts = [(5000, 3..4099), (0, 100..150), (60_000, 7..70_008), (4200, 9..9), (50, 200..4296)];
        let mut dst = vec![0u8; 140_000];
        let mut want = dst.clone();
        for (at, r) in parts.iter().cloned() {
            want[at..at + r.len()].copy_from_slice(&src[r]);
        }
        stream_gather(&mut dst, parts.iter().map(|(at, r)| (*at, &src[r.clone()])));
        assert!(dst == want, "every part in its place, nothing else written");
        // A part past the end panics, like slicing, after the parts before it are copied.
        let mut small = vec![0u8; 8192];
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            stream_gather(&mut small, [(0, &src[..4096]), (4097, &src[..4096])])
        }));
        let msg = *out.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("a part of 4096 elements at 4097 in a destination of 8192"), "{msg}");
        assert_eq!(small[..4096], src[..4096]);
        assert!(small[4096..].iter().all(|&b| b == 0));
        // Where the end would overflow.
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            stream_gather(&mut small, [(usize::MAX, &src[..1])])
        }));
        assert!(out.is_err());
    }

    #[test]
    fn stream_gather_makes_one_store_fence_for_parts_in_order_and_one_before_a_part_meets_streamed_bytes() {
        let fences = || FENCES.with(|n| n.get());
        let src: Vec<u8> = (0..16_384u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut dst = vec![0u8; 16_384];
        let before = fences();
        let parts = (0..4).map(|i| (i * 4096, &src[i * 4096..(i + 1) * 4096]));
        stream_gather(&mut dst, parts);
        assert!(dst == src);
        assert_eq!(fences() - before, 1, "parts in order: one store fence, after the last");
        // A part over bytes streamed since the last store fence gets one before it; the later part wins.
        let (sevens, before) = (vec![7u8; 64], fences());
        stream_gather(&mut dst, [(0, &src[..4096]), (64, &sevens[..])]);
        assert!(dst[64..128].iter().all(|&b| b == 7) && dst[..64] == src[..64] && dst[128..4096] == src[128..4096]);
        assert_eq!(fences() - before, 2, "a store fence before the part that meets streamed bytes, one after");
        // Parts out of order that do not meet: one store fence.
        let before = fences();
        stream_gather(&mut dst, [(8192, &src[..4096]), (0, &src[4096..8192])]);
        assert!(dst[8192..12_288] == src[..4096] && dst[..4096] == src[4096..8192]);
        assert_eq!(fences() - before, 1);
    }

    const MIB: usize = 1 << 20;

    #[test]
    fn chunks_of_a_mebibyte_at_least_and_two_for_every_worker() {
        // 8 MiB of f32 on 8 workers with 8 MiB slots: 1 MiB chunks, so only 4 workers, 2 chunks each.
        assert_eq!(split(2 * MIB, 8, 2 * MIB, 4), (MIB / 4, 4));
        // 16 MiB: 16 chunks of 1 MiB on all 8 workers.
        assert_eq!(split(4 * MIB, 8, 2 * MIB, 4), (MIB / 4, 8));
        // 1 GiB: about six chunks a worker, capped at the slot (8 MiB): 128 chunks.
        assert_eq!(split(256 * MIB, 8, 2 * MIB, 4), (2 * MIB, 8));
        // Slots smaller than a mebibyte cap the chunk; one element still works.
        assert_eq!(split(MIB, 4, 1024, 4), (1024, 4));
        assert_eq!(split(1, 4, 2 * MIB, 4), (MIB / 4, 1));
        for n in [1, 1000, MIB, 3 * MIB + 7, 300 * MIB] {
            let (chunk, workers) = split(n, 8, 2 * MIB, 4);
            assert!(chunk >= 1 && (1..=8).contains(&workers), "{n}");
            assert!(workers == 1 || n.div_ceil(chunk) >= 2 * workers, "{n}: every worker used gets two chunks");
        }
    }
}
