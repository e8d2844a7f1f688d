// Every destination of a download batch is borrowed mutably until the scope ends: the host cannot read one
// while the GPU may still be writing it.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(8)?;
    let mut outs = vec![vec![0f32; 4], vec![0f32; 4]];
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.device(&mut d);
        s.stream(0).dtoh_batch(&[d.slice(0..4), d.slice(4..8)], outs.iter_mut().map(|o| &mut o[..]))?;
        println!("{}", outs[1][0]);
        Ok(())
    })?;
    Ok(())
}
