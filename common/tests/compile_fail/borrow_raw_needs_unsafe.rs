// Another library's stream and device memory are borrowed only in `unsafe`: that they stay alive, and
// alone while a scope has them, is the caller's promise, which no check can make.
use cuda_scope::{DeviceBuffer, Gpu, Stream};

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let theirs: *mut std::ffi::c_void = std::ptr::null_mut();
    let _stream = Stream::borrow_raw(&gpu, theirs)?;
    let _memory = DeviceBuffer::<f32>::borrow_raw(&gpu, 0x7f00_0000_0000, 1024)?;
    Ok(())
}
