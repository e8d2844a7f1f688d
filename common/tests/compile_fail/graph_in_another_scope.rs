// A graph built in one scope cannot be replayed in another, even one nested inside it: that scope did not
// lend its buffers and does not order their work.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let h = vec![1f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |outer| -> cuda_scope::Result<_> {
        let d = outer.device(&mut d);
        let graph = outer.graph(|g| g.htod(&h, d))?;
        gpu.scope(&streams, |inner| inner.stream(0).replay(&graph))
    })?;
    Ok(())
}
