//! The kernels of `kernels/*.cu`, compiled to PTX by the build script and embedded here, with a typed,
//! safe launcher for each and its CPU twin in [`cpu`] for checking results.
//!
//! A launcher returns a [`Launch`]: the kernel, its grid and arguments, and which device ranges it reads
//! and writes, so that [`crate::Scope::launch`] can order it against the copies on other streams.

use std::ffi::c_void;

use anyhow::Context as _;
use cust::{module::Module, sys};

use crate::scope::{Dev, DevAccess};

const PIPELINE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/pipeline.ptx"));
const VECTOR_ADD_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/vector_add.ptx"));
const ZERO_COPY_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/zero_copy.ptx"));

/// Threads per block of every launcher.
pub const BLOCK: u32 = 256;

/// The loaded kernels. Function handles stay valid while the modules live (they are dropped together).
pub struct Kernels {
    process: sys::CUfunction,
    process_sincos: sys::CUfunction,
    heavy_sqrt: sys::CUfunction,
    vector_add: sys::CUfunction,
    scale: sys::CUfunction,
    accumulate: sys::CUfunction,
    fault: sys::CUfunction,
    sms: u32,
    _modules: Vec<Module>,
}

/// A kernel launch, ready for [`crate::Scope::launch`].
pub struct Launch<'scope> {
    pub(crate) name: &'static str,
    func: sys::CUfunction,
    grid: u32,
    params: Vec<Param>,
    pub(crate) accesses: Vec<DevAccess>,
    pub(crate) invalid: Option<String>,
    _scope: std::marker::PhantomData<Dev<'scope, u8>>,
}

enum Param {
    U64(u64),
    U32(u32),
    F32(f32),
}

impl Kernels {
    pub(crate) fn load(sms: u32) -> anyhow::Result<Kernels> {
        let module = |name: &str, ptx: &str| Module::from_ptx(ptx, &[]).with_context(|| format!("loading {name}.ptx"));
        let modules = vec![
            module("pipeline", PIPELINE_PTX)?,
            module("vector_add", VECTOR_ADD_PTX)?,
            module("zero_copy", ZERO_COPY_PTX)?,
        ];
        let f = |m: usize, name: &str| -> anyhow::Result<sys::CUfunction> {
            Ok(modules[m].get_function(name).with_context(|| format!("finding kernel {name}"))?.to_raw())
        };
        Ok(Kernels {
            process: f(0, "process")?,
            process_sincos: f(0, "process_sincos")?,
            heavy_sqrt: f(0, "heavy_sqrt")?,
            vector_add: f(1, "vector_add")?,
            scale: f(2, "scale")?,
            accumulate: f(2, "accumulate")?,
            fault: f(0, "fault")?,
            sms,
            _modules: modules,
        })
    }

    /// Grid-stride launches: one thread per element, at most 64 blocks per SM.
    fn grid(&self, n: usize) -> u32 {
        n.div_ceil(BLOCK as usize).clamp(1, 64 * self.sms as usize) as u32
    }

    /// `process<<<..>>>(data, n, iters)`: `iters` rounds of `x = x * A + B` in place ([`cpu::process`]).
    pub fn process<'s>(&self, data: Dev<'s, f32>, iters: u32) -> Launch<'s> {
        let grid = self.grid(data.len());
        launch(
            "process",
            self.process,
            grid,
            vec![data.access(true)],
            vec![Param::U64(data.ptr()), n(data.len()), Param::U32(iters)],
        )
    }

    /// The seed's `process` kernel of overlap_pattern.cu: `iters` rounds of `sinf(x) * cosf(x) + 1`, one thread per element.
    pub fn process_sincos<'s>(&self, data: Dev<'s, f32>, iters: u32) -> Launch<'s> {
        let grid = data.len().div_ceil(BLOCK as usize);
        let mut l = launch(
            "process_sincos",
            self.process_sincos,
            0,
            vec![data.access(true)],
            vec![Param::U64(data.ptr()), n(data.len()), Param::U32(iters)],
        );
        match u32::try_from(grid) {
            Ok(g) => l.grid = g.max(1),
            Err(_) => l.invalid = Some(format!("{} elements need more blocks than a grid holds", data.len())),
        }
        l
    }

    /// The seed's `processKernel` of async_memcpy.cu: `iters` rounds of `x = sqrt(x * x + 1)`, in place.
    pub fn heavy_sqrt<'s>(&self, data: Dev<'s, f32>, iters: u32) -> Launch<'s> {
        let grid = self.grid(data.len());
        launch(
            "heavy_sqrt",
            self.heavy_sqrt,
            grid,
            vec![data.access(true)],
            vec![Param::U64(data.ptr()), n(data.len()), Param::U32(iters)],
        )
    }

    /// `c = a + b`.
    pub fn vector_add<'s>(&self, a: Dev<'s, f32>, b: Dev<'s, f32>, c: Dev<'s, f32>) -> Launch<'s> {
        let accesses = vec![a.access(false), b.access(false), c.access(true)];
        let params = vec![Param::U64(a.ptr()), Param::U64(b.ptr()), Param::U64(c.ptr()), n(c.len())];
        let mut l = launch("vector_add", self.vector_add, self.grid(c.len()), accesses, params);
        if a.len() != c.len() || b.len() != c.len() {
            l.invalid = Some(format!("lengths differ: a {}, b {}, c {}", a.len(), b.len(), c.len()));
        }
        l
    }

    /// `out = input * a` (the seed's zeroCopyKernel).
    pub fn scale<'s>(&self, input: Dev<'s, f32>, out: Dev<'s, f32>, a: f32) -> Launch<'s> {
        let accesses = vec![input.access(false), out.access(true)];
        let params = vec![Param::U64(input.ptr()), Param::U64(out.ptr()), n(out.len()), Param::F32(a)];
        let mut l = launch("scale", self.scale, self.grid(out.len()), accesses, params);
        if input.len() != out.len() {
            l.invalid = Some(format!("lengths differ: input {}, out {}", input.len(), out.len()));
        }
        l
    }

    /// For tests of error handling: a kernel that writes outside any allocation. The GPU's memory
    /// protection stops it (CUDA_ERROR_ILLEGAL_ADDRESS) and the context stays broken for the process.
    #[doc(hidden)]
    pub fn fault_for_tests<'s>(&self, data: Dev<'s, f32>) -> Launch<'s> {
        launch("fault", self.fault, 1, vec![data.access(true)], vec![Param::U64(data.ptr())])
    }

    /// `out += input`: a second pass over the same input.
    pub fn accumulate<'s>(&self, input: Dev<'s, f32>, out: Dev<'s, f32>) -> Launch<'s> {
        let accesses = vec![input.access(false), out.access(true)];
        let params = vec![Param::U64(input.ptr()), Param::U64(out.ptr()), n(out.len())];
        let mut l = launch("accumulate", self.accumulate, self.grid(out.len()), accesses, params);
        if input.len() != out.len() {
            l.invalid = Some(format!("lengths differ: input {}, out {}", input.len(), out.len()));
        }
        l
    }
}

/// The per-chunk work of the pipeline lessons.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub enum Work {
    /// [`Kernels::process`] with this many iterations: checked bit for bit.
    Process(u32),
    /// The seed's sin * cos kernel with this many rounds: the CPU's sin/cos differ from CUDA's in the
    /// last bits, so it is checked within a tolerance, on a sample (the reference is slow).
    SinCos(u32),
}

impl Work {
    pub fn cpu(self, x: f32) -> f32 {
        match self {
            Work::Process(i) => cpu::process(x, i),
            Work::SinCos(i) => cpu::process_sincos(x, i),
        }
    }

    /// Checks `got` against this work applied to [`crate::verify::input`].
    pub fn check(self, got: &[f32]) -> crate::verify::Check {
        let expected = |i| self.cpu(crate::verify::input(i));
        match self {
            Work::Process(_) => crate::verify::exact(got, expected),
            Work::SinCos(_) => crate::verify::within(got, 16, 1e-4, expected),
        }
    }

    pub fn describe(self) -> String {
        match self {
            Work::Process(i) => format!("process: {i} rounds of x = x*a + b per element"),
            Work::SinCos(i) => {
                format!("the seed's kernel: {i} rounds of sin(x)*cos(x) + 1 per element")
            }
        }
    }
}

impl Kernels {
    /// Launches `work` on `data` in place.
    pub fn work<'s>(&self, work: Work, data: Dev<'s, f32>) -> Launch<'s> {
        match work {
            Work::Process(i) => self.process(data, i),
            Work::SinCos(i) => self.process_sincos(data, i),
        }
    }
}

fn n(len: usize) -> Param {
    Param::U64(len as u64)
}

fn launch<'s>(
    name: &'static str,
    func: sys::CUfunction,
    grid: u32,
    accesses: Vec<DevAccess>,
    params: Vec<Param>,
) -> Launch<'s> {
    Launch { name, func, grid, params, accesses, invalid: None, _scope: std::marker::PhantomData }
}

impl Launch<'_> {
    pub(crate) fn enqueue(&mut self, stream: sys::CUstream) -> sys::CUresult {
        let mut args: Vec<*mut c_void> = self
            .params
            .iter_mut()
            .map(|p| match p {
                Param::U64(v) => v as *mut u64 as *mut c_void,
                Param::U32(v) => v as *mut u32 as *mut c_void,
                Param::F32(v) => v as *mut f32 as *mut c_void,
            })
            .collect();
        // SAFETY: the launchers above build `params` to match each kernel's signature in kernels/*.cu
        // (pointer = u64, n = unsigned long long, iters = unsigned int, a = float); every pointer is a
        // live device range of the length passed as n, lent to the scope that orders this launch.
        unsafe {
            sys::cuLaunchKernel(
                self.func,
                self.grid,
                1,
                1,
                BLOCK,
                1,
                1,
                0,
                stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    }
}

/// The CPU twins of the kernels, operation for operation, so results can be compared bit for bit.
pub mod cpu {
    pub const PROCESS_A: f32 = 1.0 - 1.0 / 16384.0;
    pub const PROCESS_B: f32 = 1.0 / 16384.0;

    pub fn process(mut x: f32, iters: u32) -> f32 {
        for _ in 0..iters {
            x = x * PROCESS_A + PROCESS_B;
        }
        x
    }

    pub fn process_sincos(mut x: f32, iters: u32) -> f32 {
        for _ in 0..iters {
            x = x.sin() * x.cos() + 1.0;
        }
        x
    }

    pub fn heavy_sqrt(mut x: f32, iters: u32) -> f32 {
        for _ in 0..iters {
            x = (x * x + 1.0).sqrt();
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::cpu;

    #[test]
    fn the_ptx_targets_the_driver_we_ship_for() {
        for ptx in [super::PIPELINE_PTX, super::VECTOR_ADD_PTX, super::ZERO_COPY_PTX] {
            assert!(ptx.contains(".target sm_75"), "PTX must be built for compute_75");
            assert!(ptx.contains(".version 9.0"), "nvcc 13.0 (PTX ISA 9.0) matches the 580 driver");
        }
        assert!(super::PIPELINE_PTX.contains(".entry process("));
    }

    #[test]
    fn process_contracts_towards_one_and_keeps_the_input() {
        let (a, b) = (cpu::process(0.25, 1000), cpu::process(0.75, 1000));
        assert!(a < b && b < 1.0 && a > 0.25);
        assert_eq!(cpu::process(0.5, 0), 0.5);
    }

    #[test]
    fn heavy_sqrt_is_sqrt_of_x2_plus_n() {
        // sqrt(x^2 + n) in exact arithmetic; float rounding stays tiny.
        let got = cpu::heavy_sqrt(1.0, 100);
        assert!((got - 101f32.sqrt()).abs() < 1e-4, "{got}");
    }
}
