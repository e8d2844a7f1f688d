// A stream of a scope cannot leave it: work queued on it after the scope ended would outlive the borrows.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let h = vec![1f32; 4];
    let (stream, view) = gpu.scope(&streams, |s| Ok::<_, cuda_scope::Error>((s.stream(0), s.device(&mut d))))?;
    stream.htod(&h, view)?;
    Ok(())
}
