// A device buffer offers no pointer or slice of its own: its memory is reached only through a scope.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let d = gpu.alloc::<f32>(4)?;
    let _p = d.as_device_ptr();
    Ok(())
}
