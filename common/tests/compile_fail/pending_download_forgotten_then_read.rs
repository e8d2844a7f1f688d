// A pending download forgotten (never waited for) leaves its destination the scope's until the scope ends.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let mut h = vec![0f32; 4];
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        std::mem::forget(s.stream(0).dtoh_pending(s.device(&mut d), &mut h)?);
        h[0] = 1.0;
        Ok(())
    })?;
    Ok(())
}
