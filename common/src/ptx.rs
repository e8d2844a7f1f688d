//! A reading of PTX text that is PTX's own: its kernels (`.entry`) and their parameters, as ptxas
//! reads them, for checking a launch's arguments by kind (integer, float, bytes; pointer or value).
//!
//! The text is never the authority on how many parameters a kernel takes, nor on their sizes: the
//! compiled cubin is ([`crate::cubin`]), and a kernel whose text and cubin disagree is refused
//! ([`crate::module`]). This reading must still be exact, so that it agrees with the cubin on every
//! kernel ptxas accepts, and it is held to that by a differential test against ptxas 13.0 over
//! thousands of generated kernels (`common/tests/ptx_differential.rs`). What it knows of PTX's
//! lexical rules, each checked against ptxas 13.0:
//!
//! - whitespace is space, TAB, newline, carriage return and form feed (ptxas refuses a vertical tab);
//! - `// ...` ends at a newline only (a lone carriage return does not end it), `/* ... */` does not
//!   nest, and an unterminated one is an error;
//! - a string runs from `"` to the next `"`, across newlines, with no escapes (`"a\"` is the string
//!   `a\`), so that neither comment marker nor `.entry` inside a `.file` name is code;
//! - every character is ASCII (ptxas refuses any other, even in comments);
//! - a directive may follow another with no space between (`.param.u64`, `.ptr.global.align 4`), or a
//!   number (`0x8.u64`, `8U.u64`), but not decimal digits, which with the dot are a float (`8.u64`).
//!
//! Kernels: `.entry NAME`, after `.visible`, `.weak` or `.extern` or none, with or without a
//! parameter list, then performance directives (`.maxntid`, `.reqntid`, `.minnctapersm`, `.maxnreg`,
//! `.maxclusterrank`, `.reqnctapercluster`, `.explicitcluster`, `.blocksareclusters`, any other
//! directive with a list of integers) and `.pragma "...";`, then a body, or `;` for a declaration. A
//! declaration and the definition it announces are one kernel (with the same parameters, or the
//! kernel is refused); a name defined twice, or declared and never defined, is refused. `.func`
//! bodies, declarations and `.entry`-like text inside any braces are not kernels.
//!
//! Parameters: `.param`, any number of `.align N` (the largest applies, at least the type's own),
//! a type (`.u8` to `.u64`, `.s8` to `.s64`, `.b8` to `.b64`, `.b128`, `.f16`, `.f32`, `.f64`), then
//! optionally `.ptr` with a state space (`.global`, `.const`, `.local`, `.shared`: the 580 driver
//! compiles the last two and then will not load the module, which `Gpu::load_ptx` then says) and a pointee's
//! `.align N`, or a pointee's `.align N` alone (which ptxas takes as the pointee's, not the
//! parameter's), a name, and optionally an array length (`[16]`, in decimal, hex, octal or binary).
//! Refused as unsupported, though ptxas accepts them: `.texref`, `.surfref` and `.samplerref`
//! parameters (and `.ptr` to them), a parameter with the name of such a parameter of any kernel of the
//! module (ptxas 13.0 compiles a `.param .b16 p1` before a kernel's `.param .texref p1` to 52 bytes),
//! `.ptr` on an array or on anything but a 64-bit integer, and any PTX with a `#` line marker. A kernel whose parameters this cannot read is refused, never guessed.

/// What a parameter holds, for matching an argument to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// An integer (`.u`, `.s` or `.b` of 8 to 64 bits): an integer value or a pointer.
    Int,
    /// A floating-point number (`.f16`, `.f32`, `.f64`).
    Float,
    /// Bytes with no single scalar type: an array (`.b8 x[16]`, the form nvcc gives a struct passed by
    /// value) or a `.b128`.
    Bytes,
}

/// Whether a parameter is a pointer: declared `.ptr` in the PTX, or said so by the kernel's C
/// prototype. nvcc marks no pointer `.ptr`, so without a prototype most are [`Pointer::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pointer {
    /// A pointer: a launch must pass a device view.
    Yes,
    /// A value, by the kernel's prototype: a launch must not pass a device view.
    No,
    /// Not known: either may be passed.
    Unknown,
}

/// A parameter as the PTX text declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextParam {
    /// Its name in the PTX.
    pub name: String,
    /// Its type, as PTX spells it: `.u64`, `.f32`, `.b8[16]`.
    pub ty: String,
    /// Its type with `.ptr` and state space where declared, for messages: `.u64 .ptr .global`.
    pub ptx: String,
    /// Its size in bytes.
    pub size: u32,
    /// Its alignment in the parameter space: its `.align` where larger than the type's own size.
    pub align: u32,
    /// What it holds.
    pub class: Class,
    /// Declared `.ptr`.
    pub ptr: bool,
}

/// A kernel the PTX defines, with its parameters, or why they cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The kernel's name, as the driver knows it.
    pub name: String,
    /// Its parameters, in order, or why it is refused.
    pub params: Result<Vec<TextParam>, String>,
}

/// Every kernel of a PTX text, in the order of their first mention, or why the text cannot be read
/// at all (a character or construct ptxas refuses, or that this reading does not support).
pub fn entries(ptx: &str) -> Result<Vec<Entry>, String> {
    let toks = tokens(ptx)?;
    let mut headers: Vec<Header> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match toks[i].tok {
            Tok::Punct(b'{') => depth += 1,
            Tok::Punct(b'}') => {
                depth = depth.checked_sub(1).ok_or_else(|| format!("line {}: a }} without its {{", toks[i].line))?
            }
            Tok::Word(".entry") if depth == 0 => {
                let (header, next) = header(&toks, i)?;
                headers.push(header);
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if depth != 0 {
        return Err("a { without its } before the end of the text".into());
    }
    let mut names: Vec<&str> = Vec::new();
    for h in &headers {
        if !names.contains(&h.name.as_str()) {
            names.push(&h.name);
        }
    }
    // ptxas 13.0 compiles a parameter named as a `.texref` or `.surfref` parameter of a kernel after it
    // to another size than it declares (52 bytes for a `.b16`): such a kernel is refused.
    let opaque: Vec<(&str, &str)> =
        headers.iter().flat_map(|h| h.opaque.iter().map(|p| (p.as_str(), h.name.as_str()))).collect();
    Ok(names
        .into_iter()
        .map(|name| {
            let all: Vec<&Header> = headers.iter().filter(|h| h.name == name).collect();
            let params = merge(&all).and_then(|params| {
                match params.iter().find_map(|p| opaque.iter().find(|(o, _)| *o == p.name)) {
                    Some((p, kernel)) => Err(format!(
                        "its parameter {p} has the name of an opaque (.texref, .surfref) parameter of kernel {kernel}, \
                         which ptxas 13.0 can compile to another size than it declares (unsupported)"
                    )),
                    None => Ok(params),
                }
            });
            Entry { name: name.to_string(), params }
        })
        .collect())
}

/// One `.entry` header: a declaration or a definition.
struct Header {
    name: String,
    line: u32,
    params: Result<Vec<TextParam>, String>,
    defined: bool,
    /// The names of its `.texref`, `.surfref` and `.samplerref` parameters (and pointers to them).
    opaque: Vec<String>,
}

/// A declaration and the definition it announces are one kernel, with the same parameters.
fn merge(all: &[&Header]) -> Result<Vec<TextParam>, String> {
    let lines = |hs: &[&&Header]| hs.iter().map(|h| h.line.to_string()).collect::<Vec<_>>().join(", ");
    let defs: Vec<&&Header> = all.iter().filter(|h| h.defined).collect();
    let decls: Vec<&&Header> = all.iter().filter(|h| !h.defined).collect();
    let def = match defs.as_slice() {
        [def] => def,
        [] => return Err(format!("the PTX declares it (line {}) but does not define it", lines(&decls))),
        _ => return Err(format!("the PTX defines it {} times (lines {})", defs.len(), lines(&defs))),
    };
    let params = def.params.clone()?;
    let unnamed = |ps: &[TextParam]| ps.iter().map(|p| (p.ptx.clone(), p.size, p.align)).collect::<Vec<_>>();
    for decl in decls {
        match &decl.params {
            Ok(ps) if unnamed(ps) == unnamed(&params) => {}
            Ok(_) => {
                return Err(format!(
                    "its declaration (line {}) and its definition (line {}) declare different parameters",
                    decl.line, def.line
                ))
            }
            Err(why) => return Err(format!("its declaration (line {}): {why}", decl.line)),
        }
    }
    Ok(params)
}

/// The `.entry` header at `toks[at]`, and the index of the token after it (its body's `{`, which the
/// caller steps into, or after its `;`).
fn header(toks: &[Token<'_>], at: usize) -> Result<(Header, usize), String> {
    let line = toks[at].line;
    let name = match toks.get(at + 1).map(|t| t.tok) {
        Some(Tok::Word(w)) if identifier(w) => w.to_string(),
        _ => return Err(format!("line {line}: .entry without a kernel name after it")),
    };
    let mut j = at + 2;
    let mut opaque = Vec::new();
    let params = if toks.get(j).map(|t| t.tok) == Some(Tok::Punct(b'(')) {
        let close = (j + 1..toks.len())
            .find(|&k| matches!(toks[k].tok, Tok::Punct(b')' | b'(' | b'{' | b'}' | b';')))
            .filter(|&k| toks[k].tok == Tok::Punct(b')'))
            .ok_or_else(|| format!("line {line}: kernel {name}'s parameter list does not close"))?;
        let params = parameters(&toks[j + 1..close]);
        for decl in toks[j + 1..close].split(|t| t.tok == Tok::Punct(b',')) {
            let words = || decl.iter().filter_map(|t| if let Tok::Word(w) = t.tok { Some(w) } else { None });
            if words().any(|w| OPAQUE.contains(&w)) {
                opaque.extend(words().rfind(|w| identifier(w)).map(String::from));
            }
        }
        j = close + 1;
        params
    } else {
        Ok(Vec::new())
    };
    loop {
        let Some(t) = toks.get(j) else {
            return Err(format!("line {line}: kernel {name} has neither a body nor a `;`"));
        };
        match t.tok {
            Tok::Punct(b'{') => return Ok((Header { name, line, params, defined: true, opaque }, j)),
            Tok::Punct(b';') => return Ok((Header { name, line, params, defined: false, opaque }, j + 1)),
            Tok::Word(".pragma") => {
                j += 1;
                while matches!(toks.get(j).map(|t| t.tok), Some(Tok::Str(_))) {
                    j += 1;
                    if toks.get(j).map(|t| t.tok) == Some(Tok::Punct(b',')) {
                        j += 1;
                    }
                }
                if toks.get(j).map(|t| t.tok) != Some(Tok::Punct(b';')) {
                    return Err(format!("line {}: a .pragma of kernel {name} without its `;`", t.line));
                }
                j += 1;
            }
            // A performance directive, with its integers: `.maxntid 256, 1, 1`, `.explicitcluster`.
            Tok::Word(w) if w.starts_with('.') => {
                j += 1;
                while toks.get(j).is_some_and(|t| matches!(t.tok, Tok::Word(n) if integer(n).is_some())) {
                    j += 1;
                    if toks.get(j).map(|t| t.tok) == Some(Tok::Punct(b',')) {
                        j += 1;
                    }
                }
            }
            other => {
                return Err(format!("line {}: {} after kernel {name}'s parameters, where PTX has none", t.line, other))
            }
        }
    }
}

/// The parameters between a kernel's parentheses.
fn parameters(toks: &[Token<'_>]) -> Result<Vec<TextParam>, String> {
    if toks.is_empty() {
        return Ok(Vec::new());
    }
    toks.split(|t| t.tok == Tok::Punct(b',')).map(parameter).collect()
}

/// The types a kernel parameter may have: size in bytes and class.
fn scalar(ty: &str) -> Option<(u32, Class)> {
    Some(match ty {
        ".u8" | ".s8" | ".b8" => (1, Class::Int),
        ".u16" | ".s16" | ".b16" => (2, Class::Int),
        ".u32" | ".s32" | ".b32" => (4, Class::Int),
        ".u64" | ".s64" | ".b64" => (8, Class::Int),
        ".b128" => (16, Class::Bytes),
        ".f16" => (2, Class::Float),
        ".f32" => (4, Class::Float),
        ".f64" => (8, Class::Float),
        _ => return None,
    })
}

const OPAQUE: [&str; 3] = [".texref", ".surfref", ".samplerref"];

/// One `.param ...` declaration.
fn parameter(toks: &[Token<'_>]) -> Result<TextParam, String> {
    let decl = toks.iter().map(|t| t.tok.to_string()).collect::<Vec<_>>().join(" ");
    let cannot = |why: &str| format!("its parameter `{decl}` {why}");
    let toks: Vec<Tok<'_>> = toks.iter().map(|t| t.tok).collect();
    let mut at = 0;
    let peek = |at: usize| toks.get(at).copied();
    if peek(at) != Some(Tok::Word(".param")) {
        return Err(cannot("is not a .param"));
    }
    at += 1;
    // The number after an `.align` at `at`.
    let alignment = |at: usize| -> Result<u32, String> {
        match peek(at + 1) {
            Some(Tok::Word(n)) => match integer(n) {
                Some(a) if a.is_power_of_two() && a <= 1 << 16 => Ok(a as u32),
                _ => Err(cannot(&format!("has an alignment, {n}, that is not a power of two up to 65536"))),
            },
            _ => Err(cannot("has an .align without its number")),
        }
    };
    let mut align = 1;
    while peek(at) == Some(Tok::Word(".align")) {
        align = align.max(alignment(at)?);
        at += 2;
    }
    let ty = match peek(at) {
        Some(Tok::Word(t)) if OPAQUE.contains(&t) => {
            return Err(cannot(&format!("is a {t}, which a launch cannot pass (unsupported)")))
        }
        Some(Tok::Word(t)) if scalar(t).is_some() => t,
        Some(t) => return Err(cannot(&format!("has `{t}` where its type should be"))),
        None => return Err(cannot("has no type")),
    };
    at += 1;
    let (elem, mut class) = scalar(ty).unwrap_or((1, Class::Bytes));
    let mut ptx = ty.to_string();
    let mut ptr = false;
    match peek(at) {
        Some(Tok::Word(".ptr")) => {
            at += 1;
            ptr = true;
            ptx.push_str(" .ptr");
            match peek(at) {
                Some(Tok::Word(space @ (".global" | ".const" | ".local" | ".shared"))) => {
                    ptx.push(' ');
                    ptx.push_str(space);
                    at += 1;
                }
                Some(Tok::Word(t)) if OPAQUE.contains(&t) => {
                    return Err(cannot(&format!("points to a {t}, which a launch cannot pass (unsupported)")));
                }
                _ => {}
            }
            if peek(at) == Some(Tok::Word(".align")) {
                alignment(at)?; // the pointee's
                at += 2;
            }
        }
        Some(Tok::Word(".align")) => {
            // ptxas reads an .align after the type as the pointee's, as after .ptr: it moves nothing.
            alignment(at)?;
            at += 2;
        }
        _ => {}
    }
    let name = match peek(at) {
        Some(Tok::Word(n)) if identifier(n) => n.to_string(),
        Some(t) => return Err(cannot(&format!("has `{t}` where its name should be"))),
        None => return Err(cannot("has no name")),
    };
    at += 1;
    let mut size = elem;
    let mut ty = ty.to_string();
    if peek(at) == Some(Tok::Punct(b'[')) {
        let count = match (peek(at + 1), peek(at + 2)) {
            (Some(Tok::Word(n)), Some(Tok::Punct(b']'))) => integer(n).filter(|&c| c > 0),
            _ => None,
        };
        let Some(bytes) = count.and_then(|c| u32::try_from(c).ok()?.checked_mul(elem)).filter(|&b| b <= 1 << 20) else {
            return Err(cannot("has an array length this cannot read"));
        };
        at += 3;
        if ptr {
            return Err(cannot("is an array declared .ptr, which a launch cannot pass (unsupported)"));
        }
        ty = format!("{ty}[{}]", bytes / elem);
        ptx = ty.clone();
        size = bytes;
        class = Class::Bytes;
    }
    if let Some(t) = peek(at) {
        return Err(cannot(&format!("has `{t}` after its name, which this cannot read")));
    }
    if ptr && !(size == 8 && class == Class::Int) {
        return Err(cannot("is a .ptr that is not a 64-bit integer, which a launch cannot pass (unsupported)"));
    }
    Ok(TextParam { name, ty, ptx, size, align: align.max(elem), class, ptr })
}

/// A PTX identifier: a letter then letters, digits, `_` and `$`; or `_`, `$` or `%` then at least
/// one of those.
fn identifier(w: &str) -> bool {
    let b = w.as_bytes();
    match b.first() {
        Some(c) if c.is_ascii_alphabetic() => b.iter().all(|&c| ident_char(c) && c != b'%'),
        Some(b'_' | b'$' | b'%') => b.len() > 1 && b[1..].iter().all(|&c| ident_char(c) && c != b'%'),
        _ => false,
    }
}

/// An integer as PTX writes one: decimal, `0x` hex, `0b` binary or `0` octal, with an optional `U`.
pub(crate) fn integer(w: &str) -> Option<u64> {
    let w = w.strip_suffix('U').unwrap_or(w);
    if !w.bytes().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let (digits, radix) = if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = w.strip_prefix("0b").or_else(|| w.strip_prefix("0B")) {
        (b, 2)
    } else if w.len() > 1 && w.starts_with('0') {
        (&w[1..], 8)
    } else {
        (w, 10)
    };
    if digits.is_empty() {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    /// A directive (`.entry`), an identifier or a number: a run of `[A-Za-z0-9_$%]`, or one after a `.`.
    Word(&'a str),
    /// A string's contents, without its quotes.
    Str(&'a str),
    /// Any other ASCII mark.
    Punct(u8),
}

impl std::fmt::Display for Tok<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Word(w) => f.write_str(w),
            Tok::Str(s) => write!(f, "\"{s}\""),
            Tok::Punct(c) => write!(f, "{}", *c as char),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    line: u32,
}

fn ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'%')
}

/// The text as ptxas cuts it into tokens, comments and whitespace dropped.
fn tokens(text: &str) -> Result<Vec<Token<'_>>, String> {
    let b = text.as_bytes();
    let line_at = |i: usize| 1 + b[..i].iter().filter(|&&c| c == b'\n').count() as u32;
    if let Some(at) = b.iter().position(|c| !c.is_ascii()) {
        return Err(format!("line {}: a character that is not ASCII, which ptxas refuses", line_at(at)));
    }
    let mut out = Vec::new();
    let mut line = 1u32;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' | 0x0c => i += 1,
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..]
                    .find("*/")
                    .map(|e| i + 2 + e + 2)
                    .ok_or_else(|| format!("line {line}: a /* comment that does not end"))?;
                line += b[i..end].iter().filter(|&&c| c == b'\n').count() as u32;
                i = end;
            }
            b'"' => {
                let end = b[i + 1..]
                    .iter()
                    .position(|&c| c == b'"')
                    .map(|e| i + 1 + e)
                    .ok_or_else(|| format!("line {line}: a string that does not end"))?;
                out.push(Token { tok: Tok::Str(&text[i + 1..end]), line });
                line += b[i..end].iter().filter(|&&c| c == b'\n').count() as u32;
                i = end + 1;
            }
            b'#' => {
                return Err(format!("line {line}: a `#` line marker, which this reading does not support"));
            }
            _ if ident_char(c) || (c == b'.' && b.get(i + 1).is_some_and(|&n| ident_char(n))) => {
                let start = i;
                i += 1;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                // Decimal digits and a dot are a float to ptxas (`8.u64` is not `8 .u64`, as `0x8.u64` is).
                if b[start..i].iter().all(u8::is_ascii_digit) && b.get(i) == Some(&b'.') {
                    i += 1;
                    while i < b.len() && ident_char(b[i]) {
                        i += 1;
                    }
                }
                out.push(Token { tok: Tok::Word(&text[start..i]), line });
            }
            _ if c.is_ascii_graphic() => {
                out.push(Token { tok: Tok::Punct(c), line });
                i += 1;
            }
            _ => return Err(format!("line {line}: the control character {c:#04x}, which ptxas refuses")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Shape = (String, u32, u32);

    fn shapes(ptx: &str) -> Vec<(String, Result<Vec<Shape>, String>)> {
        entries(ptx)
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.params.map(|ps| ps.into_iter().map(|p| (p.ptx, p.size, p.align)).collect())))
            .collect()
    }

    fn counts(ptx: &str) -> Vec<(String, usize)> {
        entries(ptx).unwrap().into_iter().map(|e| (e.name, e.params.unwrap().len())).collect()
    }

    const HEAD: &str = ".version 9.0\n.target sm_90\n.address_size 64\n";

    #[test]
    fn parameters_of_every_form() {
        let ptx = format!(
            "{HEAD}.visible .entry k(.param .u64 a, .param .u64 .ptr .global .align 16 b, .param .f32 c, \
             .param .align 16 .b8 d[24], .param .u8 e, .param .s16 f, .param .f16 g, .param .b128 h, \
             .param .u32 i[3], .param .align 4 .align 32 .u16 j, .param .u64.ptr.const.align 4 l, \
             .param.b64 .ptr m, .param .u64 .align 8 n, .param .b8 o[0x10], .param .b8 p[010], .param .b8 q[0b11], \
             .param .b8 r[4U])\n{{ ret; }}"
        );
        let e = shapes(&ptx);
        assert_eq!(e.len(), 1);
        let want: Vec<(String, u32, u32)> = [
            (".u64", 8, 8),
            (".u64 .ptr .global", 8, 8),
            (".f32", 4, 4),
            (".b8[24]", 24, 16),
            (".u8", 1, 1),
            (".s16", 2, 2),
            (".f16", 2, 2),
            (".b128", 16, 16),
            (".u32[3]", 12, 4),
            (".u16", 2, 32),
            (".u64 .ptr .const", 8, 8),
            (".b64 .ptr", 8, 8),
            (".u64", 8, 8),
            (".b8[16]", 16, 1),
            (".b8[8]", 8, 1),
            (".b8[3]", 3, 1),
            (".b8[4]", 4, 1),
        ]
        .into_iter()
        .map(|(t, s, a)| (t.to_string(), s, a))
        .collect();
        assert_eq!(e[0].1.as_ref().unwrap(), &want);
        let p = entries(&ptx).unwrap().remove(0).params.unwrap();
        let classes: Vec<Class> = p.iter().map(|p| p.class).take(9).collect();
        use Class::*;
        assert_eq!(classes, [Int, Int, Float, Bytes, Int, Int, Float, Bytes, Bytes]);
        assert!(p[1].ptr && p[10].ptr && p[11].ptr && !p[0].ptr && !p[12].ptr);
        assert_eq!(p[3].ty, ".b8[24]");
        assert_eq!(p[1].ty, ".u64", "the type alone, without .ptr");
    }

    /// Every spoof of issue 24: comment markers and a fake `.entry` inside `.file` strings, a TAB or a
    /// newline after `.entry`. Each reading sees the kernel ptxas compiles (ptxas 13.0 compiles each).
    #[test]
    fn strings_comments_and_whitespace_are_read_as_ptxas_reads_them() {
        let block = format!(
            "{HEAD}.file 1 \"/*\"\n.visible .entry k(.param .u64 a, .param .u64 b)\n{{ ret; }}\n.file 2 \"*/\"\n"
        );
        assert_eq!(counts(&block), [("k".to_string(), 2)]);
        for ws in ["\t", "\n", "\r\n", " \x0c ", "/* c */", "//\n"] {
            let fake = format!(
                "{HEAD}.file 1 \".entry k(.param .u64 a)\"\n.visible .entry{ws}k(.param .u64 a, .param .u64 b)\n{{ ret; }}\n"
            );
            assert_eq!(counts(&fake), [("k".to_string(), 2)], "after .entry: {ws:?}");
        }
        // No escapes in PTX strings: `"a\"` is the string `a\`, and the kernel after it is code.
        let escape = format!("{HEAD}.file 1 \"a\\\"\n.entry k(.param .u8 x) {{ ret; }}\n");
        assert_eq!(counts(&escape), [("k".to_string(), 1)]);
        // A string runs over newlines; what it holds is not code.
        let long = format!("{HEAD}.file 1 \"a\n.entry j(.param .u8 x) {{ ret; }}\nb\"\n.entry k() {{ ret; }}\n");
        assert_eq!(counts(&long), [("k".to_string(), 0)]);
        // A lone carriage return does not end a // comment: ptxas compiles no kernel k here.
        let cr = format!("{HEAD}.entry j(.param .u8 x) {{ ret; }} // c\r.entry k(.param .u16 x) {{ ret; }}\n");
        assert_eq!(counts(&cr), [("j".to_string(), 1)]);
        // Comments do not nest; `.entry` inside one, or inside any braces, is not a kernel.
        let nested = format!(
            "{HEAD}/* /* */ .entry j(.param .u8 x) {{ .pragma \"}}\"; /* }} */ ret; }} // .entry k(.param .u8 y)\n"
        );
        assert_eq!(counts(&nested), [("j".to_string(), 1)]);
        let comments = format!("{HEAD}.entry j(.param/**/.u8/*(.param .u8 y),*/x)//(\n{{ ret; }}\n");
        assert_eq!(counts(&comments), [("j".to_string(), 1)]);
    }

    #[test]
    fn directives_declarations_and_functions() {
        // ptxas 13.0 compiles the first eight lines (it corrupts its heap on a .reqnctapercluster kernel
        // after some kernels with parameters, so those come first); the rest it refuses, as this does.
        let ptx = format!(
            "{HEAD}.entry c(.param .u8 x) .explicitcluster .reqnctapercluster 2, 1, 1 .pragma \"nounroll\"; {{ ret; }}\n\
             .entry d(.param .u8 x) .blocksareclusters .reqntid 32 .reqnctapercluster 2 {{ ret; }}\n\
             .extern .func (.param .b32 r) f(.param .b64 x);\n\
             .visible .func g(.param .b32 x) .noreturn {{ ret; }}\n\
             .global .u32 table[3] = {{1, 2, 3}};\n\
             .visible .entry a(.param .u32 x);\n\
             .visible .entry a(.param .u32 x) .maxntid 256, 1, 1 .minnctapersm 2 {{ ret; }}\n\
             .weak .entry b .reqntid 32 .maxnreg 40 .maxclusterrank 4 {{ ret; }}\n\
             .extern .entry e(.param .u8 x);\n\
             .entry twice(.param .u8 x) {{ ret; }}\n.entry twice(.param .u8 x) {{ ret; }}\n\
             .visible .entry differ(.param .u8 x);\n.visible .entry differ(.param .u16 x) {{ ret; }}\n"
        );
        let e = entries(&ptx).unwrap();
        let names: Vec<&str> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["c", "d", "a", "b", "e", "twice", "differ"], ".func f and g are not kernels");
        assert_eq!(e[0].params.as_ref().unwrap().len(), 1);
        assert_eq!(e[2].params.as_ref().unwrap().len(), 1, "a declaration and its definition are one kernel");
        assert_eq!(e[3].params, Ok(vec![]));
        assert!(e[4].params.as_ref().unwrap_err().contains("declares it (line 12) but does not define it"), "{e:?}");
        assert!(e[5].params.as_ref().unwrap_err().contains("defines it 2 times (lines 13, 14)"), "{e:?}");
        assert!(e[6].params.as_ref().unwrap_err().contains("declare different parameters"), "{e:?}");
    }

    /// ptxas 13.0 refuses a definition after an `.extern .entry` declaration of it ("conflicts with
    /// '.extern' declaration"); this reading takes them for one kernel all the same, never for two.
    #[test]
    fn an_extern_declaration_and_its_definition_are_one_kernel() {
        let ptx = format!("{HEAD}.extern .entry x(.param .u8 a);\n.visible .entry x(.param .u8 a) {{ ret; }}\n");
        assert_eq!(counts(&ptx), [("x".to_string(), 1)]);
        let ptx = format!(
            "{HEAD}.extern .entry x(.param .u8 a);\n.visible .entry x(.param .u8 a, .param .u8 b) {{ ret; }}\n"
        );
        assert!(entries(&ptx).unwrap()[0].params.as_ref().unwrap_err().contains("different parameters"));
    }

    #[test]
    fn what_is_refused_is_named() {
        let one = |params: &str| {
            let ptx = format!("{HEAD}.entry k({params}) {{ ret; }}");
            entries(&ptx).unwrap().remove(0).params.unwrap_err()
        };
        assert!(one(".param .texref t").contains("is a .texref, which a launch cannot pass (unsupported)"));
        assert!(one(".param .surfref t").contains("unsupported"));
        assert!(one(".param .u64 .ptr .texref t").contains("points to a .texref"));
        assert!(one(".param .u64 .ptr x[3]").contains("an array declared .ptr"));
        // ptxas 13.0 compiles b's p1 to 52 bytes, as a's .texref is named p1 too.
        let named = format!(
            "{HEAD}.entry b(.param .b16 p1, .param .u8 q) {{ ret; }}\n.entry a(.param .texref p1) {{ ret; }}\n"
        );
        let e = entries(&named).unwrap();
        assert!(
            e[0].params
                .as_ref()
                .unwrap_err()
                .contains("its parameter p1 has the name of an opaque (.texref, .surfref) parameter of kernel a"),
            "{e:?}"
        );
        assert!(one(".param .u32 .ptr x").contains("not a 64-bit integer"));
        assert!(one(".param .bf16 x").contains("has `.bf16` where its type should be"));
        assert!(one(".param .align 3 .u32 x").contains("not a power of two"));
        assert!(one(".param .u32 x[2][2]").contains("has `[` after its name"));
        assert!(one(".reg .u32 x").contains("is not a .param"));
        assert!(one(".param .u32 x,").contains("is not a .param"), "an empty parameter");
        assert!(one(".param .b8 x[0]").contains("array length"));
        assert!(one(".param .b8 x[99999999999]").contains("array length"));
        let whole = |ptx: &str| entries(&format!("{HEAD}{ptx}")).unwrap_err();
        assert!(whole("#line 5 \"x.cu\"\n.entry k() { ret; }").contains("`#` line marker"));
        assert!(whole(".entry k() { ret; } /* open").contains("does not end"));
        assert!(whole(".file 1 \"open\n.entry k() { ret; }").contains("string that does not end"));
        assert!(whole(".entry\x0bk() { ret; }").contains("control character 0x0b"));
        assert!(whole(".entry k() { ret; } // é").contains("line 4: a character that is not ASCII"));
        assert!(whole(".entry k( { ret; }").contains("parameter list does not close"));
        assert!(whole(".entry k() { ret; ").contains("a { without its }"));
        assert!(whole(".entry k() { ret; } }").contains("a } without its {"));
        assert!(whole(".entry (.param .u32 r) k() { ret; }").contains(".entry without a kernel name"));
        assert!(whole(".entry k() .maxntid 32 x { ret; }").contains("x after kernel k's parameters"));
        assert!(whole(".entry k()").contains("neither a body nor a `;`"));
        assert!(one(".param .align 8.u64 x").contains("alignment, 8.u64, that"), "a float to ptxas, which refuses it");
        assert!(one(".param .align 010.u64 x").contains("alignment, 010.u64, that"));
        assert_eq!(
            shapes(&format!("{HEAD}.entry k(.param .align 0x10.u64 x, .param .align 8U.u8 y) {{ ret; }}"))[0].1,
            Ok(vec![(".u64".into(), 8, 16), (".u8".into(), 1, 8)])
        );
    }

    #[test]
    fn integers_and_identifiers_as_ptx_writes_them() {
        assert_eq!(integer("16"), Some(16));
        assert_eq!(integer("0x1F"), Some(31));
        assert_eq!(integer("010"), Some(8));
        assert_eq!(integer("0b101"), Some(5));
        assert_eq!(integer("16U"), Some(16));
        assert_eq!(integer("0"), Some(0));
        for bad in ["", "0x", "08", "1.5", "+5", "x"] {
            assert_eq!(integer(bad), None, "{bad}");
        }
        for good in ["k", "$k", "%k", "_Z3fooPf", "k$2", "__k"] {
            assert!(identifier(good), "{good}");
        }
        for bad in ["_", "$", "5k", ".k", "k%"] {
            assert!(!identifier(bad), "{bad}");
        }
    }

    #[test]
    fn nothing_panics_on_any_prefix_of_a_real_module() {
        let ptx = include_str!("../tests/ptx/kernels.ptx");
        for end in (0..ptx.len()).step_by(7) {
            let _ = entries(&ptx[..end]);
        }
        let names: Vec<String> = entries(ptx).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["saxpy", "busy", "fault"]);
    }
}
