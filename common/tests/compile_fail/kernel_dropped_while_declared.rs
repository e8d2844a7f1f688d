// The kernel a launch is declared for cannot be dropped before it is launched: the declaration borrows it.
use cuda_scope::LaunchConfig;
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let b = s.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).write(s.device(&mut d));
        drop(k);
        unsafe { b.launch() }
    })?;
    Ok(())
}
