// The bare round trip copying back into the buffer it copies from, while that buffer is borrowed to read.
use cuda_scope::{probe::bare_round_trip, Gpu};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut host = gpu.pinned::<u8>(4096)?;
    let mut device = gpu.alloc::<u8>(4096)?;
    bare_round_trip(&streams[0], &host, &mut device, &mut host, &[(0..4096, 0)])?;
    Ok(())
}
