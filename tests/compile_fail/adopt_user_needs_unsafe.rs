// A kernel of the user's, which nothing can check, is adopted for the pipeline only in `unsafe`: no safe
// path runs a user's PTX.
use cuda_scope::Gpu;
use kernels::Kernels;

fn main() -> anyhow::Result<()> {
    let gpu = Gpu::init()?;
    let mut kernels = Kernels::load(&gpu)?;
    let mine = gpu.load_ptx_file("mine.ptx")?.kernel("mine")?;
    kernels.adopt_user(mine);
    Ok(())
}
