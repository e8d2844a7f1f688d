// Mapped host memory lent to kernels cannot be touched by the host until the scope ends.
use cuda_scope::{Gpu, HostAlloc, LaunchConfig};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.pinned_with::<f32>(4, HostAlloc::MAPPED)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.mapped(&mut m)?;
        unsafe { s.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).write(d).launch() }?;
        m[0] = 1.0;
        Ok(())
    })?;
    Ok(())
}
