// A view of managed memory cannot leave its scope: afterwards the host owns the memory again.
use cuda_scope::{Gpu, Destination};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    let leaked = gpu.scope(&streams, |s| Ok::<_, cuda_scope::Error>(s.managed(&mut m)))?;
    gpu.scope(&streams, |s| s.stream(0).prefetch(leaked, Destination::Device))?;
    Ok(())
}
