//! The book against an oracle of its own: vector clocks driven by the same fences and waits the book
//! makes, which check before every operation that each earlier access on another stream that it conflicts
//! with (overlapping bytes, one of the two a write) is ordered before it. Beside it, over random arenas
//! of parts touched in any order, on 2 to 12 streams: the short plan against the general one, the book
//! after every step against a twin that only takes the general way, and the trackers' invariants (the
//! chunks, `overlap`, the search against a full scan, `Tracker::exactly`). Written by an adversarial review
//! of the short way for the copy back; `ORACLE_ROUNDS` and `ORACLE_SEED` run it longer or elsewhere.
use super::*;

/// Independent vector clocks, driven by the same fences and waits the book makes.
#[derive(Default, Clone)]
struct Oracle {
    n: usize,
    vc: Vec<Vec<u64>>,
    seq: Vec<u64>,
    fences: Vec<Vec<u64>>,
    /// (buffer, stream, seq, write, bytes)
    past: Vec<(usize, usize, u64, bool, Range<usize>)>,
}

impl Oracle {
    fn new(n: usize) -> Oracle {
        Oracle { n, vc: vec![vec![0; n]; n], seq: vec![0; n], ..Default::default() }
    }
}

impl Witness for Oracle {
    fn fence(&mut self, k: usize) {
        let mut s = self.vc[k].clone();
        s[k] = self.seq[k];
        self.fences.push(s);
    }
    fn wait(&mut self, j: usize, f: usize) {
        for l in 0..self.n {
            self.vc[j][l] = self.vc[j][l].max(self.fences[f][l]);
        }
    }
    fn queue(&mut self, j: usize, accesses: &[DevAccess]) -> Result<(), String> {
        for a in accesses.iter().filter(|a| !a.bytes.is_empty()) {
            for (b, k, seq, w, r) in &self.past {
                if *b == a.buffer && *k != j && (a.write || *w) && overlaps(r, &a.bytes) && self.vc[j][*k] < *seq {
                    return Err(format!(
                        "RACE: stream {j} {} {:?} of buffer {b} unordered after stream {k} seq {seq} {} {r:?}",
                        if a.write { "writes" } else { "reads" },
                        a.bytes,
                        if *w { "write" } else { "read" }
                    ));
                }
            }
        }
        self.seq[j] += 1;
        for a in accesses.iter().filter(|a| !a.bytes.is_empty()) {
            self.past.push((a.buffer, j, self.seq[j], a.write, a.bytes.clone()));
        }
        Ok(())
    }
}

fn check_tracker(t: &Tracker, ctx: &str) {
    if t.lone.is_some() {
        assert!(t.entries.is_empty(), "{ctx}: lone and entries");
    }
    let e = &t.entries;
    assert!(e.chunks.iter().all(|c| !c.is_empty() && c.len() <= Entries::CHUNK), "{ctx}: chunk sizes");
    assert_eq!(e.firsts, e.chunks.iter().map(|c| c[0].start).collect::<Vec<_>>(), "{ctx}: firsts");
    let all: Vec<Entry> = e.chunks.iter().flatten().copied().collect();
    assert!(all.windows(2).all(|w| w[0].start <= w[1].start), "{ctx}: order");
    assert!(t.lone.iter().chain(all.iter()).all(|x| x.end - x.start <= t.longest), "{ctx}: longest");
    if !t.overlap {
        for (x, a) in all.iter().enumerate() {
            for b in &all[x + 1..] {
                let same = (a.start, a.end) == (b.start, b.end);
                assert!(same || !overlaps(&a.bytes(), &b.bytes()), "{ctx}: overlap false but {a:?} and {b:?}");
            }
        }
    }
    // The search finds what a full scan finds, and exactly() agrees with a full scan.
    for x in &all {
        for bytes in [x.bytes(), x.start..x.end + 1, x.start.saturating_sub(1)..x.end, x.start..x.start + 1] {
            if bytes.is_empty() {
                continue;
            }
            let mut got = Vec::new();
            t.overlapping(&bytes, |e| got.push(*e));
            let want: Vec<Entry> = all.iter().filter(|e| overlaps(&e.bytes(), &bytes)).copied().collect();
            assert_eq!(got, want, "{ctx}: overlapping {bytes:?}");
            if let Some(e) = t.exactly(&bytes) {
                assert_eq!(want, vec![*e], "{ctx}: exactly {bytes:?}");
            }
        }
    }
}

/// One random run: returns counts of (short plans, short via exactly, waits on the short way).
fn run_round(state: &mut u64, streams: usize, parts_n: usize, steps: usize, mode: usize) -> (usize, usize, usize) {
    let (mut book, mut twin) = (Book::default(), Book::default());
    for b in [&mut book, &mut twin] {
        b.reset(streams);
        for _ in 0..3 {
            b.lend(false, false);
        }
    }
    let (mut o, mut o2) = (Oracle::new(streams), Oracle::new(streams));
    // Buffer 0: an arena of parts_n parts; buffer 1: small, whole or random; buffer 2: parts of 64.
    let mut parts = Vec::new();
    let mut at = 0;
    for _ in 0..parts_n {
        let len = 1 + lcg(state) % 48;
        parts.push(at..at + len);
        at += len;
    }
    let total = at;
    let (mut short, mut exact, mut waits) = (0, 0, 0);
    for step in 0..steps {
        let j = lcg(state) % streams;
        // Now and then the program waits for some fence itself (both books, both oracles).
        if book.fence_count > 0 && lcg(state) % 10 == 0 {
            let f = lcg(state) % book.fence_count;
            book.waited(j, f, None);
            twin.waited(j, f, None);
            o.wait(j, f);
            o2.wait(j, f);
        }
        if lcg(state) % 40 == 0 {
            let k = lcg(state) % streams;
            book.add_fence(k);
            twin.add_fence(k);
            o.fence(k);
            o2.fence(k);
        }
        let access = |state: &mut u64| {
            let r = lcg(state) % 100;
            let (buffer, bytes) = match (mode, r) {
                (_, 0..=59) => (0, parts[lcg(state) % parts.len()].clone()),
                // in order (appended) at first, random later
                (_, 60..=69) => {
                    let i = (step * parts_n / steps.max(1)).min(parts_n - 1);
                    (0, parts[i].clone())
                }
                (1, 70..=74) | (2, 70..=84) => {
                    // partial: a random range, or two neighbouring parts, or part of one
                    let i = lcg(state) % parts.len();
                    match lcg(state) % 3 {
                        0 => {
                            let s = lcg(state) % total;
                            (0, s..(s + 1 + lcg(state) % 100).min(total))
                        }
                        1 if i + 1 < parts.len() => (0, parts[i].start..parts[i + 1].end),
                        _ => (0, parts[i].start..parts[i].start + 1),
                    }
                }
                (_, 85..=86) => (0, 0..total),
                (_, 87..=93) => (2, {
                    let i = lcg(state) % 200;
                    i * 64..i * 64 + 64
                }),
                _ => (1, {
                    let s = lcg(state) % 4;
                    s * 16..s * 16 + 16 + 16 * (lcg(state) % 2)
                }),
            };
            dev_access(buffer, lcg(state) % 2 == 0, bytes)
        };
        let accesses = match lcg(state) % 12 {
            0 => vec![access(state), access(state)],
            _ => vec![access(state)],
        };
        let ctx = format!("streams {streams} parts {parts_n} mode {mode} step {step} j {j} {accesses:?}");
        let wanted = run_told(&mut twin, &mut o2, j, &accesses).unwrap_or_else(|e| panic!("twin {ctx}: {e}"));
        if let [a] = &accesses[..] {
            let t = &book.trackers[a.buffer];
            let via_exact = t.lone.is_none() && !t.entries.is_empty() && !t.after_every_entry(a.bytes.start);
            if let Some(plan) = book.plan_one(j, a) {
                short += 1;
                exact += via_exact as usize;
                waits += plan.wait.is_some() as usize;
                let planned = (plan.shared, plan.wait.into_iter().collect::<Vec<_>>());
                assert_eq!(Some(planned), wanted, "{ctx}");
                run_short(&mut book, &mut o, j, a, plan).unwrap_or_else(|e| panic!("short {ctx}: {e}"));
            } else {
                let got = run_told(&mut book, &mut o, j, &accesses).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!(got, wanted, "{ctx}");
            }
        } else {
            let got = run_told(&mut book, &mut o, j, &accesses).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(got, wanted, "{ctx}");
        }
        assert_eq!(book_state(&book), book_state(&twin), "{ctx}");
        for b in [&book, &twin] {
            for t in &b.trackers {
                check_tracker(t, &ctx);
            }
        }
    }
    (short, exact, waits)
}

#[test]
fn no_conflict_goes_unordered_and_the_short_plan_agrees_over_random_arenas() {
    let mut state: u64 = std::env::var("ORACLE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    let rounds: usize = std::env::var("ORACLE_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(35);
    let (mut short, mut exact, mut waits) = (0, 0, 0);
    for round in 0..rounds {
        let streams = [2, 3, 4, 5, 7, 9, 12][round % 7];
        let parts_n = [3, 20, 70, 150, 300][round % 5];
        let mode = round % 3;
        let (s, e, w) = run_round(&mut state, streams, parts_n, 400, mode);
        short += s;
        exact += e;
        waits += w;
    }
    eprintln!("short {short}, via exactly {exact}, short waits {waits}");
    assert!(exact > 3 * rounds && waits > 2 * rounds, "each branch seen: {exact} exact, {waits} waits");
}

/// An exact entry last in its chunk, a same-bytes entry of another stream first in the next.
#[test]
fn entries_of_the_same_bytes_across_a_chunk_boundary_take_the_search() {
    let mut book = Book::default();
    book.reset(4);
    let b = book.lend(false, false);
    let mut o = Oracle::new(4);
    for i in 0..64 {
        run_told(&mut book, &mut o, 0, &[dev_access(b, true, i * 8..i * 8 + 8)]).unwrap();
    }
    assert_eq!(book.trackers[b].entries.chunks.len(), 1);
    run_told(&mut book, &mut o, 1, &[dev_access(b, false, 31 * 8..32 * 8)]).unwrap();
    let t = &book.trackers[b];
    assert_eq!(t.entries.chunks.len(), 2);
    assert_eq!(t.entries.chunks[0].last().unwrap().start, 31 * 8);
    assert_eq!(t.entries.chunks[1][0].start, 31 * 8);
    assert!(!t.overlap);
    // Every hint, then exactly(): must refuse (two entries of the bytes).
    for c in 0..2 {
        for i in 0..t.entries.chunks[c].len() {
            t.entries.hint.set((c, i));
            assert!(t.exactly(&(31 * 8..32 * 8)).is_none(), "hint {c},{i}");
        }
    }
    // Stream 2 writes them: must wait for both streams (general, since plan_one refuses).
    let a = dev_access(b, true, 31 * 8..32 * 8);
    assert!(book.plan_one(2, &a).is_none());
    let (shared, waited) = run_told(&mut book, &mut o, 2, &[a]).unwrap().unwrap();
    assert!(shared && waited.len() == 1, "{waited:?}: the fence after stream 1's read covers stream 0's write");
}
