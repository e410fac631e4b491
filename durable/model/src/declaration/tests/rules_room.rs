//! Rules for `[[room]]` declarations.

use super::super::{ProofOfWork, RoomDecl, RoomPageDecl, parse, room_opens_at};
use super::{assert_refused, doc};

/// Keys to set, the field refused and a part of its message.
type RefusalCase<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

/// The keys of a small valid room, in order; tests replace, add or drop keys.
const BASE_ROOM: &[(&str, &str)] = &[("code", r#""r""#), ("max_active", "100")];

/// An `opens_at` value for tests that need one.
const OPENS: (&str, &str) = ("opens_at", "2026-12-24T18:00:00Z");

/// A document with one room built from [`BASE_ROOM`], where each `(key, value)` in `set`
/// replaces or adds a key and an empty value drops it.
fn with_room(set: &[(&str, &str)]) -> String {
    let mut keys: Vec<(&str, &str)> = BASE_ROOM.to_vec();
    for (key, value) in set {
        match keys.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => keys.push((key, value)),
        }
    }
    let body: Vec<String> = keys
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    format!("[[room]]\n{}\n", body.join("\n"))
}

/// The parsed room of `with_room(set)`.
fn room(set: &[(&str, &str)]) -> RoomDecl {
    match parse(&with_room(set)) {
        Ok(model) => model.rooms[0].clone(),
        Err(error) => panic!("room must parse: {error}\n---\n{}", with_room(set)),
    }
}

/// The normalised `opens_at` of a room declaring `opens_at = value`.
fn opens_at(value: &str) -> Option<String> {
    room(&[("opens_at", value)]).opens_at
}

#[test]
fn minimal_room_gets_defaults() {
    assert_eq!(
        room(&[]),
        RoomDecl {
            code: "r".into(),
            max_active: Some(100),
            admit_per_minute: None,
            pass_seconds: 600,
            heartbeat_seconds: None,
            opens_at: None,
            prequeue_seconds: None,
            shuffle_prequeue: true,
            proof_of_work: ProofOfWork::Off,
            page: None,
        }
    );
    let rate_only = room(&[("max_active", ""), ("admit_per_minute", "30")]);
    assert_eq!(
        (rate_only.max_active, rate_only.admit_per_minute),
        (None, Some(30))
    );
    assert_eq!(room_opens_at(&room(&[])), None);
}

#[test]
fn every_room_field_may_be_set() {
    let decl = room(&[
        ("code", r#""main-hall_2""#),
        ("max_active", "1000000"),
        ("admit_per_minute", "6000000"),
        ("pass_seconds", "86400"),
        ("heartbeat_seconds", "86400"),
        ("opens_at", r#""2026-12-24T19:00:00+01:00""#),
        ("prequeue_seconds", "604800"),
        ("shuffle_prequeue", "false"),
        ("proof_of_work", "{ bits = 26 }"),
    ]);
    assert_eq!(
        decl,
        RoomDecl {
            code: "main-hall_2".into(),
            max_active: Some(1_000_000),
            admit_per_minute: Some(6_000_000),
            pass_seconds: 86_400,
            heartbeat_seconds: Some(86_400),
            opens_at: Some("2026-12-24T18:00:00Z".into()),
            prequeue_seconds: Some(604_800),
            shuffle_prequeue: false,
            proof_of_work: ProofOfWork::Fixed { bits: 26 },
            page: None,
        }
    );
    assert_eq!(
        room_opens_at(&decl).map(|t| t.timestamp()),
        Some(1_798_135_200)
    );
}

#[test]
fn rooms_live_beside_commands_and_reads() {
    let read = "[[read]]\nname = \"r\"\norigin = \"http://h/\"\nfresh_seconds = 1\n";
    let second = with_room(&[("code", r#""s""#), ("max_active", "7")]);
    let text = format!("{}\n{}\n{}\n{second}", doc(&[]), with_room(&[]), read);
    let model = parse(&text).expect("parses");
    assert_eq!(model.commands.len(), 1);
    assert_eq!(model.reads.len(), 1);
    let codes: Vec<&str> = model.rooms.iter().map(|r| r.code.as_str()).collect();
    assert_eq!(codes, ["r", "s"], "rooms keep document order");
    assert_eq!(model.room("s").and_then(|r| r.max_active), Some(7));
    assert_eq!(model.room("t"), None);
    assert!(parse(&doc(&[])).expect("parses").rooms.is_empty());
}

#[test]
fn room_capacity_bounds() {
    let cases: &[(&str, &str, &str)] = &[
        ("max_active", "0", "between 1 and 1000000"),
        ("max_active", "-1", "between 1 and 1000000"),
        ("max_active", "1000001", "between 1 and 1000000"),
        ("max_active", r#""100""#, "must be an integer"),
        ("max_active", "1.5", "must be an integer"),
        ("admit_per_minute", "0", "between 1 and 6000000"),
        ("admit_per_minute", "6000001", "between 1 and 6000000"),
        ("admit_per_minute", "true", "must be an integer"),
    ];
    for (key, value, message) in cases {
        assert_refused(
            &with_room(&[(key, value)]),
            &format!("room[0].{key}"),
            message,
        );
    }
    assert_eq!(room(&[("max_active", "1")]).max_active, Some(1));
    assert_eq!(room(&[("admit_per_minute", "1")]).admit_per_minute, Some(1));
    let second_room = format!(
        "{}{}",
        with_room(&[]),
        with_room(&[("code", r#""s""#), ("max_active", "0")])
    );
    assert_refused(&second_room, "room[1].max_active", "between 1 and 1000000");
}

#[test]
fn a_room_without_any_limit_is_refused() {
    assert_refused(
        &with_room(&[("max_active", "")]),
        "room[0]",
        "needs max_active (passes live at once), admit_per_minute, or both",
    );
}

#[test]
fn pass_and_heartbeat_bounds() {
    let cases: &[RefusalCase] = &[
        (
            &[("pass_seconds", "9")],
            "room[0].pass_seconds",
            "between 10 and 86400",
        ),
        (
            &[("pass_seconds", "86401")],
            "room[0].pass_seconds",
            "between 10 and 86400",
        ),
        (
            &[("pass_seconds", r#""600""#)],
            "room[0].pass_seconds",
            "must be an integer",
        ),
        (
            &[("heartbeat_seconds", "4")],
            "room[0].heartbeat_seconds",
            "between 5 and 86400",
        ),
        (
            &[("heartbeat_seconds", "86401")],
            "room[0].heartbeat_seconds",
            "between 5 and 86400",
        ),
        (
            &[("heartbeat_seconds", "601")],
            "room[0].heartbeat_seconds",
            "601 is longer than pass_seconds (600)",
        ),
        (
            &[("pass_seconds", "60"), ("heartbeat_seconds", "61")],
            "room[0].heartbeat_seconds",
            "61 is longer than pass_seconds (60)",
        ),
    ];
    for (set, field, message) in cases {
        assert_refused(&with_room(set), field, message);
    }
    assert_eq!(room(&[("pass_seconds", "10")]).pass_seconds, 10);
    let short = room(&[("pass_seconds", "10"), ("heartbeat_seconds", "5")]);
    assert_eq!((short.pass_seconds, short.heartbeat_seconds), (10, Some(5)));
    let equal = room(&[("heartbeat_seconds", "600")]);
    assert_eq!(
        equal.heartbeat_seconds,
        Some(600),
        "a beat may equal the pass"
    );
}

#[test]
fn opens_at_is_normalised_to_utc_whole_seconds() {
    let cases: &[(&str, &str)] = &[
        ("2026-12-24T18:00:00Z", "2026-12-24T18:00:00Z"),
        ("2026-12-24T19:30:00+01:30", "2026-12-24T18:00:00Z"),
        ("2026-12-24T18:00:00.000Z", "2026-12-24T18:00:00Z"),
        (r#""2026-12-24T18:00:00Z""#, "2026-12-24T18:00:00Z"),
        (r#""2026-12-24T12:00:00-06:00""#, "2026-12-24T18:00:00Z"),
        (r#""2026-12-25T02:00:00+08:00""#, "2026-12-24T18:00:00Z"),
        (r#""2026-12-24T18:00:00.0Z""#, "2026-12-24T18:00:00Z"),
        ("2026-12-24T18:00Z", "2026-12-24T18:00:00Z"),
        ("2026-12-24 19:00:00+01:00", "2026-12-24T18:00:00Z"),
    ];
    for (value, expected) in cases {
        assert_eq!(
            opens_at(value).as_deref(),
            Some(*expected),
            "opens_at = {value}"
        );
    }
    let decl = room(&[OPENS]);
    let instant = room_opens_at(&decl).expect("an instant");
    assert_eq!(instant.to_rfc3339(), "2026-12-24T18:00:00+00:00");
}

#[test]
fn opens_at_without_offset_fraction_or_sense_is_refused() {
    let path = "room[0].opens_at";
    let cases: &[(&str, &str)] = &[
        (
            "2026-12-24T18:00:00",
            "\"2026-12-24T18:00:00\" is not an RFC 3339 date-time with an offset",
        ),
        ("2026-12-24", "is not an RFC 3339 date-time with an offset"),
        ("18:00:00", "is not an RFC 3339 date-time with an offset"),
        (
            r#""2026-12-24T18:00:00""#,
            "is not an RFC 3339 date-time with an offset (2026-12-24T18:00:00Z)",
        ),
        (
            r#""2026-12-24 18:00""#,
            "is not an RFC 3339 date-time with an offset",
        ),
        (
            r#""2026-02-30T18:00:00Z""#,
            "is not an RFC 3339 date-time with an offset",
        ),
        (
            r#""2026-12-24T18:00Z""#,
            "is not an RFC 3339 date-time with an offset",
        ),
        (r#""soon""#, "\"soon\" is not an RFC 3339 date-time"),
        (r#""""#, "is not an RFC 3339 date-time with an offset"),
        ("2026-12-24T18:00:00.5Z", "must be a whole second"),
        (
            r#""2026-12-24T18:00:00.001+02:00""#,
            "must be a whole second",
        ),
        ("1798135200", "must be an RFC 3339 date-time with an offset"),
        ("true", "must be an RFC 3339 date-time with an offset"),
    ];
    for (value, message) in cases {
        assert_refused(&with_room(&[("opens_at", value)]), path, message);
    }
}

#[test]
fn prequeue_needs_opens_at_and_stays_in_range() {
    let cases: &[RefusalCase] = &[
        (
            &[OPENS, ("prequeue_seconds", "59")],
            "room[0].prequeue_seconds",
            "between 60 and 604800",
        ),
        (
            &[OPENS, ("prequeue_seconds", "604801")],
            "room[0].prequeue_seconds",
            "between 60 and 604800",
        ),
        (
            &[OPENS, ("prequeue_seconds", "-60")],
            "room[0].prequeue_seconds",
            "between 60 and 604800",
        ),
        (
            &[("prequeue_seconds", "3600")],
            "room[0].prequeue_seconds",
            "needs opens_at",
        ),
        (
            &[("shuffle_prequeue", "true")],
            "room[0].shuffle_prequeue",
            "needs opens_at",
        ),
        (
            &[("shuffle_prequeue", "false")],
            "room[0].shuffle_prequeue",
            "needs opens_at",
        ),
        (
            &[OPENS, ("shuffle_prequeue", r#""yes""#)],
            "room[0].shuffle_prequeue",
            "must be true or false",
        ),
    ];
    for (set, field, message) in cases {
        assert_refused(&with_room(set), field, message);
    }
    let opened = room(&[OPENS]);
    assert_eq!(
        (opened.prequeue_seconds, opened.shuffle_prequeue),
        (None, true)
    );
    let shortest = room(&[OPENS, ("prequeue_seconds", "60")]);
    assert_eq!(shortest.prequeue_seconds, Some(60));
    let by_arrival = room(&[OPENS, ("shuffle_prequeue", "false")]);
    assert!(!by_arrival.shuffle_prequeue);
}

#[test]
fn proof_of_work_is_off_fixed_or_adaptive() {
    assert_eq!(room(&[("proof_of_work", r#""off""#)]), room(&[]));
    assert_eq!(room(&[]).proof_of_work, ProofOfWork::Off);
    assert_eq!(
        room(&[("proof_of_work", "{ bits = 18 }")]).proof_of_work,
        ProofOfWork::Fixed { bits: 18 }
    );
    assert_eq!(
        room(&[(
            "proof_of_work",
            "{ min_bits = 8, max_bits = 20, calm_joins_per_second = 50 }"
        )])
        .proof_of_work,
        ProofOfWork::Adaptive {
            min_bits: 8,
            max_bits: 20,
            calm_joins_per_second: 50
        }
    );
    let shape = "must be \"off\", { bits = N }";
    let cases: &[RefusalCase<'_>] = &[
        (
            &[("proof_of_work", r#""on""#)],
            "room[0].proof_of_work",
            shape,
        ),
        (
            &[("proof_of_work", r#""OFF""#)],
            "room[0].proof_of_work",
            shape,
        ),
        (&[("proof_of_work", "true")], "room[0].proof_of_work", shape),
        (&[("proof_of_work", "18")], "room[0].proof_of_work", shape),
        (&[("proof_of_work", "{}")], "room[0].proof_of_work", shape),
        (
            &[("proof_of_work", "{ bits = 0 }")],
            "room[0].proof_of_work.bits",
            "must be between 1 and 26",
        ),
        (
            &[("proof_of_work", "{ bits = 27 }")],
            "room[0].proof_of_work.bits",
            "must be between 1 and 26",
        ),
        (
            &[("proof_of_work", "{ bits = 10, max_bits = 20 }")],
            "room[0].proof_of_work.max_bits",
            "unknown field",
        ),
        (
            &[(
                "proof_of_work",
                "{ min_bits = 8, calm_joins_per_second = 5 }",
            )],
            "room[0].proof_of_work.max_bits",
            "is required",
        ),
        (
            &[("proof_of_work", "{ min_bits = 8, max_bits = 20 }")],
            "room[0].proof_of_work.calm_joins_per_second",
            "is required",
        ),
        (
            &[(
                "proof_of_work",
                "{ min_bits = 12, max_bits = 12, calm_joins_per_second = 5 }",
            )],
            "room[0].proof_of_work.max_bits",
            "must be more than min_bits (12)",
        ),
        (
            &[(
                "proof_of_work",
                "{ min_bits = 8, max_bits = 30, calm_joins_per_second = 5 }",
            )],
            "room[0].proof_of_work.max_bits",
            "must be between 1 and 26",
        ),
        (
            &[(
                "proof_of_work",
                "{ min_bits = 8, max_bits = 20, calm_joins_per_second = 0 }",
            )],
            "room[0].proof_of_work.calm_joins_per_second",
            "must be between 1 and 1000000",
        ),
    ];
    for (set, field, message) in cases {
        assert_refused(&with_room(set), field, message);
    }
}

#[test]
fn adaptive_work_adds_a_bit_per_doubling_of_arrivals_above_calm() {
    let work = ProofOfWork::Adaptive {
        min_bits: 8,
        max_bits: 12,
        calm_joins_per_second: 10,
    };
    let cases = [
        (0.0, 8),
        (10.0, 8),
        (10.5, 9),
        (20.0, 9),
        (20.1, 10),
        (40.0, 10),
        (80.0, 11),
        (160.0, 12),
        (1e9, 12),
        (f64::NAN, 8),
    ];
    for (rate, bits) in cases {
        assert_eq!(work.bits_at(rate), bits, "at {rate} joins/s");
    }
    assert_eq!(ProofOfWork::Fixed { bits: 17 }.bits_at(1e6), 17);
    assert_eq!(ProofOfWork::Off.bits_at(1e6), 0);
}

#[test]
fn unknown_room_key_is_refused() {
    assert_refused(
        &with_room(&[("capacity", "3")]),
        "room[0].capacity",
        "unknown field",
    );
    assert_refused(
        &with_room(&[("passSeconds", "600")]),
        "room[0].passSeconds",
        "unknown field",
    );
}

#[test]
fn rooms_wrong_types_are_refused() {
    assert_refused("room = 3", "room", "must be an array");
    assert_refused("room = [1]", "room[0]", "must be a table");
}

#[test]
fn room_code_rules() {
    let path = "room[0].code";
    assert_refused(&with_room(&[("code", "")]), path, "is required");
    assert_refused(&with_room(&[("code", "3")]), path, "must be a string");
    assert_refused(
        &with_room(&[("code", r#""Main""#)]),
        path,
        "must start with a lowercase letter",
    );
    assert_refused(
        &with_room(&[("code", r#""main hall""#)]),
        path,
        "a-z, 0-9, '_' and '-'",
    );
    assert_refused(&with_room(&[("code", r#""""#)]), path, "1 to 64");
    let long = format!("\"{}\"", "r".repeat(65));
    assert_refused(&with_room(&[("code", &long)]), path, "1 to 64");
    let fits = format!("\"{}\"", "r".repeat(64));
    assert_eq!(room(&[("code", &fits)]).code.len(), 64);
}

#[test]
fn duplicate_room_codes_are_refused_naming_the_later() {
    let two = format!("{}{}", with_room(&[]), with_room(&[]));
    assert_refused(&two, "room[1].code", "duplicate room code \"r\"");
    let three = format!(
        "{}{}{}",
        with_room(&[]),
        with_room(&[("code", r#""s""#)]),
        with_room(&[("code", r#""s""#)])
    );
    assert_refused(&three, "room[2].code", "duplicate room code \"s\"");
}

#[test]
fn too_many_rooms_are_refused() {
    let rooms = |n: usize| -> String {
        (0..n)
            .map(|i| format!("[[room]]\ncode = \"r{i}\"\nmax_active = 1\n"))
            .collect()
    };
    assert_refused(&rooms(65), "room", "at most 64 rooms");
    assert_eq!(parse(&rooms(64)).map(|d| d.rooms.len()), Ok(64));
}

#[test]
fn a_room_page_takes_texts_colours_and_one_return_url() {
    assert_eq!(room(&[]).page, None);
    let page = room(&[(
        "page",
        r##"{ title = "Launch day", accent_color = "#AA0000", return_url = "https://shop.example/enter" }"##,
    )])
    .page
    .expect("a page");
    assert_eq!(page.title, "Launch day");
    assert_eq!(page.accent_color, "#aa0000");
    assert_eq!(
        page.return_url.as_deref(),
        Some("https://shop.example/enter")
    );
    assert_eq!(page.message, RoomPageDecl::default().message);
    let defaults = room(&[("page", "{}")]).page.expect("a page");
    assert_eq!(defaults, RoomPageDecl::default());
}

#[test]
fn a_room_page_refuses_what_could_redirect_or_inject() {
    for (page, field, message) in [
        (
            r#"{ return_url = "javascript:alert(1)" }"#,
            "room[0].page.return_url",
            "https://",
        ),
        (
            r#"{ return_url = "https://user@shop.example/" }"#,
            "room[0].page.return_url",
            "without credentials",
        ),
        (
            r#"{ return_url = "https://shop.example/enter?next=/x" }"#,
            "room[0].page.return_url",
            "no query",
        ),
        (
            r#"{ return_urls = ["https://shop.example/"] }"#,
            "room[0].page.return_urls",
            "",
        ),
        (
            r#"{ accent_color = "red" }"#,
            "room[0].page.accent_color",
            "#rrggbb",
        ),
        (
            "{ title = \"a\\u0007b\" }",
            "room[0].page.title",
            "no control characters",
        ),
    ] {
        assert_refused(&with_room(&[("page", page)]), field, message);
    }
}
