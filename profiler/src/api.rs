//! CUDA API calls, runtime or driver, from nsys's `cuda_api_trace` export; what each does, from its name
//! (a copy or memset with or without a stream argument, a host synchronization); and the call that made
//! each GPU operation, joined by correlation id.

use std::collections::HashMap;

use anyhow::Context as _;

use crate::{
    table::{self, column},
    trace::Op,
};

/// One CUDA API call, runtime or driver; times in ms.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiCall {
    /// When the call began, in ms.
    pub start: f64,
    /// When it returned, in ms.
    pub end: f64,
    /// Its name as nsys gives it (`cudaMemcpyAsync`, `cuMemcpyHtoD_v2`...).
    pub name: String,
    /// Its correlation id, which the GPU work it made carries too.
    pub corr: u64,
}

/// `nsys stats --report cuda_api_trace --format csv`, whose columns are (nsys 2024-2025) "Start (ns)",
/// "Duration (ns)", "Name", "Result", "CorrID", "Pid", "Tid", "T-Pri", "Thread Name": found by name.
pub fn parse_api_trace_csv(text: &str) -> anyhow::Result<Vec<ApiCall>> {
    let mut calls = Vec::new();
    for (i, row) in table::rows(text)?.iter().enumerate() {
        let get = |names: &[&str]| -> anyhow::Result<&str> {
            column(row, names).map(str::trim).with_context(|| format!("API row {}: no column {names:?}", i + 1))
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
    /// Anything else.
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

/// What the call named `name` does: copies and memsets are the names with Memcpy or Memset, synchronous
/// (no stream argument: `cudaMemcpy`, `cuMemsetD8_v2`...) unless they have Async.
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
    /// The calls of `api`, by correlation id.
    pub fn new(api: &'a [ApiCall]) -> Self {
        let mut by_corr = HashMap::new();
        for c in api {
            by_corr.entry(c.corr).or_insert(c);
        }
        Calls { by_corr }
    }

    /// The call that made `op`, where the trace has it.
    pub fn of(&self, op: &Op) -> Option<&'a ApiCall> {
        op.corr.and_then(|c| self.by_corr.get(&c).copied())
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
