// A stream of a scope stashed outside it cannot be used in a later scope, on that scope's views.
use std::cell::RefCell;
fn main() -> cuda_scope::Result<()> {
    let gpu = cuda_scope::Gpu::init()?;
    let streams = gpu.streams(1)?;
    let mut d = gpu.alloc::<f32>(4)?;
    let h = vec![1f32; 4];
    let stash = RefCell::new(None);
    gpu.scope(&streams, |s| -> cuda_scope::Result<_> {
        *stash.borrow_mut() = Some(s.stream(0));
        Ok(())
    })?;
    gpu.scope(&streams, |s| stash.borrow().unwrap().htod(&h, s.device(&mut d)))?;
    Ok(())
}
