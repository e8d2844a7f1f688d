//! The test kernels (`tests/kernels.cu`, made into `tests/ptx/kernels.ptx`), loaded and launched
//! through the launch builder as a user's kernels are.
#![allow(dead_code)]

pub mod driver;
pub mod ptxgen;

use cuda_scope::{Coalescing, CopyWay, Dev, DeviceBuffer, Gpu, Kernel, LaunchConfig, Queue, Scope, Stream};

/// The PTX of `tests/kernels.cu`.
pub const PTX: &str = include_str!("../ptx/kernels.ptx");

/// The CPU twin of `busy`: `iters` rounds of `x * (1 - 2^-14) + 2^-14`, each one rounding, as nvcc
/// contracts the kernel's multiply and add into one fused multiply-add.
pub fn busy_cpu(mut x: f32, iters: u32) -> f32 {
    for _ in 0..iters {
        x = x.mul_add(1.0 - 1.0 / 16384.0, 1.0 / 16384.0);
    }
    x
}

/// The test kernels of one GPU.
pub struct TestKernels {
    pub saxpy: Kernel,
    pub busy: Kernel,
    fault: Kernel,
}

impl TestKernels {
    pub fn load(gpu: &Gpu) -> TestKernels {
        let m = gpu.load_ptx(PTX).unwrap();
        TestKernels {
            saxpy: m.kernel("saxpy").unwrap(),
            busy: m.kernel("busy").unwrap(),
            fault: m.kernel("fault").unwrap(),
        }
    }

    /// `busy` over `x`, in place.
    pub fn busy<'s>(&self, on: impl Queue<'s>, x: Dev<'s, f32>, iters: u32) -> cuda_scope::Result<()> {
        let config = LaunchConfig::for_elements(x.len(), 256);
        // SAFETY: busy(x, n, iters) reads and writes x[i] for i < n only.
        unsafe { on.kernel(&self.busy, config).write(x).value(x.len() as u64).value(iters).launch() }
    }

    /// `y = a * x + y`.
    pub fn saxpy<'s>(&self, on: impl Queue<'s>, x: Dev<'s, f32>, y: Dev<'s, f32>, a: f32) -> cuda_scope::Result<()> {
        self.saxpy_with(on, LaunchConfig::for_elements(y.len(), 256), x, y, a)
    }

    /// [`TestKernels::saxpy`] launched with `config` (one the driver may refuse, for a test of a launch
    /// that fails).
    pub fn saxpy_with<'s>(
        &self,
        on: impl Queue<'s>,
        config: LaunchConfig,
        x: Dev<'s, f32>,
        y: Dev<'s, f32>,
        a: f32,
    ) -> cuda_scope::Result<()> {
        // SAFETY: saxpy reads x[i] and writes y[i] for i < n only, whatever the grid; n is y's length,
        // and x is as long (the tests that call it make them so).
        unsafe { on.kernel(&self.saxpy, config).read(x).write(y).value(a).value(y.len() as u64).launch() }
    }

    /// The kernel that writes 1 TiB below `data`.
    ///
    /// # Safety
    /// Where nothing is mapped there, the GPU stops it and the context is dead for the rest of the
    /// process; where something is, it is corrupted. Only for a test process that expects the fault.
    pub unsafe fn fault<'s>(&self, on: impl Queue<'s>, data: Dev<'s, f32>) -> cuda_scope::Result<()> {
        // SAFETY: the caller accepts the fault (see above).
        unsafe { on.kernel(&self.fault, LaunchConfig::linear(1, 32)).write(data).launch() }
    }
}

/// What the tests of a held copy's driver error (`coalesced_fault`, `waits_fault`) start from: a GPU
/// with two streams, 4096 floats on the device and on the host, a victim for the fault, and the scope's
/// copy kernel loaded and staging pinned (a scope of held copies ran while the context lived).
pub struct HeldFault {
    pub gpu: Gpu,
    pub kernels: TestKernels,
    pub streams: Vec<Stream>,
    pub d: DeviceBuffer<f32>,
    pub victim: DeviceBuffer<f32>,
    pub host: Vec<f32>,
}

impl HeldFault {
    pub fn new() -> HeldFault {
        let gpu = Gpu::init().unwrap();
        let kernels = TestKernels::load(&gpu);
        let streams = gpu.streams(2).unwrap();
        let (mut d, victim) = (gpu.alloc::<f32>(4096).unwrap(), gpu.alloc::<f32>(1 << 20).unwrap());
        let host = vec![1f32; 4096];
        gpu.scope(&streams, |s| {
            s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
            let d = s.device(&mut d);
            (0..4)
                .try_for_each(|i| s.stream(0).htod(&host[i * 1024..(i + 1) * 1024], d.slice(i * 1024..(i + 1) * 1024)))
        })
        .unwrap();
        HeldFault { gpu, kernels, streams, d, victim, host }
    }
}

/// Two copies of 1024 floats up on stream 0 of `s`, held (coalescing forced to the kernel, so that
/// their group goes out as one launch): no call yet, nothing to fail.
pub fn hold_two<'s>(s: &'s Scope<'s, '_>, d: Dev<'s, f32>, host: &'s [f32]) -> cuda_scope::Result<()> {
    s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
    s.stream(0).htod(&host[..1024], d.slice(0..1024))?;
    s.stream(0).htod(&host[1024..2048], d.slice(1024..2048))
}
