// The builder a graph's closure is handed captures only while that closure runs: it cannot be kept to add
// copies after the graph was made.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let h = vec![1f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.device(&mut d);
        let mut kept = None;
        let _graph = s.graph(|g| -> cuda_scope::Result<()> {
            kept = Some(g);
            Ok(())
        })?;
        kept.unwrap().htod(&h, d)
    })?;
    Ok(())
}
