//! A real nats-server for one test.

use std::path::{Path, PathBuf};

use swarm_local::{NatsProcess, nats_server_bin};

use crate::scratch::Scratch;

/// The development `nats.conf` at the root of the source tree.
pub fn dev_nats_conf() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../nats.conf"))
}

/// A nats-server >= 2.12 with JetStream on a free port of 127.0.0.1, with
/// its store and log in its own temporary directory and the dev `nats.conf`.
/// Killed on `Drop`.
#[derive(Debug)]
pub struct NatsServer {
    // Declared before `dir`: the server dies before its store is deleted.
    nats: NatsProcess,
    dir: Scratch,
}

impl NatsServer {
    /// Starts a server (installing nats-server first if needed) and waits
    /// until it accepts connections.
    pub fn start() -> anyhow::Result<NatsServer> {
        let dir = Scratch::new("nats")?;
        let bin = nats_server_bin()?;
        let conf = dev_nats_conf();
        let nats = NatsProcess::start(
            &bin,
            Some(&conf),
            None,
            &dir.path().join("store"),
            &dir.path().join("nats-server.log"),
        )?;
        Ok(NatsServer { nats, dir })
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.nats.url()
    }

    /// The client port (the same after a restart).
    pub fn port(&self) -> u16 {
        self.nats.port()
    }

    /// The temporary directory holding the store and the log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.nats.process().log_tail(lines)
    }

    /// Kills the server with SIGKILL: no clean shutdown.
    pub fn kill(&mut self) {
        self.nats.kill();
    }

    /// Kills the server if it runs and starts it again on the same port with
    /// the same store.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.nats.restart()
    }

    /// The supervised process, for anything else (SIGTERM, pid, ...).
    pub fn process(&mut self) -> &mut NatsProcess {
        &mut self.nats
    }

    /// A client connected to the server. Panics if it cannot connect.
    pub async fn client(&self) -> async_nats::Client {
        let url = self.url();
        async_nats::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test nats-server at {url}: {e}"))
    }
}
