// Kernel values are a closed list: a program cannot pass a type of its own (of any size) by value.
#[derive(Clone, Copy)]
struct Big([u64; 4]);
impl common::module::Value for Big {
    fn arg(self) -> common::module::Arg { common::module::Arg::U64(self.0[0]) }
}
fn main() {}
