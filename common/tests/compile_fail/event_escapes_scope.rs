// An event recorded in a scope cannot be waited on after it, or in another scope.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(2)?;
    let e = gpu.scope(&streams, |s| s.stream(0).record_event())?;
    gpu.scope(&streams, |s| s.stream(1).wait_event(e))?;
    Ok(())
}
