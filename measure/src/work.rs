//! What each chunk of a pipeline does between its H2D copies and its D2H copy ([`Steps`]): which kernel
//! runs on it ([`Work`], in place, or `c = a + b`), and how its result is checked against the CPU.

use cuda_scope::{Dev, ScopeStream};
use kernels::{cpu, Kernels};

use crate::{verify, Chunking};

/// The kernel run on each chunk in place.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub enum Work {
    /// A kernel of the user's own, `NAME(float* data, unsigned long long n)`, adopted with
    /// [`Kernels::adopt_user`]: it has no CPU twin, so its results are not checked.
    User,
    /// [`Kernels::process`] with this many iterations: checked bit for bit.
    Process(u32),
    /// [`Kernels::process_sincos`], the sin * cos of overlap_pattern.cu's kernel with this many rounds: the
    /// CPU's sin/cos differ from CUDA's in the last bits, so it is checked within a tolerance, on a sample
    /// (the reference is slow).
    ProcessSincos(u32),
    /// overlap_pattern.cu's own kernel ([`Kernels::overlap_pattern_process`]): its fixed
    /// [`kernels::OVERLAP_PATTERN_ROUNDS`] rounds of sin * cos, checked as [`Work::ProcessSincos`] is.
    OverlapPattern,
}

impl Work {
    /// This work's launch on `data`, in place.
    pub fn run<'s>(self, kernels: &Kernels, on: ScopeStream<'s, '_>, data: Dev<'s, f32>) -> cuda_scope::Result<()> {
        match self {
            Work::Process(i) => kernels.process(on, data, i),
            Work::ProcessSincos(i) => kernels.process_sincos(on, data, i),
            Work::OverlapPattern => kernels.overlap_pattern_process(on, data),
            Work::User => kernels.user(on, data),
        }
    }

    /// What the kernel makes of `x`, on the CPU (NaN for a kernel of the user's).
    pub fn cpu(self, x: f32) -> f32 {
        match self {
            Work::Process(i) => cpu::process(x, i),
            Work::ProcessSincos(i) => cpu::process_sincos(x, i),
            Work::OverlapPattern => cpu::overlap_pattern_process(x),
            Work::User => f32::NAN,
        }
    }

    /// Checks `got`, the result of `chunking`'s chunks, against this work applied to [`verify::input`] on
    /// the CPU: every chunk's first and last elements and 62 between, bit for bit for
    /// [`Work::Process`]; within 1e-4 for the sin/cos kernel, whose math library differs from the
    /// CPU's in the last bits.
    pub fn check(self, got: &[f32], chunking: &Chunking) -> verify::Check {
        let expected = |i| self.cpu(verify::input(i));
        let tolerance = match self {
            Work::Process(_) => 0.0,
            Work::ProcessSincos(_) | Work::OverlapPattern => 1e-4,
            Work::User => return verify::Check::unchecked(got.len(), "a kernel of your own has no CPU twin"),
        };
        verify::chunks(got, chunking, 62, tolerance, expected)
    }

    /// The work in words.
    pub fn describe(self) -> String {
        match self {
            Work::Process(i) => format!("process: {i} rounds of x = x*a + b per element"),
            Work::ProcessSincos(i) => format!("process_sincos: {i} rounds of sin(x)*cos(x) + 1 per element"),
            Work::OverlapPattern => format!(
                "overlap_pattern.cu's kernel: {} rounds of sin(x)*cos(x) + 1 per element",
                kernels::OVERLAP_PATTERN_ROUNDS
            ),
            Work::User => "a kernel of your own, in place".into(),
        }
    }
}

/// The kernel each chunk runs, as a lesson's flags choose it, before the GPU starts.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub enum ChunkKernel {
    /// [`Work::Process`] with its rounds calibrated so that a chunk takes as long to compute as its
    /// copies take both ways at once: a kernel that gives overlap something to hide on every engine.
    Balanced,
    /// This work, as given.
    Given(Work),
    /// `c = a + b` on two copied in inputs ([`Steps::VectorAdd`]).
    VectorAdd,
}

/// What each chunk of a pipeline does: its H2D copies, its kernel, its D2H copy.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub enum Steps {
    /// One H2D copy, `work` in place, one D2H copy.
    InPlace(Work),
    /// Two H2D copies (a and b), `c = a + b`, one D2H copy (c).
    VectorAdd,
}

impl Steps {
    /// H2D copies per chunk: the input vectors, each of the chunking's length, one after another in the input.
    pub fn htod_copies(self) -> usize {
        match self {
            Steps::InPlace(_) => 1,
            Steps::VectorAdd => 2,
        }
    }

    /// Device elements a chunk of `len` takes: the chunk, in place, or a, b and c.
    pub fn device_len(self, len: usize) -> usize {
        match self {
            Steps::InPlace(_) => len,
            Steps::VectorAdd => 3 * len,
        }
    }

    /// The chunk's kernel in `d`, a buffer of [`Steps::device_len`] of `len`, whose inputs its H2D copies
    /// filled: `work` on its first `len` elements, or `c = a + b` with a, b and c one after another.
    pub fn run<'s>(
        self,
        kernels: &Kernels,
        on: ScopeStream<'s, '_>,
        d: Dev<'s, f32>,
        len: usize,
    ) -> cuda_scope::Result<()> {
        match self {
            Steps::InPlace(work) => work.run(kernels, on, d.slice(0..len)),
            Steps::VectorAdd => {
                let m = d.len() / 3;
                kernels.vector_add(on, d.slice(0..len), d.slice(m..m + len), d.slice(2 * m..2 * m + len))
            }
        }
    }

    /// Where the chunk's `k`th H2D copy lands in its buffer `d` ([`Steps::run`]'s layout), and where
    /// its D2H copy reads from.
    pub fn input<'s>(self, d: Dev<'s, f32>, k: usize, len: usize) -> Dev<'s, f32> {
        let m = d.len() / self.device_len(1);
        d.slice(k * m..k * m + len)
    }

    pub fn output<'s>(self, d: Dev<'s, f32>, len: usize) -> Dev<'s, f32> {
        match self {
            Steps::InPlace(_) => d.slice(0..len),
            Steps::VectorAdd => {
                let m = d.len() / 3;
                d.slice(2 * m..2 * m + len)
            }
        }
    }

    /// What the CPU makes of element `i` of `n`, from [`verify::input`]: the work on `input(i)`, or
    /// `input(i) + input(n + i)` (b follows a in the input).
    pub fn cpu(self, i: usize, n: usize) -> f32 {
        match self {
            Steps::InPlace(work) => work.cpu(verify::input(i)),
            Steps::VectorAdd => verify::input(i) + verify::input(n + i),
        }
    }

    /// Checks `got`, the output of `chunking`'s chunks, against the CPU ([`Work::check`]; `c = a + b` bit
    /// for bit, at the same places of each chunk).
    pub fn check(self, got: &[f32], chunking: &Chunking) -> verify::Check {
        match self {
            Steps::InPlace(work) => work.check(got, chunking),
            Steps::VectorAdd => verify::chunks(got, chunking, 62, 0.0, |i| self.cpu(i, chunking.elements)),
        }
    }

    /// The steps in words.
    pub fn describe(self) -> String {
        match self {
            Steps::InPlace(work) => work.describe(),
            Steps::VectorAdd => "c = a + b: two H2D copies, one addition and one D2H copy per element".into(),
        }
    }
}
