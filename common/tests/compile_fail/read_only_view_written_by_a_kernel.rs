// A view made read-only cannot be declared as one a kernel writes.
use cuda_scope::{Gpu, LaunchConfig};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let input = s.device(&mut d).read_only();
        unsafe { s.stream(0).kernel(&k, LaunchConfig::linear(1, 4)).write(input).launch() }
    })?;
    Ok(())
}
