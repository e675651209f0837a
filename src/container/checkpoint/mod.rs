//! CheckpointContainer: a running container's processes, open files and memory dumped by CRIU,
//! with its writable layer's changes and its spec, into one archive (`archive.rs`), while it
//! keeps running (kubelet's forensic checkpoint: the container is not told).
//!
//! The steps, each undone in every outcome:
//! 1. the in-flight record (`checkpoint.json` in the container's state directory) names the
//!    work directory and the archive's temporary file, before either exists;
//! 2. the container's cgroup is frozen, so the writable layer and the memory are of one
//!    instant;
//! 3. CRIU dumps the tree into the work directory (`--leave-running`; the pod's network and
//!    PID namespaces and the host's bind mounts stay outside, `criu::DumpPlan`);
//! 4. the writable layer becomes `rootfs-diff.tar` + `deleted.files`, still frozen;
//! 5. the cgroup is thawed (also when a step before failed);
//! 6. the archive is written under a temporary name, synced and renamed to the location;
//! 7. the work directory and the in-flight record are removed.
//!
//! A daemon killed on the way leaves the in-flight record: recovery thaws the cgroup and
//! removes the work directory and the temporary archive (`recover_in_flight`), so nothing stays
//! frozen and nothing half-written sits at a location.

mod archive;
mod pod;
pub use pod::{PodCheckpoint, PodRestore};
pub mod restore;
mod rootfs_diff;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{ContainerContext, ContainerError, ContainerRecord, Containers, Phase, detached};
use crate::criu::{Criu, CriuError, DumpPlan, ExternalNamespace};

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Criu(#[from] CriuError),
    /// The container has something a checkpoint cannot keep yet.
    #[error("container {id}: {what} cannot be checkpointed by this version of crust")]
    Unsupported { id: String, what: String },
    #[error(
        "checkpoint location {0:?}: must be the absolute path of the archive to write, in a \
         directory that exists"
    )]
    Location(String),
    /// CreateContainer named a file that is not a checkpoint archive crust can restore.
    #[error("{archive}: not a checkpoint archive crust can restore: {why}")]
    NotACheckpoint { archive: PathBuf, why: String },
    /// A restore whose container lacks a bind mount the checkpointed container had.
    #[error(
        "container {id}: the checkpoint had a bind mount at {destination} (from {host}), which \
         the container's config does not give: give every mount of the checkpointed container \
         again"
    )]
    MissingMount {
        id: String,
        destination: String,
        host: String,
    },
    /// The node's `[checkpoint] restore` setting forbids what was asked.
    #[error("{subject}: {what} is disabled on this node ([checkpoint] restore = {policy:?})")]
    NotAllowed {
        /// `container <id>`, `pod <id>`, `pod checkpoint <path>`.
        subject: String,
        what: &'static str,
        policy: &'static str,
    },
    #[error("container {id}: checkpoint: {step} {path}: {source}")]
    Io {
        id: String,
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A checkpoint under way, recorded before it changes anything.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InFlight {
    pub work_dir: PathBuf,
    pub archive_temp: PathBuf,
    pub cgroup: String,
    /// What else an unfinished checkpoint leaves (a pod's: its other files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_remove: Vec<PathBuf>,
}

impl crate::store::Record for InFlight {
    const VERSION: u32 = 1;
}

/// The in-flight record's name in the container's state directory.
pub const IN_FLIGHT: &str = "checkpoint.json";

impl Containers {
    /// Checkpoints running container `id` into the archive `location`; it keeps running.
    pub async fn checkpoint(
        self: &Arc<Self>,
        id: &str,
        location: &str,
    ) -> Result<(), ContainerError> {
        let location = archive_location(location)?;
        let (me, id) = (self.clone(), id.to_owned());
        detached(async move {
            let held = me.hold_existing(&id).await?;
            me.ctx
                .allows(Checkpointing::Make, &format!("container {}", held.id))?;
            let record = held.entry.snapshot();
            let pid = match (record.phase, record.pid) {
                (Phase::Running, Some(pid)) => pid,
                _ => {
                    return Err(ContainerError::State {
                        id: held.id.clone(),
                        state: record.state_name(),
                        what: "checkpoint it (only a running container can be)",
                    });
                }
            };
            let criu = me.ctx.criu().await.map_err(CheckpointError::from)?;
            let ctx = me.ctx.clone();
            super::blocking(move || checkpoint(&ctx, &criu, record, pid, &location)).await?;
            tracing::info!("container checkpointed");
            Ok(())
        })
        .await
    }
}

/// What `[checkpoint] restore` is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpointing {
    Make,
    Restore,
}

impl ContainerContext {
    /// Whether the node's `[checkpoint] restore` lets `what` be done for `subject`
    /// (`container <id>`, `pod <id>`).
    pub fn allows(&self, what: Checkpointing, subject: &str) -> Result<(), CheckpointError> {
        use crate::config::RestorePolicy::{CheckpointOnly, Disabled, Enabled};
        let policy = match (self.restore_policy, what) {
            (Enabled, _) | (CheckpointOnly, Checkpointing::Make) => return Ok(()),
            (CheckpointOnly, Checkpointing::Restore) => "checkpoint-only",
            (Disabled, _) => "disabled",
        };
        Err(CheckpointError::NotAllowed {
            subject: subject.to_owned(),
            what: match what {
                Checkpointing::Make => "checkpointing",
                Checkpointing::Restore => "restoring a checkpoint",
            },
            policy,
        })
    }

    /// The CRIU binary, found and checked once it first passed (a node without one may get it
    /// installed: a failure is asked again next time).
    pub async fn criu(&self) -> Result<Criu, CriuError> {
        let configured = self.criu_path.clone();
        self.criu
            .get_or_try_init(|| async move {
                tokio::task::spawn_blocking(move || Criu::find(configured.as_deref()))
                    .await
                    .map_err(|e| CriuError::Unavailable(format!("probing CRIU: {e}")))?
            })
            .await
            .cloned()
    }
}

fn archive_location(location: &str) -> Result<PathBuf, CheckpointError> {
    let path = PathBuf::from(location);
    let usable = path.is_absolute()
        && path.file_name().is_some()
        && path.parent().is_some_and(Path::is_dir)
        && !path.is_dir();
    if usable {
        Ok(path)
    } else {
        Err(CheckpointError::Location(location.to_owned()))
    }
}

fn checkpoint(
    ctx: &ContainerContext,
    criu: &Criu,
    record: Arc<ContainerRecord>,
    pid: i32,
    location: &Path,
) -> Result<(), ContainerError> {
    let prepared = prepare(ctx, record, pid, location, Vec::new())?;
    let made = prepared.make(ctx, criu, true);
    let cleaned = prepared.finish(ctx, made.is_ok());
    made?;
    cleaned
}

/// Step 1: the spec read, what stays outside decided (or the container refused), the in-flight
/// record saved. `also_remove`: what an unfinished checkpoint leaves besides its own files (a
/// pod's checkpoint: the archives beside this one).
fn prepare(
    ctx: &ContainerContext,
    record: Arc<ContainerRecord>,
    pid: i32,
    location: &Path,
    also_remove: Vec<PathBuf>,
) -> Result<Prepared, ContainerError> {
    let dir = ctx.container_dir(&record.id);
    let spec = read(
        &record.id,
        "reading the spec",
        &dir.join("bundle/config.json"),
    )?;
    let parsed: oci_spec::runtime::Spec = serde_json::from_slice(&spec)
        .map_err(|e| unsupported(&record.id, format!("a spec crust cannot read ({e})")))?;
    let outside = refuse_or_plan(&record, &parsed)?;
    let in_flight = InFlight {
        work_dir: ctx.layers_dir.join(&record.id).join("checkpoint"),
        archive_temp: archive::temp_path(location),
        cgroup: record.cgroup.clone(),
        also_remove,
    };
    crate::store::save(&dir.join(IN_FLIGHT), &in_flight)?;
    Ok(Prepared {
        record,
        pid,
        spec,
        outside,
        in_flight,
        location: location.to_owned(),
    })
}

/// What the dump leaves outside, or why the container cannot be dumped.
#[derive(Clone)]
struct Outside {
    namespaces: Vec<ExternalNamespace>,
    mounts: Vec<archive::BindMount>,
}

fn refuse_or_plan(
    record: &ContainerRecord,
    spec: &oci_spec::runtime::Spec,
) -> Result<Outside, ContainerError> {
    use oci_spec::runtime::LinuxNamespaceType as Ns;
    let id = &record.id;
    if let Some(rt) = &record.runtime {
        let what = format!(
            "a container of handler {:?} (run by {})",
            rt.handler,
            rt.path.display()
        );
        return Err(unsupported(id, what));
    }
    if record.spec.tty {
        return Err(unsupported(id, "a container with a tty".into()));
    }
    let linux = spec.linux().clone().unwrap_or_default();
    let mut namespaces = Vec::new();
    for ns in linux.namespaces().clone().unwrap_or_default() {
        let inode = |path: &Path| {
            crate::criu::namespace_inode(path).map_err(|source| CheckpointError::Io {
                id: id.clone(),
                step: "reading the namespace",
                path: path.to_owned(),
                source,
            })
        };
        match (ns.typ(), ns.path()) {
            (Ns::User, _) => {
                return Err(unsupported(id, "a container in a user namespace".into()));
            }
            (Ns::Network, Some(p)) => namespaces.push(ExternalNamespace::Net { inode: inode(p)? }),
            (Ns::Pid, Some(p)) => namespaces.push(ExternalNamespace::Pid { inode: inode(p)? }),
            _ => {}
        }
    }
    let mounts = spec
        .mounts()
        .iter()
        .flatten()
        .filter(|m| {
            m.typ().as_deref() == Some("bind")
                || m.options()
                    .iter()
                    .flatten()
                    .any(|o| o == "bind" || o == "rbind")
        })
        .map(|m| archive::BindMount {
            destination: m.destination().display().to_string(),
            source: m
                .source()
                .as_ref()
                .map(|s| s.display().to_string())
                .unwrap_or_default(),
        })
        .collect();
    Ok(Outside { namespaces, mounts })
}

/// One container's checkpoint once its in-flight record is saved.
struct Prepared {
    record: Arc<ContainerRecord>,
    pid: i32,
    /// The bytes of the container's config.json.
    spec: Vec<u8>,
    outside: Outside,
    in_flight: InFlight,
    location: PathBuf,
}

impl Prepared {
    /// Steps 2 to 6: freeze (unless the caller froze it, with the rest of its pod), dump,
    /// diff, thaw (likewise), archive.
    fn make(
        &self,
        ctx: &ContainerContext,
        criu: &Criu,
        freezes: bool,
    ) -> Result<(), ContainerError> {
        let Prepared {
            record,
            pid,
            spec,
            outside,
            in_flight,
            location,
        } = self;
        let pid = *pid;
        let id = &record.id;
        let images_dir = in_flight.work_dir.join("images");
        let io = |step, path: &Path| io_error(id, step, path);
        crate::durable::create_dir_all(&images_dir).map_err(io("making", &images_dir))?;
        let descriptors = images_dir.join(crate::criu::DESCRIPTORS);
        crate::durable::write(&descriptors, standard_streams(pid))
            .map_err(io("writing", &descriptors))?;
        if freezes {
            ctx.cgroups.freeze(&record.cgroup, true)?;
            crate::durable::step("cgroup frozen", &record.cgroup);
        }
        let plan = DumpPlan {
            pid,
            images_dir: images_dir.clone(),
            freeze_cgroup: Some(ctx.cgroups.freezer_dir(&record.cgroup)),
            namespaces: outside.namespaces.clone(),
            external_mounts: outside
                .mounts
                .iter()
                .map(|m| m.destination.clone())
                .collect(),
            leave_running: true,
        };
        let diff = in_flight.work_dir.join("rootfs-diff.tar");
        let frozen_work = criu
            .dump(&plan)
            .map_err(CheckpointError::from)
            .and_then(|()| {
                crate::durable::step("criu dumped", id);
                let upper = super::rootfs::layout(ctx, id).upper;
                rootfs_diff::write(&upper, &diff)
                    .map_err(io("archiving the writable layer", &upper))
            });
        let thawed = if freezes {
            let thawed = ctx.cgroups.freeze(&record.cgroup, false);
            crate::durable::step("cgroup thawed", &record.cgroup);
            thawed
        } else {
            Ok(())
        };
        let deleted = frozen_work?;
        thawed?;
        let contents = archive::Contents {
            record,
            runtime: "libcontainer",
            spec,
            images_dir: &images_dir,
            rootfs_diff: &diff,
            deleted: &deleted,
            bind_mounts: &outside.mounts,
            checkpointed_at: crate::clock::now_nanos(),
        };
        let temp = &in_flight.archive_temp;
        archive::write(temp, &contents).map_err(io("writing the archive", temp))?;
        crate::store::rename(temp, location)?;
        Ok(())
    }

    /// Step 7, or the undoing of a failed checkpoint.
    fn finish(&self, ctx: &ContainerContext, done: bool) -> Result<(), ContainerError> {
        clean_up(
            ctx,
            &ctx.container_dir(&self.record.id),
            &self.in_flight,
            done,
        )
    }
}

fn standard_streams(pid: i32) -> Vec<u8> {
    let links: Vec<String> = (0..3)
        .map(|fd| {
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .map(|l| l.display().to_string())
                .unwrap_or_default()
        })
        .collect();
    serde_json::to_vec(&links).unwrap_or_default()
}

/// Step 7 (and the undoing of a failed checkpoint): the work directory, a temporary archive
/// left by a failure, the in-flight record last.
fn clean_up(
    ctx: &ContainerContext,
    dir: &Path,
    in_flight: &InFlight,
    done: bool,
) -> Result<(), ContainerError> {
    if !done {
        let _ = ctx.cgroups.freeze(&in_flight.cgroup, false);
        for path in std::iter::once(&in_flight.archive_temp).chain(&in_flight.also_remove) {
            // A pod's checkpoint lists its archives' directory after the archives.
            if crate::durable::remove_file(path).is_err() {
                let _ = crate::durable::remove_dir(path);
            }
        }
    }
    let _ = crate::durable::remove_dir_all(&in_flight.work_dir);
    crate::durable::remove_file(dir.join(IN_FLIGHT)).map_err(|source| ContainerError::Io {
        what: "removing the checkpoint's in-flight record",
        path: dir.join(IN_FLIGHT),
        source,
    })
}

/// At start: a checkpoint the previous daemon did not finish is undone (its cgroup thawed, its
/// work directory and temporary archive removed). Returns whether there was one.
pub fn recover_in_flight(ctx: &ContainerContext, container_dir: &Path) -> bool {
    let path = container_dir.join(IN_FLIGHT);
    let Ok(in_flight) = crate::store::load::<InFlight>(&path) else {
        return false;
    };
    tracing::warn!(
        cgroup = %in_flight.cgroup,
        "undoing a checkpoint the previous run did not finish"
    );
    let _ = clean_up(ctx, container_dir, &in_flight, false);
    true
}

/// The error of step `step` on `path` of container (or pod) `id`'s checkpoint or restore.
fn io_error(
    id: &str,
    step: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> CheckpointError + use<> {
    let (id, path) = (id.to_owned(), path.to_owned());
    move |source| CheckpointError::Io {
        id,
        step,
        path,
        source,
    }
}

fn read(id: &str, step: &'static str, path: &Path) -> Result<Vec<u8>, CheckpointError> {
    std::fs::read(path).map_err(io_error(id, step, path))
}

fn unsupported(id: &str, what: String) -> ContainerError {
    CheckpointError::Unsupported {
        id: id.to_owned(),
        what,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RestorePolicy;

    #[test]
    fn the_restore_policy_allows_what_it_says() {
        let dir = tempfile::tempdir().unwrap();
        let cgroups = crate::sandbox::CgroupSettings::detect(
            crate::config::CgroupDriver::Cgroupfs,
            "/crust-unit".into(),
            dir.path().join("cgroup"),
        );
        let mut ctx = ContainerContext::new(dir.path(), dir.path(), cgroups);
        let asked = |ctx: &ContainerContext| {
            [Checkpointing::Make, Checkpointing::Restore].map(|w| ctx.allows(w, "pod p").is_ok())
        };
        assert_eq!(asked(&ctx), [true, true]);
        ctx.restore_policy = RestorePolicy::CheckpointOnly;
        assert_eq!(asked(&ctx), [true, false]);
        let e = ctx.allows(Checkpointing::Restore, "pod p").unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod p: restoring a checkpoint is disabled on this node ([checkpoint] restore = \"checkpoint-only\")"
        );
        ctx.restore_policy = RestorePolicy::Disabled;
        assert_eq!(asked(&ctx), [false, false]);
    }
}
