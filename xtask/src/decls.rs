//! `common`'s driver declarations, read from `common/src/ffi.rs` with syn: the entry points of its
//! `entry_points! { extern "C" { ... } }` (the body read as the `extern "C"` block it is written as),
//! its type aliases (the `opaque!` handles among them), its `#[repr(C)]` structs and its `pub const`s,
//! each with its doc lines. `check-ffi` holds all of them against CUDA's headers.
//!
//! Whatever the file holds that this reader cannot account for (an attribute such as `cfg`, a type
//! such as `Option<T>` of a non-function, a value that is not a literal, a macro other than `opaque!`
//! and `entry_points!`) is an error naming it, never skipped: a declaration the check does not see is
//! one it does not check. So is an `extern` block outside `entry_points!`: it would link its entry
//! points, and a program linked to `libcuda` does not start on a machine without the driver.

use std::fmt;

use anyhow::{anyhow, bail, Context as _};
use quote::ToTokens;
use syn::{
    punctuated::Punctuated, Attribute, Expr, ForeignItem, Item, ItemForeignMod, Lit, Meta, PathArguments, ReturnType,
    Token, Type, UnOp,
};

use crate::tools;

/// The file, relative to the workspace root.
pub const FFI_RS: &str = "common/src/ffi.rs";

/// A type as ffi.rs spells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    /// A named type: a primitive (`c_int`, `u64`, `usize`), or an alias or struct of ffi.rs.
    Named(String),
    /// `*mut T` or `*const T`.
    Ptr { mutable: bool, to: Box<Ty> },
    /// `[T; N]`.
    Array(Box<Ty>, u64),
    /// `unsafe extern "C" fn(...) -> R`, or `Option` of one (the same pointer, which C may leave null).
    Fn(Box<Sig>),
    /// `()`: no result.
    Unit,
}

/// The parameters and the result of an entry point or a function pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sig {
    pub params: Vec<(String, Ty)>,
    pub ret: Ty,
}

/// `entry_points! { extern "C" { pub fn NAME(...) -> R; } }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Func {
    pub name: String,
    /// The symbol looked up in the driver's library: the name (`entry_points!` looks each up by it).
    pub symbol: String,
    pub docs: Vec<String>,
    pub sig: Sig,
}

/// `type NAME = T;` (also each handle of `opaque!`, as `*mut` its struct).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    pub name: String,
    pub docs: Vec<String>,
    pub ty: Ty,
}

/// `struct NAME { fields }`. An opaque struct (no fields but zero-sized ones, as `opaque!` makes) has
/// no layout to check: C knows it only behind pointers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Struct {
    pub name: String,
    pub docs: Vec<String>,
    pub repr_c: bool,
    pub opaque: bool,
    pub fields: Vec<(String, Ty)>,
}

/// `pub const NAME: T = VALUE;`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Const {
    pub name: String,
    pub docs: Vec<String>,
    pub ty: Ty,
    pub value: ConstValue,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConstValue {
    Int(i128),
    /// A pointer made from an address (`1 as *mut c_void`, `ptr::null_mut()`): cuda.h's `((void*)1)`.
    Ptr(u64),
    Array(Vec<i128>),
}

/// Everything ffi.rs declares that crosses into C.
#[derive(Debug, Default)]
pub struct Decls {
    pub funcs: Vec<Func>,
    pub aliases: Vec<Alias>,
    pub structs: Vec<Struct>,
    pub consts: Vec<Const>,
}

impl Decls {
    pub fn alias(&self, name: &str) -> Option<&Alias> {
        self.aliases.iter().find(|a| a.name == name)
    }

    pub fn strukt(&self, name: &str) -> Option<&Struct> {
        self.structs.iter().find(|s| s.name == name)
    }
}

/// Reads the workspace's `common/src/ffi.rs`.
pub fn read() -> anyhow::Result<Decls> {
    let path = tools::root().join(FFI_RS);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("reading {FFI_RS}"))
}

/// The declarations of a file's text.
pub fn parse(text: &str) -> anyhow::Result<Decls> {
    let file = syn::parse_file(text).map_err(|e| anyhow!("not Rust that syn reads: {e}"))?;
    let mut decls = Decls::default();
    for item in &file.items {
        item_decls(item, &mut decls)?;
    }
    Ok(decls)
}

fn item_decls(item: &Item, d: &mut Decls) -> anyhow::Result<()> {
    match item {
        // Code, not declarations: what it calls is declared elsewhere in the file.
        Item::Use(_) | Item::Fn(_) | Item::Impl(_) => {}
        Item::Mod(m) => {
            if !is_cfg_test(&m.attrs) {
                bail!("mod {}: cannot check declarations inside a module: declare them at the top level", m.ident);
            }
        }
        Item::Const(c) => {
            if matches!(c.vis, syn::Visibility::Public(_)) {
                let name = c.ident.to_string();
                allowed_attrs(&c.attrs, &name, &[])?;
                let ty = ty(&c.ty).with_context(|| format!("const {name}"))?;
                let value = value(&c.expr).with_context(|| format!("const {name}"))?;
                d.consts.push(Const { name, docs: docs(&c.attrs), ty, value });
            }
        }
        Item::Type(t) => {
            let name = t.ident.to_string();
            if !t.generics.params.is_empty() {
                bail!("type {name}: cannot check a generic alias");
            }
            allowed_attrs(&t.attrs, &name, &[])?;
            let ty = ty(&t.ty).with_context(|| format!("type {name}"))?;
            d.aliases.push(Alias { name, docs: docs(&t.attrs), ty });
        }
        Item::Struct(s) => {
            let name = s.ident.to_string();
            if !s.generics.params.is_empty() {
                bail!("struct {name}: cannot check a generic struct");
            }
            allowed_attrs(&s.attrs, &name, &["repr", "derive"])?;
            let repr_c = repr_c(&s.attrs, &name)?;
            let mut fields = Vec::new();
            if repr_c {
                for (i, f) in s.fields.iter().enumerate() {
                    let field = f.ident.as_ref().map_or_else(|| i.to_string(), |i| i.to_string());
                    allowed_attrs(&f.attrs, &format!("{name}.{field}"), &[])?;
                    let t = ty(&f.ty).with_context(|| format!("struct {name}, field {field}"))?;
                    fields.push((field.trim_start_matches("r#").to_string(), t));
                }
            }
            let opaque = repr_c && fields.iter().all(|(_, t)| matches!(t, Ty::Array(_, 0)));
            d.structs.push(Struct { name, docs: docs(&s.attrs), repr_c, opaque, fields });
        }
        Item::Macro(m) => macro_decls(m, d)?,
        Item::ForeignMod(_) => bail!(
            "an extern block links what it declares, and a program linked to libcuda does not start without the \
             driver: declare entry points in `entry_points! {{ extern \"C\" {{ ... }} }}`, which loads them at run time"
        ),
        other => {
            bail!(
                "cannot check `{}`: teach xtask/src/decls.rs what it declares",
                first_line(other.to_token_stream().to_string())
            )
        }
    }
    Ok(())
}

fn first_line(text: String) -> String {
    let mut cut: String = text.chars().take(80).collect();
    if cut.len() < text.len() {
        cut.push_str(" ...");
    }
    cut
}

fn is_cfg_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("cfg") && a.to_token_stream().to_string().replace(' ', "") == "#[cfg(test)]")
}

/// Attributes that change nothing C sees (docs, lints) pass; `extra` adds some for the item's kind;
/// any other (`cfg` above all: a declaration that may not exist) is an error.
fn allowed_attrs(attrs: &[Attribute], what: &str, extra: &[&str]) -> anyhow::Result<()> {
    const LINTS: [&str; 5] = ["doc", "allow", "expect", "warn", "deny"];
    for a in attrs {
        let name = a.path().get_ident().map(|i| i.to_string()).unwrap_or_default();
        if !(LINTS.contains(&name.as_str()) || extra.contains(&name.as_str())) {
            bail!("{what}: cannot check it with the attribute `{}`", attr_text(a));
        }
    }
    Ok(())
}

/// `#[cfg(unix)]`, spaced as written rather than as tokens print.
fn attr_text(a: &Attribute) -> String {
    let mut s = a.meta.to_token_stream().to_string();
    for (from, to) in [(" (", "("), ("( ", "("), (" )", ")"), (" ,", ",")] {
        s = s.replace(from, to);
    }
    format!("#[{s}]")
}

/// Whether a struct is `#[repr(C)]`; a repr with more than `C` (packed, align) is an error.
fn repr_c(attrs: &[Attribute], what: &str) -> anyhow::Result<bool> {
    let mut c = false;
    for a in attrs.iter().filter(|a| a.path().is_ident("repr")) {
        let reprs = a.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)?;
        for r in reprs {
            if r.path().is_ident("C") && matches!(r, Meta::Path(_)) {
                c = true;
            } else {
                bail!("struct {what}: cannot check `{}`: only #[repr(C)]", attr_text(a));
            }
        }
    }
    Ok(c)
}

/// The item's doc lines (`///`), trimmed.
fn docs(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                Expr::Lit(l) => match &l.lit {
                    Lit::Str(s) => Some(s.value().trim().to_string()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The entry points of `entry_points!`'s body: one `extern "C"` block of functions, with no attribute
/// (`#[link]` would link it again).
fn entry_points(m: &syn::ItemMacro, d: &mut Decls) -> anyhow::Result<()> {
    let block: ItemForeignMod = m
        .mac
        .parse_body()
        .map_err(|e| anyhow!("entry_points!: its body should be one `extern \"C\" {{ ... }}` block: {e}"))?;
    allowed_attrs(&block.attrs, "entry_points!'s extern block", &[])?;
    let abi = block.abi.name.as_ref().map_or("C".to_string(), |n| n.value());
    if abi != "C" {
        bail!("entry_points!: extern \"{abi}\": cannot check a block of another ABI than C");
    }
    for item in &block.items {
        match item {
            ForeignItem::Fn(func) => d.funcs.push(foreign_fn(func)?),
            other => {
                bail!("entry_points!: cannot check `{}`: only functions are declared there", other.to_token_stream())
            }
        }
    }
    Ok(())
}

fn foreign_fn(f: &syn::ForeignItemFn) -> anyhow::Result<Func> {
    let name = f.sig.ident.to_string();
    // No `link_name`: `entry_points!` looks an entry point up by its name alone.
    allowed_attrs(&f.attrs, &format!("fn {name}"), &[])?;
    let symbol = name.clone();
    if f.sig.variadic.is_some() || !f.sig.generics.params.is_empty() {
        bail!("fn {name}: cannot check a variadic or generic function");
    }
    let mut params = Vec::new();
    for (i, input) in f.sig.inputs.iter().enumerate() {
        let syn::FnArg::Typed(p) = input else { bail!("fn {name}: a receiver in an extern block") };
        let pname = match &*p.pat {
            syn::Pat::Ident(id) => id.ident.to_string(),
            _ => format!("_{i}"),
        };
        params.push((pname, ty(&p.ty).with_context(|| format!("fn {name}"))?));
    }
    let ret = ret(&f.sig.output).with_context(|| format!("fn {name}"))?;
    Ok(Func { name, symbol, docs: docs(&f.attrs), sig: Sig { params, ret } })
}

fn ret(output: &ReturnType) -> anyhow::Result<Ty> {
    match output {
        ReturnType::Default => Ok(Ty::Unit),
        ReturnType::Type(_, t) => ty(t),
    }
}

/// The type ffi.rs spells: named types by their last path segment (`std::ffi::c_int` is `c_int`).
pub fn ty(t: &Type) -> anyhow::Result<Ty> {
    Ok(match t {
        Type::Ptr(p) => Ty::Ptr { mutable: p.mutability.is_some(), to: Box::new(ty(&p.elem)?) },
        Type::Path(p) if p.qself.is_none() => {
            let seg = p.path.segments.last().context("an empty path")?;
            match &seg.arguments {
                PathArguments::None => Ty::Named(seg.ident.to_string()),
                PathArguments::AngleBracketed(args) if seg.ident == "Option" && args.args.len() == 1 => {
                    match args.args.first() {
                        Some(syn::GenericArgument::Type(inner @ Type::BareFn(_))) => ty(inner)?,
                        _ => bail!("cannot check `{}`: only an Option of a function pointer", t.to_token_stream()),
                    }
                }
                _ => bail!("cannot check the type `{}`", t.to_token_stream()),
            }
        }
        Type::BareFn(f) => {
            let abi = f.abi.as_ref().map(|a| a.name.as_ref().map_or("C".to_string(), |n| n.value()));
            if abi.as_deref() != Some("C") || f.variadic.is_some() || f.lifetimes.is_some() {
                bail!("cannot check `{}`: only an extern \"C\" fn, not variadic", t.to_token_stream());
            }
            let mut params = Vec::new();
            for (i, a) in f.inputs.iter().enumerate() {
                let name = a.name.as_ref().map_or_else(|| format!("_{i}"), |(n, _)| n.to_string());
                params.push((name, ty(&a.ty)?));
            }
            Ty::Fn(Box::new(Sig { params, ret: ret(&f.output)? }))
        }
        Type::Array(a) => match &a.len {
            Expr::Lit(syn::ExprLit { lit: Lit::Int(n), .. }) => Ty::Array(Box::new(ty(&a.elem)?), n.base10_parse()?),
            _ => bail!("cannot check `{}`: an array's length must be a literal", t.to_token_stream()),
        },
        Type::Tuple(tup) if tup.elems.is_empty() => Ty::Unit,
        Type::Paren(p) => ty(&p.elem)?,
        Type::Group(g) => ty(&g.elem)?,
        _ => bail!("cannot check the type `{}`", t.to_token_stream()),
    })
}

/// A constant's value: an integer literal (any base, negative), an address made a pointer, or an array
/// of integers. Anything computed is an error: write the literal.
fn value(e: &Expr) -> anyhow::Result<ConstValue> {
    let int = |e: &Expr| match value(e)? {
        ConstValue::Int(v) => Ok(v),
        _ => bail!("`{}` is not an integer", e.to_token_stream()),
    };
    Ok(match e {
        Expr::Lit(syn::ExprLit { lit: Lit::Int(i), .. }) => ConstValue::Int(i.base10_parse()?),
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => ConstValue::Int(-int(&u.expr)?),
        Expr::Paren(p) => value(&p.expr)?,
        Expr::Group(g) => value(&g.expr)?,
        Expr::Cast(c) => match &*c.ty {
            Type::Ptr(_) => ConstValue::Ptr(u64::try_from(int(&c.expr)?)?),
            _ => ConstValue::Int(int(&c.expr)?),
        },
        Expr::Call(call) => {
            let Expr::Path(p) = &*call.func else { bail!("cannot read the value `{}`", e.to_token_stream()) };
            let f = p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
            match (f.as_str(), call.args.len()) {
                ("null" | "null_mut", 0) => ConstValue::Ptr(0),
                ("without_provenance" | "without_provenance_mut", 1) => {
                    ConstValue::Ptr(u64::try_from(int(&call.args[0])?)?)
                }
                _ => bail!("cannot read the value `{}`: write a literal", e.to_token_stream()),
            }
        }
        Expr::Array(a) => ConstValue::Array(a.elems.iter().map(int).collect::<anyhow::Result<_>>()?),
        _ => bail!("cannot read the value `{}`: write a literal", e.to_token_stream()),
    })
}

/// One handle of `opaque!(CUcontext => CUctx_st, ...)`.
struct OpaquePair {
    handle: syn::Ident,
    st: syn::Ident,
}

impl syn::parse::Parse for OpaquePair {
    fn parse(input: syn::parse::ParseStream) -> syn::Result<Self> {
        let handle = input.parse()?;
        input.parse::<Token![=>]>()?;
        Ok(OpaquePair { handle, st: input.parse()? })
    }
}

/// What each macro this reader knows must make, as it assumes (tokens without spaces): `opaque!` an
/// opaque struct and a pointer alias of it; `entry_points!` a function of each entry point's name and
/// signature, and a lookup of the symbol of that name.
const MACROS: [(&str, &[&str]); 2] = [
    ("opaque", &["#[repr(C)]pubstruct$st{_private:[u8;0],}", "pubtype$handle=*mut$st;"]),
    (
        "entry_points",
        &[
            "pubunsafefn$name($($arg:$ty),*)->CuResult",
            "concat!(stringify!($name),\"\\0\")",
            "(table.$name)($($arg),*)",
        ],
    ),
];

/// `macro_rules! opaque` and `macro_rules! entry_points` (each checked to make what this reader
/// assumes, [`MACROS`]) and their uses: each `HANDLE => STRUCT` of `opaque!` is an opaque `#[repr(C)]`
/// struct and `pub type HANDLE = *mut STRUCT`; `entry_points!` declares the entry points.
fn macro_decls(m: &syn::ItemMacro, d: &mut Decls) -> anyhow::Result<()> {
    let tokens: String = m.mac.tokens.to_string().chars().filter(|c| !c.is_whitespace()).collect();
    if m.mac.path.is_ident("macro_rules") {
        let name = m.ident.as_ref().map(|i| i.to_string()).unwrap_or_default();
        let Some((_, parts)) = MACROS.iter().find(|(known, _)| *known == name) else {
            bail!("cannot check what `macro_rules! {name}` declares: teach xtask/src/decls.rs");
        };
        for part in *parts {
            if !tokens.contains(part) {
                bail!("macro_rules! {name} no longer makes `{part}`: teach xtask/src/decls.rs what it makes");
            }
        }
        return Ok(());
    }
    if m.mac.path.is_ident("entry_points") {
        return entry_points(m, d);
    }
    if !m.mac.path.is_ident("opaque") {
        bail!("cannot check what the macro `{}!` declares: teach xtask/src/decls.rs", m.mac.path.to_token_stream());
    }
    let pairs = m.mac.parse_body_with(Punctuated::<OpaquePair, Token![,]>::parse_terminated)?;
    for p in pairs {
        let st = p.st.to_string();
        d.structs.push(Struct {
            name: st.clone(),
            docs: Vec::new(),
            repr_c: true,
            opaque: true,
            fields: vec![("_private".into(), Ty::Array(Box::new(Ty::Named("u8".into())), 0))],
        });
        d.aliases.push(Alias {
            name: p.handle.to_string(),
            docs: Vec::new(),
            ty: Ty::Ptr { mutable: true, to: Box::new(Ty::Named(st)) },
        });
    }
    Ok(())
}

/// Which header a doc line names a declaration's counterpart in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    /// `/// cuda.h: NAME`: a type or value of cuda.h.
    Cuda,
    /// `/// cudaTypedefs.h: PFN_name_vN`: the function type of one version of an entry point.
    Typedefs,
}

impl Header {
    pub fn file(self) -> &'static str {
        match self {
            Header::Cuda => "cuda.h",
            Header::Typedefs => "cudaTypedefs.h",
        }
    }
}

/// The name a declaration's doc gives its header counterpart (`cudaTypedefs.h: PFN_cuMemAlloc_v3020`,
/// backquoted or not), if it gives one; two such lines are an error.
pub fn named(docs: &[String], what: &str) -> anyhow::Result<Option<(Header, String)>> {
    let mut found = None;
    for line in docs {
        for h in [Header::Cuda, Header::Typedefs] {
            if let Some(rest) = line.strip_prefix(h.file()).and_then(|r| r.strip_prefix(':')) {
                let name = rest.trim().trim_matches('`').trim();
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    bail!("{what}: its doc line `{line}` should name one identifier: `{}: NAME`", h.file());
                }
                if found.is_some() {
                    bail!(
                        "{what}: its doc names two header counterparts; keep one `cuda.h:` or `cudaTypedefs.h:` line"
                    );
                }
                found = Some((h, name.to_string()));
            }
        }
    }
    Ok(found)
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Named(n) => write!(f, "{n}"),
            Ty::Ptr { mutable, to } => write!(f, "*{} {to}", if *mutable { "mut" } else { "const" }),
            Ty::Array(t, n) => write!(f, "[{t}; {n}]"),
            Ty::Fn(sig) => write!(f, "unsafe extern \"C\" fn{sig}"),
            Ty::Unit => write!(f, "()"),
        }
    }
}

impl fmt::Display for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let params: Vec<String> = self.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        write!(f, "({})", params.join(", "))?;
        if self.ret != Ty::Unit {
            write!(f, " -> {}", self.ret)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `macro_rules!` of common's ffi.rs, as it writes it.
    fn ffi_macro(name: &str) -> &'static str {
        let ffi = include_str!("../../common/src/ffi.rs");
        let start = ffi.find(&format!("macro_rules! {name} ")).expect("ffi.rs defines the macro");
        let end = start + ffi[start..].find("\n}\n").unwrap() + 3;
        &ffi[start..end]
    }

    /// The sample declarations below with common's own `opaque!` and `entry_points!` macros.
    fn sample() -> String {
        SAMPLE.replacen("OPAQUE_MACRO\n", ffi_macro("opaque"), 1).replacen(
            "ENTRY_POINTS_MACRO\n",
            ffi_macro("entry_points"),
            1,
        )
    }

    const SAMPLE: &str = r#"
//! A module doc.
#![allow(non_snake_case)]
use std::ffi::{c_char, c_int, c_uint, c_void};

/// `CUdevice`.
pub type CUdevice = c_int;
OPAQUE_MACRO
opaque!(CUcontext => CUctx_st, CUstream => CUstream_st);

pub const CU_DEVICE_ATTRIBUTE_X: c_int = 0x10;
pub const DEVICE_CPU: CUdevice = -1;
pub const CU_LAUNCH_PARAM_END: *mut c_void = std::ptr::null_mut();
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: *mut c_void = 1 as *mut c_void;
const PRIVATE: u32 = 5;
/// ILLEGAL_ADDRESS (700), LAUNCH_FAILED (719).
pub const KILLED: [c_int; 2] = [700, 719];

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemLocation {
    pub type_: c_int,
    pub id: c_int,
}
pub struct NotForC {
    pub s: String,
}

/// cudaTypedefs.h: PFN_cuThing_v12080
pub type PFN_thing = Option<unsafe extern "C" fn(a: *mut usize, b: CUstream) -> c_int>;

ENTRY_POINTS_MACRO
entry_points! {
    extern "C" {
        /// cudaTypedefs.h: `PFN_cuInit_v2000`
        pub fn cuInit(flags: c_uint) -> c_int;
        #[allow(clippy::too_many_arguments)]
        /// Prose first.
        /// cudaTypedefs.h: PFN_cuGetErrorName_v6000
        pub fn cuGetErrorName(
            error: c_int,
            name: *mut *const c_char,
        ) -> c_int;
        pub fn cuCtxSynchronize();
    }
}

pub fn not_a_declaration() -> c_int { 0 }

#[cfg(test)]
mod tests {
    pub const IGNORED: u8 = 1;
}
"#;

    #[test]
    fn reads_every_kind_of_declaration() {
        let d = parse(&sample()).unwrap();
        let names: Vec<&str> = d.funcs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["cuInit", "cuGetErrorName", "cuCtxSynchronize"]);
        assert_eq!(d.funcs[2].symbol, "cuCtxSynchronize");
        assert_eq!(d.funcs[2].sig.ret, Ty::Unit);
        let get = &d.funcs[1];
        assert_eq!(get.docs, ["Prose first.", "cudaTypedefs.h: PFN_cuGetErrorName_v6000"]);
        assert_eq!(get.sig.to_string(), "(error: c_int, name: *mut *const c_char) -> c_int");
        assert_eq!(named(&d.funcs[0].docs, "").unwrap(), Some((Header::Typedefs, "PFN_cuInit_v2000".into())));

        let ctx = d.alias("CUcontext").unwrap();
        assert_eq!(ctx.ty.to_string(), "*mut CUctx_st");
        assert!(d.strukt("CUstream_st").unwrap().opaque);
        let loc = d.strukt("CUmemLocation").unwrap();
        assert!(loc.repr_c && !loc.opaque);
        assert_eq!(loc.fields[0], ("type_".to_string(), Ty::Named("c_int".into())));
        assert!(!d.strukt("NotForC").unwrap().repr_c);
        let thing = d.alias("PFN_thing").unwrap();
        assert_eq!(thing.ty.to_string(), "unsafe extern \"C\" fn(a: *mut usize, b: CUstream) -> c_int");

        let values: Vec<(&str, &ConstValue)> = d.consts.iter().map(|c| (c.name.as_str(), &c.value)).collect();
        assert_eq!(
            values,
            [
                ("CU_DEVICE_ATTRIBUTE_X", &ConstValue::Int(16)),
                ("DEVICE_CPU", &ConstValue::Int(-1)),
                ("CU_LAUNCH_PARAM_END", &ConstValue::Ptr(0)),
                ("CU_LAUNCH_PARAM_BUFFER_POINTER", &ConstValue::Ptr(1)),
                ("KILLED", &ConstValue::Array(vec![700, 719])),
            ]
        );
    }

    #[test]
    fn what_it_cannot_check_is_an_error_naming_it() {
        let cases = [
            ("#[cfg(unix)]\npub const X: u32 = 1;", "X: cannot check it with the attribute `#[cfg(unix)]`"),
            ("pub const X: u32 = 1 + 1;", "const X"),
            ("entry_points! { extern \"C\" { pub static FOO: u32; } }", "only functions"),
            ("entry_points! { extern \"C\" { pub fn cuFoo(x: Vec<u8>); } }", "fn cuFoo"),
            ("entry_points! { extern \"C\" { pub fn cuFoo(x: u32, ...); } }", "variadic"),
            ("entry_points! { pub fn cuFoo(); }", "one `extern \"C\" { ... }` block"),
            (
                "entry_points! { extern \"C\" { #[link_name = \"cuBar\"] pub fn cuFoo(); } }",
                "fn cuFoo: cannot check it with the attribute `#[link_name = \"cuBar\"]`",
            ),
            ("entry_points! { #[link(name = \"cuda\")] extern \"C\" {} }", "the attribute `#[link(name = \"cuda\")]`"),
            ("#[link(name = \"cuda\")] extern \"C\" { pub fn cuInit(flags: u32) -> i32; }", "an extern block links"),
            ("extern \"C\" { pub fn cuInit(flags: u32) -> i32; }", "declare entry points in `entry_points!"),
            ("macro_rules! entry_points { () => {} }", "macro_rules! entry_points no longer makes"),
            ("macro_rules! other { () => {} }", "`macro_rules! other`"),
            ("other!(A => B);", "the macro `other!`"),
            ("pub enum E { A }", "cannot check `pub enum E"),
            ("#[repr(C, packed)]\npub struct S { a: u8 }", "only #[repr(C)]"),
            ("/// cuda.h: A\n/// cuda.h: B\npub type T = u8;", ""),
        ];
        for (src, says) in cases {
            let err = parse(src).and_then(|d| {
                for a in &d.aliases {
                    named(&a.docs, &a.name)?;
                }
                Ok(d)
            });
            let msg = format!("{:#}", err.expect_err(src));
            assert!(msg.contains(says), "{src}: {msg}");
        }
    }
}
