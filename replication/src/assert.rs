//! `strict_assert!` and `strict_assert_eq!`: invariants checked always when this crate is
//! built with the `strict-assertions` feature (borges-broker's feature of the same name turns
//! it on, and the test suite, `scripts/test.sh`, turns that on), and as `debug_assert!`
//! otherwise, so release builds pay nothing for the expensive ones (a CRC recomputed, a header
//! decoded again). A failed assertion is a programmer error: it stops the process. Faults of
//! the disk or the network are never asserted; they are errors.
//!
//! Exported for the broker (`#[macro_use] extern crate borges_replication`): one definition,
//! switched by this crate's feature through [`STRICT_ASSERTIONS`] wherever it is expanded.

/// Whether this crate was built with `strict-assertions`; read by the macros' expansions.
#[doc(hidden)]
pub const STRICT_ASSERTIONS: bool = cfg!(feature = "strict-assertions");

/// `assert!` under the `strict-assertions` feature, `debug_assert!` otherwise.
#[macro_export]
macro_rules! strict_assert {
    ($($arg:tt)*) => {
        if $crate::assert::STRICT_ASSERTIONS {
            assert!($($arg)*);
        } else {
            debug_assert!($($arg)*);
        }
    };
}

/// `assert_eq!` under the `strict-assertions` feature, `debug_assert_eq!` otherwise.
#[macro_export]
macro_rules! strict_assert_eq {
    ($($arg:tt)*) => {
        if $crate::assert::STRICT_ASSERTIONS {
            assert_eq!($($arg)*);
        } else {
            debug_assert_eq!($($arg)*);
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(any(debug_assertions, feature = "strict-assertions")),
        ignore = "strict_assert! is off in release builds without strict-assertions"
    )]
    #[should_panic(expected = "invariant")]
    fn strict_assert_stops_in_test_builds() {
        let broken = true;
        strict_assert!(!broken, "invariant");
    }

    #[test]
    fn strict_assert_passes_what_holds() {
        strict_assert!(1 + 1 == 2);
        strict_assert_eq!(2, 1 + 1, "arithmetic");
    }
}
