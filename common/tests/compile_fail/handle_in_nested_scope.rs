// A handle of one scope cannot be used in another, even one nested inside it.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let h = vec![1.0f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |outer| -> cuda_scope::Result<_> {
        let d = outer.device(&mut d);
        gpu.scope(&streams, |inner| inner.stream(0).htod(&h, d))
    })?;
    Ok(())
}
