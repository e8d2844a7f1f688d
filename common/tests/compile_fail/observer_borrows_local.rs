// An observer must be 'static: it cannot keep a borrow of a local that dies before the Gpu.
struct O<'a>(&'a mut Vec<cuda_scope::TimedOp>);
impl cuda_scope::Observer for O<'_> { fn record(&mut self, op: cuda_scope::TimedOp) { self.0.push(op) } }
fn main() -> cuda_scope::Result<()> {
    let mut gpu = cuda_scope::Gpu::init()?;
    {
        let mut ops = Vec::new();
        gpu.observe(Box::new(O(&mut ops)))?;
    }
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |_| Ok::<_, cuda_scope::Error>(()))?;
    Ok(())
}
