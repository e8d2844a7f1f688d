// A part being written cannot outlive the PartedSlice that handed it out, so no write can follow the
// piece it belongs to being handed out, or the slice being given back.
use cuda_scope::PartedSlice;

fn main() {
    let mut packed = vec![0u8; 8];
    let part = {
        let parted = PartedSlice::new(&mut packed, vec![4, 8], vec![2]).unwrap();
        parted.claim(0).unwrap()
    };
    drop(part);
}
