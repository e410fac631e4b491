//! Path segments and query strings, decoded strictly: a malformed escape or a repeated or
//! unknown parameter is a clear `400`, never a silent guess.

use sluice_durable::field_error::FieldError;

const INVALID: &str = "is not valid percent-encoded UTF-8 without U+0000";

/// Decodes `%XX` escapes of one path segment.
pub fn decode_segment(segment: &str, field: &str) -> Result<String, FieldError> {
    percent_decode(segment, false).ok_or_else(|| FieldError::new(field, INVALID))
}

/// Parses `a=1&b=2` (form encoding: `+` is a space), refusing repeats and names not in `allowed`.
pub fn parse_query(
    query: Option<&str>,
    allowed: &[&str],
) -> Result<Vec<(String, String)>, FieldError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for part in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (raw_name, raw_value) = part.split_once('=').unwrap_or((part, ""));
        let name =
            percent_decode(raw_name, true).ok_or_else(|| FieldError::new("query", INVALID))?;
        let value = percent_decode(raw_value, true)
            .ok_or_else(|| FieldError::new(name.clone(), INVALID))?;
        if !allowed.contains(&name.as_str()) {
            return Err(FieldError::new(name, "unknown query parameter"));
        }
        if pairs.iter().any(|(n, _)| *n == name) {
            return Err(FieldError::new(name, "is given more than once"));
        }
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// The value of a parsed query parameter.
pub fn query_value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn percent_decode(input: &str, plus_is_space: bool) -> Option<String> {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                // Two hex digits exactly: `u8::from_str_radix` alone would also take a sign
                // (`%+a` as 0x0a).
                let hex = bytes.get(i + 1..i + 3)?;
                out.push(hex_digit(hex[0])? << 4 | hex_digit(hex[1])?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    // U+0000 is valid UTF-8 but no value of this API (nor PostgreSQL's text) holds one.
    if out.contains(&0) {
        return None;
    }
    String::from_utf8(out).ok()
}

/// The value of one hexadecimal digit, either case.
fn hex_digit(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_decode_escapes_and_keep_plus() {
        assert_eq!(decode_segment("a%2Fb+c", "k"), Ok("a/b+c".to_string()));
        assert!(decode_segment("a%2", "k").is_err());
        assert!(decode_segment("%ff", "k").is_err());
    }

    #[test]
    fn an_escape_is_two_hex_digits_and_nothing_else() {
        assert_eq!(decode_segment("%4a%4A", "k"), Ok("JJ".to_string()));
        for signed in ["%+a", "%-a", "%+A", "% a", "%a", "%g0"] {
            assert!(decode_segment(signed, "k").is_err(), "{signed} was taken");
            assert!(
                parse_query(Some(&format!("cursor={signed}")), &["cursor"]).is_err(),
                "{signed} was taken in a query"
            );
        }
    }

    #[test]
    fn queries_are_strict() {
        let pairs =
            parse_query(Some("limit=5&cursor=a%3Db+c"), &["limit", "cursor"]).expect("valid query");
        assert_eq!(query_value(&pairs, "cursor"), Some("a=b c"));
        assert_eq!(query_value(&pairs, "limit"), Some("5"));
        let repeated = parse_query(Some("limit=5&limit=6"), &["limit"]).expect_err("repeat");
        assert_eq!(repeated.field, "limit");
        let unknown = parse_query(Some("Limit=5"), &["limit"]).expect_err("unknown");
        assert_eq!(unknown.field, "Limit");
        assert_eq!(parse_query(None, &[]).expect("empty"), vec![]);
    }
}
