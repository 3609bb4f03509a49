//! Whole-system tests of Swarm live in `tests/tests/`; this library is empty.
