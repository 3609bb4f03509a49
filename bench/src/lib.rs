//! Swarm benchmarks (being written).
