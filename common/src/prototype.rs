//! Which parameters of a kernel are pointers, from its C prototype: nvcc's PTX declares a `float*`
//! and an `unsigned long long` alike (`.param .u64`), so only the CUDA C++ source can tell a launch
//! that passes a count where the kernel takes a buffer (or the other way round).
//!
//! A small reader of C, not a compiler: comments, string and character literals and preprocessor
//! lines are dropped; each `__global__` function's name and parameter list are found (past
//! `extern "C"`, `static`, `void`, `__launch_bounds__(...)` and any other `__word__(...)` or
//! `__attribute__((...))`); templates are skipped (their PTX names are mangled); parameters are split at
//! commas outside brackets and classified:
//! - a pointer: a `*` outside template arguments (`const float* __restrict__ x`, `float (*f)[4]`), or
//!   an array (`float x[]`, which C passes as a pointer);
//! - a value: only built-in arithmetic types (`int`, `unsigned long long`, `float`, `size_t`,
//!   `uint32_t`, ...) with qualifiers;
//! - unknown: anything else (a typedef, a struct, a macro, a reference), which the PTX's own type still
//!   checks by width and kind.
//!
//! Macros are not expanded. A name whose kernels disagree (two definitions under `#if`, overloads) is
//! unknown; so is a kernel the source does not show.

use crate::ptx::Pointer;

/// Kernels' names, each with whether each of its parameters is a pointer.
pub type Kernels = Vec<(String, Vec<Pointer>)>;

/// The kernels a C or CUDA C++ source declares or defines with `__global__`: each name with whether
/// each of its parameters is a pointer, in order. A name declared more than once with different
/// parameters is left out.
pub fn kernels(source: &str) -> Kernels {
    let toks = tokens(source);
    let mut found: Vec<(String, Option<Vec<Pointer>>)> = Vec::new();
    for (g, _) in toks.iter().enumerate().filter(|(_, t)| **t == "__global__") {
        let Some((name, params)) = prototype(&toks, g) else { continue };
        match found.iter_mut().find(|(n, _)| *n == name) {
            Some((_, earlier)) if earlier.as_ref() != Some(&params) => *earlier = None,
            Some(_) => {}
            None => found.push((name, Some(params))),
        }
    }
    found.into_iter().filter_map(|(n, p)| Some((n, p?))).collect()
}

/// The name and parameters of the `__global__` function whose `__global__` is `toks[at]`, unless it is
/// a template or cannot be read.
fn prototype(toks: &[&str], at: usize) -> Option<(String, Vec<Pointer>)> {
    // A template's declaration starts after the last `;`, `{` or `}` before `__global__`.
    let start = toks[..at].iter().rposition(|t| matches!(*t, ";" | "{" | "}")).map_or(0, |s| s + 1);
    if toks[start..at].contains(&"template") {
        return None;
    }
    let mut i = at + 1;
    let name = loop {
        let t = *toks.get(i)?;
        match t {
            ";" | "{" | "}" | "(" | ")" => return None,
            "[" if toks.get(i + 1) == Some(&"[") => i = close(toks, i + 1, "[", "]")? + 2, // [[attribute]]
            _ if word(t) && toks.get(i + 1) == Some(&"(") => {
                if t.starts_with("__") || t == "alignas" {
                    i = close(toks, i + 1, "(", ")")? + 1; // __launch_bounds__(256), __attribute__((...))
                } else {
                    break t;
                }
            }
            _ => i += 1,
        }
    };
    let open = i + 1;
    let end = close(toks, open, "(", ")")?;
    let inside = &toks[open + 1..end];
    if inside.is_empty() || inside == ["void"] {
        return Some((name.to_string(), Vec::new()));
    }
    let mut params = Vec::new();
    let mut depth = 0i32;
    let mut from = 0;
    for (k, t) in inside.iter().enumerate() {
        match *t {
            "(" | "[" | "<" | "{" => depth += 1,
            ")" | "]" | ">" | "}" => depth -= 1,
            "," if depth == 0 => {
                params.push(classify(&inside[from..k]));
                from = k + 1;
            }
            _ => {}
        }
    }
    params.push(classify(&inside[from..]));
    Some((name.to_string(), params))
}

/// The index of the bracket that closes the one at `toks[at]`.
fn close(toks: &[&str], at: usize, open: &str, shut: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(at) {
        if *t == open {
            depth += 1;
        } else if *t == shut {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(k);
            }
        }
    }
    None
}

/// The words a value's type may be made of, qualifiers included.
const ARITHMETIC: [&str; 38] = [
    "const",
    "volatile",
    "signed",
    "unsigned",
    "char",
    "short",
    "int",
    "long",
    "float",
    "double",
    "bool",
    "_Bool",
    "size_t",
    "ptrdiff_t",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "intptr_t",
    "uintptr_t",
    "uint",
    "ushort",
    "ulong",
    "std",
    "::",
    "__restrict__",
    "restrict",
    "__restrict",
    "__grid_constant__",
    "char16_t",
    "char32_t",
    "wchar_t",
    "long_long",
    "register",
];

/// One parameter: `const float* __restrict__ x` is a pointer, `unsigned long long n` a value.
fn classify(param: &[&str]) -> Pointer {
    // A default argument is not part of the type.
    let param = param.iter().position(|t| *t == "=").map_or(param, |e| &param[..e]);
    let mut angle = 0i32;
    for t in param {
        match *t {
            "<" => angle += 1,
            ">" => angle -= 1,
            "*" | "[" if angle == 0 => return Pointer::Yes,
            _ => {}
        }
    }
    let words: Vec<&&str> = param.iter().filter(|t| word(t) || **t == "::").collect();
    if words.len() != param.len() || words.is_empty() {
        return Pointer::Unknown; // a reference, a template, ...
    }
    // Every word but the parameter's name (the last, where there is one) is arithmetic.
    let ty = match words.split_last() {
        Some((last, rest)) if !ARITHMETIC.contains(last) => rest,
        _ => &words[..],
    };
    if !ty.is_empty() && ty.iter().all(|w| ARITHMETIC.contains(w)) && ty.iter().any(|w| !QUALIFIER.contains(w)) {
        Pointer::No
    } else {
        Pointer::Unknown
    }
}

const QUALIFIER: [&str; 9] =
    ["const", "volatile", "register", "std", "::", "__restrict__", "restrict", "__restrict", "__grid_constant__"];

fn word(t: &str) -> bool {
    t.bytes().next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
}

/// The source as tokens: identifiers and numbers, `::`, and single marks; comments, literals and
/// preprocessor lines dropped (a literal becomes `""`, so that `extern "C"` stays two tokens).
fn tokens(src: &str) -> Vec<&str> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'#' && line_start {
            // To the end of the line, and of each line a backslash continues.
            while i < b.len() && !(b[i] == b'\n' && (i == 0 || b[i - 1] != b'\\')) {
                i += 1;
            }
            continue;
        }
        line_start = false;
        if b[i..].starts_with(b"//") {
            i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
        } else if b[i..].starts_with(b"/*") {
            i = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c && b[i] != b'\n' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push("\"\"");
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(&src[start..i]);
        } else if b[i..].starts_with(b"::") {
            out.push("::");
            i += 2;
        } else {
            // One character (a multi-byte one whole, so that slicing stays on a boundary).
            let len = src[i..].chars().next().map_or(1, char::len_utf8);
            out.push(&src[i..i + len]);
            i += len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use Pointer::{No, Unknown, Yes};

    fn one(src: &str) -> Vec<Pointer> {
        let k = kernels(src);
        assert_eq!(k.len(), 1, "{k:?}");
        k.into_iter().next().unwrap().1
    }

    #[test]
    fn pointers_and_values() {
        assert_eq!(
            one("extern \"C\" __global__ void saxpy(const float* x, float* y, float a, unsigned long long n) {}"),
            [Yes, Yes, No, No]
        );
        assert_eq!(
            one("extern \"C\" __global__ void __launch_bounds__(256, 2) k(float * __restrict__ out, const int n, \
                 size_t m, float v[], double (*rows)[4], MyStruct s, cudaTextureObject_t t, std::uint32_t u)"),
            [Yes, No, No, Yes, Yes, Unknown, Unknown, No]
        );
        assert_eq!(one("__global__ void k(void) {}"), []);
        assert_eq!(one("__global__ void k() {}"), []);
        assert_eq!(one("static __global__ void k(int, float*, unsigned) {}"), [No, Yes, No], "unnamed parameters");
        assert_eq!(
            one("void __global__ k(Pair<int*, float> p, int& r, REAL x, unsigned long n = 4)"),
            [Unknown, Unknown, Unknown, No]
        );
        assert_eq!(
            one("__global__ void __attribute__((noinline)) k(__grid_constant__ const Params p, char c)"),
            [Unknown, No]
        );
    }

    #[test]
    fn what_is_not_code_is_not_read() {
        let src = r#"
// __global__ void k(int a, int b, int c)
/* __global__ void k(int a) */
#define K __global__ void k(float x)
#if 0
#endif
const char* s = "__global__ void k(double d)";
char q = '"';
extern "C" {
__global__ void k(float* data,   // the data
                  unsigned long long n) {
    if (n > 0) { data[0] = 1.0f; }
}
}
template <typename T> __global__ void t(T* x, int n) {}
__global__ void d(float* x);
__global__ void d(float* y) {}
__global__ void both(int x);
__global__ void both(int* x) {}
"#;
        let k = kernels(src);
        let names: Vec<&str> = k.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["k", "d"], "the template and the kernel declared two ways are left out");
        assert_eq!(k[0].1, [Yes, No]);
        assert_eq!(k[1].1, [Yes], "a declaration and its definition agree");
    }

    #[test]
    fn nothing_panics_on_odd_text() {
        for src in [
            "__global__",
            "__global__ void",
            "__global__ void k(",
            "__global__ void k(int a",
            "\"",
            "'",
            "é __global__ void é(é)",
            "#",
            "/*",
            "__global__ void k(,,)",
        ] {
            let _ = kernels(src);
        }
        let cu = include_str!("../tests/kernels.cu");
        for end in (0..cu.len()).filter(|&e| cu.is_char_boundary(e)) {
            let _ = kernels(&cu[..end]);
        }
    }
}
