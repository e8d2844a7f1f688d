// An upload the scope held to coalesce keeps its source borrowed until the scope ends, flushed or not: the
// kernel way reads a pinned source in place whenever the GPU reaches it.
use cuda_scope::{Coalescing, CopyWay, Gpu};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut h = gpu.pinned::<f32>(4)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        s.set_coalescing(Coalescing::Forced(CopyWay::Kernel))?;
        s.stream(0).htod(&h, s.device(&mut d))?;
        s.flush()?;
        h[0] = 1.0;
        Ok(())
    })?;
    Ok(())
}
