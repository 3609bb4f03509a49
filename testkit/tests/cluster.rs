//! The cluster plumbing, with stand-in role binaries (the real ones are
//! exercised by the whole-system tests in `tests/`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use swarm_testkit::Cluster;

/// A stand-in role: prints its flags and exits cleanly on SIGTERM.
fn stand_in(dir: &Path, role: &str) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let path = dir.join(role);
    fs::write(
        &path,
        "#!/bin/sh\ntrap 'kill $! 2>/dev/null; echo stopped; exit 0' TERM\n\
         echo \"flags: $*\"\nsleep 30 & wait\n",
    )?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
}

#[tokio::test]
async fn a_cluster_runs_in_its_own_directory_and_stops() {
    let bins = tempfile::tempdir().unwrap();
    stand_in(bins.path(), "worker").unwrap();
    let mut cluster = Cluster::builder()
        .bosses(0)
        .managers(0)
        .workers(0)
        .bin_dir(bins.path())
        .env("SWARM_TEST_MARK", "1")
        .start()
        .await
        .unwrap();
    let dir = cluster.dir().to_path_buf();
    assert!(cluster.reports_dir().starts_with(&dir));
    assert!(dir.join("workspace").is_dir());
    assert!(cluster.url().starts_with("nats://127.0.0.1:"));
    cluster.client().await.flush().await.unwrap();

    cluster.spawn_worker(&[]).unwrap();
    assert!(cluster.workers[0].is_running());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cluster.log_tails().contains("flags: --nats-url") {
        assert!(Instant::now() < deadline, "{}", cluster.log_tails());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = cluster.logs_dir().join("worker-1.log");
    cluster.stop(Duration::from_secs(5)).await;
    if std::env::var_os("SWARM_KEEP_TEST_DIRS").is_none() {
        assert!(
            !dir.exists(),
            "the temporary directory outlived the cluster"
        );
    } else {
        assert!(fs::read_to_string(log).unwrap().contains("stopped"));
    }
}
