//! The reference example document and the JSON round trip of its model.

use std::collections::BTreeMap;

use super::super::Declaration;
use super::super::{
    AdmissionBudget, HandlerDecl, IntakeBudget, LimitDecl, ParamDecl, QuotaMode, QuotaPoolDecl,
    ReadDecl, ReadScope, ResourceKeyDecl, parse,
};

/// The example from the declaration format's documentation.
pub(in crate::declaration) const EXAMPLE: &str = r#"
[namespace]
max_waiting = 100000                     # optional, default 1_000_000
allowed_origins = ["https://shop.example"]  # optional, default []

[[command]]
code = "claim"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
deadline_seconds = 600
intake    = { per_second = 2000, burst = 2000, max_in_flight = 500 }
admission = { per_second = 500, burst = 500, max_in_flight = 64, max_queue = 10000, max_wait_seconds = 600 }
handler   = { kind = "quota", pool = "offer-stock", mode = "committed" }

[[command]]
code = "ocr"
parameters = { provider = { type = "string", enum = ["gitee", "baidu"] }, account = { type = "string", max_length = 64 }, url = { type = "string", max_length = 256 }, pages = { type = "integer", min = 1, max = 500 }, urgent = { type = "boolean" } }
resource_key = { from = "input", field = "account" }
deadline_seconds = 1800
handler = { kind = "webhook", url = "http://127.0.0.1:9000/ocr", timeout_ms = 10000 }
limits  = [ { key = "provider:{provider}", per_second = 5 }, { key = "account:{provider}:{account}", max_in_flight = 2 } ]

[[quota_pool]]
code = "offer-stock"
capacity = 100

[[read]]
name = "offer"
origin = "http://127.0.0.1:9000/offers/{id}"
parameters = { id = { type = "uuid" } }
scope = "application"            # or "subject"
fresh_seconds = 2
stale_seconds = 30
dependencies = ["offer:{id}"]
"#;

/// The example, which must parse as written.
pub(super) fn example() -> Declaration {
    match parse(EXAMPLE) {
        Ok(model) => model,
        Err(error) => panic!("example must parse: {error}"),
    }
}

#[test]
fn example_namespace_and_pools() {
    let model = example();
    assert_eq!(model.namespace.max_waiting, 100_000);
    assert_eq!(
        model.namespace.allowed_origins,
        vec!["https://shop.example"]
    );
    assert_eq!(
        model.quota_pools,
        vec![QuotaPoolDecl {
            code: "offer-stock".into(),
            capacity: 100
        }]
    );
    assert_eq!(model.commands.len(), 2);
}

#[test]
fn example_claim_command() {
    let model = example();
    let claim = model.command("claim").expect("claim declared");
    assert_eq!(
        claim.parameters,
        BTreeMap::from([("offer".to_owned(), ParamDecl::Uuid)])
    );
    assert_eq!(
        claim.resource_key,
        ResourceKeyDecl::Input {
            field: "offer".into()
        }
    );
    assert_eq!(claim.deadline_seconds, 600);
    assert_eq!(
        claim.intake,
        IntakeBudget {
            per_second: 2000,
            burst: 2000,
            max_in_flight: 500,
            per_subject: None
        }
    );
    assert_eq!(
        claim.admission,
        AdmissionBudget {
            per_second: 500,
            burst: 500,
            max_in_flight: 64,
            max_queue: 10_000,
            max_wait_seconds: 600,
            max_in_flight_per_resource: None
        }
    );
    assert_eq!(
        claim.handler,
        HandlerDecl::Quota {
            pool: "offer-stock".into(),
            mode: QuotaMode::Committed
        }
    );
    assert!(claim.limits.is_empty());
}

#[test]
fn example_ocr_command() {
    let model = example();
    let ocr = model.command("ocr").expect("ocr declared");
    assert_eq!(ocr.parameters.len(), 5);
    assert_eq!(
        ocr.parameters["provider"],
        ParamDecl::String {
            max_length: 5,
            allowed: Some(vec!["gitee".into(), "baidu".into()])
        }
    );
    assert_eq!(
        ocr.parameters["pages"],
        ParamDecl::Integer { min: 1, max: 500 }
    );
    assert_eq!(ocr.parameters["urgent"], ParamDecl::Boolean);
    assert_eq!(ocr.deadline_seconds, 1800);
    assert_eq!(
        ocr.handler,
        HandlerDecl::Webhook {
            url: "http://127.0.0.1:9000/ocr".into(),
            timeout_ms: 10_000
        }
    );
    assert_eq!(
        ocr.limits,
        vec![
            LimitDecl {
                key: "provider:{provider}".into(),
                per_second: Some(5),
                burst: Some(5),
                max_in_flight: None
            },
            LimitDecl {
                key: "account:{provider}:{account}".into(),
                per_second: None,
                burst: None,
                max_in_flight: Some(2)
            },
        ]
    );
}

#[test]
fn example_ocr_defaults() {
    let model = example();
    let ocr = model.command("ocr").expect("ocr declared");
    assert_eq!(
        ocr.intake,
        IntakeBudget {
            per_second: 1000,
            burst: 1000,
            max_in_flight: 1000,
            per_subject: None
        }
    );
    assert_eq!(
        ocr.admission,
        AdmissionBudget {
            per_second: 100,
            burst: 100,
            max_in_flight: 16,
            max_queue: 100_000,
            max_wait_seconds: 1800,
            max_in_flight_per_resource: None
        }
    );
    assert!(model.command("nope").is_none());
}

#[test]
fn example_read_with_defaults() {
    let model = example();
    assert_eq!(
        model.reads,
        vec![ReadDecl {
            name: "offer".into(),
            origin: "http://127.0.0.1:9000/offers/{id}".into(),
            parameters: BTreeMap::from([("id".to_owned(), ParamDecl::Uuid)]),
            scope: ReadScope::Application,
            fresh_seconds: 2,
            stale_seconds: 30,
            dependencies: vec!["offer:{id}".into()],
            max_bytes: 262_144,
            negative_seconds: 5,
            timeout_ms: 2000,
        }]
    );
    assert!(model.read("offer").is_some());
    assert!(model.read("claim").is_none());
}

#[test]
fn stored_declaration_without_reads_loads() {
    let mut value = serde_json::to_value(example()).expect("to value");
    let object = value.as_object_mut().expect("an object");
    assert!(object.remove("reads").is_some());
    let back: Declaration = serde_json::from_value(value).expect("from value");
    assert!(back.reads.is_empty());
    assert_eq!(back.commands, example().commands);
}

#[test]
fn model_round_trips_through_json() {
    let mut model = example();
    model.quota_pools.push(QuotaPoolDecl {
        code: "held".into(),
        capacity: 1_000_000_000_000,
    });
    let mut extra = model.commands[0].clone();
    extra.code = "hold".into();
    extra.handler = HandlerDecl::Quota {
        pool: "held".into(),
        mode: QuotaMode::Reserved {
            reservation_seconds: 300,
        },
    };
    extra.resource_key = ResourceKeyDecl::Constant {
        value: "all".into(),
    };
    extra.parameters.insert(
        "n".into(),
        ParamDecl::Integer {
            min: i64::MIN,
            max: i64::MAX,
        },
    );
    model.commands.push(extra);
    let mut read = model.reads[0].clone();
    read.name = "mine".into();
    read.scope = ReadScope::Subject;
    read.parameters.clear();
    read.dependencies.clear();
    model.reads.push(read);
    let json = serde_json::to_string(&model).expect("serializes");
    let back: Declaration = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back, model);
    let value = serde_json::to_value(&model).expect("to value");
    let again: Declaration = serde_json::from_value(value).expect("from value");
    assert_eq!(again, model);
}

#[test]
fn json_shape_uses_tags() {
    let model = example();
    let json = serde_json::to_value(&model.commands[0]).expect("to value");
    assert_eq!(
        json["parameters"]["offer"],
        serde_json::json!({ "type": "uuid" })
    );
    assert_eq!(json["resource_key"]["from"], "input");
    assert_eq!(json["handler"]["kind"], "quota");
    assert_eq!(json["handler"]["mode"], "committed");
    let read = serde_json::to_value(&model.reads[0]).expect("to value");
    assert_eq!(read["scope"], "application");
    assert_eq!(
        read["parameters"]["id"],
        serde_json::json!({ "type": "uuid" })
    );
}
