//! RuntimeReady, the containers' part: containers can be run only with overlayfs (root
//! filesystems) and seccomp (RuntimeDefault profiles) in the kernel, and writable state and
//! layer directories. Cheap, since kubelet asks every few seconds.

use crate::sandbox::NotReady;
use crate::sandbox::ready::writable;

use super::Containers;

impl Containers {
    /// Ok when containers can be created; otherwise the first thing in the way.
    pub fn ready(&self) -> Result<(), NotReady> {
        let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
        if !filesystems
            .lines()
            .any(|l| l.trim_end().ends_with("\toverlay"))
        {
            return Err(NotReady {
                reason: "OverlayNotSupported",
                message: "cannot create containers: the kernel has no overlay filesystem \
                          (modprobe overlay)"
                    .into(),
            });
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if !status.lines().any(|l| l.starts_with("Seccomp:")) {
            return Err(NotReady {
                reason: "SeccompNotSupported",
                message: "cannot create containers: the kernel has no seccomp \
                          (CONFIG_SECCOMP), which RuntimeDefault profiles need"
                    .into(),
            });
        }
        writable(&self.ctx.state_dir, "StateNotWritable", "container records")?;
        writable(
            &self.ctx.runtime_root,
            "StateNotWritable",
            "container runtime state",
        )?;
        writable(
            &self.ctx.layers_dir,
            "RootNotWritable",
            "container writable layers",
        )
    }
}
