//! What safety costs the host per operation: the scope against the bare driver calls, in one run.
//!
//!     cargo bench -p cuda-scope --bench scope [-- --rounds 21] [-- --json FILE] [-- --only NAME] [-- --skip NAME]
//!         [-- --processes 5]
//!
//! With `--processes N` it runs itself N times, one process after another, and reports each case's
//! ratio in every process and their median. A process lays out its code and its memory anew (address
//! space layout randomization), and that alone moves a ratio by several per cent: in this project's runs
//! the scope on one stream read 1.07x-1.14x over four processes, and 1.16x-1.22x in each of four with the
//! layout fixed (`setarch -R`). One process's figure is one draw; the median over processes is the figure.
//!
//! Every case is a batch of operations queued on the host clock (synchronized outside the timed part);
//! the cases run in turn, round after round, so that the scope and the bare calls it is held against
//! see the same machine. Each ratio is taken within a round, and the median over the rounds is
//! reported with its range. The cases:
//! - 4-byte memsets (GPU work that takes next to nothing, so the host's cost is what is timed): bare
//!   `cuMemsetD32Async`; bare and an event after each (with timing, as the scope once recorded; without,
//!   as it records its fences); the scope on one stream; four streams writing their own bytes, bare and
//!   through the scope; four streams writing one range, through the scope (which must order each
//!   after the last) and bare with what the scope must do (wait for the last one's event, the call,
//!   an event without timing).
//! - "memcpy each": 100 and 1000 buffers of 4 KiB up from pinned memory into one device arena and back,
//!   one copy per buffer, on one stream and on four, bare and through the scope with coalescing off
//!   (`Coalescing::Off`: every copy issued as queued, as the bare calls are), the host's calls timed;
//!   and the same loop coalesced by the scope (the default) against the bare calls, the wall time to
//!   the streams' end timed for both, since the scope issues its held copies as the loop ends.
//! - Probes: the bare memsets (one stream; four, one range) with one part of the scope's work between
//!   the calls, its bookkeeping or a check of the current context: what each part costs amid the
//!   driver's calls, where caches and predictors are shared.
//! - The parts: `cuCtxGetCurrent` (which the scope called before each operation until it took its
//!   context as current where `common` made it so last) and the scope's bookkeeping alone, without the
//!   driver.

use std::{
    cell::RefCell,
    time::{Duration, Instant},
};

use cuda_scope::Gpu;

/// The driver's entry points the bare cases call, looked up once in `libcuda.so.1` (as the crate does,
/// and as a C program's loader does at its start) and called through their pointers: nothing of the
/// crate's between the benchmark and the driver. The tests that play another library use the same file.
#[allow(dead_code)]
#[path = "../tests/support/driver.rs"]
mod ffi;

/// Operations per memset batch.
const BATCH: usize = 512;

/// A batch runner: returns (host time, operations).
type Run<'a> = Box<dyn FnMut() -> (Duration, usize) + 'a>;

/// One case: a name, what it is held against (a case of the same round), and its batch.
struct Case<'a> {
    name: String,
    against: Option<usize>,
    run: Run<'a>,
    per_op_us: Vec<f64>,
}

/// Bare memsets on stream i % lanes; with an event after each, of either kind; or, `chained`, each
/// waiting for the event of the one before (on another stream), as the scope orders writes of one range.
fn bare(raw: &Raw, lanes: usize, event: Option<bool>, chained: bool) -> Run<'_> {
    Box::new(move || {
        let t = Instant::now();
        for i in 0..BATCH {
            bare_memset(raw, i, lanes, event, chained);
        }
        let dt = t.elapsed();
        raw.sync();
        (dt, BATCH)
    })
}

/// Bare memset `i` of a batch, as [`bare`] makes them.
#[inline(always)]
fn bare_memset(raw: &Raw, i: usize, lanes: usize, event: Option<bool>, chained: bool) {
    let s = raw.streams[i % lanes];
    let at = if chained { 0 } else { 4 * (i as u64 % 4096) };
    // SAFETY: 4 bytes inside the raw arena on a raw stream; live events of ours.
    unsafe {
        if chained && i > 0 {
            ffi::cuStreamWaitEvent(s, raw.untimed[i - 1], 0);
        }
        ffi::cuMemsetD32Async(raw.mem + at, 1, 1, s);
        match event {
            Some(true) => ffi::cuEventRecord(raw.timed[i], s),
            Some(false) => ffi::cuEventRecord(raw.untimed[i], s),
            None => ffi::SUCCESS,
        };
    }
}

/// What a probe adds between the bare calls: one part of what the scope does.
#[derive(Clone, Copy)]
enum Probe {
    /// The scope's bookkeeping, without the driver.
    Bookkeeping,
    /// `cuCtxGetCurrent`, as the scope once checked its context was current before each operation.
    ContextCheck,
}

/// Bare memsets as [`bare`] makes them (on one stream, or chained over four), with one part of the
/// scope's work before each: so that what each part costs amid the driver's calls can be told apart.
fn probed(raw: &Raw, lanes: usize, probe: Probe) -> Run<'_> {
    let chained = lanes > 1;
    let book = RefCell::new(cuda_scope::probe::BookkeepingProbe::new(lanes, chained));
    Box::new(move || {
        let mut book = book.borrow_mut();
        book.reset();
        let mut ctx = std::ptr::null_mut();
        let t = Instant::now();
        for i in 0..BATCH {
            match probe {
                Probe::Bookkeeping => book.step(i),
                // SAFETY: a valid out-pointer.
                Probe::ContextCheck => drop(unsafe { ffi::cuCtxGetCurrent(&mut ctx) }),
            }
            bare_memset(raw, i, lanes, chained.then_some(false), chained);
        }
        let dt = t.elapsed();
        raw.sync();
        (dt, BATCH)
    })
}

/// Memsets through the scope, on stream i % lanes, each of its own 4 bytes or all of the same.
fn scope_memsets<'a>(
    gpu: &'a Gpu,
    streams: &'a [cuda_scope::Stream],
    d: &'a RefCell<cuda_scope::DeviceBuffer<f32>>,
    lanes: usize,
    one_range: bool,
) -> Run<'a> {
    Box::new(move || {
        let mut d = d.borrow_mut();
        let t = gpu
            .scope(streams, |s| {
                let v = s.device(&mut d);
                let t = Instant::now();
                for i in 0..BATCH {
                    let at = if one_range { 0 } else { i % 4096 };
                    s.stream(i % lanes).fill(v.slice(at..at + 1), 1.0)?;
                }
                Ok::<_, cuda_scope::Error>(t.elapsed())
            })
            .unwrap();
        (t, BATCH)
    })
}

/// memcpy each, bare: buffer i up from its pinned slice into the arena and back, on stream i % lanes;
/// `wall`: timed to the streams' end, else the calls alone.
fn bare_copies(raw: &Raw, (up, down): (u64, u64), n: usize, lanes: usize, wall: bool) -> Run<'_> {
    Box::new(move || {
        let t = Instant::now();
        for i in 0..n {
            let (s, at) = (raw.streams[i % lanes], (i * 4096) as u64);
            // SAFETY: 4 KiB inside the raw arena and inside the pinned buffers, which outlive the copies
            // (synchronized below).
            unsafe { ffi::cuMemcpyHtoDAsync_v2(raw.mem + at, (up + at) as *const _, 4096, s) };
        }
        for i in 0..n {
            let (s, at) = (raw.streams[i % lanes], (i * 4096) as u64);
            // SAFETY: as above.
            unsafe { ffi::cuMemcpyDtoHAsync_v2((down + at) as *mut _, raw.mem + at, 4096, s) };
        }
        let calls = t.elapsed();
        raw.sync();
        (if wall { t.elapsed() } else { calls }, 2 * n)
    })
}

/// memcpy each through the scope: coalescing off, the calls timed; or on (`coalesced`), timed to the
/// scope's end.
fn scope_copies<'a>(
    (gpu, streams): (&'a Gpu, &'a [cuda_scope::Stream]),
    arena: &'a RefCell<cuda_scope::DeviceBuffer<u8>>,
    (h_up, h_down): (&'a [u8], &'a RefCell<cuda_scope::PinnedBuffer<u8>>),
    n: usize,
    lanes: usize,
    coalesced: bool,
) -> Run<'a> {
    Box::new(move || {
        let (mut arena, mut h_down) = (arena.borrow_mut(), h_down.borrow_mut());
        let start = Instant::now();
        let t = gpu
            .scope(streams, |s| {
                if !coalesced {
                    s.set_coalescing(cuda_scope::Coalescing::Off)?;
                }
                let a = s.device(&mut arena);
                let t = Instant::now();
                for (i, src) in h_up.chunks_exact(4096).take(n).enumerate() {
                    s.stream(i % lanes).htod(src, a.slice(i * 4096..(i + 1) * 4096))?;
                }
                for (i, dst) in h_down.chunks_exact_mut(4096).take(n).enumerate() {
                    s.stream(i % lanes).dtoh(a.slice(i * 4096..(i + 1) * 4096), dst)?;
                }
                Ok::<_, cuda_scope::Error>(t.elapsed())
            })
            .unwrap();
        (if coalesced { start.elapsed() } else { t }, 2 * n)
    })
}

fn add<'a>(cases: &mut Vec<Case<'a>>, name: &str, against: Option<&str>, run: Run<'a>) {
    let against = against.map(|a| cases.iter().position(|c| c.name == a).expect("an earlier case"));
    cases.push(Case { name: name.into(), against, run, per_op_us: Vec::new() });
}

/// The median (of an even count, the mean of the middle two).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n % 2 {
        1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Raw driver resources for the bare cases: streams, a device arena, and events with and without
/// timing, released when dropped.
struct Raw {
    streams: Vec<ffi::CUstream>,
    mem: u64,
    timed: Vec<ffi::CUevent>,
    untimed: Vec<ffi::CUevent>,
}

impl Raw {
    fn new(streams: usize, bytes: usize, events: usize) -> Raw {
        let mut raw = Raw { streams: vec![std::ptr::null_mut(); streams], mem: 0, timed: vec![], untimed: vec![] };
        raw.timed = vec![std::ptr::null_mut(); events];
        raw.untimed = vec![std::ptr::null_mut(); events];
        // SAFETY: valid out-pointers in the current context (the Gpu's); released in Drop.
        unsafe {
            for s in &mut raw.streams {
                assert_eq!(ffi::cuStreamCreate(s, ffi::CU_STREAM_NON_BLOCKING), ffi::SUCCESS);
            }
            assert_eq!(ffi::cuMemAlloc_v2(&mut raw.mem, bytes), ffi::SUCCESS);
            for e in &mut raw.timed {
                assert_eq!(ffi::cuEventCreate(e, 0), ffi::SUCCESS);
            }
            for e in &mut raw.untimed {
                assert_eq!(ffi::cuEventCreate(e, ffi::CU_EVENT_DISABLE_TIMING), ffi::SUCCESS);
            }
        }
        raw
    }

    fn sync(&self) {
        for s in &self.streams {
            // SAFETY: a live stream of ours.
            unsafe { ffi::cuStreamSynchronize(*s) };
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.sync();
        // SAFETY: each made in new(), released once, after their work finished.
        unsafe {
            for e in self.timed.iter().chain(&self.untimed) {
                ffi::cuEventDestroy_v2(*e);
            }
            ffi::cuMemFree_v2(self.mem);
            for s in &self.streams {
                ffi::cuStreamDestroy_v2(*s);
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // A flag's value; a flag given without one ends the run (exit code 2).
    let flag = |name: &str| {
        let at = args.iter().position(|a| a == name)?;
        match args.get(at + 1).filter(|v| !v.starts_with("--")) {
            Some(v) => Some(v.clone()),
            None => bad_args(&format!("{name} needs a value")),
        }
    };
    let rounds: usize = flag("--rounds").map_or(21, |r| r.parse().unwrap_or_else(|_| bad_args("--rounds: a count")));
    if let Some(n) = flag("--processes") {
        match n.parse::<usize>() {
            Ok(n) if n > 0 => across_processes(&args, n, flag("--json")),
            _ => bad_args(&format!("--processes {n}: a count of one or more")),
        }
        return;
    }
    let child = args.iter().any(|a| a == "--child");
    let gpu = match Gpu::init() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("scope benchmark skipped: {e:#}");
            return;
        }
    };
    let raw = Raw::new(4, 4 << 20, BATCH);
    let streams = gpu.streams(4).unwrap();
    // Each case lends these to its own scope, one case at a time.
    let d = RefCell::new(gpu.alloc::<f32>(4096).unwrap());
    let arena = RefCell::new(gpu.alloc::<u8>(1000 * 4096).unwrap());
    let h_up = gpu.pinned_from_fn(1000 * 4096, |i| i as u8).unwrap();
    let h_down = RefCell::new(gpu.pinned::<u8>(1000 * 4096).unwrap());
    let (up_ptr, down_ptr) = (h_up.as_ptr() as u64, h_down.borrow_mut().as_mut_ptr() as u64);
    let mut cases: Vec<Case> = Vec::new();
    add(&mut cases, "memset: bare", None, bare(&raw, 1, None, false));
    add(&mut cases, "memset: bare + event (timing)", Some("memset: bare"), bare(&raw, 1, Some(true), false));
    add(&mut cases, "memset: bare + event (no timing)", Some("memset: bare"), bare(&raw, 1, Some(false), false));
    add(&mut cases, "memset: scope, one stream", Some("memset: bare"), scope_memsets(&gpu, &streams, &d, 1, false));
    add(&mut cases, "memset: bare, 4 streams", None, bare(&raw, 4, None, false));
    let disjoint = scope_memsets(&gpu, &streams, &d, 4, false);
    add(&mut cases, "memset: scope, 4 streams, disjoint", Some("memset: bare, 4 streams"), disjoint);
    add(&mut cases, "memset: bare, 4 streams, wait + call + event", None, bare(&raw, 4, Some(false), true));
    let one_range = scope_memsets(&gpu, &streams, &d, 4, true);
    add(
        &mut cases,
        "memset: scope, 4 streams, one range",
        Some("memset: bare, 4 streams, wait + call + event"),
        one_range,
    );
    // Probes: the bare calls with one part of the scope's work between them.
    for (lanes, what, against) in
        [(1, "bare", "memset: bare"), (4, "wait + call + event", "memset: bare, 4 streams, wait + call + event")]
    {
        add(
            &mut cases,
            &format!("probe: {what}, and the bookkeeping"),
            Some(against),
            probed(&raw, lanes, Probe::Bookkeeping),
        );
        let check = probed(&raw, lanes, Probe::ContextCheck);
        add(&mut cases, &format!("probe: {what}, and cuCtxGetCurrent"), Some(against), check);
    }
    for n in [100, 1000] {
        for lanes in [1, 4] {
            let streams_word = if lanes == 1 { "1 stream" } else { "4 streams" };
            let bare_name = format!("memcpy each: {n} x 4 KiB, bare, {streams_word}");
            add(&mut cases, &bare_name, None, bare_copies(&raw, (up_ptr, down_ptr), n, lanes, false));
            let scope_name = format!("memcpy each: {n} x 4 KiB, scope, {streams_word}");
            let run = scope_copies((&gpu, &streams), &arena, (&h_up, &h_down), n, lanes, false);
            add(&mut cases, &scope_name, Some(&bare_name), run);
            let bare_wall = format!("memcpy each: {n} x 4 KiB, bare, {streams_word}, wall");
            add(&mut cases, &bare_wall, None, bare_copies(&raw, (up_ptr, down_ptr), n, lanes, true));
            let coalesced = format!("memcpy each: {n} x 4 KiB, scope coalesced, {streams_word}, wall");
            let run = scope_copies((&gpu, &streams), &arena, (&h_up, &h_down), n, lanes, true);
            add(&mut cases, &coalesced, Some(&bare_wall), run);
        }
    }
    // The parts of the scope's cost.
    add(
        &mut cases,
        "part: cuCtxGetCurrent",
        None,
        Box::new(|| {
            let mut ctx = std::ptr::null_mut();
            let t = Instant::now();
            for _ in 0..BATCH {
                // SAFETY: a valid out-pointer.
                unsafe { ffi::cuCtxGetCurrent(&mut ctx) };
            }
            (t.elapsed(), BATCH)
        }),
    );
    for (ops, lanes, one_range) in
        [(10, 1, false), (1000, 1, false), (10_000, 1, false), (10_000, 4, false), (512, 4, true)]
    {
        let what = if one_range { ", one range" } else { "" };
        let name =
            format!("part: bookkeeping alone, {ops} ops on {lanes} stream{}{what}", if lanes == 1 { "" } else { "s" });
        add(
            &mut cases,
            &name,
            None,
            Box::new(move || (cuda_scope::probe::bookkeeping_time(ops, lanes, one_range), ops)),
        );
    }

    // `--only NAME`: the cases whose name holds NAME, and what they are held against.
    // `--skip NAME`: leaves out the cases whose name holds NAME (unless another case is held against one).
    let (only, skip) = (flag("--only"), flag("--skip"));
    let mut chosen: Vec<bool> = cases
        .iter()
        .map(|c| {
            only.as_ref().is_none_or(|o| c.name.contains(o.as_str()))
                && skip.as_ref().is_none_or(|s| !c.name.contains(s.as_str()))
        })
        .collect();
    for i in 0..cases.len() {
        if let (true, Some(a)) = (chosen[i], cases[i].against) {
            chosen[a] = true;
        }
    }
    cases = cases.into_iter().zip(&chosen).filter(|(_, &keep)| keep).map(|(c, _)| c).collect();
    let kept: Vec<usize> = (0..chosen.len()).filter(|&i| chosen[i]).collect();
    for c in &mut cases {
        c.against = c.against.map(|a| kept.iter().position(|&k| k == a).expect("kept with its case"));
    }
    eprintln!("scope benchmark: {} cases, {rounds} rounds after 3 to warm up, in turn", cases.len());
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds + 3 {
        let mut this: Vec<f64> = Vec::with_capacity(cases.len());
        for c in cases.iter_mut() {
            let (t, ops) = (c.run)();
            this.push(t.as_secs_f64() * 1e6 / ops as f64);
        }
        if round < 3 {
            continue;
        }
        for (i, c) in cases.iter_mut().enumerate() {
            c.per_op_us.push(this[i]);
            if let Some(a) = c.against {
                ratios[i].push(this[i] / this[a]);
            }
        }
    }
    let names: Vec<String> = cases.iter().map(|c| c.name.clone()).collect();
    if child {
        // For the parent process: each case's median µs per op and median ratio, a line each.
        for (i, c) in cases.iter_mut().enumerate() {
            let ratio = c.against.map_or(String::from("-"), |_| format!("{:.4}", median(&mut ratios[i].clone())));
            let against = c.against.map_or("-", |a| names[a].as_str());
            println!("case\t{}\t{:.4}\t{ratio}\t{against}", c.name, median(&mut c.per_op_us.clone()));
        }
        return;
    }
    println!("{:<60} {:>10} {:>10} {:>22}", "case", "µs per op", "spread", "ratio (min..max)");
    let mut json = Vec::new();
    for (i, c) in cases.iter_mut().enumerate() {
        let mut v = c.per_op_us.clone();
        let (lo, hi) = (v.iter().copied().fold(f64::MAX, f64::min), v.iter().copied().fold(0.0, f64::max));
        let med = median(&mut v);
        let ratio = match c.against {
            Some(a) => {
                let mut r = ratios[i].clone();
                let (rlo, rhi) = (r.iter().copied().fold(f64::MAX, f64::min), r.iter().copied().fold(0.0, f64::max));
                let m = median(&mut r);
                json.push(format!(
                    "{{\"case\":\"{}\",\"against\":\"{}\",\"us_per_op\":{med:.4},\"ratio\":{m:.4},\"ratio_min\":{rlo:.4},\"ratio_max\":{rhi:.4}}}",
                    c.name, names[a]
                ));
                format!("{m:.3}x ({rlo:.2}..{rhi:.2})")
            }
            None => {
                json.push(format!("{{\"case\":\"{}\",\"us_per_op\":{med:.4}}}", c.name));
                String::new()
            }
        };
        println!("{:<60} {:>10.3} {:>10} {:>22}", c.name, med, format!("{lo:.2}-{hi:.2}"), ratio);
    }
    if let Some(path) = flag("--json") {
        std::fs::write(&path, format!("[{}]\n", json.join(",\n"))).unwrap();
    }
}

/// Ends the run for a flag it cannot take: exit code 2, as the lessons do.
fn bad_args(why: &str) -> ! {
    eprintln!("scope benchmark: {why}");
    std::process::exit(2)
}

/// One case over the processes: its µs per op and its ratio in each.
struct AcrossCase {
    name: String,
    against: Option<String>,
    us: Vec<f64>,
    ratios: Vec<f64>,
}

/// Runs this benchmark `n` times, one process after another, with the same flags, and reports each
/// case's median µs per op over the processes, its ratio in each, and their median. A process that
/// fails, or reports other cases than the first, ends the run with exit code 1.
fn across_processes(args: &[String], n: usize, json_path: Option<String>) {
    let fail = |why: String| -> ! {
        eprintln!("scope benchmark: {why}");
        std::process::exit(1)
    };
    // The flags but `--processes N` and `--json FILE`, which are this process's.
    let mut flags = Vec::new();
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--processes" | "--json" => drop(rest.next()),
            _ => flags.push(a.clone()),
        }
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(format!("cannot find its own program to run: {e}")));
    let mut cases: Vec<AcrossCase> = Vec::new();
    for p in 1..=n {
        eprintln!("scope benchmark: process {p} of {n}");
        let out = match std::process::Command::new(&exe).args(&flags).arg("--child").output() {
            Ok(out) if out.status.success() => out,
            Ok(out) => fail(format!("process {p} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr))),
            Err(e) => fail(format!("process {p} could not start: {e}")),
        };
        let mut seen = 0;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let ["case", name, us, ratio, against] = line.split('\t').collect::<Vec<_>>()[..] else { continue };
            let i = match cases.iter().position(|c| c.name == name) {
                Some(i) => i,
                None if p == 1 => {
                    let against = (against != "-").then(|| against.to_string());
                    cases.push(AcrossCase { name: name.into(), against, us: Vec::new(), ratios: Vec::new() });
                    cases.len() - 1
                }
                None => fail(format!("process {p} reported a case the first did not: {name}")),
            };
            cases[i].us.extend(us.parse::<f64>());
            cases[i].ratios.extend(ratio.parse::<f64>());
            seen += 1;
        }
        if seen == 0 && p == 1 {
            // No GPU: the process said why and measured nothing.
            return eprintln!("{}", String::from_utf8_lossy(&out.stderr).trim());
        }
        if seen != cases.len() {
            fail(format!("process {p} reported {seen} cases, the first {}", cases.len()));
        }
    }
    let width = (6 * n).max(22);
    println!("{n} processes, each a median over its rounds; the median over the processes last");
    println!("{:<60} {:>10} {:>width$} {:>8}", "case", "µs per op", "ratio in each process", "median");
    let mut json = Vec::new();
    for c in &mut cases {
        let us = median(&mut c.us.clone());
        let mut fields = vec![format!("\"case\":{}", json_str(&c.name)), format!("\"us_per_op\":{}", json_num(us))];
        if let Some(against) = &c.against {
            let each: Vec<String> = c.ratios.iter().map(|r| format!("{r:.3}")).collect();
            let m = median(&mut c.ratios.clone());
            println!("{:<60} {us:>10.3} {:>width$} {m:>7.3}x", c.name, each.join(" "));
            let ratios: Vec<String> = c.ratios.iter().map(|&r| json_num(r)).collect();
            fields.push(format!("\"against\":{}", json_str(against)));
            fields.push(format!("\"ratio\":{}", json_num(m)));
            fields.push(format!("\"ratio_in_each_process\":[{}]", ratios.join(",")));
        } else {
            println!("{:<60} {us:>10.3}", c.name);
        }
        fields.push(format!("\"processes\":{}", c.us.len()));
        json.push(format!("{{{}}}", fields.join(",")));
    }
    if let Some(path) = json_path {
        if let Err(e) = std::fs::write(&path, format!("[{}]\n", json.join(",\n"))) {
            fail(format!("writing {path}: {e}"));
        }
    }
}

/// A JSON string.
fn json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A JSON number, or null where there is none.
fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "null".into()
    }
}
