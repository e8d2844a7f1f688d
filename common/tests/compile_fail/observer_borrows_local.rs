// An observer must be 'static: it cannot keep a borrow of a local that dies before the Gpu.
struct O<'a>(&'a mut Vec<common::TimedOp>);
impl common::Observer for O<'_> { fn record(&mut self, op: common::TimedOp) { self.0.push(op) } }
fn main() -> common::anyhow::Result<()> {
    let mut gpu = common::Gpu::init()?;
    {
        let mut ops = Vec::new();
        gpu.observe(Box::new(O(&mut ops)))?;
    }
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |_| Ok(()))?;
    Ok(())
}
