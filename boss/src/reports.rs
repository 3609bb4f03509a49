//! Final reports out: each `FinalReport` becomes a self-contained HTML page,
//! stored in the `reports` object store and written to the reports folder.
//!
//! A page is written only inside the folder, under a name made of the
//! swarm's id (a token: [`swarm_common::subjects::Subject::parse`] refuses
//! any other), and never replaces a rendered one: once a mission's record
//! says its report is out, a second report for it is acknowledged and
//! dropped, and a report of a swarm with no record does not overwrite a
//! page that is already there.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, AckKind};
use swarm_common::{FinalReport, mission::MissionStatus, subjects, subjects::Subject};
use swarm_runtime::{Infra, wire};
use tracing::{Instrument as _, info, warn};

use crate::{records, report};

/// What the report renderer needs.
pub struct Reporter {
    /// Streams and buckets.
    pub infra: Infra,
    /// Where HTML files are written.
    pub reports_dir: PathBuf,
    /// This boss's agent id.
    pub agent_id: String,
    /// Swarms whose report this boss is rendering now: a second report for
    /// one of them waits until the first is recorded, then finds it done.
    pub rendering: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// The object store name of a swarm's HTML report.
pub fn object_name(swarm_id: &str) -> String {
    format!("{swarm_id}.html")
}

impl Reporter {
    /// Renders one final report and acks it once the page is stored.
    pub async fn handle(&self, msg: jetstream::Message) {
        let span = swarm_runtime::trace::process(
            "render report",
            "consumer",
            &msg.subject,
            subjects::REPORTS_CONSUMER,
            msg.headers.as_ref(),
        );
        self.take(msg).instrument(span).await
    }

    async fn take(&self, msg: jetstream::Message) {
        let swarm_id = match Subject::parse(&msg.subject) {
            Some(Subject::Report { swarm_id }) => swarm_id.to_string(),
            _ => {
                let e = swarm_common::ErrorBody::new(
                    swarm_common::ErrorCode::ValidationFailed,
                    "a report's subject must be a2ap.<swarm id>.report, the id letters, digits, '-' or '_'",
                );
                self.reject(&msg, e).await;
                return;
            }
        };
        let envelope = match wire::decode::<FinalReport>(msg.headers.as_ref(), &msg.payload) {
            Ok(env) if env.swarm_id == swarm_id => env,
            Ok(env) => {
                let e = swarm_common::ErrorBody::new(
                    swarm_common::ErrorCode::ValidationFailed,
                    format!(
                        "report for swarm {:?} on the subject of {swarm_id:?}",
                        env.swarm_id
                    ),
                );
                self.reject(&msg, e).await;
                return;
            }
            Err(e) => {
                self.reject(&msg, e).await;
                return;
            }
        };
        let first = self
            .rendering
            .lock()
            .map(|mut set| set.insert(swarm_id.clone()))
            .unwrap_or(false);
        if !first {
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_millis(200))))
                .await;
            return;
        }
        let rendered = self.render(&swarm_id, &envelope.body).await;
        if let Ok(mut set) = self.rendering.lock() {
            set.remove(&swarm_id);
        }
        match rendered {
            Ok(Some(path)) => {
                info!(%swarm_id, overall_status = ?envelope.body.overall_status, path = %path.display(), "report rendered");
                let _ = msg.ack().await;
            }
            Ok(None) => {
                warn!(%swarm_id, "a report for a swarm whose report is already rendered; kept as it was");
                let _ = msg.ack().await;
            }
            Err(e) if msg.info().is_ok_and(|i| i.delivered >= crate::MAX_TRIES) => {
                let e = swarm_common::ErrorBody::new(
                    swarm_common::ErrorCode::LimitExceeded,
                    format!(
                        "the report could not be rendered in {} tries: {e:#}",
                        crate::MAX_TRIES
                    ),
                );
                self.reject(&msg, e).await;
            }
            Err(e) => {
                warn!(%swarm_id, error = format!("{e:#}"), "cannot render the report; will retry");
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                    .await;
            }
        }
    }

    async fn reject(&self, msg: &jetstream::Message, e: swarm_common::ErrorBody) {
        wire::reject(&self.infra.js, "boss", msg, e, &self.agent_id).await;
    }

    /// Renders and stores the page; `None` when the swarm's report was
    /// rendered before (a duplicate or a forgery: the first one stands).
    async fn render(
        &self,
        swarm_id: &str,
        final_report: &FinalReport,
    ) -> anyhow::Result<Option<PathBuf>> {
        let loaded = records::load(&self.infra.missions, swarm_id).await?;
        let record = loaded.as_ref().map(|(r, _)| r);
        if record.is_some_and(|r| r.report_object.is_some()) {
            return Ok(None);
        }
        // Rendered and written here, on the reports thread itself: it has a
        // runtime of its own at a lower priority (see `reports_thread`), so
        // CPU and file work hold up nothing but other reports, and a hand-off
        // to a blocking pool per step would cost more than the step.
        let html = report::render_html(&report::ReportInput {
            swarm_id,
            mission: &final_report.mission,
            mission_id: record.and_then(|r| r.request.mission_id.as_deref()),
            plan: record.and_then(|r| r.plan.as_ref()),
            report: final_report,
            rendered_by: &self.agent_id,
        })?;
        let name = object_name(swarm_id);
        let Some(path) = write_page(&self.reports_dir, &name, &html, loaded.is_some())? else {
            return Ok(None);
        };
        self.infra
            .reports
            .put(name.as_str(), &mut html.as_bytes())
            .await
            .context("storing the report in the object store")?;
        let file = path.display().to_string();
        let status = final_report.overall_status;
        let accepted_at = record.map(|r| r.accepted_at);
        if loaded.is_some() {
            records::update_from(&self.infra.missions, swarm_id, loaded, None, |r| {
                r.status = MissionStatus::Reported;
                r.overall_status = Some(status);
                r.report_object = Some(name.clone());
                r.report_file = Some(file.clone());
            })
            .await?;
        }
        let seconds =
            accepted_at.map(|at| (chrono::Utc::now() - at).num_milliseconds() as f64 / 1000.0);
        swarm_runtime::metrics::mission_reported(&format!("{status:?}").to_lowercase(), seconds);
        Ok(Some(path))
    }
}

/// Writes a report page into `dir` as `name` (through a temporary file, so a
/// reader never sees half a page) and returns its full path. `name` must be
/// one plain file name; without a mission record (`recorded` false) a page
/// already there is kept and `None` returned.
fn write_page(
    dir: &std::path::Path,
    name: &str,
    html: &str,
    recorded: bool,
) -> anyhow::Result<Option<PathBuf>> {
    let stem = name.strip_suffix(".html").unwrap_or_default();
    anyhow::ensure!(
        swarm_common::subjects::is_token(stem),
        "{name:?} is not a report file name"
    );
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    if !recorded && path.exists() {
        return Ok(None);
    }
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, html.as_bytes()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).context("placing the report file")?;
    Ok(Some(std::fs::canonicalize(&path).unwrap_or(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_stay_in_their_folder_and_do_not_replace_an_unrecorded_one() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["../x.html", "/tmp/x.html", "a/b.html", ".html", "x.txt"] {
            assert!(write_page(dir.path(), bad, "<p>", true).is_err(), "{bad}");
        }
        let first = write_page(dir.path(), "s1.html", "first", false).unwrap();
        assert!(first.is_some());
        assert_eq!(
            write_page(dir.path(), "s1.html", "forged", false).unwrap(),
            None
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("s1.html")).unwrap(),
            "first"
        );
        assert!(std::fs::read_dir(dir.path()).unwrap().count() == 1);
    }
}
