//! PullImage: resolve the reference on each endpoint in turn (mirrors, then the registry
//! itself), pick this platform's manifest from an index, and install the image.

use super::fetch::{Candidate, Source};
use super::registry::manifest::{ManifestError, Resolved, parse_document, parse_manifest};
use super::registry::reference::ImageRef;
use super::registry::{Credentials, Endpoint, Session};
use super::{ImageError, ImageRecord, Images, PullError};

impl Images {
    /// Pulls `reference` and returns the image's record. The id (`record.id`) is what PullImage,
    /// ImageStatus and ListImages report.
    pub async fn pull(
        &self,
        reference: &str,
        creds: &Credentials,
    ) -> Result<ImageRecord, ImageError> {
        let image = ImageRef::parse(reference)?;
        let _busy = self.pulls.begin();
        let endpoints = self
            .registries
            .endpoints(&image.domain)
            .map_err(|e| ImageError::Pull {
                reference: image.to_string(),
                error: Box::new(e),
                also: Vec::new(),
            })?;
        let mut failures: Vec<(Endpoint, PullError)> = Vec::new();
        for (i, ep) in endpoints.iter().enumerate() {
            let refused = matches!(failures.last(), Some((_, PullError::Unreachable { .. })));
            if ep.fallback && !refused {
                continue;
            }
            if ep.fallback {
                tracing::info!(image = %image, endpoint = %ep, "a registry on this node refused HTTPS; trying plain HTTP");
            }
            match self.pull_from(ep, &image, creds).await {
                Ok(record) => {
                    tracing::info!(image = %image, id = %record.id, endpoint = %ep, "image pulled");
                    return Ok(record);
                }
                Err(e) if e.try_next_endpoint() && i + 1 < endpoints.len() => {
                    tracing::warn!(image = %image, endpoint = %ep, error = %e, "pull failed; trying the next endpoint");
                    failures.push((ep.clone(), e));
                }
                Err(e) => {
                    failures.push((ep.clone(), e));
                    break;
                }
            }
        }
        Err(pull_failure(image.to_string(), failures))
    }

    async fn pull_from(
        &self,
        ep: &Endpoint,
        image: &ImageRef,
        creds: &Credentials,
    ) -> Result<ImageRecord, PullError> {
        let session = self.registries.session(ep, image, creds).await?;
        let wanted = match (&image.digest, &image.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_owned(),
        };
        let (top_bytes, top_digest, content_type) = session.manifest(&wanted).await?;
        let bad = |e| manifest_error(&session, e);
        let resolved = parse_document(&top_bytes, content_type.as_deref())
            .and_then(|doc| doc.for_platform(&self.settings.platform))
            .map_err(bad)?;
        let (manifest, manifest_bytes, manifest_digest, index) = match resolved {
            Resolved::Manifest(m) => (m, top_bytes, top_digest.clone(), None),
            Resolved::Entry(entry) => {
                let (bytes, digest, ct) = session.manifest(&entry.digest.to_string()).await?;
                let m = parse_manifest(&bytes, ct.as_deref()).map_err(bad)?;
                (m, bytes, digest, Some((top_bytes, top_digest.clone())))
            }
        };
        let candidate = Candidate {
            manifest,
            manifest_bytes,
            manifest_digest,
            index,
            repo_tags: if image.digest.is_none() {
                image.tagged().into_iter().collect()
            } else {
                vec![]
            },
            repo_digests: vec![image.digested(&top_digest)],
        };
        self.install(&Source::Registry(&session), candidate).await
    }
}

/// A document the registry sent that crust cannot use, said with where it came from.
fn manifest_error(session: &Session, e: ManifestError) -> PullError {
    let registry = session.registry.clone();
    match e {
        ManifestError::NoPlatform { wanted, offered } => PullError::NotFound {
            registry,
            what: format!("a manifest for {wanted} (the index offers {offered})"),
        },
        ManifestError::Schema1
        | ManifestError::Schema(_)
        | ManifestError::MediaType(_)
        | ManifestError::NestedIndex => PullError::Unsupported(format!("{registry}: {e}")),
        ManifestError::Json { .. } | ManifestError::Limits(_) => {
            PullError::Invalid(format!("{registry}: {e}"))
        }
    }
}

/// One error for a pull that failed everywhere: the most telling failure first (a definite
/// answer such as not found, refused or corrupt beats a stall, which beats "could not
/// connect": with mirrors configured the upstream is often unreachable by design; among equals
/// the first endpoint tried), the other endpoints after it.
fn pull_failure(reference: String, mut failures: Vec<(Endpoint, PullError)>) -> ImageError {
    let rank = |e: &PullError| match e {
        PullError::Unreachable { .. } => 2,
        PullError::Stalled { .. } | PullError::TooSlow { .. } => 1,
        _ => 0,
    };
    let pick = (0..failures.len())
        .min_by_key(|&i| rank(&failures[i].1))
        .unwrap_or(0);
    let error = if failures.is_empty() {
        PullError::Unsupported("no registry endpoint to pull from".into())
    } else {
        failures.remove(pick).1
    };
    ImageError::Pull {
        reference,
        error: Box::new(error),
        also: failures.iter().map(|(ep, e)| short(ep, e)).collect(),
    }
}

/// A failure at another endpoint, without repeating the endpoint when the error names it.
fn short(ep: &Endpoint, e: &PullError) -> String {
    let text = e.to_string();
    let name = ep.to_string();
    if text.contains(&name) {
        text
    } else {
        format!("{name}: {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str, plain: bool) -> Endpoint {
        Endpoint {
            host: host.into(),
            path: String::new(),
            api_root: "/v2".into(),
            tls: None,
            plain_http: plain,
            upstream: !plain,
            fallback: false,
        }
    }

    #[test]
    fn the_definite_failure_leads_and_the_others_follow() {
        let failures = vec![
            (
                ep("docker.io", false),
                PullError::Unreachable {
                    registry: "https://docker.io".into(),
                    detail: "cannot resolve docker.io".into(),
                },
            ),
            (
                ep("127.0.0.1:5000", true),
                PullError::NotFound {
                    registry: "http://127.0.0.1:5000".into(),
                    what: "library/busybox:typo".into(),
                },
            ),
        ];
        let e = pull_failure("docker.io/library/busybox:typo".into(), failures);
        assert_eq!(
            e.to_string(),
            "pulling docker.io/library/busybox:typo: library/busybox:typo not found on \
             http://127.0.0.1:5000; also tried: cannot reach https://docker.io: cannot resolve docker.io"
        );
    }
}
