//! Length limits of the free text and lists that writers send to the coordinator, enforced as
//! the wire types are decoded (a request past them is refused with `400` naming the field): one
//! writer must never grow the coordinator's state (and its replicas on the master candidates)
//! without bound.

use serde::{Deserialize, Deserializer, de::Error as _};

/// Longest name (node, failure domain, requester, group, tag), in bytes: a DNS name's limit.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest free text (a reason), in bytes.
pub const MAX_TEXT_BYTES: usize = 1024;
/// Most entries of a list (nodes left out of a campaign, node tags).
pub const MAX_LIST_ENTRIES: usize = 1000;

/// `Err` naming `field` when `value` is longer than `max` bytes.
pub fn check_len(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        Err(format!(
            "{field}: {} bytes, longer than the {max} allowed",
            value.len()
        ))
    } else {
        Ok(())
    }
}

/// `Err` naming `field` when `list` has more than [`MAX_LIST_ENTRIES`] entries or an entry
/// longer than [`MAX_NAME_BYTES`].
pub fn check_list(field: &str, list: &[String]) -> Result<(), String> {
    if list.len() > MAX_LIST_ENTRIES {
        return Err(format!(
            "{field}: {} entries, more than the {MAX_LIST_ENTRIES} allowed",
            list.len()
        ));
    }
    list.iter()
        .try_for_each(|entry| check_len(field, entry, MAX_NAME_BYTES))
}

fn bounded<'de, D: Deserializer<'de>>(deserializer: D, max: usize) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    check_len("text", &text, max).map_err(D::Error::custom)?;
    Ok(text)
}

/// Decodes a name of at most [`MAX_NAME_BYTES`].
pub fn name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    bounded(deserializer, MAX_NAME_BYTES)
}

/// Decodes an optional name of at most [`MAX_NAME_BYTES`].
pub fn optional_name<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    if let Some(text) = &text {
        check_len("text", text, MAX_NAME_BYTES).map_err(D::Error::custom)?;
    }
    Ok(text)
}

/// Decodes a free text of at most [`MAX_TEXT_BYTES`].
pub fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    bounded(deserializer, MAX_TEXT_BYTES)
}

/// Decodes an optional free text of at most [`MAX_TEXT_BYTES`].
pub fn optional_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    if let Some(text) = &text {
        check_len("text", text, MAX_TEXT_BYTES).map_err(D::Error::custom)?;
    }
    Ok(text)
}

/// Decodes a list of names: at most [`MAX_LIST_ENTRIES`], each at most [`MAX_NAME_BYTES`]. The
/// entries beyond the limit are never kept: decoding stops at the first one.
pub fn names<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    deserializer.deserialize_seq(NamesVisitor)
}

/// Decodes an optional list of names ([`names`]).
pub fn optional_names<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    struct Wrapper(Vec<String>);
    impl<'de> Deserialize<'de> for Wrapper {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            names(deserializer).map(Wrapper)
        }
    }
    Ok(Option::<Wrapper>::deserialize(deserializer)?.map(|w| w.0))
}

struct NamesVisitor;

impl<'de> serde::de::Visitor<'de> for NamesVisitor {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a list of at most {MAX_LIST_ENTRIES} names of at most {MAX_NAME_BYTES} bytes"
        )
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut list = Vec::new();
        while let Some(entry) = seq.next_element::<String>()? {
            if list.len() >= MAX_LIST_ENTRIES {
                return Err(A::Error::custom(format!(
                    "more than the {MAX_LIST_ENTRIES} entries allowed"
                )));
            }
            check_len("entry", &entry, MAX_NAME_BYTES).map_err(A::Error::custom)?;
            list.push(entry);
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Probe {
        #[serde(deserialize_with = "text")]
        reason: String,
        #[serde(default, deserialize_with = "names")]
        nodes: Vec<String>,
    }

    #[test]
    fn text_and_lists_past_their_limits_are_refused_with_the_field() {
        let ok: Probe = serde_json::from_str(r#"{"reason":"firmware","nodes":["n1"]}"#).unwrap();
        assert_eq!(
            (ok.reason.as_str(), ok.nodes),
            ("firmware", vec!["n1".to_owned()])
        );
        let long = format!(r#"{{"reason":"{}"}}"#, "x".repeat(MAX_TEXT_BYTES + 1));
        let error = serde_json::from_str::<Probe>(&long)
            .unwrap_err()
            .to_string();
        assert!(error.contains("longer than the 1024 allowed"), "{error}");
        let many = format!(
            r#"{{"reason":"r","nodes":[{}]}}"#,
            vec!["\"n\""; MAX_LIST_ENTRIES + 1].join(",")
        );
        let error = serde_json::from_str::<Probe>(&many)
            .unwrap_err()
            .to_string();
        assert!(error.contains("more than the 1000 entries"), "{error}");
        assert!(check_list("offline", &["y".repeat(256)]).is_err());
    }
}
