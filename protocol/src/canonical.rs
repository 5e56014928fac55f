//! RFC 8785 (JCS) canonical JSON and SHA-256 fingerprints over it.
//!
//! Canonical bytes are what gets signed and fingerprinted, so both sides must produce exactly the
//! same bytes for the same value. RFC 8785 represents numbers as IEEE-754 doubles, which would
//! silently merge integers above 2^53; such integers are refused instead, so that no two distinct
//! documents ever share canonical bytes.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// The largest integer magnitude that survives the IEEE-754 round trip of RFC 8785 exactly.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a value has no canonical form.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CanonicalError {
    /// An integer that is not an exact IEEE-754 double: RFC 8785 would round it.
    #[error("integer {0} is not exactly representable as an IEEE-754 double; send it as a string")]
    UnsafeInteger(String),
    /// The serialiser failed (not expected for a `serde_json::Value`).
    #[error("canonical serialisation failed: {0}")]
    Serialise(String),
}

fn check_numbers(value: &Value) -> Result<(), CanonicalError> {
    match value {
        Value::Number(number) => {
            // An integer is safe when RFC 8785, which reads it as a double and prints that
            // double's shortest form, gives the same digits back: everything up to 2^53, and
            // larger values that a double prints exactly (such as the canonical form of a float).
            #[allow(clippy::cast_precision_loss)]
            let safe = if let Some(unsigned) = number.as_u64() {
                unsigned <= MAX_SAFE_INTEGER
                    || format!("{}", unsigned as f64) == unsigned.to_string()
            } else if let Some(signed) = number.as_i64() {
                let magnitude = signed.unsigned_abs();
                magnitude <= MAX_SAFE_INTEGER
                    || format!("{}", magnitude as f64) == magnitude.to_string()
            } else {
                // A float: JCS formats it as ECMAScript does, which is exact for the double.
                true
            };
            if safe {
                Ok(())
            } else {
                Err(CanonicalError::UnsafeInteger(number.to_string()))
            }
        }
        Value::Array(items) => items.iter().try_for_each(check_numbers),
        Value::Object(map) => map.values().try_for_each(check_numbers),
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

/// The RFC 8785 canonical bytes of `value`.
pub fn canonical_bytes(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    check_numbers(value)?;
    serde_jcs::to_vec(value).map_err(|error| CanonicalError::Serialise(error.to_string()))
}

/// Lower-case hex SHA-256 over the canonical bytes of `value`.
pub fn fingerprint_of(value: &Value) -> Result<String, CanonicalError> {
    let bytes = canonical_bytes(value)?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// A JSON document kept as its exact RFC 8785 canonical bytes: what a MAC covered, byte for
/// byte. Serialises as that JSON (not as a string); compares by bytes.
#[derive(Debug, Clone)]
pub struct CanonicalJson(Box<RawValue>);

impl CanonicalJson {
    /// The canonical form of `value`.
    pub fn new(value: &Value) -> Result<Self, CanonicalError> {
        let bytes = canonical_bytes(value)?;
        let text = String::from_utf8(bytes)
            .map_err(|error| CanonicalError::Serialise(error.to_string()))?;
        RawValue::from_string(text)
            .map(Self)
            .map_err(|error| CanonicalError::Serialise(error.to_string()))
    }

    /// The canonical JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The document as a value.
    pub fn to_value(&self) -> Value {
        // Canonical bytes are JSON by construction.
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

impl PartialEq for CanonicalJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Serialize for CanonicalJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CanonicalJson {
    /// Reads any JSON document and keeps its canonical form (so that a stored copy stays exact,
    /// and a hand-edited one becomes canonical).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::new(&value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn canonical_string(value: &Value) -> String {
        String::from_utf8(canonical_bytes(value).unwrap()).unwrap()
    }

    #[test]
    fn rfc8785_key_order_and_numbers() {
        // RFC 8785 §3.2.3: keys sorted by UTF-16 code units.
        let value: Value = serde_json::from_str(
            r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_string(&value),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
             \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
             \"\u{1f600}\":\"Emoji: Grinning Face\",\
             \"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
        let numbers: Value = serde_json::from_str(
            r#"[333333333.33333329, 1E30, 4.50, 2e-3, 1e-27, -0.0, 1e21, 1e20]"#,
        )
        .unwrap();
        assert_eq!(
            canonical_string(&numbers),
            "[333333333.3333333,1e+30,4.5,0.002,1e-27,0,1e+21,100000000000000000000]"
        );
    }

    #[test]
    fn whitespace_and_key_order_do_not_change_fingerprint() {
        let a: Value = serde_json::from_str(r#"{"b": [1, 2], "a": {"y": 1, "x": "z"}}"#).unwrap();
        let b: Value =
            serde_json::from_str("{\"a\":{\"x\":\"z\",\"y\":1},\n \"b\":[1,2]}").unwrap();
        assert_eq!(fingerprint_of(&a).unwrap(), fingerprint_of(&b).unwrap());
        assert_ne!(
            fingerprint_of(&a).unwrap(),
            fingerprint_of(&json!({"b": [2, 1]})).unwrap()
        );
    }

    #[test]
    fn unsafe_integers_are_refused() {
        assert!(canonical_bytes(&json!(MAX_SAFE_INTEGER)).is_ok());
        assert!(canonical_bytes(&json!(-(MAX_SAFE_INTEGER as i64))).is_ok());
        assert_eq!(
            canonical_bytes(&json!({"a": [9_007_199_254_740_993_u64]})),
            Err(CanonicalError::UnsafeInteger("9007199254740993".into()))
        );
        assert!(canonical_bytes(&json!(i64::MIN)).is_err());
        assert!(canonical_bytes(&json!(i64::MIN + 1)).is_err());
        // The canonical form of a float is itself canonical.
        assert!(canonical_bytes(&json!(-89_757_128_601_382_670_i64)).is_ok());
        assert!(canonical_bytes(&json!(u64::MAX)).is_err());
    }

    #[test]
    fn canonical_json_keeps_canonical_bytes() {
        let value: Value = serde_json::from_str(r#"{"b": 1E30, "a": [4.50, "x"]}"#).unwrap();
        let kept = CanonicalJson::new(&value).unwrap();
        assert_eq!(kept.get(), r#"{"a":[4.5,"x"],"b":1e+30}"#);
        let text = serde_json::to_string(&json!({"original": kept})).unwrap();
        assert_eq!(text, r#"{"original":{"a":[4.5,"x"],"b":1e+30}}"#);
        let back: CanonicalJson = serde_json::from_str(r#"{ "b":1e30,"a":[4.5,"x"] }"#).unwrap();
        assert_eq!(back, kept);
        assert_eq!(kept.to_value(), value);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(MAX_SAFE_INTEGER as i64)..=(MAX_SAFE_INTEGER as i64)).prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            ".*".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(".*", inner, 0..8)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_form_is_a_fixed_point(value in arb_json()) {
            let first = canonical_bytes(&value).unwrap();
            let reparsed: Value = serde_json::from_slice(&first).unwrap();
            let second = canonical_bytes(&reparsed).unwrap();
            prop_assert_eq!(first, second);
        }

        #[test]
        fn pretty_printing_keeps_the_fingerprint(value in arb_json()) {
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            let reparsed: Value = serde_json::from_str(&pretty).unwrap();
            prop_assert_eq!(fingerprint_of(&value).unwrap(), fingerprint_of(&reparsed).unwrap());
        }
    }
}
