//! The walk over a typed view that makes metric families of it: each
//! number (and boolean, as 0/1) a sample, nested keys joined with `_`, a
//! gauge where its type is a [`Level`] and a counter otherwise. A serde
//! serializer of its own, not JSON's, so that it sees the `Level` newtype
//! JSON does not show.

use super::Labels;
use hvnet_datapath::Level;
use serde::ser;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// One metric family: whether it is a level, and its samples.
#[derive(Default)]
pub(super) struct Family {
    pub(super) gauge: bool,
    pub(super) help: String,
    pub(super) samples: Vec<(Labels, f64)>,
}

pub(super) fn snake(s: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for c in s.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else {
            out.push(if c.is_ascii_alphanumeric() { c } else { '_' });
            prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

/// A node of the tree being read: its name in family names, its path
/// (for help), the labels of its samples.
pub(super) struct Node {
    pub(super) name: &'static str,
    pub(super) path: String,
    pub(super) labels: Labels,
}

impl Node {
    /// Adds every number (and boolean, as 0/1) of `view` to `families`,
    /// nested keys joined with `_`: a gauge where its type is a
    /// [`Level`], a counter otherwise.
    pub(super) fn add(&self, families: &mut BTreeMap<String, Family>, view: &impl Serialize) {
        let walk = Walk {
            node: self,
            families,
            prefix: String::new(),
            gauge: false,
            key: None,
        };
        // Nothing in a walk fails: strings and lists are passed over.
        let _ = view.serialize(walk);
    }

    fn sample(&self, families: &mut BTreeMap<String, Family>, key: &str, gauge: bool, x: f64) {
        let mut labels = self.labels.clone();
        let node = self.name;
        let path = &self.path;
        let (name, help) = match key.strip_prefix("drop_") {
            Some(reason) => {
                labels.push(("reason".into(), reason.into()));
                (
                    format!("hvnet_{node}_drops"),
                    format!("frames dropped, by reason (hvnet stats {path} drop_*)"),
                )
            }
            None => (
                format!("hvnet_{node}_{key}"),
                format!("hvnet stats {path} {key}"),
            ),
        };
        let f = families.entry(name).or_default();
        debug_assert!(
            f.samples.is_empty() || f.gauge == gauge,
            "hvnet_{node}_{key}: a level in one view and a count in another"
        );
        f.gauge = gauge;
        f.help = help;
        f.samples.push((labels, x));
    }
}

/// A serde serializer over one view (its own, not JSON's, so that it sees
/// [`Level`]'s newtype): `prefix` is the key so far, `gauge` whether a
/// `Level` holds the value, `key` a map's key waiting for its value.
struct Walk<'a> {
    node: &'a Node,
    families: &'a mut BTreeMap<String, Family>,
    prefix: String,
    gauge: bool,
    key: Option<String>,
}

impl Walk<'_> {
    /// The walk into field `key` (a queue's `counters` are the queue's
    /// own: no prefix).
    fn field(&mut self, key: &str) -> Walk<'_> {
        let prefix = if key == "counters" {
            self.prefix.clone()
        } else {
            format!("{}{}_", self.prefix, snake(key))
        };
        Walk {
            node: self.node,
            families: &mut *self.families,
            prefix,
            gauge: self.gauge,
            key: None,
        }
    }

    fn number(self, x: f64) -> Result<(), fmt::Error> {
        let key = self.prefix.trim_end_matches('_');
        self.node.sample(self.families, key, self.gauge, x);
        Ok(())
    }
}

/// What a walk passes over (lists: a table's rows are not metrics).
struct Skip;

macro_rules! numbers {
    ($($f:ident: $t:ty),*) => {
        $(fn $f(self, v: $t) -> Result<(), fmt::Error> {
            self.number(v as f64)
        })*
    };
}

impl<'a> ser::Serializer for Walk<'a> {
    type Ok = ();
    type Error = fmt::Error;
    type SerializeSeq = Skip;
    type SerializeTuple = Skip;
    type SerializeTupleStruct = Skip;
    type SerializeTupleVariant = Skip;
    type SerializeMap = Walk<'a>;
    type SerializeStruct = Walk<'a>;
    type SerializeStructVariant = Walk<'a>;

    numbers!(serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
             serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64,
             serialize_f32: f32, serialize_f64: f64);

    fn serialize_bool(self, v: bool) -> Result<(), fmt::Error> {
        self.number(f64::from(u8::from(v)))
    }
    fn serialize_char(self, _: char) -> Result<(), fmt::Error> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), fmt::Error> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), fmt::Error> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), fmt::Error> {
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<(), fmt::Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), fmt::Error> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), fmt::Error> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), fmt::Error> {
        Ok(())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        mut self,
        name: &'static str,
        v: &T,
    ) -> Result<(), fmt::Error> {
        self.gauge |= name == Level::NAME;
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), fmt::Error> {
        v.serialize(self.field(variant))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Skip, fmt::Error> {
        Ok(Skip)
    }
    fn serialize_tuple(self, _: usize) -> Result<Skip, fmt::Error> {
        Ok(Skip)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Skip, fmt::Error> {
        Ok(Skip)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Skip, fmt::Error> {
        Ok(Skip)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, fmt::Error> {
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, fmt::Error> {
        Ok(self)
    }
    fn serialize_struct_variant(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self, fmt::Error> {
        self.prefix = format!("{}{}_", self.prefix, snake(variant));
        Ok(self)
    }
}

impl ser::SerializeStruct for Walk<'_> {
    type Ok = ();
    type Error = fmt::Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), fmt::Error> {
        v.serialize(self.field(key))
    }
    fn end(self) -> Result<(), fmt::Error> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Walk<'_> {
    type Ok = ();
    type Error = fmt::Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), fmt::Error> {
        v.serialize(self.field(key))
    }
    fn end(self) -> Result<(), fmt::Error> {
        Ok(())
    }
}

impl ser::SerializeMap for Walk<'_> {
    type Ok = ();
    type Error = fmt::Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), fmt::Error> {
        // Keys are names (a view's, or a counter's `drop_REASON`).
        self.key = serde_json::to_value(key)
            .ok()
            .and_then(|k| k.as_str().map(str::to_owned));
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), fmt::Error> {
        match self.key.take() {
            Some(key) => v.serialize(self.field(&key)),
            None => Ok(()),
        }
    }
    fn end(self) -> Result<(), fmt::Error> {
        Ok(())
    }
}

macro_rules! skip {
    ($($t:ident :: $f:ident),*) => {
        $(impl ser::$t for Skip {
            type Ok = ();
            type Error = fmt::Error;
            fn $f<T: ?Sized + Serialize>(&mut self, _: &T) -> Result<(), fmt::Error> {
                Ok(())
            }
            fn end(self) -> Result<(), fmt::Error> {
                Ok(())
            }
        })*
    };
}

skip!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);
