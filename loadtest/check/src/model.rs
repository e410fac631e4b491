//! The reference model: what the declaration and the docs promise, written apart from Sluice's
//! code (it shares no type or helper with it).
//!
//! - **Limit keys**: a template renders a key from the input (`{name}` → the value, escaped
//!   outside `A-Z a-z 0-9 - . _ ~` as percent-encoding); a rendered key is one budget. Two
//!   templates that can render the same key with other numbers are refused at apply
//!   ([`conflicts`]); with the same numbers they share it.
//! - **Budgets**: every running command holds one unit of its command's `max_in_flight`, its
//!   resource's per-resource cap, each key's `max_in_flight` and the application's
//!   `max_concurrency`; starts spend tokens of buckets (`burst` + `per_second` × time).
//! - **Order**: within a resource a command starts before an earlier waiting one only when the
//!   earlier one names limit keys and the two share none of them.
//!
//! The generator draws templates of two shapes only (enum placeholders, and `subj:{subject}`),
//! so the model decides overlap exactly by enumerating renderings (see [`Language`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::plan::{CommandDecl, Declaration, Limit};

/// Escapes a placeholder's value as Sluice documents it: every byte outside RFC 3986's
/// unreserved set as `%XX` (upper-case hex).
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Renders `template` for an input and subject.
pub fn render(template: &str, input: &Map<String, Value>, subject: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let name = &after[..close];
        let value = match input.get(name) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None if name == "subject" => subject.to_string(),
            None => String::new(),
        };
        out.push_str(&escape(&value));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The keys a command of `decl` names, each with the numbers of its template.
pub fn keys_of(decl: &CommandDecl, input: &Map<String, Value>, subject: &str) -> Vec<KeyUse> {
    decl.limits
        .iter()
        .map(|limit| KeyUse {
            key: render(&limit.key, input, subject),
            template: limit.key.clone(),
            max_in_flight: limit.max_in_flight,
            per_second: limit.per_second,
            burst: limit.burst.or(limit.per_second),
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUse {
    pub key: String,
    pub template: String,
    pub max_in_flight: Option<u32>,
    pub per_second: Option<u32>,
    pub burst: Option<u32>,
}

/// What a template can render to, for the generator's two shapes.
#[derive(Debug, Clone)]
enum Language {
    /// Every rendering, when each placeholder takes values from a finite set.
    Finite(BTreeSet<String>),
    /// `prefix` followed by one escaped non-empty value of unbounded choice (`{subject}`).
    Open { prefix: String },
}

fn language(template: &str, command: &CommandDecl) -> Language {
    if let Some(prefix) = template.strip_suffix("{subject}")
        && !prefix.contains('{')
    {
        return Language::Open {
            prefix: prefix.to_string(),
        };
    }
    // Placeholders name `region` and `account`, whose values the declaration enumerates.
    let mut renderings = BTreeSet::from([String::new()]);
    let mut rest = template;
    loop {
        let Some(open) = rest.find('{') else {
            renderings = renderings.into_iter().map(|r| r + rest).collect();
            break;
        };
        let text = &rest[..open];
        let after = &rest[open + 1..];
        let close = after.find('}').unwrap_or(after.len());
        let values: Vec<String> = match &after[..close] {
            "region" => command.regions.clone(),
            "account" => command.accounts.clone(),
            "res" => command.resources.clone(),
            _ => vec![String::new()],
        };
        renderings = renderings
            .iter()
            .flat_map(|r| {
                values
                    .iter()
                    .map(move |v| format!("{r}{text}{}", escape(v)))
            })
            .collect();
        rest = after.get(close + 1..).unwrap_or("");
    }
    Language::Finite(renderings)
}

/// A string both languages hold, if any (the shortest for finite ones).
fn common(a: &Language, b: &Language) -> Option<String> {
    let open_holds = |prefix: &str, s: &str| {
        s.strip_prefix(prefix).is_some_and(|value| {
            !value.is_empty()
                && value.bytes().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b'%')
                })
        })
    };
    match (a, b) {
        (Language::Finite(x), Language::Finite(y)) => {
            x.intersection(y).min_by_key(|s| s.len()).cloned()
        }
        (Language::Finite(x), Language::Open { prefix })
        | (Language::Open { prefix }, Language::Finite(x)) => {
            x.iter().find(|s| open_holds(prefix, s)).cloned()
        }
        (Language::Open { prefix: p }, Language::Open { prefix: q }) => {
            // Both are a prefix followed by any escaped value: they meet when one prefix extends
            // the other by escaped characters only.
            let (short, long) = if p.len() <= q.len() { (p, q) } else { (q, p) };
            long.strip_prefix(short.as_str())
                .filter(|extra| {
                    extra
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"-._~%".contains(&c))
                })
                .map(|_| format!("{long}x"))
        }
    }
}

/// Two limits of the declaration that can render one key with other numbers: what `apply` must
/// refuse, naming the later one's field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// `command[i].limits[j].key` of the later limit.
    pub field: String,
    pub other_field: String,
    pub example: String,
}

pub fn conflicts(decl: &Declaration) -> Vec<Conflict> {
    let mut seen: Vec<(String, &Limit, Language)> = Vec::new();
    let mut found = Vec::new();
    for (c, command) in decl.commands.iter().enumerate() {
        for (l, limit) in command.limits.iter().enumerate() {
            let field = format!("command[{c}].limits[{l}].key");
            let lang = language(&limit.key, command);
            for (other_field, other, other_lang) in &seen {
                if other.numbers() == limit.numbers() {
                    continue;
                }
                if let Some(example) = common(other_lang, &lang) {
                    found.push(Conflict {
                        field: field.clone(),
                        other_field: other_field.clone(),
                        example,
                    });
                }
            }
            seen.push((field, limit, lang));
        }
    }
    found
}

/// The declaration with every conflicting limit removed (the later of each pair), as a user who
/// read the refusal would fix it.
pub fn without_conflicts(decl: &Declaration) -> Declaration {
    let mut fixed = decl.clone();
    loop {
        let Some(conflict) = conflicts(&fixed).into_iter().next() else {
            return fixed;
        };
        let (c, l) = parse_field(&conflict.field).unwrap_or((0, 0));
        if let Some(command) = fixed.commands.get_mut(c)
            && l < command.limits.len()
        {
            command.limits.remove(l);
        } else {
            return fixed;
        }
    }
}

fn parse_field(field: &str) -> Option<(usize, usize)> {
    let rest = field.strip_prefix("command[")?;
    let (c, rest) = rest.split_once("].limits[")?;
    let (l, _) = rest.split_once(']')?;
    Some((c.parse().ok()?, l.parse().ok()?))
}

/// The concurrency bound of every key in the declaration: the smallest `max_in_flight` among
/// the templates that can render it (one budget per key; with a conflict refused, all equal).
pub fn key_bounds(uses: &[KeyUse]) -> BTreeMap<String, u32> {
    let mut bounds: BTreeMap<String, u32> = BTreeMap::new();
    for u in uses {
        if let Some(max) = u.max_in_flight {
            bounds
                .entry(u.key.clone())
                .and_modify(|b| *b = (*b).min(max))
                .or_insert(max);
        }
    }
    bounds
}

/// Whether command `later` may start before the earlier waiting `earlier` of its resource: only
/// when `earlier` names limit keys and the two share none.
pub fn may_overtake(earlier: &[KeyUse], later: &[KeyUse]) -> bool {
    let mine: BTreeSet<&str> = earlier
        .iter()
        .filter(|k| k.max_in_flight.is_some() || k.per_second.is_some())
        .map(|k| k.key.as_str())
        .collect();
    !mine.is_empty() && !later.iter().any(|k| mine.contains(k.key.as_str()))
}

/// At most how many starts a bucket of `rate` per second and `burst` allows in a window of
/// `window_ms` (one more for rounding at the window's edges).
pub fn bucket_allows(rate: u32, burst: u32, window_ms: i64) -> f64 {
    f64::from(burst) + f64::from(rate) * (window_ms.max(0) as f64) / 1000.0 + 1.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Admission, Handler, Intake};

    fn command(limits: Vec<Limit>) -> CommandDecl {
        CommandDecl {
            code: "c".into(),
            handler: Handler::Webhook { timeout_ms: 1000 },
            resources: vec!["r0".into()],
            regions: vec!["eu".into(), "us".into()],
            accounts: vec!["eu".into(), "a1".into()],
            limits,
            intake: Intake {
                per_second: 1,
                burst: 1,
                max_in_flight: 1,
            },
            admission: Admission {
                per_second: 1,
                burst: 1,
                max_in_flight: 1,
                max_queue: 1,
                max_wait_seconds: 1,
                per_resource: None,
            },
            deadline_seconds: 1,
        }
    }

    fn limit(key: &str, max: u32) -> Limit {
        Limit {
            key: key.into(),
            max_in_flight: Some(max),
            per_second: None,
            burst: None,
        }
    }

    fn decl(commands: Vec<CommandDecl>) -> Declaration {
        Declaration {
            commands,
            pools: vec![],
            rooms: vec![],
            application: None,
        }
    }

    #[test]
    fn region_and_account_named_alike_conflict_and_prefixes_separate_them() {
        let d = decl(vec![
            command(vec![limit("{region}", 10)]),
            command(vec![limit("{account}", 1)]),
        ]);
        let found = conflicts(&d);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].field, "command[1].limits[0].key");
        assert_eq!(found[0].example, "eu");
        let d = decl(vec![
            command(vec![limit("region:{region}", 10)]),
            command(vec![limit("acct:{account}", 1)]),
        ]);
        assert!(conflicts(&d).is_empty());
        let d = decl(vec![
            command(vec![limit("{region}", 2)]),
            command(vec![limit("{account}", 2)]),
        ]);
        assert!(conflicts(&d).is_empty(), "same numbers share the key");
        assert!(
            without_conflicts(&decl(vec![
                command(vec![limit("{region}", 10)]),
                command(vec![limit("{account}", 1)]),
            ]))
            .commands[1]
                .limits
                .is_empty()
        );
    }

    #[test]
    fn subject_templates_meet_only_what_their_prefix_allows() {
        let d = decl(vec![
            command(vec![limit("subj:{subject}", 1)]),
            command(vec![limit("{account}", 3)]),
        ]);
        assert!(conflicts(&d).is_empty());
        let d = decl(vec![
            command(vec![limit("{subject}", 1)]),
            command(vec![limit("{account}", 3)]),
        ]);
        assert_eq!(conflicts(&d).len(), 1);
    }

    #[test]
    fn rendering_escapes_and_order_rule() {
        let mut input = Map::new();
        input.insert("region".into(), "e u".into());
        assert_eq!(
            render("r:{region}:{subject}", &input, "s/1"),
            "r:e%20u:s%2F1"
        );
        let k = |key: &str| KeyUse {
            key: key.into(),
            template: String::new(),
            max_in_flight: Some(1),
            per_second: None,
            burst: None,
        };
        assert!(
            !may_overtake(&[], &[k("a")]),
            "a head with no keys is never passed"
        );
        assert!(may_overtake(&[k("a")], &[k("b")]));
        assert!(!may_overtake(&[k("a"), k("b")], &[k("b")]));
    }
}
