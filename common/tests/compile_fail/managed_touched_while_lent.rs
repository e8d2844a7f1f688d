// Managed memory lent to a scope cannot be written by the host until the scope ends: a kernel may be using it.
use cuda_scope::{Gpu, LaunchConfig};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.managed(&mut m);
        unsafe { s.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).write(d).launch() }?;
        m[0] = 1.0;
        Ok(())
    })?;
    Ok(())
}
