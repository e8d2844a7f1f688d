// Managed memory the GPU writes holds plain numbers only, as every buffer does: not bool.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let _flags = gpu.managed::<bool>(4)?;
    Ok(())
}
