//! A trace sink for `--b-traces`: an HTTP server on 127.0.0.1 that answers
//! every OTLP export `200 OK` and keeps nothing, so that B's roles pay for
//! making, encoding and sending their spans, and no collector's speed
//! enters the comparison.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running sink: its URL, and how many exports it took.
pub struct Sink {
    /// `http://127.0.0.1:<port>`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub url: String,
    exports: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sink {
    /// Starts a sink on a free port.
    pub async fn start() -> std::io::Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let exports = Arc::new(AtomicU64::new(0));
        let counted = exports.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, counted.clone()));
            }
        });
        Ok(Sink { url, exports, task })
    }

    /// How many export requests it answered.
    pub fn exports(&self) -> u64 {
        self.exports.load(Ordering::Relaxed)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers one connection's requests (kept alive) until it closes.
async fn serve(mut stream: TcpStream, exports: Arc<AtomicU64>) {
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut chunk = [0_u8; 16 * 1024];
    loop {
        // The head, then as many body bytes as it says.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head_end + length);
        exports.fetch_add(1, Ordering::Relaxed);
        let answer =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if stream.write_all(answer).await.is_err() {
            return;
        }
    }
}
