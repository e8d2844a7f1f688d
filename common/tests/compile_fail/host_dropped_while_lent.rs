// A host buffer lent to a copy cannot be freed while the copy may run.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let v = vec![1.0f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        s.stream(0).htod(&v, s.device(&mut d))?;
        drop(v);
        Ok(())
    })?;
    Ok(())
}
