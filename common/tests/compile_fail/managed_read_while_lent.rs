// Managed memory lent to a scope cannot be read by the host either: its pages may be moving, or a kernel writing them.
use cuda_scope::{Gpu, Destination, LaunchConfig};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let k = gpu.load_ptx("")?.kernel("k")?;
    let streams = gpu.streams(1)?;
    let mut m = gpu.managed::<f32>(4)?;
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        let d = s.managed(&mut m);
        s.stream(0).prefetch(d, Destination::Device)?;
        println!("{}", m[0]);
        unsafe { s.stream(0).kernel(&k, LaunchConfig::linear(1, 1)).write(d).launch() }
    })?;
    Ok(())
}
