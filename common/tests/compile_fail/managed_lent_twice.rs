// One managed buffer cannot be lent twice to a scope: two views would not be tracked together.
use common::{Gpu, LaunchConfig};

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(2)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| {
        let a = s.managed(&mut m);
        let b = s.managed(&mut m);
        s.launch(&streams[0], unsafe { k.launch(LaunchConfig::linear(1, 1)).write(a).build() })?;
        s.launch(&streams[1], unsafe { k.launch(LaunchConfig::linear(1, 1)).write(b).build() })
    })?;
    Ok(())
}
