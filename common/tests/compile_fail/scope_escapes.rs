// The scope itself cannot be returned out of its closure.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let s = gpu.scope(&streams, |s| Ok::<_, cuda_scope::Error>(s))?;
    let _ = s.is_idle();
    Ok(())
}
