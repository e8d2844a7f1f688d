// A launch being declared cannot be stashed in a Cell outside the scope and launched in a later scope.
use std::cell::Cell;
use cuda_scope::LaunchConfig;
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let stash = Cell::new(None);
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        stash.set(Some(s.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).write(s.device(&mut d))));
        Ok(())
    })?;
    gpu.scope(&streams, |_s| unsafe { stash.take().unwrap().launch() })?;
    Ok(())
}
