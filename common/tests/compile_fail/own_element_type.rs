// The element types are a closed list: a program cannot declare its own type valid for every bit pattern.
#[derive(Clone, Copy)]
struct Flag(bool);

impl cuda_scope::Element for Flag {}

fn main() {}
