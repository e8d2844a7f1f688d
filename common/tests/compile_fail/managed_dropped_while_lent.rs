// Managed memory cannot be freed while a scope holds it: the kernel queued on it may still run.
use cuda_scope::{Gpu, LaunchConfig};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        unsafe { s.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).write(s.managed(&mut m)).launch() }?;
        drop(m);
        Ok(())
    })?;
    Ok(())
}
