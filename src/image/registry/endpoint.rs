//! An endpoint a pull goes to: a mirror or the image's own registry.

/// One place to pull from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub plain_http: bool,
    /// The image's own registry (credentials go only here).
    pub upstream: bool,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}",
            if self.plain_http { "http" } else { "https" },
            self.host
        )
    }
}
