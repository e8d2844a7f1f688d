// What a value's bytes are is written by the crate alone: the trait that holds it cannot be named.
#[derive(Clone, Copy)]
struct Big([u64; 4]);
impl cuda_scope::launch::sealed::ValueBytes for Big {
    const NAME: &'static str = "Big";
    const FLOAT: bool = false;
    fn put(self, out: &mut [u8]) {
        out.copy_from_slice(&self.0[0].to_ne_bytes())
    }
}
fn main() {}
