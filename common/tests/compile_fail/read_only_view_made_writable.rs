// A read-only view cannot be turned back into a writable one.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let h = vec![0f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let r = s.device(&mut d).read_only();
        let w: cuda_scope::Dev<f32> = r.into();
        s.stream(0).htod(&h, w)
    })?;
    Ok(())
}
