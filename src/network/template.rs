//! The CNI config written from a template when kubelet sends the node's pod CIDR
//! (UpdateRuntimeConfig), for clusters without a network add-on that writes one: the role of
//! containerd's `conf_template`. The template is a CNI config in which `{{.PodCIDR}}` stands
//! for the first pod CIDR; no other placeholder is understood, so a template written for Go's
//! text/template with loops is refused at start rather than half-rendered.

use std::path::{Path, PathBuf};

use super::{CniError, config};

/// The file the rendered config goes to in the conf dir.
pub const RENDERED: &str = "10-crust-pod-cidr.conflist";

const PLACEHOLDER: &str = "{{.PodCIDR}}";

/// Reads `template` and checks it holds only the placeholder crust fills in.
pub fn check(template: &Path) -> Result<String, CniError> {
    let bad = |msg: String| CniError::BadConfig {
        path: template.to_owned(),
        msg,
    };
    let text = std::fs::read_to_string(template).map_err(|e| bad(e.to_string()))?;
    let rest = text.replace(PLACEHOLDER, "");
    if let Some(at) = rest.find("{{") {
        let snippet: String = rest[at..].chars().take(30).collect();
        return Err(bad(format!(
            "only {PLACEHOLDER} can be filled in, found {snippet:?}"
        )));
    }
    Ok(text)
}

/// Renders `template` for `pod_cidr` into `conf_dir`, atomically; returns the file written.
pub fn render(template: &Path, conf_dir: &Path, pod_cidr: &str) -> Result<PathBuf, CniError> {
    let text = check(template)?.replace(PLACEHOLDER, pod_cidr);
    let path = conf_dir.join(RENDERED);
    // Only a config that loads as a network list is written: kubelet would otherwise wait on a
    // network that never comes up.
    config::parse(&path, text.as_bytes())?;
    let bad = |msg: String| CniError::BadConfig {
        path: path.clone(),
        msg,
    };
    crate::durable::create_dir_all(conf_dir).map_err(|e| bad(e.to_string()))?;
    // An earlier render killed mid-write left its temporary file (never loaded: not a .conflist).
    crate::store::remove_stale_temps(conf_dir);
    crate::store::write_atomic(&path, text.as_bytes()).map_err(|e| bad(e.to_string()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_pod_cidr_and_refuses_other_placeholders() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("t.conflist");
        std::fs::write(
            &t,
            r#"{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge",
                "ipam":{"type":"host-local","ranges":[[{"subnet":"{{.PodCIDR}}"}]]}}]}"#,
        )
        .unwrap();
        let out = render(&t, &d.path().join("net.d"), "10.77.0.0/24").unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(
            text.contains("\"10.77.0.0/24\"") && !text.contains("{{"),
            "{text}"
        );

        std::fs::write(&t, r#"{"x": "{{range .PodCIDRRanges}}"}"#).unwrap();
        let e = check(&t).unwrap_err().to_string();
        assert!(
            e.contains("PodCIDRRanges") && e.contains("only {{.PodCIDR}}"),
            "{e}"
        );
        std::fs::write(&t, "{{.PodCIDR}} not json").unwrap();
        assert!(render(&t, d.path(), "10.0.0.0/8").is_err());
        assert!(!d.path().join(RENDERED).exists(), "nothing written");
    }
}
