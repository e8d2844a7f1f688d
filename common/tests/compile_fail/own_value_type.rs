// Kernel values are a closed list: a program cannot pass a type of its own (of any size) by value.
#[derive(Clone, Copy)]
struct Big([u64; 4]);
impl cuda_scope::launch::Value for Big {}
fn main() {}
