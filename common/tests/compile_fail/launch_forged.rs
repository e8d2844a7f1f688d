// A launch is declared only through a stream's (or graph's) kernel(): no Default, Clone, or struct literal.
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    gpu.scope(&streams, |_s| -> cuda_scope::Result<_> {
        let l: cuda_scope::LaunchBuilder = Default::default();
        unsafe { l.clone().launch() }
    })?;
    Ok(())
}
