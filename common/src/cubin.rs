//! The parameter records of a compiled cubin: for each kernel, the offset and size of every parameter
//! and the size of its parameter space, as ptxas (or the driver's JIT linker) wrote them for the
//! driver, which lays out a launch's arguments by them.
//!
//! A cubin is an ELF64 little-endian file. Each kernel `NAME` has a section `.nv.info.NAME` of
//! records, each a byte of format and a byte of attribute, then, by format: `EIFMT_NVAL` (1),
//! `EIFMT_BVAL` (2) and `EIFMT_HVAL` (3) a 16-bit value (4 bytes in all; a BVAL's byte is the value's
//! low byte), `EIFMT_SVAL` (4) a 16-bit size and that many bytes. The records read here, as
//! `cuobjdump -elf` names and prints them (checked on cubins of ptxas 13.0, whole-program and
//! relocatable then `nvlink`ed, for sm_75 and sm_90, against cuobjdump 13.2):
//!
//! | attribute | format | payload |
//! | --- | --- | --- |
//! | `EIATTR_KPARAM_INFO` (0x17) | SVAL, 12 bytes | u32 index (0), u16 ordinal, u16 offset, u32 flags: bits 0-7 the pointee's log2 alignment, 8-11 its space, 12-16 the cbank, 18-31 the size |
//! | `EIATTR_KPARAM_INFO_V2` (0x45) | SVAL, 12 bytes | u32 index (0), u16 ordinal, u16 offset, u16 size, u8 the pointee's log2 alignment, u8 its space (ptxas writes these where the parameters pass 4 KiB) |
//! | `EIATTR_CBANK_PARAM_SIZE` (0x19) | HVAL | the parameter space's size in bytes |
//! | `EIATTR_PARAM_CBANK` (0x0a) | SVAL, 8 bytes | u32 the constant bank's symbol, u16 where the parameters start in it, u16 their size |
//!
//! A kernel with no parameters has none of these. Records come in any order (ptxas writes the last
//! parameter first, nvlink the first). Every read is bounds-checked: a malformed cubin is an error,
//! never a panic.

use crate::ptx::TextParam;

/// One parameter of a kernel, as the cubin records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its position in the kernel's parameter list, from 0.
    pub ordinal: u32,
    /// Its byte offset in the parameter space.
    pub offset: u32,
    /// Its size in bytes.
    pub size: u32,
}

/// A kernel's parameters as the cubin records them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Every parameter, by ordinal: `params[i].ordinal == i`.
    pub params: Vec<Record>,
    /// The size of the parameter space in bytes: where the last parameter ends.
    pub bytes: u32,
    /// Where the parameter space starts in its constant bank (`EIATTR_PARAM_CBANK`), where recorded:
    /// parameters aligned to more than 16 bytes are aligned in the bank, mostly (see [`agree`]).
    pub bank_offset: Option<u32>,
}

/// Whether the PTX text's reading of a kernel's parameters agrees with its cubin's records: as many,
/// each of the same size, and each placed where the text's alignment allows. ptxas 13.0 aligns a
/// parameter in the constant bank (`bank_offset + offset`: sm_90's parameters start at 0x210, sm_75's
/// at 0x160, so that an `.align 256` parameter after a byte lands at 240 or 160), except where it
/// moves a large parameter space elsewhere in the bank (sm_75 and sm_80, past about 4 KiB, to
/// 0x1a80), where it aligns it in the space itself; either is accepted. Where they disagree, one of
/// the two readings is wrong, and no launch should be checked against either.
pub fn agree(text: &[TextParam], layout: &Layout) -> Result<(), String> {
    let misreading = "refusing to check launches against a misreading";
    if text.len() != layout.params.len() {
        return Err(format!(
            "the PTX text declares {} parameters, but the driver compiled {}: {misreading}",
            text.len(),
            layout.params.len()
        ));
    }
    let bank = layout.bank_offset.unwrap_or(0);
    for (i, (t, r)) in text.iter().zip(&layout.params).enumerate() {
        if t.size != r.size {
            return Err(format!(
                "the PTX text reads parameter {i} as {}, {} bytes, but the driver compiled {}: {misreading}",
                t.ptx, t.size, r.size
            ));
        }
        if (bank + r.offset) % t.align != 0 && r.offset % t.align != 0 {
            return Err(format!(
                "the PTX text aligns parameter {i} ({}) to {} bytes, but the driver placed it at byte {}: {misreading}",
                t.ptx, t.align, r.offset
            ));
        }
    }
    Ok(())
}

/// Each kernel of a cubin with its parameters' layout, or why it cannot be read.
pub type Kernels = Vec<(String, Result<Layout, String>)>;

const KPARAM_INFO: u8 = 0x17;
const KPARAM_INFO_V2: u8 = 0x45;
const CBANK_PARAM_SIZE: u8 = 0x19;
const PARAM_CBANK: u8 = 0x0a;

/// Every kernel of a cubin (each `.nv.info.NAME` section), with its parameters' layout or why it
/// cannot be read; an error where the file is not a cubin this can read.
pub fn kernels(cubin: &[u8]) -> Result<Kernels, String> {
    let mut out: Kernels = Vec::new();
    for (name, data) in sections(cubin)? {
        let Some(kernel) = name.strip_prefix(".nv.info.") else { continue };
        let layout = data.and_then(layout);
        match out.iter_mut().find(|(n, _)| n == kernel) {
            Some((_, earlier)) => *earlier = Err(format!("the cubin has two .nv.info.{kernel} sections")),
            None => out.push((kernel.to_string(), layout)),
        }
    }
    Ok(out)
}

/// The layout of kernel `name`'s parameters, or why there is none.
#[cfg(test)]
pub fn kernel(cubin: &[u8], name: &str) -> Result<Layout, String> {
    kernels(cubin)?
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, l)| l)
        .unwrap_or_else(|| Err(format!("the cubin has no .nv.info.{name} section")))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// A section's name, and its bytes (or why they cannot be read).
type Section<'a> = (String, Result<&'a [u8], String>);

/// The sections of an ELF64 little-endian file: each name, and its bytes (or why they cannot be read).
fn sections(elf: &[u8]) -> Result<Vec<Section<'_>>, String> {
    if elf.get(..4) != Some(b"\x7fELF") {
        return Err("not an ELF file".into());
    }
    if elf.get(4..6) != Some(&[2, 1]) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let short = || "an ELF header cut short".to_string();
    let shoff = u64_at(elf, 0x28).ok_or_else(short)?;
    let shentsize = u16_at(elf, 0x3a).ok_or_else(short)?;
    let shnum = u16_at(elf, 0x3c).ok_or_else(short)?;
    let shstrndx = u16_at(elf, 0x3e).ok_or_else(short)?;
    if shentsize != 64 {
        return Err(format!("section headers of {shentsize} bytes, not 64"));
    }
    if shnum == 0 || shstrndx >= shnum {
        return Err(format!("{shnum} sections with names in section {shstrndx}, which this cannot read"));
    }
    let header = |i: u16| -> Result<&[u8], String> {
        usize::try_from(shoff)
            .ok()
            .and_then(|off| off.checked_add(usize::from(i) * 64))
            .and_then(|at| elf.get(at..at.checked_add(64)?))
            .ok_or_else(|| format!("section header {i} lies outside the file"))
    };
    // A section's bytes: its type is at 4 (8, SHT_NOBITS, has none in the file), offset at 24, size at 32.
    let data = |h: &[u8]| -> Result<&[u8], String> {
        if u32_at(h, 4) == Some(8) {
            return Ok(&[]);
        }
        let (off, size) = (u64_at(h, 24).unwrap_or(u64::MAX), u64_at(h, 32).unwrap_or(u64::MAX));
        usize::try_from(off)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(off, size)| elf.get(off..off.checked_add(size)?))
            .ok_or_else(|| format!("a section of {size} bytes at {off} lies outside the file"))
    };
    let names = data(header(shstrndx)?)?;
    (0..shnum)
        .map(|i| {
            let h = header(i)?;
            let at = u32_at(h, 0).and_then(|a| usize::try_from(a).ok()).unwrap_or(usize::MAX);
            let name = names
                .get(at..)
                .and_then(|rest| rest.iter().position(|&c| c == 0).map(|end| &rest[..end]))
                .ok_or_else(|| format!("section {i}'s name lies outside the names"))?;
            Ok((String::from_utf8_lossy(name).into_owned(), data(h)))
        })
        .collect()
}

/// The parameter layout a `.nv.info.NAME` section records.
fn layout(info: &[u8]) -> Result<Layout, String> {
    let mut params: Vec<Record> = Vec::new();
    let (mut cbank_size, mut cbank) = (None, None);
    let mut at = 0;
    while at < info.len() {
        let (format, attribute) = (info[at], info.get(at + 1).copied().unwrap_or(0));
        let value = u16_at(info, at + 2).ok_or_else(|| format!("a record cut short at byte {at}"))?;
        let payload = match format {
            1..=3 => &[][..],
            4 => info
                .get(at + 4..at + 4 + usize::from(value))
                .ok_or_else(|| format!("a record of {value} bytes at byte {at} runs past the section"))?,
            _ => return Err(format!("a record of unknown format {format} at byte {at}")),
        };
        let wrong = || format!("attribute {attribute:#04x} at byte {at} is not of the format and size it should be");
        match attribute {
            KPARAM_INFO | KPARAM_INFO_V2 => {
                if format != 4 || payload.len() != 12 {
                    return Err(wrong());
                }
                let (ordinal, offset) = (u16_at(payload, 4).ok_or_else(wrong)?, u16_at(payload, 6).ok_or_else(wrong)?);
                let size = if attribute == KPARAM_INFO {
                    u32_at(payload, 8).ok_or_else(wrong)? >> 18
                } else {
                    u32::from(u16_at(payload, 8).ok_or_else(wrong)?)
                };
                params.push(Record { ordinal: ordinal.into(), offset: offset.into(), size });
            }
            CBANK_PARAM_SIZE => {
                if format != 3 {
                    return Err(wrong());
                }
                cbank_size = Some(u32::from(value));
            }
            PARAM_CBANK => {
                if format != 4 || payload.len() != 8 {
                    return Err(wrong());
                }
                cbank = Some((u16_at(payload, 4).ok_or_else(wrong)?, u16_at(payload, 6).ok_or_else(wrong)?));
            }
            _ => {}
        }
        at += 4 + payload.len();
    }
    params.sort_by_key(|r| r.ordinal);
    if let Some((i, r)) = params.iter().enumerate().find(|(i, r)| r.ordinal != *i as u32) {
        return Err(format!(
            "its parameter records are not one per ordinal from 0: record {i} is for ordinal {}",
            r.ordinal
        ));
    }
    let bytes = match (cbank_size, cbank.map(|(_, size)| u32::from(size))) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!(
                "its parameter space is {a} bytes (EIATTR_CBANK_PARAM_SIZE) and {b} (EIATTR_PARAM_CBANK)"
            ))
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) if params.is_empty() => 0,
        (None, None) => return Err("it records parameters but not the size of their space".into()),
    };
    let mut end = 0;
    for r in &params {
        if r.offset < end {
            return Err(format!("parameter {} starts at byte {}, inside the one before it", r.ordinal, r.offset));
        }
        end = r.offset + r.size;
    }
    if end != bytes {
        return Err(format!("its parameters end at byte {end}, but their space is {bytes} bytes"));
    }
    Ok(Layout { params, bytes, bank_offset: cbank.map(|(offset, _)| u32::from(offset)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `common/tests/ptx/kernels.ptx` as ptxas 13.0 compiles it for sm_90
    /// (`ptxas -arch=sm_90 -o kernels.sm_90.cubin kernels.ptx`): saxpy(.u64, .u64, .f32, .u64),
    /// busy(.u64, .u64, .u32), fault(.u64).
    const KERNELS: &[u8] = include_bytes!("../tests/cubin/kernels.sm_90.cubin");
    /// `common/tests/cubin/layouts.ptx` compiled the same way, and also relocatable then linked
    /// (`ptxas -c` then `nvlink`, as the driver's JIT linker does) for sm_75.
    const LAYOUTS: &[u8] = include_bytes!("../tests/cubin/layouts.sm_90.cubin");
    const LAYOUTS_LINKED: &[u8] = include_bytes!("../tests/cubin/layouts.sm_75.linked.cubin");

    fn rec(ordinal: u32, offset: u32, size: u32) -> Record {
        Record { ordinal, offset, size }
    }

    #[test]
    fn the_records_of_a_real_cubin() {
        let k = kernels(KERNELS).unwrap();
        let names: Vec<&str> = k.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["fault", "busy", "saxpy"]);
        let saxpy = kernel(KERNELS, "saxpy").unwrap();
        assert_eq!(saxpy.params, [rec(0, 0, 8), rec(1, 8, 8), rec(2, 16, 4), rec(3, 24, 8)]);
        assert_eq!((saxpy.bytes, saxpy.bank_offset), (32, Some(0x210)));
        assert_eq!(kernel(KERNELS, "busy").unwrap().params, [rec(0, 0, 8), rec(1, 8, 8), rec(2, 16, 4)]);
        assert_eq!(kernel(KERNELS, "fault").unwrap().bytes, 8);
        assert!(kernel(KERNELS, "nope").unwrap_err().contains("no .nv.info.nope section"));
    }

    /// Both record forms (KPARAM_INFO, and KPARAM_INFO_V2 past 4 KiB), no parameters, alignments
    /// beyond 16 (aligned in the bank: sm_90's parameters start at 0x210, sm_75's at 0x160), as ptxas
    /// writes them and as nvlink reorders them.
    #[test]
    fn every_record_form_whole_program_and_linked() {
        for (cubin, bank) in [(LAYOUTS, 0x210), (LAYOUTS_LINKED, 0x160)] {
            let none = kernel(cubin, "none").unwrap();
            assert_eq!((none.params.len(), none.bytes, none.bank_offset), (0, 0, None));
            let small = kernel(cubin, "small").unwrap();
            assert_eq!(small.params, [rec(0, 0, 1), rec(1, 8, 8), rec(2, 16, 2), rec(3, 20, 12), rec(4, 32, 16)]);
            assert_eq!(small.bytes, 48);
            let big = kernel(cubin, "big").unwrap();
            assert_eq!(big.params, [rec(0, 0, 5000), rec(1, 5000, 1), rec(2, 5008, 8)]);
            assert_eq!(big.bytes, 5016);
            let aligned = kernel(cubin, "aligned").unwrap();
            assert_eq!(aligned.bank_offset, Some(bank));
            let second = aligned.params[1];
            assert_eq!((second.size, (bank + second.offset) % 128), (8, 0), "{aligned:?}");
            assert!(second.offset > 1 && second.offset < 128 + 1);
        }
    }

    #[test]
    fn malformed_cubins_are_errors_not_panics() {
        assert_eq!(kernels(b"").unwrap_err(), "not an ELF file");
        assert_eq!(kernels(b"\x7fELF\x01\x01").unwrap_err(), "not a 64-bit little-endian ELF file");
        assert!(kernels(b"\x7fELF\x02\x01\x01").unwrap_err().contains("cut short"));
        // Every prefix, and every single byte changed, of a real cubin: an answer, never a panic.
        for end in 0..KERNELS.len() {
            let _ = kernels(&KERNELS[..end]);
        }
        let mut bytes = KERNELS.to_vec();
        for i in 0..bytes.len() {
            for v in [0x00, 0x04, 0x17, 0x45, 0x80, 0xff] {
                let old = std::mem::replace(&mut bytes[i], v);
                let _ = kernels(&bytes);
                bytes[i] = old;
            }
        }
    }

    /// Hand-made `.nv.info` sections: each way the records can be wrong is named.
    #[test]
    fn inconsistent_records_are_refused() {
        let kparam = |ordinal: u16, offset: u16, size: u32| {
            let mut r = vec![4, KPARAM_INFO, 12, 0, 0, 0, 0, 0];
            r.extend(ordinal.to_le_bytes());
            r.extend(offset.to_le_bytes());
            r.extend((size << 18 | 0x1f000).to_le_bytes());
            r
        };
        let size = |bytes: u16| {
            let mut r = vec![3, CBANK_PARAM_SIZE];
            r.extend(bytes.to_le_bytes());
            r
        };
        let ok = [kparam(1, 8, 4), size(12), kparam(0, 0, 8)].concat();
        assert_eq!(layout(&ok).unwrap().params, [rec(0, 0, 8), rec(1, 8, 4)]);
        let gap = [kparam(2, 16, 4), size(20), kparam(0, 0, 8)].concat();
        assert!(layout(&gap).unwrap_err().contains("record 1 is for ordinal 2"));
        let twice = [kparam(0, 0, 8), kparam(0, 0, 8), size(8)].concat();
        assert!(layout(&twice).unwrap_err().contains("record 1 is for ordinal 0"));
        let overlap = [kparam(0, 0, 8), kparam(1, 4, 4), size(8)].concat();
        assert!(layout(&overlap).unwrap_err().contains("inside the one before it"));
        let short = [kparam(0, 0, 8), size(16)].concat();
        assert!(layout(&short).unwrap_err().contains("end at byte 8, but their space is 16 bytes"));
        assert!(layout(&kparam(0, 0, 8)).unwrap_err().contains("not the size of their space"));
        assert!(layout(&[9, 1, 0, 0]).unwrap_err().contains("unknown format 9"));
        assert!(layout(&[4, 1, 9, 0, 0]).unwrap_err().contains("runs past the section"));
        assert!(layout(&[3, KPARAM_INFO, 0, 0]).unwrap_err().contains("not of the format"));
        assert!(layout(&[1, 4, 0]).unwrap_err().contains("cut short"));
        assert_eq!(layout(&[1, 4, 0, 0, 2, 0x4c, 1, 0]).unwrap().params, [], "NVAL and BVAL records");
    }
}
