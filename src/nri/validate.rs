//! ValidateContainerAdjustment (NRI 0.10+): once every plugin has answered CreateContainer, the
//! plugins subscribed to validation see the container as it was asked for, what the others
//! would do to it (their adjustments combined, their updates of other containers), who owns
//! each field, and which plugins were consulted; one that rejects it fails CreateContainer, as
//! NRI's adaptation has it. Nothing of the adjustments has taken effect by then: the spec is
//! the container room's to write, and the updates and evictions go out only after validation.

use super::merge::{Owners, Updates, overlay};
use super::{NriError, api};

/// What a validator is told, beside the pod and the pristine container.
pub(super) struct Proposal<'a> {
    pub adjustments: &'a [api::ContainerAdjustment],
    pub updates: &'a Updates,
    pub owners: &'a Owners,
}

/// The request validating plugins get: the pod, the container as it was asked for, the
/// proposal, and every plugin consulted (`(base name, index)`, in index order).
pub(super) fn request(
    pod: &api::PodSandbox,
    container: &api::Container,
    proposal: Proposal<'_>,
    plugins: Vec<(String, String)>,
) -> api::ValidateContainerAdjustmentRequest {
    api::ValidateContainerAdjustmentRequest {
        pod: Some(pod.clone()),
        container: Some(container.clone()),
        adjust: Some(combined(proposal.adjustments)),
        update: proposal
            .updates
            .merged
            .iter()
            .map(|(id, r, ignore)| api::ContainerUpdate {
                container_id: id.clone(),
                linux: Some(api::LinuxContainerUpdate {
                    resources: Some(r.clone()),
                }),
                ignore_failure: *ignore,
            })
            .collect(),
        owners: Some(proposal.owners.to_api()),
        plugins: plugins
            .into_iter()
            .map(|(name, index)| api::PluginInstance { name, index })
            .collect(),
    }
}

/// A validator's answer: a rejection fails CreateContainer, naming the plugin and its reason.
pub(super) fn rejection(
    plugin: String,
    answer: &api::ValidateContainerAdjustmentResponse,
) -> Result<(), NriError> {
    if !answer.reject {
        return Ok(());
    }
    Err(NriError::Plugin {
        plugin,
        event: "ValidateContainerAdjustment",
        message: format!("rejected the container's adjustment: {}", answer.reason),
    })
}

/// The plugins' adjustments as one, in their order: maps and lists add up (a later entry of the
/// same key replacing an earlier one in maps), arguments and single values are the last set.
/// The ownership rules already refused two plugins setting one thing.
fn combined(adjustments: &[api::ContainerAdjustment]) -> api::ContainerAdjustment {
    let mut out = api::ContainerAdjustment::default();
    for a in adjustments {
        out.annotations.extend(a.annotations.clone());
        out.mounts.extend(a.mounts.iter().cloned());
        out.env.extend(a.env.iter().cloned());
        out.rlimits.extend(a.rlimits.iter().cloned());
        out.cdi_devices.extend(a.cdi_devices.iter().cloned());
        if !a.args.is_empty() {
            out.args = a.args.clone();
        }
        if let Some(h) = &a.hooks {
            let hooks = out.hooks.get_or_insert_with(Default::default);
            hooks.prestart.extend(h.prestart.iter().cloned());
            hooks
                .create_runtime
                .extend(h.create_runtime.iter().cloned());
            hooks
                .create_container
                .extend(h.create_container.iter().cloned());
            hooks
                .start_container
                .extend(h.start_container.iter().cloned());
            hooks.poststart.extend(h.poststart.iter().cloned());
            hooks.poststop.extend(h.poststop.iter().cloned());
        }
        if let Some(l) = &a.linux {
            linux(out.linux.get_or_insert_with(Default::default), l);
        }
    }
    out
}

fn linux(out: &mut api::LinuxContainerAdjustment, l: &api::LinuxContainerAdjustment) {
    out.devices.extend(l.devices.iter().cloned());
    out.namespaces.extend(l.namespaces.iter().cloned());
    out.sysctl.extend(l.sysctl.clone());
    out.net_devices.extend(l.net_devices.clone());
    if let Some(r) = &l.resources {
        overlay(out.resources.get_or_insert_with(Default::default), r);
    }
    if !l.cgroups_path.is_empty() {
        out.cgroups_path = l.cgroups_path.clone();
    }
    macro_rules! last {
        ($($f:ident),*) => { $( if l.$f.is_some() { out.$f = l.$f.clone(); } )* };
    }
    last!(
        oom_score_adj,
        io_priority,
        seccomp_policy,
        scheduler,
        rdt,
        memory_policy
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjustments_add_up_in_plugin_order() {
        let first = api::ContainerAdjustment {
            annotations: [("a".to_string(), "1".to_string())].into(),
            args: vec!["sleep".into(), "1".into()],
            env: vec![api::KeyValue {
                key: "X".into(),
                value: "1".into(),
            }],
            linux: Some(api::LinuxContainerAdjustment {
                cgroups_path: "/one".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let second = api::ContainerAdjustment {
            annotations: [("b".to_string(), "2".to_string())].into(),
            env: vec![api::KeyValue {
                key: "Y".into(),
                value: "2".into(),
            }],
            linux: Some(api::LinuxContainerAdjustment {
                oom_score_adj: Some(api::OptionalInt { value: 5 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let all = combined(&[first, second]);
        assert_eq!(all.annotations.len(), 2);
        assert_eq!(all.args, ["sleep", "1"]);
        assert_eq!(all.env.len(), 2);
        let l = all.linux.unwrap();
        assert_eq!(l.cgroups_path, "/one");
        assert_eq!(l.oom_score_adj.map(|o| o.value), Some(5));
    }
}
