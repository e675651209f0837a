//! The infra container of a pod whose handler's binary runs each pod in a sandbox of its own
//! (gVisor's `runsc`, `sandbox = true`). Such a binary makes the sandbox (runsc's Sentry) with
//! the pod's first container, typed `sandbox` by containerd's annotations, and every later
//! container, typed `container`, joins the sandbox its `sandbox-id` names. crust has no pause
//! image, so the monitor makes that first container itself before the pod's first container
//! of its own: id the pod's id (the `sandbox-id` crust already gives every container), its
//! root a directory holding one static program that only waits, its network namespace the
//! pod's pinned one (runsc takes over the interfaces CNI put there), its cgroup beside the
//! containers' in the pod's.
//!
//! It lives as long as the pod: the daemon's pod teardown runs `<runtime> delete --force` on
//! it after the monitor has stopped, which ends the sandbox with whatever still runs in it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType, Spec};

use super::worker::{self, Job, Outcome};
use crate::model::OciRuntime;
use crate::monitor::state::{Monitor, err};
use crate::monitor::{CreateRequest, Fault, INFRA_DIR, RUNTIME_LOG, Reply};

/// Makes the pod's sandbox through `runtime` unless it is made already; the first container
/// `req` of the pod lends it its namespaces and cgroup parent.
pub async fn ensure(
    monitor: &Monitor,
    runtime: &OciRuntime,
    req: &CreateRequest,
) -> Result<(), Reply> {
    let mut made = monitor.infra.lock().await;
    if *made {
        return Ok(());
    }
    let pod = monitor.config.sandbox_id.clone();
    let dir = monitor.config.dir.join(INFRA_DIR);
    let failed = |step: &str, why: String| {
        err(
            Fault::Failed,
            format!(
                "making the {} sandbox of pod {pod}: {step}: {why}",
                runtime.handler
            ),
        )
    };
    bundle(&dir, &pod, req, monitor.config.hostname.as_deref())
        .map_err(|e| failed("writing its bundle", e))?;
    let since = monitor.reap_seq();
    let job = Job::Infra {
        runtime: runtime.clone(),
        id: pod.clone(),
        dir: dir.clone(),
    };
    let spawned = worker::spawn(job, &dir.join(RUNTIME_LOG))
        .map_err(|e| failed("starting a runtime worker", e.to_string()))?;
    drop(monitor.watch(spawned.pid, since));
    match spawned.outcome().await {
        Outcome::Failed { error, .. } => Err(failed("its infra container", error)),
        Outcome::Done | Outcome::Pid(_) => {
            *made = true;
            Ok(())
        }
    }
}

/// Writes the infra container's bundle into `dir`: `rootfs/pause` and `config.json`.
fn bundle(
    dir: &Path,
    pod: &str,
    req: &CreateRequest,
    hostname: Option<&str>,
) -> Result<(), String> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).map_err(|e| format!("creating {}: {e}", rootfs.display()))?;
    let program = rootfs.join("pause");
    let elf = pause_program().ok_or_else(|| {
        format!(
            "crust has no infra program for {} (only x86_64)",
            std::env::consts::ARCH
        )
    })?;
    std::fs::write(&program, elf).map_err(|e| format!("writing {}: {e}", program.display()))?;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", program.display()))?;
    let path = req.bundle.join("config.json");
    let container = Spec::load(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let spec = infra_spec(&container, pod, &req.id, &rootfs, hostname);
    let out = dir.join("config.json");
    spec.save(&out)
        .map_err(|e| format!("writing {}: {e}", out.display()))
}

/// The infra container's spec: the runtime spec's defaults (proc, dev, sysfs, new
/// namespaces), with the pod's network namespace from the container's spec, and its cgroup
/// the container's with the pod's id for the container's.
fn infra_spec(
    container: &Spec,
    pod: &str,
    container_id: &str,
    rootfs: &Path,
    hostname: Option<&str>,
) -> Spec {
    let mut spec = Spec::default();
    let mut process = spec.process().clone().unwrap_or_default();
    process
        .set_args(Some(vec!["/pause".into()]))
        .set_env(Some(vec!["PATH=/".into()]))
        .set_terminal(Some(false));
    let mut root = spec.root().clone().unwrap_or_default();
    root.set_path(rootfs.to_path_buf()).set_readonly(Some(true));
    let theirs = container.linux().clone().unwrap_or_default();
    let namespaces: Vec<LinuxNamespace> = theirs
        .namespaces()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.typ() != LinuxNamespaceType::User)
        .map(|mut n| {
            // The pod's own namespaces by their pins: runsc joins the network one and compares
            // the others with each container's, sharing the sandbox's where they match (a pod
            // with one PID namespace); a container's own mount and cgroup ones are new.
            if matches!(
                n.typ(),
                LinuxNamespaceType::Mount | LinuxNamespaceType::Cgroup
            ) {
                n.set_path(None);
            }
            n
        })
        .collect();
    let cgroup = theirs.cgroups_path().as_ref().and_then(|p| {
        p.to_str()?
            .strip_suffix(container_id)
            .map(|s| format!("{s}{pod}"))
    });
    let mut linux = spec.linux().clone().unwrap_or_default();
    linux
        .set_namespaces(Some(namespaces))
        .set_cgroups_path(cgroup.map(Into::into));
    let annotations = [
        ("io.kubernetes.cri.container-type", "sandbox"),
        ("io.kubernetes.cri.sandbox-id", pod),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    spec.set_process(Some(process))
        .set_root(Some(root))
        .set_hostname(hostname.map(str::to_owned))
        .set_annotations(Some(annotations))
        .set_linux(Some(linux));
    spec
}

/// A static program that waits forever (`pause(2)` in a loop), as a 129-byte ELF: crust ships
/// no pause image, and a sandbox's root filesystem holds nothing of the host's.
fn pause_program() -> Option<Vec<u8>> {
    if cfg!(not(target_arch = "x86_64")) {
        return None;
    }
    // _start: mov eax, 34 (pause); syscall; jmp _start
    const CODE: [u8; 9] = [0xb8, 0x22, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7];
    const BASE: u64 = 0x40_0000;
    const EHSIZE: u16 = 64;
    const PHSIZE: u16 = 56;
    let size = u64::from(EHSIZE + PHSIZE) + CODE.len() as u64;
    let mut elf = Vec::with_capacity(size as usize);
    // e_ident: ELF, 64-bit, little-endian, version 1, System V.
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\x00");
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // EM_X86_64
    elf.extend_from_slice(&1u32.to_le_bytes()); // EV_CURRENT
    elf.extend_from_slice(&(BASE + u64::from(EHSIZE + PHSIZE)).to_le_bytes()); // e_entry
    elf.extend_from_slice(&u64::from(EHSIZE).to_le_bytes()); // e_phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    elf.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for half in [EHSIZE, PHSIZE, 1, 0, 0, 0] {
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        elf.extend_from_slice(&half.to_le_bytes());
    }
    // One PT_LOAD, readable and executable, mapping the whole file at BASE.
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&5u32.to_le_bytes());
    for word in [0, BASE, BASE, size, size, 0x1000] {
        elf.extend_from_slice(&word.to_le_bytes());
    }
    elf.extend_from_slice(&CODE);
    Some(elf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_infra_spec_takes_the_pod_s_namespaces_and_cgroup_parent() {
        let mut container = Spec::default();
        let mut linux = container.linux().clone().unwrap();
        let mut net = LinuxNamespace::default();
        net.set_typ(LinuxNamespaceType::Network)
            .set_path(Some("/run/crust/pods/p1/ns/net".into()));
        let mut ipc = LinuxNamespace::default();
        ipc.set_typ(LinuxNamespaceType::Ipc)
            .set_path(Some("/run/crust/pods/p1/ns/ipc".into()));
        let mut mnt = LinuxNamespace::default();
        mnt.set_typ(LinuxNamespaceType::Mount)
            .set_path(Some("/proc/1/ns/mnt".into()));
        linux
            .set_namespaces(Some(vec![net, ipc, mnt]))
            .set_cgroups_path(Some("/kubepods/podx/c1".into()));
        container.set_linux(Some(linux));
        let spec = infra_spec(&container, "p1", "c1", Path::new("/x/rootfs"), Some("web"));
        let linux = spec.linux().as_ref().unwrap();
        assert_eq!(
            linux.cgroups_path().as_deref(),
            Some(Path::new("/kubepods/podx/p1"))
        );
        let ns = linux.namespaces().as_ref().unwrap();
        assert_eq!(
            ns[0].path().as_deref(),
            Some(Path::new("/run/crust/pods/p1/ns/net"))
        );
        assert_eq!(
            ns[1].path().as_deref(),
            Some(Path::new("/run/crust/pods/p1/ns/ipc"))
        );
        assert_eq!(
            ns[2].path(),
            &None,
            "the container's mount namespace is its own"
        );
        assert_eq!(spec.hostname().as_deref(), Some("web"));
        assert_eq!(
            spec.annotations().as_ref().unwrap()["io.kubernetes.cri.container-type"],
            "sandbox"
        );
        assert_eq!(
            spec.process().as_ref().unwrap().args().as_ref().unwrap(),
            &["/pause"]
        );
    }

    #[test]
    fn the_pause_program_waits_and_can_be_ended() {
        let Some(elf) = pause_program() else { return };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pause");
        std::fs::write(&path, elf).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut child = std::process::Command::new(&path).spawn().unwrap();
        // Running, then asleep in pause(2) for good (a crash would make it a zombie).
        let stat = format!("/proc/{}/stat", child.id());
        let state = || {
            std::fs::read_to_string(&stat)
                .unwrap()
                .split(' ')
                .nth(2)
                .unwrap()
                .to_owned()
        };
        while state() == "R" {
            std::thread::yield_now();
        }
        assert_eq!(state(), "S", "the pause program is not waiting");
        child.kill().unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
    }
}
