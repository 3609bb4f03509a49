//! How every child process starts, for the `shell` tool and for command
//! gates: in the folder it is given (`HOME` too), with a minimal
//! environment ([`CHILD_ENV`]: nothing else of the worker's, so no API key
//! and no NATS password), in a process group of its own that is killed
//! when the command ends or runs out of time, and with each output stream
//! cut to a size while the rest is drained, so a chatty command still
//! finishes.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// Why a command did not run to its end: it could not start, or it ran out
/// of time and was killed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed: {0}")]
pub(crate) struct CommandError(pub String);

/// What a finished command printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    pub fn status_text(&self) -> String {
        match self.code {
            Some(c) => c.to_string(),
            None => "killed by a signal".to_string(),
        }
    }
}

/// The variables a child process inherits from this process, when set.
/// `HOME` is always the folder the command runs in, and `PATH` has a
/// default; nothing else passes (no `*_API_KEY`, no `NATS_*`).
pub const CHILD_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// `PATH` for a child when this process has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The whole environment of a child process that runs in `home`, taking the
/// allowed variables ([`CHILD_ENV`]) from `parent`.
pub(crate) fn child_env(
    home: &std::path::Path,
    parent: impl Fn(&str) -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = CHILD_ENV
        .iter()
        .filter_map(|name| parent(name).map(|value| (OsString::from(name), value)))
        .collect();
    if !env.iter().any(|(name, _)| name == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    env.push(("HOME".into(), home.as_os_str().to_owned()));
    env
}

/// Kills every process of the group the command leads (its children too:
/// `sh -c "sleep 100 &"` leaves one behind).
fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        // Already gone is fine.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Reads a pipe to its end, keeping the first `max_bytes` (and one more, to
/// tell a cut) and discarding the rest, so the writer never blocks on a
/// full pipe.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    pipe: Option<R>,
    max_bytes: usize,
) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(mut p) = pipe {
        let _ = (&mut p)
            .take(max_bytes as u64 + 1)
            .read_to_end(&mut buf)
            .await;
        let _ = tokio::io::copy(&mut p, &mut tokio::io::sink()).await;
    }
    buf
}

/// Runs `program args` in `dir` with a minimal environment ([`child_env`]),
/// feeding `stdin`; the command and whatever it started are killed when it
/// exits or after `timeout`; each output stream is cut to `max_bytes`.
pub(crate) async fn run_command(
    program: &str,
    args: &[String],
    dir: &std::path::Path,
    stdin: Option<&str>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<CommandOutput, CommandError> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(child_env(dir, |name| std::env::var_os(name)))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| CommandError(format!("cannot start {program}: {e}")))?;
    let pid = child.id();
    let input = stdin.map(|s| s.as_bytes().to_vec());
    let mut child_stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let write = async {
        if let (Some(pipe), Some(bytes)) = (child_stdin.as_mut(), input.as_ref()) {
            use tokio::io::AsyncWriteExt;
            // A command that exits without reading its input is no error.
            let _ = pipe.write_all(bytes).await;
        }
        drop(child_stdin.take());
    };
    let wait = async {
        let status = child.wait().await;
        // What it left running would hold the pipes open: end it too.
        kill_group(pid);
        status
    };
    let work = async {
        let (_, out, err, status) = tokio::join!(
            write,
            read_capped(stdout, max_bytes),
            read_capped(stderr, max_bytes),
            wait
        );
        (status, out, err)
    };
    let (status, out, err) = match tokio::time::timeout(timeout, work).await {
        Ok(done) => done,
        Err(_) => {
            kill_group(pid);
            // Reap it; `kill_on_drop` covers a child that outlives this.
            let _ = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
            return Err(CommandError(format!(
                "{program} did not finish within {timeout:?} and was killed"
            )));
        }
    };
    let status = status.map_err(|e| CommandError(format!("{program}: {e}")))?;
    let text = |bytes: Vec<u8>| {
        let cut = bytes.len() > max_bytes;
        let mut s = String::from_utf8_lossy(&bytes[..bytes.len().min(max_bytes)]).into_owned();
        if cut {
            s.push_str(&format!("\n[cut after {max_bytes} bytes]"));
        }
        s
    };
    Ok(CommandOutput {
        code: status.code(),
        stdout: text(out),
        stderr: text(err),
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_child_gets_only_the_allowed_variables() {
        let parent = |name: &str| match name {
            "PATH" => Some(OsString::from("/bin")),
            "LANG" => Some(OsString::from("C.UTF-8")),
            "OPENAI_API_KEY" | "NATS_PASSWORD" => Some(OsString::from("secret")),
            _ => None,
        };
        let env = child_env(std::path::Path::new("/ws"), parent);
        let names: Vec<&str> = env.iter().filter_map(|(n, _)| n.to_str()).collect();
        assert_eq!(names, ["PATH", "LANG", "HOME"]);
        assert!(env.contains(&("HOME".into(), "/ws".into())));
        let env = child_env(std::path::Path::new("/ws"), |_| None);
        assert!(env.contains(&("PATH".into(), DEFAULT_PATH.into())));
    }

    /// The variable the test below sets on a copy of this test binary.
    const SECRET: &str = "SWARM_TEST_SECRET_API_KEY";

    /// Runs in a copy of this test binary started with a secret in its
    /// environment (the workspace forbids `unsafe`, so this process cannot
    /// set one on itself): the command's child must not see it.
    #[tokio::test]
    async fn a_child_does_not_see_the_parents_secrets() {
        if std::env::var_os(SECRET).is_none() {
            let me = std::env::current_exe().expect("the test binary");
            let status = std::process::Command::new(me)
                .args([
                    "--exact",
                    "command::tests::a_child_does_not_see_the_parents_secrets",
                    "--nocapture",
                ])
                .env(SECRET, "sk-very-secret")
                .env("NATS_PASSWORD", "hunter2")
                .status()
                .expect("the copy runs");
            assert!(status.success(), "the copy of the test failed");
            return;
        }
        let dir = tempfile::tempdir().expect("a temporary folder");
        let out = run_command(
            "sh",
            &["-c".into(), "env; pwd".into()],
            dir.path(),
            None,
            Duration::from_secs(10),
            64 * 1024,
        )
        .await
        .expect("env runs");
        assert!(out.success(), "{out:?}");
        assert!(!out.stdout.contains("sk-very-secret"), "{}", out.stdout);
        assert!(
            !out.stdout.contains(SECRET) && !out.stdout.contains("NATS_"),
            "{}",
            out.stdout
        );
        let home = format!("HOME={}", dir.path().display());
        assert!(out.stdout.contains(&home), "{}", out.stdout);
    }

    #[tokio::test]
    async fn output_is_cut_and_the_command_still_finishes() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let started = std::time::Instant::now();
        // 4 MB of output through a 1 KiB cap: the rest is drained.
        let out = run_command(
            "sh",
            &[
                "-c".into(),
                "head -c 4000000 /dev/zero | tr '\\0' x; echo done >&2".into(),
            ],
            dir.path(),
            None,
            Duration::from_secs(20),
            1024,
        )
        .await
        .expect("the command runs");
        assert!(out.success(), "{out:?}");
        assert!(
            out.stdout.ends_with("[cut after 1024 bytes]"),
            "{}",
            out.stdout.len()
        );
        assert_eq!(out.stderr.trim(), "done");
        assert!(started.elapsed() < Duration::from_secs(15));
    }

    #[tokio::test]
    async fn a_timeout_kills_the_command_and_what_it_started() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let marker = dir.path().join("still-running");
        let script = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let started = std::time::Instant::now();
        let e = run_command(
            "sh",
            &["-c".into(), script],
            dir.path(),
            None,
            Duration::from_millis(300),
            1024,
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("killed"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // The background child was killed with its group: it never wrote.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!marker.exists());
    }
}
