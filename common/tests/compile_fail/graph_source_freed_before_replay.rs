// A host buffer a graph copies from stays borrowed until the scope ends: it cannot be freed while the graph
// may still be replayed.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.device(&mut d);
        let h = vec![1f32; 4];
        let graph = s.graph(|g| g.htod(&h, d))?;
        drop(h);
        s.stream(0).replay(&graph)
    })?;
    Ok(())
}
