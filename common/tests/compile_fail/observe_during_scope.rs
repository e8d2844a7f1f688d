// Gpu::observe takes &mut Gpu: it cannot be called while a scope of that Gpu runs.
struct O;
impl cuda_scope::Observer for O { fn record(&mut self, _: cuda_scope::TimedOp) {} }
fn main() -> cuda_scope::Result<()> {
    let mut gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |_s| gpu.observe(Box::new(O)))?;
    Ok(())
}
