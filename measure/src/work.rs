//! The per-chunk work of the pipeline lessons: which kernel runs on each chunk in place, and how its
//! result is checked against the CPU.

use common::{Dev, ScopeStream};
use kernels::{cpu, Kernels};

use crate::{verify, ChunkPlan};

/// The per-chunk work of the pipeline lessons.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub enum Work {
    /// A kernel of the user's own, `NAME(float* data, unsigned long long n)`, adopted with
    /// [`Kernels::adopt_user`]: it has no CPU twin, so its results are not checked.
    User,
    /// [`Kernels::process`] with this many iterations: checked bit for bit.
    Process(u32),
    /// overlap_pattern.cu's sin * cos kernel with this many rounds: the CPU's sin/cos differ from CUDA's in
    /// the last bits, so it is checked within a tolerance, on a sample (the reference is slow).
    SinCos(u32),
}

impl Work {
    /// This work's launch on `data`, in place.
    pub fn run<'s>(self, kernels: &Kernels, on: ScopeStream<'s, '_>, data: Dev<'s, f32>) -> anyhow::Result<()> {
        match self {
            Work::Process(i) => kernels.process(on, data, i),
            Work::SinCos(i) => kernels.process_sincos(on, data, i),
            Work::User => kernels.user(on, data),
        }
    }

    /// What the kernel makes of `x`, on the CPU (NaN for a kernel of the user's).
    pub fn cpu(self, x: f32) -> f32 {
        match self {
            Work::Process(i) => cpu::process(x, i),
            Work::SinCos(i) => cpu::process_sincos(x, i),
            Work::User => f32::NAN,
        }
    }

    /// Checks `got`, the result of `plan`'s chunks, against this work applied to [`verify::input`] on
    /// the CPU: every chunk's first and last elements and 62 between, bit for bit for
    /// [`Work::Process`]; within 1e-4 for the sin/cos kernel, whose math library differs from the
    /// CPU's in the last bits.
    pub fn check(self, got: &[f32], plan: &ChunkPlan) -> verify::Check {
        let expected = |i| self.cpu(verify::input(i));
        let tolerance = match self {
            Work::Process(_) => 0.0,
            Work::SinCos(_) => 1e-4,
            Work::User => return verify::Check::unchecked(got.len(), "a kernel of your own has no CPU twin"),
        };
        verify::chunks(got, plan, 62, tolerance, expected)
    }

    /// The work in words.
    pub fn describe(self) -> String {
        match self {
            Work::Process(i) => format!("process: {i} rounds of x = x*a + b per element"),
            Work::SinCos(i) => format!("overlap_pattern.cu's kernel: {i} rounds of sin(x)*cos(x) + 1 per element"),
            Work::User => "a kernel of your own, in place".into(),
        }
    }
}
