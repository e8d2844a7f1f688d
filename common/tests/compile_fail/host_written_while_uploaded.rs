// Host memory lent to an upload cannot be written until the scope has synchronized: the DMA may still read it.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut h = gpu.pinned::<f32>(4)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        s.stream(0).htod(&h, s.device(&mut d))?;
        h[0] = 2.0;
        Ok(())
    })?;
    Ok(())
}
