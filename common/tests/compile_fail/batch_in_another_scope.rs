// A batch's destinations are views of its scope: one scope's views cannot be copied into in another.
use cuda_scope::{Gpu, SrcOrder};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let h = vec![1f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |outer| -> cuda_scope::Result<_> {
        let d = outer.device(&mut d);
        gpu.scope(&streams, |inner| inner.stream(0).htod_batch(&[&h[..]], &[d], SrcOrder::StreamOrder))
    })?;
    Ok(())
}
