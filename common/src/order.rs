//! The scope's bookkeeping, apart from the driver: which bytes each operation touched on which stream,
//! what each stream is known to wait for, and the fences (events recorded for ordering) that exist. It
//! decides which waits an operation needs and whether a fence should follow it; [`crate::scope`] makes
//! the driver calls. Pure, so that it is tested, and its cost counted, without a GPU.
//!
//! What it costs per operation, in the operations a scope holds (n) and the accesses near the bytes an
//! operation touches (m, a handful): finding conflicts O(log n + m), remembering the access O(log n),
//! the ordering of streams O(streams) only where a wait or a fence is made. Its vectors keep their
//! capacity from one scope to the next (`Book::reset`), so an operation allocates nothing once a
//! scope of its size has run; only the ordered map of accesses allocates a chunk now and then. A
//! buffer touched as a whole keeps its one entry in its tracker, and a stamp names the fence recorded
//! right after its operation: the commonest operations follow few pointers, since the driver's calls
//! between two of them leave little of the book in the nearest caches. An operation of one access on
//! such a buffer, appended after every entry of one, or of exactly one entry's bytes that no other
//! entry overlaps (the copy back of what went up into an arena), is planned the short way
//! (`Book::plan_one`): no general search, no list of needs, the same plan (tests hold the two ways to
//! each other, and both to an oracle of their own clocks that checks every conflicting pair is ordered).
//!
//! # Fences, recorded lazily
//! An operation on stream j that touches bytes an unordered operation on stream k touched (one of the
//! two a write) must wait for it. Recording an event after every operation, in case some later one
//! needs it, costs the host as much as the operation itself. So an event (a *fence*) is recorded after
//! an operation only where another stream touched its bytes before: then another is likely to touch
//! them next (double buffering, a pipeline with a stream per engine). Elsewhere the fence is recorded
//! when the conflict is found, on stream k at that moment: that covers the operation and whatever k
//! queued after it, which is safe and may wait longer than needed, but only where a program queues ahead
//! on one stream before queueing on another what depends on it, and only for the first time a range is
//! shared.

use std::{ops::Range, sync::Arc};

use crate::{error::Overlap, memory::Bytes, view::DevAccess};

/// A kind of operation: its kind (`H2D`) and what it does (`memcpy HtoD`), in a static of its own, so
/// that an operation carries one pointer to it.
pub(crate) struct Op {
    pub kind: &'static str,
    pub what: &'static str,
}

/// What an operation is: its kind and what it does ([`Op`]) or the kernel's name, and the bytes it moves.
/// Four words: the scope moves it and keeps one per operation.
#[derive(Clone)]
pub(crate) struct OpInfo {
    pub op: &'static Op,
    pub kernel: Option<Arc<str>>,
    pub bytes: usize,
}

impl OpInfo {
    pub(crate) fn copy(op: &'static Op, bytes: usize) -> OpInfo {
        OpInfo { op, kernel: None, bytes }
    }

    /// `H2D`, `D2H`, `DtoD`, `memset`, `kernel` or `graph`.
    pub fn kind(&self) -> &'static str {
        self.op.kind
    }

    /// `memcpy HtoD`, or the kernel's name.
    pub fn name(&self) -> &str {
        self.kernel.as_deref().unwrap_or(self.op.what)
    }

    /// The operation in words: `memcpy HtoD`, `kernel process`.
    pub fn label(&self) -> String {
        match &self.kernel {
            Some(k) => format!("kernel {k}"),
            None => self.op.what.to_string(),
        }
    }
}

/// What the scope saw of the ordering between streams ([`crate::Scope::waits`]): the waits the program
/// made itself, and those the scope had to add because two operations on different streams touched the
/// same bytes and nothing ordered them.
///
/// ```no_run
/// # fn main() -> cuda_scope::Result<()> {
/// # let gpu = cuda_scope::Gpu::init()?;
/// # let streams = gpu.streams(2)?;
/// # let (host, mut back, mut d) = (vec![1f32; 1024], vec![0f32; 1024], gpu.alloc::<f32>(1024)?);
/// gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
///     let d = s.device(&mut d);
///     s.stream(0).htod(&host, d)?;
///     s.stream(1).dtoh(d, &mut back)?; // d on another stream, and no wait of the program's for it
///     let waits: cuda_scope::Waits = s.waits();
///     assert_eq!((waits.made, waits.added), (0, 1));
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Waits {
    /// `wait_event` calls the program made.
    pub made: usize,
    /// Waits the scope added where the program's own were missing.
    pub added: usize,
    /// The first conflict the scope had to order, in words.
    pub first_added: Option<String>,
}

impl Waits {
    /// One line for a program's output.
    ///
    /// ```
    /// let waits = cuda_scope::Waits { made: 2, added: 0, first_added: None };
    /// assert!(waits.summary().ends_with("ordered by the program's 2 waits: none added"));
    /// ```
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

/// When an operation touched a range: its sequence number on its stream (0: never), its index in
/// `Book::ops`, and the fence recorded right after it, if one was (its index + 1; 0: none), which is
/// then the first fence after it on its stream: what a wait for it waits on, found without a search.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Stamp {
    pub seq: u64,
    pub op: u32,
    pub after: u32,
}

/// What one stream did to one range of a buffer that later work on other streams may have to wait
/// for: its last write that nothing has superseded, and its last read since. A reader elsewhere waits
/// for the write, a writer elsewhere for both.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Entry {
    pub start: usize,
    pub end: usize,
    pub stream: u32,
    pub write: Stamp,
    pub read: Stamp,
}

impl Entry {
    /// What `stream` did to `bytes` at `stamp`: wrote, or read.
    #[inline]
    fn of(stream: u32, write: bool, bytes: &Range<usize>, stamp: Stamp) -> Entry {
        let (start, end, none) = (bytes.start, bytes.end, Stamp::default());
        match write {
            true => Entry { start, end, stream, write: stamp, read: none },
            false => Entry { start, end, stream, write: none, read: stamp },
        }
    }

    fn bytes(&self) -> Range<usize> {
        self.start..self.end
    }

    /// What an access on another stream must wait for here (`seq` 0: nothing): a write waits for the
    /// later of the write and the read, a read for the write. `true` with it where it is a write.
    pub fn conflict(&self, write: bool) -> (Stamp, bool) {
        match write && self.read.seq > self.write.seq {
            true => (self.read, false),
            false => (self.write, true),
        }
    }
}

pub(crate) fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

fn covers(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// Entries of one buffer in order of where they start, in chunks of at most [`Entries::CHUNK`]: a
/// search is two binary searches, an insertion moves at most a chunk, and a batch of thousands of small
/// copies in order appends to the last chunk.
#[derive(Default, Debug)]
struct Entries {
    chunks: Vec<Vec<Entry>>,
    /// Where the first entry of each chunk starts.
    firsts: Vec<usize>,
    /// Where the last search ended: work that sweeps a buffer in order (a batch of copies back) searches
    /// there or one place on next. Only a guess, checked against the entries before it is used.
    hint: std::cell::Cell<Pos>,
}

/// A place in [`Entries`]: (chunk, index in it).
type Pos = (usize, usize);

impl Entries {
    const CHUNK: usize = 64;

    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Its entry, taken out, where it holds exactly one.
    fn take_single(&mut self) -> Option<Entry> {
        match self.chunks.as_slice() {
            [chunk] if chunk.len() == 1 => {
                let e = chunk[0];
                self.chunks.clear();
                self.firsts.clear();
                self.hint.set((0, 0));
                Some(e)
            }
            _ => None,
        }
    }

    /// Where the last entry starts.
    fn last_start(&self) -> Option<usize> {
        self.chunks.last().and_then(|c| c.last()).map(|e| e.start)
    }

    /// The first place whose entry starts at `key` or after (one past the last chunk where none does).
    fn lower_bound(&self, key: usize) -> Pos {
        // Work appended in order searches past the last entry: no search at all.
        if self.last_start().is_none_or(|last| last < key) {
            return (self.chunks.len(), 0);
        }
        // A sweep in order searches where the last search ended, or one place on.
        let (c, i) = self.hint.get();
        let next = match self.chunks.get(c) {
            Some(chunk) if i + 1 < chunk.len() => (c, i + 1),
            _ => (c + 1, 0),
        };
        for guess in [(c, i), next] {
            if self.is_lower_bound(guess, key) {
                self.hint.set(guess);
                return guess;
            }
        }
        let found = self.search(key);
        self.hint.set(found);
        found
    }

    /// Whether `pos` holds an entry that starts at `key` or after, and the entry before it (if any)
    /// starts before `key`: [`Entries::lower_bound`]'s answer.
    fn is_lower_bound(&self, (c, i): Pos, key: usize) -> bool {
        let Some(e) = self.chunks.get(c).and_then(|chunk| chunk.get(i)) else { return false };
        let before = match i {
            0 => c.checked_sub(1).and_then(|b| self.chunks[b].last()),
            _ => self.chunks[c].get(i - 1),
        };
        e.start >= key && before.is_none_or(|b| b.start < key)
    }

    /// [`Entries::lower_bound`] by binary search.
    fn search(&self, key: usize) -> Pos {
        // Most other searches are near the end: the last chunk first.
        let c = match self.firsts.last() {
            Some(&last) if last < key => self.firsts.len(),
            _ => self.firsts.partition_point(|&f| f < key),
        };
        if c == 0 {
            return (0, 0);
        }
        let i = self.chunks[c - 1].partition_point(|e| e.start < key);
        if i == self.chunks[c - 1].len() {
            (c, 0)
        } else {
            (c - 1, i)
        }
    }

    /// The place before `pos`, if any.
    #[inline]
    fn before(&self, (c, i): Pos) -> Option<Pos> {
        match i {
            0 => c.checked_sub(1).map(|b| (b, self.chunks[b].len() - 1)),
            _ => Some((c, i - 1)),
        }
    }

    /// `pos`, or where the entries of the bytes just before it start, where those end after `key`
    /// (reach into a range that starts at `key`, for a `pos` that is [`Entries::lower_bound`] of `key`).
    /// Where no two entries overlap unless they are of the same bytes, those are the only ones before
    /// `pos` that can.
    #[inline]
    fn reaching(&self, pos: Pos, key: usize) -> Pos {
        let Some(mut first) = self.before(pos).filter(|&(b, j)| self.chunks[b][j].end > key) else { return pos };
        let start = self.chunks[first.0][first.1].start;
        while let Some(p) = self.before(first).filter(|&(b, j)| self.chunks[b][j].start == start) {
            first = p;
        }
        first
    }

    /// Calls `f` with each entry from `pos` on, in order, until it returns false.
    #[inline]
    fn scan(&self, (mut c, mut i): Pos, mut f: impl FnMut(Pos, &Entry) -> bool) {
        while let Some(chunk) = self.chunks.get(c) {
            while let Some(e) = chunk.get(i) {
                if !f((c, i), e) {
                    return;
                }
                i += 1;
            }
            (c, i) = (c + 1, 0);
        }
    }

    fn get_mut(&mut self, (c, i): Pos) -> &mut Entry {
        &mut self.chunks[c][i]
    }

    /// The entry at `pos`, if there is one.
    #[inline]
    fn get(&self, (c, i): Pos) -> Option<&Entry> {
        self.chunks.get(c).and_then(|chunk| chunk.get(i))
    }

    /// The place after `pos`.
    #[inline]
    fn after(&self, (c, i): Pos) -> Pos {
        match self.chunks.get(c) {
            Some(chunk) if i + 1 < chunk.len() => (c, i + 1),
            _ => (c + 1, 0),
        }
    }

    /// Appends `e`, which starts where the last entry does or after: into the last chunk, or a new one
    /// where that is full (a sweep in order fills its chunks, and moves none).
    #[inline]
    fn append(&mut self, e: Entry) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < Self::CHUNK => chunk.push(e),
            _ => self.append_chunk(e),
        }
    }

    #[inline(never)]
    fn append_chunk(&mut self, e: Entry) {
        let mut chunk = Vec::with_capacity(Self::CHUNK + 1);
        chunk.push(e);
        self.chunks.push(chunk);
        self.firsts.push(e.start);
    }

    /// Inserts `e` after the entries that start where it does or before.
    fn insert(&mut self, e: Entry) {
        if self.chunks.is_empty() {
            self.chunks.push(Vec::with_capacity(Self::CHUNK + 1));
            self.firsts.push(e.start);
        }
        let last = self.chunks.len() - 1;
        // Appending in order is the common case: no search.
        let (c, i) = match self.chunks[last].last() {
            Some(x) if x.start <= e.start => (last, self.chunks[last].len()),
            _ => {
                let c = self.firsts.partition_point(|&f| f <= e.start).max(1) - 1;
                (c, self.chunks[c].partition_point(|x| x.start <= e.start))
            }
        };
        let chunk = &mut self.chunks[c];
        match i == chunk.len() {
            true => chunk.push(e),
            false => chunk.insert(i, e),
        }
        if i == 0 {
            self.firsts[c] = e.start;
        }
        if chunk.len() > Self::CHUNK {
            self.split(c);
        }
    }

    /// Splits chunk `c`, one entry over full, in two halves (once every [`Entries::CHUNK`] / 2
    /// insertions at most: out of line).
    #[inline(never)]
    fn split(&mut self, c: usize) {
        let mut tail = Vec::with_capacity(Self::CHUNK + 1);
        tail.extend(self.chunks[c].drain(Self::CHUNK / 2..));
        self.firsts.insert(c + 1, tail[0].start);
        self.chunks.insert(c + 1, tail);
    }

    /// Removes the entry at `pos`; places after it in its chunk (and, if the chunk empties, in later
    /// chunks) move.
    #[inline(never)]
    fn remove(&mut self, (c, i): Pos) {
        let chunk = &mut self.chunks[c];
        chunk.remove(i);
        if chunk.is_empty() {
            self.chunks.remove(c);
            self.firsts.remove(c);
        } else if i == 0 {
            self.firsts[c] = chunk[0].start;
        }
    }

    fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }
}

/// Per lent buffer: what each stream did to which bytes, that later operations on other streams may
/// have to wait for.
#[derive(Default, Debug)]
pub(crate) struct Tracker {
    /// Lent from another context: every operation on it is refused.
    pub foreign: bool,
    /// Managed memory: the only kind a prefetch may move.
    pub managed: bool,
    /// The one entry, while there is exactly one (a buffer used whole, the commonest case): kept here,
    /// so that finding it takes no search and no pointer to follow (the driver's calls between two
    /// operations leave little of the book in the nearest caches). `entries` is empty meanwhile.
    lone: Option<Entry>,
    entries: Entries,
    /// The longest entry remembered: how far before a range an entry that overlaps it can start. It
    /// never needs to shrink: an entry is forgotten only when one that covers it, so at least as long,
    /// is remembered.
    longest: usize,
    /// Whether two of the searched entries may overlap without being of the same bytes. Until two do
    /// (buffers of an arena used each whole, by any streams, whatever their sizes), the entries that
    /// overlap a range are those of the bytes just before where it starts (if they reach into it) and
    /// those that start inside it: a search, not a scan back over the longest entry's length (2 MiB of
    /// small buffers behind one large one).
    overlap: bool,
}

impl Tracker {
    pub fn new(foreign: bool, managed: bool) -> Tracker {
        Tracker { foreign, managed, ..Tracker::default() }
    }

    /// Calls `f` with every entry that overlaps `bytes`.
    #[inline]
    pub fn overlapping(&self, bytes: &Range<usize>, mut f: impl FnMut(&Entry)) {
        if let Some(e) = &self.lone {
            if overlaps(&e.bytes(), bytes) {
                f(e);
            }
            return;
        }
        // Work appended in order starts where every entry has ended: nothing to search.
        if self.after_every_entry(bytes.start) {
            return;
        }
        self.overlapping_searched(bytes, f);
    }

    /// [`Tracker::overlapping`] among the searched entries: out of line, so that a buffer's one entry
    /// and work appended in order take the short ways above.
    #[inline(never)]
    fn overlapping_searched(&self, bytes: &Range<usize>, mut f: impl FnMut(&Entry)) {
        self.entries.scan(self.search_from(bytes), |_, e| {
            if e.start >= bytes.end {
                return false;
            }
            if overlaps(&e.bytes(), bytes) {
                f(e);
            }
            true
        });
    }

    /// Where a search for the entries that overlap `bytes` starts (among the searched ones).
    #[inline]
    fn search_from(&self, bytes: &Range<usize>) -> Pos {
        match self.overlap {
            false => self.entries.reaching(self.entries.lower_bound(bytes.start), bytes.start),
            true => self.entries.lower_bound(bytes.start.saturating_sub(self.longest)),
        }
    }

    /// Remembers that `stream` wrote (or read) `bytes` at `stamp`, forgetting what that makes redundant:
    /// a write is ordered after everything it overlaps, so it stands for what it covers, on every
    /// stream; a read stands for the reads of its stream that it covers, and one of exactly the bytes a
    /// write of its stream wrote joins that write's entry. `scratch` is a vector to reuse.
    #[inline(always)]
    pub fn record(&mut self, stream: u32, write: bool, bytes: &Range<usize>, stamp: Stamp, scratch: &mut Vec<Pos>) {
        if bytes.is_empty() {
            return; // no bytes: nothing to order against, ever
        }
        // The first entry of all becomes the one; while there is one, an access that stands for it (as
        // the search would find, without one) takes its place: a write that covers it, a read of its
        // stream that covers its reads alone, or one of exactly the bytes it wrote joins it.
        let Some(e) = &mut self.lone else {
            if self.entries.is_empty() {
                self.lone = Some(Entry::of(stream, write, bytes, stamp));
                self.longest = self.longest.max(bytes.len());
            } else if self.record_searching(stream, write, bytes, stamp, scratch) {
                self.lone = self.entries.take_single(); // a write over every entry leaves one
                self.overlap &= self.lone.is_none();
            }
            return;
        };
        let (covered, ours) = (covers(bytes, &e.bytes()), e.stream == stream);
        match (write, covered, ours && e.write.seq == 0) {
            (_, true, true) | (true, true, _) => *e = Entry::of(stream, write, bytes, stamp),
            (false, true, false) if ours && e.start == bytes.start && e.end == bytes.end => e.read = stamp,
            _ => {
                // A second entry: both go where entries are searched.
                let one = *e;
                self.lone = None;
                self.overlap = false;
                self.entries.append(one);
                self.record_searching(stream, write, bytes, stamp, scratch);
                return;
            }
        }
        self.longest = self.longest.max(bytes.len());
    }

    /// The searched entry of exactly `bytes` where it is the only entry that overlaps them: no two
    /// entries overlap unless they are of the same bytes (`overlap` is false), so none before it reaches
    /// into them, and the next starts where it ends or after, so none other is of these bytes. A copy
    /// back of what went up, or a range written again, into an arena of buffers each used whole.
    #[inline]
    fn exactly(&self, bytes: &Range<usize>) -> Option<&Entry> {
        if self.overlap {
            return None;
        }
        let at = self.entries.lower_bound(bytes.start);
        let e = self.entries.get(at).filter(|e| e.start == bytes.start && e.end == bytes.end)?;
        match self.entries.get(self.entries.after(at)) {
            Some(next) if next.start < bytes.end => None,
            _ => Some(e),
        }
    }

    /// Whether `start` is where every searched entry has ended, or after (none can start later than the
    /// last, nor be longer than the longest): true where there are none.
    #[inline]
    fn after_every_entry(&self, start: usize) -> bool {
        self.entries.last_start().is_none_or(|last| last + self.longest <= start)
    }

    /// [`Tracker::record`] among the entries searched: whether it forgot any.
    fn record_searching(
        &mut self,
        stream: u32,
        write: bool,
        bytes: &Range<usize>,
        stamp: Stamp,
        scratch: &mut Vec<Pos>,
    ) -> bool {
        let new = Entry::of(stream, write, bytes, stamp);
        // Work appended in order (a batch of copies into an arena): every entry ends where this one
        // starts or before, so it covers none and comes last.
        if self.after_every_entry(bytes.start) {
            self.longest = self.longest.max(bytes.len());
            self.entries.append(new);
            return false;
        }
        self.record_among(new, write, scratch)
    }

    /// [`Tracker::record_searching`] of `new` (a write, or a read) where it does not come after every
    /// entry: out of line, so that work appended in order takes the short way above.
    #[inline(never)]
    fn record_among(&mut self, new: Entry, write: bool, scratch: &mut Vec<Pos>) -> bool {
        let (stream, bytes) = (new.stream, &new.bytes());
        let stamp = if write { new.write } else { new.read };
        let at = self.entries.lower_bound(bytes.start);
        // One entry of exactly these bytes, which no other entry starts inside: a write takes its place
        // (the same range written again, by any stream), and a read of the stream that wrote them joins
        // it (a copy back of what went up), as the search below would find.
        let mut exact = None;
        self.entries.scan(at, |pos, e| match exact {
            None if e.start == bytes.start && e.end == bytes.end => {
                exact = Some(pos);
                true
            }
            Some(_) if e.start < bytes.end => {
                exact = None;
                false
            }
            _ => false,
        });
        if let Some(pos) = exact {
            let e = self.entries.get_mut(pos);
            if write {
                *e = new;
                return false;
            }
            if e.stream == stream && e.write.seq != 0 {
                e.read = stamp;
                return false;
            }
        }
        scratch.clear();
        let mut joined = None;
        // An entry before it that reaches into it, or one inside it that stays and is not of its very bytes,
        // will overlap it.
        let mut partial = self.entries.reaching(at, bytes.start) != at;
        // Entries it covers start inside it.
        self.entries.scan(at, |pos, e| {
            if e.start >= bytes.end {
                return false;
            }
            if !covers(bytes, &e.bytes()) {
                partial = true;
                return true;
            }
            let exact = e.start == bytes.start && e.end == bytes.end;
            if write || (e.stream == stream && e.write.seq == 0) {
                scratch.push(pos);
            } else if exact && e.stream == stream {
                joined = Some(pos);
            } else if !exact {
                partial = true; // kept beside it (one of the very same bytes may stay)
            }
            true
        });
        if let Some(pos) = joined {
            self.entries.get_mut(pos).read = stamp;
            for &pos in scratch.iter().rev() {
                self.entries.remove(pos);
            }
            return !scratch.is_empty();
        }
        self.longest = self.longest.max(bytes.len());
        self.overlap |= partial;
        // Where the first entry it replaces starts where it does, it takes that entry's place.
        match scratch.first() {
            Some(&first) if self.entries.chunks[first.0][first.1].start == bytes.start => {
                for &pos in scratch[1..].iter().rev() {
                    self.entries.remove(pos);
                }
                *self.entries.get_mut(first) = new;
            }
            _ => {
                for &pos in scratch.iter().rev() {
                    self.entries.remove(pos);
                }
                self.entries.insert(new);
            }
        }
        !scratch.is_empty()
    }

    /// [`Tracker::record`] of each of `items` (ranges sorted by start, none overlapping another, each with
    /// its stamp), by `stream`, all writes or all reads: the same entries as recording them one by one,
    /// made in one pass over the entries where that is the cheaper (a group of small copies noted as it
    /// is issued, each its own range among other streams' ranges of an arena). One pass applies where
    /// each item meets no entry, or exactly one of its very bytes (no two entries overlap unless they are
    /// of the same bytes); else, and where the items are few beside the entries, they are recorded one
    /// by one. `scratch`: vectors to reuse.
    pub fn record_many(
        &mut self,
        stream: u32,
        write: bool,
        items: &[(Range<usize>, Stamp)],
        (scratch, old): (&mut Vec<Pos>, &mut Vec<Entry>),
    ) {
        if items.len() >= 16 && items.len() * 8 >= self.len() && !self.overlap {
            let lone = self.lone.take().inspect(|&e| self.entries.append(e)); // searched with the rest
            match self.merges(stream, write, items) {
                Some(false) => return self.take_or_join(stream, write, items),
                Some(true) => return self.merge(stream, write, items, old),
                None if lone.is_some() => self.lone = self.entries.take_single(), // alone again
                None => {}
            }
        }
        for (bytes, stamp) in items {
            self.record(stream, write, bytes, *stamp, scratch);
        }
    }

    /// What an item of `stream` (`write`, or a read) does to the one entry of its very bytes: a write
    /// takes its place; a read joins the write of its stream, stands for a read of its stream, or stays
    /// beside another stream's (the entry it adds, given back).
    #[inline]
    fn one(e: &mut Entry, stream: u32, write: bool, bytes: &Range<usize>, stamp: Stamp) -> Option<Entry> {
        let new = Entry::of(stream, write, bytes, stamp);
        match (write, e.stream == stream, e.write.seq != 0) {
            (true, _, _) | (false, true, false) => *e = new,
            (false, true, true) => e.read = stamp,
            (false, false, _) => return Some(new),
        }
        None
    }

    /// [`Tracker::record_many`] where each item takes or joins the entry of its very bytes: in place.
    fn take_or_join(&mut self, stream: u32, write: bool, items: &[(Range<usize>, Stamp)]) {
        let (mut c, mut i) = (0, 0);
        for (bytes, stamp) in items {
            while self.entries.chunks[c][i].start < bytes.start {
                (c, i) = self.entries.after((c, i));
            }
            self.longest = self.longest.max(bytes.len());
            Self::one(&mut self.entries.chunks[c][i], stream, write, bytes, *stamp);
        }
    }

    /// [`Tracker::record_many`] where some item adds an entry: the entries made again, each moved once,
    /// the items among them in order. `old`: a vector to reuse.
    fn merge(&mut self, stream: u32, write: bool, items: &[(Range<usize>, Stamp)], old: &mut Vec<Entry>) {
        old.clear();
        for chunk in self.entries.chunks.drain(..) {
            old.extend_from_slice(&chunk);
        }
        self.entries.firsts.clear();
        self.entries.hint.set((0, 0));
        let mut k = 0;
        for (bytes, stamp) in items {
            self.longest = self.longest.max(bytes.len());
            while k < old.len() && old[k].end <= bytes.start {
                self.entries.append(old[k]);
                k += 1;
            }
            let new = Entry::of(stream, write, bytes, *stamp);
            let beside = match k < old.len() && old[k].start < bytes.end {
                false => Some(new),
                true => {
                    let beside = Self::one(&mut old[k], stream, write, bytes, *stamp);
                    self.entries.append(old[k]);
                    k += 1;
                    beside
                }
            };
            if let Some(e) = beside {
                self.entries.append(e);
            }
        }
        for &e in &old[k..] {
            self.entries.append(e);
        }
    }

    /// Whether [`Tracker::record_many`]'s one pass applies (the entries searched, none alone): each of
    /// `items` (sorted, none overlapping another) meets no entry or exactly one, of its very bytes.
    /// `Some(true)` where one adds an entry (it meets none, or it is a read beside another stream's
    /// entry), `Some(false)` where each takes or joins the entry it meets, in place.
    fn merges(&self, stream: u32, write: bool, items: &[(Range<usize>, Stamp)]) -> Option<bool> {
        if items.windows(2).any(|w| w[1].0.start < w[0].0.end) {
            return None;
        }
        let mut at = (0, 0);
        let mut inserts = false;
        for (bytes, _) in items {
            while self.entries.get(at).is_some_and(|e| e.end <= bytes.start) {
                at = self.entries.after(at);
            }
            let mut met = 0;
            while let Some(e) = self.entries.get(at).filter(|e| e.start < bytes.end) {
                met += 1;
                if met > 1 || e.start != bytes.start || e.end != bytes.end {
                    return None;
                }
                inserts |= !write && e.stream != stream;
                at = self.entries.after(at);
            }
            inserts |= met == 0;
        }
        Some(inserts)
    }

    /// How many entries it keeps.
    pub fn len(&self) -> usize {
        self.entries.len() + self.lone.is_some() as usize
    }

    #[cfg(test)]
    fn all(&self) -> Vec<Entry> {
        assert!(self.lone.is_none() || self.entries.is_empty(), "the one entry, or the searched ones");
        self.lone.iter().chain(self.entries.chunks.iter().flatten()).copied().collect()
    }
}

/// The ranges one operation touches, checked and merged into `out`: sorted by buffer, then by kind (read
/// before write) and start, with ranges of one kind that overlap or touch made one. Unless the
/// operation's parts run one after another (`sequential`: a graph captured on one stream), two ranges of
/// one buffer that overlap with at least one written are refused, in words: the operation's result would
/// race. Linear in the ranges where they come sorted (a batch over a buffer, in order), n log n otherwise.
#[inline]
pub(crate) fn normalize(accesses: &[DevAccess], sequential: bool, out: &mut Vec<DevAccess>) -> Result<(), Overlap> {
    out.clear();
    out.extend_from_slice(accesses);
    match out.len() <= 1 {
        true => Ok(()), // a copy's one range: nothing to check or merge
        false => normalize_many(sequential, out),
    }
}

/// [`normalize`] of two ranges or more, in `out` as given.
#[inline(never)]
fn normalize_many(sequential: bool, out: &mut Vec<DevAccess>) -> Result<(), Overlap> {
    let by_place = |a: &DevAccess| (a.buffer, a.bytes.start, a.bytes.end);
    if !out.windows(2).all(|w| by_place(&w[0]) <= by_place(&w[1])) {
        out.sort_unstable_by_key(by_place);
    }
    if !sequential {
        // In order of start (and end), an access overlaps an earlier one of its buffer exactly when it
        // starts before the furthest end of those: so the furthest-reaching earlier write, and earlier
        // access of either kind, say whether it conflicts, and with which.
        let (mut buffer, mut write, mut any): (usize, Option<usize>, Option<usize>) = (usize::MAX, None, None);
        for (i, a) in out.iter().enumerate() {
            if buffer != a.buffer {
                (buffer, write, any) = (a.buffer, None, None);
            }
            let against = if a.write { any } else { write };
            if let Some(b) = against.map(|k| &out[k]).filter(|b| a.bytes.start < b.bytes.end) {
                return Err(Overlap {
                    buffer: a.buffer,
                    ranges: (b.bytes.clone(), a.bytes.clone()),
                    both_written: a.write && b.write,
                });
            }
            let further = |k: Option<usize>| match k {
                Some(k) if out[k].bytes.end >= a.bytes.end => Some(k),
                _ => Some(i),
            };
            any = further(any);
            if a.write {
                write = further(write);
            }
        }
    }
    let by_kind = |a: &DevAccess| (a.buffer, a.write, a.bytes.start, a.bytes.end);
    if !out.windows(2).all(|w| by_kind(&w[0]) <= by_kind(&w[1])) {
        out.sort_unstable_by_key(by_kind);
    }
    // Merge in place: `kept` ranges so far, each absorbing those after it that it touches.
    let mut kept = 0;
    for i in 1..out.len() {
        let (m, a) = (&out[kept], &out[i]);
        if m.buffer == a.buffer && m.write == a.write && a.bytes.start <= m.bytes.end {
            let end = m.bytes.end.max(a.bytes.end);
            out[kept].bytes.end = end;
        } else {
            kept += 1;
            out.swap(kept, i);
        }
    }
    out.truncate(kept + 1);
    Ok(())
}

/// Four streams' numbers: the clocks' unit, so that a wait or a snapshot is a few straight-line groups of
/// four (one for a scope of up to four streams), with no remainder to handle.
pub(crate) type Four = [u64; 4];

/// The ordering known on each stream: `clock[j][k]` is the last operation of stream k (by sequence
/// number) that is complete before anything queued next on stream j. Flat, `streams` rows of `groups`
/// groups of four (the streams rounded up to four; the padding stays 0, which no wait raises).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Clocks {
    groups: usize,
    clock: Vec<Four>,
    seq: Vec<u64>,
}

/// `c` raised to `s` where `s` is later, stream by stream.
#[inline(always)]
fn merge(c: &mut Four, s: &Four) {
    for l in 0..4 {
        if s[l] > c[l] {
            c[l] = s[l];
        }
    }
}

impl Clocks {
    fn reset(&mut self, streams: usize) {
        self.groups = streams.div_ceil(4);
        self.clock.clear();
        self.clock.resize(streams * self.groups, [0; 4]);
        self.seq.clear();
        self.seq.resize(streams, 0);
    }

    /// Whether operation `seq` of stream `k` is ordered before what stream `j` queues next.
    #[inline(always)]
    pub fn ordered(&self, j: usize, k: usize, seq: u64) -> bool {
        j == k || self.clock[j * self.groups + k / 4][k % 4] >= seq
    }

    /// Queues an operation on stream `j`: its sequence number.
    #[inline(always)]
    fn queue(&mut self, j: usize) -> u64 {
        self.seq[j] += 1;
        self.seq[j]
    }

    /// The operations queued on stream `k` so far.
    pub fn seq(&self, k: usize) -> u64 {
        self.seq[k]
    }

    /// The groups of a row: what a fence's snapshot holds.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// What stream `j` knows after waiting for an event that knew `snapshot`.
    #[inline(always)]
    fn wait(&mut self, j: usize, snapshot: &[Four]) {
        let g = self.groups;
        if g == 1 {
            // Up to four streams: one group, no loop.
            merge(&mut self.clock[j], &snapshot[0]);
            return;
        }
        let (row, snapshot) = (&mut self.clock[j * g..(j + 1) * g], &snapshot[..g]);
        for (c, s) in row.iter_mut().zip(snapshot) {
            merge(c, s);
        }
    }

    /// Appends what an event recorded now on stream `j` knows.
    #[inline(always)]
    fn snapshot_into(&self, j: usize, out: &mut Vec<Four>) {
        let (at, g) = (out.len(), self.groups);
        if g == 1 {
            // Up to four streams: the row, with its own stream's number, pushed whole.
            let mut row = self.clock[j];
            row[j % 4] = self.seq[j];
            out.push(row);
            return;
        }
        out.extend_from_slice(&self.clock[j * g..(j + 1) * g]);
        out[at + j / 4][j % 4] = self.seq[j];
    }
}

/// A wait an operation needs: for operation `seq` of `stream` (the latest of that stream it conflicts
/// with, operation `op`), and the first such conflict in words' worth of detail.
#[derive(Clone, Debug)]
pub(crate) struct Need {
    pub stream: usize,
    pub seq: u64,
    op: u32,
    /// Index of the operation's own access (in `Book::normalized`) that meets it.
    mine: u32,
    /// The fence recorded right after it, if one was: [`Stamp::after`].
    after: u32,
}

/// What [`Book::plan_one`] decided for an operation of one access: whether a fence should follow it
/// (another stream touched its bytes before), and the fence it must wait for first, if any.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PlanOne {
    pub shared: bool,
    pub wait: Option<usize>,
}

/// The scope's whole bookkeeping: see the module docs. In C's order, what an operation touches first.
#[derive(Default)]
#[repr(C)]
pub(crate) struct Book {
    pub trackers: Vec<Tracker>,
    /// The waits the operation being planned needs, newest conflict first.
    pub needs: Vec<Need>,
    /// The operation being planned's ranges, checked and merged.
    pub normalized: Vec<DevAccess>,
    pub clocks: Clocks,
    /// Fences noted so far.
    fence_count: usize,
    /// What each fence knew: a row of the clocks ([`Clocks::groups`] groups of four) a fence.
    fence_clocks: Vec<Four>,
    /// Per stream, its fences in the order recorded (so by sequence number).
    by_stream: Vec<Vec<(u64, u32)>>,
    /// Every operation queued, for the words of a message and the observer.
    pub ops: Vec<OpInfo>,
    pub waits: Waits,
    redundant: Vec<Pos>,
    /// A group's accesses as [`Book::queued_held`] notes them, and a run of them: kept for the next.
    items: Vec<(usize, bool, Range<usize>, Stamp)>,
    run: Vec<(Range<usize>, Stamp)>,
    entries: Vec<Entry>,
}

impl Book {
    /// Empties the book for a scope of `streams` streams, keeping what it had allocated.
    pub fn reset(&mut self, streams: usize) {
        self.trackers.clear();
        self.clocks.reset(streams);
        self.fence_count = 0;
        self.fence_clocks.clear();
        self.by_stream.iter_mut().for_each(Vec::clear);
        self.by_stream.resize_with(streams, Vec::new);
        self.ops.clear();
        self.waits = Waits::default();
        self.needs.clear();
        self.normalized.clear();
    }

    /// A new buffer lent to the scope: its index.
    pub fn lend(&mut self, foreign: bool, managed: bool) -> usize {
        self.trackers.push(Tracker::new(foreign, managed));
        self.trackers.len() - 1
    }

    /// Plans an operation on stream `j` over `accesses`: checks and merges its ranges (into
    /// [`Book::normalized`]), finds the waits it needs (into `Book::needs`, the newest conflict first)
    /// and says whether a fence should follow it (another stream touched its bytes before).
    #[inline]
    pub fn plan(&mut self, j: usize, accesses: &[DevAccess], sequential: bool) -> Result<bool, Overlap> {
        normalize(accesses, sequential, &mut self.normalized)?;
        self.needs.clear();
        let mut shared = false;
        let (clocks, needs) = (&self.clocks, &mut self.needs);
        for (i, a) in self.normalized.iter().enumerate() {
            self.trackers[a.buffer].overlapping(&a.bytes, |e| {
                let k = e.stream as usize;
                if k == j {
                    return;
                }
                shared = true;
                let (stamp, _) = e.conflict(a.write);
                if stamp.seq == 0 || clocks.ordered(j, k, stamp.seq) {
                    return;
                }
                let need = Need { stream: k, seq: stamp.seq, op: stamp.op, mine: i as u32, after: stamp.after };
                match needs.iter_mut().find(|n| n.stream == k) {
                    Some(n) if n.seq >= stamp.seq => {}
                    Some(n) => *n = need,
                    None => needs.push(need),
                }
            });
        }
        // Newest first: waiting for a later operation may order the earlier ones of other streams too.
        if self.needs.len() > 1 {
            self.needs.sort_unstable_by_key(|n| std::cmp::Reverse(n.op));
        }
        Ok(shared)
    }

    /// [`Book::plan`] of an operation of one access, the short way, where that applies: its buffer holds
    /// one entry or none (a buffer used whole, the commonest case), or the access comes after every entry
    /// (work appended in order), or it is of exactly the bytes of one entry that no other overlaps (work
    /// on one part of an arena again: the copy back of what went up), the access has bytes, and the wait
    /// it needs, if any, is not the scope's first added one (whose words [`Book::waited`] writes) and has
    /// a fence recorded already. Then the plan says what [`Book::plan`] and [`Book::fence_for`] would
    /// have, and [`Book::queued`] takes the access; else `None`, nothing changed, and the operation takes
    /// the general way.
    #[inline(always)]
    pub fn plan_one(&self, j: usize, a: &DevAccess) -> Option<PlanOne> {
        let t = &self.trackers[a.buffer];
        if a.bytes.is_empty() {
            return None;
        }
        // The one entry that may meet the access: the buffer's one, or among searched entries, none for
        // work appended after every one of them (a batch of copies into an arena, in order), or one of
        // exactly its bytes that no other overlaps (the copies back); anything else takes the search.
        let one = match &t.lone {
            Some(e) => Some(e),
            None if t.entries.is_empty() || t.after_every_entry(a.bytes.start) => None,
            None => Some(t.exactly(&a.bytes)?),
        };
        let mut plan = PlanOne { shared: false, wait: None };
        if let Some(e) = one {
            let k = e.stream as usize;
            if k != j && overlaps(&e.bytes(), &a.bytes) {
                plan.shared = true;
                let (stamp, _) = e.conflict(a.write);
                if stamp.seq != 0 && !self.clocks.ordered(j, k, stamp.seq) {
                    self.waits.first_added.as_ref()?;
                    plan.wait = Some(match stamp.after {
                        0 => self.fence_after(k, stamp.seq)?,
                        after => after as usize - 1,
                    });
                }
            }
        }
        Some(plan)
    }

    /// The first fence after what need `i` waits for, if any: the one recorded right after it, or else
    /// one recorded later on its stream.
    #[inline]
    pub fn fence_for(&self, i: usize) -> Option<usize> {
        let need = &self.needs[i];
        match need.after {
            0 => self.fence_after(need.stream, need.seq),
            after => {
                debug_assert_eq!(self.fence_after(need.stream, need.seq), Some(after as usize - 1));
                Some(after as usize - 1)
            }
        }
    }

    /// The first fence on stream `k` recorded after its operation `seq`, if any.
    #[inline]
    pub fn fence_after(&self, k: usize, seq: u64) -> Option<usize> {
        let list = &self.by_stream[k];
        // Most often the fence wanted is the last (recorded right after the operation): no search.
        let at = match list.as_slice() {
            [.., (before, _), (last, _)] if *before < seq && *last >= seq => list.len() - 1,
            [(only, _)] if *only >= seq => 0,
            _ => list.partition_point(|&(s, _)| s < seq),
        };
        list.get(at).map(|&(_, f)| f as usize)
    }

    /// Notes a fence recorded on stream `k` now: its index.
    #[inline(always)]
    pub fn add_fence(&mut self, k: usize) -> usize {
        let index = self.fence_count;
        self.fence_count += 1;
        self.clocks.snapshot_into(k, &mut self.fence_clocks);
        self.by_stream[k].push((self.clocks.seq(k), index as u32));
        index
    }

    /// Notes that stream `j` waits for fence `f`: the program's own wait (`made`), or one the scope
    /// adds for `need` (an index in [`Book::needs`]), described in words if it is the first (`name` says
    /// what the operation is).
    #[inline(always)]
    pub fn waited(&mut self, j: usize, f: usize, need: Option<(usize, &dyn Fn() -> String)>) {
        let Some((need, name)) = need else {
            self.merge_fence(j, f);
            self.waits.made += 1;
            return;
        };
        if self.waits.first_added.is_none() {
            self.waits.first_added = Some(self.first_added(j, &self.needs[need], name));
        }
        self.waited_again(j, f);
    }

    /// [`Book::waited`] for a wait the scope adds after its first, whose words are written already.
    #[inline(always)]
    pub fn waited_again(&mut self, j: usize, f: usize) {
        debug_assert!(self.waits.first_added.is_some());
        self.merge_fence(j, f);
        self.waits.added += 1;
    }

    /// Stream `j` now knows what fence `f` knew.
    #[inline(always)]
    fn merge_fence(&mut self, j: usize, f: usize) {
        let g = self.clocks.groups();
        self.clocks.wait(j, &self.fence_clocks[f * g..(f + 1) * g]);
    }

    /// The first wait the scope added, in words: which operation waits for which, over which bytes.
    #[cold]
    #[inline(never)]
    fn first_added(&self, j: usize, need: &Need, name: &dyn Fn() -> String) -> String {
        let a = &self.normalized[need.mine as usize];
        // The earlier access it meets: still in the book, which changes only once the operation is queued.
        let (mut theirs, mut theirs_wrote) = (a.bytes.clone(), false);
        self.trackers[a.buffer].overlapping(&a.bytes, |e| {
            let (stamp, wrote) = e.conflict(a.write);
            if e.stream as usize == need.stream && stamp.op == need.op {
                (theirs, theirs_wrote) = (e.bytes(), wrote);
            }
        });
        let c = &theirs;
        let other = self.ops[need.op as usize].label();
        let both = a.bytes.start.max(c.start)..a.bytes.end.min(c.end);
        format!(
            "{} on stream {j} {} bytes {}..{} ({}) of lent buffer {}, which {other} on stream {} {} earlier, \
             and nothing ordered the two",
            name(),
            if a.write { "writes" } else { "reads" },
            both.start,
            both.end,
            Bytes(both.len()),
            a.buffer,
            need.stream,
            if theirs_wrote { "writes" } else { "reads" }
        )
    }

    /// Notes an operation whose accesses are noted later ([`Book::queued_held`]): a copy held to coalesce.
    /// Its index.
    #[inline(always)]
    pub fn held(&mut self, info: OpInfo) -> usize {
        self.ops.push(info);
        self.ops.len() - 1
    }

    /// Notes the accesses of a group of copies held on stream `j` (each `(buffer, write, bytes, op)`, of
    /// operations noted by [`Book::held`]) as the group is issued: as one operation of the stream's,
    /// after every one noted before it there. A group is issued before anything else on its stream, and
    /// before any operation of another stream's that may touch its bytes is planned, so nothing planned
    /// meanwhile could have needed them.
    pub fn queued_held(&mut self, j: usize, accesses: impl Iterator<Item = (usize, bool, Range<usize>, usize)>) {
        let seq = self.clocks.queue(j);
        let mut items = std::mem::take(&mut self.items);
        items.clear();
        items.extend(
            accesses.map(|(buffer, write, bytes, op)| (buffer, write, bytes, Stamp { seq, op: op as u32, after: 0 })),
        );
        // A run of one buffer's writes or reads, in order: the tracker notes them in one pass where it can.
        if !items.windows(2).all(|w| (w[0].0, w[0].1, w[0].2.start) <= (w[1].0, w[1].1, w[1].2.start)) {
            items.sort_by_key(|&(buffer, write, ref bytes, _)| (buffer, write, bytes.start));
        }
        let mut runs = std::mem::take(&mut self.run);
        for same in items.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let (buffer, write) = (same[0].0, same[0].1);
            runs.clear();
            runs.extend(same.iter().map(|(_, _, bytes, stamp)| (bytes.clone(), *stamp)));
            self.trackers[buffer].record_many(j as u32, write, &runs, (&mut self.redundant, &mut self.entries));
        }
        (self.items, self.run) = (items, runs);
    }

    /// Notes the operation just queued on stream `j` over [`Book::normalized`], or over `one` where it
    /// was planned by [`Book::plan_one`]: its index. `fenced`: a fence was recorded right after it, which
    /// [`Book::add_fence`] notes next.
    #[inline(always)]
    pub fn queued(&mut self, j: usize, one: Option<&DevAccess>, info: OpInfo, fenced: bool) -> usize {
        let seq = self.clocks.queue(j);
        let op = self.ops.len();
        self.ops.push(info);
        let after = if fenced { self.fence_count as u32 + 1 } else { 0 };
        let stamp = Stamp { seq, op: op as u32, after };
        let accesses = match one {
            Some(a) => std::slice::from_ref(a),
            None => &self.normalized,
        };
        for a in accesses {
            self.trackers[a.buffer].record(j as u32, a.write, &a.bytes, stamp, &mut self.redundant);
        }
        op
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Operation `op` (sequence number op + 1) on `stream`.
    fn rec(t: &mut Tracker, op: u32, stream: u32, write: bool, bytes: Range<usize>) {
        t.record(stream, write, &bytes, Stamp { seq: op as u64 + 1, op, after: 0 }, &mut Vec::new());
    }

    /// The operations of other streams that one on `stream` must wait for, one per entry it meets.
    fn conflicts(t: &Tracker, stream: u32, write: bool, bytes: Range<usize>) -> Vec<u32> {
        let mut v = Vec::new();
        t.overlapping(&bytes, |e| {
            let (stamp, _) = e.conflict(write);
            if e.stream != stream && stamp.seq > 0 {
                v.push(stamp.op)
            }
        });
        v
    }

    #[test]
    fn same_stream_never_conflicts() {
        let mut t = Tracker::default();
        rec(&mut t, 0, 0, true, 0..100);
        assert!(conflicts(&t, 0, false, 0..100).is_empty());
        assert!(conflicts(&t, 0, true, 0..100).is_empty());
    }

    #[test]
    fn read_after_write_on_another_stream_conflicts() {
        let mut t = Tracker::default();
        rec(&mut t, 7, 0, true, 0..100);
        assert_eq!(conflicts(&t, 1, false, 50..60), vec![7]);
        assert_eq!(conflicts(&t, 1, true, 99..200), vec![7]);
        assert!(conflicts(&t, 1, false, 100..200).is_empty(), "disjoint ranges are independent");
    }

    #[test]
    fn reads_do_not_conflict_with_reads() {
        let mut t = Tracker::default();
        rec(&mut t, 1, 0, false, 0..100);
        assert!(conflicts(&t, 1, false, 0..100).is_empty());
        assert_eq!(conflicts(&t, 1, true, 0..10), vec![1], "write after read");
    }

    #[test]
    fn a_covering_write_replaces_what_it_covers() {
        let mut t = Tracker::default();
        rec(&mut t, 1, 0, true, 0..50);
        rec(&mut t, 2, 1, false, 0..50);
        rec(&mut t, 3, 2, true, 0..100);
        let only =
            Entry { start: 0, end: 100, stream: 2, write: Stamp { seq: 4, op: 3, after: 0 }, read: Stamp::default() };
        assert_eq!(t.all(), vec![only]);
        assert_eq!(conflicts(&t, 0, false, 10..20), vec![3]);
    }

    #[test]
    fn a_read_of_what_its_stream_wrote_joins_the_write() {
        let mut t = Tracker::default();
        rec(&mut t, 1, 0, true, 0..100);
        rec(&mut t, 2, 0, false, 0..100);
        assert_eq!(t.len(), 1, "one entry: the write and the read since");
        assert_eq!(conflicts(&t, 1, false, 0..100), vec![1], "a reader elsewhere waits for the write alone");
        assert_eq!(conflicts(&t, 1, true, 0..100), vec![2], "a writer elsewhere for the read too");
        rec(&mut t, 3, 0, false, 0..50);
        assert_eq!(conflicts(&t, 1, true, 0..10), vec![2, 3], "a read of part of it is an entry of its own");
    }

    /// A tiny deterministic generator for the randomized tests.
    fn lcg(state: &mut u64) -> usize {
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*state >> 33) as usize
    }

    /// One access as the tracker once kept them, a list searched in full: what the chunked one must
    /// agree with.
    #[derive(Clone)]
    struct Access {
        stream: u32,
        seq: u64,
        write: bool,
        bytes: Range<usize>,
    }

    #[derive(Default)]
    struct Plain(Vec<Access>);

    impl Plain {
        fn record(&mut self, access: Access) {
            if access.bytes.is_empty() {
                return;
            }
            self.0.retain(|a| {
                let covered = covers(&access.bytes, &a.bytes);
                !(covered && (access.write || (!a.write && a.stream == access.stream)))
            });
            self.0.push(access);
        }

        /// For each other stream, the last of its operations that one on `stream` must wait for.
        fn needs(&self, stream: u32, write: bool, bytes: &Range<usize>) -> Vec<(u32, u64)> {
            let mut m = std::collections::BTreeMap::new();
            for a in self.0.iter().filter(|a| a.stream != stream && (write || a.write) && overlaps(&a.bytes, bytes)) {
                let e = m.entry(a.stream).or_insert(0);
                *e = a.seq.max(*e);
            }
            m.into_iter().collect()
        }
    }

    fn needs(t: &Tracker, stream: u32, write: bool, bytes: &Range<usize>) -> Vec<(u32, u64)> {
        let mut m = std::collections::BTreeMap::new();
        t.overlapping(bytes, |e| {
            let (stamp, _) = e.conflict(write);
            if e.stream != stream && stamp.seq > 0 {
                let s = m.entry(e.stream).or_insert(0);
                *s = stamp.seq.max(*s);
            }
        });
        m.into_iter().collect()
    }

    #[test]
    fn the_chunked_tracker_needs_what_a_full_search_finds() {
        let mut seed = 7;
        for round in 0..300 {
            let (mut t, mut plain) = (Tracker::default(), Plain::default());
            // Some rounds are long enough to split chunks many times over.
            let ops = if round % 10 == 0 { 2000 } else { 60 };
            let span = if round % 10 == 0 { 4000 } else { 100 };
            for op in 0..ops {
                let start = lcg(&mut seed) % span;
                let len = [0, 1, 4, 16, 60][lcg(&mut seed) % 5];
                let (stream, write) = ((lcg(&mut seed) % 3) as u32, lcg(&mut seed) % 2 == 0);
                let bytes = start..start + len;
                assert_eq!(needs(&t, stream, write, &bytes), plain.needs(stream, write, &bytes), "op {op}");
                rec(&mut t, op, stream, write, bytes.clone());
                plain.record(Access { stream, seq: op as u64 + 1, write, bytes });
            }
            let all = t.all();
            assert!(all.windows(2).all(|w| w[0].start <= w[1].start), "in order");
            assert!(t.entries.chunks.iter().all(|c| !c.is_empty() && c.len() <= Entries::CHUNK));
            assert_eq!(t.entries.firsts, t.entries.chunks.iter().map(|c| c[0].start).collect::<Vec<_>>());
        }
    }

    /// An arena of buffers of mixed sizes (a large one among many small ones, as a model's tensors), each
    /// used whole: its entries never overlap, so a search finds the one before a range and those inside
    /// it, and needs what a full search finds; with parts of buffers used too, the same.
    #[test]
    fn buffers_used_whole_are_searched_without_a_scan_over_the_longest() {
        let mut seed = 11;
        let sizes = [4096, 4, 96, 768, 12, 4, 4, 96, 200, 4];
        let starts: Vec<usize> = sizes.iter().scan(0, |at, s| Some(std::mem::replace(at, *at + s))).collect();
        for round in 0..200 {
            let (mut t, mut plain) = (Tracker::default(), Plain::default());
            for op in 0..200 {
                let k = lcg(&mut seed) % sizes.len();
                let mut bytes = starts[k]..starts[k] + sizes[k];
                if round % 4 == 3 && lcg(&mut seed) % 3 == 0 {
                    bytes.start += lcg(&mut seed) % sizes[k]; // part of a buffer
                }
                let (stream, write) = ((lcg(&mut seed) % 3) as u32, lcg(&mut seed) % 2 == 0);
                assert_eq!(
                    needs(&t, stream, write, &bytes),
                    plain.needs(stream, write, &bytes),
                    "round {round}, op {op}"
                );
                rec(&mut t, op, stream, write, bytes.clone());
                plain.record(Access { stream, seq: op as u64 + 1, write, bytes });
            }
            if round % 4 != 3 {
                let all = t.all();
                let same_or_apart =
                    |a: &Entry, b: &Entry| (a.start, a.end) == (b.start, b.end) || !overlaps(&a.bytes(), &b.bytes());
                assert!(all.iter().all(|a| all.iter().all(|b| same_or_apart(a, b))), "round {round}: whole buffers");
                assert!(!t.overlap, "round {round}");
            }
        }
    }

    /// A group's copies noted in one pass leave the entries that noting them one by one leaves: over
    /// slots of an arena that other streams wrote and read before (a slot each, or none), the group's
    /// writes or reads of slots in order, some of them the very bytes of an entry, some new; with the
    /// fallback (a range within another, ranges that overlap, too few) taken where it must be.
    #[test]
    fn noting_a_run_in_one_pass_leaves_what_noting_each_leaves() {
        let mut seed = 5;
        let (mut merged_rounds, mut in_place) = (0, 0);
        for round in 0..400 {
            let (slots, slot) = (40 + lcg(&mut seed) % 200, 16);
            let mut before = Tracker::default();
            for op in 0..lcg(&mut seed) % (slots / 4) {
                let k = lcg(&mut seed) % slots;
                let mut bytes = k * slot..(k + 1) * slot;
                if round % 8 == 7 && lcg(&mut seed) % 4 == 0 {
                    bytes.end -= 1 + lcg(&mut seed) % 8; // part of a slot: the one pass does not apply
                }
                rec(&mut before, op as u32, (lcg(&mut seed) % 4) as u32, lcg(&mut seed) % 2 == 0, bytes);
            }
            let (stream, write) = ((lcg(&mut seed) % 4) as u32, lcg(&mut seed) % 2 == 0);
            let stride = 1 + lcg(&mut seed) % 4;
            let items: Vec<(Range<usize>, Stamp)> = (0..slots)
                .step_by(stride)
                .enumerate()
                .map(|(i, k)| (k * slot..(k + 1) * slot, Stamp { seq: 1000, op: 1000 + i as u32, after: 0 }))
                .collect();
            if round % 3 == 0 {
                // The copies back of what went up (or a stream's own reads, or another's): each item meets
                // one entry of its very bytes.
                let (by, wrote) = ((lcg(&mut seed) % 2) as u32 * stream, lcg(&mut seed) % 3 != 0);
                for (i, (bytes, _)) in items.iter().enumerate() {
                    rec(&mut before, 500 + i as u32, by, wrote, bytes.clone());
                }
            }
            let (mut each, mut once) = (Tracker::default(), Tracker::default());
            for t in [&mut each, &mut once] {
                t.lone = before.lone;
                t.entries.chunks = before.entries.chunks.clone();
                t.entries.firsts = before.entries.firsts.clone();
                (t.longest, t.overlap) = (before.longest, before.overlap);
            }
            let pass = once.merges(stream, write, &items).filter(|_| !before.overlap && items.len() >= 16);
            merged_rounds += pass.is_some() as usize;
            in_place += (pass == Some(false)) as usize;
            for (bytes, stamp) in &items {
                each.record(stream, write, bytes, *stamp, &mut Vec::new());
            }
            once.record_many(stream, write, &items, (&mut Vec::new(), &mut Vec::new()));
            assert_eq!(once.all(), each.all(), "round {round}");
            assert_eq!(
                (once.longest, once.overlap, once.lone),
                (each.longest, each.overlap, each.lone),
                "round {round}"
            );
            assert!(once.entries.chunks.iter().all(|c| !c.is_empty() && c.len() <= Entries::CHUNK));
            assert_eq!(once.entries.firsts, once.entries.chunks.iter().map(|c| c[0].start).collect::<Vec<_>>());
        }
        assert!(merged_rounds > 100 && in_place > 20, "one pass in {merged_rounds} rounds of 400, {in_place} in place");
    }

    /// One buffer of 2 MiB before a thousand of 1 KiB, each written whole on one of two streams and read
    /// back on another: a read of the last looks at its own entries only, not at every entry within
    /// 2 MiB before it.
    #[test]
    fn a_large_buffer_before_many_small_ones_costs_no_scan() {
        let mut t = Tracker::default();
        rec(&mut t, 0, 0, true, 0..2 << 20);
        for i in 0..1000 {
            let at = (2 << 20) + i * 1024;
            rec(&mut t, 1 + 2 * i as u32, i as u32 % 2, true, at..at + 1024);
            rec(&mut t, 2 + 2 * i as u32, 2, false, at..at + 1024);
        }
        assert!(!t.overlap, "same bytes or apart");
        let last = (2 << 20) + 999 * 1024..(2 << 20) + 1000 * 1024;
        let mut looked = 0;
        t.entries.scan(t.search_from(&last), |_, e| {
            looked += 1;
            e.start < last.end
        });
        assert_eq!(looked, 2, "its write and its read, the end of the entries");
        let mut before = 0;
        t.entries.scan(t.search_from(&(last.start - 1..last.start + 1)), |_, e| {
            before += 1;
            e.start < last.start + 1
        });
        assert_eq!(before, 4, "the bytes just before too, and no further back");
        assert_eq!(conflicts(&t, 3, true, last), vec![1999, 2000]);
    }

    /// The search that starts where the last one ended finds what a full scan finds, in sweeps up and
    /// down, at random, and after insertions and removals have moved every place (the hint is stale).
    #[test]
    fn searches_from_the_last_place_agree_with_a_full_scan() {
        let mut entries = Entries::default();
        let mut state = 7u64;
        let entry =
            |start: usize| Entry { start, end: start + 1, stream: 0, write: Stamp::default(), read: Stamp::default() };
        let check = |entries: &Entries, key: usize| {
            let all: Vec<usize> = entries.chunks.iter().flatten().map(|e| e.start).collect();
            let want = all.iter().position(|&s| s >= key);
            let got = entries.lower_bound(key);
            let got = entries.chunks.get(got.0).and_then(|c| c.get(got.1)).map(|e| e.start);
            assert_eq!(got, want.map(|w| all[w]), "key {key} over {} entries", all.len());
        };
        for round in 0..6 {
            for _ in 0..150 {
                entries.insert(entry(lcg(&mut state) % 5000));
            }
            for key in (0..5100).step_by(7) {
                check(&entries, key);
            }
            for key in (0..5100).rev().step_by(5) {
                check(&entries, key);
            }
            for _ in 0..300 {
                check(&entries, lcg(&mut state) % 5100);
            }
            for _ in 0..40 * round {
                let c = lcg(&mut state) % entries.chunks.len();
                let i = lcg(&mut state) % entries.chunks[c].len();
                entries.remove((c, i));
            }
        }
    }

    #[test]
    fn thousands_of_small_ranges_stay_cheap_to_search() {
        let mut t = Tracker::default();
        for i in 0..10_000u32 {
            let i = i as usize;
            rec(&mut t, i as u32, i as u32 % 4, true, i * 256..(i + 1) * 256);
        }
        assert_eq!(conflicts(&t, 9, false, 5000 * 256 + 10..5001 * 256 + 10), vec![5000, 5001]);
        let mut looked = 0;
        t.entries.scan(t.entries.lower_bound(5000 * 256 - t.longest), |_, e| {
            looked += 1;
            e.start < 5000 * 256 + 1
        });
        assert!(looked <= 3, "only the neighbours are looked at: {looked}");
        rec(&mut t, 10_000, 0, true, 0..10_000 * 256);
        assert_eq!(t.len(), 1, "a write over all of them stands for them");
    }

    fn dev_access(buffer: usize, write: bool, bytes: Range<usize>) -> DevAccess {
        DevAccess { scope: 1, buffer, bytes, write }
    }

    fn normalized(accesses: &[DevAccess], sequential: bool) -> Result<Vec<DevAccess>, String> {
        let mut out = Vec::new();
        normalize(accesses, sequential, &mut out).map(|_| out).map_err(|o| o.to_string())
    }

    #[test]
    fn one_operations_ranges_are_checked_and_merged() {
        let a = |b, w, r| dev_access(b, w, r);
        // A batch of writes in order, touching: one range.
        let batch: Vec<_> = (0..1000).map(|i| a(0, true, i * 16..(i + 1) * 16)).collect();
        let merged = normalized(&batch, false).unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].bytes, 0..16_000);
        // With gaps, out of order, over two buffers.
        let m =
            normalized(&[a(1, true, 40..50), a(0, true, 0..10), a(1, true, 0..10), a(0, true, 10..20)], false).unwrap();
        let got: Vec<_> = m.iter().map(|x| (x.buffer, x.bytes.clone())).collect();
        assert_eq!(got, [(0, 0..20), (1, 0..10), (1, 40..50)]);
        // Two writes of the same bytes race; so do a read and a write; two reads do not.
        let e = normalized(&[a(0, true, 0..10), a(0, true, 5..6)], false).unwrap_err();
        assert!(e.starts_with("writes overlapping bytes of one buffer twice (0..10 and 5..6)"), "{e}");
        let e = normalized(&[a(0, false, 0..10), a(0, true, 9..12)], false).unwrap_err();
        assert!(e.starts_with("reads and writes overlapping bytes of one buffer"), "{e}");
        assert_eq!(normalized(&[a(0, false, 0..10), a(0, false, 5..12)], false).unwrap().len(), 1);
        // One after another (a graph), a write then a read of the same bytes is no race.
        let m = normalized(&[a(0, true, 0..10), a(0, false, 0..10), a(0, true, 5..20)], true).unwrap();
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
            let got = normalized(&v, false);
            assert_eq!(got.is_err(), pairwise, "{v:?}");
            // What is merged covers exactly the bytes of each buffer and kind that the ranges covered.
            let merged = normalized(&v, true).unwrap();
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
        let mut c = Clocks::default();
        c.reset(3);
        let s0 = c.queue(0);
        let mut snap = Vec::new();
        c.snapshot_into(0, &mut snap);
        assert!(!c.ordered(1, 0, s0), "nothing ordered yet");
        c.wait(1, &snap);
        assert!(c.ordered(1, 0, s0));
        let s1 = c.queue(1);
        snap.clear();
        c.snapshot_into(1, &mut snap);
        c.wait(2, &snap);
        assert!(c.ordered(2, 1, s1) && c.ordered(2, 0, s0), "waiting for stream 1 orders after what it waited for");
        let s0b = c.queue(0);
        assert!(!c.ordered(2, 0, s0b), "later work on stream 0 is not covered");
    }

    /// The clocks, in groups of four, against a plain matrix of `streams` by `streams` numbers, for one to
    /// nine streams (so one, two and three groups, and the first stream of each): random operations,
    /// fences and waits, and every `ordered` after each.
    #[test]
    fn clocks_in_groups_of_four_agree_with_a_plain_matrix() {
        let mut state = 5u64;
        for streams in 1..=9 {
            let mut c = Clocks::default();
            c.reset(streams);
            let mut model = vec![vec![0u64; streams]; streams];
            let mut seqs = vec![0u64; streams];
            // Fences: the groups the clocks keep, and the row the model keeps.
            let (mut fences, mut model_fences): (Vec<Four>, Vec<Vec<u64>>) = (Vec::new(), Vec::new());
            for step in 0..400 {
                let j = lcg(&mut state) % streams;
                match lcg(&mut state) % 3 {
                    0 => {
                        seqs[j] += 1;
                        assert_eq!(c.queue(j), seqs[j]);
                    }
                    1 => {
                        c.snapshot_into(j, &mut fences);
                        let mut row = model[j].clone();
                        row[j] = seqs[j];
                        model_fences.push(row);
                    }
                    _ if !model_fences.is_empty() => {
                        let f = lcg(&mut state) % model_fences.len();
                        let g = c.groups();
                        c.wait(j, &fences[f * g..(f + 1) * g]);
                        for k in 0..streams {
                            model[j][k] = model[j][k].max(model_fences[f][k]);
                        }
                    }
                    _ => {}
                }
                for (a, row) in model.iter().enumerate() {
                    for b in 0..streams {
                        for seq in 1..=seqs[b] + 1 {
                            let want = a == b || row[b] >= seq;
                            assert_eq!(
                                c.ordered(a, b, seq),
                                want,
                                "{streams} streams, step {step}: {a} after {b}'s {seq}"
                            );
                        }
                    }
                }
            }
        }
    }

    fn info() -> OpInfo {
        OpInfo::copy(&Op { kind: "H2D", what: "memcpy HtoD" }, 4)
    }

    /// What the general way does, told as it happens, to whoever checks it (the oracle of
    /// `tests/oracle.rs`); `()` listens to nothing.
    trait Witness {
        /// A fence recorded on stream `k`.
        fn fence(&mut self, _k: usize) {}
        /// Stream `j` waits for fence `f`.
        fn wait(&mut self, _j: usize, _f: usize) {}
        /// An operation over `accesses` queued on stream `j`, after its waits: an error where it races.
        fn queue(&mut self, _j: usize, _accesses: &[DevAccess]) -> Result<(), String> {
            Ok(())
        }
    }

    impl Witness for () {}

    /// What a scope does with a plan, without the driver, told to `w`: waits on a fence after each need
    /// (recording one where none covers it), queues, and records a fence after the operation where its
    /// bytes were shared. Whether a fence follows the operation and which fences it waited for (`None`:
    /// refused, as two accesses that race are), or `w`'s error.
    fn run_told(
        book: &mut Book,
        w: &mut impl Witness,
        j: usize,
        accesses: &[DevAccess],
    ) -> Result<Option<(bool, Vec<usize>)>, String> {
        let Ok(shared) = book.plan(j, accesses, false) else { return Ok(None) };
        let mut waited = Vec::new();
        for i in 0..book.needs.len() {
            let (k, seq) = (book.needs[i].stream, book.needs[i].seq);
            if book.clocks.ordered(j, k, seq) {
                continue;
            }
            let f = match book.fence_for(i) {
                Some(f) => f,
                None => {
                    w.fence(k);
                    book.add_fence(k)
                }
            };
            book.waited(j, f, Some((i, &|| "op".to_string())));
            w.wait(j, f);
            waited.push(f);
        }
        w.queue(j, &book.normalized)?;
        book.queued(j, None, info(), shared);
        if shared {
            w.fence(j);
            book.add_fence(j);
        }
        Ok(Some((shared, waited)))
    }

    /// What a scope does with a plan of [`Book::plan_one`], without the driver, told to `w`: the wait it
    /// needs, the operation queued, and the fence after it where its bytes were shared; `w`'s error.
    fn run_short(book: &mut Book, w: &mut impl Witness, j: usize, a: &DevAccess, plan: PlanOne) -> Result<(), String> {
        if let Some(f) = plan.wait {
            book.waited_again(j, f);
            w.wait(j, f);
        }
        w.queue(j, std::slice::from_ref(a))?;
        book.queued(j, Some(a), info(), plan.shared);
        if plan.shared {
            w.fence(j);
            book.add_fence(j);
        }
        Ok(())
    }

    /// [`run_told`] with no one told: whether a fence follows the operation and which fences it waited for
    /// (`None`: refused).
    fn run_general(book: &mut Book, j: usize, accesses: &[DevAccess]) -> Option<(bool, Vec<usize>)> {
        run_told(book, &mut (), j, accesses).unwrap_or_else(|e: String| unreachable!("{e}"))
    }

    /// [`run_general`] of an operation that is not refused, counted: (waits added, fences recorded lazily,
    /// fences recorded after the operation).
    fn run(book: &mut Book, j: usize, accesses: &[DevAccess]) -> (usize, usize, usize) {
        let fences = book.fence_count;
        let (shared, waited) = run_general(book, j, accesses).expect("planned");
        let after = shared as usize;
        (waited.len(), book.fence_count - fences - after, after)
    }

    /// Everything a book holds that a later operation reads, in words.
    fn book_state(book: &Book) -> String {
        format!(
            "{:?} {} {:?} {:?} {:?} {} {:?}",
            book.clocks,
            book.fence_count,
            book.fence_clocks,
            book.by_stream,
            book.waits,
            book.ops.len(),
            book.trackers
        )
    }

    /// Random operations over three buffers on one to nine streams (one access each, of a whole buffer,
    /// part of one, the next part of one written in order, or none of it; now and then two): wherever
    /// [`Book::plan_one`] plans one, it plans what [`Book::plan`] and [`Book::fence_for`] do, and the two
    /// books stay alike after it. Each of the short way's branches, and each reason to leave it, is seen.
    #[test]
    fn the_short_plan_agrees_with_the_general_one() {
        #[derive(Default, Debug)]
        struct Seen {
            short: usize,
            waits_after: usize,
            waits_searched: usize,
            shared_no_wait: usize,
            appended: usize,
            exact_same: usize,
            exact_other: usize,
            first_wait: usize,
            no_fence_yet: usize,
            searched: usize,
        }
        let mut seen = Seen::default();
        let mut state = 11u64;
        let rounds = 300;
        for round in 0..rounds {
            let streams = [1, 2, 3, 4, 5, 6, 8, 9][round % 8];
            let (mut general, mut book) = (Book::default(), Book::default());
            for b in [&mut general, &mut book] {
                b.reset(streams);
                for _ in 0..3 {
                    b.lend(false, false);
                }
            }
            // Buffer 2 is mostly written in order, a part after another, and its parts touched again; in
            // a third of the rounds, only so (an arena of buffers each used whole).
            let mut parts: Vec<Range<usize>> = Vec::new();
            let parts_only = round % 3 == 0;
            for step in 0..80 {
                let j = lcg(&mut state) % streams;
                let mut access = |state: &mut u64| {
                    let buffer = lcg(state) % 3;
                    let bytes = match (buffer, lcg(state) % 6) {
                        (2, 0..=1) if !parts.is_empty() => parts[lcg(state) % parts.len()].clone(),
                        (2, _) if parts_only && !parts.is_empty() && lcg(state) % 2 == 0 => {
                            parts[lcg(state) % parts.len()].clone()
                        }
                        (2, kind) if kind <= 3 || parts_only => {
                            let (start, len) = (parts.last().map_or(0, |p| p.end), 1 + lcg(state) % 64);
                            parts.push(start..start + len);
                            start..start + len
                        }
                        (_, 0) => {
                            let at = lcg(state) % 256;
                            at..at + 1 + lcg(state) % 64
                        }
                        (_, 1) => 64..64,
                        _ => 0..256,
                    };
                    dev_access(buffer, lcg(state) % 3 != 0, bytes)
                };
                let accesses = match lcg(&mut state) % 8 {
                    0 => vec![access(&mut state), access(&mut state)],
                    _ => vec![access(&mut state)],
                };
                let first_wait = book.waits.first_added.is_none();
                let wanted = run_general(&mut general, j, &accesses);
                let [a] = &accesses[..] else {
                    assert_eq!(run_general(&mut book, j, &accesses), wanted, "round {round}, step {step}");
                    continue;
                };
                let t = &book.trackers[a.buffer];
                let searched = !t.entries.is_empty();
                let appended = searched && t.after_every_entry(a.bytes.start);
                let lone_after = t.lone.map(|e| e.conflict(a.write).0.after);
                match book.plan_one(j, a) {
                    Some(plan) => {
                        seen.short += 1;
                        seen.appended += appended as usize;
                        seen.exact_same += (searched && !appended && !plan.shared) as usize;
                        seen.exact_other += (searched && !appended && plan.shared) as usize;
                        match (plan.wait, lone_after) {
                            (Some(_), Some(0)) => seen.waits_searched += 1,
                            (Some(_), _) => seen.waits_after += 1,
                            (None, _) => seen.shared_no_wait += plan.shared as usize,
                        }
                        let planned = (plan.shared, plan.wait.into_iter().collect());
                        assert_eq!(Some(planned), wanted, "round {round}, step {step}");
                        run_short(&mut book, &mut (), j, a, plan).unwrap();
                    }
                    None => {
                        let waited = wanted.as_ref().is_some_and(|(_, w)| !w.is_empty());
                        let fences_before = book.fence_count;
                        assert_eq!(run_general(&mut book, j, &accesses), wanted, "round {round}, step {step}");
                        match (searched, waited) {
                            (true, _) => seen.searched += 1,
                            (false, true) if first_wait => seen.first_wait += 1,
                            // A fence recorded for the wait, lazily, besides the one after the operation.
                            (false, true) if book.fence_count > fences_before + 1 => seen.no_fence_yet += 1,
                            _ => {}
                        }
                    }
                }
                assert_eq!(book_state(&book), book_state(&general), "round {round}, step {step}");
            }
        }
        let all = rounds * 80;
        assert!(seen.short > all / 5 && seen.short < all * 4 / 5, "{seen:?} of {all}");
        let branches = [
            seen.waits_after,
            seen.waits_searched,
            seen.shared_no_wait,
            seen.appended,
            seen.exact_same,
            seen.exact_other,
            seen.first_wait,
            seen.no_fence_yet,
            seen.searched,
        ];
        assert!(branches.iter().all(|&n| n > 0), "every branch seen: {seen:?}");
    }

    /// The short way over searched entries takes only work that starts where every entry has ended:
    /// one byte before, the search (which finds the overlap and its wait) must run.
    #[test]
    fn the_short_plan_takes_appended_work_only_after_every_entry() {
        let mut book = Book::default();
        book.reset(4);
        let buffer = book.lend(false, false);
        let ops = [(0, true, 0..64), (1, true, 64..128)];
        for (j, write, bytes) in ops {
            let a = dev_access(buffer, write, bytes);
            assert!(book.plan_one(j, &a).is_some());
            run_general(&mut book, j, &[a]).unwrap();
        }
        assert!(!book.trackers[buffer].entries.is_empty(), "two entries, searched");
        let after = dev_access(buffer, false, 128..192);
        assert_eq!(book.plan_one(2, &after), Some(PlanOne { shared: false, wait: None }));
        let overlapping = dev_access(buffer, true, 127..130);
        assert_eq!(book.plan_one(3, &overlapping), None, "one byte before where every entry ends");
        let (shared, waited) = run_general(&mut book, 3, &[overlapping]).unwrap();
        assert!(shared && waited.len() == 1, "the search finds stream 1's write and waits for it");
    }

    #[test]
    fn one_stream_and_disjoint_streams_need_no_fence_at_all() {
        let mut book = Book::default();
        book.reset(4);
        let arena = book.lend(false, false);
        for i in 0..1000 {
            let up = dev_access(arena, true, i * 4096..(i + 1) * 4096);
            let down = dev_access(arena, false, i * 4096..(i + 1) * 4096);
            assert_eq!(run(&mut book, 0, &[up]), (0, 0, 0));
            assert_eq!(run(&mut book, 0, &[down]), (0, 0, 0));
        }
        let other = book.lend(false, false);
        for i in 0..1000 {
            let j = i % 4;
            let up = dev_access(other, true, i * 4096..(i + 1) * 4096);
            assert_eq!(
                run(&mut book, j, &[up]),
                (0, 0, 0),
                "buffer {i} on stream {j}: other streams' work was elsewhere"
            );
        }
        assert!(book.waits.first_added.is_none());
    }

    #[test]
    fn streams_writing_one_range_wait_for_a_fence_recorded_after_each() {
        let mut book = Book::default();
        book.reset(4);
        let d = book.lend(false, false);
        let w = dev_access(d, true, 0..4);
        assert_eq!(run(&mut book, 0, std::slice::from_ref(&w)), (0, 0, 0), "the first touch shares nothing");
        assert_eq!(run(&mut book, 1, std::slice::from_ref(&w)), (1, 1, 1), "the second finds no fence, records one");
        for i in 2..100 {
            assert_eq!(
                run(&mut book, i % 4, std::slice::from_ref(&w)),
                (1, 0, 1),
                "op {i}: the fence is there already"
            );
        }
        let first = book.waits.first_added.clone().unwrap();
        assert!(
            first.starts_with("op on stream 1 writes bytes 0..4 (4 B) of lent buffer 0, which memcpy HtoD on stream 0"),
            "{first}"
        );
    }

    /// The first wait added is told in words: the bytes both touch, and what the earlier one did.
    #[test]
    fn the_first_wait_added_names_the_bytes_both_touch() {
        let mut book = Book::default();
        book.reset(2);
        let (a, b) = (book.lend(false, false), book.lend(false, false));
        run(&mut book, 0, &[dev_access(a, true, 0..4096), dev_access(b, false, 0..64)]);
        run(&mut book, 1, &[dev_access(b, true, 32..96)]);
        assert_eq!(
            book.waits.first_added.as_deref(),
            Some(
                "op on stream 1 writes bytes 32..64 (32 B) of lent buffer 1, which memcpy HtoD on stream 0 reads \
                 earlier, and nothing ordered the two"
            )
        );
    }

    /// Double buffering: upload, compute and download streams, chunk i in buffer i % 2, queued chunk by
    /// chunk: every wait is on a fence recorded right after the operation it waits for, never later.
    #[test]
    fn double_buffering_waits_exactly_for_what_it_needs() {
        let mut book = Book::default();
        book.reset(3);
        let bufs = [book.lend(false, false), book.lend(false, false)];
        for c in 0..20 {
            let b = bufs[c % 2];
            let (w, r) = (dev_access(b, true, 0..1024), dev_access(b, false, 0..1024));
            let up = run(&mut book, 0, std::slice::from_ref(&w));
            let compute = run(&mut book, 1, std::slice::from_ref(&w));
            let down = run(&mut book, 2, std::slice::from_ref(&r));
            // A fence made lazily on the upload stream covers only the upload just queued there.
            assert_eq!(book.clocks.seq(0), c as u64 + 1);
            if c < 2 {
                assert_eq!((up, compute, down), ((0, 0, 0), (1, 1, 1), (1, 0, 1)), "chunk {c}");
            } else {
                assert_eq!((up, compute, down), ((1, 0, 1), (1, 0, 1), (1, 0, 1)), "chunk {c}");
            }
        }
    }

    #[test]
    fn a_fence_after_is_the_first_recorded_after_the_operation() {
        let mut book = Book::default();
        book.reset(2);
        let d = book.lend(false, false);
        let w = dev_access(d, true, 0..4);
        run(&mut book, 0, std::slice::from_ref(&w));
        run(&mut book, 0, std::slice::from_ref(&w));
        let f = book.add_fence(0); // after op 2 of stream 0
        run(&mut book, 0, std::slice::from_ref(&w));
        let g = book.add_fence(0); // after op 3
        assert_eq!(book.fence_after(0, 1), Some(f));
        assert_eq!(book.fence_after(0, 2), Some(f));
        assert_eq!(book.fence_after(0, 3), Some(g));
        assert_eq!(book.fence_after(0, 4), None);
        assert_eq!(book.fence_after(1, 1), None);
    }

    /// Counts the heap allocations of the thread that asks, for the test below.
    struct Counting;

    thread_local! {
        static ALLOCATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    // SAFETY: every call is passed to the system allocator unchanged; counting touches only a
    // thread-local cell, which allocates nothing.
    unsafe impl std::alloc::GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            // SAFETY: the caller's layout, as GlobalAlloc requires.
            unsafe { std::alloc::System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
            // SAFETY: a block this allocator gave, with its layout.
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    fn allocations() -> usize {
        ALLOCATIONS.with(|n| n.get())
    }

    /// Once a scope of its size has run, an operation allocates nothing but, now and then, a node of
    /// a tracker's ordered map; and the search per operation looks at the neighbours only, however
    /// many operations the scope holds.
    #[test]
    fn an_operation_allocates_next_to_nothing_and_looks_at_its_neighbours_only() {
        let mut book = Book::default();
        for round in 0..2 {
            book.reset(4);
            let arena = book.lend(false, false);
            let before = allocations();
            for i in 0..10_000 {
                let up = dev_access(arena, true, i * 4096..(i + 1) * 4096);
                assert_eq!(run(&mut book, i % 4, &[up]), (0, 0, 0));
                let t = &book.trackers[arena];
                let mut near = 0;
                t.entries.scan(t.entries.lower_bound((i * 4096).saturating_sub(t.longest)), |_, e| {
                    near += 1;
                    e.start < (i + 1) * 4096
                });
                assert!(near <= 2, "op {i} looked at {near} entries");
            }
            let per_op = (allocations() - before) as f64 / 10_000.0;
            if round == 1 {
                assert!(per_op < 0.2, "{per_op} allocations per operation");
            }
        }
    }

    #[test]
    fn a_reset_book_keeps_nothing_but_its_capacity() {
        let mut book = Book::default();
        book.reset(2);
        let d = book.lend(false, false);
        run(&mut book, 0, &[dev_access(d, true, 0..4)]);
        run(&mut book, 1, &[dev_access(d, true, 0..4)]);
        book.reset(3);
        assert!(book.trackers.is_empty() && book.ops.is_empty() && book.fence_count == 0);
        assert_eq!(book.by_stream.len(), 3);
        assert_eq!(book.waits, Waits::default());
        let d = book.lend(false, false);
        assert_eq!(run(&mut book, 2, &[dev_access(d, true, 0..4)]), (0, 0, 0));
    }

    mod oracle;
}

#[cfg(test)]
mod timing_probe {
    use super::*;
    use crate::view::DevAccess;

    #[test]
    #[ignore = "a timing probe, run by hand"]
    fn how_long_the_book_takes_for_the_natural_loop() {
        let mut book = Book::default();
        let n = 1000;
        let op = &Op { kind: "H2D", what: "memcpy HtoD" };
        let t = std::time::Instant::now();
        for _ in 0..200 {
            book.reset(1);
            let b = book.lend(false, false);
            for write in [true, false] {
                for i in 0..n {
                    let a = DevAccess { scope: 1, buffer: b, bytes: i * 256..(i + 1) * 256, write };
                    let plan = book.plan_one(0, &a).expect("the short way");
                    assert!(plan.wait.is_none());
                    book.queued(0, Some(&a), OpInfo::copy(op, 256), false);
                }
            }
        }
        eprintln!("plan_one + queued: {:.1} ns an op", t.elapsed().as_secs_f64() * 1e9 / (200 * 2 * n) as f64);
    }
}
