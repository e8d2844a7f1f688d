// A host buffer a graph copies into is written by every replay: the host cannot read it until the scope ends.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let mut out = vec![0f32; 4];
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.device(&mut d);
        let graph = s.graph(|g| g.dtoh(d, &mut out))?;
        s.stream(0).replay(&graph)?;
        println!("{}", out[0]);
        s.stream(0).replay(&graph)
    })?;
    Ok(())
}
