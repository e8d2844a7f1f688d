//! What Nsight Systems recorded of one run of a program, read from the CSV exports of `nsys stats`:
//! the GPU trace, the NVTX ranges and the CUDA API trace. Running nsys is the caller's: [`read`] asks it
//! for each export by name.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::{
    api::{parse_api_trace_csv, ApiCall},
    trace::{parse_gpu_trace_csv, parse_nvtx_csv, Trace},
};

/// What nsys recorded of one run of a program.
pub struct Recorded {
    /// The GPU operations, and the NVTX ranges as phases.
    pub trace: Trace,
    /// The CUDA API calls (empty where nsys traced none).
    pub api: Vec<ApiCall>,
    /// The run's report (`.nsys-rep`).
    pub report: PathBuf,
    /// What went wrong on the way without stopping the profile, a line each.
    pub notes: Vec<String>,
}

/// The `nsys stats` report of the GPU operations; a run without any is an error.
pub const GPU_TRACE: &str = "cuda_gpu_trace";
/// The `nsys stats` report of the NVTX ranges (none where the program has none).
pub const NVTX_TRACE: &str = "nvtx_pushpop_trace";
/// The `nsys stats` report of the CUDA API calls, which the checks and the segments rest on.
pub const API_TRACE: &str = "cuda_api_trace";

/// Reads the run of `stem` whose report is `report`: `export` gives the CSV text of the `nsys stats`
/// report it is asked for by name ([`GPU_TRACE`], then [`NVTX_TRACE`] and [`API_TRACE`]; empty where the
/// run holds no such data), or why it could not. A run without GPU work is an error that points to
/// `log` (what nsys and the program printed); a failed NVTX or API export is a note, added to `notes`.
pub fn read(
    stem: &str,
    report: PathBuf,
    log: &Path,
    mut notes: Vec<String>,
    mut export: impl FnMut(&str) -> anyhow::Result<String>,
) -> anyhow::Result<Recorded> {
    let ops = parse_gpu_trace_csv(&export(GPU_TRACE)?).context("reading the CUDA GPU trace")?;
    if ops.is_empty() {
        bail!("nsys recorded no GPU work for {stem}: see {}", log.display());
    }
    let mut optional = |kind: &str, what: &str| match export(kind) {
        Ok(text) => Some(text),
        Err(e) => {
            notes.push(format!("no {what}: {e:#}"));
            None
        }
    };
    let phases = match optional(NVTX_TRACE, "NVTX ranges").map(|t| parse_nvtx_csv(&t)) {
        Some(Ok(p)) => p,
        Some(Err(e)) => bail!("reading the NVTX ranges: {e:#}"),
        None => vec![],
    };
    let api = match optional(API_TRACE, "CUDA API trace").map(|t| parse_api_trace_csv(&t)) {
        Some(Ok(a)) => a,
        Some(Err(e)) => bail!("reading the CUDA API trace: {e:#}"),
        None => vec![],
    };
    if api.is_empty() {
        notes.push("the CUDA API trace is empty: no checks, and no segments".into());
    }
    Ok(Recorded { trace: Trace { ops, phases }, api, report, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exports_of_a_run_without_nvtx() {
        let mut asked = Vec::new();
        let rec = read("overlap_pattern", PathBuf::from("r.nsys-rep"), Path::new("r.log"), vec![], |kind| {
            asked.push(kind.to_string());
            match kind {
                GPU_TRACE => Ok(include_str!("../fixtures/synthetic_overlap_pattern_cuda_gpu_trace.csv").into()),
                API_TRACE => Ok(include_str!("../fixtures/synthetic_overlap_pattern_cuda_api_trace.csv").into()),
                _ => Ok(String::new()),
            }
        })
        .unwrap();
        assert_eq!(asked, [GPU_TRACE, NVTX_TRACE, API_TRACE]);
        assert_eq!((rec.trace.ops.len(), rec.trace.phases.len(), rec.api.len()), (24, 0, 58));
        assert!(rec.notes.is_empty(), "{:?}", rec.notes);
    }

    #[test]
    fn failed_exports_are_notes_and_no_gpu_work_an_error() {
        let gpu = include_str!("../fixtures/synthetic_overlap_pattern_cuda_gpu_trace.csv");
        let rec = read("p", PathBuf::new(), Path::new("p.log"), vec!["earlier".into()], |kind| match kind {
            GPU_TRACE => Ok(gpu.into()),
            _ => anyhow::bail!("nsys stats {kind}: failed"),
        })
        .unwrap();
        assert_eq!(
            rec.notes,
            [
                "earlier",
                "no NVTX ranges: nsys stats nvtx_pushpop_trace: failed",
                "no CUDA API trace: nsys stats cuda_api_trace: failed",
                "the CUDA API trace is empty: no checks, and no segments"
            ]
        );
        let err = read("p", PathBuf::new(), Path::new("out/p.log"), vec![], |_| Ok(String::new())).err().unwrap();
        assert_eq!(format!("{err:#}"), "nsys recorded no GPU work for p: see out/p.log");
    }
}
