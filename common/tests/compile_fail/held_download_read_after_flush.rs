// A download the scope held to coalesce, and then issued by flush(), still lends its destination until
// the scope ends: a pageable destination is written only as the scope ends, when the staging is unpacked.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut h = vec![0f32; 4];
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        s.stream(0).dtoh(s.device(&mut d), &mut h)?;
        s.flush()?;
        s.synchronize()?;
        println!("{}", h[0]);
        Ok(())
    })?;
    Ok(())
}
