//! Listing like `gnt-node list`: named fields, `-o FIELDS` (`+FIELD` adds to the defaults),
//! `--no-headers`, `--separator SEP` and `--json`.

use std::fmt::Write as _;

use clap::Args;
use serde_json::{Map, Value};

/// The options every list command takes.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ListArgs {
    /// Do not print the header line.
    #[arg(long)]
    pub(crate) no_headers: bool,
    /// Separate fields with SEP instead of aligning them in columns.
    #[arg(long, value_name = "SEP")]
    pub(crate) separator: Option<String>,
    /// Fields to show, comma-separated; a list starting with `+` adds its fields to the
    /// default ones. An unknown field is an error that lists the valid fields.
    #[arg(short = 'o', long = "output", value_name = "FIELDS")]
    pub(crate) output: Option<String>,
    /// Print a JSON array with one object per row (the selected fields; `null` where the
    /// table shows `-`) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// One field of a list: its name for `-o`, its column title and how to compute the cell.
pub(crate) struct Field<T> {
    /// The name for `-o` and the key in `--json`.
    pub(crate) name: &'static str,
    /// The column title.
    pub(crate) title: &'static str,
    /// Whether the column is numeric (job ids, sequence numbers): right-aligned, as gnt-* does.
    pub(crate) numeric: bool,
    /// The cell; `None` is shown as `-` (and `null` in JSON).
    pub(crate) cell: fn(&T) -> Option<String>,
}

/// The fields selected by `-o` (or the defaults), in order.
pub(crate) fn select<'a, T>(
    fields: &'a [Field<T>],
    defaults: &[&str],
    output: Option<&str>,
) -> Result<Vec<&'a Field<T>>, String> {
    let mut names: Vec<&str> = Vec::new();
    match output {
        None => names.extend_from_slice(defaults),
        Some(text) => {
            let (extra, list) = text
                .strip_prefix('+')
                .map_or((false, text), |rest| (true, rest));
            if extra {
                names.extend_from_slice(defaults);
            }
            names.extend(list.split(',').map(str::trim));
        }
    }
    let unknown: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| !fields.iter().any(|f| f.name == *name))
        .collect();
    if !unknown.is_empty() {
        let valid: Vec<&str> = fields.iter().map(|f| f.name).collect();
        return Err(format!(
            "unknown output field(s) selected: {}; valid fields: {}",
            unknown.join(", "),
            valid.join(", ")
        ));
    }
    Ok(names
        .iter()
        .filter_map(|name| fields.iter().find(|f| f.name == *name))
        .collect())
}

/// How aligned columns look: gnt-* lists (`Title` headers, one space between columns) or the
/// `nodecare status` tables (`TITLE` headers, two spaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `nodecare incidents`, `nodecare nodes`.
    List,
    /// `nodecare status`, `nodecare watch`.
    Status,
}

/// The rows as JSON objects with the selected fields (`null` where the table shows `-`).
pub(crate) fn json_rows<T>(fields: &[&Field<T>], rows: &[T]) -> Value {
    Value::Array(
        rows.iter()
            .map(|row| {
                let map: Map<String, Value> = fields
                    .iter()
                    .map(|f| {
                        (
                            f.name.to_owned(),
                            (f.cell)(row).map_or(Value::Null, Value::String),
                        )
                    })
                    .collect();
                Value::Object(map)
            })
            .collect(),
    )
}

/// Renders `rows` with `fields` as `args` asks: aligned columns, separated fields or JSON.
pub(crate) fn render<T>(fields: &[&Field<T>], rows: &[T], args: &ListArgs) -> String {
    if args.json {
        let mut text = serde_json::to_string_pretty(&json_rows(fields, rows))
            .unwrap_or_else(|_| "[]".to_owned());
        text.push('\n');
        return text;
    }
    render_table(fields, rows, args, Style::List)
}

/// Renders `rows` as a table (aligned, or separated with `--separator`), with or without the
/// header line; numeric columns are right-aligned.
pub(crate) fn render_table<T>(
    fields: &[&Field<T>],
    rows: &[T],
    args: &ListArgs,
    style: Style,
) -> String {
    let cells: Vec<Vec<Option<String>>> = rows
        .iter()
        .map(|row| fields.iter().map(|f| (f.cell)(row)).collect())
        .collect();
    let header: Vec<String> = fields
        .iter()
        .map(|f| match style {
            Style::List => f.title.to_owned(),
            Style::Status => f.title.to_uppercase(),
        })
        .collect();
    let body: Vec<Vec<String>> = cells
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|cell| cell.unwrap_or_else(|| "-".to_owned()))
                .collect()
        })
        .collect();
    let mut lines: Vec<Vec<String>> = Vec::new();
    if !args.no_headers {
        lines.push(header);
    }
    lines.extend(body);
    let mut out = String::new();
    if let Some(separator) = &args.separator {
        for line in lines {
            let _ignored = writeln!(out, "{}", line.join(separator));
        }
        return out;
    }
    // Aligned like gnt-*: columns padded to the widest cell, numbers to the right.
    let gap = match style {
        Style::List => " ",
        Style::Status => "  ",
    };
    let mut widths = vec![0; fields.len()];
    for line in &lines {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for line in lines {
        let padded: Vec<String> = line
            .iter()
            .zip(&widths)
            .zip(fields)
            .map(|((cell, width), field)| {
                if field.numeric {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        let _ignored = writeln!(out, "{}", padded.join(gap).trim_end());
    }
    out
}

/// A duration in seconds as gnt-* style short text: `42s`, `5m`, `3h`, `2d`.
pub(crate) fn age(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Vec<Field<(u32, &'static str)>> {
        vec![
            Field {
                name: "num",
                title: "Num",
                numeric: true,
                cell: |r| Some(r.0.to_string()),
            },
            Field {
                name: "name",
                title: "Name",
                numeric: false,
                cell: |r| (!r.1.is_empty()).then(|| r.1.to_owned()),
            },
        ]
    }

    #[test]
    fn select_defaults_plus_and_unknown() {
        let f = fields();
        let names = |s: Vec<&Field<_>>| s.iter().map(|f| f.name).collect::<Vec<_>>();
        assert_eq!(names(select(&f, &["num"], None).unwrap()), ["num"]);
        assert_eq!(
            names(select(&f, &["num"], Some("name,num")).unwrap()),
            ["name", "num"]
        );
        assert_eq!(
            names(select(&f, &["num"], Some("+name")).unwrap()),
            ["num", "name"]
        );
        let error = select(&f, &["num"], Some("num,bogus")).err().unwrap();
        assert!(error.contains("bogus") && error.contains("valid fields: num, name"));
        assert!(select(&f, &["num"], Some("")).is_err());
    }

    #[test]
    fn render_each_form() {
        let f = fields();
        let selected = select(&f, &["num", "name"], None).unwrap();
        let rows = [(1, "alpha"), (100, "")];
        let plain = render(&selected, &rows, &ListArgs::default());
        assert_eq!(plain, "Num Name\n  1 alpha\n100 -\n");
        let args = ListArgs {
            no_headers: true,
            separator: Some("|".into()),
            ..ListArgs::default()
        };
        assert_eq!(render(&selected, &rows, &args), "1|alpha\n100|-\n");
        let args = ListArgs {
            json: true,
            ..ListArgs::default()
        };
        let json: Value = serde_json::from_str(&render(&selected, &rows, &args)).unwrap();
        assert_eq!(json[1]["name"], Value::Null);
        assert_eq!(json[0]["num"], "1");
    }

    #[test]
    fn age_units() {
        assert_eq!(age(999), "0s");
        assert_eq!(age(59_000), "59s");
        assert_eq!(age(60_000), "1m");
        assert_eq!(age(7_200_000), "2h");
        assert_eq!(age(90_000_000), "1d");
    }
}
