// Managed memory the GPU writes holds plain numbers only, as every buffer does: not bool.
use common::Gpu;

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let _flags = gpu.managed::<bool>(4)?;
    Ok(())
}
