//! `strict_assert!` and `strict_assert_eq!`, as in the broker: invariants checked always when
//! the crate is built with the `strict-assertions` feature (borges-broker's feature of the same
//! name turns it on, so the test suite does), and as `debug_assert!` otherwise.

/// `assert!` under the `strict-assertions` feature, `debug_assert!` otherwise.
#[allow(unused_macros)]
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
