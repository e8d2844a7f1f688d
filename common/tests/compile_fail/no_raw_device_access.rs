// A device buffer offers no pointer or slice of its own: its memory is reached only through a scope.
use common::Gpu;

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let d = gpu.alloc::<f32>(4)?;
    let _p = d.as_device_ptr();
    Ok(())
}
