// Forgetting managed memory while a scope holds it is refused too: the scope's guarantee is its borrow, not a guard.
use common::Gpu;

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| {
        s.launch(&streams[0], gpu.kernels.process(s.managed(&mut m), 1))?;
        std::mem::forget(m);
        Ok(())
    })?;
    Ok(())
}
