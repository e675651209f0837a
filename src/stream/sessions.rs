//! One-shot stream tokens: an Exec, Attach or PortForward RPC leaves its validated request
//! here under a random token and answers a URL holding it; the first HTTP request naming the
//! token takes the request out.
//!
//! Invariants: a token is 144 random bits (24 URL-safe base64 characters) from the kernel's
//! generator; it is taken out by the first request that names it, whichever route and
//! whatever happens next, so it never opens two streams; it expires `ttl` after it was made;
//! at most `max` tokens wait at once (older expired ones are dropped first).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::backend::{AttachRequest, ExecRequest};
use super::portforward::PortForwardRequest;

/// How long a URL can be used (kubelet's value).
pub const TOKEN_TTL: Duration = Duration::from_secs(60);
/// Tokens waiting at once (kubelet's value).
pub const MAX_WAITING: usize = 1000;

#[derive(Debug, Clone)]
pub enum Pending {
    Exec(ExecRequest),
    Attach(AttachRequest),
    PortForward(PortForwardRequest),
}

impl Pending {
    /// The URL path segment that serves this request.
    pub fn route(&self) -> &'static str {
        match self {
            Pending::Exec(_) => "exec",
            Pending::Attach(_) => "attach",
            Pending::PortForward(_) => "portforward",
        }
    }
}

pub struct Sessions {
    waiting: Mutex<HashMap<String, (Instant, Pending)>>,
    ttl: Duration,
    max: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0} stream requests are already waiting to be used; try again later")]
pub struct TooManyWaiting(pub usize);

impl Sessions {
    pub fn new(ttl: Duration, max: usize) -> Sessions {
        Sessions {
            waiting: Mutex::new(HashMap::new()),
            ttl,
            max,
        }
    }

    /// Keeps `req` and returns its new token.
    pub fn insert(&self, req: Pending) -> Result<String, TooManyWaiting> {
        let now = Instant::now();
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.retain(|_, (made, _)| now.duration_since(*made) <= self.ttl);
        if waiting.len() >= self.max {
            return Err(TooManyWaiting(self.max));
        }
        let token = loop {
            let t = new_token();
            if !waiting.contains_key(&t) {
                break t;
            }
        };
        waiting.insert(token.clone(), (now, req));
        Ok(token)
    }

    /// Takes the request of `token` out, if it exists, has not expired and belongs to
    /// `route`. The token is gone afterwards in every case.
    pub fn take(&self, route: &str, token: &str) -> Option<Pending> {
        let (made, req) = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(token)?;
        (made.elapsed() <= self.ttl && req.route() == route).then_some(req)
    }

    pub fn waiting(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

fn new_token() -> String {
    let mut raw = [0u8; 18];
    getrandom::fill(&mut raw).expect("the kernel's random source is available");
    URL_SAFE_NO_PAD.encode(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec() -> Pending {
        Pending::Exec(ExecRequest {
            container_id: "c".into(),
            cmd: vec!["true".into()],
            tty: false,
            stdin: false,
            stdout: true,
            stderr: true,
        })
    }

    #[test]
    fn a_token_opens_once_and_only_on_its_route() {
        let s = Sessions::new(TOKEN_TTL, 10);
        let t = s.insert(exec()).unwrap();
        assert_eq!(t.len(), 24);
        assert!(
            t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert!(s.take("exec", &t).is_some());
        assert!(s.take("exec", &t).is_none());
        let t = s.insert(exec()).unwrap();
        assert!(s.take("attach", &t).is_none());
        assert!(s.take("exec", &t).is_none(), "a misrouted token is spent");
        assert!(s.take("exec", "unknown").is_none());
    }

    #[test]
    fn tokens_expire_and_are_bounded() {
        let s = Sessions::new(Duration::from_millis(30), 2);
        let t = s.insert(exec()).unwrap();
        s.insert(exec()).unwrap();
        assert_eq!(s.insert(exec()), Err(TooManyWaiting(2)));
        std::thread::sleep(Duration::from_millis(50));
        assert!(s.take("exec", &t).is_none());
        // Expired ones make room.
        s.insert(exec()).unwrap();
        assert_eq!(s.waiting(), 1);
    }

    #[test]
    fn tokens_differ() {
        let s = Sessions::new(TOKEN_TTL, 1000);
        let tokens: std::collections::HashSet<_> =
            (0..500).map(|_| s.insert(exec()).unwrap()).collect();
        assert_eq!(tokens.len(), 500);
    }
}
