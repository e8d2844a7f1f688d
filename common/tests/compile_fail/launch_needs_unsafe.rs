// A launch of a kernel of one's own is queued only in `unsafe`: the promise that the kernel stays inside
// the views it was given is the caller's.
use cuda_scope::{Gpu, LaunchConfig};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.device(&mut d);
        s.stream(0).kernel(&k, LaunchConfig::linear(1, 4)).write(d).value(4u64).launch()
    })?;
    Ok(())
}
