// The seal of `Queue` cannot be named from outside the crate (it was once a public, hidden trait).
struct Mine;
impl common::launch::QueueSealed for Mine {}
impl common::launch::sealed::QueueSealed for Mine {}
fn main() {}
