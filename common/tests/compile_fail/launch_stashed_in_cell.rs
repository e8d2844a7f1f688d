// A launch holding views cannot be stashed in a Cell outside the scope and queued in a later scope.
use std::cell::Cell;
use common::LaunchConfig;
fn main() -> common::anyhow::Result<()> {
    let gpu = common::Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let stash = Cell::new(None);
    gpu.scope(&streams, |s| {
        stash.set(Some(unsafe { k.launch(LaunchConfig::linear(1, 1)).write(s.device(&mut d)).build() }));
        Ok(())
    })?;
    gpu.scope(&streams, |s| s.launch(&streams[0], stash.take().unwrap()))?;
    Ok(())
}
