// Gpu::observe takes &mut Gpu: it cannot be called while a scope of that Gpu runs.
struct O;
impl common::Observer for O { fn record(&mut self, _: common::TimedOp) {} }
fn main() -> common::anyhow::Result<()> {
    let mut gpu = common::Gpu::init()?;
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |_s| gpu.observe(Box::new(O)))?;
    Ok(())
}
