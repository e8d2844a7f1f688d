// A scope cannot be used from another thread: its bookkeeping is not synchronized.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        std::thread::scope(|t| {
            t.spawn(|| s.is_idle());
        });
        Ok(())
    })?;
    Ok(())
}
