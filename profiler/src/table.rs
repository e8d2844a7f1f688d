//! The rows of a CSV export of `nsys stats`, found by column name: nsys renames and reorders columns
//! between versions (and spells the correlation id "CorrId" in one report and "CorrID" in another), so
//! nothing here counts on a column's place or case.

use std::collections::BTreeMap;

use anyhow::Context as _;

/// One row of a CSV export: column name to value.
pub type CsvRow = BTreeMap<String, String>;

/// The rows of a CSV with a header (nsys stats output), as maps from column name to value. Quoted
/// fields may hold commas (kernel names do); lines before the header that are blank are skipped.
pub fn rows(text: &str) -> anyhow::Result<Vec<CsvRow>> {
    let text = text.trim_start_matches('\u{feff}');
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(text.trim_start().as_bytes());
    let header: Vec<String> = reader.headers().context("reading the CSV header")?.iter().map(str::to_string).collect();
    reader
        .records()
        .enumerate()
        .map(|(i, r)| {
            let r = r.with_context(|| format!("reading CSV row {}", i + 1))?;
            Ok(header.iter().cloned().zip(r.iter().map(str::to_string)).collect())
        })
        .collect()
}

/// The value of the first of `names` that the row has, by name or prefix, ignoring ASCII case (nsys
/// spells the correlation id "CorrId" in one report and "CorrID" in another).
pub fn column<'a>(row: &'a CsvRow, names: &[&str]) -> Option<&'a str> {
    let lower = |s: &str| s.to_ascii_lowercase();
    names.iter().find_map(|n| {
        let n = lower(n);
        row.iter().find(|(k, _)| lower(k).starts_with(&n)).map(|(_, v)| v.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes() {
        let rows = rows("\u{feff}a,Name,c\n\n1,\"void k<int, 2>(float*)\",3\n\"a \"\"b\"\"\",x,c\n").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["Name"], "void k<int, 2>(float*)");
        assert_eq!(rows[1]["a"], r#"a "b""#);
        assert_eq!(column(&rows[0], &["nam"]), Some("void k<int, 2>(float*)"), "by prefix, any case");
    }
}
