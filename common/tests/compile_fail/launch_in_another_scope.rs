// A launch built from one scope's views cannot be queued in another scope, even one nested inside it.
use common::{Gpu, LaunchConfig};

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |outer| {
        let launch = unsafe { k.launch(LaunchConfig::linear(1, 4)).write(outer.device(&mut d)).build() };
        gpu.scope(&streams, |inner| inner.launch(&streams[0], launch))
    })?;
    Ok(())
}
