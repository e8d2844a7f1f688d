// A device handle cannot leave its scope: after the scope, the buffer is no longer lent.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let leaked = gpu.scope(&streams, |s| Ok::<_, cuda_scope::Error>(s.device(&mut d)))?;
    let _ = leaked.len();
    Ok(())
}
