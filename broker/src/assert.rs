//! `strict_assert!` and `strict_assert_eq!`: invariants checked always when the crate is built
//! with the `strict-assertions` feature (the test suite, `scripts/test.sh`, turns it on), and
//! as `debug_assert!` otherwise, so release builds pay nothing for the expensive ones (a CRC
//! recomputed, a header decoded again). A failed assertion is a programmer error: it stops the
//! broker. Faults of the disk or the network are never asserted; they are errors.

/// `assert!` under the `strict-assertions` feature, `debug_assert!` otherwise.
macro_rules! strict_assert {
    ($($arg:tt)*) => {
        if cfg!(feature = "strict-assertions") {
            assert!($($arg)*);
        } else {
            debug_assert!($($arg)*);
        }
    };
}

/// `assert_eq!` under the `strict-assertions` feature, `debug_assert_eq!` otherwise.
macro_rules! strict_assert_eq {
    ($($arg:tt)*) => {
        if cfg!(feature = "strict-assertions") {
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
