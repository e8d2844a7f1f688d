//! The checks that matter for transfers, from nsys's CUDA API trace joined to its GPU trace by
//! correlation id: async copies that touch pageable memory, synchronous copies and memsets on the
//! legacy default stream, and streams whose work never ran at the same time.
//!
//! The legacy default stream is found, never assumed. Synchronous copy and memset calls (names with
//! Memcpy or Memset and without Async: `cudaMemcpy`, `cudaMemset`, `cuMemcpyHtoD_v2`, `cuMemsetD8_v2`...)
//! take no stream argument, so their GPU work runs on the legacy stream, and the stream id nsys gives that
//! work is the legacy stream's (7 in the traces this project has seen). Their per-thread-default-stream forms
//! (`_ptds`, `_ptsz`) run on the calling thread's own stream and are left out. Where a program makes no
//! such call, the legacy stream stays unknown and no check rests on it.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    api::{classify, per_thread, ApiCall, Call, Calls},
    metrics,
    trace::{Kind, Op},
};

/// The legacy default stream's id(s): the streams of the GPU work of synchronous copy and memset calls.
pub fn legacy_streams(ops: &[Op], calls: &Calls) -> BTreeSet<String> {
    ops.iter()
        .filter(|o| calls.of(o).is_some_and(|c| classify(&c.name) == Call::SyncTransfer && !per_thread(&c.name)))
        .map(|o| o.stream.clone())
        .collect()
}

/// One check over one range: how many cases, the time they took, and the first in words.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// The check: [`PAGEABLE_ASYNC`], [`LEGACY_SYNC`] or [`NEVER_TOGETHER`].
    pub check: &'static str,
    /// How many cases it found.
    pub count: usize,
    /// The time they took, in words (empty where none).
    pub time: String,
    /// The first case, in words; or why the check could not look.
    pub first: String,
}

/// The check for async copies that touch pageable memory.
pub const PAGEABLE_ASYNC: &str = "async copies touching pageable memory";
/// The check for synchronous copies and memsets on the legacy stream where other streams carry work.
pub const LEGACY_SYNC: &str = "synchronous copies and memsets on the legacy stream";
/// The check for pairs of streams whose work never overlapped in time.
pub const NEVER_TOGETHER: &str = "streams whose work never ran at the same time";

/// The three checks over `ops` (one range of the run); `all` is the whole run, `t0` the time that
/// "at ... ms" counts from.
pub fn run(ops: &[&Op], all: &[Op], calls: &Calls, legacy: &BTreeSet<String>, t0: f64) -> Vec<Finding> {
    vec![pageable_async(ops, calls, t0), legacy_sync(ops, all, calls, legacy, t0), never_together(ops, t0)]
}

/// How long the calls behind `hits` held the host, each call once: one call can make many operations
/// (a batch of copies, `cuMemcpyBatchAsync`, makes one per buffer).
fn held_ms<'a>(calls: impl IntoIterator<Item = &'a ApiCall>) -> f64 {
    let mut calls: Vec<&ApiCall> = calls.into_iter().collect();
    calls.sort_by_key(|c| c.corr);
    calls.dedup_by_key(|c| c.corr);
    calls.iter().map(|c| c.end - c.start).sum()
}

/// An async copy whose host side is pageable: the driver stages it through its own pinned buffer, and
/// the call returns only once the data is staged, so it neither leaves the host free nor overlaps as meant.
fn pageable_async(ops: &[&Op], calls: &Calls, t0: f64) -> Finding {
    let pageable = |k: &str| k.eq_ignore_ascii_case("pageable");
    let hits: Vec<(&Op, &ApiCall)> = ops
        .iter()
        .filter(|o| pageable(&o.src_kind) || pageable(&o.dst_kind))
        .filter_map(|o| calls.of(o).filter(|c| classify(&c.name) == Call::AsyncTransfer).map(|c| (*o, c)))
        .collect();
    let mut f = Finding { check: PAGEABLE_ASYNC, count: hits.len(), time: String::new(), first: String::new() };
    if let Some((op, call)) = hits.first() {
        f.time = format!(
            "GPU {:.3} ms; the calls held the host {:.3} ms",
            hits.iter().map(|(o, _)| o.end - o.start).sum::<f64>(),
            held_ms(hits.iter().map(|(_, c)| *c))
        );
        f.first = format!(
            "{}: {} on stream {} at {:.3} ms, GPU {:.3} ms, the call held the host {:.3} ms",
            call.name,
            what(op),
            op.stream,
            op.start - t0,
            op.end - op.start,
            call.end - call.start
        );
    }
    f
}

/// A synchronous copy or memset on the legacy stream waits for the work already queued on every
/// blocking stream, and work queued on them after it waits for it (streams made with
/// cudaStreamNonBlocking are exempt). Counted where other streams carry work in the program.
fn legacy_sync(ops: &[&Op], all: &[Op], calls: &Calls, legacy: &BTreeSet<String>, t0: f64) -> Finding {
    let mut f = Finding { check: LEGACY_SYNC, count: 0, time: String::new(), first: String::new() };
    if legacy.is_empty() {
        f.first = "no synchronous copy or memset in the run, so the legacy stream is not identified".into();
        return f;
    }
    let others: Vec<&Op> = all.iter().filter(|o| !legacy.contains(&o.stream)).collect();
    if others.is_empty() {
        f.first = format!("no stream but the legacy one ({}) carries work: nothing to serialize", join(legacy));
        return f;
    }
    let hits: Vec<(&Op, &ApiCall)> = ops
        .iter()
        .filter(|o| legacy.contains(&o.stream))
        .filter_map(|o| {
            calls.of(o).filter(|c| classify(&c.name) == Call::SyncTransfer && !per_thread(&c.name)).map(|c| (*o, c))
        })
        .collect();
    f.count = hits.len();
    let Some((op, call)) = hits.first() else {
        return f;
    };
    let alongside = hits.iter().filter(|(h, _)| others.iter().any(|o| o.start < h.end && h.start < o.end)).count();
    f.time = format!(
        "GPU {:.3} ms; the calls held the host {:.3} ms",
        hits.iter().map(|(o, _)| o.end - o.start).sum::<f64>(),
        held_ms(hits.iter().map(|(_, c)| *c))
    );
    f.first = format!(
        "{}: {} on stream {} (legacy) at {:.3} ms, the call held the host {:.3} ms; {}",
        call.name,
        what(op),
        op.stream,
        op.start - t0,
        call.end - call.start,
        match (alongside, hits.len()) {
            (0, 1) => "it ran alongside no other stream's work".to_string(),
            (0, n) => format!("none of the {n} ran alongside another stream's work"),
            (a, n) => format!("{a} of {n} ran alongside another stream's work (so those streams are non-blocking)"),
        }
    );
    f
}

/// Pairs of streams that both carry work in the range and whose operations never overlapped in time.
fn never_together(ops: &[&Op], t0: f64) -> Finding {
    let mut streams: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    // Work on no stream (the driver's unified-memory migrations) is no stream's to overlap.
    for o in ops.iter().filter(|o| !o.stream.is_empty()) {
        streams.entry(o.stream.as_str()).or_default().push(o);
    }
    let mut ids: Vec<&str> = streams.keys().copied().collect();
    ids.sort_by_key(|s| (s.parse::<i64>().unwrap_or(i64::MAX), s.to_string()));
    let busy: BTreeMap<&str, Vec<(f64, f64)>> =
        streams.iter().map(|(s, o)| (*s, metrics::union(o.iter().map(|o| (o.start, o.end)).collect()))).collect();
    let mut apart: Vec<(&str, &str)> = Vec::new();
    for (i, a) in ids.iter().enumerate() {
        for b in &ids[i + 1..] {
            if metrics::overlap(&busy[a], &busy[b]) <= 0.0 {
                apart.push((a, b));
            }
        }
    }
    let mut f = Finding { check: NEVER_TOGETHER, count: apart.len(), time: String::new(), first: String::new() };
    if apart.is_empty() {
        return f;
    }
    let involved: Vec<&str> = ids.iter().copied().filter(|s| apart.iter().any(|(a, b)| a == s || b == s)).collect();
    f.time = format!(
        "{:.3} ms of work on streams {}",
        involved.iter().map(|s| metrics::length(&busy[s])).sum::<f64>(),
        involved.join(", ")
    );
    // Grouped by the first stream of each pair: "stream 7 with streams 13, 14; stream 13 with 15".
    let mut groups: Vec<String> = Vec::new();
    for a in &ids {
        let with: Vec<&str> = apart.iter().filter(|(x, _)| x == a).map(|(_, b)| *b).collect();
        if !with.is_empty() {
            let plural = if with.len() > 1 { "streams" } else { "stream" };
            groups.push(format!("stream {a} never ran at the same time as {plural} {}", with.join(", ")));
        }
    }
    let (a, b) = apart[0];
    let about = |s: &str| {
        let o = &streams[s];
        let from = o.iter().map(|o| o.start).fold(f64::INFINITY, f64::min) - t0;
        format!("{} ops, {:.3} ms busy, from {from:.3} ms", o.len(), metrics::length(&busy[s]))
    };
    f.first = format!("{}; first pair: stream {a} ({}) and stream {b} ({})", groups.join("; "), about(a), about(b));
    f
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

/// An operation in words: "16.777 MB host to device (Pinned to Device)".
pub fn what(op: &Op) -> String {
    let kind = match op.kind {
        Kind::H2D => "host to device",
        Kind::D2H => "device to host",
        Kind::Memset => "memset",
        Kind::Kernel => "kernel",
        Kind::Other => op.name.as_str(),
    };
    let kinds = match (op.src_kind.as_str(), op.dst_kind.as_str()) {
        ("", "") => String::new(),
        (s, "") => format!(" ({s})"),
        (s, d) => format!(" ({s} to {d})"),
    };
    if op.bytes > 0 {
        format!("{:.3} MB {kind}{kinds}", op.bytes as f64 / 1e6)
    } else {
        format!("{kind}{kinds}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_made_many_operations_held_the_host_once() {
        let call = |corr, start, end| ApiCall { start, end, name: "cuMemcpyBatchAsync".into(), corr };
        let (batch, single) = (call(7, 10.0, 12.5), call(8, 20.0, 20.25));
        assert_eq!(held_ms([&batch, &batch, &batch, &single]), 2.75);
    }
    use crate::{api::parse_api_trace_csv, trace};

    struct Fixture {
        ops: Vec<Op>,
        api: Vec<ApiCall>,
    }

    fn fixture(gpu: &str, api: &str) -> Fixture {
        Fixture { ops: trace::parse_gpu_trace_csv(gpu).unwrap(), api: parse_api_trace_csv(api).unwrap() }
    }

    fn findings(f: &Fixture) -> Vec<Finding> {
        let calls = Calls::new(&f.api);
        let legacy = legacy_streams(&f.ops, &calls);
        let t0 = f.ops.iter().map(|o| o.start).fold(f64::INFINITY, f64::min);
        run(&f.ops.iter().collect::<Vec<_>>(), &f.ops, &calls, &legacy, t0)
    }

    /// overlap_pattern.cu's two versions (synthetic trace, see fixtures/README.md): cudaMemcpy, kernel,
    /// cudaMemcpy four times on the legacy stream, then the same on four streams.
    #[test]
    fn the_seeds_overlap_pattern() {
        let f = fixture(
            include_str!("../fixtures/synthetic_overlap_pattern_cuda_gpu_trace.csv"),
            include_str!("../fixtures/synthetic_overlap_pattern_cuda_api_trace.csv"),
        );
        assert_eq!(legacy_streams(&f.ops, &Calls::new(&f.api)), BTreeSet::from(["7".to_string()]));
        let [pageable, legacy, apart] = &findings(&f)[..] else { panic!() };
        assert_eq!(pageable.count, 0);
        assert_eq!(legacy.count, 8);
        assert_eq!(legacy.time, "GPU 2.435 ms; the calls held the host 15.941 ms");
        assert_eq!(
            legacy.first,
            "cudaMemcpy: 16.777 MB host to device (Pinned to Device) on stream 7 (legacy) at 0.000 ms, the call \
             held the host 0.315 ms; none of the 8 ran alongside another stream's work"
        );
        // Kernels fill the GPU one after another: stream 14's work ends before stream 16's kernel starts,
        // and its upload ran before 16's.
        assert_eq!(apart.count, 5, "7 with each of 13-16, and 14 with 16");
        assert_eq!(
            apart.first,
            "stream 7 never ran at the same time as streams 13, 14, 15, 16; stream 14 never ran at the same time as \
             stream 16; first pair: stream 7 (12 ops, 15.875 ms busy, from 0.000 ms) and stream 13 (3 ops, 3.969 ms \
             busy, from 16.016 ms)"
        );
    }

    /// cudaMemcpyAsync each way from and to malloc'd memory on a stream, after a cudaMemset (synthetic).
    #[test]
    fn pageable_memory_in_async_copies() {
        let f = fixture(
            include_str!("../fixtures/synthetic_pageable_async_cuda_gpu_trace.csv"),
            include_str!("../fixtures/synthetic_pageable_async_cuda_api_trace.csv"),
        );
        let [pageable, legacy, apart] = &findings(&f)[..] else { panic!() };
        assert_eq!((pageable.count, legacy.count, apart.count), (2, 1, 1));
        assert_eq!(pageable.time, "GPU 3.448 ms; the calls held the host 3.633 ms");
        assert_eq!(
            pageable.first,
            "cudaMemcpyAsync: 16.777 MB host to device (Pageable to Device) on stream 13 at 0.014 ms, GPU 2.050 ms, \
             the call held the host 2.110 ms"
        );
        assert!(legacy.first.starts_with("cudaMemset: 16.777 MB memset (Device) on stream 7 (legacy) at 0.000 ms"));
        assert!(legacy.first.ends_with("it ran alongside no other stream's work"), "{}", legacy.first);
    }

    #[test]
    fn no_legacy_stream_without_synchronous_calls() {
        let mut f = fixture(
            include_str!("../fixtures/synthetic_pageable_async_cuda_gpu_trace.csv"),
            include_str!("../fixtures/synthetic_pageable_async_cuda_api_trace.csv"),
        );
        f.api.retain(|c| c.name != "cudaMemset");
        let [_, legacy, _] = &findings(&f)[..] else { panic!() };
        assert_eq!(legacy.count, 0);
        assert!(legacy.first.contains("not identified"), "{}", legacy.first);
    }
}
