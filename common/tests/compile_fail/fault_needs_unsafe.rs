// Fault injection writes outside every allocation: safe code cannot reach it.
use common::Gpu;

fn main() -> common::anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| s.launch(&streams[0], gpu.kernels.fault_for_tests(s.device(&mut d))))?;
    Ok(())
}
