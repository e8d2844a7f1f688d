// The buffer a PartedSlice writes in parts stays lent while any piece of it is held: it cannot be
// written, or read as a whole, meanwhile.
use cuda_scope::PartedSlice;

fn main() {
    let mut packed = vec![0u8; 8];
    let parted = PartedSlice::new(&mut packed, vec![4, 8], vec![1, 2]).unwrap();
    drop(parted.claim(0));
    let first = parted.piece(0).unwrap();
    packed[0] = 1;
    println!("{first:?}");
}
