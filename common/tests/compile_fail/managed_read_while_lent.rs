// Managed memory lent to a scope cannot be read by the host either: its pages may be moving, or a kernel writing them.
use common::{Gpu, To, LaunchConfig};

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| {
        let d = s.managed(&mut m);
        s.prefetch(&streams[0], d, To::Device)?;
        println!("{}", m[0]);
        s.launch(&streams[0], unsafe { k.launch(LaunchConfig::linear(1, 1)).write(d).build() })
    })?;
    Ok(())
}
