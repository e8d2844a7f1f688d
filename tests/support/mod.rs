//! What the GPU tests of this package share.

use cuda_scope::Gpu;
use kernels::Kernels;

/// The GPU with the lessons' kernels, and a lock: libtest runs tests on parallel threads, and those of
/// one test binary share one device (and what some of them read of it: its free memory, the process's
/// count of managed memory held).
pub fn gpu() -> (Gpu, Kernels, std::sync::MutexGuard<'static, ()>) {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let lock = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let gpu = Gpu::init().expect("these tests need a GPU");
    let kernels = Kernels::load(&gpu).unwrap();
    (gpu, kernels, lock)
}
