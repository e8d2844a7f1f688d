// Managed memory cannot be freed while a scope holds it: the kernel queued on it may still run.
use common::Gpu;

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| {
        s.launch(&streams[0], gpu.kernels.process(s.managed(&mut m), 1))?;
        drop(m);
        Ok(())
    })?;
    Ok(())
}
