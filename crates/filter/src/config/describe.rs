//! One description per configuration type: [`raw_struct!`] and
//! [`raw_enum!`] take a type written once in `raw.rs` (its fields' names as
//! in the JSON, types, defaults and docs; its variants' names) and make the
//! type, its reader ([`ReadJson`], over the [`Node`] cursor) and, with the
//! `schema` feature, the attributes `schemars` derives the JSON Schema from.
//!
//! A field's value is read by its type: a string, `u64`, `bool`, `null` or a
//! value for an `Option`, an array for a `Vec`, an object for another raw
//! struct, a name for a raw enum. What a type declares is what is read and
//! what the schema says: the same fields, names, types and defaults, except
//! where a field says otherwise (`read_with`, `schema`).
//!
//! Field attributes, in this order, all optional:
//! - `#[default]`: absent, the field is its type's default; `#[default =
//!   EXPR]`: absent, it is `EXPR` (the schema shows it). Without either
//!   the field is required.
//! - `#[rename = "NAME"]`: its name in the JSON, when not the field's.
//! - `#[read_with = PATH]`: read by `PATH(&Node)` instead of by its type.
//! - `#[schema(...)]`: attributes for the schema generator only.
//!
//! A struct marked `#[default]` gets a `Default` made of its fields'
//! defaults (every field must have one).

use super::reader::Node;
use sluice_core::FieldError;

/// A raw configuration type read from a JSON value, with serde's messages.
pub trait ReadJson: Sized {
    /// Reads the value at `n`; an error names its path.
    fn read_json(n: &Node<'_>) -> Result<Self, FieldError>;
}

impl ReadJson for String {
    fn read_json(n: &Node<'_>) -> Result<Self, FieldError> {
        n.string()
    }
}

impl ReadJson for u64 {
    fn read_json(n: &Node<'_>) -> Result<Self, FieldError> {
        n.u64()
    }
}

impl ReadJson for bool {
    fn read_json(n: &Node<'_>) -> Result<Self, FieldError> {
        n.boolean()
    }
}

/// `null` is `None`.
impl<T: ReadJson> ReadJson for Option<T> {
    fn read_json(n: &Node<'_>) -> Result<Self, FieldError> {
        n.optional(T::read_json)
    }
}

impl<T: ReadJson> ReadJson for Vec<T> {
    fn read_json(n: &Node<'_>) -> Result<Self, FieldError> {
        n.list(T::read_json)
    }
}

impl<T: ReadJson> ReadJson for Box<T> {
    fn read_json(n: &Node<'_>) -> Result<Self, FieldError> {
        T::read_json(n).map(Box::new)
    }
}

/// A struct of the configuration, described once (see the module doc).
macro_rules! raw_struct {
    (
        $(#[doc = $doc:literal])*
        #[derive($($derive:path),*)]
        #[default]
        pub struct $name:ident { $($body:tt)* }
    ) => {
        $crate::config::describe::raw_struct! {
            $(#[doc = $doc])*
            #[derive($($derive),*)]
            pub struct $name { $($body)* }
        }
        $crate::config::describe::raw_struct! { @default $name { $($body)* } }
    };
    (
        @default $name:ident {
            $(
                $(#[doc = $field_doc:literal])*
                $(#[default $(= $default:expr)?])?
                $(#[rename = $rename:literal])?
                $(#[read_with = $read_with:path])?
                $(#[schema($($schema:tt)*)])*
                pub $field:ident: $ty:ty,
            )*
        }
    ) => {
        impl Default for $name {
            fn default() -> Self {
                $name {
                    $($field: $crate::config::describe::default_value!(
                        $field $([$($default)?])?
                    ),)*
                }
            }
        }
    };
    (
        $(#[doc = $doc:literal])*
        #[derive($($derive:path),*)]
        pub struct $name:ident {
            $(
                $(#[doc = $field_doc:literal])*
                $(#[default $(= $default:expr)?])?
                $(#[rename = $rename:literal])?
                $(#[read_with = $read_with:path])?
                $(#[schema($($schema:tt)*)])*
                pub $field:ident: $ty:ty,
            )*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive($($derive),*)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[cfg_attr(feature = "schema", serde(deny_unknown_fields))]
        pub struct $name {
            $(
                $(#[doc = $field_doc])*
                $(
                    #[cfg_attr(feature = "schema", serde(default))]
                    $(#[cfg_attr(feature = "schema", schemars(extend("default" = $default)))])?
                )?
                $(#[cfg_attr(feature = "schema", serde(rename = $rename))])?
                $(#[cfg_attr(feature = "schema", $($schema)*)])*
                pub $field: $ty,
            )*
        }

        impl $crate::config::describe::ReadJson for $name {
            fn read_json(
                n: &$crate::config::reader::Node<'_>,
            ) -> Result<Self, $crate::config::FieldError> {
                const FIELDS: &[&str] = &[
                    $($crate::config::describe::json_name!($field $($rename)?)),*
                ];
                $(let mut $field: Option<$ty> = None;)*
                n.object(concat!("struct ", stringify!($name)), FIELDS, &mut |k, v| {
                    $(
                        if k == $crate::config::describe::json_name!($field $($rename)?) {
                            $field = Some($crate::config::describe::read_value!(
                                v, $ty $(, $read_with)?
                            )?);
                            return Ok(());
                        }
                    )*
                    Ok(())
                })?;
                Ok($name {
                    $($field: $crate::config::describe::take!(
                        n, $field, $crate::config::describe::json_name!($field $($rename)?)
                        $(, [$($default)?])?
                    ),)*
                })
            }
        }
    };
}

/// An enum of names in the configuration (`"per_request"`), described once:
/// each variant with its name in the JSON.
macro_rules! raw_enum {
    (
        $(#[doc = $doc:literal])*
        #[derive($($derive:path),*)]
        pub enum $name:ident {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident = $json:literal,
            )*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive($($derive),*)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        pub enum $name {
            $(
                $(#[$variant_meta])*
                #[cfg_attr(feature = "schema", serde(rename = $json))]
                $variant,
            )*
        }

        $crate::config::describe::read_names!($name { $($variant = $json,)* });
    };
}

/// The reader of an enum of names (also of one defined elsewhere,
/// `WhenFull`).
macro_rules! read_names {
    ($name:ident { $($variant:ident = $json:literal,)* }) => {
        impl $crate::config::describe::ReadJson for $name {
            fn read_json(
                n: &$crate::config::reader::Node<'_>,
            ) -> Result<Self, $crate::config::FieldError> {
                n.choice(&[$($json),*], &[$($name::$variant),*])
            }
        }
    };
}

/// A field's name in the JSON: its own, or the one it is renamed to.
macro_rules! json_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $rename:literal) => {
        $rename
    };
}

/// A field's value read from `v`, by its type or by the given function.
macro_rules! read_value {
    ($v:ident, $ty:ty) => {
        <$ty as $crate::config::describe::ReadJson>::read_json($v)
    };
    ($v:ident, $ty:ty, $read_with:path) => {
        $read_with($v)
    };
}

/// A field's value once its object is read: the value written, else its
/// default, else the error naming it as missing.
macro_rules! take {
    ($n:ident, $field:ident, $name:expr) => {
        $n.required($field, $name)?
    };
    ($n:ident, $field:ident, $name:expr, []) => {
        $field.unwrap_or_default()
    };
    ($n:ident, $field:ident, $name:expr, [$default:expr]) => {
        $field.unwrap_or_else(|| $default)
    };
}

/// A field's default in a struct's `Default`.
macro_rules! default_value {
    ($field:ident) => {
        compile_error!(concat!("`", stringify!($field), "` has no default"))
    };
    ($field:ident []) => {
        Default::default()
    };
    ($field:ident [$default:expr]) => {
        $default
    };
}

pub(super) use {default_value, json_name, raw_enum, raw_struct, read_names, read_value, take};
