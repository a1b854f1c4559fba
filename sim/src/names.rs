//! Unit enums named on the command line and in files: each enum's names
//! written once, as a table, and its `name`, `Display` and `FromStr`
//! made from it.

/// For `$ty` (at public path `$path`, for `name`'s doc example), a table
/// of `Variant => "name" | "alias" ...`: `name()` (the first name, its
/// example a round trip of every variant), `Display` (the same) and
/// `FromStr` (any of a variant's
/// names; anything else is the error `unknown $what `TEXT`: expected
/// $expected`).
macro_rules! unit_names {
    (
        $ty:ident in $path:literal, $what:literal, $expected:literal,
        { $($variant:ident => $name:literal $(| $alias:literal)*),+ $(,)? }
    ) => {
        impl $ty {
            /// Its name, as [`FromStr`](core::str::FromStr) reads it.
            ///
            #[doc = concat!(
                "```\nuse ", $path, "::", stringify!($ty), ";\n\n",
                "for v in [", $(stringify!($ty), "::", stringify!($variant), ", ",)+ "] {\n",
                "    assert_eq!(v.name().parse::<", stringify!($ty), ">(), Ok(v));\n",
                "}\n```"
            )]
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }
        }

        impl core::fmt::Display for $ty {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl core::str::FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($name $(| $alias)* => Ok(Self::$variant),)+
                    _ => Err(format!(
                        concat!("unknown ", $what, " `{}`: expected ", $expected),
                        s
                    )),
                }
            }
        }
    };
}

pub(crate) use unit_names;
