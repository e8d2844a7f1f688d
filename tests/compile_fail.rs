//! Misuse of the lessons' kernels that the types turn into compile errors (common's own suite is in
//! `common/tests/compile_fail/`). No GPU needed: these only compile.

#[test]
fn misuse_does_not_compile() {
    trybuild::TestCases::new().compile_fail("tests/compile_fail/*.rs");
}
