//! Phases and the built-in timeline.
//!
//! [`phase`] names what a lesson is doing ("serialized", "overlapped"): an NVTX range that Nsight Systems
//! shows (with the `nvtx` feature), and the label of every operation in the built-in timeline.
//!
//! The built-in timeline is for machines without Nsight Systems: with `GPU_TIMELINE=trace.json` in the
//! environment, every copy, memset and kernel a scope queues gets a CUDA event before and after it, and
//! when the [`cuda_scope::Gpu`] is dropped the operations are written as a Chrome trace (ui.perfetto.dev opens
//! it; `cargo xtask profile --builtin` summarizes and draws it). An event before an operation fires when
//! its stream reaches it, which can be before its engine is free: the summary corrects for that by
//! letting each engine run one operation at a time.

use std::{
    cell::RefCell,
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::Instant,
};

use cuda_scope::{Gpu, Observer, TimedOp};

thread_local! {
    static PHASE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A named phase of a lesson, until dropped.
pub struct PhaseGuard {
    previous: String,
    #[cfg(feature = "nvtx")]
    _range: nvtx::LocalRange,
}

/// Starts a phase; it ends when the returned guard is dropped.
pub fn phase(name: &str) -> PhaseGuard {
    let previous = PHASE.with(|p| std::mem::replace(&mut *p.borrow_mut(), name.to_string()));
    PhaseGuard {
        previous,
        #[cfg(feature = "nvtx")]
        _range: nvtx::LocalRange::new(nvtx::Str::from_str_lossy(name)),
    }
}

impl Drop for PhaseGuard {
    fn drop(&mut self) {
        PHASE.with(|p| *p.borrow_mut() = std::mem::take(&mut self.previous));
    }
}

/// The phase this thread is in ("" outside any).
pub fn current_phase() -> String {
    PHASE.with(|p| p.borrow().clone())
}

/// One operation as the GPU ran it, on the process's clock: the operation ([`TimedOp`]: its `label` is
/// the phase it ran in, its stream numbered from 0 per GPU, its times in ms since the process started
/// recording) and the GPU it ran on.
#[derive(Clone, Debug)]
pub struct Record {
    pub device: u32,
    pub op: TimedOp,
}

/// The records of every GPU of the process, on one clock: the host's, from the first recorder's start.
static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());
static START: OnceLock<Instant> = OnceLock::new();

/// Collects [`Record`]s for one GPU while `GPU_TIMELINE` is set: an observer of its scopes
/// ([`cuda_scope::Gpu::observe`]); it writes the file when the GPU drops it.
struct Recorder {
    path: PathBuf,
    device: u32,
    /// When the GPU's origin event completed, in ms on the process clock: GPU times are placed on the
    /// host's clock through it, so that the operations of several GPUs (or contexts) line up.
    origin_ms: Arc<OnceLock<f64>>,
    records: Vec<Record>,
    streams: HashMap<usize, usize>,
}

/// Whether the built-in timeline records this run (`GPU_TIMELINE` names a file): its observer times
/// every operation of a scope, which the bare driver calls beside it do not pay.
pub fn is_recording() -> bool {
    asked().is_some()
}

/// The file `GPU_TIMELINE` names, if it names one.
fn asked() -> Option<std::ffi::OsString> {
    std::env::var_os("GPU_TIMELINE").filter(|p| !p.is_empty())
}

/// Starts the built-in timeline on `gpu` where `GPU_TIMELINE` names a file; otherwise does nothing.
pub fn record_if_asked(gpu: &mut Gpu) -> anyhow::Result<()> {
    let Some(path) = asked() else { return Ok(()) };
    let start = *START.get_or_init(Instant::now);
    let origin_ms = Arc::new(OnceLock::new());
    let (device, origin) = (gpu.info.ordinal, origin_ms.clone());
    gpu.observe(Box::new(Recorder {
        path: path.into(),
        device,
        origin_ms,
        records: Vec::new(),
        streams: HashMap::new(),
    }))?;
    // observe() returns once its origin event has completed: within microseconds of now.
    let _ = origin.set(start.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

impl Observer for Recorder {
    fn label(&self) -> String {
        current_phase()
    }

    fn record(&mut self, op: TimedOp) {
        let origin_ms = self.origin_ms.get().copied().unwrap_or(0.0);
        let next = self.streams.len();
        let stream = *self.streams.entry(op.stream).or_insert(next);
        let (start_ms, end_ms) = (origin_ms + op.start_ms, origin_ms + op.end_ms);
        self.records.push(Record { device: self.device, op: TimedOp { stream, start_ms, end_ms, ..op } });
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        match self.write() {
            Ok(n) => eprintln!("built-in timeline: {n} operations written to {}", self.path.display()),
            Err(e) => eprintln!("built-in timeline not written: {e:#}"),
        }
    }
}

impl Recorder {
    /// Adds this GPU's records to the process's and writes them all (each GPU dropped rewrites the file).
    fn write(&mut self) -> anyhow::Result<usize> {
        use anyhow::Context as _;
        let mut all = RECORDS.lock().unwrap_or_else(|e| e.into_inner());
        all.append(&mut self.records);
        let json = serde_json::to_string(&chrome_trace(&all))?;
        std::fs::write(&self.path, json).with_context(|| format!("writing the timeline to {}", self.path.display()))?;
        Ok(all.len())
    }
}

/// The Chrome trace of `records`: one row (tid) per stream, and a row of phases.
pub fn chrome_trace(records: &[Record]) -> serde_json::Value {
    let us = |ms: f64| (ms * 1000.0 * 1000.0).round() / 1000.0;
    let mut events: Vec<serde_json::Value> = records
        .iter()
        .map(|r| {
            // Streams of GPU 0 are plain numbers; those of other GPUs are named for their GPU.
            let (op, device) = (&r.op, r.device);
            let tid = if device == 0 {
                serde_json::json!(op.stream)
            } else {
                serde_json::json!(format!("gpu{device}.{}", op.stream))
            };
            serde_json::json!({
                "name": op.name, "cat": op.kind, "ph": "X", "pid": 0, "tid": tid,
                "ts": us(op.start_ms), "dur": us(op.end_ms - op.start_ms),
                "args": { "bytes": op.bytes, "phase": op.label },
            })
        })
        .collect();
    let mut phases: Vec<(String, f64, f64)> = Vec::new();
    for op in records.iter().map(|r| &r.op) {
        match phases.last_mut() {
            Some(p) if p.0 == op.label => {
                p.1 = p.1.min(op.start_ms);
                p.2 = p.2.max(op.end_ms);
            }
            _ => phases.push((op.label.clone(), op.start_ms, op.end_ms)),
        }
    }
    for (name, start, end) in phases {
        events.push(serde_json::json!({ "name": name, "cat": "phase", "ph": "X", "pid": 0, "tid": "phases", "ts": us(start), "dur": us(end - start) }));
    }
    serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms", "otherData": { "source": "gpu-transfers built-in timeline (CUDA events)" } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chrome_trace_has_ops_and_phases() {
        let r = |phase: &str, stream, kind: &'static str, start_ms, end_ms| Record {
            device: 0,
            op: TimedOp { label: phase.into(), stream, kind, name: kind.into(), bytes: 8, start_ms, end_ms },
        };
        let t = chrome_trace(&[r("a", 0, "H2D", 0.0, 1.0), r("a", 1, "kernel", 0.5, 2.0), r("b", 0, "D2H", 3.0, 4.5)]);
        let ev = t["traceEvents"].as_array().unwrap();
        assert_eq!(ev.len(), 5);
        assert_eq!(ev[1]["ts"], 500.0);
        assert_eq!(ev[1]["dur"], 1500.0);
        let phases: Vec<_> = ev
            .iter()
            .filter(|e| e["cat"] == "phase")
            .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect();
        assert_eq!(phases, vec![("a", 0.0, 2000.0), ("b", 3000.0, 1500.0)]);
    }

    #[test]
    fn phases_nest_and_restore() {
        assert_eq!(current_phase(), "");
        {
            let _a = phase("outer");
            assert_eq!(current_phase(), "outer");
            {
                let _b = phase("inner");
                assert_eq!(current_phase(), "inner");
            }
            assert_eq!(current_phase(), "outer");
        }
        assert_eq!(current_phase(), "");
    }
}
