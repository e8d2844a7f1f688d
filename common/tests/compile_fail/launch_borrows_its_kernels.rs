// A launch borrows the kernels it runs: the module cannot be unloaded before it is launched.
use common::Gpu;

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let other = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| {
        let launch = other.kernels.process(s.device(&mut d), 1);
        drop(other);
        s.launch(&streams[0], launch)
    })?;
    Ok(())
}
