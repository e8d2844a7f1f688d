//! The packed way: the CPU gathers the buffers into one pinned buffer, one copy goes up, the copy kernel
//! scatters them into the arena; back, the kernel gathers them, one copy comes down, the CPU unpacks
//! them. Its CPU work is pipelined with the copies: the set is cut into pieces, each goes up as soon as
//! it is packed and is unpacked as soon as it has landed, and the pool's threads share the packing and
//! the unpacking with the caller's.

use std::{
    collections::VecDeque,
    ops::Range,
    sync::{
        atomic::{AtomicUsize, Ordering::Relaxed},
        mpsc::{channel, Receiver, Sender},
        Condvar, Mutex,
    },
};

use anyhow::Context as _;

use common::{Dev, Landing, ScopeStream};
use kernels::TableCopy;

use crate::{
    buffers::{slices_mut, BufferPlacement},
    rig::{DeviceBuffers, GpuSide},
    ways::RoundTripBuffers,
};

/// The packed way moves a set in pieces of this many bytes or more (at most [`MAX_PIECES`]): each
/// piece costs a copy's fixed time each way, and the pieces let the CPU pack one while another is on
/// its way, and unpack one while the next arrives.
pub const PIECE_BYTES: usize = 512 << 10;
pub const MAX_PIECES: usize = 16;

/// The pieces the packed way cuts a set into: runs of consecutive buffers of about equal bytes.
pub fn pieces(places: &BufferPlacement) -> Vec<Range<usize>> {
    let wanted = (places.packed_len / PIECE_BYTES).clamp(1, MAX_PIECES);
    let share = places.bytes().div_ceil(wanted).max(1);
    let (mut out, mut start, mut bytes) = (Vec::new(), 0, 0);
    for (i, size) in places.sizes.iter().enumerate() {
        bytes += size;
        if bytes >= share && out.len() + 1 < wanted {
            out.push(start..i + 1);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < places.count() || out.is_empty() {
        out.push(start..places.count());
    }
    out
}

/// A set cut into pieces for the packed way: the buffers of each piece, the bytes of the packed buffer
/// it occupies, and the buffers' sources.
pub struct PackedPieces<'a> {
    places: &'a BufferPlacement,
    pieces: Vec<Range<usize>>,
    bounds: Vec<Range<usize>>,
    srcs: &'a [&'a [u8]],
}

/// A landed piece to unpack: its index, its part of the packed buffer, and the buffers it fills.
type UnpackJob<'a> = (usize, &'a [u8], Vec<&'a mut [u8]>);

impl<'a> PackedPieces<'a> {
    pub fn new(places: &'a BufferPlacement, srcs: &'a [&'a [u8]]) -> Self {
        let pieces = pieces(places);
        let bounds = pieces.iter().map(|piece| piece_bytes(places, piece)).collect();
        PackedPieces { places, pieces, bounds, srcs }
    }

    /// Packs piece `p` into `region`, its part of the packed buffer, and hands the region back.
    fn pack<'r>(&self, (p, region): (usize, &'r mut [u8])) -> (usize, &'r mut [u8]) {
        let piece = &self.pieces[p];
        pack(self.places, piece, &self.srcs[piece.clone()], region, self.bounds[p].start);
        (p, region)
    }

    fn unpack(&self, (p, region, to): UnpackJob<'_>) {
        unpack(self.places, &self.pieces[p], region, to, self.bounds[p].start);
    }

    /// `outs`, the set's host buffers in order, grouped by piece.
    fn by_piece<'o>(&self, outs: Vec<&'o mut [u8]>) -> Vec<Vec<&'o mut [u8]>> {
        let mut outs = outs.into_iter();
        self.pieces.iter().map(|p| outs.by_ref().take(p.len()).collect()).collect()
    }
}

/// Packs every buffer of `srcs` into `packed` (the packed buffer), piece by piece on the thread pool
/// (or on this thread), as the packed way does: for measuring what the CPU's side of it costs alone.
pub fn pack_all(places: &BufferPlacement, srcs: &[&[u8]], packed: &mut [u8], pool: bool) {
    let work = PackedPieces::new(places, srcs);
    let regions = slices_mut(packed, work.bounds.iter().cloned());
    rayon::in_place_scope(|scope| {
        for (p, region) in regions.into_iter().enumerate() {
            let work = &work;
            match pool {
                true => scope.spawn(move |_| {
                    work.pack((p, region));
                }),
                false => {
                    work.pack((p, region));
                }
            }
        }
    });
}

/// The other way: every buffer out of `packed` into `outs`, piece by piece.
pub fn unpack_all(places: &BufferPlacement, packed: &[u8], outs: Vec<&mut [u8]>, pool: bool) {
    let work = PackedPieces::new(places, &[]);
    let outs = work.by_piece(outs);
    rayon::in_place_scope(|scope| {
        for ((p, bytes), to) in work.bounds.iter().enumerate().zip(outs) {
            let (work, region) = (&work, &packed[bytes.clone()]);
            match pool {
                true => scope.spawn(move |_| work.unpack((p, region, to))),
                false => work.unpack((p, region, to)),
            }
        }
    });
}

/// The bytes of the packed buffer that a piece of buffers occupies.
fn piece_bytes(places: &BufferPlacement, piece: &Range<usize>) -> Range<usize> {
    match piece.is_empty() {
        true => 0..0,
        false => places.packed[piece.start]..places.packed_range(piece.end - 1).end,
    }
}

/// Copies the buffers `from[k]` of `piece` into their places in `region`, the piece's part of the packed
/// buffer (which starts at `base`).
/// Packs with streaming stores (`common::staging::stream_copy`, for buffers of 4 KiB or more): the
/// packed bytes go to memory without being read into the CPU's caches first, which halves the memory
/// traffic, and the copy engine then reads them from memory rather than from the caches. On the H200's
/// host that took the packed way over 1000 x 4 KiB from 610 to 545 µs, and over 100 x 64 KiB from 801 to
/// 608 µs.
fn pack(places: &BufferPlacement, piece: &Range<usize>, from: &[&[u8]], region: &mut [u8], base: usize) {
    for (k, src) in from.iter().enumerate() {
        let r = places.packed_range(piece.start + k);
        common::staging::stream_copy(&mut region[r.start - base..r.end - base], src);
    }
}

/// The buffers of `piece` out of `region` into `to`, likewise.
fn unpack(places: &BufferPlacement, piece: &Range<usize>, region: &[u8], to: Vec<&mut [u8]>, base: usize) {
    for (k, dst) in to.into_iter().enumerate() {
        let r = places.packed_range(piece.start + k);
        common::staging::stream_copy(dst, &region[r.start - base..r.end - base]);
    }
}

/// The pieces to pack, claimed one at a time: the caller's thread takes them from the first on, in the
/// order they go up, and the pool's threads from the last back. A sleeping pool took 50-100 µs to wake
/// on the H200's host: the caller starts at once, and never waits for a piece a waking thread holds.
struct PackClaims<'a> {
    front: AtomicUsize,
    back: AtomicUsize,
    regions: Vec<Mutex<Option<&'a mut [u8]>>>,
}

impl<'a> PackClaims<'a> {
    fn new(regions: Vec<&'a mut [u8]>) -> Self {
        let n = regions.len();
        let regions = regions.into_iter().map(|r| Mutex::new(Some(r))).collect();
        PackClaims { front: 0.into(), back: n.into(), regions }
    }

    /// Piece `p`'s region, if nobody has claimed it.
    fn take(&self, p: usize) -> Option<(usize, &'a mut [u8])> {
        Some((p, self.regions.get(p)?.lock().unwrap_or_else(|e| e.into_inner()).take()?))
    }

    /// The first piece nobody has claimed (the caller's way). The pool claims from the back, so once a
    /// piece is taken, every one after it is too.
    fn first(&self) -> Option<(usize, &'a mut [u8])> {
        self.take(self.front.fetch_add(1, Relaxed))
    }

    /// The last piece nobody has claimed (the pool's way); likewise, once one is taken, every one before it
    /// is too.
    fn last(&self) -> Option<(usize, &'a mut [u8])> {
        let taken = self.back.fetch_update(Relaxed, Relaxed, |b| b.checked_sub(1));
        self.take(taken.ok()?.checked_sub(1)?)
    }
}

/// Landed pieces waiting to be unpacked, for the pool's threads and the caller's.
#[derive(Default)]
struct LandedPieces<'a> {
    queue: Mutex<(VecDeque<UnpackJob<'a>>, bool)>,
    ready: Condvar,
}

impl<'a> LandedPieces<'a> {
    fn push(&self, job: UnpackJob<'a>) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).0.push_back(job);
        self.ready.notify_one();
    }

    fn close(&self) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.ready.notify_all();
    }

    /// The next piece to unpack; `None` once closed and empty (or, `wait` false, when empty).
    fn take(&self, wait: bool) -> Option<UnpackJob<'a>> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(job) = q.0.pop_front() {
                return Some(job);
            }
            if q.1 || !wait {
                return None;
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The packed way's round trip, its CPU work pipelined with the copies: the pieces are packed by the
/// pool's threads and this one, and each goes up as soon as it is packed; the copy kernel scatters every
/// buffer into the arena and gathers it back; each piece comes back on its own and is unpacked as soon
/// as it has landed, while the next is on its way. Returns the GPU time, ms.
pub fn packed_round_trip(
    on: GpuSide,
    places: &BufferPlacement,
    data: RoundTripBuffers,
    (packed_htod, packed_dtoh): (&mut [u8], &mut [u8]),
    device: &mut DeviceBuffers,
) -> anyhow::Result<f64> {
    let RoundTripBuffers { srcs, outs } = data;
    let work = PackedPieces::new(places, &srcs);
    let helpers = rayon::current_num_threads().min(work.pieces.len()).saturating_sub(1);
    let claims = PackClaims::new(slices_mut(packed_htod, work.bounds.iter().cloned()));
    let (dtoh_regions, outs) = (slices_mut(packed_dtoh, work.bounds.iter().cloned()), work.by_piece(outs));
    let (n, largest) = (places.count(), places.largest());
    let (tx, rx) = channel();
    rayon::in_place_scope(|pool| {
        spawn_packers(pool, helpers, (&claims, &work), tx);
        on.gpu.timed(on.streams, |s| {
            let (packed, arena, st) = (s.device(&mut device.packed), s.device(&mut device.arena), s.stream(0));
            let packed = packed.slice(0..places.packed_len);
            let table = s.device(&mut device.tables).slice(0..3 * n).read_only(); // the packed buffer's
            htod_as_packed(st, packed, (&claims, &work), &rx)?;
            on.kernels.copy_by_table(st, TableCopy::Scatter, packed.read_only(), table, arena, largest)?;
            on.kernels.copy_by_table(st, TableCopy::Gather, arena.read_only(), table, packed, largest)?;
            let landings = dtoh_regions
                .into_iter()
                .zip(&work.bounds)
                .map(|(region, bytes)| st.dtoh_landing(packed.slice(bytes.clone()), region)) // a piece back
                .collect::<anyhow::Result<Vec<_>>>()?;
            unpack_as_they_land(landings, outs, helpers, &work)
        })
    })
}

/// The pool's threads pack pieces from the last back, each sent to the caller's thread as it is done.
/// One task wakes the rest, so that the caller pays for waking one sleeping thread, not each.
fn spawn_packers<'s, 'a: 's>(
    pool: &rayon::Scope<'s>,
    helpers: usize,
    (claims, work): (&'s PackClaims<'a>, &'s PackedPieces<'s>),
    tx: Sender<(usize, &'a mut [u8])>,
) {
    let pack_all = move |tx: Sender<_>| {
        while let Some(claimed) = claims.last() {
            let _ = tx.send(work.pack(claimed));
        }
    };
    if helpers > 0 {
        pool.spawn(move |pool| {
            for _ in 1..helpers {
                let tx = tx.clone();
                pool.spawn(move |_| pack_all(tx));
            }
            pack_all(tx)
        });
    }
}

/// Each piece up as soon as it is packed, in order: this thread packs the next piece nobody has taken,
/// or else waits for a thread that has.
fn htod_as_packed<'s, 'a: 's>(
    st: ScopeStream<'s, '_>,
    packed: Dev<'s, u8>,
    (claims, work): (&PackClaims<'a>, &PackedPieces<'_>),
    packed_by_pool: &Receiver<(usize, &'a mut [u8])>,
) -> anyhow::Result<()> {
    let mut ready: Vec<Option<&'a mut [u8]>> = (0..work.pieces.len()).map(|_| None).collect();
    for (p, bytes) in work.bounds.iter().enumerate() {
        while ready[p].is_none() {
            let (q, region) = match claims.first() {
                Some(claimed) => work.pack(claimed),
                None => packed_by_pool.recv().context("a packing thread stopped")?,
            };
            ready[q] = Some(region);
        }
        let region: &'a [u8] = ready[p].take().expect("packed");
        st.htod(region, packed.slice(bytes.clone()))?; //                        cudaMemcpyAsync, a piece up
    }
    Ok(())
}

/// Each piece unpacked as soon as it has landed, while the next is on its way: this thread waits for the
/// pieces in order and hands each to the pool's threads (which wake while the GPU works), or unpacks it
/// itself where there are none; then it unpacks what is left with them.
fn unpack_as_they_land<'s>(
    landings: Vec<Landing<'s, '_, u8>>,
    outs: Vec<Vec<&'s mut [u8]>>,
    helpers: usize,
    work: &PackedPieces<'_>,
) -> anyhow::Result<()> {
    let landed = LandedPieces::default();
    rayon::in_place_scope(|pool| {
        let landed = &landed;
        let unpack_all = move || {
            while let Some(job) = landed.take(true) {
                work.unpack(job);
            }
        };
        if helpers > 0 {
            pool.spawn(move |pool| {
                for _ in 1..helpers {
                    pool.spawn(move |_| unpack_all());
                }
                unpack_all()
            });
        }
        let waited = landings.into_iter().zip(outs).enumerate().try_for_each(|(p, (landing, to))| {
            let region = landing.wait()?; //                                     landed: the host's again
            landed.push((p, region, to));
            // Without helpers, this thread unpacks each piece as soon as it has landed.
            let mine = if helpers == 0 { landed.take(false) } else { None };
            if let Some(job) = mine {
                work.unpack(job);
            }
            anyhow::Ok(())
        });
        landed.close();
        while let Some(job) = landed.take(false) {
            work.unpack(job);
        }
        waited
    })
}

#[cfg(test)]
mod tests {
    use kernels::cpu;

    use super::*;
    use crate::{
        buffers::{byte, BufferSet, POISON},
        results::ByteCheck,
    };

    /// The packed way's data path on the CPU: pack, the kernel's twin, unpack; every byte comes back.
    #[test]
    fn the_packed_round_trip_brings_every_byte_back() {
        let set = BufferSet::parse("4*3,1KiB*5,100*7").unwrap();
        let places = BufferPlacement::new(&set);
        let n = places.count();
        let mut h_in = vec![0u8; places.host_len];
        for (i, b) in places.host_slices_mut(&mut h_in).into_iter().enumerate() {
            b.iter_mut().enumerate().for_each(|(j, x)| *x = byte(i, j));
        }
        let (mut packed_htod, mut arena, mut packed_dtoh) =
            (vec![0u8; places.packed_len], vec![0u8; places.device_len], vec![0u8; places.packed_len]);
        pack_all(&places, &places.host_slices(&h_in), &mut packed_htod, true);
        cpu::copy_by_table(TableCopy::Scatter, &packed_htod, &places.packed_table(), &mut arena);
        cpu::copy_by_table(TableCopy::Gather, &arena, &places.packed_table(), &mut packed_dtoh);
        let mut h_out = vec![POISON; places.host_len];
        unpack_all(&places, &packed_dtoh, places.host_slices_mut(&mut h_out), false);
        let c = ByteCheck::of(places.host_slices(&h_in).into_iter(), places.host_slices(&h_out).into_iter());
        c.ensure("the packed round trip").unwrap();
        assert_eq!((c.buffers, c.bytes), (n, set.bytes()));
        // Zero-copy's table reaches the same arena from the host arena.
        let mut arena2 = vec![0u8; places.device_len];
        cpu::copy_by_table(TableCopy::Scatter, &h_in, &places.host_table(), &mut arena2);
        assert_eq!(arena, arena2);
        let wrong = ByteCheck::of([&[1u8, 2][..]].into_iter(), [&[1u8, 3][..]].into_iter());
        assert!(wrong.ensure("x").unwrap_err().to_string().contains("buffer 0, byte 1: got 0x03, expected 0x02"));
    }

    /// The caller's thread takes pieces from the front and the pool's from the back: each piece once,
    /// however they meet.
    #[test]
    fn claims_from_both_ends_take_each_piece_once() {
        for n in [0, 1, 2, 7, 16] {
            let mut buf = vec![0u8; n];
            let claims = PackClaims::new(buf.chunks_mut(1).collect());
            let got = Mutex::new(Vec::new());
            std::thread::scope(|t| {
                for _ in 0..3 {
                    t.spawn(|| {
                        while let Some((p, _)) = claims.last() {
                            got.lock().unwrap().push(p);
                        }
                    });
                }
                while let Some((p, _)) = claims.first() {
                    got.lock().unwrap().push(p);
                }
            });
            let mut got = got.into_inner().unwrap();
            got.sort();
            assert_eq!(got, (0..n).collect::<Vec<_>>(), "{n} pieces");
            assert!(claims.first().is_none() && claims.last().is_none());
        }
    }

    /// A set is cut into pieces of about equal bytes, every buffer in one, in order.
    #[test]
    fn the_packed_way_cuts_sets_into_pieces_of_whole_buffers() {
        for spec in ["4", "4KiB*1000", "1MiB*10", "model", "3MiB*1,4*100", "1KiB*5000"] {
            let places = BufferPlacement::new(&BufferSet::parse(spec).unwrap());
            let p = pieces(&places);
            assert_eq!(p.first().unwrap().start, 0, "{spec}");
            assert_eq!(p.last().unwrap().end, places.count(), "{spec}");
            assert!(p.windows(2).all(|w| w[0].end == w[1].start && !w[0].is_empty()), "{spec}: {p:?}");
            let most = MAX_PIECES.min((places.packed_len / PIECE_BYTES).max(1));
            assert!(p.len() <= most, "{spec}: {}", p.len());
        }
        let thousand = BufferPlacement::new(&BufferSet::uniform(1000, 4096));
        assert_eq!(pieces(&thousand).len(), 7, "4 MiB: pieces of 512 KiB or more");
    }
}
