// Host memory moved into the scope's closure dies when the closure returns, before the scope syncs: it cannot be lent.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let h = vec![1f32; 4];
    let dd = &mut d;
    gpu.scope(&streams, move |s| s.stream(0).htod(&h, s.device(dd)))?;
    Ok(())
}
