//! Benchmarks live here (a later issue fills this crate).
