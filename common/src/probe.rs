//! The driver's calls made bare, beside the scope's: what a lesson holds the scope's price against in
//! the same run. Not an API to build on: each call here waits for its work before it returns, which is
//! what makes it safe and what a program that overlaps anything would not want.

use std::{ops::Range, time::Instant};

use crate::error::{refused, Foreign, Refusal};

use crate::{
    ffi::{self, check},
    host::PinnedBuffer,
    memory::DeviceBuffer,
    scope::synchronize_all,
    stream::Stream,
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
pub fn bare_round_trip(
    stream: &Stream,
    src: &PinnedBuffer<u8>,
    dst: &mut DeviceBuffer<u8>,
    back: &mut PinnedBuffer<u8>,
    pieces: &[(Range<usize>, usize)],
) -> crate::Result<f64> {
    let ctx = stream.context();
    let same = |other: &std::sync::Arc<crate::context::Context>| ctx.is(other);
    if !(same(src.context()) && same(dst.context()) && same(back.context())) {
        return refused("bare copies", Refusal::Foreign(Foreign::Context));
    }
    for (host, at) in pieces {
        let fits = host.start <= host.end && host.end <= src.len() && host.end <= back.len();
        if !fits || at.checked_add(host.len()).is_none_or(|end| end > dst.len()) {
            return refused("bare copies", Refusal::OutOfBounds { range: *at..at.saturating_add(host.len()), len: dst.len() });
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
            assert!(format!("{err:#}").contains("outside the buffers"), "{err:#}");
        }
        assert!(back.iter().all(|&b| b == 0), "nothing was queued");
        let foreign = Context::separate().unwrap();
        let mut theirs = DeviceBuffer::<u8>::zeroed(&foreign, "GPU 0", 8192).unwrap();
        let err = bare_round_trip(&streams[0], &src, &mut theirs, &mut back, &[(0..16, 0)]).unwrap_err();
        assert!(format!("{err:#}").contains("another context"), "{err:#}");
        let their_stream = Stream::new(&foreign, false).unwrap();
        let err = bare_round_trip(&their_stream, &src, &mut dst, &mut back, &[(0..16, 0)]).unwrap_err();
        assert!(format!("{err:#}").contains("another context"), "{err:#}");
        drop((gpu, theirs, their_stream));
    }
}
