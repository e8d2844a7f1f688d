// One launch cannot declare views of two scopes (an outer and a nested one).
use cuda_scope::LaunchConfig;
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let (mut a, mut b) = (gpu.alloc::<f32>(4)?, gpu.alloc::<f32>(4)?);
    gpu.scope(&streams, |outer| -> cuda_scope::Result<_> {
        let x = outer.device(&mut a);
        gpu.scope(&streams, |inner| -> cuda_scope::Result<_> {
            let y = inner.device(&mut b);
            unsafe { inner.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).read(x).write(y).launch() }
        })
    })?;
    Ok(())
}
