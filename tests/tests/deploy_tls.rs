//! The TLS block documented in k8s/base/nats/tls.conf works with the
//! production config: with a test CA's certificate in place, the roles'
//! connection settings (`--tls-ca-file`, `--tls-required`) connect as their
//! user over TLS, and a plain connection is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use swarm_runtime::NatsArgs;
use swarm_testkit::{NatsCluster, role};

/// Writes a CA and a server certificate for 127.0.0.1 and localhost into
/// `dir`; returns the paths (ca, cert, key).
fn certificates(dir: &std::path::Path) -> [std::path::PathBuf; 3] {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let paths = [dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key")];
    std::fs::write(&paths[0], ca.pem()).unwrap();
    std::fs::write(&paths[1], server.pem()).unwrap();
    std::fs::write(&paths[2], server_key.serialize_pem()).unwrap();
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_connect_over_tls_with_the_documented_block() {
    let certs = tempfile::tempdir().unwrap();
    let [ca, cert, key] = certificates(certs.path());
    // The block of tls.conf's comment, with this test's paths.
    let tls_conf = format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  timeout: 2\n}}\n",
        cert.display(),
        key.display(),
        ca.display()
    );
    let nats = NatsCluster::start_with_tls(1, Some(&tls_conf)).unwrap();
    let url = nats.nodes()[0].url();

    let worker = role("worker");
    let mut args = NatsArgs::local(url.clone());
    args.user = Some(worker.user.to_owned());
    args.password = Some(worker.password.to_owned());
    args.tls_ca = Some(ca.clone());
    args.tls_required = true;
    let client = args.connect("tls-test").await.unwrap();
    async_nats::jetstream::new(client)
        .query_account()
        .await
        .unwrap();

    // Without the CA the server's certificate is not trusted.
    let mut untrusted = args.clone();
    untrusted.tls_ca = None;
    assert!(untrusted.connect("tls-test").await.is_err());
    // Without credentials nobody gets in, TLS or not.
    let mut anonymous = args.clone();
    anonymous.user = None;
    anonymous.password = None;
    assert!(anonymous.connect("tls-test").await.is_err());
}
