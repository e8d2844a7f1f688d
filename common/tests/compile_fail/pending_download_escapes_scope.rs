// A pending download cannot leave its scope to be waited for after the scope ended.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let mut h = vec![0f32; 4];
    let pending = gpu.scope(&streams, |s| s.stream(0).dtoh_pending(s.device(&mut d), &mut h))?;
    pending.wait()?;
    Ok(())
}
