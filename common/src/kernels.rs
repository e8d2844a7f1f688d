//! The kernels of `kernels/*.cu`, compiled to PTX by the build script and embedded here, with a typed,
//! safe launcher for each and its CPU twin in [`cpu`] for checking results.
//!
//! A launcher returns a [`Launch`]: the kernel, its grid and arguments, and which device ranges it reads
//! and writes, so that [`crate::Scope::launch`] can order it against the copies on other streams. Adding
//! a kernel: its `.cu`, a line in [`KERNELS`] with its parameters as the `.cu` declares them (a test
//! holds them against the PTX), one launcher below, and its CPU twin in [`cpu`].

use std::{ffi::CString, sync::Arc};

use anyhow::Context as _;
use cust::sys;

use crate::{
    context::Context,
    ffi::{self, check},
    scope::{Dev, DevAccess, Launch, Param},
};

const PIPELINE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/pipeline.ptx"));
const VECTOR_ADD_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/vector_add.ptx"));
const ZERO_COPY_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/zero_copy.ptx"));

/// Every module, by file.
const MODULES: [(&str, &str); 3] =
    [("pipeline", PIPELINE_PTX), ("vector_add", VECTOR_ADD_PTX), ("zero_copy", ZERO_COPY_PTX)];

/// A kernel parameter's type as the `.cu` declares it: a pointer, `unsigned long long`, `unsigned int`, `float`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Ptr,
    U64,
    U32,
    I32,
    F32,
}

/// One kernel: its module (index into [`MODULES`]), its name, its parameters.
pub(crate) struct Kernel {
    pub module: usize,
    pub name: &'static str,
    pub params: &'static [Ty],
}

/// Every kernel the launchers below use, in one table.
pub(crate) const KERNELS: [Kernel; 9] = [
    Kernel { module: 0, name: "process", params: &[Ty::Ptr, Ty::U64, Ty::U32] },
    Kernel { module: 0, name: "process_sincos", params: &[Ty::Ptr, Ty::U64, Ty::U32] },
    Kernel { module: 0, name: "heavy_sqrt", params: &[Ty::Ptr, Ty::U64, Ty::U32] },
    Kernel { module: 1, name: "vector_add", params: &[Ty::Ptr, Ty::Ptr, Ty::Ptr, Ty::U64] },
    Kernel { module: 2, name: "scale", params: &[Ty::Ptr, Ty::Ptr, Ty::U64, Ty::F32] },
    Kernel { module: 2, name: "accumulate", params: &[Ty::Ptr, Ty::Ptr, Ty::U64] },
    Kernel { module: 0, name: "fault", params: &[Ty::Ptr] },
    Kernel { module: 0, name: "overlap_pattern_process", params: &[Ty::Ptr, Ty::I32] },
    Kernel { module: 2, name: "chase", params: &[Ty::Ptr, Ty::U32, Ty::U32, Ty::U32, Ty::Ptr] },
];
const PROCESS: usize = 0;
const PROCESS_SINCOS: usize = 1;
const HEAVY_SQRT: usize = 2;
const VECTOR_ADD: usize = 3;
const SCALE: usize = 4;
const ACCUMULATE: usize = 5;
const FAULT: usize = 6;
const OVERLAP_PATTERN_PROCESS: usize = 7;
const CHASE: usize = 8;

/// Threads per block of every launcher.
pub const BLOCK: u32 = 256;

/// The loaded kernels of one GPU. A [`Launch`] borrows them, so they outlive every launch.
pub struct Kernels {
    functions: Vec<sys::CUfunction>,
    modules: Vec<sys::CUmodule>,
    /// Kernels of the user's own ([`Kernels::load_user`]): module, function, name.
    user: Vec<(sys::CUmodule, sys::CUfunction, &'static str)>,
    sms: u32,
    ctx: Arc<Context>,
}

// SAFETY: module and function handles may be used from any thread; loading and unloading make their
// context current, and launches go through a scope, which makes it current.
unsafe impl Send for Kernels {}

impl Kernels {
    pub(crate) fn load(ctx: &Arc<Context>, sms: u32) -> anyhow::Result<Kernels> {
        ctx.make_current()?;
        let mut k = Kernels { functions: Vec::new(), modules: Vec::new(), user: Vec::new(), sms, ctx: ctx.clone() };
        for (name, ptx) in MODULES {
            k.modules.push(load_module(ptx, &format!("{name}.ptx"))?);
        }
        for kernel in &KERNELS {
            k.functions.push(function(k.modules[kernel.module], kernel.name)?);
        }
        Ok(k)
    }

    /// Grid-stride launches: one thread per element, at most 64 blocks per SM.
    fn grid(&self, n: usize) -> u32 {
        n.div_ceil(BLOCK as usize).clamp(1, 64 * self.sms as usize) as u32
    }

    /// A launch of kernel `k`, refused if its arguments do not match the kernel's parameters.
    fn launch<'s>(&'s self, k: usize, grid: u32, params: Vec<Param>, accesses: Vec<DevAccess>) -> Launch<'s> {
        self.launch_with(k, (grid, BLOCK), params, accesses)
    }

    /// [`Kernels::launch`] with a block size of its own.
    fn launch_with<'s>(
        &'s self,
        k: usize,
        (grid, block): (u32, u32),
        params: Vec<Param>,
        accesses: Vec<DevAccess>,
    ) -> Launch<'s> {
        let kernel = &KERNELS[k];
        let types: Vec<Ty> = params
            .iter()
            .map(|p| match p {
                Param::Ptr(_) => Ty::Ptr,
                Param::U64(_) => Ty::U64,
                Param::U32(_) => Ty::U32,
                Param::I32(_) => Ty::I32,
                Param::F32(_) => Ty::F32,
            })
            .collect();
        let launch = Launch::new(kernel.name, self.functions[k], self.ctx.raw(), (grid, block), params, accesses);
        if types != kernel.params {
            return launch.refuse(format!("arguments {types:?} do not match its parameters {:?}", kernel.params));
        }
        launch
    }

    /// `process<<<..>>>(data, n, iters)`: `iters` rounds of `x = x * A + B` in place ([`cpu::process`]).
    pub fn process<'s>(&'s self, data: Dev<'s, f32>, iters: u32) -> Launch<'s> {
        let params = vec![Param::Ptr(data.ptr()), n(data.len()), Param::U32(iters)];
        self.launch(PROCESS, self.grid(data.len()), params, vec![data.access(true)])
    }

    /// `iters` rounds of `sinf(x) * cosf(x) + 1`, one thread per element, `(n + 255) / 256` blocks of 256
    /// as overlap_pattern.cu launches its kernel. For 500 rounds, that program's kernel itself (which
    /// takes an `int` count of elements).
    pub fn process_sincos<'s>(&'s self, data: Dev<'s, f32>, iters: u32) -> Launch<'s> {
        let blocks = data.len().div_ceil(BLOCK as usize).max(1);
        if iters == 500 {
            let params = vec![Param::Ptr(data.ptr()), Param::I32(data.len().min(i32::MAX as usize) as i32)];
            let launch = self.launch(
                OVERLAP_PATTERN_PROCESS,
                blocks.min(u32::MAX as usize) as u32,
                params,
                vec![data.access(true)],
            );
            if i32::try_from(data.len()).is_err() {
                return launch
                    .refuse(format!("overlap_pattern.cu's kernel takes an int count, and {} is more", data.len()));
            }
            return launch;
        }
        let params = vec![Param::Ptr(data.ptr()), n(data.len()), Param::U32(iters)];
        match u32::try_from(blocks) {
            Ok(grid) => self.launch(PROCESS_SINCOS, grid, params, vec![data.access(true)]),
            Err(_) => self
                .launch(PROCESS_SINCOS, 1, params, vec![data.access(true)])
                .refuse(format!("{} elements need more blocks than a grid holds", data.len())),
        }
    }

    /// The kernel of async_memcpy.cu: `iters` rounds of `x = sqrt(x * x + 1)`, in place.
    pub fn heavy_sqrt<'s>(&'s self, data: Dev<'s, f32>, iters: u32) -> Launch<'s> {
        let params = vec![Param::Ptr(data.ptr()), n(data.len()), Param::U32(iters)];
        self.launch(HEAVY_SQRT, self.grid(data.len()), params, vec![data.access(true)])
    }

    /// `c = a + b`.
    pub fn vector_add<'s>(&'s self, a: Dev<'s, f32>, b: Dev<'s, f32>, c: Dev<'s, f32>) -> Launch<'s> {
        let accesses = vec![a.access(false), b.access(false), c.access(true)];
        let params = vec![Param::Ptr(a.ptr()), Param::Ptr(b.ptr()), Param::Ptr(c.ptr()), n(c.len())];
        let launch = self.launch(VECTOR_ADD, self.grid(c.len()), params, accesses);
        if a.len() != c.len() || b.len() != c.len() {
            return launch.refuse(format!("lengths differ: a {}, b {}, c {}", a.len(), b.len(), c.len()));
        }
        launch
    }

    /// `out = input * a` (zero-copy's kernel).
    pub fn scale<'s>(&'s self, input: Dev<'s, f32>, out: Dev<'s, f32>, a: f32) -> Launch<'s> {
        let accesses = vec![input.access(false), out.access(true)];
        let params = vec![Param::Ptr(input.ptr()), Param::Ptr(out.ptr()), n(out.len()), Param::F32(a)];
        let launch = self.launch(SCALE, self.grid(out.len()), params, accesses);
        if input.len() != out.len() {
            return launch.refuse(format!("lengths differ: input {}, out {}", input.len(), out.len()));
        }
        launch
    }

    /// `out += input`: a second pass over the same input.
    pub fn accumulate<'s>(&'s self, input: Dev<'s, f32>, out: Dev<'s, f32>) -> Launch<'s> {
        let accesses = vec![input.access(false), out.access(true)];
        let params = vec![Param::Ptr(input.ptr()), Param::Ptr(out.ptr()), n(out.len())];
        let launch = self.launch(ACCUMULATE, self.grid(out.len()), params, accesses);
        if input.len() != out.len() {
            return launch.refuse(format!("lengths differ: input {}, out {}", input.len(), out.len()));
        }
        launch
    }

    /// `chase<<<1, 1>>>(next, n, start, accesses, out)`: one thread follows `accesses` links of the chain
    /// in `next` (device or mapped host memory; see [`cpu::chain`]) from link `start`, and writes where
    /// it ends to `out[0]` ([`cpu::chase`]). The kernel bounds every link it reads by the chain's length,
    /// so whatever `next` holds, it reads only `next`.
    pub fn chase<'s>(&'s self, next: Dev<'s, u32>, start: u32, accesses: u32, out: Dev<'s, u32>) -> Launch<'s> {
        let len = u32::try_from(next.len()).unwrap_or(u32::MAX);
        let params = vec![
            Param::Ptr(next.ptr()),
            Param::U32(len),
            Param::U32(start),
            Param::U32(accesses),
            Param::Ptr(out.ptr()),
        ];
        let launch = self.launch_with(CHASE, (1, 1), params, vec![next.access(false), out.access(true)]);
        match (next.len(), out.len()) {
            (0, _) | (_, 0) => launch.refuse("an empty chain or output".into()),
            (n, _) if u32::try_from(n).is_err() => launch.refuse(format!("{n} links do not fit 32-bit indices")),
            _ => launch,
        }
    }

    /// For tests of error handling only: a kernel that writes 1 TiB below `data`.
    ///
    /// # Safety
    /// The write goes outside every allocation the scope knows of. Where nothing is mapped there, the
    /// GPU stops it (`CUDA_ERROR_ILLEGAL_ADDRESS`) and the context is dead for the rest of the process;
    /// where something is, it is corrupted. Call it only in a test process that expects the fault.
    #[doc(hidden)]
    pub unsafe fn fault_for_tests<'s>(&'s self, data: Dev<'s, f32>) -> Launch<'s> {
        self.launch(FAULT, 1, vec![Param::Ptr(data.ptr())], vec![data.access(true)])
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        for &m in self.modules.iter().chain(self.user.iter().map(|u| &u.0)) {
            // SAFETY: loaded once, unloaded once, in their own context; every Launch borrowed self and is gone.
            self.ctx.with_current(|| unsafe { ffi::cuModuleUnload(m) });
        }
    }
}

/// The per-chunk work of the pipeline lessons.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub enum Work {
    /// A kernel of the user's own, `NAME(float* data, unsigned long long n)`, the index
    /// [`Kernels::load_user`] gave it: it has no CPU twin, so its results are not checked.
    User(u32),
    /// [`Kernels::process`] with this many iterations: checked bit for bit.
    Process(u32),
    /// overlap_pattern.cu's sin * cos kernel with this many rounds: the CPU's sin/cos differ from CUDA's in the
    /// last bits, so it is checked within a tolerance, on a sample (the reference is slow).
    SinCos(u32),
}

impl Work {
    pub fn cpu(self, x: f32) -> f32 {
        match self {
            Work::Process(i) => cpu::process(x, i),
            Work::SinCos(i) => cpu::process_sincos(x, i),
            Work::User(_) => f32::NAN,
        }
    }

    /// Checks `got`, the result of `plan`'s chunks, against this work applied to
    /// [`crate::verify::input`] on the CPU: every chunk's first and last elements and 62 between, bit
    /// for bit for [`Work::Process`]; within 1e-4 for the sin/cos kernel, whose math library differs
    /// from the CPU's in the last bits.
    pub fn check(self, got: &[f32], plan: &crate::ChunkPlan) -> crate::verify::Check {
        let expected = |i| self.cpu(crate::verify::input(i));
        let tolerance = match self {
            Work::Process(_) => 0.0,
            Work::SinCos(_) => 1e-4,
            Work::User(_) => return crate::verify::Check::unchecked(got.len(), "a kernel of your own has no CPU twin"),
        };
        crate::verify::chunks(got, plan, 62, tolerance, expected)
    }

    pub fn describe(self) -> String {
        match self {
            Work::Process(i) => format!("process: {i} rounds of x = x*a + b per element"),
            Work::SinCos(i) => {
                format!("overlap_pattern.cu's kernel: {i} rounds of sin(x)*cos(x) + 1 per element")
            }
            Work::User(_) => "a kernel of your own, in place".into(),
        }
    }
}

impl Kernels {
    /// Launches `work` on `data` in place.
    pub fn work<'s>(&'s self, work: Work, data: Dev<'s, f32>) -> Launch<'s> {
        match work {
            Work::Process(i) => self.process(data, i),
            Work::SinCos(i) => self.process_sincos(data, i),
            Work::User(i) => self.user_kernel(i, data),
        }
    }

    /// Loads `name` from the PTX text `ptx`, which must declare it `.entry name(.param .u64, .param .u64)`
    /// (`extern "C" __global__ void name(float* data, unsigned long long n)`), and returns its index
    /// for [`Work::User`]. It is launched with one thread per element, in blocks of 256.
    ///
    /// # Safety
    /// The kernel is code of the user's, which nothing here can check: it must touch only `data[0..n)`.
    /// A kernel that writes elsewhere corrupts whatever memory the GPU can reach in this process (with
    /// unified addressing, pinned host memory; with HMM, any of it). [`crate::planner::UserPtx`] runs
    /// it in a child process of its own, which holds nothing else.
    pub(crate) unsafe fn load_user(&mut self, ptx: &str, name: &str) -> anyhow::Result<u32> {
        user_signature(ptx, name)?;
        self.ctx.make_current()?;
        let module = load_module(ptx, "your PTX")?;
        let f = match function(module, name) {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: loaded just above, unloaded once; nothing uses it.
                unsafe { ffi::cuModuleUnload(module) };
                return Err(e);
            }
        };
        self.user.push((module, f, Box::leak(name.to_string().into_boxed_str())));
        Ok(self.user.len() as u32 - 1)
    }

    fn user_kernel<'s>(&'s self, i: u32, data: Dev<'s, f32>) -> Launch<'s> {
        let params = vec![Param::Ptr(data.ptr()), n(data.len())];
        let blocks = data.len().div_ceil(BLOCK as usize).clamp(1, u32::MAX as usize) as u32;
        match self.user.get(i as usize) {
            Some(&(_, f, name)) => {
                Launch::new(name, f, self.ctx.raw(), (blocks, BLOCK), params, vec![data.access(true)])
            }
            None => Launch::new("yours", std::ptr::null_mut(), self.ctx.raw(), (1, 1), params, vec![data.access(true)])
                .refuse(format!("no kernel of yours was loaded as number {i}")),
        }
    }
}

/// Loads a PTX image (`what` names it in errors) into the current context.
fn load_module(ptx: &str, what: &str) -> anyhow::Result<sys::CUmodule> {
    let image = CString::new(ptx).with_context(|| format!("{what} has a NUL byte"))?;
    let mut module = std::ptr::null_mut();
    // SAFETY: a NUL-terminated PTX image and a valid out-pointer; the caller made the context current.
    check(unsafe { ffi::cuModuleLoadData(&mut module, image.as_ptr().cast()) }, || format!("loading {what}"))?;
    Ok(module)
}

/// The kernel `name` of a loaded module.
fn function(module: sys::CUmodule, name: &str) -> anyhow::Result<sys::CUfunction> {
    let c_name = CString::new(name).with_context(|| format!("the kernel name {name:?} has a NUL byte"))?;
    let mut f = std::ptr::null_mut();
    // SAFETY: a loaded module, a NUL-terminated name and a valid out-pointer.
    check(unsafe { ffi::cuModuleGetFunction(&mut f, module, c_name.as_ptr()) }, || format!("finding kernel {name}"))?;
    Ok(f)
}

/// Whether the PTX text declares `name` as a kernel of the user's may be: `.entry name(.param .u64,
/// .param .u64)`, that is `extern "C" __global__ void name(float* data, unsigned long long n)`.
pub(crate) fn user_signature(ptx: &str, name: &str) -> anyhow::Result<()> {
    let params = ptx_params(ptx, name).with_context(|| {
        format!("the PTX has no kernel named {name} (declare it extern \"C\" so that its name is not mangled)")
    })?;
    if params != [".u64", ".u64"] {
        anyhow::bail!(
            "{name} takes ({}); kernels of yours must be declared (float* data, unsigned long long n)",
            params.join(", ")
        );
    }
    Ok(())
}

/// The parameter types of `.entry name(...)` in a PTX text: `.u64`, `.u32`, `.f32`.
pub(crate) fn ptx_params(ptx: &str, name: &str) -> Option<Vec<String>> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let body = &ptx[start..start + ptx[start..].find(')')?];
    Some(
        body.lines()
            .filter_map(|l| l.trim().strip_prefix(".param ")?.split_whitespace().next().map(String::from))
            .collect(),
    )
}

fn n(len: usize) -> Param {
    Param::U64(len as u64)
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

    /// Link `i` of a chain of `n` points `stride` links on: a read every `stride * 4` bytes, round and round.
    pub fn chain(i: usize, n: usize, stride: usize) -> u32 {
        ((i + stride) % n) as u32
    }

    /// Where [`super::Kernels::chase`] ends, starting at link `start`, on a [`chain`] of `n` links.
    pub fn chase(n: usize, stride: usize, start: u32, accesses: u32) -> u32 {
        let start = if (start as usize) < n { start as usize } else { 0 };
        ((start + (accesses as usize % n) * stride % n) % n) as u32
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
    use super::{cpu, ptx_params, Ty, KERNELS, MODULES};

    #[test]
    fn every_launcher_matches_its_kernels_signature_in_the_ptx() {
        for k in &KERNELS {
            let (module, ptx) = MODULES[k.module];
            let got = ptx_params(ptx, k.name).unwrap_or_else(|| panic!("no kernel {} in {module}.ptx", k.name));
            let want: Vec<&str> = k
                .params
                .iter()
                .map(|t| match t {
                    Ty::Ptr | Ty::U64 => ".u64",
                    Ty::U32 | Ty::I32 => ".u32",
                    Ty::F32 => ".f32",
                })
                .collect();
            assert_eq!(got, want, "kernel {} in {module}.cu", k.name);
        }
    }

    #[test]
    fn a_kernel_of_the_users_must_take_a_pointer_and_a_count() {
        let ok = ".visible .entry mine(\n\t.param .u64 mine_param_0,\n\t.param .u64 mine_param_1\n)\n{";
        assert!(super::user_signature(ok, "mine").is_ok());
        let e = super::user_signature(ok, "other").unwrap_err().to_string();
        assert!(e.contains("no kernel named other") && e.contains("extern"), "{e}");
        let three = ".visible .entry mine(\n\t.param .u64 a,\n\t.param .u32 b,\n\t.param .f32 c\n)\n{";
        let e = super::user_signature(three, "mine").unwrap_err().to_string();
        assert!(e.contains("takes (.u64, .u32, .f32)"), "{e}");
    }

    #[test]
    fn the_signature_check_sees_a_changed_parameter() {
        let ptx = ".visible .entry scale(\n\t.param .u64 scale_param_0,\n\t.param .u32 scale_param_1\n)\n{";
        assert_eq!(ptx_params(ptx, "scale").unwrap(), vec![".u64", ".u32"]);
        assert!(ptx_params(ptx, "missing").is_none());
    }

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
    fn the_chase_twin_follows_the_chain() {
        let (n, stride) = (1000, 32);
        for accesses in [0, 1, 7, 31, 32, 999, 4096] {
            let mut p = 0usize;
            for _ in 0..accesses {
                p = cpu::chain(p, n, stride) as usize;
            }
            assert_eq!(cpu::chase(n, stride, 0, accesses), p as u32, "{accesses} accesses");
            let mut q = 123usize;
            for _ in 0..accesses {
                q = cpu::chain(q, n, stride) as usize;
            }
            assert_eq!(cpu::chase(n, stride, 123, accesses), q as u32, "{accesses} accesses from 123");
        }
    }

    #[test]
    fn heavy_sqrt_is_sqrt_of_x2_plus_n() {
        // sqrt(x^2 + n) in exact arithmetic; float rounding stays tiny.
        let got = cpu::heavy_sqrt(1.0, 100);
        assert!((got - 101f32.sqrt()).abs() < 1e-4, "{got}");
    }
}
