// Managed memory cannot be freed while a scope holds it: the kernel queued on it may still run.
use common::{Gpu, LaunchConfig};

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| {
        s.launch(&streams[0], unsafe { k.launch(LaunchConfig::linear(1, 1)).write(s.managed(&mut m)).build() })?;
        drop(m);
        Ok(())
    })?;
    Ok(())
}
