//! Many small buffers to the GPU and back, every way there is: one `cudaMemcpyAsync` per buffer (on one
//! stream, or spread over several), one batched call (`cuMemcpyBatchAsync`), packed into one buffer
//! by the CPU and scattered on the GPU by a kernel, a CUDA graph of the copies replayed, and zero-copy
//! (a kernel reading every buffer straight from mapped host memory). The small-copies lesson's
//! apparatus: the sets of buffers, where they lie, the ways, their timing and checking, and the tables.
//!
//! Every way does the same round trip: every buffer up into its place in one device arena, then every
//! buffer back into its own host buffer, as a server does for a request (inputs up, results back).
//! The host buffers lie apart (in a scrambled order, 64-byte aligned) as separate tensors would; the
//! arena holds them in order, 256-byte aligned, as `cudaMalloc` would each.

use std::{cell::Cell, ops::Range, time::Instant};

use anyhow::{bail, Context as _};
use rayon::prelude::*;
use serde::Serialize;

use common::{DeviceBuffer, Gpu, HostAlloc, PinnedBuffer, Scope, SrcOrder, Stream};
use kernels::Kernels;

use crate::{
    fit::CopyCost,
    report::{fmt_bytes, Figure, Table},
    timing::{measure_best, measure_parts_within, Repeats, Stats},
};

/// What a measurement of one way may take, after three runs: with a dozen ways over a dozen sets, a
/// run of milliseconds gets three runs after its checked run, and one of microseconds the usual repeats.
pub const BUDGET_MS: f64 = 15.0;

/// A set of buffers, by their sizes in bytes, in the order a program names them.
#[derive(Clone, Debug, Serialize)]
pub struct Set {
    pub name: String,
    pub sizes: Vec<usize>,
    /// (count, size) where every buffer is as large as the others.
    pub uniform: Option<(usize, usize)>,
}

impl Set {
    /// `count` buffers of `size` bytes.
    pub fn uniform(count: usize, size: usize) -> Set {
        Set { name: format!("{count} x {}", fmt_bytes(size)), sizes: vec![size; count], uniform: Some((count, size)) }
    }

    /// Shaped like a model's tensors, a few large and many small, layer after layer: in each of four
    /// layers a 2 MiB weight, four of 192 KiB, sixteen of 12 KiB, forty of 1.5 KiB (norms, biases) and
    /// twenty-five scalars of 4 bytes: 344 buffers, 12 MiB.
    pub fn model() -> Set {
        let layer = [(1, 2 << 20), (4, 192 << 10), (16, 12 << 10), (40, 1536), (25, 4)];
        let sizes = (0..4).flat_map(|_| layer.iter().flat_map(|&(n, s)| std::iter::repeat_n(s, n))).collect();
        Set { name: "model-like".into(), sizes, uniform: None }
    }

    /// `1MiB*4,16KiB*64,256B*200` (a size, and how many of it), or `model` ([`Set::model`]).
    pub fn parse(spec: &str) -> anyhow::Result<Set> {
        if spec.trim() == "model" {
            return Ok(Set::model());
        }
        let mut sizes = Vec::new();
        for item in spec.split(',').map(str::trim) {
            let (size, count) = item.split_once('*').unwrap_or((item, "1"));
            let size = crate::args::parse_bytes(size).map_err(|e| anyhow::anyhow!("'{item}': {e}"))?;
            let count = crate::args::parse_count(count).map_err(|e| anyhow::anyhow!("'{item}': the count {e}"))?;
            if size == 0 {
                bail!("'{item}': a buffer of 0 bytes");
            }
            if count > 1_000_000 {
                bail!("'{item}': at most 1,000,000 buffers of a size");
            }
            sizes.extend(std::iter::repeat_n(size, count));
        }
        if sizes.len() > 1_000_000 {
            bail!("at most 1,000,000 buffers in all");
        }
        let name = format!("{} buffers, {} to {}", sizes.len(), fmt_bytes(min(&sizes)), fmt_bytes(max(&sizes)));
        Ok(Set { name, sizes, uniform: None })
    }

    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    /// All the buffers' bytes.
    pub fn bytes(&self) -> usize {
        self.sizes.iter().sum()
    }

    /// `100 x 4 KiB (400 KiB)`, `model-like (344 buffers, 12.0 MiB)`.
    pub fn describe(&self) -> String {
        match self.uniform {
            Some(_) => format!("{} ({} in all)", self.name, fmt_bytes(self.bytes())),
            None => format!("{} ({} buffers, {} in all)", self.name, self.count(), fmt_bytes(self.bytes())),
        }
    }
}

/// Every count with every size, but those whose buffers add up to more than `max_total` each way (left
/// out, and named in the second list), then [`Set::model`] where `model`.
pub fn grid(counts: &[usize], sizes: &[usize], max_total: usize, model: bool) -> (Vec<Set>, Vec<String>) {
    let (mut sets, mut left_out) = (Vec::new(), Vec::new());
    for &count in counts {
        for &size in sizes {
            match count.checked_mul(size) {
                Some(total) if total <= max_total => sets.push(Set::uniform(count, size)),
                _ => left_out.push(format!("{count} x {}", fmt_bytes(size))),
            }
        }
    }
    if model {
        sets.push(Set::model());
    }
    (sets, left_out)
}

fn min(v: &[usize]) -> usize {
    v.iter().copied().min().unwrap_or(0)
}

fn max(v: &[usize]) -> usize {
    v.iter().copied().max().unwrap_or(0)
}

/// Byte `j` of buffer `i`: what every way must bring back.
pub fn byte(i: usize, j: usize) -> u8 {
    (i.wrapping_mul(131).wrapping_add(j.wrapping_mul(7)).wrapping_add(j >> 8) % 251) as u8 + 1
}

/// What the outputs are filled with before a checked run, so that a copy that did not happen shows.
pub const POISON: u8 = 0xA5;

fn align(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Where each buffer of a set lies: in the host arenas (scrambled, 64-byte aligned), in the device
/// arena (in order, 256-byte aligned) and in the packed staging buffers (in order, 16-byte aligned).
#[derive(Clone, Debug)]
pub struct Layout {
    pub sizes: Vec<usize>,
    pub host: Vec<usize>,
    pub host_len: usize,
    pub dev: Vec<usize>,
    pub dev_len: usize,
    pub packed: Vec<usize>,
    pub packed_len: usize,
}

impl Layout {
    pub fn new(set: &Set) -> Layout {
        let sizes = set.sizes.clone();
        let place = |order: &mut dyn Iterator<Item = usize>, to: usize| {
            let mut at = vec![0; sizes.len()];
            let mut end = 0;
            for i in order {
                at[i] = end;
                end = align(end + sizes[i], to);
            }
            (at, end.max(1))
        };
        let mut scrambled: Vec<usize> = (0..sizes.len()).collect();
        scrambled.sort_by_key(|&i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17));
        let (host, host_len) = place(&mut scrambled.into_iter(), 64);
        let (dev, dev_len) = place(&mut (0..sizes.len()), 256);
        let (packed, packed_len) = place(&mut (0..sizes.len()), 16);
        Layout { sizes, host, host_len, dev, dev_len, packed, packed_len }
    }

    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    pub fn bytes(&self) -> usize {
        self.sizes.iter().sum()
    }

    pub fn largest(&self) -> usize {
        max(&self.sizes)
    }

    pub fn host_range(&self, i: usize) -> Range<usize> {
        self.host[i]..self.host[i] + self.sizes[i]
    }

    pub fn dev_range(&self, i: usize) -> Range<usize> {
        self.dev[i]..self.dev[i] + self.sizes[i]
    }

    pub fn packed_range(&self, i: usize) -> Range<usize> {
        self.packed[i]..self.packed[i] + self.sizes[i]
    }

    /// The table of the scatter and gather kernels: (offset in the packed buffer, in the arena, bytes).
    pub fn packed_table(&self) -> Vec<u64> {
        (0..self.count()).flat_map(|i| [self.packed[i] as u64, self.dev[i] as u64, self.sizes[i] as u64]).collect()
    }

    /// The same with the host arena in place of the packed buffer: zero-copy's table.
    pub fn host_table(&self) -> Vec<u64> {
        (0..self.count()).flat_map(|i| [self.host[i] as u64, self.dev[i] as u64, self.sizes[i] as u64]).collect()
    }
}

/// `buf`'s disjoint `ranges` as slices of their own, in the order given.
pub fn slices_mut<'a>(buf: &'a mut [u8], ranges: impl Iterator<Item = Range<usize>>) -> Vec<&'a mut [u8]> {
    let ranges: Vec<Range<usize>> = ranges.collect();
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].start);
    let mut out: Vec<Option<&'a mut [u8]>> = (0..ranges.len()).map(|_| None).collect();
    let (mut rest, mut at) = (buf, 0);
    for i in order {
        let r = &ranges[i];
        assert!(r.start >= at, "slices_mut: ranges overlap");
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - at);
        let (mine, tail) = tail.split_at_mut(r.len());
        out[i] = Some(mine);
        (rest, at) = (tail, r.end);
    }
    out.into_iter().map(|s| s.expect("every range")).collect()
}

/// Packs every buffer of `srcs` into `up` (the packed buffer), piece by piece on the thread pool (or
/// on this thread), as the packed way does: for measuring what the CPU's side of it costs alone.
pub fn pack_all(l: &Layout, srcs: &[&[u8]], up: &mut [u8], pool: bool) {
    let pieces = pieces(l);
    let bounds: Vec<Range<usize>> = pieces.iter().map(|p| piece_bytes(l, p)).collect();
    let regions = slices_mut(up, bounds.iter().cloned());
    rayon::in_place_scope(|scope| {
        for ((region, piece), bytes) in regions.into_iter().zip(&pieces).zip(&bounds) {
            let from = &srcs[piece.clone()];
            match pool {
                true => scope.spawn(move |_| pack(l, piece, from, region, bytes.start)),
                false => pack(l, piece, from, region, bytes.start),
            }
        }
    });
}

/// The other way: every buffer out of `down` into `outs`, piece by piece.
pub fn unpack_all(l: &Layout, down: &[u8], outs: Vec<&mut [u8]>, pool: bool) {
    let mut outs = outs.into_iter();
    rayon::in_place_scope(|scope| {
        for piece in pieces(l) {
            let bytes = piece_bytes(l, &piece);
            let (region, to): (&[u8], Vec<&mut [u8]>) =
                (&down[bytes.clone()], outs.by_ref().take(piece.len()).collect());
            match pool {
                true => scope.spawn(move |_| unpack(l, &piece, region, to, bytes.start)),
                false => unpack(l, &piece, region, to, bytes.start),
            }
        }
    });
}

/// The packed way moves a set in pieces of this many bytes or more (at most [`MAX_PIECES`]): each
/// piece costs a copy's fixed time each way, and the pieces let the CPU pack one while another is on
/// its way, and unpack one while the next arrives.
pub const PIECE_BYTES: usize = 512 << 10;
pub const MAX_PIECES: usize = 16;

/// The pieces the packed way cuts a set into: runs of consecutive buffers of about equal bytes.
pub fn pieces(l: &Layout) -> Vec<Range<usize>> {
    let wanted = (l.packed_len / PIECE_BYTES).clamp(1, MAX_PIECES);
    let share = l.bytes().div_ceil(wanted).max(1);
    let (mut out, mut start, mut bytes) = (Vec::new(), 0, 0);
    for (i, size) in l.sizes.iter().enumerate() {
        bytes += size;
        if bytes >= share && out.len() + 1 < wanted {
            out.push(start..i + 1);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < l.count() || out.is_empty() {
        out.push(start..l.count());
    }
    out
}

/// The bytes of the packed buffer that a piece of buffers occupies.
fn piece_bytes(l: &Layout, piece: &Range<usize>) -> Range<usize> {
    match piece.is_empty() {
        true => 0..0,
        false => l.packed[piece.start]..l.packed_range(piece.end - 1).end,
    }
}

/// The table rows of the packed way (the first `3 n` numbers of the tables on the device).
fn s_table(n: usize) -> Range<usize> {
    0..3 * n
}

/// Copies the buffers `from[k]` of `piece` into their places in `region`, the piece's part of the packed
/// buffer (which starts at `base`), or back out of it.
/// Packs with streaming stores (`common::staging::stream_copy`, for buffers of 4 KiB or more): the
/// packed bytes go to memory without being read into the CPU's caches first, which halves the memory
/// traffic, and the copy engine then reads them from memory rather than from the caches. On the H200's
/// host that took the packed way over 1000 x 4 KiB from 610 to 545 µs, and over 100 x 64 KiB from 801 to
/// 608 µs.
fn pack(l: &Layout, piece: &Range<usize>, from: &[&[u8]], region: &mut [u8], base: usize) {
    for (k, src) in from.iter().enumerate() {
        let r = l.packed_range(piece.start + k);
        common::staging::stream_copy(&mut region[r.start - base..r.end - base], src);
    }
}

fn unpack(l: &Layout, piece: &Range<usize>, region: &[u8], to: Vec<&mut [u8]>, base: usize) {
    for (k, dst) in to.into_iter().enumerate() {
        let r = l.packed_range(piece.start + k);
        common::staging::stream_copy(dst, &region[r.start - base..r.end - base]);
    }
}

/// The pieces to pack, claimed one at a time: the caller's thread takes them from the first on, in the
/// order they go up, and the pool's threads from the last back. A sleeping pool took 50-100 µs to wake
/// on the H200's host: the caller starts at once, and never waits for a piece a waking thread holds.
struct Claims<'a> {
    front: std::sync::atomic::AtomicUsize,
    back: std::sync::atomic::AtomicUsize,
    regions: Vec<std::sync::Mutex<Option<&'a mut [u8]>>>,
}

impl<'a> Claims<'a> {
    fn new(regions: Vec<&'a mut [u8]>) -> Self {
        let n = regions.len();
        let regions = regions.into_iter().map(|r| std::sync::Mutex::new(Some(r))).collect();
        Claims { front: 0.into(), back: n.into(), regions }
    }

    /// Piece `p`'s region, if nobody has claimed it.
    fn take(&self, p: usize) -> Option<(usize, &'a mut [u8])> {
        Some((p, self.regions.get(p)?.lock().unwrap_or_else(|e| e.into_inner()).take()?))
    }

    /// The first piece nobody has claimed (the caller's way). The pool claims from the back, so once a
    /// piece is taken, every one after it is too.
    fn first(&self) -> Option<(usize, &'a mut [u8])> {
        let p = self.front.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.take(p)
    }

    /// The last piece nobody has claimed (the pool's way); likewise, once one is taken, every one before it
    /// is too.
    fn last(&self) -> Option<(usize, &'a mut [u8])> {
        let taken =
            self.back.fetch_update(std::sync::atomic::Ordering::Relaxed, std::sync::atomic::Ordering::Relaxed, |b| {
                b.checked_sub(1)
            });
        self.take(taken.ok()?.checked_sub(1)?)
    }
}

/// A landed piece to unpack: its index, its part of the packed buffer, and the buffers it fills.
type Unpack<'a> = (usize, &'a [u8], Vec<&'a mut [u8]>);

/// Landed pieces waiting to be unpacked, for the pool's threads and the caller's.
struct Landed<'a> {
    queue: std::sync::Mutex<(std::collections::VecDeque<Unpack<'a>>, bool)>,
    ready: std::sync::Condvar,
}

impl<'a> Landed<'a> {
    fn push(&self, job: Unpack<'a>) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).0.push_back(job);
        self.ready.notify_one();
    }

    fn close(&self) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.ready.notify_all();
    }

    /// The next piece to unpack; `None` once closed and empty (or, `wait` false, when empty).
    fn take(&self, wait: bool) -> Option<Unpack<'a>> {
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
/// pool's threads and this one, and each goes up as soon as it is packed; the kernels scatter every
/// buffer into the arena and gather it back; each piece comes back on its own and is unpacked as soon
/// as it has landed, while the next is on its way. Returns the GPU time, ms.
fn packed_round_trip(
    (gpu, kernels, s0): (&Gpu, &Kernels, &[Stream]),
    l: &Layout,
    (srcs, outs): (&[&[u8]], Vec<&mut [u8]>),
    (up, down): (&mut [u8], &mut [u8]),
    (d_packed, d_arena, d_tables, table): (
        &mut DeviceBuffer<u8>,
        &mut DeviceBuffer<u8>,
        &mut DeviceBuffer<u64>,
        Range<usize>,
    ),
) -> anyhow::Result<f64> {
    let pieces = pieces(l);
    let bounds: Vec<Range<usize>> = pieces.iter().map(|p| piece_bytes(l, p)).collect();
    let helpers = rayon::current_num_threads().min(pieces.len()).saturating_sub(1);
    let claims = Claims::new(slices_mut(up, bounds.iter().cloned()));
    let downs = slices_mut(down, bounds.iter().cloned());
    let mut outs = outs.into_iter();
    let outs: Vec<Vec<&mut [u8]>> = pieces.iter().map(|p| outs.by_ref().take(p.len()).collect()).collect();
    fn packs<F: for<'r> Fn((usize, &'r mut [u8])) -> (usize, &'r mut [u8])>(f: F) -> F {
        f // names the lifetime the closure hands back: the region it was given
    }
    let pack_one = packs(|(p, region)| {
        pack(l, &pieces[p], &srcs[pieces[p].clone()], region, bounds[p].start);
        (p, region)
    });
    let (tx, rx) = std::sync::mpsc::channel::<(usize, &mut [u8])>();
    rayon::in_place_scope(|pool| {
        // One task wakes the rest, so that this thread pays for waking one sleeping thread, not each.
        let (claims, pack_one) = (&claims, &pack_one);
        let pack_all = move |tx: std::sync::mpsc::Sender<_>| {
            while let Some(claimed) = claims.last() {
                let _ = tx.send(pack_one(claimed));
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
        } else {
            drop(tx);
        }
        gpu.timed(s0, |s| {
            let (packed, arena, st) = (s.device(d_packed).slice(0..l.packed_len), s.device(d_arena), s.stream(0));
            let table = s.device(d_tables).slice(table).read_only();
            let mut packed_pieces: Vec<Option<&mut [u8]>> = (0..pieces.len()).map(|_| None).collect();
            for (p, bytes) in bounds.iter().enumerate() {
                while packed_pieces[p].is_none() {
                    // Pack the next piece nobody has taken, or else wait for a thread that has.
                    let (q, region) = match claims.first() {
                        Some(claimed) => pack_one(claimed),
                        None => rx.recv().context("a packing thread stopped")?,
                    };
                    packed_pieces[q] = Some(region);
                }
                let region: &[u8] = packed_pieces[p].take().expect("packed");
                st.htod(region, packed.slice(bytes.clone()))?; //                   cudaMemcpyAsync, a piece up
            }
            kernels.scatter(st, packed.read_only(), table, arena, l.largest())?;
            kernels.gather(st, arena.read_only(), table, packed, l.largest())?;
            let landings = downs
                .into_iter()
                .zip(&bounds)
                .map(|(region, bytes)| st.dtoh_landing(packed.slice(bytes.clone()), region)) // a piece back
                .collect::<anyhow::Result<Vec<_>>>()?;
            let landed = Landed { queue: Default::default(), ready: Default::default() };
            let unpack_one =
                |(p, region, to): (usize, &[u8], Vec<&mut [u8]>)| unpack(l, &pieces[p], region, to, bounds[p].start);
            // The helpers wake while the GPU works, and wait for pieces to land.
            rayon::in_place_scope(|pool| {
                let (landed, unpack_one) = (&landed, &unpack_one);
                let unpack_all = move || {
                    while let Some(job) = landed.take(true) {
                        unpack_one(job);
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
                    if helpers == 0 {
                        landed.take(false).map(unpack_one);
                    }
                    anyhow::Ok(())
                });
                landed.close();
                while let Some(job) = landed.take(false) {
                    unpack_one(job);
                }
                waited
            })
        })
    })
}

/// One way to move the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Way {
    /// One `cudaMemcpyAsync` per buffer each way, dealt round-robin to `streams` streams; from and into
    /// `Vec`s where `pageable`, else pinned memory.
    Each { streams: usize, pageable: bool },
    /// One `cuMemcpyBatchAsync` up, its sources read in `order`, and one back.
    Batch { order: SrcOrder, pageable: bool },
    /// Packed by the CPU into one pinned buffer, one copy, a kernel that scatters the buffers into the
    /// arena; and back: a kernel that gathers them, one copy, unpacked by the CPU.
    Packed,
    /// A CUDA graph of every copy both ways, built once, replayed.
    Graph,
    /// A kernel that reads every buffer from mapped host memory into the arena, and one that writes them
    /// back.
    ZeroCopy,
}

impl Way {
    /// Every way, with one memcpy per buffer spread over `streams`, and the batched ones where the driver
    /// has them.
    pub fn all(streams: usize, batch: bool, zero_copy: bool) -> Vec<Way> {
        let mut v = vec![Way::Each { streams: 1, pageable: false }];
        if streams > 1 {
            v.push(Way::Each { streams, pageable: false });
        }
        v.push(Way::Each { streams: 1, pageable: true });
        if batch {
            for pageable in [false, true] {
                v.extend(SrcOrder::ALL.map(|order| Way::Batch { order, pageable }));
            }
        }
        v.extend([Way::Packed, Way::Graph]);
        if zero_copy {
            v.push(Way::ZeroCopy);
        }
        v
    }

    /// `memcpy each, 4 streams`, `batch, any order, pageable`.
    pub fn name(&self) -> String {
        let from = |pageable: bool| if pageable { ", pageable" } else { "" };
        match self {
            Way::Each { streams: 1, pageable } => format!("memcpy each{}", from(*pageable)),
            Way::Each { streams, pageable } => format!("memcpy each, {streams} streams{}", from(*pageable)),
            Way::Batch { order, pageable } => format!("batch, {}{}", order.describe(), from(*pageable)),
            Way::Packed => "packed + scatter kernel".into(),
            Way::Graph => "graph, replayed".into(),
            Way::ZeroCopy => "zero-copy kernel".into(),
        }
    }

    /// Whether one copy of all the bytes each way is a bound for this way: no run of it can beat it
    /// beyond timing noise, since it moves the same bytes through the same copies with at least one
    /// copy's fixed cost each way. Copies from pageable memory (which the driver may write inline for
    /// small copies), the batched call and the graph's copies (other paths to the copy engines) and
    /// zero-copy (no copy engine at all) can; for them it is a reference.
    pub fn bounded(&self) -> bool {
        matches!(self, Way::Each { pageable: false, .. } | Way::Packed)
    }
}

/// Whether every byte came back.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    pub buffers: usize,
    pub bytes: usize,
    pub wrong_buffers: usize,
    /// The first wrong buffer, in words.
    pub first: Option<String>,
}

impl Checked {
    fn of<'a>(expected: impl Iterator<Item = &'a [u8]>, got: impl Iterator<Item = &'a [u8]>) -> Checked {
        let (mut c, mut bytes) = (Checked { buffers: 0, bytes: 0, wrong_buffers: 0, first: None }, 0);
        for (i, (e, g)) in expected.zip(got).enumerate() {
            c.buffers += 1;
            bytes += e.len();
            if e != g {
                c.wrong_buffers += 1;
                if c.first.is_none() {
                    let j = e.iter().zip(g).position(|(a, b)| a != b).unwrap_or(0);
                    c.first = Some(format!("buffer {i}, byte {j}: got {:#04x}, expected {:#04x}", g[j], e[j]));
                }
            }
        }
        c.bytes = bytes;
        c
    }

    pub fn ensure(&self, what: &str) -> anyhow::Result<()> {
        match &self.first {
            None if self.buffers > 0 => Ok(()),
            None => bail!("{what}: nothing was checked"),
            Some(first) => {
                bail!("{what}: {} of {} buffers came back wrong; the first: {first}", self.wrong_buffers, self.buffers)
            }
        }
    }
}

/// One way over one set: its times (median of runs), what it moved, and its check.
#[derive(Clone, Debug, Serialize)]
pub struct WayRun {
    pub way: Way,
    pub name: String,
    /// The round trip as the caller waits for it: from the first byte packed or the first call until
    /// every byte is in its host buffer.
    pub wall: Stats,
    /// The GPU's time, CUDA events around the work.
    pub gpu: Stats,
    /// The host's time in the calls that queue the work (and packing and unpacking, for that way).
    pub host: Stats,
    /// Both ways' bytes over the wall time, GB/s.
    pub gbps: f64,
    /// GPU time over one copy of all the bytes each way.
    pub gpu_vs_one_copy: f64,
    /// Whether that is a bound for this way ([`Way::bounded`]), or a reference.
    pub bounded: bool,
    pub check: Checked,
    /// The graph's capture and instantiation, ms, on the host clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_ms: Option<f64>,
}

/// Every way over one set.
#[derive(Clone, Debug, Serialize)]
pub struct SetRun {
    pub set: String,
    pub count: usize,
    pub bytes: usize,
    pub uniform: Option<(usize, usize)>,
    /// One H2D copy of all the bytes, then one D2H copy of them, ms: the best of runs, GPU time.
    pub one_copy_ms: f64,
    /// The same as the caller waits for it, the median of runs, ms: what the wall times compare with.
    pub one_copy_wall_ms: f64,
    pub ways: Vec<WayRun>,
}

impl SetRun {
    /// The fastest way by wall time.
    pub fn fastest(&self) -> &WayRun {
        self.ways.iter().min_by(|a, b| a.wall.median_ms.total_cmp(&b.wall.median_ms)).expect("a way")
    }

    /// The fastest of the ways whose name starts with `family` (`memcpy each`, `batch`), pinned ones
    /// only, by wall time.
    pub fn best_of(&self, family: &str) -> Option<&WayRun> {
        self.ways
            .iter()
            .filter(|w| w.name.starts_with(family) && !w.name.ends_with("pageable"))
            .min_by(|a, b| a.wall.median_ms.total_cmp(&b.wall.median_ms))
    }
}

impl SetRun {
    /// Every way's times over the set, named for the JSON document as `SET / WAY / what`:
    /// `1000 x 4 KiB / memcpy each / wall` (as the caller waits), `... / gpu` (CUDA events), `... / host`
    /// (the host in the calls). Each transfer moves one buffer: the set's size, or for a set of mixed
    /// sizes the mean.
    pub fn figures(&self) -> Vec<Figure> {
        let each = self.bytes / self.count.max(1);
        let mut out = Vec::new();
        for w in &self.ways {
            let name = |what: &str| format!("{} / {} / {what}", self.set, w.name);
            out.push(Figure::new(name("wall"), &w.wall).on_host().transfers(each));
            out.push(Figure::new(name("gpu"), &w.gpu).transfers(each));
            out.push(Figure::new(name("host"), &w.host).on_host().transfers(each));
        }
        out
    }
}

/// Pageable copies of the buffers: a `Vec` each, in and out.
struct Pageable {
    ins: Vec<Vec<u8>>,
    outs: Vec<Vec<u8>>,
}

/// The buffers every way uses, allocated once for the largest set.
pub struct Rig<'g> {
    gpu: &'g Gpu,
    kernels: &'g Kernels,
    streams: Vec<Stream>,
    /// The host buffers, as slices of two mapped pinned arenas (mapped for zero-copy; copies run from
    /// them as from any pinned memory).
    h_in: PinnedBuffer<u8>,
    h_out: PinnedBuffer<u8>,
    /// The packed staging buffers, up and down.
    up: PinnedBuffer<u8>,
    down: PinnedBuffer<u8>,
    d_arena: DeviceBuffer<u8>,
    d_packed: DeviceBuffer<u8>,
    d_tables: DeviceBuffer<u64>,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Makes every stream of `streams` wait for the work queued so far on every other one: the end of the
/// way up, before the way back.
fn barrier<'s>(s: &'s Scope<'s, '_>) -> anyhow::Result<()> {
    let events = s.streams().map(|st| st.record_event()).collect::<anyhow::Result<Vec<_>>>()?;
    for st in s.streams() {
        for (k, e) in events.iter().enumerate() {
            if st.index() != k {
                st.wait_event(*e)?;
            }
        }
    }
    Ok(())
}

impl<'g> Rig<'g> {
    /// Buffers for every set of `layouts`, and `streams` streams.
    pub fn new(gpu: &'g Gpu, kernels: &'g Kernels, layouts: &[Layout], streams: usize) -> anyhow::Result<Rig<'g>> {
        let most = |f: fn(&Layout) -> usize| layouts.iter().map(f).max().unwrap_or(1).max(1);
        let (host, dev, packed) = (most(|l| l.host_len), most(|l| l.dev_len), most(|l| l.packed_len));
        let flags = if gpu.info.can_map_host_memory { HostAlloc::MAPPED } else { HostAlloc::DEFAULT };
        Ok(Rig {
            gpu,
            kernels,
            streams: gpu.streams(streams.max(1))?,
            h_in: gpu.pinned_with(host, flags)?,
            h_out: gpu.pinned_with(host, flags)?,
            up: gpu.pinned(packed)?,
            down: gpu.pinned(packed.max(dev))?,
            d_arena: gpu.alloc(dev)?,
            d_packed: gpu.alloc(packed)?,
            d_tables: gpu.alloc(most(|l| 6 * l.count()))?,
        })
    }

    /// Every way of `ways` over `set`, each checked byte for byte, with one copy of all the bytes each
    /// way measured beside them.
    pub fn run_set(&mut self, set: &Set, ways: &[Way], r: Repeats) -> anyhow::Result<SetRun> {
        let _phase = crate::timeline::phase(&set.name);
        let l = Layout::new(set);
        let fits = l.host_len <= self.h_in.len() && l.dev_len <= self.d_arena.len() && l.dev_len <= self.down.len();
        let fits = fits && l.packed_len <= self.up.len() && 6 * l.count() <= self.d_tables.len();
        anyhow::ensure!(fits, "{}: the rig was made for smaller sets", set.name);
        let n = l.count();
        slices_mut(&mut self.h_in, (0..n).map(|i| l.host_range(i)))
            .into_par_iter()
            .enumerate()
            .for_each(|(i, b)| b.iter_mut().enumerate().for_each(|(j, x)| *x = byte(i, j)));
        let mut pageable = Pageable {
            ins: (0..n).into_par_iter().map(|i| (0..l.sizes[i]).map(|j| byte(i, j)).collect()).collect(),
            outs: l.sizes.iter().map(|s| vec![0; *s]).collect(),
        };
        let tables: Vec<u64> = l.packed_table().into_iter().chain(l.host_table()).collect();
        let (gpu, streams, d_tables) = (self.gpu, &self.streams[..1], &mut self.d_tables);
        gpu.scope(streams, |s| s.stream(0).htod(&tables, s.device(d_tables).slice(0..tables.len())))?;
        let (one_copy_ms, one_copy_wall_ms) = self.one_copy(l.bytes(), r)?;
        let mut runs = Vec::new();
        for &way in ways {
            let _phase = crate::timeline::phase(&format!("{}: {}", set.name, way.name()));
            let run = self.run_way(way, &l, &mut pageable, r, one_copy_ms)?;
            run.check.ensure(&format!("{} over {}", run.name, set.name))?;
            runs.push(run);
        }
        Ok(SetRun {
            set: set.name.clone(),
            count: n,
            bytes: l.bytes(),
            uniform: set.uniform,
            one_copy_ms,
            one_copy_wall_ms,
            ways: runs,
        })
    }

    /// The best GPU time of one copy of each of `sizes` bytes up, and of each down, as `(bytes, ms)`.
    pub fn copy_times(&mut self, sizes: &[usize], r: Repeats) -> anyhow::Result<[Vec<(usize, f64)>; 2]> {
        let Rig { gpu, streams, up, down, d_packed, .. } = self;
        let s0 = &streams[..1];
        let (mut ups, mut downs) = (Vec::new(), Vec::new());
        for &bytes in sizes {
            anyhow::ensure!(bytes <= up.len() && bytes <= d_packed.len(), "copies of {bytes} bytes in a smaller rig");
            ups.push((
                bytes,
                measure_best(r, 30, 5.0, || {
                    gpu.timed(s0, |s| s.stream(0).htod(&up[..bytes], s.device(d_packed).slice(0..bytes)))
                })?,
            ));
            downs.push((
                bytes,
                measure_best(r, 30, 5.0, || {
                    gpu.timed(s0, |s| s.stream(0).dtoh(s.device(d_packed).slice(0..bytes), &mut down[..bytes]))
                })?,
            ));
        }
        Ok([ups, downs])
    }

    /// The wall time of a timed scope on one stream that queues nothing: its fork, join and
    /// synchronization, what every round trip pays once.
    pub fn empty_scope(&mut self, r: Repeats) -> anyhow::Result<Stats> {
        let (gpu, s0) = (self.gpu, &self.streams[..1]);
        let [wall] = measure_parts_within(r, BUDGET_MS, || {
            let t = Instant::now();
            gpu.timed(s0, |_| Ok(()))?;
            Ok([ms(t)])
        })?;
        Ok(wall)
    }

    /// The best GPU time of the scatter and the gather kernels over `set`, one after the other, in
    /// device memory (its table uploaded first).
    pub fn kernel_time(&mut self, set: &Set, r: Repeats) -> anyhow::Result<f64> {
        let l = Layout::new(set);
        let Rig { gpu, kernels, streams, d_arena, d_packed, d_tables, .. } = self;
        anyhow::ensure!(l.dev_len <= d_arena.len() && l.packed_len <= d_packed.len(), "the rig is too small");
        let (s0, table, n) = (&streams[..1], l.packed_table(), l.count());
        gpu.scope(s0, |s| s.stream(0).htod(&table, s.device(d_tables).slice(0..3 * n)))?;
        measure_best(r, 30, 5.0, || {
            gpu.timed(s0, |s| {
                let (packed, arena) = (s.device(d_packed).slice(0..l.packed_len), s.device(d_arena));
                let table = s.device(d_tables).slice(0..3 * n).read_only();
                kernels.scatter(s.stream(0), packed.read_only(), table, arena, l.largest())?;
                kernels.gather(s.stream(0), arena.read_only(), table, packed, l.largest())
            })
        })
    }

    /// The packed way's CPU side alone over `set`, in the rig's own buffers (the host buffers, and the
    /// pinned packed ones): packing and unpacking, on one thread or piece by piece on the pool, the best of
    /// five, ms.
    pub fn cpu_side(&mut self, set: &Set, pool: bool) -> (f64, f64) {
        let l = Layout::new(set);
        let n = l.count();
        let Rig { h_in, h_out, up, down, .. } = self;
        let best = |f: &mut dyn FnMut() -> f64| (0..5).map(|_| f()).fold(f64::INFINITY, f64::min);
        let srcs: Vec<&[u8]> = (0..n).map(|i| &h_in[l.host_range(i)]).collect();
        let pack = best(&mut || crate::timing::host_ms(|| pack_all(&l, &srcs, &mut up[..], pool)).1);
        let unpack = best(&mut || {
            let outs = slices_mut(&mut h_out[..], (0..n).map(|i| l.host_range(i)));
            crate::timing::host_ms(|| unpack_all(&l, &down[..], outs, pool)).1
        });
        (pack, unpack)
    }

    /// One copy of `bytes` up and one back, GPU time, the best of runs.
    /// One copy of `bytes` up and one back: the GPU time, the best of runs, and the wall time as the
    /// caller waits for it, the median, ms.
    fn one_copy(&mut self, bytes: usize, r: Repeats) -> anyhow::Result<(f64, f64)> {
        let Rig { gpu, streams, up, down, d_packed, .. } = self;
        let s0 = &streams[..1];
        let mut once = || {
            let t = Instant::now();
            let gpu_ms = gpu.timed(s0, |s| {
                let d = s.device(d_packed).slice(0..bytes);
                s.stream(0).htod(&up[..bytes], d)?;
                s.stream(0).dtoh(d, &mut down[..bytes])
            })?;
            anyhow::Ok([ms(t), gpu_ms])
        };
        let [wall, _] = measure_parts_within(r, BUDGET_MS, &mut once)?;
        let gpu_ms = measure_best(r, 30, 5.0, || once().map(|[_, gpu]| gpu))?;
        Ok((gpu_ms, wall.median_ms))
    }

    fn run_way(
        &mut self,
        way: Way,
        l: &Layout,
        p: &mut Pageable,
        r: Repeats,
        one_copy_ms: f64,
    ) -> anyhow::Result<WayRun> {
        let (times, check, build_ms) = match way {
            Way::Graph => self.graph(l, r)?,
            _ => {
                self.poison(l, p)?;
                self.once(way, l, p)?; // the checked run is the first warm-up
                let check = self.check(l, way, p);
                let rest = Repeats { warmup: r.warmup.saturating_sub(1), ..r };
                let [wall, gpu, host] = measure_parts_within(rest, BUDGET_MS, || self.once(way, l, p))?;
                ([wall, gpu, host], check, None)
            }
        };
        let [wall, gpu, host] = times;
        Ok(WayRun {
            way,
            name: way.name(),
            gbps: 2.0 * l.bytes() as f64 / (wall.median_ms * 1e6),
            gpu_vs_one_copy: gpu.median_ms / one_copy_ms,
            bounded: way.bounded(),
            wall,
            gpu,
            host,
            check,
            build_ms,
        })
    }

    /// Fills every output with [`POISON`]: the host buffers, and the arena on the device.
    fn poison(&mut self, l: &Layout, p: &mut Pageable) -> anyhow::Result<()> {
        self.h_out[..l.host_len].fill(POISON);
        p.outs.iter_mut().for_each(|o| o.fill(POISON));
        self.down.fill(POISON);
        let Rig { gpu, streams, down, d_arena, .. } = self;
        let s0 = &streams[..1];
        gpu.scope(s0, |s| s.stream(0).htod(&down[..l.dev_len], s.device(d_arena).slice(0..l.dev_len)))
    }

    fn check(&self, l: &Layout, way: Way, p: &Pageable) -> Checked {
        let n = l.count();
        match way {
            Way::Each { pageable: true, .. } | Way::Batch { pageable: true, .. } => {
                Checked::of(p.ins.iter().map(|v| &v[..]), p.outs.iter().map(|v| &v[..]))
            }
            _ => Checked::of((0..n).map(|i| &self.h_in[l.host_range(i)]), (0..n).map(|i| &self.h_out[l.host_range(i)])),
        }
    }

    /// One round trip of `way` (not the graph): [wall, GPU, host] ms.
    fn once(&mut self, way: Way, l: &Layout, p: &mut Pageable) -> anyhow::Result<[f64; 3]> {
        let Rig { gpu, kernels, streams, h_in, h_out, up, down, d_arena, d_packed, d_tables } = self;
        let n = l.count();
        let host = Cell::new(0.0);
        let (srcs, outs): (Vec<&[u8]>, Vec<&mut [u8]>) = match way {
            Way::Each { pageable: true, .. } | Way::Batch { pageable: true, .. } => {
                (p.ins.iter().map(|v| &v[..]).collect(), p.outs.iter_mut().map(|v| &mut v[..]).collect())
            }
            _ => ((0..n).map(|i| &h_in[l.host_range(i)]).collect(), slices_mut(h_out, (0..n).map(|i| l.host_range(i)))),
        };
        let t0 = Instant::now();
        let gpu_ms = match way {
            Way::Each { streams: k, .. } => {
                let streams = &streams[..k];
                gpu.timed(streams, |s| {
                    let t = Instant::now();
                    let arena = s.device(d_arena);
                    for (i, src) in srcs.iter().enumerate() {
                        s.stream(i % k).htod(src, arena.slice(l.dev_range(i)))?;
                        // cudaMemcpyAsync, H2D
                    }
                    if k > 1 {
                        barrier(s)?;
                    }
                    for (i, dst) in outs.into_iter().enumerate() {
                        s.stream(i % k).dtoh(arena.slice(l.dev_range(i)), dst)?;
                        // cudaMemcpyAsync, D2H
                    }
                    host.set(ms(t));
                    Ok(())
                })?
            }
            Way::Batch { order, .. } => {
                let s0 = &streams[..1];
                gpu.timed(s0, |s| {
                    let t = Instant::now();
                    let arena = s.device(d_arena);
                    let dsts: Vec<_> = (0..n).map(|i| arena.slice(l.dev_range(i))).collect();
                    s.stream(0).htod_batch(&srcs, &dsts, order)?; // cuMemcpyBatchAsync, every buffer up
                    s.stream(0).dtoh_batch(&dsts, outs)?; //         and back
                    host.set(ms(t));
                    Ok(())
                })?
            }
            Way::Packed => {
                let table = s_table(n);
                packed_round_trip(
                    (gpu, kernels, &streams[..1]),
                    l,
                    (&srcs, outs),
                    (up, down),
                    (d_packed, d_arena, d_tables, table),
                )?
            }
            Way::ZeroCopy => {
                drop((srcs, outs)); // the kernels reach the host arenas themselves
                let s0 = &streams[..1];
                gpu.timed(s0, |s| {
                    let t = Instant::now();
                    let (from, to, arena) = (s.mapped(h_in)?, s.mapped(h_out)?, s.device(d_arena));
                    let table = s.device(d_tables).slice(3 * n..6 * n).read_only();
                    // The kernels read and write the host's buffers across the link themselves.
                    kernels.scatter(s.stream(0), from.read_only(), table, arena, l.largest())?;
                    kernels.gather(s.stream(0), arena.read_only(), table, to, l.largest())?;
                    host.set(ms(t));
                    Ok(())
                })?
            }
            Way::Graph => bail!("the graph is replayed inside one scope: Rig::graph"),
        };
        let wall = ms(t0);
        // The packed way's host is busy from the first byte packed to the last unpacked.
        Ok([wall, gpu_ms, if way == Way::Packed { wall } else { host.get() }])
    }

    /// The graph of every copy both ways: built, checked over one launch (the outputs poisoned first),
    /// then built again and replayed, each replay timed inside the scope (a graph cannot outlive the
    /// scope whose buffers it names). [wall, GPU, host] stats, the check, and the build's ms.
    fn graph(&mut self, l: &Layout, r: Repeats) -> anyhow::Result<([Stats; 3], Checked, Option<f64>)> {
        let none = Pageable { ins: vec![], outs: vec![] };
        self.poison(l, &mut Pageable { ins: vec![], outs: vec![] })?;
        self.graph_scope(l, None)?;
        let check = self.check(l, Way::Graph, &none);
        let (stats, build_ms) = self.graph_scope(l, Some(r))?;
        Ok((stats.context("the graph's replays were not timed")?, check, Some(build_ms)))
    }

    /// One scope: the graph built (its build timed), then launched once, or replayed and timed as `r`
    /// says.
    fn graph_scope(&mut self, l: &Layout, r: Option<Repeats>) -> anyhow::Result<(Option<[Stats; 3]>, f64)> {
        let n = l.count();
        let Rig { gpu, streams, h_in, h_out, d_arena, .. } = self;
        let (h_in, s0) = (&h_in[..], &streams[..1]);
        let outs = slices_mut(h_out, (0..n).map(|i| l.host_range(i)));
        gpu.scope(s0, |s| {
            let arena = s.device(d_arena);
            let t = Instant::now();
            let graph = s.graph(|g| {
                for i in 0..n {
                    g.htod(&h_in[l.host_range(i)], arena.slice(l.dev_range(i)))?;
                    // captured, not run
                }
                for (i, out) in outs.into_iter().enumerate() {
                    g.dtoh(arena.slice(l.dev_range(i)), out)?;
                }
                Ok(())
            })?; //                                                                cudaGraphInstantiate
            let build_ms = ms(t);
            let replay = || -> anyhow::Result<[f64; 3]> {
                let (start, t) = (s.stream(0).record_event()?, Instant::now());
                s.stream(0).replay(&graph)?; //                                        cudaGraphLaunch
                let (host, stop) = (ms(t), s.stream(0).record_event()?);
                s.synchronize()?;
                Ok([ms(t), s.elapsed_ms(start, stop)?, host])
            };
            let stats = match r {
                None => replay().map(|_| None)?,
                Some(r) => Some(measure_parts_within(r, BUDGET_MS, replay)?),
            };
            Ok((stats, build_ms))
        })
    }
}

/// µs with sensible precision: `6.4`, `82`, `6,013`.
pub fn us(ms: f64) -> String {
    let us = ms * 1e3;
    match us {
        u if u < 10.0 => format!("{u:.1}"),
        u if u < 1e3 => format!("{u:.0}"),
        u => crate::report::fmt_count(u.round() as usize),
    }
}

/// The grid at a glance: a row a set, each way's wall time (µs; batches at their best order, from
/// pinned memory), one copy each way for scale, and the fastest way.
pub fn grid_table(runs: &[SetRun]) -> Table {
    let mut families: Vec<&str> = vec!["memcpy each"];
    let spread = runs.iter().flat_map(|r| &r.ways).find(|w| matches!(w.way, Way::Each { streams: 2.., .. }));
    let spread_name = spread.map(|w| w.name.clone());
    if let Some(name) = &spread_name {
        families.push(name);
    }
    families.extend(["batch", "packed", "graph", "zero-copy"]);
    let mut headers = vec!["buffers", "all", "one copy each way"];
    let short: Vec<String> = families
        .iter()
        .map(|f| match *f {
            "memcpy each" => "each".to_string(),
            f if f.starts_with("memcpy each, ") => format!("each, {}", &f["memcpy each, ".len()..]),
            f => f.to_string(),
        })
        .collect();
    headers.extend(short.iter().map(String::as_str));
    headers.push("fastest");
    let mut t = Table::new(&headers);
    for run in runs {
        let mut cells = vec![run.set.clone(), fmt_bytes(run.bytes), us(run.one_copy_ms)];
        for f in &families {
            let found = match *f {
                "memcpy each" => run.ways.iter().find(|w| matches!(w.way, Way::Each { streams: 1, pageable: false })),
                f if f.starts_with("memcpy each, ") => run.ways.iter().find(|w| w.name == f),
                f => run.best_of(f),
            };
            cells.push(found.map_or("-".into(), |w| us(w.wall.median_ms)));
        }
        let (fastest, each) = (run.fastest(), run.best_of("memcpy each"));
        let gain = each.map_or(String::new(), |e| format!(" ({:.1}x)", e.wall.median_ms / fastest.wall.median_ms));
        cells.push(format!("{}{gain}", fastest.name));
        t.row(cells);
    }
    t
}

/// Which way was fastest (wall) where, in a sentence: `zero-copy kernel at 4 of 10 sets (10 x 256 B, ...)`.
pub fn winners(runs: &[SetRun]) -> String {
    let mut by_way: Vec<(String, Vec<&str>)> = Vec::new();
    for run in runs {
        let name = run.fastest().name.clone();
        match by_way.iter_mut().find(|(w, _)| *w == name) {
            Some((_, sets)) => sets.push(&run.set),
            None => by_way.push((name, vec![&run.set])),
        }
    }
    by_way.sort_by_key(|(_, sets)| std::cmp::Reverse(sets.len()));
    let parts: Vec<String> = by_way
        .iter()
        .map(|(way, sets)| format!("{way} at {} of {} ({})", sets.len(), runs.len(), sets.join(", ")))
        .collect();
    format!("fastest by wall time: {}", parts.join("; "))
}

/// Every way over one set: GPU time, the host's time in the calls, the wall time, GB/s, the wall time
/// against one copy of all the bytes each way's, and the GPU time against that copy's (a bound, or a
/// reference: the last column).
pub fn detail_table(run: &SetRun) -> Table {
    let mut t = Table::new(&[
        "way",
        "GPU µs",
        "host µs",
        "wall µs",
        "GB/s",
        "wall / one copy",
        "GPU / one copy",
        "one copy is",
    ]);
    for w in &run.ways {
        t.row(vec![
            w.name.clone(),
            us(w.gpu.median_ms),
            us(w.host.median_ms),
            us(w.wall.median_ms),
            format!("{:.2}", w.gbps),
            format!("{:.2}", w.wall.median_ms / run.one_copy_wall_ms),
            format!("{:.2}", w.gpu_vs_one_copy),
            if w.bounded { "a bound".into() } else { "a reference".into() },
        ]);
    }
    t
}

/// A way's wall time per buffer over sizes, fitted as `α + size/β` (one count, several sizes).
fn per_buffer_fit(runs: &[&SetRun], pick: impl Fn(&SetRun) -> Option<f64>) -> Option<CopyCost> {
    let points: Vec<(usize, f64)> =
        runs.iter().filter_map(|r| Some((r.uniform?.1, pick(r)? / r.count as f64))).collect();
    CopyCost::fit(&points).ok()
}

/// The gain under which a way "stops mattering" against one memcpy per buffer.
pub const MATTERS: f64 = 1.1;

/// Where batching, packing and graphs stop mattering: for each count of the uniform sets, the smallest
/// size from which each is less than [`MATTERS`] times faster (wall) than the faster memcpy per buffer
/// at that size and every larger one tried, and where the fits of both over the sizes (per buffer,
/// `α + size/β`) say the gain falls under it.
pub fn crossover_table(runs: &[SetRun]) -> Option<Table> {
    let mut counts: Vec<usize> = runs.iter().filter_map(|r| r.uniform.map(|u| u.0)).collect();
    counts.sort_unstable();
    counts.dedup();
    let families = ["batch", "packed", "graph"];
    let mut t = Table::new(&["buffers", "batch", "packed", "graph"]);
    let mut any = false;
    for count in counts {
        let mut rows: Vec<&SetRun> = runs.iter().filter(|r| r.uniform.is_some_and(|u| u.0 == count)).collect();
        rows.sort_by_key(|r| r.uniform.map(|u| u.1));
        if rows.len() < 2 {
            continue;
        }
        any = true;
        let mut cells = vec![format!("{count}")];
        for family in families {
            let gain = |r: &SetRun| Some(r.best_of("memcpy each")?.wall.median_ms / r.best_of(family)?.wall.median_ms);
            let gains: Vec<Option<f64>> = rows.iter().map(|r| gain(r)).collect();
            if gains.iter().all(Option::is_none) {
                cells.push("-".into());
                continue;
            }
            let from = (0..rows.len()).find(|&k| gains[k..].iter().all(|g| g.is_some_and(|g| g < MATTERS)));
            let measured = match from {
                Some(k) => format!("from {}", fmt_bytes(rows[k].uniform.unwrap().1)),
                None => {
                    let last = gains.iter().rev().flatten().next().copied().unwrap_or(f64::NAN);
                    format!("not by {} ({last:.1}x)", fmt_bytes(rows[rows.len() - 1].uniform.unwrap().1))
                }
            };
            let each = per_buffer_fit(&rows, |r| Some(r.best_of("memcpy each")?.wall.median_ms));
            let way = per_buffer_fit(&rows, |r| Some(r.best_of(family)?.wall.median_ms));
            let model = match (each, way) {
                (Some(e), Some(w)) => {
                    crossing(&e, &w).map_or("; fits: never".into(), |s| format!("; fits: {}", fmt_bytes(s)))
                }
                _ => String::new(),
            };
            cells.push(format!("{measured}{model}"));
        }
        t.row(cells);
    }
    any.then_some(t)
}

/// The buffer size from which `way` (per buffer `α + s/β`) is less than [`MATTERS`] times faster than
/// `each`, or `None` where it never is.
pub fn crossing(each: &CopyCost, way: &CopyCost) -> Option<usize> {
    let (ae, aw) = (each.alpha_us * 1e-6, way.alpha_us * 1e-6);
    let (xe, xw) = (1.0 / (each.beta_gbps * 1e9), 1.0 / (way.beta_gbps * 1e9));
    // each(s) < MATTERS * way(s)  <=>  s (xe - MATTERS xw) < MATTERS aw - ae
    let (slope, room) = (xe - MATTERS * xw, MATTERS * aw - ae);
    if room > 0.0 {
        return Some(0);
    }
    (slope < 0.0).then(|| (room / slope).ceil() as usize)
}

/// The ways that beat one copy of all the bytes each way, where it is a reference, and whether any
/// way it bounds beat it beyond noise (10%): lines for the notes.
pub fn beaten(runs: &[SetRun]) -> Vec<String> {
    let mut lines = Vec::new();
    for run in runs {
        for w in run.ways.iter().filter(|w| w.gpu_vs_one_copy < 0.9 || (!w.bounded && w.gpu_vs_one_copy < 1.0)) {
            lines.push(format!(
                "{} over {}: GPU time {:.2} of one copy each way ({})",
                w.name,
                run.set,
                w.gpu_vs_one_copy,
                if w.bounded {
                    "a bound it should not beat: timing noise, or a slower copy when it was measured"
                } else {
                    "a reference, which this way can beat"
                }
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_parse_and_describe_themselves() {
        let s = Set::parse("1MiB*4, 16KiB*64,256").unwrap();
        assert_eq!(s.count(), 69);
        assert_eq!(s.bytes(), 4 * (1 << 20) + 64 * 16384 + 256);
        assert_eq!(s.name, "69 buffers, 256 B to 1 MiB");
        assert_eq!(Set::parse("model").unwrap().count(), 344);
        assert!(Set::parse("0*4").unwrap_err().to_string().contains("0 bytes"));
        assert_eq!(Set::parse("4KiB*x").unwrap_err().to_string(), "'4KiB*x': the count 'x' is not a whole number");
        assert!(Set::parse("4TiB*2").unwrap_err().to_string().contains("unknown unit"));
        let m = Set::model();
        assert!(m.bytes() > 11 << 20 && m.bytes() < 13 << 20, "{}", m.bytes());
        assert_eq!(Set::uniform(100, 4096).describe(), "100 x 4 KiB (400 KiB in all)");
    }

    #[test]
    fn the_grid_leaves_out_what_is_too_large_and_ends_with_the_model() {
        let (sets, left_out) = grid(&[10, 1000], &[256, 1 << 20], 32 << 20, true);
        let names: Vec<&str> = sets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["10 x 256 B", "10 x 1 MiB", "1000 x 256 B", "model-like"]);
        assert_eq!(left_out, ["1000 x 1 MiB"]);
        assert_eq!(grid(&[usize::MAX], &[2], usize::MAX, false).1.len(), 1, "a total that overflows is left out");
        assert!(grid(&[1], &[1], 1, false).0.iter().all(|s| s.uniform.is_some()));
    }

    #[test]
    fn layouts_keep_buffers_apart_and_aligned() {
        let l = Layout::new(&Set::model());
        let n = l.count();
        for (place, align_to) in [(&l.host, 64), (&l.dev, 256), (&l.packed, 16)] {
            let mut spans: Vec<(usize, usize)> = (0..n).map(|i| (place[i], place[i] + l.sizes[i])).collect();
            assert!(spans.iter().all(|s| s.0 % align_to == 0));
            spans.sort();
            assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "overlapping buffers");
        }
        assert!(l.dev.windows(2).all(|w| w[0] < w[1]), "the arena holds them in order");
        assert!(!l.host.windows(2).all(|w| w[0] < w[1]), "the host buffers lie scrambled");
        assert!(l.packed_len <= l.bytes() + 16 * n && l.dev_len >= l.bytes());
        let table = l.packed_table();
        assert_eq!(table.len(), 3 * n);
        assert_eq!(&table[3..6], &[l.packed[1] as u64, l.dev[1] as u64, l.sizes[1] as u64]);
    }

    /// The packed way's data path on the CPU: pack, the kernels' twins, unpack; every byte comes back.
    #[test]
    fn the_packed_round_trip_brings_every_byte_back() {
        let set = Set::parse("4*3,1KiB*5,100*7").unwrap();
        let l = Layout::new(&set);
        let n = l.count();
        let mut h_in = vec![0u8; l.host_len];
        for (i, b) in slices_mut(&mut h_in, (0..n).map(|i| l.host_range(i))).into_iter().enumerate() {
            b.iter_mut().enumerate().for_each(|(j, x)| *x = byte(i, j));
        }
        {
            let (mut up, mut arena, mut down) =
                (vec![0u8; l.packed_len], vec![0u8; l.dev_len], vec![0u8; l.packed_len]);
            let srcs: Vec<&[u8]> = (0..n).map(|i| &h_in[l.host_range(i)]).collect();
            pack_all(&l, &srcs, &mut up, true);
            kernels::cpu::scatter(&up, &l.packed_table(), &mut arena);
            kernels::cpu::gather(&arena, &l.packed_table(), &mut down);
            let mut h_out = vec![POISON; l.host_len];
            unpack_all(&l, &down, slices_mut(&mut h_out, (0..n).map(|i| l.host_range(i))), false);
            let c = Checked::of((0..n).map(|i| &h_in[l.host_range(i)]), (0..n).map(|i| &h_out[l.host_range(i)]));
            c.ensure("the packed round trip").unwrap();
            assert_eq!((c.buffers, c.bytes), (n, set.bytes()));
            // Zero-copy's table reaches the same arena from the host arena.
            let mut arena2 = vec![0u8; l.dev_len];
            kernels::cpu::scatter(&h_in, &l.host_table(), &mut arena2);
            assert_eq!(arena, arena2);
        }
        let wrong = Checked::of([&[1u8, 2][..]].into_iter(), [&[1u8, 3][..]].into_iter());
        assert!(wrong.ensure("x").unwrap_err().to_string().contains("buffer 0, byte 1: got 0x03, expected 0x02"));
    }

    /// The caller's thread takes pieces from the front and the pool's from the back: each piece once,
    /// however they meet.
    #[test]
    fn claims_from_both_ends_take_each_piece_once() {
        for n in [0, 1, 2, 7, 16] {
            let mut buf = vec![0u8; n];
            let claims = Claims::new(buf.chunks_mut(1).collect());
            let got = std::sync::Mutex::new(Vec::new());
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
            let l = Layout::new(&Set::parse(spec).unwrap());
            let p = pieces(&l);
            assert_eq!(p.first().unwrap().start, 0, "{spec}");
            assert_eq!(p.last().unwrap().end, l.count(), "{spec}");
            assert!(p.windows(2).all(|w| w[0].end == w[1].start && !w[0].is_empty()), "{spec}: {p:?}");
            assert!(p.len() <= MAX_PIECES && p.len() <= (l.packed_len / PIECE_BYTES).max(1), "{spec}: {}", p.len());
        }
        assert_eq!(pieces(&Layout::new(&Set::uniform(1000, 4096))).len(), 7, "4 MiB: pieces of 512 KiB or more");
    }

    #[test]
    fn slices_come_back_in_the_order_asked() {
        let mut buf: Vec<u8> = (0..10).collect();
        let s = slices_mut(&mut buf, [6..8, 0..2, 3..3].into_iter());
        assert_eq!((&*s[0], &*s[1], s[2].len()), (&[6u8, 7][..], &[0u8, 1][..], 0));
    }

    #[test]
    fn ways_name_themselves_and_know_what_bounds_them() {
        let all = Way::all(4, true, true);
        assert_eq!(all.len(), 12);
        let names: Vec<String> = all.iter().map(Way::name).collect();
        assert!(names.contains(&"memcpy each, 4 streams".to_string()));
        assert!(names.contains(&"batch, during the call, pageable".to_string()));
        assert_eq!(Way::all(1, false, false).len(), 4, "no batches where the driver has none");
        assert!(
            Way::Packed.bounded() && !Way::ZeroCopy.bounded() && !Way::Each { streams: 1, pageable: true }.bounded()
        );
    }

    fn cost(alpha_us: f64, beta_gbps: f64) -> CopyCost {
        CopyCost { alpha_us, beta_gbps, half_rate_bytes: 0.0, worst_miss: 0.0 }
    }

    #[test]
    fn the_crossover_is_where_the_per_buffer_cost_stops_mattering() {
        // One memcpy per buffer: 6 µs and 55 GB/s; a batch: 1 µs per buffer at the same rate. The batch
        // is less than 1.1x faster once 6 + s/55e3 < 1.1 (1 + s/55e3) µs: s > 49 * 55e3 / 1 bytes.
        let s = crossing(&cost(6.0, 55.0), &cost(1.0, 55.0)).unwrap();
        assert!((s as f64 / (4.9e-6 / 0.1 * 55e9) - 1.0).abs() < 1e-6, "{s}");
        assert_eq!(crossing(&cost(6.0, 55.0), &cost(6.0, 55.0)), Some(0), "no gain at any size");
        assert_eq!(crossing(&cost(6.0, 20.0), &cost(1.0, 55.0)), None, "a faster rate always matters");
    }

    fn stats(ms: f64) -> Stats {
        Stats { median_ms: ms, min_ms: ms, max_ms: ms, q3_ms: ms, runs: 3, cv: 0.0 }
    }

    /// A made-up run: one memcpy per buffer at 6 µs + size/55 GB/s each way, a batch at 1.5 µs a buffer,
    /// packing at 20 µs + 2 µs a buffer, a graph at 3 µs a buffer, zero-copy at 8 µs + size/20 GB/s.
    fn made_up(count: usize, size: usize) -> SetRun {
        let bytes = (count * size) as f64;
        let n = count as f64;
        let link = bytes / 55e6; // ms each way
        let times = [
            (Way::Each { streams: 1, pageable: false }, n * 0.012 + 2.0 * link),
            (Way::Each { streams: 4, pageable: false }, n * 0.010 + 2.0 * link),
            (Way::Batch { order: SrcOrder::StreamOrder, pageable: false }, 0.02 + n * 0.0015 + 2.0 * link),
            (Way::Batch { order: SrcOrder::Any, pageable: true }, 0.02 + n * 0.001 + 2.0 * bytes / 10e6),
            (Way::Packed, 0.02 + n * 0.002 + 2.0 * link + bytes / 5e6),
            (Way::Graph, 0.01 + n * 0.003 + 2.0 * link),
            (Way::ZeroCopy, 0.008 + 2.0 * bytes / 20e6),
        ];
        let one_copy_ms = 0.012 + 2.0 * link;
        let ways = times
            .iter()
            .map(|&(way, ms)| WayRun {
                way,
                name: way.name(),
                wall: stats(ms),
                gpu: stats(ms * 0.9),
                host: stats(ms * 0.5),
                gbps: 2.0 * bytes / (ms * 1e6),
                gpu_vs_one_copy: ms * 0.9 / one_copy_ms,
                bounded: way.bounded(),
                check: Checked { buffers: count, bytes: count * size, wrong_buffers: 0, first: None },
                build_ms: None,
            })
            .collect();
        SetRun {
            set: Set::uniform(count, size).name,
            count,
            bytes: count * size,
            uniform: Some((count, size)),
            one_copy_ms,
            one_copy_wall_ms: one_copy_ms + 0.01,
            ways,
        }
    }

    #[test]
    fn the_tables_say_who_wins_where_and_where_batching_stops_mattering() {
        let runs: Vec<SetRun> =
            [(10, 256), (10, 1 << 20), (10, 16 << 20), (1000, 256), (1000, 4096)].map(|(c, s)| made_up(c, s)).into();
        let grid = grid_table(&runs).render();
        let lines: Vec<&str> = grid.lines().collect();
        assert!(
            lines[0].starts_with("buffers") && lines[0].contains("each, 4 streams") && lines[0].ends_with("fastest")
        );
        assert!(lines[2].starts_with("10 x 256 B") && lines[2].ends_with("zero-copy kernel (12.1x)"), "{}", lines[2]);
        let w = winners(&runs);
        assert!(w.starts_with("fastest by wall time: zero-copy kernel at "), "{w}");
        let cross = crossover_table(&runs).unwrap().render();
        let row10 = cross.lines().find(|l| l.starts_with("10 ")).unwrap();
        // 10 buffers: a batch is 1.16x faster at 1 MiB and 1.01x at 16 MiB; packing is slower from 1 MiB.
        let cells: Vec<&str> = row10.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert!(cells[1].starts_with("from 16 MiB; fits: 1.") && cells[1].ends_with(" MiB"), "{row10}");
        assert!(cells[2].starts_with("from 1 MiB; fits: "), "{row10}");
        assert!(cross.lines().any(|l| l.starts_with("1000 ")), "{cross}");
        let detail = detail_table(&runs[0]).render();
        assert!(detail.contains("a bound") && detail.contains("a reference"), "{detail}");
        let notes = beaten(&runs);
        assert!(notes.iter().any(|l| l.starts_with("zero-copy kernel over 10 x 256 B") && l.contains("a reference")));
        assert!(notes.iter().all(|l| !l.starts_with("memcpy each,") && !l.starts_with("packed")), "{notes:?}");
    }

    #[test]
    fn every_way_names_its_three_times_by_set_way_and_clock() {
        let run = made_up(1000, 4096);
        let figures = run.figures();
        assert_eq!(figures.len(), 3 * run.ways.len());
        let names: Vec<&str> = figures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names[..3],
            [
                "1000 x 4 KiB / memcpy each / wall",
                "1000 x 4 KiB / memcpy each / gpu",
                "1000 x 4 KiB / memcpy each / host"
            ]
        );
        assert!(names.contains(&"1000 x 4 KiB / batch, any order, pageable / host"), "{names:?}");
        use crate::report::Clock;
        let clocks: Vec<Clock> = figures[..3].iter().map(|f| f.clock).collect();
        assert_eq!(clocks, [Clock::Host, Clock::Gpu, Clock::Host]);
        assert!(figures.iter().all(|f| f.transfer_bytes == Some(4096)));
        assert_eq!(figures[1].stats, serde_json::to_value(run.ways[0].gpu).unwrap());
    }

    #[test]
    fn microseconds_read_at_a_glance() {
        assert_eq!(us(0.0064), "6.4");
        assert_eq!(us(0.082), "82");
        assert_eq!(us(6.013), "6,013");
    }
}
