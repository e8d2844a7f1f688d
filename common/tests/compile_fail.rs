//! Misuse that the types turn into compile errors. Each file under `compile_fail/` says in its first
//! line what it tries; its `.stderr` beside it is the error the compiler must give (TRYBUILD=overwrite
//! regenerates them). No GPU needed: these only compile.

#[test]
fn misuse_does_not_compile() {
    trybuild::TestCases::new().compile_fail("tests/compile_fail/*.rs");
}
