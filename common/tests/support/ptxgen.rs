//! Seeded PTX that ptxas 13.0 compiles, in every form `cuda_scope::ptx` reads (and those it refuses as
//! unsupported), each kernel with the parameters it means: for the differential test against ptxas
//! (`ptx_differential.rs`) and the driver (`launch.rs`).
//!
//! Each file mixes, wherever PTX allows them: whitespace of every kind (space, TAB, newline, CR LF,
//! form feed, comments of both kinds), `.file` names and comments holding comment markers, braces and
//! fake `.entry` headers of the file's own kernels, `.func` declarations and definitions, globals,
//! declarations of kernels before their definitions, `.visible`/`.weak`/no linkage, performance
//! directives and `.pragma`s, nested braces in bodies; parameters of every scalar type, `.align`s
//! (several, up to 256), `.ptr` with and without state spaces and pointee alignments, arrays (in
//! decimal, hex, octal and binary, up to 5 KiB so that ptxas writes its second record form), and the
//! forms `cuda_scope::ptx` refuses (`.texref`, `.surfref`, `.ptr .texref`, `.ptr` on a 32-bit integer or
//! an array).
//!
//! Two constraints of ptxas 13.0 the generator keeps: `.reqnctapercluster` only on a file's first
//! kernel (ptxas corrupts its heap, a double free or a crash, on one that follows a kernel with some
//! parameter lists), and never with `.maxclusterrank` (which ptxas refuses).

/// What the generator means one kernel to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Its parameters' sizes and alignments, in order.
    Params(Vec<(u32, u32)>),
    /// Refused by `cuda_scope::ptx`, with this in the reason.
    Refused(&'static str),
}

/// One kernel of a generated file.
#[derive(Clone, Debug)]
pub struct Variant {
    pub name: String,
    pub expect: Expect,
}

/// A generated PTX file and the kernels it defines.
pub struct File {
    pub ptx: String,
    pub target: &'static str,
    pub kernels: Vec<Variant>,
}

/// SplitMix64: a seeded sequence with no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

/// Whitespace where PTX needs some between two tokens.
fn ws(r: &mut Rng) -> String {
    let fixed = [
        " ",
        " ",
        " ",
        "\t",
        "\n",
        "\r\n",
        " \r ",
        "  \t ",
        "\x0c",
        " /* c */ ",
        "/**/",
        "/*\n.entry fake() {\n*/",
        " // ) , .entry fake(\n",
        // A lone CR does not end a // comment: the fake kernel is not code.
        " // c\r.entry fake(.param .u8 a) { ret; }\n",
    ];
    let mut out = r.pick(&fixed).to_string();
    if r.chance(10) {
        out.push_str(r.pick(&fixed));
    }
    out
}

/// Whitespace or none, where PTX needs none (around punctuation, or between two directives).
fn ows(r: &mut Rng) -> String {
    if r.chance(50) {
        String::new()
    } else {
        ws(r)
    }
}

/// An integer as PTX may write it.
fn number(r: &mut Rng, n: u32) -> String {
    match r.below(8) {
        0 => format!("{n:#x}"),
        1 => format!("0X{n:X}"),
        2 if n > 0 => format!("0{n:o}"),
        3 => format!("{n:#b}"),
        4 => format!("{n}U"),
        _ => n.to_string(),
    }
}

/// A number in `lo..lo + n`, written as PTX may write it.
fn some(r: &mut Rng, lo: u32, n: usize) -> String {
    let v = lo + r.below(n) as u32;
    number(r, v)
}

/// A power of two below `2^n`, written as PTX may write it.
fn power(r: &mut Rng, n: usize) -> String {
    let v = 1 << r.below(n);
    number(r, v)
}

/// Text that is not code: the markers and headers a careless reading would take for code.
fn bait(r: &mut Rng, names: &[String]) -> String {
    let name = if names.is_empty() { "k".to_string() } else { names[r.below(names.len())].clone() };
    let pieces = [
        "/*".to_string(),
        "*/".to_string(),
        "//".to_string(),
        format!(".entry {name}(.param .u64 a)"),
        format!(".visible .entry\t{name}(.param .u8 a, .param .u8 b) {{ ret; }}"),
        "{".to_string(),
        "}".to_string(),
        "(".to_string(),
        ")".to_string(),
        ";".to_string(),
        "\\".to_string(),
        "\n".to_string(),
        ".param .u64 x,".to_string(),
        "$%_".to_string(),
    ];
    let n = 1 + r.below(4);
    let chosen: Vec<String> = (0..n).map(|_| pieces[r.below(pieces.len())].clone()).collect();
    chosen.join(if r.chance(50) { " " } else { "" })
}

/// Something between kernels that is not a kernel.
fn filler(r: &mut Rng, names: &[String], serial: &mut u32) -> String {
    *serial += 1;
    let n = *serial;
    match r.below(9) {
        0 => format!("// {}\n", bait(r, names).replace('\n', " ")),
        1 => format!("/* {} */", bait(r, names).replace("*/", "* /")),
        2 => format!(".file{}{n}{}\"{}\"\n", ws(r), ws(r), bait(r, names).replace('"', "'")),
        3 => format!(".file {n} \"{}\", 1234, 567\n", bait(r, names).replace('"', "'")),
        4 => format!(".global .u32 g{n}[3] = {{1, 2, 3}};\n"),
        5 => format!(".const .align 8 .b8 c{n}[16];\n"),
        6 => format!(".visible .func f{n}(.param .b32 x){}{{ ret; }}\n", ows(r)),
        7 => format!(".extern .func (.param .b32 r) e{n}(.param .b64 x);\n"),
        _ => format!(".visible .func (.param .b32 r) h{n}(.param .b32 x) {{ st.param.b32 [r], 0; ret; }}\n"),
    }
}

const SCALARS: [(&str, u32); 16] = [
    (".u8", 1),
    (".s8", 1),
    (".b8", 1),
    (".u16", 2),
    (".s16", 2),
    (".b16", 2),
    (".f16", 2),
    (".u32", 4),
    (".s32", 4),
    (".b32", 4),
    (".f32", 4),
    (".u64", 8),
    (".s64", 8),
    (".b64", 8),
    (".f64", 8),
    (".b128", 16),
];

/// A generated parameter: its text, its name, and its size and alignment or the refusal it means.
type Generated = (String, String, Result<(u32, u32), &'static str>);

/// One parameter named `name` (or, if opaque, mostly `unique`): its text, its name, and its size and
/// alignment (or the refusal it means).
fn param(r: &mut Rng, (name, unique): (&str, &str), room: &mut u32, refused_forms: bool) -> Generated {
    let (ty, elem) = r.pick(&SCALARS);
    let mut text = format!(".param{}", ows(r));
    let mut align = elem;
    if r.chance(25) {
        for _ in 0..1 + r.below(2) {
            let a = 1u32 << r.below(9);
            align = align.max(a);
            text += &format!(".align{}{}{}", ws(r), number(r, a), ws(r)); // `8.u64` is a float to ptxas
        }
    }
    if refused_forms && r.chance(3) {
        // Forms ptxas accepts that a launch cannot pass.
        let (form, why) = r.pick(&[
            (".texref", "is a .texref"),
            (".surfref", "is a .surfref"),
            (".u64 .ptr .texref", "points to a .texref"),
            (".u32 .ptr .global", "not a 64-bit integer"),
            (".b64 .ptr", "an array declared .ptr"),
        ]);
        let array = if why.contains("array") { "[2]" } else { "" };
        let name = if r.chance(95) { unique } else { name };
        return (format!("{text}{form}{}{name}{array}", ws(r)), name.to_string(), Err(why));
    }
    text += ty;
    let size;
    if elem == 8 && ty != ".f64" && r.chance(30) {
        text += &format!("{}.ptr", ows(r));
        if r.chance(70) {
            let spaces: &[&str] =
                if refused_forms { &[".global", ".const", ".local", ".shared"] } else { &[".global", ".const"] };
            text += &format!("{}{}", ows(r), r.pick(spaces));
        }
        if r.chance(40) {
            text += &format!("{}.align{}{}", ows(r), ws(r), power(r, 5));
        }
        text += &format!("{}{name}", ws(r));
        size = 8;
    } else {
        if r.chance(8) {
            text += &format!("{}.align{}{}", ows(r), ws(r), power(r, 5)); // the pointee's
        }
        text += &format!("{}{name}", ws(r));
        if r.chance(30) {
            let big = *room > 6000 && r.chance(5);
            let count = if big { 5000 / elem } else { 1 + r.below(24) as u32 };
            text += &format!("{}[{}{}{}]", ows(r), ows(r), number(r, count), ows(r));
            size = count * elem;
        } else {
            size = elem;
        }
    }
    *room = room.saturating_sub(size + align);
    (text, name.to_string(), Ok((size, align)))
}

/// A kernel's performance directives, legal for `target`.
fn directives(r: &mut Rng, target: &str, first: bool) -> String {
    let mut d = Vec::new();
    let dims = |r: &mut Rng, max: u32| -> String {
        let x = 1 + r.below(max as usize) as u32;
        match r.below(3) {
            0 => number(r, x),
            1 => format!("{},{}{}", number(r, x), ows(r), 1),
            _ => format!("{}{},{}1,{}1", number(r, x), ows(r), ows(r), ows(r)),
        }
    };
    let cluster = target == "sm_90";
    if cluster && first && r.chance(30) {
        if r.chance(50) {
            d.push(".blocksareclusters".to_string());
            d.push(format!(".reqntid{}{}", ws(r), number(r, 32)));
        } else if r.chance(50) {
            d.push(".explicitcluster".to_string());
        }
        d.push(format!(".reqnctapercluster{}{}", ws(r), dims(r, 4)));
        return d.join(&ws(r));
    }
    match r.below(4) {
        0 => d.push(format!(".maxntid{}{}", ws(r), dims(r, 1024))),
        1 => d.push(format!(".reqntid{}{}", ws(r), dims(r, 1024))),
        _ => {}
    }
    if r.chance(20) {
        d.push(format!(".minnctapersm{}{}", ws(r), some(r, 1, 4)));
    }
    if r.chance(20) {
        d.push(format!(".maxnreg{}{}", ws(r), some(r, 32, 200)));
    }
    if cluster && r.chance(15) {
        if r.chance(50) {
            d.push(".explicitcluster".to_string());
        }
        d.push(format!(".maxclusterrank{}{}", ws(r), some(r, 1, 8)));
    }
    d.join(&ws(r))
}

/// A body: `ret;`, with what a reading must step over inside it.
fn body(r: &mut Rng, names: &[String]) -> String {
    match r.below(5) {
        0 => "{ ret; }".into(),
        1 => "{\n\tret;\n}".into(),
        2 => format!("{{ {{ ret; }} /* {} */ }}", bait(r, names).replace("*/", "* /")),
        3 => "{\n\t.pragma \"}\";\n\tret;\n}".into(),
        _ => format!("{{ // {}\n ret; }}", bait(r, names).replace('\n', " ")),
    }
}

/// Generated file `index` of `seed`: `count` kernels, and what lies between them.
pub fn file(seed: u64, index: u64, count: usize) -> File {
    file_with(seed, index, count, true)
}

/// The same without the forms only ptxas takes. The 580 driver (CUDA 13.0, on the H200) compiles every
/// generated module with its JIT linker, then refuses to load the cubin it made, and to load the PTX as
/// a whole program (`CUDA_ERROR_INVALID_IMAGE`, nothing in its log), where a kernel has a parameter
/// declared `.ptr .shared` or `.ptr .local`: loading every prefix of seven such files, each first
/// failed at the first kernel with one, and the one file without any loaded (2026-11-25). So these
/// files hold pointers to `.global` and `.const` only; nor, as before, `.texref` or `.surfref`
/// parameters (gone from CUDA 12's runtime) or comments inside the header's three directives.
pub fn file_for_the_driver(seed: u64, index: u64, count: usize) -> File {
    file_with(seed, index, count, false)
}

/// `for_ptxas`: with the forms ptxas takes and the driver's JIT does not (see above).
fn file_with(seed: u64, index: u64, count: usize, for_ptxas: bool) -> File {
    let mut r = Rng::new(seed ^ index.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let target = if r.chance(20) { "sm_75" } else { "sm_90" };
    let mut ptx = String::new();
    if r.chance(30) {
        ptx += "// Generated by common/tests/support/ptxgen.rs /* .entry fake() */\n";
    }
    // ptxas looks for `.version` and a blank before it reads the file: no comment there.
    let (a, b, c) = (r.pick(&[" ", "\t", "  "]).to_string(), ws(&mut r), ws(&mut r));
    let (b, c) = match for_ptxas {
        true => (b, c),
        false => (" ".to_string(), "\t".to_string()),
    };
    ptx += &format!(".version{a}9.0\n.target{b}{target}\n.address_size{c}64\n");
    let mut names: Vec<String> = Vec::new();
    let mut kernels = Vec::new();
    let mut serial = 0u32;
    let (mut opaque, mut param_names) = (Vec::<String>::new(), Vec::new());
    for k in 0..count {
        let name = match r.below(10) {
            0 => format!("${index}_{k}"),
            1 => format!("%k{index}_{k}"),
            2 => format!("_Z1k{index}_{k}Pf"),
            _ => format!("k{index}_{k}"),
        };
        names.push(name.clone());
        for _ in 0..r.below(3) {
            ptx += &filler(&mut r, &names, &mut serial);
        }
        let mut room = 28_000u32;
        let n = if r.chance(5) { 20 + r.below(20) } else { r.below(9) };
        let params: Vec<Generated> =
            (0..n).map(|i| param(&mut r, (&format!("p{i}"), &format!("t{k}_{i}")), &mut room, for_ptxas)).collect();
        let expect = match params.iter().find_map(|(_, _, p)| p.err()) {
            Some(why) => Expect::Refused(why),
            None => Expect::Params(params.iter().map(|(_, _, p)| p.unwrap()).collect()),
        };
        opaque.extend(params.iter().filter(|(t, _, p)| p.is_err() && t.contains("ref")).map(|(_, n, _)| n.clone()));
        param_names.push(params.iter().map(|(_, n, _)| n.clone()).collect::<Vec<_>>());
        let list = if n == 0 && r.chance(40) {
            String::new() // `.entry k { ... }`: no parameter list at all
        } else {
            let sep = format!("{},{}", ows(&mut r), ows(&mut r));
            format!(
                "{}({}{}{})",
                ows(&mut r),
                ows(&mut r),
                params.iter().map(|(t, _, _)| t.as_str()).collect::<Vec<_>>().join(&sep),
                ows(&mut r)
            )
        };
        let linkage = r.pick(&["", ".visible", ".visible", ".weak"]);
        let head = |r: &mut Rng| {
            if linkage.is_empty() {
                format!(".entry{}{name}{list}", ws(r))
            } else {
                format!("{linkage}{}.entry{}{name}{list}", ws(r), ws(r))
            }
        };
        if r.chance(10) {
            ptx += &format!("{}{};\n", head(&mut r), ows(&mut r));
        }
        let dirs = directives(&mut r, target, k == 0);
        let pragma =
            if r.chance(10) { format!("{}.pragma{}\"nounroll\";", ws(&mut r), ws(&mut r)) } else { String::new() };
        let sep = if dirs.is_empty() { String::new() } else { ws(&mut r) };
        ptx += &format!("{}{sep}{dirs}{pragma}{}{}\n", head(&mut r), ows(&mut r), body(&mut r, &names));
        kernels.push(Variant { name, expect });
    }
    for _ in 0..r.below(3) {
        ptx += &filler(&mut r, &names, &mut serial);
    }
    // A parameter named as an opaque one of any kernel is refused (ptxas may compile it to 52 bytes).
    for (kernel, names) in kernels.iter_mut().zip(&param_names) {
        if matches!(kernel.expect, Expect::Params(_)) && names.iter().any(|n| opaque.contains(n)) {
            kernel.expect = Expect::Refused("has the name of an opaque");
        }
    }
    File { ptx, target, kernels }
}
