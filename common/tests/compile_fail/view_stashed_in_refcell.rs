// A view cannot be stashed in a RefCell that outlives the scope and used afterwards / in another scope.
use std::cell::RefCell;
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let h = vec![0f32; 4];
    let stash = RefCell::new(None);
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> { *stash.borrow_mut() = Some(s.device(&mut d)); Ok(()) })?;
    gpu.scope(&streams, |s| s.stream(0).htod(&h, stash.borrow().unwrap()))?;
    Ok(())
}
