// A Launch has no constructor but build(): no Default, Clone, or struct literal.
fn main() -> common::anyhow::Result<()> {
    let gpu = common::Gpu::init()?;
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |s| {
        let l: common::Launch = Default::default();
        s.launch(&streams[0], l.clone())
    })?;
    Ok(())
}
