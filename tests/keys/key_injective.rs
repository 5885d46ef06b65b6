//! Every way of making a key is injective: distinct inputs (IPv4, IPv6, integers, byte strings
//! of any length around the inline and digest boundaries, tuples of two to four parts, nested
//! tuples, `.or` chains) never give the same key, and equal inputs always give equal keys that
//! hash alike.
//!
//! A key built from parts (`Key::from((a, b))`) is the key the tuple of extractors makes.
//!
//! The model: an input is a value of one kind or a tuple of inputs. An `.or` chain gives the key
//! of the branch that found one, unchanged (one client, one budget whichever branch found it),
//! so its model is the value that branch found.

use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, Ipv6Addr};

use http::{Request, StatusCode};
use proptest::prelude::*;
use tollgate::key::{KeyError, KeyExtractor, RequestHead};
use tollgate::Key;

/// What a key is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Input {
    V4(u32),
    V6(u128),
    U64(u64),
    Bytes(Vec<u8>),
    /// Two to four parts, each any input.
    Tuple(Vec<Input>),
    /// An `.or` chain that found `value` after `failed` branches that found nothing.
    Or {
        failed: usize,
        value: Box<Input>,
    },
}

impl Input {
    /// What the key stands for: `.or` chains are the value they found.
    fn meaning(&self) -> Input {
        match self {
            Input::Or { value, .. } => value.meaning(),
            Input::Tuple(parts) => Input::Tuple(parts.iter().map(Input::meaning).collect()),
            other => other.clone(),
        }
    }

    /// The key built from the input's value with `Key`'s constructors alone, tuples by
    /// `Key::from((a, b, ..))`: what an operator writes to reach one client.
    fn built(&self) -> Key {
        match self {
            Input::V4(w) => Key::from(Ipv4Addr::from(*w)),
            Input::V6(w) => Key::from(Ipv6Addr::from(*w)),
            Input::U64(n) => Key::from(*n),
            Input::Bytes(b) => Key::from(b.as_slice()),
            Input::Or { value, .. } => value.built(),
            Input::Tuple(parts) => {
                let p: Vec<Key> = parts.iter().map(Input::built).collect();
                match p.as_slice() {
                    [a, b] => Key::from((a, b)),
                    [a, b, c] => Key::from((a, b, c)),
                    [a, b, c, d] => Key::from((a, b, c, d)),
                    _ => unreachable!("tuples have two to four parts"),
                }
            }
        }
    }

    fn key(&self) -> Key {
        Fixed::of(self)
            .extract(RequestHead::new(&Request::new(())))
            .expect("a fixed key never fails")
            .expect("a fixed key is never unlimited")
    }
}

/// An extractor that finds a given input's key the way the crate would: tuples and `.or`
/// chains through the crate's own combinators.
#[derive(Clone)]
enum Fixed {
    Key(Key),
    Fail,
    Tuple2(Box<(Fixed, Fixed)>),
    Tuple3(Box<(Fixed, Fixed, Fixed)>),
    Tuple4(Box<(Fixed, Fixed, Fixed, Fixed)>),
    Or(Box<tollgate::key::Or<Fixed, Fixed>>),
}

impl Fixed {
    fn of(input: &Input) -> Self {
        match input {
            Input::V4(w) => Fixed::Key(Key::from(Ipv4Addr::from(*w))),
            Input::V6(w) => Fixed::Key(Key::from(Ipv6Addr::from(*w))),
            Input::U64(n) => Fixed::Key(Key::from(*n)),
            Input::Bytes(b) => Fixed::Key(Key::from(b.as_slice())),
            Input::Tuple(parts) => {
                let p: Vec<Fixed> = parts.iter().map(Fixed::of).collect();
                match p.as_slice() {
                    [a, b] => Fixed::Tuple2(Box::new((a.clone(), b.clone()))),
                    [a, b, c] => Fixed::Tuple3(Box::new((a.clone(), b.clone(), c.clone()))),
                    [a, b, c, d] => {
                        Fixed::Tuple4(Box::new((a.clone(), b.clone(), c.clone(), d.clone())))
                    }
                    _ => unreachable!("tuples have two to four parts"),
                }
            }
            Input::Or { failed, value } => {
                let mut chain = Fixed::of(value);
                // Branches that fail come first: `Fail.or(Fail.or(... .or(value)))`.
                for _ in 0..*failed {
                    chain = Fixed::Or(Box::new(Fixed::Fail.or(chain)));
                }
                chain
            }
        }
    }
}

impl KeyExtractor for Fixed {
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        match self {
            Fixed::Key(key) => Ok(Some(key.clone())),
            Fixed::Fail => Err(KeyError::new(StatusCode::BAD_REQUEST, "no key here")),
            Fixed::Tuple2(t) => t.extract(req),
            Fixed::Tuple3(t) => t.extract(req),
            Fixed::Tuple4(t) => t.extract(req),
            Fixed::Or(or) => or.extract(req),
        }
    }
}

/// Byte strings whose lengths sit on the boundaries (empty, inline, shared, digested) and whose
/// bytes come from a tiny alphabet, so that equal and nearly equal strings are common.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    let len = prop_oneof![0..=2usize, 21..=24usize, 63..=66usize, 100..=300usize];
    len.prop_flat_map(|len| prop::collection::vec(prop_oneof![Just(b'a'), Just(b'b')], len))
}

/// Values of every kind, with small numbers so that the same bits often meet in several
/// kinds (the IP 0.0.0.1, the integer 1, the IPv6 ::1, the bytes "\0\0\0\0\0\0\0\x01").
fn leaf() -> impl Strategy<Value = Input> {
    prop_oneof![
        (0..3u32).prop_map(Input::V4),
        any::<u32>().prop_map(Input::V4),
        (0..3u128).prop_map(Input::V6),
        any::<u128>().prop_map(Input::V6),
        (0..3u64).prop_map(Input::U64),
        any::<u64>().prop_map(Input::U64),
        (0..3u64).prop_map(|n| Input::Bytes(n.to_be_bytes().to_vec())),
        (0..3u32).prop_map(|n| Input::Bytes(n.to_ne_bytes().to_vec())),
        bytes().prop_map(Input::Bytes),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..=4).prop_map(Input::Tuple),
            (0..3usize, inner).prop_map(|(failed, value)| Input::Or {
                failed,
                value: Box::new(value),
            }),
        ]
    })
}

/// A handful of inputs, some repeated, to compare every pair.
fn inputs() -> impl Strategy<Value = Vec<Input>> {
    (
        prop::collection::vec(input(), 2..8),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut inputs, i)| {
            let again = inputs[i.index(inputs.len())].clone();
            inputs.push(again);
            inputs
        })
}

fn hash(state: &RandomState, key: &Key) -> u64 {
    state.hash_one(key)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn distinct_inputs_give_distinct_keys(inputs in inputs()) {
        let state = RandomState::new();
        let keys: Vec<Key> = inputs.iter().map(Input::key).collect();
        for (a, ka) in inputs.iter().zip(&keys) {
            for (b, kb) in inputs.iter().zip(&keys) {
                let same = a.meaning() == b.meaning();
                prop_assert_eq!(ka == kb, same, "{:?} / {:?} gave {:?} / {:?}", a, b, ka, kb);
                if same {
                    prop_assert_eq!(hash(&state, ka), hash(&state, kb));
                }
            }
        }
    }

    /// A key built from parts (`Key::from((a, b))`, what an operator gives a live layer's
    /// handle) is the key the tuple of extractors makes from those parts, and hashes alike:
    /// nested tuples, long parts and `.or` chains included.
    #[test]
    fn keys_built_from_parts_are_the_keys_tuples_extract(input in input()) {
        let built = input.built();
        let extracted = input.key();
        prop_assert_eq!(&built, &extracted, "{:?}", input);
        let state = RandomState::new();
        prop_assert_eq!(hash(&state, &built), hash(&state, &extracted));
    }

    /// A tuple's key is never a plain byte string's key, even one made of the tuple's own
    /// encoding (a header value a client could send).
    #[test]
    fn tuples_never_meet_plain_byte_strings(parts in prop::collection::vec(input(), 2..=4)) {
        let tuple = Input::Tuple(parts).key();
        prop_assert!(tuple.is_tuple());
        let encoding = tuple.as_bytes().expect("a tuple has bytes").to_vec();
        let plain = Key::from(encoding.as_slice());
        prop_assert!(!plain.is_tuple());
        prop_assert_ne!(&plain, &tuple);
    }

    /// A tuple's encoding is bounded, whatever the length of its parts: a long part enters it
    /// as its digest. The digest stands for it exactly when it is longer than `MAX_LEN`.
    #[test]
    fn tuple_keys_are_bounded(parts in prop::collection::vec(input(), 2..=4)) {
        let arity = parts.len();
        let key = Input::Tuple(parts).key();
        let len = key.as_bytes().map_or(0, <[u8]>::len);
        prop_assert!(len <= arity * (2 + Key::MAX_LEN), "{} bytes for {} parts", len, arity);
        prop_assert_eq!(key.as_digest().is_some(), len > Key::MAX_LEN);
    }

    /// Byte strings at any length: the key's bytes are the string itself; a digest stands for
    /// it exactly when it is longer than `MAX_LEN`.
    #[test]
    fn byte_keys_keep_their_bytes(bytes in bytes()) {
        let key = Key::from(bytes.as_slice());
        prop_assert_eq!(key.as_bytes(), Some(bytes.as_slice()));
        prop_assert_eq!(key.as_digest().is_some(), bytes.len() > Key::MAX_LEN);
        prop_assert!(!key.is_tuple());
    }
}

/// The cases the audit found, by hand: two long values in a tuple used to make one key.
#[test]
fn tuples_with_long_parts_stay_apart() {
    let jwt = |c: u8| Input::Bytes([b"eyJ".as_slice(), &[c; 300]].concat());
    let route = Input::Bytes(b"/api".to_vec());
    let ip = Input::V4(0xc000_0201);
    assert_ne!(
        Input::Tuple(vec![jwt(b'a'), route.clone()]).key(),
        Input::Tuple(vec![jwt(b'b'), route]).key()
    );
    assert_ne!(
        Input::Tuple(vec![jwt(b'a'), ip.clone()]).key(),
        Input::Tuple(vec![jwt(b'b'), ip.clone()]).key()
    );
    assert_eq!(
        Input::Tuple(vec![jwt(b'a'), ip.clone()]).key(),
        Input::Tuple(vec![jwt(b'a'), ip]).key()
    );
    // Nested and flat tuples of the same leaves differ.
    let (a, b, c) = (Input::U64(1), Input::U64(2), Input::U64(3));
    let flat = Input::Tuple(vec![a.clone(), b.clone(), c.clone()]).key();
    let left = Input::Tuple(vec![Input::Tuple(vec![a.clone(), b.clone()]), c.clone()]).key();
    let right = Input::Tuple(vec![a, Input::Tuple(vec![b, c])]).key();
    assert_ne!(flat, left);
    assert_ne!(flat, right);
    assert_ne!(left, right);
}
