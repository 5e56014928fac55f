//! Parser for the htools text backend (`-t FILE`).
//!
//! Layout: blank-line-separated sections `groups`, `nodes`, `instances`,
//! `cluster tags` and an optional `ipolicies` section; `|`-separated
//! columns with positional defaults for short rows.

use std::collections::HashMap;
use std::fmt;

use crate::cluster::{Cluster, DiskTemplate, Group, Instance, InstanceStatus, Node};

/// A text-backend error, naming the 1-based line and the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TextError {
    /// 1-based line number in the file (0 when the error is about the whole file).
    pub line: usize,
    /// The column name, when one column is at fault.
    pub field: Option<&'static str>,
    pub message: String,
    /// hroller's own wording of the same error, where it is known.
    pub htools_message: Option<String>,
}

impl TextError {
    /// The error as hroller 3.0.2 words it (for `--hroller-compat`), or
    /// the ordinary text when hroller's wording is not known.
    pub fn htools_text(&self) -> String {
        self.htools_message
            .clone()
            .unwrap_or_else(|| self.to_string())
    }
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.field) {
            (0, _) => write!(f, "{}", self.message),
            (l, Some(field)) => write!(f, "line {l}, field {field}: {}", self.message),
            (l, None) => write!(f, "line {l}: {}", self.message),
        }
    }
}

fn err(line: usize, field: Option<&'static str>, message: impl Into<String>) -> TextError {
    TextError {
        line,
        field,
        message: message.into(),
        htools_message: None,
    }
}

/// Splits like htools: every separator counts, an empty input gives no items,
/// a trailing separator gives a trailing empty item.
fn sep_split(s: &str, sep: char) -> Vec<&str> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split(sep).collect()
    }
}

/// Splits text into lines like Haskell `lines`: a final newline does not
/// start an extra empty line.
fn haskell_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n').collect()
}

type NumberedLine<'a> = (usize, &'a str);

fn sections(text: &str) -> Vec<Vec<NumberedLine<'_>>> {
    let lines = haskell_lines(text);
    if lines.is_empty() {
        return Vec::new();
    }
    let mut out = vec![Vec::new()];
    for (i, l) in lines.into_iter().enumerate() {
        if l.is_empty() {
            out.push(Vec::new());
        } else if let Some(last) = out.last_mut() {
            last.push((i + 1, l));
        }
    }
    out
}

fn parse_int(line: usize, field: &'static str, s: &str) -> Result<i64, TextError> {
    s.parse::<i64>().map_err(|_| {
        err(
            line,
            Some(field),
            format!("cannot parse '{s}' as an integer"),
        )
    })
}

fn parse_double(line: usize, field: &'static str, s: &str) -> Result<f64, TextError> {
    let ok_syntax = !s.is_empty()
        && !s.starts_with('+')
        && !s.starts_with('.')
        && !s.ends_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'e' | b'E' | b'+'));
    match s.parse::<f64>() {
        Ok(v) if ok_syntax && v.is_finite() => Ok(v),
        _ => Err(err(
            line,
            Some(field),
            format!("cannot parse '{s}' as a number"),
        )),
    }
}

fn parse_yn(line: usize, field: &'static str, s: &str) -> Result<bool, TextError> {
    match s {
        "Y" => Ok(true),
        "N" => Ok(false),
        _ => Err(err(
            line,
            Some(field),
            format!("expected 'Y' or 'N', got '{s}'"),
        )),
    }
}

fn tags(s: &str) -> Vec<String> {
    sep_split(s, ',').into_iter().map(str::to_owned).collect()
}

const NODE_FIELDS: [&str; 15] = [
    "name",
    "t_mem",
    "n_mem",
    "f_mem",
    "t_dsk",
    "f_dsk",
    "t_cpu",
    "flag",
    "group_uuid",
    "spindles",
    "tags",
    "excl_stor",
    "free_spindles",
    "nos_cpu",
    "cpu_speed",
];
const NODE_DEFAULTS: [&str; 6] = ["1", "", "N", "0", "1", "1.0"];

const INST_FIELDS: [&str; 13] = [
    "name",
    "mem",
    "dsk",
    "vcpus",
    "status",
    "auto_balance",
    "pnode",
    "snode",
    "disk_template",
    "tags",
    "spindle_use",
    "spindles",
    "forthcoming",
];
const INST_DEFAULTS: [&str; 3] = ["1", "-", "N"];

fn parse_group(line: usize, row: &str) -> Result<Group, TextError> {
    let f = sep_split(row, '|');
    if f.len() < 4 {
        return Err(err(
            line,
            None,
            format!(
                "group row needs at least 4 fields (name|uuid|alloc_policy|tags), got {}",
                f.len()
            ),
        ));
    }
    if !matches!(f[2], "preferred" | "last_resort" | "unallocable") {
        return Err(err(
            line,
            Some("alloc_policy"),
            format!(
                "unknown allocation policy '{}' (preferred, last_resort, unallocable)",
                f[2]
            ),
        ));
    }
    Ok(Group {
        name: f[0].to_owned(),
        uuid: f[1].to_owned(),
        alloc_policy: f[2].to_owned(),
        tags: tags(f[3]),
    })
}

fn parse_node(line: usize, row: &str, groups: &HashMap<&str, usize>) -> Result<Node, TextError> {
    let mut f = sep_split(row, '|');
    if f.len() < 9 {
        return Err(err(
            line,
            None,
            format!("node row needs at least 9 fields, got {}", f.len()),
        ));
    }
    while f.len() < 15 {
        f.push(NODE_DEFAULTS[f.len() - 9]);
    }
    let name = f[0].to_owned();
    let group = *groups.get(f[8]).ok_or_else(|| {
        err(
            line,
            Some("group_uuid"),
            format!("unknown group uuid '{}' for node '{name}'", f[8]),
        )
    })?;
    if f[1..7].contains(&"?") {
        return Ok(Node {
            name,
            t_mem: 0.0,
            n_mem: 0,
            f_mem: 0,
            t_dsk: 0.0,
            f_dsk: 0,
            t_cpu: 0.0,
            offline: true,
            master: false,
            group,
            spindles: 0,
            tags: Vec::new(),
            excl_stor: false,
            free_spindles: 0,
            nos_cpu: 0,
            cpu_speed: 1.0,
        });
    }
    Ok(Node {
        t_mem: parse_double(line, NODE_FIELDS[1], f[1])?,
        n_mem: parse_int(line, NODE_FIELDS[2], f[2])?,
        f_mem: parse_int(line, NODE_FIELDS[3], f[3])?,
        t_dsk: parse_double(line, NODE_FIELDS[4], f[4])?,
        f_dsk: parse_int(line, NODE_FIELDS[5], f[5])?,
        t_cpu: parse_double(line, NODE_FIELDS[6], f[6])?,
        offline: f[7] == "Y",
        master: f[7] == "M",
        group,
        spindles: parse_int(line, NODE_FIELDS[9], f[9])?,
        tags: tags(f[10]),
        excl_stor: parse_yn(line, NODE_FIELDS[11], f[11])?,
        free_spindles: parse_int(line, NODE_FIELDS[12], f[12])?,
        nos_cpu: parse_int(line, NODE_FIELDS[13], f[13])?,
        cpu_speed: parse_double(line, NODE_FIELDS[14], f[14])?,
        name,
    })
}

fn parse_instance(
    line: usize,
    row: &str,
    nodes: &HashMap<&str, usize>,
) -> Result<Instance, TextError> {
    let mut f = sep_split(row, '|');
    if f.len() < 10 {
        return Err(err(
            line,
            None,
            format!("instance row needs at least 10 fields, got {}", f.len()),
        ));
    }
    while f.len() < 13 {
        f.push(INST_DEFAULTS[f.len() - 10]);
    }
    let name = f[0].to_owned();
    let lookup = |field: &'static str, s: &str| {
        nodes.get(s).copied().ok_or_else(|| TextError {
            htools_message: Some(format!("Unknown node '{s}' for instance {name}")),
            ..err(
                line,
                Some(field),
                format!("unknown node '{s}' for instance '{name}'"),
            )
        })
    };
    let pnode = lookup("pnode", f[6])?;
    let snode = if f[7].is_empty() {
        None
    } else {
        Some(lookup("snode", f[7])?)
    };
    let status = InstanceStatus::parse(f[4]).ok_or_else(|| {
        err(
            line,
            Some("status"),
            format!("unknown instance status '{}'", f[4]),
        )
    })?;
    let template = DiskTemplate::parse(f[8]).ok_or_else(|| {
        err(
            line,
            Some("disk_template"),
            format!("unknown disk template '{}'", f[8]),
        )
    })?;
    if template.has_secondary() && snode == Some(pnode) {
        return Err(err(
            line,
            Some("snode"),
            format!(
                "instance '{name}' has the same primary and secondary node '{}'",
                f[6]
            ),
        ));
    }
    let spindles = if f[11] == "-" {
        None
    } else {
        Some(parse_int(line, INST_FIELDS[11], f[11])?)
    };
    Ok(Instance {
        mem: parse_int(line, INST_FIELDS[1], f[1])?,
        dsk: parse_int(line, INST_FIELDS[2], f[2])?,
        vcpus: parse_int(line, INST_FIELDS[3], f[3])?,
        status,
        auto_balance: parse_yn(line, INST_FIELDS[5], f[5])?,
        pnode,
        snode,
        template,
        tags: tags(f[9]),
        spindle_use: parse_int(line, INST_FIELDS[10], f[10])?,
        spindles,
        forthcoming: parse_yn(line, INST_FIELDS[12], f[12])?,
        name,
    })
}

fn check_ispec(line: usize, field: &'static str, spec: &str) -> Result<(), TextError> {
    let parts = sep_split(spec, ',');
    if parts.len() < 6 {
        return Err(err(
            line,
            Some(field),
            format!("instance spec '{spec}' needs 6 integers"),
        ));
    }
    for p in &parts[..6] {
        parse_int(line, field, p)?;
    }
    Ok(())
}

fn check_ipolicy(line: usize, row: &str, groups: &[Group]) -> Result<(), TextError> {
    let f = sep_split(row, '|');
    if f.len() < 6 {
        return Err(err(
            line,
            None,
            format!("ipolicy row needs at least 6 fields, got {}", f.len()),
        ));
    }
    check_ispec(line, "std", f[1])?;
    let minmax = sep_split(f[2], ';');
    if !minmax.len().is_multiple_of(2) {
        return Err(err(line, Some("minmax"), "odd number of min/max specs"));
    }
    for s in minmax {
        check_ispec(line, "minmax", s)?;
    }
    for t in sep_split(f[3], ',') {
        if DiskTemplate::parse(t).is_none() {
            return Err(err(
                line,
                Some("disk_templates"),
                format!("unknown disk template '{t}'"),
            ));
        }
    }
    parse_double(line, "vcpu_ratio", f[4])?;
    parse_double(line, "spindle_ratio", f[5])?;
    if !f[0].is_empty() && !groups.iter().any(|g| g.name == f[0]) {
        return Err(err(
            line,
            Some("owner"),
            format!("unknown group '{}'", f[0]),
        ));
    }
    Ok(())
}

/// Parses a whole htools text file.
pub fn parse(text: &str) -> Result<Cluster, TextError> {
    let sects = sections(text);
    if sects.len() < 4 {
        return Err(err(
            0,
            None,
            format!(
                "Invalid format of the input file: {} sections instead of 4 or more",
                sects.len()
            ),
        ));
    }
    let mut cluster = Cluster::default();
    for &(line, row) in &sects[0] {
        cluster.groups.push(parse_group(line, row)?);
    }
    let group_idx: HashMap<&str, usize> = cluster
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.uuid.as_str(), i))
        .collect();
    for &(line, row) in &sects[1] {
        cluster.nodes.push(parse_node(line, row, &group_idx)?);
    }
    let node_idx: HashMap<&str, usize> = cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    for &(line, row) in &sects[2] {
        cluster
            .instances
            .push(parse_instance(line, row, &node_idx)?);
    }
    cluster.cluster_tags = sects[3].iter().map(|&(_, t)| t.to_owned()).collect();
    if let Some(pols) = sects.get(4) {
        for &(line, row) in pols {
            check_ipolicy(line, row, &cluster.groups)?;
            cluster.ipolicies.push(row.to_owned());
        }
    }
    Ok(cluster)
}

/// A double the way htools prints it: `1.0`, `1.5`.
pub(crate) fn haskell_double(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e7 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// Writes a cluster in the text format (groups, nodes, instances, cluster
/// tags, instance policies; without policies, htools' defaults apply on reload).
pub fn serialize(c: &Cluster) -> String {
    let yn = |b: bool| if b { "Y" } else { "N" };
    let mut groups = String::new();
    for g in &c.groups {
        groups.push_str(&format!(
            "{}|{}|{}|{}|\n",
            g.name,
            g.uuid,
            g.alloc_policy,
            g.tags.join(",")
        ));
    }
    let mut nodes = String::new();
    for n in &c.nodes {
        let flag = if n.offline {
            'Y'
        } else if n.master {
            'M'
        } else {
            'N'
        };
        let guuid = c.groups.get(n.group).map_or("", |g| g.uuid.as_str());
        nodes.push_str(&format!(
            "{}|{:.0}|{}|{}|{:.0}|{}|{:.0}|{flag}|{guuid}|{}|{}|{}|{}|{}|{}\n",
            n.name,
            n.t_mem,
            n.n_mem,
            n.f_mem,
            n.t_dsk,
            n.f_dsk,
            n.t_cpu,
            n.spindles,
            n.tags.join(","),
            yn(n.excl_stor),
            n.free_spindles,
            n.nos_cpu,
            haskell_double(n.cpu_speed)
        ));
    }
    let name = |i: usize| c.nodes.get(i).map_or("", |n| n.name.as_str());
    let mut insts = String::new();
    for i in &c.instances {
        insts.push_str(&format!(
            "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}\n",
            i.name,
            i.mem,
            i.dsk,
            i.vcpus,
            i.status.as_str(),
            yn(i.auto_balance),
            name(i.pnode),
            i.snode.map_or("", name),
            i.template.as_str(),
            i.tags.join(","),
            i.spindle_use,
            i.spindles.map_or_else(|| "-".to_owned(), |s| s.to_string()),
            yn(i.forthcoming)
        ));
    }
    let mut tags = String::new();
    for t in &c.cluster_tags {
        tags.push_str(t);
        tags.push('\n');
    }
    let mut ipolicies = String::new();
    for row in &c.ipolicies {
        ipolicies.push_str(row);
        ipolicies.push('\n');
    }
    [groups, nodes, insts, tags, ipolicies].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const URO: &str = "group-01|fake-uuid-01|preferred||\n\n\
node-01-001|91552|0|91424|3500|1196|16|M|fake-uuid-01|1\n\
node-01-002|91552|0|91296|3500|1196|16|N|fake-uuid-01|1\n\
node-01-003|91552|0|91296|3500|1196|16|N|fake-uuid-01|1\n\n\
new-0|128|1152|1|running|Y|node-01-001|node-01-002|drbd||1\n\
new-1|128|1152|1|running|Y|node-01-002|node-01-003|drbd||1\n\
nonred-0|128|1152|1|running|Y|node-01-001||plain||1\n\
nonred-1|128|1152|1|running|Y|node-01-003||plain||1\n\n\n\
|128,1,1024,1,1,1|128,1,1024,1,1,1;32768,8,1048576,16,8,12|diskless,file,sharedfile,plain,blockdev,drbd,rbd,ext|4.0|32.0\n";

    #[test]
    fn parses_fixture() {
        let c = parse(URO).unwrap();
        assert_eq!(c.groups.len(), 1);
        assert_eq!(c.nodes.len(), 3);
        assert!(c.nodes[0].master);
        assert_eq!(c.nodes[1].spindles, 1);
        assert!(!c.nodes[1].excl_stor);
        assert_eq!(c.instances.len(), 4);
        assert_eq!(c.instances[0].snode, Some(1));
        assert_eq!(c.instances[2].snode, None);
        assert_eq!(c.instances[2].template, DiskTemplate::Plain);
        assert_eq!(c.instances[3].spindles, None);
        assert!(c.cluster_tags.is_empty());
        assert_eq!(c.primary_lists()[0], vec![2, 0]);
    }

    #[test]
    fn unknown_node_has_htools_wording() {
        let e = parse(
            "g|u|preferred|\n\nn1|100|0|100|100|100|1|M|u\n\ni1|1|1|1|running|Y|n9||plain|\n\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 5, field pnode: unknown node 'n9' for instance 'i1'"
        );
        assert_eq!(e.htools_text(), "Unknown node 'n9' for instance i1");
        let e = parse("").unwrap_err();
        assert_eq!(e.htools_text(), e.to_string());
    }

    #[test]
    fn section_count_error() {
        let e = parse("g|u|preferred|\n\nn1|100|0|100|100|100|1|M|u\n\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "Invalid format of the input file: 3 sections instead of 4 or more"
        );
        assert_eq!(
            parse("").unwrap_err().message,
            "Invalid format of the input file: 0 sections instead of 4 or more"
        );
    }

    #[test]
    fn bad_field_names_line_and_field() {
        let e = parse("g|u|preferred|\n\nn1|100|0|100|100|x|1|M|u\n\n\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(e.field, Some("f_dsk"));
        assert_eq!(
            e.to_string(),
            "line 3, field f_dsk: cannot parse 'x' as an integer"
        );
        let e = parse("g|u|preferred|\n\nn1|100|0|100|100|1|1|M|zz\n\n\n").unwrap_err();
        assert_eq!(e.field, Some("group_uuid"));
        let e = parse("g|u|preferred|\n\nn1|1|0|1|1|1|1|M|u\n\ni|1|1|1|running|Y|n1||plain\n\n")
            .unwrap_err();
        assert_eq!(e.line, 5);
        let e = parse("g|u|preferred|\n\nn1|1|0|1|1|1|1|M|u\n\ni|1|1|1|running|Y|n1|n1|drbd|\n\n")
            .unwrap_err();
        assert_eq!(e.field, Some("snode"));
    }

    #[test]
    fn question_mark_node_is_offline() {
        let c = parse("g|u|preferred|\n\nn1|?|0|1|1|1|1|M|u\n\n\n").unwrap();
        assert!(c.nodes[0].offline);
        assert!(!c.nodes[0].master);
    }

    #[test]
    fn duplicate_names_resolve_to_last() {
        let c = parse(
            "g|u|preferred|\n\nn|1|0|1|1|1|1|M|u\nn|1|0|1|1|1|1|N|u\n\ni|1|1|1|running|Y|n||plain|\n\n",
        )
        .unwrap();
        assert_eq!(c.instances[0].pnode, 1);
    }
}
