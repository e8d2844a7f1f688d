//! The checks that matter for transfers, from nsys's CUDA API trace joined to its GPU trace by
//! correlation id: async copies that touch pageable memory, synchronous copies and memsets on the
//! legacy default stream, and streams whose work never ran at the same time.
//!
//! The legacy default stream is found, never assumed. Synchronous copy and memset calls (names with
//! Memcpy or Memset and without Async: `cudaMemcpy`, `cudaMemset`, `cuMemcpyHtoD_v2`, `cuMemsetD8_v2`...)
//! take no stream argument, so their GPU work runs on the legacy stream, and the stream id nsys gives that
//! work is the legacy stream's (7 in the traces seen on the H200). Their per-thread-default-stream forms
//! (`_ptds`, `_ptsz`) run on the calling thread's own stream and are left out. Where a program makes no
//! such call, the legacy stream stays unknown and no check rests on it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::Context as _;

use crate::trace::{self, Kind, Op};

/// One CUDA API call, runtime or driver; times in ms.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiCall {
    pub start: f64,
    pub end: f64,
    pub name: String,
    pub corr: u64,
}

/// `nsys stats --report cuda_api_trace --format csv`, whose columns are (nsys 2024-2025) "Start (ns)",
/// "Duration (ns)", "Name", "Result", "CorrID", "Pid", "Tid", "T-Pri", "Thread Name": found by name.
pub fn parse_api_trace_csv(text: &str) -> anyhow::Result<Vec<ApiCall>> {
    let mut calls = Vec::new();
    for (i, row) in trace::csv_rows(text)?.iter().enumerate() {
        let get = |names: &[&str]| -> anyhow::Result<&str> {
            trace::column(row, names).map(str::trim).with_context(|| format!("API row {}: no column {names:?}", i + 1))
        };
        let ns = |names: &[&str]| -> anyhow::Result<f64> {
            let v = get(names)?;
            v.parse::<f64>().with_context(|| format!("API row {}: {names:?} is {v:?}", i + 1))
        };
        let start = ns(&["Start (ns)", "Start"])? / 1e6;
        let corr = get(&["CorrID", "Correlation"])?;
        calls.push(ApiCall {
            start,
            end: start + ns(&["Duration (ns)", "Duration"])? / 1e6,
            name: get(&["Name", "API Name"])?.to_string(),
            corr: corr.parse().with_context(|| format!("API row {}: CorrID is {corr:?}", i + 1))?,
        });
    }
    calls.sort_by(|a, b| a.start.total_cmp(&b.start));
    Ok(calls)
}

/// An API name without its version suffix: `cuMemcpyHtoD_v2` and `cudaMemcpy_v3020` name the same
/// calls as `cuMemcpyHtoD` and `cudaMemcpy` (nsys strips the runtime's 4-digit ones itself).
pub fn base_name(name: &str) -> &str {
    match name.rfind("_v") {
        Some(i) if name.len() > i + 2 && name[i + 2..].bytes().all(|b| b.is_ascii_digit()) => &name[..i],
        _ => name,
    }
}

/// What an API call does, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A copy or memset without a stream argument.
    SyncTransfer,
    /// A copy or memset on a stream (`...Async`).
    AsyncTransfer,
    /// The host waits for the GPU: a device, stream or event synchronize.
    HostSync,
    Other,
}

const HOST_SYNCS: [&str; 7] = [
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaThreadSynchronize",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
];

pub fn classify(name: &str) -> Call {
    let base = base_name(name);
    if base.contains("Memcpy") || base.contains("Memset") {
        if base.contains("Async") {
            Call::AsyncTransfer
        } else {
            Call::SyncTransfer
        }
    } else if HOST_SYNCS.iter().any(|s| base.starts_with(s)) {
        Call::HostSync
    } else {
        Call::Other
    }
}

/// The per-thread-default-stream form of a call (`cudaMemcpy_ptds`), which does not use the legacy stream.
pub fn per_thread(name: &str) -> bool {
    let base = base_name(name);
    base.ends_with("_ptds") || base.ends_with("_ptsz")
}

/// The API call that made each GPU operation, by correlation id (the first call with that id).
pub struct Calls<'a> {
    by_corr: HashMap<u64, &'a ApiCall>,
}

impl<'a> Calls<'a> {
    pub fn new(api: &'a [ApiCall]) -> Self {
        let mut by_corr = HashMap::new();
        for c in api {
            by_corr.entry(c.corr).or_insert(c);
        }
        Calls { by_corr }
    }

    pub fn of(&self, op: &Op) -> Option<&'a ApiCall> {
        op.corr.and_then(|c| self.by_corr.get(&c).copied())
    }
}

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
    pub check: &'static str,
    pub count: usize,
    pub time: String,
    pub first: String,
}

pub const PAGEABLE_ASYNC: &str = "async copies touching pageable memory";
pub const LEGACY_SYNC: &str = "synchronous copies and memsets on the legacy stream";
pub const NEVER_TOGETHER: &str = "streams whose work never ran at the same time";

/// The three checks over `ops` (one range of the run); `all` is the whole run, `t0` the time that
/// "at ... ms" counts from.
pub fn run(ops: &[&Op], all: &[Op], calls: &Calls, legacy: &BTreeSet<String>, t0: f64) -> Vec<Finding> {
    vec![pageable_async(ops, calls, t0), legacy_sync(ops, all, calls, legacy, t0), never_together(ops, t0)]
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
            hits.iter().map(|(_, c)| c.end - c.start).sum::<f64>()
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
        hits.iter().map(|(_, c)| c.end - c.start).sum::<f64>()
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
        streams.iter().map(|(s, o)| (*s, trace::union(o.iter().map(|o| (o.start, o.end)).collect()))).collect();
    let mut apart: Vec<(&str, &str)> = Vec::new();
    for (i, a) in ids.iter().enumerate() {
        for b in &ids[i + 1..] {
            if trace::overlap(&busy[a], &busy[b]) <= 0.0 {
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
        involved.iter().map(|s| trace::length(&busy[s])).sum::<f64>(),
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
        format!("{} ops, {:.3} ms busy, from {from:.3} ms", o.len(), trace::length(&busy[s]))
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
    fn names_without_versions_and_what_they_do() {
        assert_eq!(base_name("cuMemcpyHtoDAsync_v2"), "cuMemcpyHtoDAsync");
        assert_eq!(base_name("cudaMemcpy_v3020"), "cudaMemcpy");
        assert_eq!(base_name("cudaMemcpy_ptds_v7000"), "cudaMemcpy_ptds");
        assert_eq!(base_name("cudaLaunchKernel"), "cudaLaunchKernel");
        assert_eq!(base_name("my_v"), "my_v");
        assert_eq!(classify("cudaMemcpy"), Call::SyncTransfer);
        assert_eq!(classify("cuMemsetD8_v2"), Call::SyncTransfer);
        assert_eq!(classify("cuMemcpyHtoDAsync_v2"), Call::AsyncTransfer);
        assert_eq!(classify("cudaMemsetAsync"), Call::AsyncTransfer);
        assert_eq!(classify("cudaStreamSynchronize"), Call::HostSync);
        assert_eq!(classify("cuCtxSynchronize"), Call::HostSync);
        assert_eq!(classify("cudaStreamSynchronize_ptsz"), Call::HostSync);
        assert_eq!(classify("cudaEventRecord"), Call::Other);
        assert!(per_thread("cudaMemcpy_ptds_v7000") && !per_thread("cudaMemcpy"));
    }

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

    #[test]
    fn api_trace_columns_found_by_name() {
        let csv = "Start (ns),Duration (ns),Name,Result,CorrID,Pid,Tid,T-Pri,Thread Name\n\
                   2000000,500000,cudaMemcpy,0,17,9,9,20,overlap_pattern\n\
                   1000000,1000,cuMemcpyHtoDAsync_v2,0,12,9,9,20,\"a, thread\"\n";
        let calls = parse_api_trace_csv(csv).unwrap();
        assert_eq!(
            calls,
            [
                ApiCall { start: 1.0, end: 1.001, name: "cuMemcpyHtoDAsync_v2".into(), corr: 12 },
                ApiCall { start: 2.0, end: 2.5, name: "cudaMemcpy".into(), corr: 17 },
            ]
        );
        assert!(parse_api_trace_csv("").unwrap().is_empty(), "no CUDA calls: nsys writes no file");
        let err = parse_api_trace_csv("Start (ns),Duration (ns),Name\n1,2,x\n").unwrap_err();
        assert!(format!("{err:#}").contains("CorrID"), "{err:#}");
    }
}
