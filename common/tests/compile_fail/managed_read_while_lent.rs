// Managed memory lent to a scope cannot be read by the host either: its pages may be moving, or a kernel writing them.
use common::{Gpu, To};

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| {
        let d = s.managed(&mut m);
        s.prefetch(&streams[0], d, To::Device)?;
        println!("{}", m[0]);
        s.launch(&streams[0], gpu.kernels.process(d, 1))
    })?;
    Ok(())
}
