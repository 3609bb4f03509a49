//! `swarm-bench`: runs the benchmark scenarios against a local Swarm and
//! prints their tables (`cargo run --release -p swarm-bench -- --help`).

fn main() -> anyhow::Result<()> {
    swarm_bench::main_with_args(std::env::args(), swarm_bench::cluster::BuildPolicy::Always)
}
