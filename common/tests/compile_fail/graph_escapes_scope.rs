// A graph names its scope's buffers, so it cannot leave the scope, to be replayed after they are freed.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let h = vec![1f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    let graph = gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.device(&mut d);
        s.graph(|g| g.htod(&h, d))
    })?;
    drop(h);
    gpu.scope(&streams, |s| s.stream(0).replay(&graph))?;
    Ok(())
}
