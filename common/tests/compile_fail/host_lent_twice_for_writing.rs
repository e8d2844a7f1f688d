// Two copies cannot write into one host buffer in a scope: they would race.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(2)?;
    let mut h = gpu.pinned::<f32>(4)?;
    let (mut a, mut b) = (gpu.alloc::<f32>(4)?, gpu.alloc::<f32>(4)?);
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        s.stream(0).dtoh(s.device(&mut a), &mut h)?;
        s.stream(1).dtoh(s.device(&mut b), &mut h)
    })?;
    Ok(())
}
