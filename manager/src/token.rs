//! Assignment tokens: proof that a result comes from a holder of its
//! assignment.
//!
//! Each assignment carries a token that its result (or its worker's
//! `Error`) must echo. The token is a keyed hash of the swarm, task,
//! attempt and revision, so it needs no storage and is the same when an
//! assignment is sent again (after a lost state write, say). Only the
//! managers hold the key; only the pool's workers can read the assignment
//! (the WORK stream), so a worker of another pool, or any other login that
//! can publish on `a2ap.*.result.*`, cannot forge a result that counts.

use sha2::{Digest, Sha256};

/// The managers' key for assignment tokens.
#[derive(Clone)]
pub struct TokenKey(Vec<u8>);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "TokenKey(none)"
        } else {
            "TokenKey(..)"
        })
    }
}

impl TokenKey {
    /// A key from a secret; every manager replica needs the same one.
    pub fn new(secret: &[u8]) -> TokenKey {
        TokenKey(
            Sha256::digest([b"swarm assignment token key\0".as_slice(), secret].concat()).to_vec(),
        )
    }

    /// No key: tokens are not checked (a development server without users,
    /// where any login may do anything anyway).
    pub fn none() -> TokenKey {
        TokenKey(Vec::new())
    }

    /// Whether results are checked.
    pub fn checks(&self) -> bool {
        !self.0.is_empty()
    }

    /// The token of one assignment; empty without a key.
    pub fn token(&self, swarm_id: &str, task_id: &str, attempt: u32, revision: u32) -> String {
        if self.0.is_empty() {
            return String::new();
        }
        let mut h = Sha256::new();
        // Lengths first, so no two different inputs hash the same bytes.
        for part in [self.0.as_slice(), swarm_id.as_bytes(), task_id.as_bytes()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.update(attempt.to_le_bytes());
        h.update(revision.to_le_bytes());
        h.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Whether `token` is the one of that assignment (always, without a
    /// key). Compared in constant time.
    pub fn verify(
        &self,
        token: &str,
        swarm_id: &str,
        task_id: &str,
        attempt: u32,
        revision: u32,
    ) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let want = self.token(swarm_id, task_id, attempt, revision);
        want.len() == token.len()
            && want
                .bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_bound_to_its_key_and_its_assignment() {
        let key = TokenKey::new(b"secret");
        let t = key.token("s1", "t1", 1, 0);
        assert_eq!(t.len(), 32);
        assert!(key.verify(&t, "s1", "t1", 1, 0));
        assert_eq!(t, key.token("s1", "t1", 1, 0), "the same every time");
        for (s, task, a, r) in [
            ("s2", "t1", 1, 0),
            ("s1", "t2", 1, 0),
            ("s1", "t1", 2, 0),
            ("s1", "t1", 1, 1),
        ] {
            assert!(!key.verify(&t, s, task, a, r), "{s} {task} {a} {r}");
        }
        assert!(!TokenKey::new(b"other").verify(&t, "s1", "t1", 1, 0));
        assert!(!key.verify("", "s1", "t1", 1, 0));
        assert!(!key.verify(&t[..31], "s1", "t1", 1, 0));
    }

    #[test]
    fn without_a_key_nothing_is_checked() {
        let none = TokenKey::none();
        assert_eq!(none.token("s1", "t1", 1, 0), "");
        assert!(none.verify("anything", "s1", "t1", 1, 0));
        assert!(!none.checks());
    }
}
