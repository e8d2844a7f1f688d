//! The pipeline lessons' rig: what overlap, vector_add_streams, double_buffering and overlap_sweep
//! call after their program, as wgpu's examples call their framework. It owns the GPU, the kernels,
//! the chunking and the repeats; checks that the pipeline's memory fits before any of it is allocated;
//! makes the pipeline's data and calibrates its kernel ([`PipelineRig::pipeline`]); and runs the
//! lessons' common story: the same chunks on one stream and on K, each checked against the CPU, held
//! against its bound, printed and written as JSON ([`PipelineRig::one_stream_against_many`]).

use serde::Serialize;

use cuda_scope::{DeviceInfo, Gpu};
use kernels::Kernels;

use crate::{
    args::{PipelineFlags, WorkArgs},
    bound::PipelineReport,
    pipeline::{self, Buffering, Pipeline, PipelineRun},
    report::{fmt_bytes, fmt_count, Output},
    timing::Repeats,
    verify::Check,
    work::{ChunkKernel, Steps},
    Chunking,
};

/// What a pipeline lesson runs, from its flags: checked before the GPU starts.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PipelineSetup {
    /// Named `plan` in JSON: the setting `cargo xtask compare` matches runs on.
    #[serde(rename = "plan")]
    pub chunking: Chunking,
    pub kernel: ChunkKernel,
    pub repeats: Repeats,
}

impl PipelineSetup {
    /// From a lesson's flags, with its defaults for the flags not given: `(elements, chunks, streams)`.
    pub fn from_flags(
        flags: &PipelineFlags,
        (elements, chunks, streams): (usize, usize, usize),
    ) -> anyhow::Result<Self> {
        let chunking = flags.pipeline.chunking(elements, chunks, streams)?;
        Ok(PipelineSetup { chunking, kernel: flags.work.kernel(), repeats: flags.run.repeats() })
    }
}

/// The GPU, the lessons' kernels and the setup of a pipeline lesson.
pub struct PipelineRig {
    pub gpu: Gpu,
    pub kernels: Kernels,
    pub setup: PipelineSetup,
}

/// What a pipeline lesson writes with `--json`: the device, the chunking and steps, each run against its
/// bound, the checks, and what the original program measured.
#[derive(Serialize)]
pub struct PipelineResults<'a, O: Serialize> {
    pub device: &'a DeviceInfo,
    /// Named `plan` in JSON: the setting `cargo xtask compare` matches runs on.
    #[serde(rename = "plan")]
    pub chunking: Chunking,
    pub steps: Steps,
    pub repeats: Repeats,
    pub report: PipelineReport,
    pub verification: Vec<Check>,
    pub original: O,
}

impl PipelineRig {
    /// Starts the GPU that `CUDA_DEVICE` names (its report printed), refuses at once a setup whose
    /// memory, with up to `buffers` device buffers, does not fit it, and loads the lessons' kernels.
    pub fn start(out: &Output, setup: PipelineSetup, buffers: usize) -> anyhow::Result<PipelineRig> {
        let gpu = crate::lesson::gpu(out, &Pipeline::footprint(setup.kernel, &setup.chunking, buffers))?;
        let kernels = Kernels::load(&gpu)?; // the lessons' kernels: cuModuleLoadData, cuModuleGetFunction
        Ok(PipelineRig { gpu, kernels, setup })
    }

    /// The pipeline's data in pinned memory, and its kernel, calibrated now where the flags left it to be
    /// (balanced against a chunk's copies); says what it runs.
    pub fn pipeline(&self, out: &Output) -> anyhow::Result<Pipeline<'_>> {
        let PipelineSetup { chunking, kernel, repeats } = self.setup;
        let steps = pipeline::steps(&self.gpu, &self.kernels, kernel, chunking.max_chunk(), repeats)?;
        if let (ChunkKernel::Balanced, Steps::InPlace(work)) = (kernel, steps) {
            out.repeat_with(&WorkArgs::flags_for(work).unwrap_or_default());
        }
        let per = if steps.htod_copies() > 1 { " per vector" } else { "" };
        out.say(format!(
            "{} elements{per} ({}) in {} chunks on {} streams; {}",
            fmt_count(chunking.elements),
            fmt_bytes(chunking.elements * 4),
            chunking.chunks,
            chunking.streams,
            steps.describe()
        ));
        Pipeline::new(&self.gpu, &self.kernels, steps, chunking.elements, repeats)
    }

    /// The chunking's chunks on one stream (every operation waits for the one before), then dealt to its K
    /// streams, each checked against the CPU and held against its bound ([`PipelineRig::against_bounds`]),
    /// with `original`, what the lesson's original program measured.
    pub fn one_stream_against_many(&self, out: &Output, original: impl Serialize) -> anyhow::Result<()> {
        let chunking = self.setup.chunking;
        let mut p = self.pipeline(out)?;
        let one = Chunking::new(chunking.elements, chunking.chunks, 1)?;
        let mut serialized = p.time("serialized", &one, Buffering::per_stream(1))?;
        let mut overlapped = p.time("overlapped", &chunking, Buffering::per_stream(chunking.streams))?;
        let check = p.check(&chunking);
        out.say(check.summary());
        out.say(format!(
            "\n{} streams are {:.2}x faster than one",
            chunking.streams,
            serialized.time.median_ms / overlapped.time.median_ms
        ));
        (serialized.name, overlapped.name) = ("one stream".into(), format!("{} streams", chunking.streams));
        self.against_bounds(out, p, vec![serialized, overlapped], check, original)
    }

    /// Holds each of `runs` of the setup's chunking against its bound, measured on `p`'s data, and prints
    /// the table, what limits each run and what its parts cost; names each figure for `cargo xtask
    /// compare`; and writes the JSON ([`PipelineResults`]), with `check`, the pipeline's output held
    /// against the CPU's, and `original`, what the lesson's original program measured.
    pub fn against_bounds(
        &self,
        out: &Output,
        mut p: Pipeline<'_>,
        runs: Vec<PipelineRun>,
        check: Check,
        original: impl Serialize,
    ) -> anyhow::Result<()> {
        let chunking = self.setup.chunking;
        let report = PipelineReport::measure(&mut p, &chunking, &runs)?;
        out.say(format!("median of up to {} runs after {} warm-up", p.repeats.repeats, p.repeats.warmup));
        out.table(&report.table());
        report.notes().iter().for_each(|l| out.say(l));
        out.pipeline(&report);
        let (steps, repeats, verification) = (p.steps, p.repeats, vec![check]);
        out.finish(&PipelineResults {
            device: &self.gpu.info,
            chunking,
            steps,
            repeats,
            report,
            verification,
            original,
        })
    }
}
