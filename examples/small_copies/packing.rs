//! The packed way: the CPU gathers the buffers into one pinned buffer, one copy goes up, the copy kernel
//! scatters them into the arena; back, the kernel gathers them, one copy comes down, the CPU unpacks
//! them. Its CPU work is pipelined with the copies, and shared by several threads at a fine grain: the
//! packed buffer is cut into items of 64 KiB, whatever the buffers, that the threads pack in order, the
//! caller's among them, and into pieces (runs of items, 512 KiB or more) that the copies move. A piece goes up as
//! soon as its items are packed, and its items are unpacked, by every thread, as soon as it has landed,
//! while the next is on its way. So even the first piece and the last are shared by the threads: with a
//! piece to a thread, the link waits for one thread to pack the first and the caller for one to unpack
//! the last (65-75 µs each of a 450-530 µs round trip of 1000 x 4 KiB in this project's runs).
//!
//! The two directions take turns: every piece up, then every piece back. The kernels run in two parts
//! on a stream of their own ([`PackLayout::kernel_parts`]): those of every piece but the last while the
//! last goes up, and the last piece's while the others come back, so the copies back follow the last
//! copy up at once instead of waiting for the kernels over the whole buffer (the first copy back starts
//! 4-8 µs after the last copy up lands, not 11-21 µs). The last part's kernels are queued between the
//! copies back, not before them, where the first copy back would wait for the caller to queue them. (A
//! set of one piece has one part, on the copies' stream.) Bringing each piece back as soon as it is up,
//! while later ones go up and are packed, is no faster: with the CPU packing, unpacking and both copies
//! at once, the host's memory is the limit, and the copies slowed from 42-45 GB/s to 9-17 GB/s each while
//! they overlapped in this project's runs. The CPU's side alone takes longer than one copy of the bytes
//! each way.
//!
//! Where the time goes in a round trip of 1000 x 4 KiB, in this project's runs: the first piece, of 576 KiB,
//! is packed 43-66 µs after the call, the last 103-148 µs after it; the pieces go up back to back, 1.3 µs
//! apart, at about 42 GB/s (the copies, not the crew, set the pace once the first is up); the two kernels
//! take about 7 µs; the pieces come down at 27-40 GB/s as the crew unpacks them beside the copies.
//! Each byte crosses the host's memory three times each way (the crew reads it and writes it, the copy
//! reads or writes it), and the host moved 70-110 GB/s of that as the pieces came down: its memory, not
//! the link, decides the packed way.
//!
//! The crew is woken to unpack before the last part's kernels and the pieces back are queued, not after
//! them, so that it is there before the first piece lands; what it unpacks is cut in two allocations, not
//! one an item (which took 40 µs for 1000 buffers), at the scope's start while the crew wakes, not in the
//! caller's time between the last piece up and the kernels.
//!
//! How the crew stores its bytes:
//! - Packing streams past the cache. Plain stores were slower, and so were plain stores with a `cldemote`
//!   after each line, meant to move it to the shared cache where a copy up reads it. A whole line in one
//!   streaming store (AVX-512) in place of four could not be told apart.
//! - Unpacking stores parts smaller than an item through the cache, where the program reads them next,
//!   and streams larger ones: a trade for small buffers, which the packed way serves (1000 x 4 KiB
//!   0.92x-1.00x of streaming every part), against large ones, which the copies serve (the model-like set
//!   0.98x-1.04x).
//! - Packing fences once an item, not once a buffer (`cuda_scope::staging::stream_gather`). A store fence
//!   waits until the streaming stores before it have left the core, so packing alone takes about a quarter
//!   less time; the round trip does not follow, since it waits for the host's memory, shared with the
//!   copies, not for the packing alone.
//!
//! Left out, being no faster beyond the noise or slower (see docs/design.md, Many small copies): a first
//! piece of one item doubling to 512 KiB (its extra pieces cost a copy's fixed time each); items of 32 or
//! 128 KiB, pieces of 256 KiB or 1 MiB; each piece's kernels on a stream of its own (the caller, queueing
//! them, held up the copies going up); a ring of a few pinned slots each way, reused to keep the staging
//! in the caches (the wait before a slot is reused costs more than the cache saves); prefetching the next
//! buffers; the caller unpacking between polls of the pending downloads; the crew kept spinning between
//! round trips, or every thread woken by the caller; 2 MiB pages for the pinned buffers.
//!
//! The lesson's grid holds the packed way against its parts measured alone in the same run
//! ([`crate::results::packed_table`]), so that each run says what limits it on the host it ran on.

use std::{
    ops::Range,
    sync::{
        atomic::{
            AtomicBool, AtomicUsize,
            Ordering::{AcqRel, Acquire, Relaxed, Release},
        },
        Mutex, OnceLock,
    },
};

use cuda_scope::{
    staging::{stream_copy, stream_gather},
    Dev, PartedSlice, PendingDownload, ScopeStream,
};
use kernels::TableCopy;

use crate::{
    buffers::{slices_mut, BufferPlacement},
    rig::{DeviceBuffers, GpuSide},
    ways::RoundTripBuffers,
};

/// What one thread packs or unpacks at a time: the packed buffer cut into items of this many bytes
/// (the last shorter), whatever the buffers, so that the threads share a large buffer as well as many
/// small ones, and the last piece to land is unpacked by them all.
pub const ITEM_BYTES: usize = 64 << 10;
/// What one copy moves: runs of items of this many bytes or more, at most [`MAX_PIECES`]. Each piece
/// costs a copy's fixed time each way; the pieces let one go up while the next is packed, and one be
/// unpacked while the next comes down.
pub const PIECE_BYTES: usize = 512 << 10;
pub const MAX_PIECES: usize = 16;
/// The most threads that pack and unpack (the caller's and the pool's): the host's memory, not its
/// cores, limits them beyond that (16 threads wrote memory at about 67 GB/s in this project's runs, a
/// little more than the link moves). Six rather than eight: for 1000 x 4 KiB, 4, 6, 8, 10, 12 and 16
/// threads took medians of 2.45x, 2.02x, 2.09x, 2.13x, 2.15x and 2.15x one copy's wall in this project's
/// runs, while the CPU's side alone fell from 338 µs to 278, 233, 209, 218 and 198: more threads pack
/// faster alone, and slow the copies they run beside more than that (see docs/design.md, Many small copies).
pub const MOST_THREADS: usize = 6;

/// One part of a host buffer an item fills: where it starts in the item, and its bytes; taken once, by
/// the thread that unpacks the item.
type ItemPart<'o> = Mutex<Option<(usize, &'o mut [u8])>>;

/// How the packed way cuts a set: the packed buffer into items (of [`ITEM_BYTES`], what one thread packs
/// at a time) and pieces (runs of items, what one copy moves).
pub struct PackLayout {
    /// The packed buffer's length.
    len: usize,
    /// How many items it is cut into.
    pub items: usize,
    /// The items of each piece.
    pub pieces: Vec<Range<usize>>,
}

impl PackLayout {
    pub fn new(places: &BufferPlacement) -> PackLayout {
        let len = places.packed_len;
        let items = len.div_ceil(ITEM_BYTES).max(1);
        let per_piece = items.div_ceil((len / PIECE_BYTES).clamp(1, MAX_PIECES));
        let pieces = (0..items).step_by(per_piece).map(|i| i..(i + per_piece).min(items)).collect();
        PackLayout { len, items, pieces }
    }

    pub fn item_bytes(&self, i: usize) -> Range<usize> {
        i * ITEM_BYTES..((i + 1) * ITEM_BYTES).min(self.len)
    }

    pub fn piece_bytes(&self, p: usize) -> Range<usize> {
        let items = &self.pieces[p];
        self.item_bytes(items.start).start..self.item_bytes(items.end - 1).end
    }

    /// The buffers piece `p` holds, whole or in part.
    pub fn piece_buffers(&self, places: &BufferPlacement, p: usize) -> Range<usize> {
        let bytes = self.piece_bytes(p);
        let first = places.packed.partition_point(|&at| at <= bytes.start).saturating_sub(1);
        first..places.packed.partition_point(|&at| at < bytes.end)
    }

    /// What the copy kernel's launches cover, in pieces: every piece but the last, then the last. The
    /// first part's kernels run while the last piece goes up, so that the copies back can follow the
    /// last copy up at once; only the last piece's kernels come between. Two launches each, not two
    /// a piece: queueing a launch costs the caller, who queues the copies, more than the GPU takes to
    /// run it over a piece.
    pub fn kernel_parts(&self) -> Vec<Range<usize>> {
        let n = self.pieces.len();
        [0..n - 1, n - 1..n].into_iter().filter(|part| !part.is_empty()).collect()
    }

    /// The packed buffer's bytes of `pieces`.
    pub fn bytes_of(&self, pieces: &Range<usize>) -> Range<usize> {
        self.piece_bytes(pieces.start).start..self.piece_bytes(pieces.end - 1).end
    }

    /// The copy kernel's table cut where [`PackLayout::kernel_parts`] cut the packed buffer: each part of
    /// a buffer in a kernel part, as (offset in the part, offset in the arena, bytes), part after part;
    /// and the entries of each part. A part's kernels then touch its bytes of the packed buffer only, so
    /// the scope orders them after its own copies up, and its copies back after them, not after the whole
    /// buffer's.
    pub fn part_table(&self, places: &BufferPlacement) -> (Vec<u64>, Vec<Range<usize>>) {
        let parts = self.kernel_parts();
        let (mut table, mut entries) = (Vec::with_capacity(3 * (places.count() + parts.len())), Vec::new());
        for part in &parts {
            let first = table.len() / 3;
            for (b, bytes, at) in parts_in(places, self.bytes_of(part)) {
                table.extend([at as u64, (places.device[b] + bytes.start) as u64, bytes.len() as u64]);
            }
            entries.push(first..table.len() / 3);
        }
        (table, entries)
    }

    /// The parts of buffers item `i` holds: (buffer, its bytes in the item, where they start in the item).
    fn in_item<'p>(
        &self,
        places: &'p BufferPlacement,
        i: usize,
    ) -> impl Iterator<Item = (usize, Range<usize>, usize)> + 'p {
        parts_in(places, self.item_bytes(i))
    }

    /// The packed buffer (its first `packed_len` bytes), to be written item by item and read piece by piece.
    fn parted<'a>(&self, packed: &'a mut [u8]) -> anyhow::Result<PartedSlice<'a, u8>> {
        anyhow::ensure!(packed.len() >= self.len, "a packed buffer of {} bytes for {}", packed.len(), self.len);
        let ends = (0..self.items).map(|i| self.item_bytes(i).end).collect();
        Ok(PartedSlice::new(&mut packed[..self.len], ends, self.pieces.iter().map(|p| p.end).collect())?)
    }

    /// `outs`, the set's host buffers in order, cut where the items cut them, in the items' order (the
    /// buffers lie in the packed buffer in order), and where each item's parts begin (`items + 1` of
    /// them): in one allocation each, not one an item (1000 x 4 KiB took 40 µs the other way).
    fn by_item<'o>(&self, places: &BufferPlacement, outs: Vec<&'o mut [u8]>) -> (Vec<ItemPart<'o>>, Vec<usize>) {
        let (mut parts, mut starts) = (Vec::with_capacity(outs.len() + self.items), Vec::with_capacity(self.items + 1));
        for (b, mut rest) in outs.into_iter().enumerate() {
            let mut at = places.packed[b];
            while !rest.is_empty() {
                let i = at / ITEM_BYTES;
                debug_assert!(starts.len() <= i + 1, "buffers in the packed buffer in order");
                starts.resize(starts.len().max(i + 1), parts.len());
                let item = self.item_bytes(i);
                let take = (item.end - at).min(rest.len());
                let (part, tail) = std::mem::take(&mut rest).split_at_mut(take);
                parts.push(Mutex::new(Some((at - item.start, part))));
                (rest, at) = (tail, at + take);
            }
        }
        starts.resize(self.items + 1, parts.len());
        (parts, starts)
    }
}

/// The parts of buffers that lie in `range` of the packed buffer, in order: (buffer, its bytes there, where
/// they start in `range`). An item's, which one thread packs, or a kernel part's, which one launch covers.
fn parts_in(places: &BufferPlacement, range: Range<usize>) -> impl Iterator<Item = (usize, Range<usize>, usize)> + '_ {
    let first = places.packed.partition_point(|&at| at <= range.start).saturating_sub(1);
    (first..places.count()).take_while(move |&b| places.packed[b] < range.end).filter_map(move |b| {
        let whole = places.packed_range(b);
        let (start, end) = (whole.start.max(range.start), whole.end.min(range.end));
        (start < end).then(|| (b, start - whole.start..end - whole.start, start - range.start))
    })
}

/// How many threads pack and unpack a set cut into `items` items: the caller's and the pool's, at most
/// [`MOST_THREADS`], and no more than there are items.
pub fn crew_threads(items: usize) -> usize {
    rayon::current_num_threads().min(MOST_THREADS).min(items).max(1)
}

/// The packing side: the items, claimed in order by every thread, each packed into its part of the
/// packed buffer.
struct Packing<'a, 'w> {
    layout: &'w PackLayout,
    places: &'w BufferPlacement,
    srcs: &'w [&'a [u8]],
    packed: PartedSlice<'a, u8>,
    next: AtomicUsize,
}

impl<'a, 'w> Packing<'a, 'w> {
    /// The items of `layout` to pack from `srcs` into `packed` (its first `packed_len` bytes), none taken.
    fn new(
        (layout, places): (&'w PackLayout, &'w BufferPlacement),
        srcs: &'w [&'a [u8]],
        packed: &'a mut [u8],
    ) -> anyhow::Result<Self> {
        Ok(Packing { layout, places, srcs, packed: layout.parted(packed)?, next: AtomicUsize::new(0) })
    }

    /// Packs the next item nobody has taken; false when every item is taken.
    fn pack_next(&self) -> bool {
        if self.next.load(Relaxed) >= self.packed.parts() {
            return false;
        }
        let i = self.next.fetch_add(1, Relaxed);
        let Some(mut part) = self.packed.claim(i) else { return false };
        // One fence for the item, not one a buffer: with a fence a 4 KiB buffer, packing alone took a third longer.
        stream_gather(&mut part, self.layout.in_item(self.places, i).map(|(b, bytes, at)| (at, &self.srcs[b][bytes])));
        true
    }

    /// A pool thread's share: items until none is left.
    fn help(&self) {
        while self.pack_next() {}
    }

    /// Piece `p` once packed; meanwhile this thread packs the next items itself.
    fn piece(&self, p: usize) -> anyhow::Result<&'a [u8]> {
        let mut spins = 0;
        loop {
            if let Some(piece) = self.packed.piece(p) {
                return Ok(piece);
            }
            anyhow::ensure!(!self.packed.failed(), "a packing thread panicked");
            if !self.pack_next() {
                pause(&mut spins); // its last items are in other threads' hands
            }
        }
    }
}

/// The unpacking side: each item's bytes of its landed piece, published in order as the pieces land,
/// and its buffers, each item claimed once, in order, by every thread.
struct Unpacking<'s, 'o, 'w> {
    layout: &'w PackLayout,
    landed_bytes: Vec<OnceLock<&'s [u8]>>,
    /// The parts of the host's buffers, item by item: item i's are `parts[starts[i]..starts[i + 1]]`.
    parts: Vec<ItemPart<'o>>,
    starts: Vec<usize>,
    /// Items whose piece has landed (a prefix), the next to claim, and whether no more will land.
    landed: AtomicUsize,
    next: AtomicUsize,
    closed: AtomicBool,
}

impl<'s, 'o, 'w> Unpacking<'s, 'o, 'w> {
    fn new(layout: &'w PackLayout, places: &'w BufferPlacement, outs: Vec<&'o mut [u8]>) -> Self {
        let landed_bytes = (0..layout.items).map(|_| OnceLock::new()).collect();
        let (landed, next, closed) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicBool::new(false));
        let (parts, starts) = layout.by_item(places, outs);
        Unpacking { layout, landed_bytes, parts, starts, landed, next, closed }
    }

    /// Piece `p` has landed in `region`: its items may be unpacked.
    fn landed(&self, p: usize, region: &'s [u8]) {
        let start = self.layout.piece_bytes(p).start;
        for i in self.layout.pieces[p].clone() {
            let bytes = self.layout.item_bytes(i);
            let _ = self.landed_bytes[i].set(&region[bytes.start - start..bytes.end - start]);
        }
        self.landed.store(self.layout.pieces[p].end, Release);
    }

    /// No more pieces will land (all have, or the round trip failed).
    fn close(&self) {
        self.closed.store(true, Release);
    }

    /// Unpacks the next landed item nobody has taken; `None` when there is none yet, `Some(false)` when
    /// there will be none.
    fn unpack_next(&self) -> Option<bool> {
        let i = self.next.load(Acquire);
        let closed = self.closed.load(Acquire); // read before `landed`: a close after that landed the rest
        if i >= self.layout.items || (closed && i >= self.landed.load(Acquire)) {
            return Some(false);
        }
        if i >= self.landed.load(Acquire) || self.next.compare_exchange(i, i + 1, AcqRel, Relaxed).is_err() {
            return None;
        }
        let from = self.landed_bytes[i].get().expect("landed");
        for part in &self.parts[self.starts[i]..self.starts[i + 1]] {
            if let Some((at, dst)) = part.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let from = &from[at..at + dst.len()];
                // A part smaller than an item is most often a small buffer, the program's to read next:
                // it stays in the cache. A larger one streams past it, as the packed buffer does.
                match dst.len() < ITEM_BYTES {
                    true => dst.copy_from_slice(from),
                    false => stream_copy(dst, from),
                }
            }
        }
        Some(true)
    }

    /// Items as they land, until every one is unpacked or no more will land.
    fn help(&self) {
        let mut spins = 0;
        loop {
            match self.unpack_next() {
                Some(true) => spins = 0,
                Some(false) => return,
                None => pause(&mut spins), // the next piece is on its way
            }
        }
    }
}

/// Waits a moment for another thread: spinning, which notices at once (a sleeping thread takes tens of
/// microseconds to wake), and after a while yielding the core, should
/// the threads outnumber the cores.
fn pause(spins: &mut u32) {
    *spins += 1;
    match *spins < 256 {
        true => std::hint::spin_loop(),
        false => std::thread::yield_now(),
    }
}

/// The packed way's round trip: every thread packs items in order, and each piece goes up as soon as
/// its items are packed; the copy kernel scatters the buffers into the arena and gathers them back, in
/// two parts ([`PackLayout::kernel_parts`]) on a stream of their own: every piece but the last while the
/// last goes up, and the last while the others come back. Each piece comes back on its own once every
/// piece is up and its part's kernels are done, and its items are unpacked by every thread as soon as
/// it has landed, while the next is on its way. Returns the GPU time, ms.
pub fn packed_round_trip(
    on: GpuSide,
    places: &BufferPlacement,
    data: RoundTripBuffers,
    (packed_htod, packed_dtoh): (&mut [u8], &mut [u8]),
    device: &mut DeviceBuffers,
) -> anyhow::Result<f64> {
    let RoundTripBuffers { srcs, outs } = data;
    let layout = PackLayout::new(places);
    let packing = Packing::new((&layout, places), &srcs, packed_htod)?;
    let helpers = crew_threads(layout.items) - 1;
    let dtoh_regions = slices_mut(packed_dtoh, (0..layout.pieces.len()).map(|p| layout.piece_bytes(p)));
    let (parts, largest) = (layout.kernel_parts(), places.largest());
    // One part (one piece): its kernels on the copies' stream, and a scope of that stream alone.
    let on = if parts.len() > 1 { on } else { on.first(1) };
    let (last, apart) = (parts.len() - 1, on.streams.len() > 1);
    let DeviceBuffers { arena, packed, tables, part_tables } = device;
    rayon::in_place_scope(|pool| {
        on_helpers(pool, helpers, || packing.help());
        on.gpu.timed(on.streams, |s| {
            let unpacking = Unpacking::new(&layout, places, outs);
            let (packed, arena) = (s.device(packed).slice(0..places.packed_len), s.device(arena));
            let tables = s.device(tables);
            // One part (one piece): its kernels on the copies' stream.
            let (copies, kernels) = (s.stream(0), s.stream(apart as usize));
            // Part k's kernels, which the scope orders after its pieces' copies up.
            let part_kernels = |k: usize| {
                let (bytes, table) = (packed.slice(layout.bytes_of(&parts[k])), tables.slice(part_tables[k].clone()));
                let table = table.read_only();
                on.kernels.copy_by_table(kernels, TableCopy::Scatter, bytes.read_only(), table, arena, largest)?;
                on.kernels.copy_by_table(kernels, TableCopy::Gather, arena.read_only(), table, bytes, largest)
            };
            htod_as_packed(copies, packed, &packing, |p| match parts.iter().position(|part| part.end == p + 1) {
                Some(k) if k < last => Ok(part_kernels(k)?),
                // The last copy up: an event after it, for the last part's kernels to wait for alone,
                // not for the copies back queued after it first.
                Some(_) if apart => Ok(copies.record_event().map(drop)?),
                _ => Ok(()),
            })?;
            unpack_as_they_land(&unpacking, helpers, || {
                let mut pending = Vec::with_capacity(layout.pieces.len());
                for (p, region) in dtoh_regions.into_iter().enumerate() {
                    if p == parts[last].start {
                        part_kernels(last)?;
                    }
                    let back = copies.dtoh_pending(packed.slice(layout.piece_bytes(p)), region)?; // a piece back
                    pending.push(back);
                }
                Ok(pending)
            })
        })
    })
}

/// `work` on `helpers` of the pool's threads. One task wakes the rest, so that the caller pays for
/// waking one sleeping thread, not each (a sleeping pool took 20-100 µs to wake in this project's runs).
fn on_helpers<'s>(pool: &rayon::Scope<'s>, helpers: usize, work: impl Fn() + Send + Sync + Copy + 's) {
    if helpers > 0 {
        pool.spawn(move |pool| {
            for _ in 1..helpers {
                pool.spawn(move |_| work());
            }
            work()
        });
    }
}

/// Each piece up as soon as it is packed, in order, this thread packing items meanwhile; `then(p)` after
/// piece `p` (the kernels, where a part ends).
fn htod_as_packed<'s, 'a: 's>(
    st: ScopeStream<'s, '_>,
    packed: Dev<'s, u8>,
    packing: &Packing<'a, '_>,
    mut then: impl FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for p in 0..packing.layout.pieces.len() {
        let piece = packing.piece(p)?;
        st.htod(piece, packed.slice(packing.layout.piece_bytes(p)))?; //          cudaMemcpyAsync, a piece up
        then(p)?;
    }
    Ok(())
}

/// The crew woken to unpack, then `queue`'s work (the pieces back, and the last part's kernels before
/// the last piece's, which the GPU takes longer over than a sleeping thread takes to wake); each
/// piece's items are unpacked as soon as it has landed, by the pool's threads, while this one waits for
/// the pieces in order, then unpacks what is left with them. However this ends, by an error or a panic
/// too, the crew stops waiting for pieces that will not land.
fn unpack_as_they_land<'s, 'e: 's>(
    unpacking: &Unpacking<'s, '_, '_>,
    helpers: usize,
    queue: impl FnOnce() -> anyhow::Result<Vec<PendingDownload<'s, 'e, u8>>>,
) -> anyhow::Result<()> {
    rayon::in_place_scope(|pool| {
        on_helpers(pool, helpers, move || unpacking.help());
        let closing = Closing(unpacking);
        let waited = queue()?.into_iter().enumerate().try_for_each(|(p, pending)| {
            unpacking.landed(p, pending.wait()?); //                              landed: the host's again
            if helpers == 0 {
                while let Some(true) = unpacking.unpack_next() {}
            }
            anyhow::Ok(())
        });
        drop(closing);
        unpacking.help();
        waited
    })
}

/// Closes an [`Unpacking`] when dropped: no more pieces will land.
struct Closing<'u, 's, 'o, 'w>(&'u Unpacking<'s, 'o, 'w>);

impl Drop for Closing<'_, '_, '_, '_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Packs every buffer of `srcs` into `packed` on `threads` threads (this one among them), as the packed
/// way does: for measuring what the CPU's side of it costs alone.
pub fn pack_all(places: &BufferPlacement, srcs: &[&[u8]], packed: &mut [u8], threads: usize) {
    let layout = PackLayout::new(places);
    let packing = Packing::new((&layout, places), srcs, packed).expect("a packed buffer as long as the set's");
    rayon::in_place_scope(|pool| {
        on_helpers(pool, threads.saturating_sub(1), || packing.help());
        packing.help();
    });
}

/// The other way: every buffer out of `packed` into `outs`, likewise.
pub fn unpack_all(places: &BufferPlacement, packed: &[u8], outs: Vec<&mut [u8]>, threads: usize) {
    let layout = PackLayout::new(places);
    let unpacking = Unpacking::new(&layout, places, outs);
    for p in 0..layout.pieces.len() {
        unpacking.landed(p, &packed[layout.piece_bytes(p)]);
    }
    unpacking.close();
    rayon::in_place_scope(|pool| {
        on_helpers(pool, threads.saturating_sub(1), || unpacking.help());
        unpacking.help();
    });
}

#[cfg(test)]
mod tests {
    use kernels::cpu;

    use super::*;
    use crate::{
        buffers::{byte, BufferSet, POISON},
        results::ByteCheck,
    };

    /// The packed way's data path on the CPU: pack, the kernel's twin, unpack; every byte comes back, on
    /// one thread and on several.
    #[test]
    fn the_packed_round_trip_brings_every_byte_back() {
        for (spec, threads) in [("4*3,1KiB*5,100*7", 1), ("4*3,1KiB*5,100*7", 3), ("4KiB*300,3MiB*1,5*9", 4)] {
            let set = BufferSet::parse(spec).unwrap();
            let places = BufferPlacement::new(&set);
            let n = places.count();
            let mut h_in = vec![0u8; places.host_len];
            for (i, b) in places.host_slices_mut(&mut h_in).into_iter().enumerate() {
                b.iter_mut().enumerate().for_each(|(j, x)| *x = byte(i, j));
            }
            let (mut packed_htod, mut arena, mut packed_dtoh) =
                (vec![0u8; places.packed_len], vec![0u8; places.device_len], vec![0u8; places.packed_len]);
            pack_all(&places, &places.host_slices(&h_in), &mut packed_htod, threads);
            cpu::copy_by_table(TableCopy::Scatter, &packed_htod, &places.packed_table(), &mut arena);
            cpu::copy_by_table(TableCopy::Gather, &arena, &places.packed_table(), &mut packed_dtoh);
            let mut h_out = vec![POISON; places.host_len];
            unpack_all(&places, &packed_dtoh, places.host_slices_mut(&mut h_out), threads);
            let c = ByteCheck::of(places.host_slices(&h_in).into_iter(), places.host_slices(&h_out).into_iter());
            c.ensure("the packed round trip").unwrap();
            assert_eq!((c.buffers, c.bytes), (n, set.bytes()), "{spec} on {threads}");
            // Part by part, as the packed way runs them, the kernels over each part's table fill the same
            // arena and gather the same packed buffer.
            let layout = PackLayout::new(&places);
            let (table, entries) = layout.part_table(&places);
            let (mut arena_p, mut packed_p) = (vec![0u8; places.device_len], vec![0u8; places.packed_len]);
            for (part, e) in layout.kernel_parts().iter().zip(&entries) {
                let (bytes, table) = (layout.bytes_of(part), &table[3 * e.start..3 * e.end]);
                cpu::copy_by_table(TableCopy::Scatter, &packed_htod[bytes.clone()], table, &mut arena_p);
                cpu::copy_by_table(TableCopy::Gather, &arena_p, table, &mut packed_p[bytes]);
            }
            assert!(arena_p == arena && packed_p == packed_dtoh, "{spec}: the parts' tables");
            // Zero-copy's table reaches the same arena from the host arena.
            let mut arena2 = vec![0u8; places.device_len];
            cpu::copy_by_table(TableCopy::Scatter, &h_in, &places.host_table(), &mut arena2);
            assert_eq!(arena, arena2);
        }
        let wrong = ByteCheck::of([&[1u8, 2][..]].into_iter(), [&[1u8, 3][..]].into_iter());
        assert!(wrong.ensure("x").unwrap_err().to_string().contains("buffer 0, byte 1: got 0x03, expected 0x02"));
    }

    /// Where queueing the kernels and the pieces back fails, or panics, the crew woken to unpack stops
    /// waiting for pieces and `unpack_as_they_land` returns the error (or the panic), not a hang: a
    /// watchdog fails the test after 20 s rather than let it hang.
    #[test]
    fn the_crew_stops_waiting_where_queueing_the_way_back_fails() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let places = BufferPlacement::new(&BufferSet::parse("4KiB*300").unwrap());
            let layout = PackLayout::new(&places);
            let mut h_out = vec![POISON; places.host_len];
            let unpacking = Unpacking::new(&layout, &places, places.host_slices_mut(&mut h_out));
            let e = unpack_as_they_land(&unpacking, 3, || anyhow::bail!("the kernel would not launch")).unwrap_err();
            assert_eq!(e.to_string(), "the kernel would not launch");
            let unpacking = Unpacking::new(&layout, &places, places.host_slices_mut(&mut h_out));
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                unpack_as_they_land(&unpacking, 3, || panic!("a bug in the queueing"))
            }));
            assert!(panicked.is_err());
            assert!(h_out.iter().all(|&x| x == POISON), "nothing landed, nothing unpacked");
            done.send(()).unwrap();
        });
        let waited = finished.recv_timeout(std::time::Duration::from_secs(20));
        assert!(waited.is_ok(), "the crew still waits for pieces, or an assertion failed: {waited:?}");
    }

    /// Pieces landing one by one are unpacked by the threads as they land, each item once, and every
    /// thread stops once the last has landed, or once no more will: the bytes of the pieces that landed
    /// are in their buffers (a buffer the last of them cuts, in part), and nothing else is.
    #[test]
    fn items_are_unpacked_as_their_pieces_land_and_the_threads_stop_when_none_will() {
        let set = BufferSet::parse("4KiB*300,1MiB*1,100*50").unwrap();
        let places = BufferPlacement::new(&set);
        let layout = PackLayout::new(&places);
        assert!(layout.pieces.len() > 2, "{} pieces", layout.pieces.len());
        let packed: Vec<u8> = (0..places.packed_len).map(|i| (i % 251) as u8).collect();
        for landing in [layout.pieces.len(), 2] {
            let mut h_out = vec![POISON; places.host_len];
            let unpacking = Unpacking::new(&layout, &places, places.host_slices_mut(&mut h_out));
            std::thread::scope(|t| {
                for _ in 0..3 {
                    t.spawn(|| unpacking.help());
                }
                for p in 0..landing {
                    unpacking.landed(p, &packed[layout.piece_bytes(p)]);
                }
                unpacking.close();
                unpacking.help();
            });
            let landed = layout.piece_bytes(landing - 1).end;
            for (b, out) in places.host_slices(&h_out).into_iter().enumerate() {
                for (j, &x) in out.iter().enumerate() {
                    let at = places.packed[b] + j;
                    let want = if at < landed { (at % 251) as u8 } else { POISON };
                    assert_eq!(x, want, "buffer {b}, byte {j} (packed byte {at}), {landing} pieces landed");
                }
            }
        }
    }

    /// The packed buffer is cut into items of 64 KiB and pieces of whole items, and every byte of every
    /// buffer lies in exactly one item, where the item says.
    #[test]
    fn the_packed_way_cuts_the_packed_buffer_into_items_and_pieces() {
        for spec in ["4", "4KiB*1000", "1MiB*10", "model", "3MiB*1,4*100", "1KiB*5000"] {
            let places = BufferPlacement::new(&BufferSet::parse(spec).unwrap());
            let layout = PackLayout::new(&places);
            let pieces = &layout.pieces;
            assert_eq!((pieces[0].start, pieces.last().unwrap().end), (0, layout.items), "{spec}");
            assert!(pieces.windows(2).all(|w| w[0].end == w[1].start && !w[0].is_empty()), "{spec}: {pieces:?}");
            let parts = layout.kernel_parts();
            assert_eq!((parts[0].start, parts.last().unwrap().end), (0, pieces.len()), "{spec}: {parts:?}");
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start) && parts.iter().all(|p| !p.is_empty()));
            assert_eq!(parts.len(), pieces.len().min(2), "{spec}: the last piece's kernels apart from the rest");
            let most = MAX_PIECES.min((places.packed_len / PIECE_BYTES).max(1));
            assert!(pieces.len() <= most, "{spec}: {}", pieces.len());
            assert_eq!(layout.item_bytes(layout.items - 1).end, places.packed_len, "{spec}");
            let mut seen = vec![0usize; places.count()];
            for i in 0..layout.items {
                for (b, bytes, at) in layout.in_item(&places, i) {
                    assert_eq!(places.packed[b] + bytes.start, layout.item_bytes(i).start + at, "{spec}: item {i}");
                    assert!(bytes.end <= places.sizes[b] && at + bytes.len() <= layout.item_bytes(i).len());
                    seen[b] += bytes.len();
                }
            }
            assert_eq!(seen, places.sizes, "{spec}: every byte of every buffer in one item");
            for p in 0..pieces.len() {
                let r = layout.piece_buffers(&places, p);
                assert!(r.clone().all(|b| {
                    let (bytes, piece) = (places.packed_range(b), layout.piece_bytes(p));
                    bytes.start < piece.end && piece.start < bytes.end
                }));
            }
        }
        let layout = PackLayout::new(&BufferPlacement::new(&BufferSet::uniform(1000, 4096)));
        assert_eq!((layout.items, layout.pieces.len()), (63, 7), "4 MiB: items of 64 KiB, pieces of 512 KiB or more");
        assert_eq!(crew_threads(1), 1, "one item, one thread");
    }
}
