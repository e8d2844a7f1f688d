// A launch being declared holds its scope's stream and views: it cannot leave the scope to be launched later.
use cuda_scope::LaunchConfig;
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let b = gpu.scope(&streams, |s| Ok::<_, cuda_scope::Error>(s.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).write(s.device(&mut d))))?;
    unsafe { b.launch() }?;
    Ok(())
}
