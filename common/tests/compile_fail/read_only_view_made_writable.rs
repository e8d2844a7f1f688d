// A read-only view cannot be turned back into a writable one.
fn main() -> common::anyhow::Result<()> {
    let gpu = common::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let h = vec![0f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| {
        let r = s.device(&mut d).read_only();
        let w: common::Dev<f32> = r.into();
        s.stream(0).htod(&h, w)
    })?;
    Ok(())
}
