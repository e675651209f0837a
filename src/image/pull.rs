//! PullImage: resolve the reference on each endpoint in turn (mirrors, then the registry
//! itself), pick this platform's manifest from an index, and install the image.

use super::fetch::{Candidate, Source};
use super::manifest::{Document, parse_document};
use super::reference::ImageRef;
use super::registry::{Credentials, Endpoint};
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
        let endpoints = self.registries.endpoints(&image.domain);
        let mut failures: Vec<(Endpoint, PullError)> = Vec::new();
        for (i, ep) in endpoints.iter().enumerate() {
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
        // Report a definite answer (not found, refused, corrupt) over "could not connect": with
        // mirrors configured, the upstream is often unreachable by design.
        let pick = failures
            .iter()
            .position(|(_, e)| {
                !matches!(e, PullError::Unreachable { .. } | PullError::Stalled { .. })
            })
            .unwrap_or(failures.len() - 1);
        let (_, last) = failures.remove(pick);
        let mut reference = image.to_string();
        if !failures.is_empty() {
            let tried: Vec<String> = failures
                .iter()
                .map(|(ep, e)| format!("{ep}: {e}"))
                .collect();
            reference = format!(
                "{reference} (other endpoints failed too: {})",
                tried.join("; ")
            );
        }
        Err(ImageError::Pull {
            reference,
            error: Box::new(last),
        })
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
        let (top_bytes, top_digest) = session.manifest(&wanted).await?;
        let invalid = |e: super::manifest::ManifestError| PullError::Invalid(e.to_string());
        let (manifest, manifest_bytes, manifest_digest, index) =
            match parse_document(&top_bytes, None).map_err(invalid)? {
                Document::Manifest(m) => (m, top_bytes, top_digest.clone(), None),
                Document::Index(idx) => {
                    let entry =
                        idx.select(&self.settings.platform)
                            .ok_or_else(|| PullError::NotFound {
                                registry: session.registry.clone(),
                                what: format!(
                                    "a manifest for platform {} in {image} (it has: {})",
                                    self.settings.platform,
                                    idx.platforms()
                                ),
                            })?;
                    let (bytes, digest) = session.manifest(&entry.digest.to_string()).await?;
                    match parse_document(&bytes, None).map_err(invalid)? {
                        Document::Manifest(m) => {
                            (m, bytes, digest, Some((top_bytes, top_digest.clone())))
                        }
                        Document::Index(_) => {
                            return Err(PullError::Unsupported(format!(
                                "{image}: nested image indexes are not supported"
                            )));
                        }
                    }
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
