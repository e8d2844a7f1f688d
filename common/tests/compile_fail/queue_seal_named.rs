// The seal of `Queue` cannot be named from outside the crate (it was once a public, hidden trait).
struct Mine;
impl cuda_scope::launch::QueueSealed for Mine {}
impl cuda_scope::launch::sealed::QueueSealed for Mine {}
fn main() {}
