// A launch is declared only through a stream's (or graph's) kernel(): no Default, Clone, or struct literal.
fn main() -> common::anyhow::Result<()> {
    let gpu = common::Gpu::init()?;
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |_s| {
        let l: common::LaunchBuilder = Default::default();
        unsafe { l.clone().launch() }
    })?;
    Ok(())
}
