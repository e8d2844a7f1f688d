// A Vec pinned in place belongs to the registration: forgetting the guard cannot hand it back pinned.
use cuda_scope::Gpu;

fn main() -> cuda_scope::Result<()> {
    let gpu = Gpu::init()?;
    let mut v = vec![1.0f32; 1024];
    let registered = gpu.register(v)?;
    std::mem::forget(registered);
    v.push(2.0);
    Ok(())
}
