//! What the scope costs, measured: the driver's calls made bare ([`bare_round_trip`]), to hold a
//! scope's copies against in the same run, and the scope's bookkeeping alone, without the driver
//! ([`BookkeepingProbe`], [`bookkeeping_time`]). Not an API to build on: a bare round trip waits for
//! its work before it returns, which is what makes it safe and what a program that overlaps anything
//! would not want.

use std::{ops::Range, time::Instant};

use crate::error::{refused, Foreign, Refusal};

use crate::{
    error::check,
    ffi,
    host::PinnedBuffer,
    memory::DeviceBuffer,
    order::{Book, Op, OpInfo},
    scope::synchronize_all,
    stream::Stream,
    view::DevAccess,
};

/// One `cuMemcpyHtoDAsync` per piece from `src` into `dst`, then one `cuMemcpyDtoHAsync` per piece from
/// `dst` back into `back`, all on `stream`, as bare driver calls (the calls a scope's `htod` and `dtoh`
/// make, without its checks and bookkeeping): the host's time in the calls, ms. A piece is its range in
/// the host buffers and where it starts in `dst`.
///
/// Every range is checked, and every buffer held to the stream's context, before anything is queued.
/// The stream is synchronized before the call returns, whether the calls succeeded or not, so no copy
/// outlives the borrows (where the driver cannot say that the GPU has stopped, the process aborts, as
/// a scope's end does).
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// let streams = gpu.streams(1)?;
/// let (src, mut back) = (gpu.pinned_from_fn(1 << 20, |i| i as u8)?, gpu.pinned::<u8>(1 << 20)?);
/// let mut dst = gpu.alloc::<u8>(1 << 20)?;
/// let pieces: Vec<_> = (0..256).map(|i| (i * 4096..(i + 1) * 4096, i * 4096)).collect(); // 4 KiB each
/// let ms = cuda_scope::probe::bare_round_trip(&streams[0], &src, &mut dst, &mut back, &pieces)?;
/// println!("{:.2} µs of the host's a bare copy", ms * 1e3 / 512.0);
/// # Ok(()) }
/// ```
pub fn bare_round_trip(
    stream: &Stream,
    src: &PinnedBuffer<u8>,
    dst: &mut DeviceBuffer<u8>,
    back: &mut PinnedBuffer<u8>,
    pieces: &[(Range<usize>, usize)],
) -> crate::Result<f64> {
    // A borrowed stream's owner may use it, or capture it, while these copies run: only a stream of the
    // crate's own is known to run them now.
    if stream.is_borrowed() {
        return refused("bare copies", Refusal::BorrowedStream);
    }
    let ctx = stream.context();
    let same = |other: &std::sync::Arc<crate::context::Context>| ctx.is(other);
    if !(same(src.context()) && same(dst.context()) && same(back.context())) {
        return refused("bare copies", Refusal::Foreign(Foreign::Context));
    }
    for (host, at) in pieces {
        let host_len = src.len().min(back.len());
        if host.start > host.end || host.end > host_len {
            return refused("bare copies", Refusal::OutOfBounds { range: host.clone(), len: host_len });
        }
        if at.checked_add(host.len()).is_none_or(|end| end > dst.len()) {
            let range = *at..at.saturating_add(host.len());
            return refused("bare copies", Refusal::OutOfBounds { range, len: dst.len() });
        }
    }
    ctx.make_current()?;
    // From the first copy queued, the stream is synchronized before the borrows end, even if something
    // below panicked.
    let synced = Synchronized { stream, done: false };
    let (raw, t) = (stream.raw(), Instant::now());
    // Every piece's copy one way, in order, until one fails.
    let each = |copy: &mut dyn FnMut(&Range<usize>, u64) -> ffi::CuResult, what: &str| {
        let mut pieces = pieces.iter().filter(|(host, _)| !host.is_empty());
        pieces.try_for_each(|(host, at)| check(copy(host, dst.ptr() + *at as u64), || what.into()))
    };
    let mut up = |h: &Range<usize>, d| {
        // SAFETY: inside `src` and `dst` (checked above), both of the stream's context, which is current;
        // both stay borrowed until the stream is synchronized below.
        unsafe { ffi::cuMemcpyHtoDAsync_v2(d, src[h.clone()].as_ptr().cast(), h.len(), raw) }
    };
    let mut down = |h: &Range<usize>, d| {
        // SAFETY: as above, into `back`, borrowed mutably until the stream is synchronized.
        unsafe { ffi::cuMemcpyDtoHAsync_v2(back[h.clone()].as_mut_ptr().cast(), d, h.len(), raw) }
    };
    let queued = each(&mut up, "a bare copy up").and_then(|()| each(&mut down, "a bare copy down"));
    let host_ms = t.elapsed().as_secs_f64() * 1e3;
    synced.now()?;
    queued.map(|()| host_ms)
}

/// Synchronizes its stream when dropped, unless [`Synchronized::now`] did (which says how it went):
/// where the driver cannot say that the GPU has stopped, the process aborts.
struct Synchronized<'a> {
    stream: &'a Stream,
    done: bool,
}

impl Synchronized<'_> {
    fn now(mut self) -> crate::Result<()> {
        self.done = true;
        synchronize_all(self.stream.context(), [self.stream])
    }
}

impl Drop for Synchronized<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = synchronize_all(self.stream.context(), [self.stream]);
        }
    }
}

/// The bookkeeping of a scope alone, without the driver: what ordering by byte ranges costs the host
/// for each operation, apart from the driver's calls. Operation i goes on stream i % streams, each over its own 4 KiB of one buffer (a batch of small copies), or,
/// `one_range`, all over the same 4 bytes (so that each waits for a fence after the one before, and is
/// followed by one).
///
/// ```
/// let mut probe = cuda_scope::probe::BookkeepingProbe::new(2, true); // every operation on the same 4 bytes
/// let t = std::time::Instant::now();
/// (0..1000).for_each(|i| probe.step(i)); // each on the other stream from the last, so each waits
/// println!("{:?} an operation", t.elapsed() / 1000);
/// ```
pub struct BookkeepingProbe {
    book: Book,
    streams: usize,
    one_range: bool,
    buffer: usize,
}

impl BookkeepingProbe {
    /// A book for `streams` streams; `one_range`: every operation over the same 4 bytes.
    ///
    /// ```
    /// let mut probe = cuda_scope::probe::BookkeepingProbe::new(4, false);
    /// (0..1000).for_each(|i| probe.step(i)); // no GPU needed: the driver is not called
    /// probe.reset();
    /// ```
    pub fn new(streams: usize, one_range: bool) -> BookkeepingProbe {
        let streams = streams.max(1);
        let mut probe = BookkeepingProbe { book: Book::default(), streams, one_range, buffer: 0 };
        probe.reset();
        probe
    }

    /// Empties the book, keeping what it allocated, as a scope's is reused.
    ///
    /// ```
    /// let mut probe = cuda_scope::probe::BookkeepingProbe::new(4, false);
    /// for _ in 0..3 {
    ///     probe.reset(); // as each scope reuses the last one's book
    ///     (0..1000).for_each(|i| probe.step(i));
    /// }
    /// ```
    pub fn reset(&mut self) {
        self.book.reset(self.streams);
        self.buffer = self.book.lend(false, false);
    }

    /// Plans and notes operation `i`.
    ///
    /// ```
    /// let mut probe = cuda_scope::probe::BookkeepingProbe::new(4, false);
    /// (0..100).for_each(|i| probe.step(i)); // operation i on stream i % 4, over its own 4 KiB
    /// ```
    #[inline(never)]
    pub fn step(&mut self, i: usize) {
        let (book, j) = (&mut self.book, i % self.streams);
        let at = (i % (1 << 40)) * 4096; // far past any scope's count of operations, and no overflow
        let bytes = if self.one_range { 0..4 } else { at..at + 4096 };
        let a = [DevAccess { scope: 1, buffer: self.buffer, bytes, write: true }];
        let info = OpInfo::copy(&Op { kind: "H2D", what: "memcpy HtoD" }, 4096);
        // The short way where the scope takes it.
        if let Some(plan) = book.plan_one(j, &a[0]) {
            if let Some(f) = plan.wait {
                book.waited_again(j, f);
            }
            book.queued(j, Some(&a[0]), info, plan.shared);
            if plan.shared {
                book.add_fence(j);
            }
            return;
        }
        let shared = book.plan(j, &a, false).unwrap_or(false);
        for n in 0..book.needs.len() {
            let (k, seq) = (book.needs[n].stream, book.needs[n].seq);
            if !book.clocks.ordered(j, k, seq) {
                let f = book.fence_for(n).unwrap_or_else(|| book.add_fence(k));
                book.waited(j, f, Some((n, &|| String::from("an operation"))));
            }
        }
        book.queued(j, None, info, shared);
        if shared {
            book.add_fence(j);
        }
    }
}

/// The bookkeeping alone ([`BookkeepingProbe`]) of `ops` operations: how long that took, the book made
/// and warmed first.
///
/// ```
/// let t = cuda_scope::probe::bookkeeping_time(10_000, 4, false);
/// println!("{:.3} µs an operation", t.as_secs_f64() * 1e6 / 10_000.0);
/// ```
pub fn bookkeeping_time(ops: usize, streams: usize, one_range: bool) -> std::time::Duration {
    let mut probe = BookkeepingProbe::new(streams, one_range);
    let mut pass = || {
        probe.reset();
        let t = std::time::Instant::now();
        (0..ops).for_each(|i| probe.step(i));
        t.elapsed()
    };
    pass();
    pass()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;

    /// Every piece goes up and comes back where it was; the host's time is measured; the stream is idle on
    /// return.
    #[test]
    #[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
    fn a_bare_round_trip_brings_every_piece_back() {
        let gpu = crate::Gpu::init().unwrap();
        let streams = gpu.streams(1).unwrap();
        let src = gpu.pinned_from_fn(64 << 10, |i| (i * 7 + 1) as u8).unwrap();
        let mut back = gpu.pinned::<u8>(64 << 10).unwrap();
        let mut dst = gpu.alloc::<u8>(1 << 20).unwrap();
        // Scattered, out of order, one empty.
        let pieces: Vec<(Range<usize>, usize)> =
            (0..16).rev().map(|i| (i * 4096..i * 4096 + 4000, (15 - i) * 65536)).chain([(5..5, 0)]).collect();
        let ms = bare_round_trip(&streams[0], &src, &mut dst, &mut back, &pieces).unwrap();
        assert!(ms > 0.0 && ms.is_finite(), "{ms}");
        for i in 0..16 {
            let r = i * 4096..i * 4096 + 4000;
            assert_eq!(back[r.clone()], src[r], "piece {i}");
            assert!(back[i * 4096 + 4000..(i + 1) * 4096].iter().all(|&b| b == 0), "only the pieces, piece {i}");
        }
        streams[0].synchronize().unwrap();
    }

    /// A piece outside any of the buffers, or a buffer of another context, is refused before anything is
    /// queued: the buffer back stays untouched.
    #[test]
    #[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
    fn pieces_outside_the_buffers_and_other_contexts_are_refused() {
        let gpu = crate::Gpu::init().unwrap();
        let streams = gpu.streams(1).unwrap();
        let src = gpu.pinned_from_fn(8192, |i| i as u8 | 1).unwrap();
        let mut back = gpu.pinned::<u8>(4096).unwrap();
        let mut dst = gpu.alloc::<u8>(8192).unwrap();
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 10..5;
        for bad in
            [(0..4097, 0), (0..4096, 4097), (4096..8192, 0), (0..16, usize::MAX - 4), (reversed, 0), (5000..5000, 0)]
        {
            let err = bare_round_trip(&streams[0], &src, &mut dst, &mut back, &[(0..16, 0), bad]).unwrap_err();
            let out = matches!(&err, crate::Error::Refused(r) if matches!(r.why, Refusal::OutOfBounds { .. }));
            assert!(out, "{err:#}");
        }
        assert!(back.iter().all(|&b| b == 0), "nothing was queued");
        let foreign = Context::separate().unwrap();
        let mut theirs = DeviceBuffer::<u8>::zeroed(&foreign, "GPU 0", 8192).unwrap();
        let another =
            |e: &crate::Error| matches!(e, crate::Error::Refused(r) if r.why == Refusal::Foreign(Foreign::Context));
        let err = bare_round_trip(&streams[0], &src, &mut theirs, &mut back, &[(0..16, 0)]).unwrap_err();
        assert!(another(&err), "{err:#}");
        let their_stream = Stream::new(&foreign, false).unwrap();
        let err = bare_round_trip(&their_stream, &src, &mut dst, &mut back, &[(0..16, 0)]).unwrap_err();
        assert!(another(&err), "{err:#}");
        drop((gpu, theirs, their_stream));
    }
}
