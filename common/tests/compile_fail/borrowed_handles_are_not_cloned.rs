// A borrowed stream or buffer cannot be cloned into a second value of the same handle: two buffers over
// the same bytes would be lent to a scope as two, and their work left unordered.
use cuda_scope::{DeviceBuffer, Gpu, Stream};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    // SAFETY: not run; only compiled.
    let (stream, memory) = unsafe {
        (Stream::borrow_raw(&gpu, std::ptr::null_mut())?, DeviceBuffer::<f32>::borrow_raw(&gpu, 0x7f00_0000_0000, 1024)?)
    };
    let _twice = (stream.clone(), memory.clone());
    Ok(())
}
