// A view made read-only cannot be a copy's destination.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let h = vec![1.0f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| s.stream(0).htod(&h, s.device(&mut d).read_only()))?;
    Ok(())
}
