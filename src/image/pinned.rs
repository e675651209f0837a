//! Pinned images (`image.pinned_images`): images kubelet's garbage collection must leave alone,
//! reported as CRI's `Image.pinned`. A pattern is a reference, normalised as a pull's is
//! (`busybox` is `docker.io/library/busybox:latest`), or a glob whose `*` stands for any run of
//! characters (`registry.example/base/*`, `*/pause:*`), matched against an image's names as
//! ListImages shows them (its tags and digests). The patterns are read at each listing, so an
//! image is pinned by whatever name it carries now, however it came into the store (a pull, an
//! import, another tag of the same image).
//!
//! Pinning is advice to kubelet, as in containerd: RemoveImage removes a pinned image when a
//! client asks for it by name (containerd's RemoveImage does not look at its pinned label).

use super::registry::reference::ImageRef;
use super::store::records::ImageRecord;

/// The node's pinned-image patterns, exact references normalised.
#[derive(Debug, Clone, Default)]
pub(crate) struct PinnedImages {
    patterns: Vec<String>,
}

impl PinnedImages {
    pub fn new(patterns: &[String]) -> PinnedImages {
        PinnedImages {
            patterns: patterns.iter().map(|p| normalised(p)).collect(),
        }
    }

    /// Whether one of the image's names (its tags and digests) matches a pattern.
    pub fn covers(&self, record: &ImageRecord) -> bool {
        self.matches(record.repo_tags.iter().chain(&record.repo_digests))
    }

    fn matches<'a>(&self, mut names: impl Iterator<Item = &'a String>) -> bool {
        names.any(|name| self.patterns.iter().any(|p| glob_match(p, name)))
    }
}

/// A pattern without `*` as the full name a stored image carries; a glob as written.
fn normalised(pattern: &str) -> String {
    if pattern.contains('*') {
        return pattern.to_owned();
    }
    match ImageRef::parse(pattern) {
        Ok(r) => match (&r.digest, r.tagged()) {
            (Some(digest), _) => r.digested(digest),
            (None, Some(tagged)) => tagged,
            (None, None) => pattern.to_owned(),
        },
        Err(e) => {
            tracing::warn!(error = %e, "image.pinned_images: the entry matches no image name");
            pattern.to_owned()
        }
    }
}

/// `name` matched against `pattern`, where `*` stands for any run of characters (none too).
fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and the name position it has swallowed up to.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|b| *b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_any_run_of_characters() {
        let table = [
            ("a/b:1", "a/b:1", true),
            ("a/b:1", "a/b:10", false),
            ("a/*", "a/b:1", true),
            ("a/*", "c/a/b:1", false),
            ("*pause*", "registry.k8s.io/pause:3.10", true),
            ("*/pause:*", "registry.k8s.io/pause:3.10", true),
            ("*/pause:*", "registry.k8s.io/pause-x:3.10", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("*", "", true),
            ("", "x", false),
        ];
        for (pattern, name, want) in table {
            assert_eq!(glob_match(pattern, name), want, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn references_are_normalised_as_pulls_are() {
        let pinned = PinnedImages::new(&["busybox".into(), "reg.test:5000/base/*".into()]);
        assert_eq!(
            pinned.patterns,
            ["docker.io/library/busybox:latest", "reg.test:5000/base/*"]
        );
        let names = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let covers = |p: &PinnedImages, list: &[&str]| p.matches(names(list).iter());
        assert!(covers(&pinned, &["docker.io/library/busybox:latest"]));
        assert!(covers(&pinned, &["x/y:1", "reg.test:5000/base/os:12"]));
        assert!(!covers(&pinned, &["docker.io/library/busybox:1"]));
        assert!(!covers(&PinnedImages::default(), &["a/b:1"]));
    }
}
