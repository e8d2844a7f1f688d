//! The scope's bookkeeping, apart from the driver: which bytes each operation touched on which stream,
//! what each stream is known to wait for, and the fences (events recorded for ordering) that exist. It
//! decides which waits an operation needs and whether a fence should follow it; [`crate::scope`] makes
//! the driver calls. Pure, so that it is tested, and its cost counted, without a GPU.
//!
//! What it costs per operation, in the operations a scope holds (n) and the accesses near the bytes an
//! operation touches (m, a handful): finding conflicts O(log n + m), remembering the access O(log n),
//! the ordering of streams O(streams) only where a wait or a fence is made. Its vectors keep their
//! capacity from one scope to the next (`Book::reset`), so an operation allocates nothing once a
//! scope of its size has run; only the ordered map of accesses allocates a node now and then.
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

use std::{collections::BTreeMap, ops::Range, sync::Arc};

use crate::{memory::Bytes, view::DevAccess};

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
    pub fn name(&self) -> &str {
        self.kernel.as_deref().unwrap_or(self.what)
    }

    /// The operation in words: `memcpy HtoD`, `kernel process`.
    pub fn label(&self) -> String {
        match &self.kernel {
            Some(k) => format!("kernel {k}"),
            None => self.what.to_string(),
        }
    }
}

/// What the scope saw of the ordering between streams ([`crate::Scope::waits`]): the waits the program
/// made itself, and those the scope had to add because two operations on different streams touched the
/// same bytes and nothing ordered them.
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

/// One access remembered: operation `op` (an index into `Book::ops`), the `seq`th of `stream`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Access {
    pub op: u32,
    pub stream: u32,
    pub seq: u64,
    pub write: bool,
    pub bytes: Range<usize>,
}

pub(crate) fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

fn covers(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// Per lent buffer: the accesses whose completion later operations on other streams may have to wait for.
#[derive(Default, Debug)]
pub(crate) struct Tracker {
    /// Lent from another context: every operation on it is refused.
    pub foreign: bool,
    /// Managed memory: the only kind a prefetch may move.
    pub managed: bool,
    /// The accesses remembered, by where their bytes start (and a serial number, to keep several that
    /// start at one byte): thousands of small copies must not cost the host a pass over every earlier
    /// access for each new one.
    accesses: BTreeMap<(usize, u64), Access>,
    /// The longest access remembered: how far before a range an access that overlaps it can start. It
    /// never needs to shrink: an access is forgotten only when one that covers it, so at least as long,
    /// is remembered.
    longest: usize,
    serial: u64,
}

impl Tracker {
    pub fn new(foreign: bool, managed: bool) -> Tracker {
        Tracker { foreign, managed, ..Tracker::default() }
    }

    /// The accesses that may overlap `bytes`: those that start before its end, no further before its
    /// start than the longest access remembered.
    pub fn near<'a>(&'a self, bytes: &Range<usize>) -> impl Iterator<Item = &'a Access> {
        let from = bytes.start.saturating_sub(self.longest);
        self.accesses.range((from, 0)..(bytes.end.max(from), 0)).map(|(_, a)| a)
    }

    /// Remembers an access, forgetting those it makes redundant: a write is ordered after everything
    /// it overlaps, so it stands for what it covers; a read stands for earlier reads of its stream that
    /// it covers. `scratch` is a vector to reuse.
    pub fn record(&mut self, access: Access, scratch: &mut Vec<(usize, u64)>) {
        scratch.clear();
        scratch.extend(
            self.accesses
                .range((access.bytes.start, 0)..=(access.bytes.end, u64::MAX))
                .filter(|(_, a)| {
                    covers(&access.bytes, &a.bytes) && (access.write || (!a.write && a.stream == access.stream))
                })
                .map(|(k, _)| *k),
        );
        for k in scratch.iter() {
            self.accesses.remove(k);
        }
        self.longest = self.longest.max(access.bytes.len());
        self.serial += 1;
        self.accesses.insert((access.bytes.start, self.serial), access);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.accesses.len()
    }
}

/// The ranges one operation touches, checked and merged into `out`: sorted by buffer, then by kind (read
/// before write) and start, with ranges of one kind that overlap or touch made one. Unless the
/// operation's parts run one after another (`sequential`: a graph captured on one stream), two ranges of
/// one buffer that overlap with at least one written are refused, in words: the operation's result would
/// race. Linear in the ranges where they come sorted (a batch over a buffer, in order), n log n otherwise.
pub(crate) fn normalize(accesses: &[DevAccess], sequential: bool, out: &mut Vec<DevAccess>) -> Result<(), String> {
    out.clear();
    out.extend_from_slice(accesses);
    if out.len() <= 1 {
        return Ok(()); // a copy's one range: nothing to check or merge
    }
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

/// The ordering known on each stream: `clock[j][k]` is the last operation of stream k (by sequence
/// number) that is complete before anything queued next on stream j. Flat, `streams` by `streams`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Clocks {
    n: usize,
    clock: Vec<u64>,
    seq: Vec<u64>,
}

impl Clocks {
    fn reset(&mut self, streams: usize) {
        self.n = streams;
        self.clock.clear();
        self.clock.resize(streams * streams, 0);
        self.seq.clear();
        self.seq.resize(streams, 0);
    }

    /// Whether operation `seq` of stream `k` is ordered before what stream `j` queues next.
    pub fn ordered(&self, j: usize, k: usize, seq: u64) -> bool {
        j == k || self.clock[j * self.n + k] >= seq
    }

    /// Queues an operation on stream `j`: its sequence number.
    fn queue(&mut self, j: usize) -> u64 {
        self.seq[j] += 1;
        self.seq[j]
    }

    /// The operations queued on stream `k` so far.
    pub fn seq(&self, k: usize) -> u64 {
        self.seq[k]
    }

    /// What stream `j` knows after waiting for an event that knew `snapshot`.
    fn wait(&mut self, j: usize, snapshot: &[u64]) {
        for (c, s) in self.clock[j * self.n..(j + 1) * self.n].iter_mut().zip(snapshot) {
            *c = (*c).max(*s);
        }
    }

    /// Appends what an event recorded now on stream `j` knows.
    fn snapshot_into(&self, j: usize, out: &mut Vec<u64>) {
        let at = out.len();
        out.extend_from_slice(&self.clock[j * self.n..(j + 1) * self.n]);
        out[at + j] = self.seq[j];
    }
}

/// An event recorded on `stream` after its `seq`th operation, with what it knew then in
/// [`Book::fence_clocks`].
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fence {
    stream: u32,
    seq: u64,
}

/// A wait an operation needs: for operation `seq` of `stream` (the latest of that stream it conflicts
/// with, operation `op`), and the first such conflict in words' worth of detail.
#[derive(Clone, Debug)]
pub(crate) struct Need {
    pub stream: usize,
    pub seq: u64,
    op: u32,
    /// Index of the operation's own access (in `Book::normalized`) and the earlier one it meets.
    mine: usize,
    theirs: Access,
}

/// The scope's whole bookkeeping: see the module docs.
#[derive(Default)]
pub(crate) struct Book {
    streams: usize,
    pub trackers: Vec<Tracker>,
    pub clocks: Clocks,
    fences: Vec<Fence>,
    /// What each fence knew: `streams` numbers a fence.
    fence_clocks: Vec<u64>,
    /// Per stream, its fences in the order recorded (so by sequence number).
    by_stream: Vec<Vec<u32>>,
    /// Every operation queued, for the words of a message and the observer.
    pub ops: Vec<OpInfo>,
    pub waits: Waits,
    /// The waits the operation being planned needs, newest conflict first.
    pub needs: Vec<Need>,
    /// The operation being planned's ranges, checked and merged.
    pub normalized: Vec<DevAccess>,
    redundant: Vec<(usize, u64)>,
}

impl Book {
    /// Empties the book for a scope of `streams` streams, keeping what it had allocated.
    pub fn reset(&mut self, streams: usize) {
        self.streams = streams;
        self.trackers.clear();
        self.clocks.reset(streams);
        self.fences.clear();
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
    pub fn plan(&mut self, j: usize, accesses: &[DevAccess], sequential: bool) -> Result<bool, String> {
        normalize(accesses, sequential, &mut self.normalized)?;
        self.needs.clear();
        let mut shared = false;
        for (i, a) in self.normalized.iter().enumerate() {
            for c in self.trackers[a.buffer].near(&a.bytes) {
                if c.stream as usize == j || !overlaps(&c.bytes, &a.bytes) {
                    continue;
                }
                shared = true;
                if !(a.write || c.write) || self.clocks.ordered(j, c.stream as usize, c.seq) {
                    continue;
                }
                match self.needs.iter_mut().find(|n| n.stream == c.stream as usize) {
                    Some(n) if n.seq >= c.seq => {}
                    Some(n) => *n = Need { stream: n.stream, seq: c.seq, op: c.op, mine: i, theirs: c.clone() },
                    None => self.needs.push(Need {
                        stream: c.stream as usize,
                        seq: c.seq,
                        op: c.op,
                        mine: i,
                        theirs: c.clone(),
                    }),
                }
            }
        }
        // Newest first: waiting for a later operation may order the earlier ones of other streams too.
        self.needs.sort_unstable_by_key(|n| std::cmp::Reverse(n.op));
        Ok(shared)
    }

    /// The first fence on stream `k` recorded after its operation `seq`, if any.
    pub fn fence_after(&self, k: usize, seq: u64) -> Option<usize> {
        let list = &self.by_stream[k];
        let at = list.partition_point(|&f| self.fences[f as usize].seq < seq);
        list.get(at).map(|&f| f as usize)
    }

    /// Notes a fence recorded on stream `k` now: its index.
    pub fn add_fence(&mut self, k: usize) -> usize {
        let index = self.fences.len();
        self.fences.push(Fence { stream: k as u32, seq: self.clocks.seq(k) });
        self.clocks.snapshot_into(k, &mut self.fence_clocks);
        self.by_stream[k].push(index as u32);
        index
    }

    /// Notes that stream `j` waits for fence `f`: the program's own wait (`made`), or one the scope
    /// adds for `need`, described in words if it is the first (`name` says what the operation is).
    pub fn waited(&mut self, j: usize, f: usize, need: Option<(&Need, &dyn Fn() -> String)>) {
        let n = self.streams;
        let snapshot = &self.fence_clocks[f * n..(f + 1) * n];
        self.clocks.wait(j, snapshot);
        let Some((need, name)) = need else {
            self.waits.made += 1;
            return;
        };
        self.waits.added += 1;
        if self.waits.first_added.is_none() {
            let (a, c) = (&self.normalized[need.mine], &need.theirs);
            let other = self.ops[c.op as usize].label();
            let both = a.bytes.start.max(c.bytes.start)..a.bytes.end.min(c.bytes.end);
            self.waits.first_added = Some(format!(
                "{} on stream {j} {} bytes {}..{} ({}) of lent buffer {}, which {other} on stream {} {} earlier, \
                 and nothing ordered the two",
                name(),
                if a.write { "writes" } else { "reads" },
                both.start,
                both.end,
                Bytes(both.len()),
                a.buffer,
                c.stream,
                if c.write { "writes" } else { "reads" }
            ));
        }
    }

    /// Notes the operation just queued on stream `j` over [`Book::normalized`]: its index.
    pub fn queued(&mut self, j: usize, info: OpInfo) -> usize {
        let seq = self.clocks.queue(j);
        let op = self.ops.len();
        self.ops.push(info);
        for a in &self.normalized {
            let access = Access { op: op as u32, stream: j as u32, seq, write: a.write, bytes: a.bytes.clone() };
            self.trackers[a.buffer].record(access, &mut self.redundant);
        }
        op
    }
}

/// The bookkeeping alone, without the driver, for the scope's benchmark: plans and notes `ops`
/// operations in a book of `streams` streams, operation i on stream i % streams over the i-th of `ops`
/// disjoint ranges of one buffer of 4 KiB each (a batch of small copies), and returns how long that
/// took. The book is made and warmed first, as a scope's is reused.
#[doc(hidden)]
pub fn bookkeeping_time(ops: usize, streams: usize) -> std::time::Duration {
    let mut book = Book::default();
    let pass = |book: &mut Book| {
        book.reset(streams);
        let buffer = book.lend(false, false);
        let t = std::time::Instant::now();
        for i in 0..ops {
            let a = [DevAccess { scope: 1, buffer, bytes: i * 4096..(i + 1) * 4096, write: true }];
            let j = i % streams;
            let _ = std::hint::black_box(book.plan(j, &a, false));
            book.queued(j, OpInfo::copy("H2D", "memcpy HtoD", 4096));
        }
        t.elapsed()
    };
    pass(&mut book);
    pass(&mut book)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(op: u32, stream: u32, write: bool, bytes: Range<usize>) -> Access {
        Access { op, stream, seq: op as u64 + 1, write, bytes }
    }

    /// The accesses of other streams that conflict with one on `stream`.
    fn conflicts(t: &Tracker, stream: u32, write: bool, bytes: Range<usize>) -> Vec<u32> {
        t.near(&bytes)
            .filter(|a| a.stream != stream && (write || a.write) && overlaps(&a.bytes, &bytes))
            .map(|a| a.op)
            .collect()
    }

    fn record(t: &mut Tracker, a: Access) {
        t.record(a, &mut Vec::new());
    }

    #[test]
    fn same_stream_never_conflicts() {
        let mut t = Tracker::default();
        record(&mut t, acc(0, 0, true, 0..100));
        assert!(conflicts(&t, 0, false, 0..100).is_empty());
        assert!(conflicts(&t, 0, true, 0..100).is_empty());
    }

    #[test]
    fn read_after_write_on_another_stream_conflicts() {
        let mut t = Tracker::default();
        record(&mut t, acc(7, 0, true, 0..100));
        assert_eq!(conflicts(&t, 1, false, 50..60), vec![7]);
        assert_eq!(conflicts(&t, 1, true, 99..200), vec![7]);
        assert!(conflicts(&t, 1, false, 100..200).is_empty(), "disjoint ranges are independent");
    }

    #[test]
    fn reads_do_not_conflict_with_reads() {
        let mut t = Tracker::default();
        record(&mut t, acc(1, 0, false, 0..100));
        assert!(conflicts(&t, 1, false, 0..100).is_empty());
        assert_eq!(conflicts(&t, 1, true, 0..10), vec![1], "write after read");
    }

    #[test]
    fn a_covering_write_replaces_what_it_covers() {
        let mut t = Tracker::default();
        record(&mut t, acc(1, 0, true, 0..50));
        record(&mut t, acc(2, 1, false, 0..50));
        record(&mut t, acc(3, 2, true, 0..100));
        assert_eq!(t.accesses.values().cloned().collect::<Vec<_>>(), vec![acc(3, 2, true, 0..100)]);
        assert_eq!(conflicts(&t, 0, false, 10..20), vec![3]);
    }

    #[test]
    fn a_read_keeps_an_earlier_write_of_its_own_stream() {
        let mut t = Tracker::default();
        record(&mut t, acc(1, 0, true, 0..100));
        record(&mut t, acc(2, 0, false, 0..100));
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
        fn conflicts(&self, stream: u32, write: bool, bytes: &Range<usize>) -> Vec<u32> {
            let mut v: Vec<u32> = self
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
                let (stream, write) = ((lcg(&mut seed) % 3) as u32, lcg(&mut seed) % 2 == 0);
                let bytes = start..start + len;
                let mut found = conflicts(&t, stream, write, bytes.clone());
                found.sort();
                assert_eq!(found, plain.conflicts(stream, write, &bytes), "op {op}: {stream} {write} {bytes:?}");
                record(&mut t, acc(op, stream, write, bytes.clone()));
                plain.record(acc(op, stream, write, bytes));
            }
            assert_eq!(t.len(), plain.0.len());
        }
    }

    #[test]
    fn thousands_of_small_ranges_stay_cheap_to_search() {
        let mut t = Tracker::default();
        for i in 0..10_000u32 {
            let i = i as usize;
            record(&mut t, acc(i as u32, i as u32 % 4, true, i * 256..(i + 1) * 256));
        }
        assert_eq!(conflicts(&t, 9, false, 5000 * 256 + 10..5001 * 256 + 10), vec![5000, 5001]);
        assert_eq!(t.near(&(5000 * 256..5000 * 256 + 1)).count(), 2, "only the neighbours are looked at");
        record(&mut t, acc(10_000, 0, true, 0..10_000 * 256));
        assert_eq!(t.len(), 1, "a write over all of them stands for them");
    }

    fn dev_access(buffer: usize, write: bool, bytes: Range<usize>) -> DevAccess {
        DevAccess { scope: 1, buffer, bytes, write }
    }

    fn normalized(accesses: &[DevAccess], sequential: bool) -> Result<Vec<DevAccess>, String> {
        let mut out = Vec::new();
        normalize(accesses, sequential, &mut out).map(|_| out)
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

    fn info() -> OpInfo {
        OpInfo::copy("H2D", "memcpy HtoD", 4)
    }

    /// What a scope does with a plan, without the driver: waits on a fence after each need (recording
    /// one where none covers it), queues, and records a fence after the operation where its bytes were
    /// shared. Returns (waits added, fences recorded lazily, fences recorded after the operation).
    fn run(book: &mut Book, j: usize, accesses: &[DevAccess]) -> (usize, usize, usize) {
        let shared = book.plan(j, accesses, false).unwrap();
        let (mut waits, mut lazy) = (0, 0);
        for i in 0..book.needs.len() {
            let need = book.needs[i].clone();
            if book.clocks.ordered(j, need.stream, need.seq) {
                continue;
            }
            let f = match book.fence_after(need.stream, need.seq) {
                Some(f) => f,
                None => {
                    lazy += 1;
                    book.add_fence(need.stream)
                }
            };
            book.waited(j, f, Some((&need, &|| "op".to_string())));
            waits += 1;
        }
        book.queued(j, info());
        let after = if shared {
            book.add_fence(j);
            1
        } else {
            0
        };
        (waits, lazy, after)
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
                let near = book.trackers[arena].near(&(i * 4096..(i + 1) * 4096)).count();
                assert!(near <= 2, "op {i} looked at {near} accesses");
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
        assert!(book.trackers.is_empty() && book.ops.is_empty() && book.fences.is_empty());
        assert_eq!(book.by_stream.len(), 3);
        assert_eq!(book.waits, Waits::default());
        let d = book.lend(false, false);
        assert_eq!(run(&mut book, 2, &[dev_access(d, true, 0..4)]), (0, 0, 0));
    }
}
