// Kernel values are a closed list: a program cannot pass a type of its own (of any size) by value.
#[derive(Clone, Copy)]
struct Big([u64; 4]);
impl common::launch::Value for Big {
    const NAME: &'static str = "Big";
    const FLOAT: bool = false;
    fn put(self, out: &mut [u8]) {
        out.copy_from_slice(&self.0[0].to_ne_bytes())
    }
}
fn main() {}
