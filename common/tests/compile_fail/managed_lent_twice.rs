// One managed buffer cannot be lent twice to a scope: two views would not be tracked together.
use common::Gpu;

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(2)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| {
        let a = s.managed(&mut m);
        let b = s.managed(&mut m);
        s.launch(&streams[0], gpu.kernels.process(a, 1))?;
        s.launch(&streams[1], gpu.kernels.process(b, 1))
    })?;
    Ok(())
}
