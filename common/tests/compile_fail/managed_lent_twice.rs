// One managed buffer cannot be lent twice to a scope: two views would not be tracked together.
use cuda_scope::{Gpu, LaunchConfig};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(2)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let a = s.managed(&mut m);
        let b = s.managed(&mut m);
        unsafe { s.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).write(a).launch() }?;
        unsafe { s.stream(1).kernel(&k, LaunchConfig::linear(1, 1)).write(b).launch() }
    })?;
    Ok(())
}
