//! Strict JSON reading: exactly one value, and no object with a repeated key at any depth.
//!
//! `serde_json` keeps the last of repeated keys, so `{"status":"evacuate","status":"Ok"}` would
//! read as `Ok`: two readers of the same bytes could disagree on what they say. Every document
//! nodecare reads from the wire or from a script goes through [`from_slice`] instead.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value read with repeated keys refused.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("repeated key {key:?}")));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// Reads exactly one JSON value (surrounding whitespace allowed), refusing repeated keys.
pub fn from_slice(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|Strict(value)| value)
}

/// Reads `bytes` strictly, then decodes the value as `T`.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_value(from_slice(bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn repeated_keys_are_refused_at_any_depth() {
        for text in [
            r#"{"status":"evacuate","status":"Ok"}"#,
            r#"{"a":{"b":1,"b":1}}"#,
            r#"[{"x":[{"y":null,"y":2}]}]"#,
        ] {
            let error = from_slice(text.as_bytes()).unwrap_err().to_string();
            assert!(error.contains("repeated key"), "{text}: {error}");
        }
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let text = br#" {"a":[1,-2,3.5,true,null,"s"],"b":{"c":{}} } "#;
        assert_eq!(
            from_slice(text).unwrap(),
            serde_json::from_slice::<Value>(text).unwrap()
        );
        assert!(from_slice(b"{} {}").is_err());
        assert!(from_slice(b"").is_err());
        assert_eq!(
            from_slice(b"18446744073709551615").unwrap(),
            json!(u64::MAX)
        );
    }

    proptest! {
        #[test]
        fn agrees_with_serde_json_without_repeats(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            // Without repeated keys both readers accept the same documents, with the same value.
            if let Ok(value) = from_slice(&bytes) {
                prop_assert_eq!(Some(value), serde_json::from_slice::<Value>(&bytes).ok());
            }
        }

        #[test]
        fn round_trips_generated_documents(keys in prop::collection::btree_set("[a-z]{1,4}", 0..6)) {
            let object: Map<String, Value> = keys.into_iter().map(|k| (k, json!([1, {"k": 2}]))).collect();
            let text = serde_json::to_vec(&Value::Object(object.clone())).unwrap();
            prop_assert_eq!(from_slice(&text).unwrap(), Value::Object(object));
        }
    }
}
