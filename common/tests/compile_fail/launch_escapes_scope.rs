// A launch holds views of its scope's buffers, so it cannot leave the scope to be queued later.
use common::{Gpu, LaunchConfig};

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let launch = gpu.scope(&streams, |s| {
        let d = s.device(&mut d);
        Ok(unsafe { k.launch(LaunchConfig::linear(1, 4)).write(d).build() })
    })?;
    drop(d);
    gpu.scope(&streams, |s| s.launch(&streams[0], launch))?;
    Ok(())
}
