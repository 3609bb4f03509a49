//! The oldest nats-server Swarm runs on, and the check every binary makes.
//!
//! 2.12 is the floor: older servers lack atomic batches (a large swarm's
//! state write: docs/decisions.md, "Large swarms in chunks"), 2.10 and
//! older pinned consumers (the manager's priority group), and Debian's
//! 2.9.10 has a clustered compare-and-swap bug (ARCHITECTURE.md, "The NATS
//! server").

use crate::RuntimeError;

/// The oldest supported server, as (major, minor).
pub const MIN_SERVER: (u64, u64) = (2, 12);

/// Parses `major.minor.patch[-pre]` into numbers.
pub fn parse(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.trim().trim_start_matches('v');
    let core = core.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>());
    let major = parts.next()?.ok()?;
    let minor = parts.next()?.ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    Some((major, minor, patch))
}

/// Refuses a server older than [`MIN_SERVER`] with a clear message.
pub fn check(version: &str) -> Result<(), RuntimeError> {
    let too_old = || RuntimeError::ServerTooOld {
        found: version.to_string(),
        required: format!("{}.{}.0", MIN_SERVER.0, MIN_SERVER.1),
    };
    let (major, minor, _) = parse(version).ok_or_else(too_old)?;
    if (major, minor) < MIN_SERVER {
        return Err(too_old());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_servers_are_refused() {
        assert!(check("2.9.10").is_err());
        assert!(check("2.10.26").is_err());
        assert!(check("garbage").is_err());
        assert!(check("2.11.6").is_err(), "no atomic batches");
        assert!(check("2.12.0").is_ok());
        assert!(check("2.12.8").is_ok());
        assert!(check("2.14.0-RC.1").is_ok());
        assert!(check("3.0.0").is_ok());
        let msg = check("2.9.10").unwrap_err().to_string();
        assert!(msg.contains("2.9.10") && msg.contains("2.12.0"), "{msg}");
    }
}
