//! `http_fetch`: GET a URL on an allowlisted host, with size and time
//! limits.
//!
//! **Invariant:** a request goes only to addresses checked after DNS
//! resolution: loopback, private, link-local, unique-local, site-local,
//! CGNAT, multicast and unspecified addresses, and every IPv6 form that
//! embeds an IPv4 one of those (IPv4-mapped, IPv4-translated,
//! IPv4-compatible, NAT64, 6to4, Teredo), are refused unless
//! [`FetchConfig::allow_private`] is set, and the connection is pinned to the
//! checked addresses (no second lookup an attacker could answer
//! differently). Redirects are followed by hand, each hop checked again.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::Url;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ToolAnnotations, ToolError, TypedTool};

/// What `http_fetch` may reach, and how much it reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FetchConfig {
    /// Hosts that may be fetched: `example.com` (that host), `*.example.com`
    /// (its subdomains), `*` (any host). Empty: none.
    pub allowed_hosts: Vec<String>,
    /// Whether loopback and private address ranges may be reached.
    pub allow_private: bool,
    /// The most body bytes returned; the rest is cut, with a note.
    pub max_bytes: usize,
    /// The longest a whole fetch (redirects included) may take.
    pub timeout: Duration,
    /// The most redirects followed.
    pub max_redirects: u32,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            allowed_hosts: Vec::new(),
            allow_private: false,
            max_bytes: 256 * 1024,
            timeout: Duration::from_secs(15),
            max_redirects: 5,
        }
    }
}

impl FetchConfig {
    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.allowed_hosts.iter().any(|pattern| {
            let pattern = pattern.trim().to_ascii_lowercase();
            if pattern == "*" {
                return true;
            }
            match pattern.strip_prefix("*.") {
                Some(domain) => host.ends_with(&format!(".{domain}")),
                None => host == pattern,
            }
        })
    }
}

/// Whether `ip` is in a range `http_fetch` refuses by default: a private,
/// loopback or otherwise internal IPv4 address, and every IPv6 form of one
/// (the forms that embed an IPv4 address are judged by that address), plus
/// the IPv6 ranges that are never public.
pub fn is_private_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => is_private_v6(v6),
    }
}

/// The IPv4 address in the last 32 bits of `s`.
fn last_v4(s: &[u16; 8]) -> Ipv4Addr {
    Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8)
}

fn is_private_v6(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    let embedded = match s {
        // ::ffff:a.b.c.d, IPv4-mapped: the IPv4 address itself.
        [0, 0, 0, 0, 0, 0xffff, ..] => Some(last_v4(&s)),
        // ::ffff:0:a.b.c.d, IPv4-translated (SIIT, RFC 2765).
        [0, 0, 0, 0, 0xffff, 0, ..] => Some(last_v4(&s)),
        // ::a.b.c.d, IPv4-compatible (deprecated, RFC 4291), which
        // includes :: and ::1: refused whatever it embeds.
        [0, 0, 0, 0, 0, 0, ..] => return true,
        // 64:ff9b::a.b.c.d, NAT64's well-known prefix.
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(last_v4(&s)),
        // 64:ff9b:1::/48, NAT64 for local use (RFC 8215): never public.
        [0x64, 0xff9b, 1, ..] => return true,
        // 2002:AABB:CCDD::/48, 6to4: the relay's IPv4 address A.B.C.D.
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        // 2001:0::/32, Teredo: its server's address, and its client's
        // (stored inverted).
        [0x2001, 0, hi, lo, ..] => {
            let server = Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
            let client = Ipv4Addr::from(!u32::from(last_v4(&s)));
            return is_private_v4(server) || is_private_v4(client);
        }
        _ => None,
    };
    if let Some(v4) = embedded {
        return is_private_v4(v4);
    }
    let first = s[0];
    v6.is_loopback()
        || v6.is_unspecified()
        || v6.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (first & 0xffc0) == 0xfe80 // link local fe80::/10
        || (first & 0xffc0) == 0xfec0 // site local (deprecated) fec0::/10
        || s[..4] == [0x100, 0, 0, 0] // discard-only 100::/64
}

fn is_private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64.0.0/10
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

/// The `http_fetch` tool.
#[derive(Debug, Clone)]
pub struct HttpFetch(pub FetchConfig);

/// Arguments of `http_fetch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpFetchArgs {
    /// The http or https URL to GET.
    pub url: String,
}

#[async_trait]
impl TypedTool for HttpFetch {
    type Args = HttpFetchArgs;
    const NAME: &'static str = "http_fetch";
    const DESCRIPTION: &'static str = "Fetches a URL with GET from an allowed host and returns \
        the status, content type and body as text (cut to a size limit).";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations {
        read_only: true,
        destructive: false,
        idempotent: true,
    };

    async fn run(&self, args: HttpFetchArgs) -> Result<String, ToolError> {
        let limit = self.0.timeout;
        match tokio::time::timeout(limit, fetch(&self.0, &args.url)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Failed(format!(
                "http_fetch: {} did not answer within {limit:?}",
                args.url
            ))),
        }
    }
}

async fn fetch(config: &FetchConfig, url: &str) -> Result<String, ToolError> {
    let mut url = Url::parse(url)
        .map_err(|e| ToolError::InvalidArguments(format!("http_fetch: bad URL {url:?}: {e}")))?;
    for _ in 0..=config.max_redirects {
        let (client, shown) = vetted_client(config, &url).await?;
        let mut response = client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| ToolError::Failed(format!("http_fetch: {shown}: {e}")))?;
        let status = response.status();
        if status.is_redirection()
            && let Some(location) = response.headers().get(reqwest::header::LOCATION)
        {
            let location = location.to_str().map_err(|_| {
                ToolError::Failed(format!(
                    "http_fetch: {shown} redirects to an unreadable location"
                ))
            })?;
            url = url.join(location).map_err(|e| {
                ToolError::Failed(format!(
                    "http_fetch: {shown} redirects to {location:?}: {e}"
                ))
            })?;
            continue;
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown")
            .to_string();
        let mut body = Vec::new();
        let mut cut = false;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| ToolError::Failed(format!("http_fetch: {shown}: {e}")))?
        {
            let room = config.max_bytes.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let mut text = format!(
            "HTTP {status}\ncontent-type: {content_type}\n\n{}",
            String::from_utf8_lossy(&body)
        );
        if cut {
            text.push_str(&format!(
                "\n[http_fetch: cut after {} bytes]",
                config.max_bytes
            ));
        }
        if !status.is_success() {
            return Err(ToolError::Failed(format!("http_fetch: {shown}: {text}")));
        }
        return Ok(text);
    }
    Err(ToolError::Failed(format!(
        "http_fetch: more than {} redirects",
        config.max_redirects
    )))
}

/// Checks `url`'s scheme, host and addresses, and returns a client pinned
/// to those addresses.
async fn vetted_client(
    config: &FetchConfig,
    url: &Url,
) -> Result<(reqwest::Client, String), ToolError> {
    let shown = url.to_string();
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::Refused(format!(
            "http_fetch: only http and https URLs, not {shown}"
        )));
    }
    let host = url
        .host_str()
        .ok_or_else(|| ToolError::InvalidArguments(format!("http_fetch: {shown} has no host")))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if !config.host_allowed(bare) {
        return Err(ToolError::Refused(format!(
            "http_fetch: host {bare:?} is not in the allowlist ({})",
            if config.allowed_hosts.is_empty() {
                "which is empty".to_string()
            } else {
                config.allowed_hosts.join(", ")
            }
        )));
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| ToolError::Failed(format!("http_fetch: cannot resolve {bare}: {e}")))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(ToolError::Failed(format!(
            "http_fetch: {bare} resolves to no address"
        )));
    }
    if !config.allow_private
        && let Some(bad) = addrs.iter().find(|a| is_private_address(a.ip()))
    {
        return Err(ToolError::Refused(format!(
            "http_fetch: {bare} resolves to {}, a loopback, private or otherwise internal \
             address, and this worker does not allow those",
            bad.ip()
        )));
    }
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(config.timeout)
        .user_agent("swarm-agent http_fetch");
    if bare.parse::<IpAddr>().is_err() {
        builder = builder.resolve_to_addrs(bare, &addrs);
    }
    let client = builder
        .build()
        .map_err(|e| ToolError::Failed(format!("http_fetch: cannot build a client: {e}")))?;
    Ok((client, shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_ranges_are_private() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
        ] {
            assert!(is_private_address(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1"] {
            assert!(!is_private_address(ip.parse().unwrap()), "{ip}");
        }
    }

    fn private(ip: &str) -> bool {
        is_private_address(ip.parse().unwrap())
    }

    #[test]
    fn ipv4_mapped_addresses_are_judged_by_their_ipv4() {
        for ip in [
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:7f00:1",
        ] {
            assert!(private(ip), "{ip}");
        }
        assert!(!private("::ffff:8.8.8.8"));
        assert!(private("::ffff:0:127.0.0.1"));
        assert!(!private("::ffff:0:8.8.8.8"));
    }

    #[test]
    fn ipv4_compatible_addresses_are_refused() {
        for ip in [
            "::127.0.0.1",
            "::10.0.0.1",
            "::192.168.0.1",
            "::7f00:1",
            "::8.8.8.8",
        ] {
            assert!(private(ip), "{ip}");
        }
    }

    #[test]
    fn nat64_addresses_are_judged_by_their_ipv4() {
        for ip in [
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::127.0.0.1",
            "64:ff9b::10.1.1.1",
            "64:ff9b:1::8.8.8.8",
        ] {
            assert!(private(ip), "{ip}");
        }
        assert!(!private("64:ff9b::8.8.8.8"));
    }

    #[test]
    fn six_to_four_and_teredo_addresses_are_judged_by_their_ipv4() {
        // 2002:7f00:0001:: embeds 127.0.0.1; 2002:c0a8:0101:: 192.168.1.1.
        for ip in [
            "2002:7f00:1::1",
            "2002:c0a8:101::",
            "2002:a00:1:5::9",
            "2002:a9fe:a9fe::",
        ] {
            assert!(private(ip), "{ip}");
        }
        assert!(!private("2002:808:808::1"));
        // Teredo: server 10.0.0.1, or client 127.0.0.1 (inverted: 80ff:fffe).
        assert!(private("2001:0:a00:1::1"));
        assert!(private("2001:0:808:808:0:0:80ff:fffe"));
        assert!(!private("2001:0:808:808:0:0:f7f7:f7f7"));
    }

    #[test]
    fn ipv6_internal_ranges_are_private() {
        for ip in [
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf:ffff::1",
            "fec0::1",
            "feff::1",
            "ff02::1",
            "ff0e::1",
            "100::1",
        ] {
            assert!(private(ip), "{ip}");
        }
        for ip in [
            "2606:4700::1111",
            "2a00:1450:4001::200e",
            "2001:4860:4860::8888",
        ] {
            assert!(!private(ip), "{ip}");
        }
    }

    /// A URL naming such an address is refused before any connection.
    #[tokio::test]
    async fn urls_with_special_ipv6_hosts_are_refused() {
        let config = FetchConfig {
            allowed_hosts: vec!["*".into()],
            ..FetchConfig::default()
        };
        for url in [
            "http://[::ffff:127.0.0.1]/",
            "http://[::127.0.0.1]:8080/",
            "http://[64:ff9b::169.254.169.254]/latest/meta-data",
            "http://[2002:7f00:1::]/",
            "http://[fd00::1]/",
            "http://[::1]/",
        ] {
            let e = fetch(&config, url).await.unwrap_err();
            assert!(
                matches!(&e, ToolError::Refused(m) if m.contains("internal")),
                "{url}: {e}"
            );
        }
    }

    #[test]
    fn the_allowlist_matches_hosts_and_subdomains() {
        let c = FetchConfig {
            allowed_hosts: vec!["example.com".into(), "*.docs.rs".into()],
            ..FetchConfig::default()
        };
        assert!(c.host_allowed("example.com"));
        assert!(c.host_allowed("EXAMPLE.com."));
        assert!(!c.host_allowed("evil-example.com"));
        assert!(!c.host_allowed("sub.example.com"));
        assert!(c.host_allowed("tokio.docs.rs"));
        assert!(!c.host_allowed("docs.rs"));
        assert!(!FetchConfig::default().host_allowed("example.com"));
    }
}
