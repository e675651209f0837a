//! CheckpointPod and RestorePod (cri-api v0.37, KEP-5823): a pod's selected containers
//! checkpointed as of one instant, and a new pod made from them.
//!
//! The checkpoint directory (the caller's, empty) holds:
//! ```text
//! pod.json                 the manifest, written last: a directory without it is no checkpoint
//! containers/<name>.tar    each container's archive, as CheckpointContainer writes one
//! devshm.tar               the pod's /dev/shm (POSIX shared memory its containers map)
//! ```
//! Every selected container is frozen before any is dumped and all are thawed before the call
//! returns, whatever happens; each container's in-flight record names the pod's other files,
//! so a daemon killed half way thaws them all when it is back and removes what was written.
//!
//! RestorePod runs a sandbox from the request's config, puts the pod's /dev/shm back, then
//! creates each container from its archive with the request's config of the same name
//! (CREATED, its processes stopped): StartContainer lets each go on. A failure removes the
//! pod and everything made for it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{CheckpointError, Prepared, prepare};
use crate::container::{
    ContainerContext, ContainerError, ContainerRecord, Containers, Phase, blocking, detached,
};
use crate::criu::Criu;
use crate::model::ContainerSpec;

/// The manifest's name and version.
pub const MANIFEST: &str = "pod.json";
const FORMAT: u32 = 1;
const SHM_TAR: &str = "devshm.tar";
const ARCHIVES: &str = "containers";

/// CheckpointPod's request, in the domain's words.
#[derive(Debug, Clone)]
pub struct PodCheckpoint {
    pub pod_id: String,
    pub output: String,
    pub container_ids: Vec<String>,
    pub options: BTreeMap<String, String>,
}

/// RestorePod's request.
#[derive(Debug, Clone)]
pub struct PodRestore {
    pub checkpoint: String,
    pub sandbox: crate::sandbox::SandboxSpec,
    pub containers: Vec<ContainerSpec>,
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Manifest {
    version: u32,
    crust: String,
    criu: String,
    /// The pod as it was: name, namespace, uid.
    pod: [String; 3],
    containers: Vec<Member>,
    /// The pod's /dev/shm was saved (it has one of its own).
    shm: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Member {
    name: String,
    id: String,
    image: String,
    image_id: String,
    /// The archive, relative to the checkpoint directory.
    archive: String,
}

impl Containers {
    pub async fn checkpoint_pod(
        self: &Arc<Self>,
        req: PodCheckpoint,
    ) -> Result<(), ContainerError> {
        refuse_options(&req.options)?;
        let output = output_dir(&req.output)?;
        let mut ids = req.container_ids.clone();
        ids.sort();
        ids.dedup();
        if ids.is_empty() || ids.len() != req.container_ids.len() {
            return Err(ContainerError::Invalid(
                "container_ids must name each container to checkpoint once, and at least one"
                    .into(),
            ));
        }
        self.ctx
            .allows(super::Checkpointing::Make, &format!("pod {}", req.pod_id))
            .map_err(ContainerError::from)?;
        let me = self.clone();
        detached(async move {
            let pod = me.sandboxes.get(&req.pod_id)?;
            // Held in id order, so two pod checkpoints never wait on each other.
            let mut held = Vec::new();
            for id in &ids {
                let h = me.hold_existing(id).await?;
                let record = h.entry.snapshot();
                if record.pod_id != pod.id {
                    return Err(ContainerError::Invalid(format!(
                        "container {} is not in pod sandbox {}",
                        record.id, pod.id
                    )));
                }
                if record.phase != Phase::Running || record.pid.is_none() {
                    return Err(ContainerError::State {
                        id: record.id.clone(),
                        state: record.state_name(),
                        what: "checkpoint its pod with it (only running containers can be)",
                    });
                }
                held.push((h, record));
            }
            let criu = me.ctx.criu().await.map_err(CheckpointError::from)?;
            let records: Vec<Arc<ContainerRecord>> = held.iter().map(|(_, r)| r.clone()).collect();
            let (ctx, shm) = (me.ctx.clone(), shm_dir(&pod));
            let pod_names = [
                pod.spec.metadata.name.clone(),
                pod.spec.metadata.namespace.clone(),
                pod.spec.metadata.uid.clone(),
            ];
            blocking(move || write_pod(&ctx, &criu, &records, &output, shm.as_deref(), pod_names))
                .await?;
            tracing::info!(containers = held.len(), "pod checkpointed");
            Ok(())
        })
        .await
    }

    /// Makes a pod from a pod checkpoint; answers its id and each container's (name, id).
    pub async fn restore_pod(
        self: &Arc<Self>,
        req: PodRestore,
    ) -> Result<(String, Vec<(String, String)>), ContainerError> {
        refuse_options(&req.options)?;
        self.ctx
            .allows(
                super::Checkpointing::Restore,
                &format!("pod checkpoint {}", req.checkpoint),
            )
            .map_err(ContainerError::from)?;
        let dir = PathBuf::from(&req.checkpoint);
        let manifest = read_manifest(&dir)?;
        let configs = match_configs(&manifest, req.containers)?;
        let pod_id = self.run_pod(req.sandbox).await?;
        let made = self
            .restore_members(&pod_id, &dir, &manifest, configs)
            .await;
        if made.is_err() {
            let _ = self.remove_pod(&pod_id).await;
        }
        made.map(|restored| (pod_id, restored))
    }

    async fn restore_members(
        self: &Arc<Self>,
        pod_id: &str,
        dir: &Path,
        manifest: &Manifest,
        mut configs: BTreeMap<String, ContainerSpec>,
    ) -> Result<Vec<(String, String)>, ContainerError> {
        let pod = self.sandboxes.get(pod_id)?;
        if let (true, Some(shm)) = (manifest.shm, shm_dir(&pod)) {
            let (id, tar) = (pod_id.to_owned(), dir.join(SHM_TAR));
            blocking(move || unpack_shm(&id, &tar, &shm)).await?;
        }
        let mut restored = Vec::new();
        for member in &manifest.containers {
            let mut spec = configs.remove(&member.name).expect("matched");
            spec.image = dir.join(&member.archive).display().to_string();
            let id = self.create(pod_id, spec).await?;
            restored.push((member.name.clone(), id));
        }
        Ok(restored)
    }
}

fn refuse_options(options: &BTreeMap<String, String>) -> Result<(), ContainerError> {
    match options.keys().next() {
        None => Ok(()),
        Some(key) => Err(ContainerError::Invalid(format!(
            "option {key:?}: crust takes no checkpoint or restore options"
        ))),
    }
}

fn output_dir(output: &str) -> Result<PathBuf, ContainerError> {
    let path = PathBuf::from(output);
    let empty = std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none());
    if path.is_absolute() && empty {
        Ok(path)
    } else {
        Err(ContainerError::Invalid(format!(
            "output_path {output:?} must be the absolute path of an existing, empty directory"
        )))
    }
}

/// The pod's own /dev/shm, when it has one (a pod in the host's IPC namespace has not).
fn shm_dir(pod: &crate::sandbox::SandboxRecord) -> Option<PathBuf> {
    let shm = pod.dir.join(crate::sandbox::host::files::SHM);
    shm.is_dir().then_some(shm)
}

/// Freezes every container, saves /dev/shm, dumps each, thaws all, writes the manifest.
fn write_pod(
    ctx: &ContainerContext,
    criu: &Criu,
    records: &[Arc<ContainerRecord>],
    output: &Path,
    shm: Option<&Path>,
    pod: [String; 3],
) -> Result<(), ContainerError> {
    let archives = output.join(ARCHIVES);
    let io = |step: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| ContainerError::Io {
            what: step,
            path,
            source,
        }
    };
    let archive_of = |r: &ContainerRecord| archives.join(format!("{}.tar", r.spec.metadata.name));
    let mut written: Vec<PathBuf> = records.iter().map(|r| archive_of(r)).collect();
    // The manifest goes through a temporary name the in-flight records know, not the store's.
    let manifest_temp = output.join(format!(".{MANIFEST}.tmp"));
    written.extend([
        output.join(SHM_TAR),
        manifest_temp.clone(),
        output.join(MANIFEST),
        archives.clone(),
    ]);
    let mut prepared: Vec<Prepared> = Vec::new();
    let result = (|| {
        for r in records {
            let pid = r.pid.unwrap_or_default();
            prepared.push(prepare(
                ctx,
                r.clone(),
                pid,
                &archive_of(r),
                written.clone(),
            )?);
        }
        // After every in-flight record, which names it: a crash from here on removes it.
        crate::durable::create_dir(&archives).map_err(io("making", &archives))?;
        let frozen = freeze_all(ctx, records);
        let dumped = frozen.and_then(|()| {
            if let Some(shm) = shm {
                let tar = output.join(SHM_TAR);
                pack_dir(shm, &tar).map_err(io("saving the pod's /dev/shm into", &tar))?;
            }
            prepared.iter().try_for_each(|p| p.make(ctx, criu, false))
        });
        let thawed = thaw_all(ctx, records);
        dumped?;
        thawed?;
        let manifest = manifest(criu, records, shm.is_some(), pod);
        let bytes = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| ContainerError::Invalid(e.to_string()))?;
        write_synced(&manifest_temp, &bytes).map_err(io("writing", &manifest_temp))?;
        crate::store::rename(&manifest_temp, &output.join(MANIFEST))?;
        Ok(())
    })();
    let done = result.is_ok();
    for p in &prepared {
        let _ = p.finish(ctx, done);
    }
    if !done {
        let _ = thaw_all(ctx, records);
        for file in &written[..written.len() - 1] {
            let _ = crate::durable::remove_file(file);
        }
        let _ = crate::durable::remove_dir(&archives);
    }
    result
}

fn freeze_all(
    ctx: &ContainerContext,
    records: &[Arc<ContainerRecord>],
) -> Result<(), ContainerError> {
    for r in records {
        ctx.cgroups.freeze(&r.cgroup, true)?;
        crate::durable::step("cgroup frozen", &r.cgroup);
    }
    Ok(())
}

/// Thaws every container, even when one fails; answers the first failure.
fn thaw_all(
    ctx: &ContainerContext,
    records: &[Arc<ContainerRecord>],
) -> Result<(), ContainerError> {
    let mut first = Ok(());
    for r in records {
        let thawed = ctx.cgroups.freeze(&r.cgroup, false);
        crate::durable::step("cgroup thawed", &r.cgroup);
        if let (Err(e), Ok(())) = (thawed, &first) {
            first = Err(e.into());
        }
    }
    first
}

fn manifest(
    criu: &Criu,
    records: &[Arc<ContainerRecord>],
    shm: bool,
    pod: [String; 3],
) -> Manifest {
    Manifest {
        version: FORMAT,
        crust: env!("CARGO_PKG_VERSION").to_owned(),
        criu: criu.version_text(),
        pod,
        containers: records
            .iter()
            .map(|r| Member {
                name: r.spec.metadata.name.clone(),
                id: r.id.clone(),
                image: r.image.name.clone(),
                image_id: r.image.id.clone(),
                archive: format!("{ARCHIVES}/{}.tar", r.spec.metadata.name),
            })
            .collect(),
        shm,
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = crate::durable::create_new(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn pack_dir(dir: &Path, tar: &Path) -> std::io::Result<()> {
    let file = crate::durable::create_new(tar)?;
    let mut b = tar::Builder::new(std::io::BufWriter::new(file));
    b.follow_symlinks(false);
    b.append_dir_all(".", dir)?;
    let file = b
        .into_inner()?
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)?;
    file.sync_all()
}

fn unpack_shm(pod_id: &str, tar: &Path, shm: &Path) -> Result<(), CheckpointError> {
    let file = std::fs::File::open(tar).map_err(super::io_error(pod_id, "opening", tar))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.unpack(shm).map_err(super::io_error(
        pod_id,
        "restoring the pod's /dev/shm into",
        shm,
    ))?;
    crate::durable::step("pod /dev/shm restored", shm.display());
    Ok(())
}

fn read_manifest(dir: &Path) -> Result<Manifest, ContainerError> {
    let path = dir.join(MANIFEST);
    let not = |why: String| CheckpointError::NotACheckpoint {
        archive: dir.to_owned(),
        why,
    };
    let bytes = std::fs::read(&path).map_err(|e| not(format!("no {MANIFEST} ({e})")))?;
    let m: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| not(format!("{MANIFEST}: {e}")))?;
    if m.version > FORMAT {
        return Err(not(format!(
            "format {} is newer than this crust's ({FORMAT})",
            m.version
        ))
        .into());
    }
    Ok(m)
}

/// The request's container configs by name, when their names are exactly the checkpoint's
/// and each names the checkpoint's image (or none).
fn match_configs(
    manifest: &Manifest,
    configs: Vec<ContainerSpec>,
) -> Result<BTreeMap<String, ContainerSpec>, ContainerError> {
    let want: BTreeSet<&str> = manifest
        .containers
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    let got: BTreeSet<&str> = configs.iter().map(|c| c.metadata.name.as_str()).collect();
    if want != got || got.len() != configs.len() {
        return Err(ContainerError::Invalid(format!(
            "container_configs name {got:?} (each once), the checkpoint holds {want:?}"
        )));
    }
    for m in &manifest.containers {
        let c = configs
            .iter()
            .find(|c| c.metadata.name == m.name)
            .expect("matched");
        let named = c.image.trim();
        let image_id = m.image_id.trim_start_matches("sha256:");
        if !named.is_empty()
            && named != m.image
            && !named.trim_start_matches("sha256:").starts_with(image_id)
        {
            return Err(ContainerError::Invalid(format!(
                "container {}: the checkpoint's image is {} ({}), the config names {named}",
                m.name, m.image, m.image_id
            )));
        }
    }
    Ok(configs
        .into_iter()
        .map(|c| (c.metadata.name.clone(), c))
        .collect())
}
