//! Whether two limit templates of a namespace can render the same key.
//!
//! In Redis a limit's lease zset and token bucket are named by the namespace and the *rendered*
//! key alone (`lease:lim:<ns>:<key>`, `bucket:lim:<ns>:<key>`), while its numbers are stored per
//! *template* (`lim:<ns>:<template>`), and `admit.lua` takes a key's numbers from whichever
//! template it reads first in a call. Two templates that can render one key therefore share one
//! budget, and when they declare other numbers that budget follows whichever was read first:
//! `{region}` at 10 and `{account}` at 1 let account `eu` run several at once while region `eu`
//! is busy. A rendered key is one budget, so such a declaration is refused when it is applied;
//! templates that can overlap with the same numbers are one shared budget by design (one account
//! named through two differently named parameters) and stay allowed.
//!
//! Each template is read as a regular language over bytes: its literal text, and for each
//! placeholder the language of what it can render (see [`KeyLanguage::of_limit`]). Two templates
//! collide exactly when their languages intersect, which a breadth-first search over pairs of
//! automaton states decides; the search also yields a shortest common key, which the refusal
//! shows. The languages are exact except where [`KeyLanguage::of_limit`] says otherwise, and
//! every approximation there only adds keys: a collision is never missed, and a declaration is
//! refused without one only in those corners.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};

use super::model::{CommandDecl, LimitDecl, ParamDecl};
use super::template::{
    Piece, SUBJECT_PLACEHOLDER, encode_component, is_unreserved, split_template,
};
use super::walk::Result;
use crate::field_error::FieldError;

/// Most characters of a subject, as the gateway checks it (and at least one).
const SUBJECT_MAX_CHARS: usize = 128;

/// Pairs of positions one check may visit across all its searches: far beyond what real
/// declarations need (a pair of 4,096-character strings in step is about 94,000), and a bound on
/// the work a declaration can ask for.
const SEARCH_BUDGET: usize = 5_000_000;

/// Refuses two limits of the namespace (of two commands, or both of one) whose templates can
/// render the same key while declaring other numbers: the later one, naming the earlier one and
/// a shortest key both render.
pub(crate) fn check_limit_keys(commands: &[CommandDecl]) -> Result<()> {
    check_limit_keys_within(commands, SEARCH_BUDGET)
}

fn check_limit_keys_within(commands: &[CommandDecl], mut budget: usize) -> Result<()> {
    let limits: Vec<(String, &LimitDecl, KeyLanguage)> = commands
        .iter()
        .enumerate()
        .flat_map(|(c, command)| {
            command.limits.iter().enumerate().map(move |(l, limit)| {
                (
                    format!("command[{c}].limits[{l}].key"),
                    limit,
                    KeyLanguage::of_limit(&limit.key, &command.parameters),
                )
            })
        })
        .collect();
    let fix = "a rendered key is one budget, so give the templates distinct literal text \
               (\"region:{region}\" and \"account:{account}\", say) or declare the same numbers";
    for (i, (field, limit, language)) in limits.iter().enumerate() {
        for (other_field, other, other_language) in &limits[..i] {
            if numbers(limit) == numbers(other) {
                continue;
            }
            let message = match search(other_language, language, &mut budget) {
                Verdict::Apart => continue,
                Verdict::Shared(key) => format!(
                    "limit key \"{}\" can render the same key as \"{}\" ({other_field}), \
                     {key:?} for one, but declares other numbers; {fix}",
                    limit.key, other.key
                ),
                Verdict::TooLarge => format!(
                    "limit key \"{}\" declares other numbers than \"{}\" ({other_field}), and \
                     telling whether the namespace's templates can render the same key takes \
                     more work than a declaration may ask for; {fix}",
                    limit.key, other.key
                ),
            };
            return Err(FieldError::new(field, message));
        }
    }
    Ok(())
}

/// The numbers `admit.lua` is given for a limit (`max_in_flight per_second burst`), an unset
/// burst read as `per_second` the way the admission config writes it: two limits with equal
/// numbers here are one budget however they were spelt.
fn numbers(limit: &LimitDecl) -> (Option<u32>, Option<u32>, Option<u32>) {
    (
        limit.max_in_flight,
        limit.per_second,
        limit.burst.or(limit.per_second),
    )
}

/// A set of bytes: the label of a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ByteSet([u64; 4]);

impl ByteSet {
    const EMPTY: Self = Self([0; 4]);

    const fn with(mut self, byte: u8) -> Self {
        self.0[(byte >> 6) as usize] |= 1 << (byte & 63);
        self
    }

    const fn one(byte: u8) -> Self {
        Self::EMPTY.with(byte)
    }

    const fn range(low: u8, high: u8) -> Self {
        let mut set = Self::EMPTY;
        let mut byte = low;
        while byte <= high {
            set = set.with(byte);
            if byte == u8::MAX {
                break;
            }
            byte += 1;
        }
        set
    }

    const fn union(self, other: Self) -> Self {
        Self([
            self.0[0] | other.0[0],
            self.0[1] | other.0[1],
            self.0[2] | other.0[2],
            self.0[3] | other.0[3],
        ])
    }

    fn and(self, other: Self) -> Self {
        Self([
            self.0[0] & other.0[0],
            self.0[1] & other.0[1],
            self.0[2] & other.0[2],
            self.0[3] & other.0[3],
        ])
    }

    fn contains(self, byte: u8) -> bool {
        self.0[usize::from(byte >> 6)] & (1 << (byte & 63)) != 0
    }

    /// A byte of the set, a letter or digit when it has one: the example key ends up in an
    /// error message.
    fn pick(self) -> Option<u8> {
        const READABLE: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        if self == Self::EMPTY {
            return None;
        }
        READABLE
            .iter()
            .copied()
            .find(|b| self.contains(*b))
            .or_else(|| (0..=u8::MAX).find(|b| self.contains(*b)))
    }
}

const DIGITS: ByteSet = ByteSet::range(b'0', b'9');
/// What `encode_component` writes after `%`: uppercase hex.
const HEX: ByteSet = DIGITS.union(ByteSet::range(b'A', b'F'));
const LOWER_HEX: ByteSet = DIGITS.union(ByteSet::range(b'a', b'f'));

/// The bytes a value keeps as they are when escaped.
const UNRESERVED: ByteSet = {
    let mut set = ByteSet::EMPTY;
    let mut byte = 0u8;
    while byte < 0x80 {
        if is_unreserved(byte) {
            set = set.with(byte);
        }
        byte += 1;
    }
    set
};

/// The second hex digit of an escaped ASCII byte whose first digit is `high` (0 to 7): every
/// digit but those that would spell an unreserved byte, which is never escaped.
const fn escaped_ascii_low(high: u8) -> ByteSet {
    const DIGIT: &[u8; 16] = b"0123456789ABCDEF";
    let mut set = ByteSet::EMPTY;
    let mut low = 0u8;
    while low < 16 {
        if !is_unreserved(high * 16 + low) {
            set = set.with(DIGIT[low as usize]);
        }
        low += 1;
    }
    set
}

const ESCAPED_ASCII_LOW: [ByteSet; 8] = [
    escaped_ascii_low(0),
    escaped_ascii_low(1),
    escaped_ascii_low(2),
    escaped_ascii_low(3),
    escaped_ascii_low(4),
    escaped_ascii_low(5),
    escaped_ascii_low(6),
    escaped_ascii_low(7),
];

/// A small automaton without empty moves; state 0 is the start.
#[derive(Debug)]
struct Automaton {
    moves: Vec<Vec<(ByteSet, usize)>>,
    accepting: Vec<bool>,
}

impl Automaton {
    fn new() -> Self {
        Self {
            moves: vec![Vec::new()],
            accepting: vec![false],
        }
    }

    fn state(&mut self) -> usize {
        self.moves.push(Vec::new());
        self.accepting.push(false);
        self.moves.len() - 1
    }

    fn add(&mut self, from: usize, label: ByteSet, to: usize) {
        self.moves[from].push((label, to));
    }

    /// Exactly the given byte strings (a trie).
    fn finite<'v>(values: impl IntoIterator<Item = &'v [u8]>) -> Self {
        let mut automaton = Self::new();
        for value in values {
            let mut state = 0;
            for &byte in value {
                let label = ByteSet::one(byte);
                let known = automaton.moves[state]
                    .iter()
                    .find(|(l, _)| *l == label)
                    .map(|(_, to)| *to);
                state = match known {
                    Some(to) => to,
                    None => {
                        let to = automaton.state();
                        automaton.add(state, label, to);
                        to
                    }
                };
            }
            automaton.accepting[state] = true;
        }
        automaton
    }

    /// A canonical uuid as `input::is_uuid` accepts it: lowercase, hyphenated, unescaped.
    fn uuid() -> Self {
        let mut automaton = Self::new();
        let mut state = 0;
        for i in 0..36 {
            let label = match i {
                8 | 13 | 18 | 23 => ByteSet::one(b'-'),
                _ => LOWER_HEX,
            };
            let to = automaton.state();
            automaton.add(state, label, to);
            state = to;
        }
        automaton.accepting[state] = true;
        automaton
    }

    /// The decimal text of every integer in `min..=max`, as `serde_json` writes it: no leading
    /// zero, `-` before a negative (never `-0`).
    fn integers(min: i64, max: i64) -> Self {
        let mut automaton = Self::new();
        // any[r]: exactly r more digits, then the end. An i64 has at most 19.
        let mut any = Vec::with_capacity(20);
        for r in 0..20 {
            let state = automaton.state();
            match r {
                0 => automaton.accepting[state] = true,
                _ => automaton.add(state, DIGITS, any[r - 1]),
            }
            any.push(state);
        }
        if min < 0 {
            let sign = automaton.state();
            automaton.add(0, ByteSet::one(b'-'), sign);
            let closest = max.min(-1).unsigned_abs();
            automaton.magnitudes(sign, closest, min.unsigned_abs(), &any);
        }
        if max >= 0 {
            automaton.magnitudes(0, min.max(0).unsigned_abs(), max.unsigned_abs(), &any);
        }
        automaton
    }

    /// From `from`, the decimal text of every number in `low..=high`, one length at a time.
    fn magnitudes(&mut self, from: usize, low: u64, high: u64, any: &[usize]) {
        if low > high {
            return;
        }
        let (low, high) = (low.to_string(), high.to_string());
        for len in low.len()..=high.len() {
            let first = match len == low.len() {
                true => low.clone(),
                false => format!("1{}", "0".repeat(len - 1)),
            };
            let last = match len == high.len() {
                true => high.clone(),
                false => "9".repeat(len),
            };
            self.same_length(from, first.as_bytes(), last.as_bytes(), any);
        }
    }

    /// From `from`, every digit string of the length of `low` and `high` between them: their
    /// common prefix, then a digit strictly between theirs followed by any digits, or `low`'s
    /// digit and a suffix at least `low`'s, or `high`'s and one at most `high`'s.
    fn same_length(&mut self, from: usize, low: &[u8], high: &[u8], any: &[usize]) {
        let len = low.len();
        let mut state = from;
        let mut i = 0;
        while i < len && low[i] == high[i] {
            let to = self.state();
            self.add(state, ByteSet::one(low[i]), to);
            state = to;
            i += 1;
        }
        if i == len {
            self.accepting[state] = true;
            return;
        }
        // A suffix bound of all zeros (at least) or all nines (at most) bounds nothing.
        let low_free = low[i + 1..].iter().all(|d| *d == b'0');
        let high_free = high[i + 1..].iter().all(|d| *d == b'9');
        let first = if low_free { low[i] } else { low[i] + 1 };
        let last = if high_free { high[i] } else { high[i] - 1 };
        if first <= last {
            self.add(state, ByteSet::range(first, last), any[len - i - 1]);
        }
        if !low_free {
            let tight = self.state();
            self.add(state, ByteSet::one(low[i]), tight);
            self.bounded(tight, &low[i + 1..], true, any);
        }
        if !high_free {
            let tight = self.state();
            self.add(state, ByteSet::one(high[i]), tight);
            self.bounded(tight, &high[i + 1..], false, any);
        }
    }

    /// From `from`, every digit string of the length of `bound` at least it (`at_least`) or
    /// at most it.
    fn bounded(&mut self, from: usize, bound: &[u8], at_least: bool, any: &[usize]) {
        let mut state = from;
        for (j, &digit) in bound.iter().enumerate() {
            let rest = &bound[j + 1..];
            // Digits are ASCII '0' to '9': one past either end is still a byte, and the range
            // is then empty.
            let past = match at_least {
                true => ByteSet::range(digit + 1, b'9'),
                false => ByteSet::range(b'0', digit - 1),
            };
            let unbounding = if at_least { b'0' } else { b'9' };
            if rest.iter().all(|d| *d == unbounding) {
                self.add(state, past.with(digit), any[rest.len()]);
                return;
            }
            if past != ByteSet::EMPTY {
                self.add(state, past, any[rest.len()]);
            }
            let to = self.state();
            self.add(state, ByteSet::one(digit), to);
            state = to;
        }
        self.accepting[state] = true;
    }
}

/// Where an escaped value is within its current character (see [`Segment::Escaped`]).
const BOUNDARY: usize = 0;
const AFTER_PERCENT: usize = 1;
/// `%` and the first digit (`0` to `7`) of an escaped ASCII byte.
const ASCII_FIRST: usize = 2;
const ASCII_LAST: usize = ASCII_FIRST + 7;
/// `%` and the first digit of a lead byte: `C`, `D` (one continuation byte follows), `E` (two),
/// `F` (three).
const LEAD_C: usize = 10;
const LEAD_D: usize = 11;
const LEAD_E: usize = 12;
const LEAD_F: usize = 13;
/// Continuation bytes still owed (`%`, then `8` to `B`, then a hex digit): `left` of them, at
/// `step` 0, 1 or 2 of the first.
const fn continuation(left: usize, step: usize) -> usize {
    14 + (left - 1) * 3 + step
}
const PHASES: usize = continuation(3, 2) + 1;

/// One piece of a template's language.
#[derive(Debug)]
enum Segment {
    /// Literal text, an enum, a boolean, a uuid, an integer or an absent value.
    Automaton(Automaton),
    /// An escaped value of `min..=max` characters of UTF-8 text, read one character at a time
    /// and counted: a state is `count * PHASES + phase`. Walked rather than built: a string of
    /// 4,096 characters would be about 94,000 states.
    Escaped { min: usize, max: usize },
}

impl Segment {
    fn accepts(&self, local: usize) -> bool {
        match self {
            Self::Automaton(automaton) => automaton.accepting[local],
            Self::Escaped { min, .. } => local % PHASES == BOUNDARY && local / PHASES >= *min,
        }
    }

    fn moves(&self, local: usize, out: &mut impl FnMut(ByteSet, usize)) {
        match self {
            Self::Automaton(automaton) => {
                for (label, to) in &automaton.moves[local] {
                    out(*label, *to);
                }
            }
            Self::Escaped { max, .. } => escaped_moves(local / PHASES, local % PHASES, *max, out),
        }
    }
}

/// The moves of an escaped value at `phase` of its `count`th character (counted from 1 once
/// the character has begun).
fn escaped_moves(count: usize, phase: usize, max: usize, out: &mut impl FnMut(ByteSet, usize)) {
    let at = |phase: usize| count * PHASES + phase;
    match phase {
        BOUNDARY if count < max => {
            let next = (count + 1) * PHASES;
            out(UNRESERVED, next + BOUNDARY);
            out(ByteSet::one(b'%'), next + AFTER_PERCENT);
        }
        BOUNDARY => {}
        AFTER_PERCENT => {
            for (offset, digit) in (b'0'..=b'7').enumerate() {
                out(ByteSet::one(digit), at(ASCII_FIRST + offset));
            }
            for (offset, digit) in (b'C'..=b'F').enumerate() {
                out(ByteSet::one(digit), at(LEAD_C + offset));
            }
        }
        ASCII_FIRST..=ASCII_LAST => out(ESCAPED_ASCII_LOW[phase - ASCII_FIRST], at(BOUNDARY)),
        // C2 to CF (C0 and C1 only ever spell overlong forms), D0 to DF.
        LEAD_C => out(
            ByteSet::range(b'2', b'9').union(ByteSet::range(b'A', b'F')),
            at(continuation(1, 0)),
        ),
        LEAD_D => out(HEX, at(continuation(1, 0))),
        LEAD_E => out(HEX, at(continuation(2, 0))),
        // F0 to F4: above, no code point.
        LEAD_F => out(ByteSet::range(b'0', b'4'), at(continuation(3, 0))),
        _ => {
            let left = (phase - continuation(1, 0)) / 3 + 1;
            match (phase - continuation(1, 0)) % 3 {
                0 => out(ByteSet::one(b'%'), at(continuation(left, 1))),
                1 => out(
                    ByteSet::range(b'8', b'9').union(ByteSet::range(b'A', b'B')),
                    at(continuation(left, 2)),
                ),
                _ if left == 1 => out(HEX, at(BOUNDARY)),
                _ => out(HEX, at(continuation(left - 1, 0))),
            }
        }
    }
}

/// A position in a [`KeyLanguage`]: a segment and a state within it; the segment after the last
/// is the end.
type Pos = (usize, usize);

/// Every key a template can render.
#[derive(Debug)]
pub(crate) struct KeyLanguage {
    segments: Vec<Segment>,
    /// The bytes of its literal text no value can render (neither unreserved nor `%`), in
    /// order: every key it renders has exactly these.
    skeleton: Vec<u8>,
    /// Its literal text after the last placeholder: every key it renders ends so.
    suffix: Vec<u8>,
}

impl KeyLanguage {
    /// The keys `template` renders with a command's `parameters` (see
    /// [`LimitDecl::render_key`]): its literal text, and for each placeholder:
    ///
    /// - a parameter with `enum`: each allowed value, escaped;
    /// - `boolean`: `true` or `false`;
    /// - `integer`: the decimal text of every value in `min..=max`;
    /// - `uuid`: the canonical lowercase form (the only one `validate_input` accepts);
    /// - `string` without `enum`: every escaped text of at most `max_length` characters,
    ///   the empty one included;
    /// - `{subject}` when no parameter has that name: every escaped text of 1 to 128 characters;
    /// - anything else (impossible once `check_key` passed): the empty string;
    /// - unbalanced braces: the template verbatim.
    ///
    /// Where this adds keys no input renders (so may refuse a declaration that cannot collide):
    /// a placeholder named twice in one template is read as two independent values
    /// (`{a}:{a}` also yields `x:y`); a character of free text is any UTF-8 sequence of its
    /// shape, so overlong forms, surrogates and lead byte `F4` with any continuation are in, as
    /// are the subject's control characters, which the gateway refuses.
    pub(crate) fn of_limit(template: &str, parameters: &BTreeMap<String, ParamDecl>) -> Self {
        let Some(pieces) = split_template(template) else {
            return Self::literal(template);
        };
        let suffix = match pieces.last() {
            Some(Piece::Text(text)) => text.as_bytes().to_vec(),
            _ => Vec::new(),
        };
        let segments = pieces
            .into_iter()
            .map(|piece| match piece {
                Piece::Text(text) => Segment::Automaton(Automaton::finite([text.as_bytes()])),
                Piece::Param(name) => match parameters.get(name) {
                    Some(param) => param_segment(param),
                    None if name == SUBJECT_PLACEHOLDER => Segment::Escaped {
                        min: 1,
                        max: SUBJECT_MAX_CHARS,
                    },
                    None => Segment::Automaton(Automaton::finite([&b""[..]])),
                },
            })
            .collect();
        Self {
            segments,
            skeleton: skeleton(template),
            suffix,
        }
    }

    /// Exactly `key`.
    fn literal(key: &str) -> Self {
        Self {
            segments: vec![Segment::Automaton(Automaton::finite([key.as_bytes()]))],
            skeleton: skeleton(key),
            suffix: key.as_bytes().to_vec(),
        }
    }

    /// `pos` and every position reached from it without reading: past each segment it ends.
    fn closure(&self, (mut segment, mut local): Pos, out: &mut Vec<Pos>) {
        loop {
            out.push((segment, local));
            match self.segments.get(segment) {
                Some(s) if s.accepts(local) => {
                    segment += 1;
                    local = 0;
                }
                _ => return,
            }
        }
    }

    /// Whether a key may end at `pos`, and the moves from it.
    fn step(&self, pos: Pos, scratch: &mut Vec<Pos>, moves: &mut Vec<(ByteSet, Pos)>) -> bool {
        scratch.clear();
        moves.clear();
        self.closure(pos, scratch);
        let mut ends = false;
        for &(segment, local) in scratch.iter() {
            match self.segments.get(segment) {
                Some(s) => s.moves(local, &mut |label, to| moves.push((label, (segment, to)))),
                None => ends = true,
            }
        }
        ends
    }
}

/// The bytes of `template` outside its placeholders that no value renders.
fn skeleton(template: &str) -> Vec<u8> {
    let text: Vec<&str> = match split_template(template) {
        Some(pieces) => pieces
            .into_iter()
            .filter_map(|piece| match piece {
                Piece::Text(text) => Some(text),
                Piece::Param(_) => None,
            })
            .collect(),
        None => vec![template],
    };
    text.iter()
        .flat_map(|t| t.bytes())
        .filter(|b| !is_unreserved(*b) && *b != b'%')
        .collect()
}

/// The language of one placeholder naming a parameter.
fn param_segment(param: &ParamDecl) -> Segment {
    match param {
        ParamDecl::Uuid => Segment::Automaton(Automaton::uuid()),
        ParamDecl::Boolean => Segment::Automaton(Automaton::finite([&b"true"[..], b"false"])),
        ParamDecl::Integer { min, max } => Segment::Automaton(Automaton::integers(*min, *max)),
        ParamDecl::String {
            allowed: Some(values),
            ..
        } => {
            let escaped: Vec<String> = values
                .iter()
                .map(|value| {
                    let mut out = String::new();
                    encode_component(value, &mut out);
                    out
                })
                .collect();
            Segment::Automaton(Automaton::finite(escaped.iter().map(String::as_bytes)))
        }
        ParamDecl::String {
            max_length,
            allowed: None,
        } => Segment::Escaped {
            min: 0,
            max: usize::try_from(*max_length).unwrap_or(usize::MAX),
        },
    }
}

/// What a search found.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// No key is in both languages.
    Apart,
    /// A shortest key in both.
    Shared(String),
    /// The budget ran out first.
    TooLarge,
}

/// Whether the languages share a key, and a shortest one: a breadth-first search over pairs of
/// positions, each move reading one byte both sides allow; every pair visited costs one of
/// `budget`.
fn search(a: &KeyLanguage, b: &KeyLanguage, budget: &mut usize) -> Verdict {
    type Pair = (Pos, Pos);
    // Necessary, and cheap: the search itself walks every length a free-text value allows.
    if a.skeleton != b.skeleton || !(a.suffix.ends_with(&b.suffix) || b.suffix.ends_with(&a.suffix))
    {
        return Verdict::Apart;
    }
    let start: Pair = ((0, 0), (0, 0));
    let mut came_from: HashMap<Pair, Option<(Pair, u8)>> = HashMap::from([(start, None)]);
    let mut queue = VecDeque::from([start]);
    let (mut scratch, mut moves_a, mut moves_b) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(pair) = queue.pop_front() {
        let Some(left) = budget.checked_sub(1) else {
            return Verdict::TooLarge;
        };
        *budget = left;
        let a_ends = a.step(pair.0, &mut scratch, &mut moves_a);
        let b_ends = b.step(pair.1, &mut scratch, &mut moves_b);
        if a_ends && b_ends {
            return Verdict::Shared(spell(&came_from, pair));
        }
        for (label_a, to_a) in &moves_a {
            for (label_b, to_b) in &moves_b {
                let Some(byte) = label_a.and(*label_b).pick() else {
                    continue;
                };
                let next = (*to_a, *to_b);
                if let Entry::Vacant(slot) = came_from.entry(next) {
                    slot.insert(Some((pair, byte)));
                    queue.push_back(next);
                }
            }
        }
    }
    Verdict::Apart
}

/// A shortest key both languages contain, if they share one (no budget).
#[cfg(test)]
fn shared_key(a: &KeyLanguage, b: &KeyLanguage) -> Option<String> {
    let mut unlimited = usize::MAX;
    match search(a, b, &mut unlimited) {
        Verdict::Shared(key) => Some(key),
        Verdict::Apart | Verdict::TooLarge => None,
    }
}

/// The bytes read on the way to `end`, as text (both templates' literal text is UTF-8 and
/// values are ASCII, so the key is too).
fn spell<P: Copy + Eq + std::hash::Hash>(
    came_from: &HashMap<P, Option<(P, u8)>>,
    mut end: P,
) -> String {
    let mut bytes = Vec::new();
    while let Some(Some((before, byte))) = came_from.get(&end) {
        bytes.push(*byte);
        end = *before;
    }
    bytes.reverse();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
