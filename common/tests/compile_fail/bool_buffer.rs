// Only types for which every bit pattern is valid may live in a buffer the GPU writes: not bool.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let _flags = gpu.alloc::<bool>(4)?;
    Ok(())
}
