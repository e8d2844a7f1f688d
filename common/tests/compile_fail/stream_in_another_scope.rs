// A stream of one scope cannot queue work on another scope's views, even one nested inside it.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let h = vec![1f32; 4];
    gpu.scope(&streams, |outer| -> cuda_scope::Result<_> {
        let stream = outer.stream(0);
        gpu.scope(&streams, |inner| stream.htod(&h, inner.device(&mut d)))
    })?;
    Ok(())
}
