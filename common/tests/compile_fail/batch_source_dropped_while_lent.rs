// Every source of a batch is borrowed until the scope ends, as one copy's is: the driver may read it after
// the call returns (SrcOrder::Any), so it cannot be freed.
use cuda_scope::{Gpu, SrcOrder};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(8)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.device(&mut d);
        let (a, b) = (vec![1f32; 4], vec![2f32; 4]);
        s.stream(0).htod_batch(&[&a[..], &b[..]], &[d.slice(0..4), d.slice(4..8)], SrcOrder::Any)?;
        drop(b);
        Ok(())
    })?;
    Ok(())
}
