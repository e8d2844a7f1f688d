// A stream offers no way to queue work (host callbacks included) that the scope does not see.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut v = vec![0u8; 4];
    streams[0].add_callback(Box::new(|_| v.push(1)))?;
    Ok(())
}
