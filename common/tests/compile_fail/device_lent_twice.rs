// One device buffer cannot be lent twice to a scope: the two handles would not be tracked together.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let a = s.device(&mut d);
        let b = s.device(&mut d);
        s.stream(0).dtod(a, b)
    })?;
    Ok(())
}
