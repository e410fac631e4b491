//! Strict request bodies.
//!
//! The API promises that unknown fields, duplicate keys, keys in the wrong case, `null` where a
//! value is required, wrong types and out-of-range numbers are all a 400 naming the field.
//! `serde_json::Value` silently keeps the last of two equal keys, and `#[derive(Deserialize)]`
//! reports errors without a usable path, so bodies are read in two steps: [`parse_object`]
//! refuses duplicates anywhere, then an [`ObjectReader`] takes typed fields one by one and
//! [`ObjectReader::finish`] refuses whatever is left.

use std::collections::HashSet;
use std::fmt;
use std::ops::RangeInclusive;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use sluice_durable::field_error::FieldError;

/// Largest float magnitude read as an integer: up to 2^53 every integer has one float.
const EXACT_FLOAT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// Location of a value inside the body, rendered only when an error needs it.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => f.write_str("body"),
            Path::Key(Path::Root, key) => f.write_str(key),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

const DUPLICATE: &str = "duplicate key";
/// PostgreSQL's `text` and `jsonb` cannot hold U+0000: a body carrying one would be refused by
/// the database after validation (a `503` that blames the database), so it is refused here.
const NUL: &str = "must not contain U+0000";

/// Walks the document once without building anything, to find repeated keys and U+0000 in any
/// string or key.
///
/// This is a separate pass (rather than a custom `Value` builder) so that numbers are still
/// built by serde_json itself, whatever its feature set (`arbitrary_precision` routes numbers
/// through `visit_map`, which a hand-written builder would mistake for objects).
struct DuplicateCheck<'a> {
    path: Path<'a>,
    /// The first refusal: its path and message.
    found: &'a mut Option<(String, &'static str)>,
}

impl<'de> DeserializeSeed<'de> for DuplicateCheck<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DuplicateCheck<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
        if value.contains('\0') {
            *self.found = Some((self.path.to_string(), NUL));
            return Err(E::custom(NUL));
        }
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            let path = Path::Index(&self.path, index);
            let seed = DuplicateCheck {
                path,
                found: &mut *self.found,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = Path::Key(&self.path, &key);
            if seen.contains(&key) {
                *self.found = Some((path.to_string(), DUPLICATE));
                return Err(de::Error::custom(DUPLICATE));
            }
            if key.contains('\0') {
                *self.found = Some((path.to_string(), NUL));
                return Err(de::Error::custom(NUL));
            }
            map.next_value_seed(DuplicateCheck {
                path,
                found: &mut *self.found,
            })?;
            seen.insert(key);
        }
        Ok(())
    }
}

/// Parses a request body that must be a JSON object with no repeated key at any depth and no
/// U+0000 in any string or key.
///
/// Syntax errors and invalid UTF-8 are reported on field `body` with serde_json's line and
/// column; a repeated key is reported on its own path (`input.offer`, `items[2].id`).
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, FieldError> {
    let invalid = |e: serde_json::Error| FieldError::new("body", format!("invalid JSON: {e}"));
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let checked = DuplicateCheck {
        path: Path::Root,
        found: &mut found,
    }
    .deserialize(&mut de);
    if let Some((path, message)) = found {
        return Err(FieldError::new(path, message));
    }
    checked.and_then(|()| de.end()).map_err(invalid)?;
    match serde_json::from_slice(body).map_err(invalid)? {
        Value::Object(map) => Ok(map),
        _ => Err(FieldError::new("body", "must be a JSON object")),
    }
}

/// Takes typed fields out of one JSON object, then refuses any field nobody asked for.
///
/// Every accessor removes its field, so [`finish`](Self::finish) sees exactly the leftovers.
/// Names that were asked for are remembered so that a key differing only in case gets a
/// "did you mean" hint instead of a bare "unknown field".
#[derive(Debug)]
pub struct ObjectReader {
    map: Map<String, Value>,
    prefix: String,
    asked: Vec<String>,
}

impl ObjectReader {
    /// Wraps `map`; error paths are `prefix.name`, or just `name` when `prefix` is empty.
    pub fn new(map: Map<String, Value>, prefix: &str) -> Self {
        Self {
            map,
            prefix: prefix.to_owned(),
            asked: Vec::new(),
        }
    }

    /// The path used in errors for field `name`, for callers validating the value further.
    pub fn path(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    fn error(&self, name: &str, message: impl Into<String>) -> FieldError {
        FieldError::new(self.path(name), message)
    }

    /// Removes `name`; explicit `null` is an error because no field of the API accepts it.
    fn take(&mut self, name: &str) -> Result<Option<Value>, FieldError> {
        self.asked.push(name.to_owned());
        match self.map.remove(name) {
            Some(Value::Null) => Err(self.error(name, "must not be null")),
            other => Ok(other),
        }
    }

    /// Like [`take`](Self::take), but absence is an error. A key matching `name` only up to
    /// case is reported as that key with a hint, which is what the client actually got wrong.
    fn take_required(&mut self, name: &str) -> Result<Value, FieldError> {
        if let Some(value) = self.take(name)? {
            return Ok(value);
        }
        match self.map.keys().find(|k| k.eq_ignore_ascii_case(name)) {
            Some(key) => Err(self.error(key, format!("unknown field (did you mean \"{name}\"?)"))),
            None => Err(self.error(name, "is required")),
        }
    }

    fn string(&self, name: &str, value: Value) -> Result<String, FieldError> {
        match value {
            Value::String(s) => Ok(s),
            _ => Err(self.error(name, "must be a string")),
        }
    }

    /// A string field that must be present.
    pub fn required_string(&mut self, name: &str) -> Result<String, FieldError> {
        let value = self.take_required(name)?;
        self.string(name, value)
    }

    /// A string field that may be absent (but not `null`).
    pub fn optional_string(&mut self, name: &str) -> Result<Option<String>, FieldError> {
        self.take(name)?.map(|v| self.string(name, v)).transpose()
    }

    fn object(&self, name: &str, value: Value) -> Result<Map<String, Value>, FieldError> {
        match value {
            Value::Object(map) => Ok(map),
            _ => Err(self.error(name, "must be an object")),
        }
    }

    /// A nested object that must be present; read it with `ObjectReader::new(map, &path)`.
    pub fn required_object(&mut self, name: &str) -> Result<Map<String, Value>, FieldError> {
        let value = self.take_required(name)?;
        self.object(name, value)
    }

    /// A nested object that may be absent (but not `null`).
    pub fn optional_object(
        &mut self,
        name: &str,
    ) -> Result<Option<Map<String, Value>>, FieldError> {
        self.take(name)?.map(|v| self.object(name, v)).transpose()
    }

    /// An array field that must be present; its items are the caller's to check.
    pub fn required_array(&mut self, name: &str) -> Result<Vec<Value>, FieldError> {
        match self.take_required(name)? {
            Value::Array(items) => Ok(items),
            _ => Err(self.error(name, "must be an array")),
        }
    }

    fn boolean(&self, name: &str, value: Value) -> Result<bool, FieldError> {
        value
            .as_bool()
            .ok_or_else(|| self.error(name, "must be a boolean"))
    }

    /// A boolean field that must be present.
    pub fn required_bool(&mut self, name: &str) -> Result<bool, FieldError> {
        let value = self.take_required(name)?;
        self.boolean(name, value)
    }

    /// A boolean field that may be absent (but not `null`).
    pub fn optional_bool(&mut self, name: &str) -> Result<Option<bool>, FieldError> {
        self.take(name)?.map(|v| self.boolean(name, v)).transpose()
    }

    /// Checks an integer against `[lo, hi]`. An integer is a number without a fractional part,
    /// as JSON Schema (and so `docs/openapi.json`) defines it: `3.0` and `3e0` are the integer
    /// 3 (a client whose numbers pass through a float writes them so, and schemathesis sends
    /// them as valid), up to 2^53 where a float still spells one integer exactly; `1.5` is
    /// "must be an integer". An integral float outside the range (serde_json's form for
    /// integers beyond u64) is reported as out of range, which is what the client needs to hear.
    fn integer<T>(&self, name: &str, value: &Value, lo: T, hi: T) -> Result<T, FieldError>
    where
        T: Copy + PartialOrd + fmt::Display + TryFrom<i64> + TryFrom<u64> + Into<i128>,
    {
        let out_of_range = || self.error(name, format!("must be between {lo} and {hi}"));
        let Value::Number(n) = value else {
            return Err(self.error(name, "must be an integer"));
        };
        let parsed = match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => T::try_from(i).ok(),
            (None, Some(u)) => T::try_from(u).ok(),
            (None, None) => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                let integral = f.is_finite() && f.fract() == 0.0;
                if integral && f.abs() <= EXACT_FLOAT_INTEGER {
                    // Exact: |f| ≤ 2^53, so the cast neither rounds nor saturates.
                    T::try_from(f as i64).ok()
                } else {
                    let (lo_f, hi_f) = (lo.into() as f64, hi.into() as f64);
                    return Err(if integral && !(lo_f..=hi_f).contains(&f) {
                        out_of_range()
                    } else {
                        self.error(name, "must be an integer")
                    });
                }
            }
        };
        match parsed {
            Some(v) if lo <= v && v <= hi => Ok(v),
            _ => Err(out_of_range()),
        }
    }

    /// A signed integer within `range` that must be present.
    pub fn required_i64_in(
        &mut self,
        name: &str,
        range: RangeInclusive<i64>,
    ) -> Result<i64, FieldError> {
        let value = self.take_required(name)?;
        self.integer(name, &value, *range.start(), *range.end())
    }

    /// A signed integer within `range` that may be absent (but not `null`).
    pub fn optional_i64_in(
        &mut self,
        name: &str,
        range: RangeInclusive<i64>,
    ) -> Result<Option<i64>, FieldError> {
        let value = self.take(name)?;
        value
            .map(|v| self.integer(name, &v, *range.start(), *range.end()))
            .transpose()
    }

    /// An unsigned integer within `range` that must be present.
    pub fn required_u64_in(
        &mut self,
        name: &str,
        range: RangeInclusive<u64>,
    ) -> Result<u64, FieldError> {
        let value = self.take_required(name)?;
        self.integer(name, &value, *range.start(), *range.end())
    }

    /// An unsigned integer within `range` that may be absent (but not `null`).
    pub fn optional_u64_in(
        &mut self,
        name: &str,
        range: RangeInclusive<u64>,
    ) -> Result<Option<u64>, FieldError> {
        let value = self.take(name)?;
        value
            .map(|v| self.integer(name, &v, *range.start(), *range.end()))
            .transpose()
    }

    /// Revisions travel as decimal strings because JavaScript numbers lose precision above
    /// 2^53; the form is canonical (no sign, no leading zeros) so equal revisions compare equal
    /// as text too.
    fn decimal(&self, name: &str, value: Value) -> Result<u64, FieldError> {
        let Value::String(s) = value else {
            return Err(self.error(name, "must be a string of decimal digits"));
        };
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error(name, "must be a string of decimal digits"));
        }
        if s.len() > 1 && s.starts_with('0') {
            return Err(self.error(name, "must not have leading zeros"));
        }
        s.parse::<u64>()
            .map_err(|_| self.error(name, format!("must be at most {}", u64::MAX)))
    }

    /// A non-negative integer sent as a canonical decimal string, that must be present.
    pub fn required_decimal_string_u64(&mut self, name: &str) -> Result<u64, FieldError> {
        let value = self.take_required(name)?;
        self.decimal(name, value)
    }

    /// A non-negative integer sent as a canonical decimal string, that may be absent.
    pub fn optional_decimal_string_u64(&mut self, name: &str) -> Result<Option<u64>, FieldError> {
        self.take(name)?.map(|v| self.decimal(name, v)).transpose()
    }

    /// Refuses the first field that no accessor took, hinting at a case-only mismatch.
    pub fn finish(self) -> Result<(), FieldError> {
        let Some(key) = self.map.keys().next() else {
            return Ok(());
        };
        let hint = self.asked.iter().find(|a| a.eq_ignore_ascii_case(key));
        Err(match hint {
            Some(asked) => self.error(key, format!("unknown field (did you mean \"{asked}\"?)")),
            None => self.error(key, "unknown field"),
        })
    }
}

/// Request keys are idempotency keys chosen by clients; printable ASCII without spaces keeps
/// them safe to log, to embed in Redis keys and to echo in headers.
pub fn validate_request_key(s: &str, field: &str) -> Result<(), FieldError> {
    if s.is_empty() {
        return Err(FieldError::new(field, "must not be empty"));
    }
    if s.len() > 128 {
        return Err(FieldError::new(field, "must be at most 128 characters"));
    }
    if !s.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
        return Err(FieldError::new(
            field,
            "must be printable ASCII without spaces",
        ));
    }
    Ok(())
}

/// Subjects name end users and may be any language, but control characters would corrupt
/// logs and headers, and the length bound keeps per-subject keys small.
pub fn validate_subject(s: &str, field: &str) -> Result<(), FieldError> {
    let count = s.chars().count();
    if count == 0 {
        return Err(FieldError::new(field, "must not be empty"));
    }
    if count > 128 {
        return Err(FieldError::new(field, "must be at most 128 characters"));
    }
    if s.chars().any(char::is_control) {
        return Err(FieldError::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
