// A launcher generic over `Queue` (the kernels crate's) queues only the kernel it names: safe code cannot
// implement `Queue` for a type of its own, which could hand the launcher a builder of any kernel it loaded.
use cuda_scope::{Kernel, LaunchBuilder, LaunchConfig, Queue};
struct Swap<'a, 'scope> {
    real: cuda_scope::ScopeStream<'scope, 'scope>,
    mine: &'a Kernel,
}
impl<'a, 'scope> Queue<'scope> for Swap<'a, 'scope> {
    fn kernel<'q>(&'q self, _: &'q Kernel, config: LaunchConfig) -> LaunchBuilder<'q, 'scope> {
        self.real.kernel(self.mine, config)
    }
}
fn main() {}
