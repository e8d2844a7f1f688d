// A builder holding a view cannot leave the scope either (to be built and queued later).
use common::LaunchConfig;
fn main() -> common::anyhow::Result<()> {
    let gpu = common::Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let b = gpu.scope(&streams, |s| Ok(k.launch(LaunchConfig::linear(1, 1)).write(s.device(&mut d))))?;
    gpu.scope(&streams, |s| s.launch(&streams[0], unsafe { b.build() }))?;
    Ok(())
}
