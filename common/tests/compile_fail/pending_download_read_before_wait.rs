// A download's destination cannot be read before PendingDownload::wait hands it back.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let mut h = vec![0f32; 4];
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let pending = s.stream(0).dtoh_pending(s.device(&mut d), &mut h)?;
        println!("{}", h[0]);
        pending.wait()?;
        Ok(())
    })?;
    Ok(())
}
