use super::*;
use serde_json::json;

fn reader(body: &str, prefix: &str) -> ObjectReader {
    match parse_object(body.as_bytes()) {
        Ok(map) => ObjectReader::new(map, prefix),
        Err(e) => panic!("test body should parse: {e}"),
    }
}

fn err(field: &str, message: &str) -> FieldError {
    FieldError::new(field, message)
}

#[test]
fn parses_objects_and_keeps_numbers_like_serde_json() {
    let body = r#"{"a":1,"b":{"c":[1,2,{"d":null}]},"big":18446744073709551615,
        "huge":123456789012345678901234567890,"neg":-5,"f":1.5,"s":"x"}"#;
    let map = parse_object(body.as_bytes()).expect("test fixture");
    let expected: Value = serde_json::from_str(body).expect("test fixture");
    assert_eq!(Value::Object(map.clone()), expected);
    assert_eq!(map["big"].as_u64(), Some(u64::MAX));
    assert!(map["huge"].is_f64());
}

#[test]
fn refuses_duplicate_keys_at_every_depth() {
    let cases = [
        (r#"{"a":1,"a":2}"#, "a"),
        (r#"{"a":1,"b":2,"a":1}"#, "a"),
        (r#"{"input":{"offer":1,"offer":2}}"#, "input.offer"),
        (r#"{"x":{"y":{"z":1,"z":1}}}"#, "x.y.z"),
        (r#"{"items":[{"id":1},{"id":2,"id":3}]}"#, "items[1].id"),
        (r#"{"m":[[{"k":1,"k":2}]]}"#, "m[0][0].k"),
        (r#"{"a":1,"\u0061":2}"#, "a"),
    ];
    for (body, path) in cases {
        assert_eq!(
            parse_object(body.as_bytes()),
            Err(err(path, "duplicate key")),
            "{body}"
        );
    }
    // Equal keys in different objects are fine.
    assert!(parse_object(br#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#).is_ok());
}

#[test]
fn refuses_non_objects_and_garbage_on_body() {
    for body in ["[]", "1", "\"s\"", "null", "true"] {
        assert_eq!(
            parse_object(body.as_bytes()),
            Err(err("body", "must be a JSON object"))
        );
    }
    let garbage: [&[u8]; 8] = [
        b"",
        b"{",
        b"{\"a\":}",
        b"{} {}",
        b"{\"a\":1,}",
        b"\xff\xfe",
        b"{\"a\":\"\xc3\x28\"}",
        b"{'a':1}",
    ];
    for body in garbage {
        let e = parse_object(body).expect_err("should be refused");
        assert_eq!(e.field, "body", "{body:?}");
        assert!(e.message.starts_with("invalid JSON: "), "{e}");
        assert!(e.message.contains("line 1 column"), "{e}");
    }
}

#[test]
fn refuses_pathologically_deep_nesting_without_overflow() {
    let body = format!("{{\"a\":{}1{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(
        parse_object(body.as_bytes())
            .expect_err("should be refused")
            .field,
        "body"
    );
}

#[test]
fn reads_typed_fields() {
    let mut r = reader(
        r#"{"s":"x","o":{"k":1},"b":true,"i":-3,"u":7,"rev":"42","zero":"0"}"#,
        "",
    );
    assert_eq!(r.required_string("s"), Ok("x".to_owned()));
    assert_eq!(r.optional_string("missing"), Ok(None));
    assert_eq!(
        r.required_object("o").expect("test fixture"),
        json!({"k":1}).as_object().expect("test fixture").clone()
    );
    assert_eq!(r.optional_object("none"), Ok(None));
    assert_eq!(r.required_bool("b"), Ok(true));
    assert_eq!(r.optional_bool("nb"), Ok(None));
    assert_eq!(r.required_i64_in("i", -10..=10), Ok(-3));
    assert_eq!(r.optional_i64_in("ni", 0..=1), Ok(None));
    assert_eq!(r.optional_u64_in("u", 0..=7), Ok(Some(7)));
    assert_eq!(r.required_decimal_string_u64("rev"), Ok(42));
    assert_eq!(r.optional_decimal_string_u64("zero"), Ok(Some(0)));
    assert_eq!(r.finish(), Ok(()));
}

#[test]
fn missing_null_and_wrong_types_name_the_field() {
    let mut r = reader(r#"{"n":null,"num":1,"s":"x","arr":[]}"#, "input");
    assert_eq!(
        r.required_string("absent"),
        Err(err("input.absent", "is required"))
    );
    assert_eq!(
        r.optional_string("n"),
        Err(err("input.n", "must not be null"))
    );
    assert_eq!(
        r.optional_string("num"),
        Err(err("input.num", "must be a string"))
    );
    assert_eq!(
        r.required_object("s"),
        Err(err("input.s", "must be an object"))
    );
    assert_eq!(
        r.optional_bool("arr"),
        Err(err("input.arr", "must be a boolean"))
    );

    let mut r = reader(r#"{"n":null,"a":null,"b":null,"c":null}"#, "");
    assert_eq!(r.required_string("n"), Err(err("n", "must not be null")));
    assert_eq!(
        r.optional_i64_in("a", 0..=1),
        Err(err("a", "must not be null"))
    );
    assert_eq!(r.optional_object("b"), Err(err("b", "must not be null")));
    assert_eq!(
        r.optional_decimal_string_u64("c"),
        Err(err("c", "must not be null"))
    );
}

#[test]
fn integers_must_be_integral_and_in_range() {
    let body = r#"{"a":"1","b":1.5,"c":1.0,"d":11,"e":-1,"f":18446744073709551615,
        "g":1e30,"h":-1e30,"i":true,"j":5,"k":9223372036854775808,"l":-3e0,"m":11.0,
        "n":9007199254740992.0,"o":9007199254740994.0}"#;
    let mut r = reader(body, "p");
    let int = "must be an integer";
    assert_eq!(r.required_i64_in("a", 0..=10), Err(err("p.a", int)));
    assert_eq!(r.required_i64_in("b", 0..=10), Err(err("p.b", int)));
    // JSON Schema's integers: a number without a fraction, however it is written.
    assert_eq!(r.required_i64_in("c", 0..=10), Ok(1));
    assert_eq!(r.required_i64_in("l", -5..=5), Ok(-3));
    assert_eq!(
        r.required_u64_in("m", 0..=10),
        Err(err("p.m", "must be between 0 and 10"))
    );
    assert_eq!(r.required_u64_in("n", 0..=u64::MAX), Ok(1 << 53));
    // Past 2^53 a float names several integers: not read as one.
    assert_eq!(r.required_u64_in("o", 0..=u64::MAX), Err(err("p.o", int)));
    let range = "must be between 0 and 10";
    assert_eq!(r.required_i64_in("d", 0..=10), Err(err("p.d", range)));
    assert_eq!(r.optional_u64_in("e", 0..=10), Err(err("p.e", range)));
    assert_eq!(r.optional_i64_in("f", 0..=10), Err(err("p.f", range)));
    assert_eq!(r.required_u64_in("g", 0..=10), Err(err("p.g", range)));
    assert_eq!(r.required_i64_in("h", 0..=10), Err(err("p.h", range)));
    assert_eq!(r.required_i64_in("i", 0..=10), Err(err("p.i", int)));
    assert_eq!(r.required_i64_in("j", 5..=5), Ok(5));
    assert_eq!(r.required_u64_in("k", 0..=u64::MAX), Ok(1 << 63));
}

#[test]
fn decimal_strings_are_canonical_u64() {
    let body = r#"{"ok":"18446744073709551615","over":"18446744073709551616","lead":"007",
        "neg":"-1","plus":"+1","empty":"","space":" 1","num":5,"frac":"1.0","uni":"١"}"#;
    let mut r = reader(body, "");
    assert_eq!(r.required_decimal_string_u64("ok"), Ok(u64::MAX));
    let over = r
        .required_decimal_string_u64("over")
        .expect_err("should be refused");
    assert_eq!(over.message, "must be at most 18446744073709551615");
    assert_eq!(
        r.required_decimal_string_u64("lead")
            .expect_err("should be refused")
            .message,
        "must not have leading zeros"
    );
    for name in ["neg", "plus", "empty", "space", "num", "frac", "uni"] {
        let e = r
            .required_decimal_string_u64(name)
            .expect_err("should be refused");
        assert_eq!(e, err(name, "must be a string of decimal digits"));
    }
    assert_eq!(
        r.required_decimal_string_u64("gone")
            .expect_err("should be refused")
            .message,
        "is required"
    );
}

#[test]
fn finish_refuses_leftovers_with_case_hints() {
    let mut r = reader(r#"{"request_key":"k","extra":1}"#, "");
    r.required_string("request_key").expect("test fixture");
    assert_eq!(r.finish(), Err(err("extra", "unknown field")));

    let mut r = reader(r#"{"Request_Key":"k"}"#, "");
    assert_eq!(r.optional_string("request_key"), Ok(None));
    let hint = "unknown field (did you mean \"request_key\"?)";
    assert_eq!(r.finish(), Err(err("Request_Key", hint)));

    // A required field spelled in the wrong case is reported where the client put it.
    let mut r = reader(r#"{"REQUEST_KEY":"k"}"#, "input");
    assert_eq!(
        r.required_string("request_key"),
        Err(err("input.REQUEST_KEY", hint))
    );

    let r = reader(r#"{"nested":{}}"#, "input");
    assert_eq!(r.finish(), Err(err("input.nested", "unknown field")));
}

#[test]
fn nested_readers_compose_paths() {
    let mut outer = reader(r#"{"input":{"offer":"o","stray":true}}"#, "");
    let map = outer.required_object("input").expect("test fixture");
    let mut inner = ObjectReader::new(map, &outer.path("input"));
    assert_eq!(inner.required_string("offer"), Ok("o".to_owned()));
    assert_eq!(inner.path("offer"), "input.offer");
    assert_eq!(inner.finish(), Err(err("input.stray", "unknown field")));
    assert_eq!(outer.finish(), Ok(()));
}

#[test]
fn request_keys() {
    let f = "request_key";
    assert!(validate_request_key("a", f).is_ok());
    assert!(validate_request_key(&"~".repeat(128), f).is_ok());
    assert!(validate_request_key("order-42:retry_1/x", f).is_ok());
    assert_eq!(
        validate_request_key("", f),
        Err(err(f, "must not be empty"))
    );
    assert_eq!(
        validate_request_key(&"a".repeat(129), f)
            .expect_err("should be refused")
            .field,
        f
    );
    for bad in ["a b", "a\tb", "a\u{7f}", "é", "a\nb"] {
        let e = validate_request_key(bad, f).expect_err("should be refused");
        assert_eq!(
            e.message, "must be printable ASCII without spaces",
            "{bad:?}"
        );
    }
}

#[test]
fn subjects() {
    let f = "sub";
    assert!(validate_subject("user 42", f).is_ok());
    assert!(validate_subject(&"é".repeat(128), f).is_ok());
    assert!(validate_subject("名前", f).is_ok());
    assert_eq!(validate_subject("", f), Err(err(f, "must not be empty")));
    let long = validate_subject(&"é".repeat(129), f).expect_err("should be refused");
    assert_eq!(long.message, "must be at most 128 characters");
    for bad in ["a\nb", "\u{0}", "x\u{85}"] {
        let e = validate_subject(bad, f).expect_err("should be refused");
        assert_eq!(e.message, "must not contain control characters");
    }
}
