//! Path-tracking helpers for walking a parsed TOML document by hand.
//!
//! Deserializing straight into structs would lose the path of the offending field, so the
//! parser walks `toml::Table`s through [`Obj`], which knows its own path and builds every
//! error with the full field path (`command[1].admission.max_in_flight`).

use std::fmt::Display;
use std::ops::RangeInclusive;

use toml::{Table, Value};

use crate::field_error::FieldError;

/// Shorthand for results of the declaration parser.
pub(crate) type Result<T> = std::result::Result<T, FieldError>;

/// A TOML table together with the path it was found at.
pub(crate) struct Obj<'a> {
    table: &'a Table,
    path: String,
}

/// Joins `key` onto `path` (`command[0]` + `code` gives `command[0].code`).
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Indexes `path` (`command` + 1 gives `command[1]`).
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Length in characters, which is what every length limit counts.
pub(crate) fn char_len(text: &str) -> usize {
    text.chars().count()
}

/// Views `value` as a table found at `path`.
pub(crate) fn as_table(value: &Value, path: String) -> Result<Obj<'_>> {
    match value {
        Value::Table(table) => Ok(Obj { table, path }),
        _ => Err(FieldError::new(path, "must be a table")),
    }
}

/// Views `value` as a string found at `path`.
pub(crate) fn as_str<'a>(value: &'a Value, path: &str) -> Result<&'a str> {
    value
        .as_str()
        .ok_or_else(|| FieldError::new(path, "must be a string"))
}

/// Checks that `value` lies in `range` after converting it to `T`; anything that does not fit
/// `T` (say, a negative number for a `u32`) is out of range too.
pub(crate) fn in_range<T>(value: i64, range: &RangeInclusive<T>, path: &str) -> Result<T>
where
    T: TryFrom<i64> + PartialOrd + Display,
{
    match T::try_from(value) {
        Ok(v) if range.contains(&v) => Ok(v),
        _ => Err(FieldError::new(
            path,
            format!("must be between {} and {}", range.start(), range.end()),
        )),
    }
}

impl<'a> Obj<'a> {
    /// The document root, whose keys have no prefix.
    pub(crate) fn root(table: &'a Table) -> Self {
        Obj {
            table,
            path: String::new(),
        }
    }

    /// The underlying table, for tables whose keys are names rather than settings.
    pub(crate) fn table(&self) -> &'a Table {
        self.table
    }

    /// Path of `key` inside this table.
    pub(crate) fn field(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// An error about `key` inside this table.
    pub(crate) fn error(&self, key: &str, message: impl Into<String>) -> FieldError {
        FieldError::new(self.field(key), message)
    }

    /// An error about this table itself.
    pub(crate) fn own_error(&self, message: impl Into<String>) -> FieldError {
        FieldError::new(self.path.clone(), message)
    }

    /// Refuses any key outside `allowed`, naming it, so typos never pass silently.
    pub(crate) fn allow_only(&self, allowed: &[&str]) -> Result<()> {
        match self.table.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(key) => Err(self.error(key, "unknown field")),
            None => Ok(()),
        }
    }

    /// The raw value of `key`, if present.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.table.get(key)
    }

    /// Whether `key` is present.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    /// The raw value of a required `key`.
    pub(crate) fn require(&self, key: &str) -> Result<&'a Value> {
        self.get(key).ok_or_else(|| self.error(key, "is required"))
    }

    /// A required string.
    pub(crate) fn req_str(&self, key: &str) -> Result<&'a str> {
        as_str(self.require(key)?, &self.field(key))
    }

    /// An optional table.
    pub(crate) fn opt_table(&self, key: &str) -> Result<Option<Obj<'a>>> {
        self.get(key)
            .map(|v| as_table(v, self.field(key)))
            .transpose()
    }

    /// A required table.
    pub(crate) fn req_table(&self, key: &str) -> Result<Obj<'a>> {
        as_table(self.require(key)?, self.field(key))
    }

    /// An optional array.
    pub(crate) fn opt_array(&self, key: &str) -> Result<Option<&'a [Value]>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items.as_slice())),
            Some(_) => Err(self.error(key, "must be an array")),
        }
    }

    /// An optional TOML integer; floats and strings are refused, not coerced.
    pub(crate) fn opt_int(&self, key: &str) -> Result<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Integer(n)) => Ok(Some(*n)),
            Some(_) => Err(self.error(key, "must be an integer")),
        }
    }

    /// An optional integer within `range`.
    pub(crate) fn opt_num<T>(&self, key: &str, range: RangeInclusive<T>) -> Result<Option<T>>
    where
        T: TryFrom<i64> + PartialOrd + Display,
    {
        self.opt_int(key)?
            .map(|n| in_range(n, &range, &self.field(key)))
            .transpose()
    }

    /// A required integer within `range`.
    pub(crate) fn req_num<T>(&self, key: &str, range: RangeInclusive<T>) -> Result<T>
    where
        T: TryFrom<i64> + PartialOrd + Display,
    {
        self.opt_num(key, range)?
            .ok_or_else(|| self.error(key, "is required"))
    }

    /// An optional array of tables (`[[command]]`), each with its indexed path; absent is empty.
    pub(crate) fn opt_table_list(&self, key: &str) -> Result<Vec<Obj<'a>>> {
        let items = self.opt_array(key)?.unwrap_or_default();
        let path = self.field(key);
        items
            .iter()
            .enumerate()
            .map(|(i, item)| as_table(item, index(&path, i)))
            .collect()
    }
}
