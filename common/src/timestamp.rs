//! Timestamps on the wire: RFC 3339 text, exactly as chrono's own serde
//! writes it (`2026-12-01T12:49:58.146618123Z`, with 0, 3, 6 or 9 fraction
//! digits), but written and read without chrono's general-purpose
//! formatter and parser.
//!
//! Every A2AP message carries a few timestamps and a swarm's state a few per
//! task; chrono formats them a character at a time through `fmt::Write` and
//! parses them with its format-item machinery, which took about 5 % of the
//! manager's CPU and 2.5 % of a worker's per `echo` task (docs/decisions.md,
//! "Timestamps written by our own code"). The usual form is written and
//! read here directly; any other (a year outside 0-9999, a leap second, an
//! offset other than `Z`, more than nine fraction digits) goes through
//! chrono as before, so what is accepted and what is written are unchanged.
//!
//! Use with `#[serde(with = "crate::timestamp")]` on a `DateTime<Utc>`
//! field, and `crate::timestamp::option` on an `Option<DateTime<Utc>>`; their
//! JSON Schemas with `#[schemars(schema_with = "crate::timestamp::schema")]`
//! and `crate::timestamp::option::schema`.

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};
use serde::{Deserializer, Serializer, de};

/// Longest text [`format`] writes itself: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
const MAX_LEN: usize = 30;

/// Writes `t` into `buf` as chrono's serde does and returns the text, or
/// `None` for a form left to chrono (a year outside 0-9999, a leap second).
fn format<'a>(t: &DateTime<Utc>, buf: &'a mut [u8; MAX_LEN]) -> Option<&'a str> {
    let year = t.year();
    let nano = t.nanosecond();
    if !(0..=9999).contains(&year) || nano >= 1_000_000_000 {
        return None;
    }
    fn two(buf: &mut [u8], at: usize, v: u32) {
        buf[at] = b'0' + (v / 10) as u8;
        buf[at + 1] = b'0' + (v % 10) as u8;
    }
    let year = year as u32;
    two(buf, 0, year / 100);
    two(buf, 2, year % 100);
    buf[4] = b'-';
    two(buf, 5, t.month());
    buf[7] = b'-';
    two(buf, 8, t.day());
    buf[10] = b'T';
    two(buf, 11, t.hour());
    buf[13] = b':';
    two(buf, 14, t.minute());
    buf[16] = b':';
    two(buf, 17, t.second());
    let mut len = 19;
    // As chrono's `SecondsFormat::AutoSi`: as many digits as the value needs
    // of 3, 6 or 9.
    let (digits, mut frac) = if nano == 0 {
        (0, 0)
    } else if nano.is_multiple_of(1_000_000) {
        (3, nano / 1_000_000)
    } else if nano.is_multiple_of(1_000) {
        (6, nano / 1_000)
    } else {
        (9, nano)
    };
    if digits > 0 {
        buf[len] = b'.';
        for i in (0..digits).rev() {
            buf[len + 1 + i] = b'0' + (frac % 10) as u8;
            frac /= 10;
        }
        len += 1 + digits;
    }
    buf[len] = b'Z';
    len += 1;
    // Only ASCII digits and separators were written.
    std::str::from_utf8(&buf[..len]).ok()
}

/// Reads `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z`, or `None` for anything else.
fn parse_usual(s: &str) -> Option<DateTime<Utc>> {
    let b = s.as_bytes();
    if b.len() < 20 || b[b.len() - 1] != b'Z' {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<u32> {
        b.get(from..from + len)?.iter().try_fold(0u32, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
        })
    };
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if seps.iter().any(|&(i, c)| b[i] != c) {
        return None;
    }
    let nano = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            let v = num(20, digits.len())?;
            v * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let date = NaiveDate::from_ymd_opt(num(0, 4)? as i32, num(5, 2)?, num(8, 2)?)?;
    let time = date.and_hms_nano_opt(num(11, 2)?, num(14, 2)?, num(17, 2)?, nano)?;
    Some(time.and_utc())
}

/// Reads an RFC 3339 timestamp as chrono's serde does (any offset, turned
/// into UTC).
fn parse(s: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    match parse_usual(s) {
        Some(t) => Ok(t),
        None => s
            .parse::<DateTime<chrono::FixedOffset>>()
            .map(|t| t.with_timezone(&Utc)),
    }
}

/// Serializes a timestamp as RFC 3339 text.
pub fn serialize<S: Serializer>(t: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    let mut buf = [0u8; MAX_LEN];
    match format(t, &mut buf) {
        Some(s) => serializer.serialize_str(s),
        None => serde::Serialize::serialize(t, serializer),
    }
}

struct Visitor;

impl de::Visitor<'_> for Visitor {
    type Value = DateTime<Utc>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an RFC 3339 formatted date and time string")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        parse(value).map_err(E::custom)
    }
}

/// Deserializes a timestamp from RFC 3339 text.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
    deserializer.deserialize_str(Visitor)
}

/// The JSON Schema of a timestamp: RFC 3339 text.
pub fn schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "format": "date-time"})
}

/// The same for an optional timestamp (`None` is nil / null).
pub mod option {
    use super::*;

    /// Serializes an optional timestamp.
    pub fn serialize<S: Serializer>(
        t: &Option<DateTime<Utc>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => serializer.serialize_some(&Text(t)),
            None => serializer.serialize_none(),
        }
    }

    struct Text<'a>(&'a DateTime<Utc>);

    impl serde::Serialize for Text<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            super::serialize(self.0, serializer)
        }
    }

    struct OptVisitor;

    impl<'de> de::Visitor<'de> for OptVisitor {
        type Value = Option<DateTime<Utc>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an RFC 3339 formatted date and time string or nothing")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            super::deserialize(d).map(Some)
        }
    }

    /// Deserializes an optional timestamp.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        deserializer.deserialize_option(OptVisitor)
    }

    /// The JSON Schema of an optional timestamp: RFC 3339 text or null.
    pub fn schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": ["string", "null"], "format": "date-time"})
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Ours {
        #[serde(with = "crate::timestamp")]
        t: DateTime<Utc>,
        #[serde(with = "crate::timestamp::option", default)]
        o: Option<DateTime<Utc>>,
    }

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Chronos {
        t: DateTime<Utc>,
        o: Option<DateTime<Utc>>,
    }

    fn at(secs: i64, nanos: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, nanos).unwrap()
    }

    #[test]
    fn writes_what_chrono_writes() {
        for (secs, nanos) in [
            (0, 0),
            (1_796_129_377, 146_618_123),
            (1_796_129_377, 146_000_000),
            (1_796_129_377, 146_618_000),
            (1_796_129_377, 1),
            (253_402_300_799, 999_999_999),
        ] {
            let t = at(secs, nanos);
            let ours = serde_json::to_string(&Ours { t, o: Some(t) }).unwrap();
            let theirs = serde_json::to_string(&Chronos { t, o: Some(t) }).unwrap();
            assert_eq!(ours, theirs);
            let ours = rmp_serde::to_vec_named(&Ours { t, o: None }).unwrap();
            let theirs = rmp_serde::to_vec_named(&Chronos { t, o: None }).unwrap();
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn reads_what_chrono_reads_and_refuses_what_it_refuses() {
        for text in [
            "2026-12-01T12:49:58.146618123Z",
            "2026-12-01T12:49:58Z",
            "2026-12-01T12:49:58.1Z",
            "2026-12-01T12:49:58.1234567891Z",
            "2026-12-01T13:49:58.5+01:00",
            "2026-12-01t12:49:58z",
            "2026-12-01 12:49:58Z",
            "2016-12-31T23:59:60Z",
            "+12026-12-01T12:49:58Z",
            "2026-02-30T12:49:58Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T12:49:58.Z",
            "2026-12-01T12:49:58",
            "not a time",
            "",
        ] {
            let json = format!(r#"{{"t":"{text}","o":"{text}"}}"#);
            let ours = serde_json::from_str::<Ours>(&json).map(|v| (v.t, v.o));
            let theirs = serde_json::from_str::<Chronos>(&json).map(|v| (v.t, v.o));
            match (ours, theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{text}: ours {a:?}, chrono's {b:?}"),
            }
        }
    }

    #[test]
    fn nothing_stays_nothing() {
        let v: Ours = serde_json::from_str(r#"{"t":"2026-12-01T12:49:58Z","o":null}"#).unwrap();
        assert_eq!(v.o, None);
        let v: Ours = serde_json::from_str(r#"{"t":"2026-12-01T12:49:58Z"}"#).unwrap();
        assert_eq!(v.o, None);
        let bytes = rmp_serde::to_vec_named(&v).unwrap();
        assert_eq!(rmp_serde::from_slice::<Ours>(&bytes).unwrap(), v);
    }

    proptest! {
        #[test]
        fn any_time_goes_round_and_matches_chrono(secs in -62_000_000_000i64..253_402_300_799, nanos in 0u32..1_000_000_000) {
            let t = at(secs, nanos);
            let ours = rmp_serde::to_vec_named(&Ours { t, o: Some(t) }).unwrap();
            let theirs = rmp_serde::to_vec_named(&Chronos { t, o: Some(t) }).unwrap();
            prop_assert_eq!(&ours, &theirs);
            let back: Ours = rmp_serde::from_slice(&ours).unwrap();
            prop_assert_eq!(back, Ours { t, o: Some(t) });
        }
    }
}
