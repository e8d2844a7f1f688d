// A host buffer lent to a copy cannot be read until the scope has synchronized: the GPU may still be writing it.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut h = gpu.pinned::<f32>(4)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        s.stream(0).dtoh(s.device(&mut d), &mut h)?;
        println!("{}", h[0]);
        Ok(())
    })?;
    Ok(())
}
