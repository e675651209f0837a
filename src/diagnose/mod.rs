//! `crust diagnose POD|CONTAINER`: what the runtime itself knows about a pod or a container,
//! and the cause of its trouble in the first line.
//!
//! It reads, never writes: the sandbox and container records, each pod's history
//! (`crate::history`), the cgroups, the container logs and a few node files. So it works the
//! same while the daemon runs and when it does not (the records are then as the daemon left
//! them, and the report says the daemon is down). A fact it could not read is left out of the
//! report, never guessed.
//!
//! The target is a container id or unique prefix, a sandbox id or unique prefix, or a pod's
//! `namespace/name` (its newest sandbox). A pod kubelet could not start has no record left
//! (RunPodSandbox rolled it back); its history still names it.

use std::path::{Path, PathBuf};

use crate::container::ContainerRecord;
use crate::history::Entry;
use crate::sandbox::{CgroupSettings, SandboxRecord};

mod facts;
mod render;
mod verdict;

pub use facts::Report;

/// Where diagnose looks, from the daemon's configuration.
pub struct Inputs {
    pub state: PathBuf,
    pub root: PathBuf,
    pub cgroups: CgroupSettings,
    pub network: crate::network::CniSettings,
    /// `image.min_free_percent`: where crust itself refuses pulls.
    pub min_free_percent: u8,
}

impl Inputs {
    pub fn from_config(c: &crate::config::Config) -> Inputs {
        Inputs {
            state: c.state.clone(),
            root: c.root.clone(),
            cgroups: CgroupSettings::detect(
                c.cgroup_driver,
                c.default_cgroup_parent.clone(),
                "/sys/fs/cgroup".into(),
            ),
            network: crate::network::CniSettings::from_config(&c.network),
            min_free_percent: c.image.min_free_percent,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    #[error(
        "no pod or container {target:?} in crust's records or pod history under {}",
        state.display()
    )]
    NotFound { target: String, state: PathBuf },
    /// The record of what `target` names was unreadable: recovery set it aside and ended the
    /// object whole (`store::set_aside`).
    #[error(
        "the record of {kind} {id} could not be read when crust started at {}; crust set it aside \
         ({}) and ended the {kind} whole: its processes killed, then its mounts, IP and cgroup \
         released (kubelet makes it again)",
        crate::clock::rfc3339_millis(*at * 1_000_000_000),
        path.display()
    )]
    Damaged {
        kind: String,
        id: String,
        at: i64,
        path: PathBuf,
    },
    #[error("{target:?} names more than one {what}: {}", candidates.join(", "))]
    Ambiguous {
        target: String,
        what: &'static str,
        candidates: Vec<String>,
    },
}

/// The report on `target`.
pub fn diagnose(inputs: &Inputs, target: &str) -> Result<Report, DiagnoseError> {
    let records = Records::load(&inputs.root);
    // An id no record holds any more, whose record was set aside as unreadable: that is the
    // story, whatever the history says of the object before.
    let recorded = records.pods.iter().any(|p| p.id.starts_with(target))
        || records.containers.iter().any(|c| c.id.starts_with(target));
    if !target.contains('/') && !recorded {
        if let Some(e) = damaged(&records, target) {
            return Err(e);
        }
    }
    let subject = locate(&records, &inputs.state, target)
        .map_err(|e| e.unwrap_or_else(|| not_found(inputs, target)))?;
    let facts = facts::gather(inputs, &records, &subject);
    let focus = subject.container.as_deref();
    let verdict = verdict::decide(&facts.pod, &facts.containers, &facts.timeline, focus);
    Ok(Report { verdict, facts })
}

/// The newest record set aside whose id `target` begins, as the answer about it.
fn damaged(records: &Records, target: &str) -> Option<DiagnoseError> {
    let d = records
        .damaged
        .iter()
        .rev()
        .find(|d| !target.is_empty() && d.id.starts_with(target))?;
    Some(DiagnoseError::Damaged {
        kind: if d.kind == "sandbox" {
            "pod sandbox".into()
        } else {
            d.kind.clone()
        },
        id: d.id.clone(),
        at: d.at,
        path: d.path.clone(),
    })
}

fn not_found(inputs: &Inputs, target: &str) -> DiagnoseError {
    DiagnoseError::NotFound {
        target: target.to_owned(),
        state: inputs.state.clone(),
    }
}

/// The text report (the cause first).
pub fn text(report: &Report) -> String {
    render::text(report)
}

/// Every record under the root's records directory, and those set aside as unreadable.
pub(crate) struct Records {
    pub pods: Vec<SandboxRecord>,
    pub containers: Vec<ContainerRecord>,
    pub damaged: Vec<crate::store::Damaged>,
}

impl Records {
    fn load(root: &Path) -> Records {
        let dir = crate::store::records_dir(root);
        Records {
            pods: load_all(&dir.join("sandboxes"), crate::sandbox::RECORD),
            containers: load_all(&dir.join("containers"), crate::container::RECORD),
            damaged: crate::store::damaged(&dir.join(crate::store::DAMAGED_DIR)),
        }
    }
}

fn load_all<T: crate::store::Record>(dir: &Path, file: &str) -> Vec<T> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| crate::store::load(&e.path().join(file)).ok())
        .collect()
}

/// What a report is about: a pod (by `namespace/name`), its newest sandbox when it has a
/// record, and the container asked about, if one was.
pub(crate) struct Subject {
    pub pod: String,
    pub sandbox: Option<SandboxRecord>,
    pub container: Option<String>,
}

/// `Err(None)`: nothing matches. The histories are read only where the records do not
/// settle it (a pod or container no record holds any more).
fn locate(records: &Records, state: &Path, target: &str) -> Result<Subject, Option<DiagnoseError>> {
    if target.contains('/') {
        return by_pod_name(records, state, target);
    }
    let containers: Vec<&ContainerRecord> = records
        .containers
        .iter()
        .filter(|c| c.id.starts_with(target))
        .collect();
    let pods: Vec<&SandboxRecord> = records
        .pods
        .iter()
        .filter(|p| p.id.starts_with(target))
        .collect();
    match (containers.as_slice(), pods.as_slice()) {
        ([c], []) => {
            let sandbox = records.pods.iter().find(|p| p.id == c.pod_id).cloned();
            let pod = sandbox.as_ref().map(pod_name).or_else(|| {
                crate::history::read_all(state)
                    .into_iter()
                    .flatten()
                    .find(|e| e.sandbox == c.pod_id)
                    .map(|e| e.pod)
            });
            Ok(Subject {
                pod: pod.ok_or(None)?,
                sandbox,
                container: Some(c.id.clone()),
            })
        }
        ([], [p]) => Ok(Subject {
            pod: pod_name(p),
            sandbox: Some((*p).clone()),
            container: None,
        }),
        ([], []) => by_history_id(&crate::history::read_all(state), target),
        _ => {
            let mut candidates: Vec<String> = containers.iter().map(|c| c.id.clone()).collect();
            candidates.extend(pods.iter().map(|p| p.id.clone()));
            Err(Some(DiagnoseError::Ambiguous {
                target: target.to_owned(),
                what: "pod or container",
                candidates,
            }))
        }
    }
}

fn by_pod_name(
    records: &Records,
    state: &Path,
    pod: &str,
) -> Result<Subject, Option<DiagnoseError>> {
    let sandbox = records
        .pods
        .iter()
        .filter(|p| pod_name(p) == pod)
        .max_by_key(|p| p.created_at)
        .cloned();
    let known = sandbox.is_some() || !crate::history::read(state, pod).is_empty();
    if !known {
        return Err(None);
    }
    Ok(Subject {
        pod: pod.to_owned(),
        sandbox,
        container: None,
    })
}

/// A sandbox or container no record holds any more (removed), as the history names it.
fn by_history_id(histories: &[Vec<Entry>], target: &str) -> Result<Subject, Option<DiagnoseError>> {
    let mut found: Vec<(String, Option<String>, String)> = Vec::new();
    for e in histories.iter().flatten() {
        let hit = if e.fact.container().is_some_and(|c| c.starts_with(target)) {
            Some((
                e.fact.container().map(str::to_owned),
                e.fact.container().unwrap_or_default(),
            ))
        } else if !e.sandbox.is_empty() && e.sandbox.starts_with(target) {
            Some((None, e.sandbox.as_str()))
        } else {
            None
        };
        if let Some((container, id)) = hit {
            if !found.iter().any(|(_, _, seen)| seen == id) {
                found.push((e.pod.clone(), container, id.to_owned()));
            }
        }
    }
    match found.len() {
        0 => Err(None),
        1 => {
            let (pod, container, _) = found.remove(0);
            Ok(Subject {
                pod,
                sandbox: None,
                container,
            })
        }
        _ => Err(Some(DiagnoseError::Ambiguous {
            target: target.to_owned(),
            what: "pod or container",
            candidates: found.into_iter().map(|(_, _, id)| id).collect(),
        })),
    }
}

pub(crate) fn pod_name(p: &SandboxRecord) -> String {
    format!("{}/{}", p.spec.metadata.namespace, p.spec.metadata.name)
}
