// Managed memory lent to a scope cannot be written by the host until the scope ends: a kernel may be using it.
use common::Gpu;

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| {
        let d = s.managed(&mut m);
        s.launch(&streams[0], gpu.kernels.process(d, 1))?;
        m[0] = 1.0;
        Ok(())
    })?;
    Ok(())
}
