//! RuntimeReady: whether this node can create pod sandboxes right now. kubelet asks every few
//! seconds, so the checks are a few `statvfs` calls: the state directory (records and namespace
//! pins) and the cgroup hierarchy pods go into must be there and writable. A read-only or
//! missing one makes every RunPodSandbox fail, and the condition says which and why first.

use std::path::Path;

use rustix::fs::StatVfsMountFlags;

use crate::sandbox::Sandboxes;

/// Why the runtime is not ready: a CamelCase reason and a sentence naming the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    pub reason: &'static str,
    pub message: String,
}

impl Sandboxes {
    /// Ok when pods can be created; otherwise the first thing in the way.
    pub fn ready(&self) -> Result<(), NotReady> {
        let ctx = self.context();
        writable(
            &ctx.sandboxes_dir(),
            "StateNotWritable",
            "pod sandbox records",
        )?;
        writable(&ctx.ns_dir(), "StateNotWritable", "pod namespace pins")?;
        let root = &ctx.cgroups.root;
        // cgroup v2 has one hierarchy; on v1 the memory controller stands for the others.
        let hierarchy = if root.join("cgroup.controllers").exists() {
            root.clone()
        } else {
            root.join("memory")
        };
        writable(&hierarchy, "CgroupsNotWritable", "pod cgroups")
    }
}

pub(crate) fn writable(dir: &Path, reason: &'static str, what: &str) -> Result<(), NotReady> {
    let problem = match rustix::fs::statvfs(dir) {
        Err(e) => e.to_string(),
        Ok(s) if s.f_flag.contains(StatVfsMountFlags::RDONLY) => "read-only filesystem".into(),
        Ok(_) => return Ok(()),
    };
    Err(NotReady {
        reason,
        message: format!(
            "cannot create {what}: they go in {}: {problem}",
            dir.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_named() {
        let e = writable(
            Path::new("/nonexistent/crust"),
            "StateNotWritable",
            "records",
        )
        .unwrap_err();
        assert_eq!(e.reason, "StateNotWritable");
        assert!(e.message.contains("/nonexistent/crust") && e.message.contains("records"));
        let here = tempfile::tempdir().unwrap();
        assert!(writable(here.path(), "X", "y").is_ok());
    }
}
