//! `cargo bench -p swarm-bench [-- <scenario>... --quick --sync default]`:
//! the whole benchmark, with no libtest harness.

fn main() -> anyhow::Result<()> {
    // Cargo passes `--bench` to every bench target; the runner has no use for it.
    let args = std::env::args().filter(|a| a != "--bench");
    swarm_bench::main_with_args(args, swarm_bench::cluster::BuildPolicy::Always)
}
