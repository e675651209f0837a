//! The container's seccomp filter for the processes ExecSync starts in it.
//!
//! libcontainer 0.7's tenant builder rebuilds the exec's `linux` section without `seccomp`,
//! so an exec would escape the container's filter. This executor loads the filter itself,
//! right before `execve`. By then libcontainer has dropped the process to the container's
//! capabilities, and without no_new_privileges loading a filter needs CAP_SYS_ADMIN; so, as
//! runc orders it, the process keeps CAP_SYS_ADMIN (and CAP_SETPCAP, to shed it from the
//! bounding set) until the filter is in, and sheds them before `execve`: the command runs with
//! exactly the container's capabilities. If anything here fails, nothing is executed.

use caps::{CapSet, Capability};
use libcontainer::workload::default::DefaultExecutor;
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};
use oci_spec::runtime::{LinuxCapabilities, LinuxSeccomp, Process, Spec};

/// Runs the command after loading `seccomp` and shedding `borrowed`.
#[derive(Clone)]
pub struct SeccompExecutor {
    seccomp: LinuxSeccomp,
    /// Capabilities lent to the process only to load the filter.
    borrowed: Vec<Capability>,
}

impl SeccompExecutor {
    /// Prepares `process` (the exec's) for the container's `seccomp` filter: with
    /// no_new_privileges nothing is needed, otherwise the capabilities to lend are added to it.
    pub fn new(seccomp: LinuxSeccomp, process: &mut Process) -> SeccompExecutor {
        let mut borrowed = Vec::new();
        if process.no_new_privileges() != Some(true) {
            let mut caps = process.capabilities().clone().unwrap_or_default();
            for (cap, spec_cap) in [
                (
                    Capability::CAP_SYS_ADMIN,
                    oci_spec::runtime::Capability::SysAdmin,
                ),
                (
                    Capability::CAP_SETPCAP,
                    oci_spec::runtime::Capability::Setpcap,
                ),
            ] {
                if lend(&mut caps, spec_cap) {
                    borrowed.push(cap);
                }
            }
            process.set_capabilities(Some(caps));
        }
        SeccompExecutor { seccomp, borrowed }
    }
}

/// Adds `cap` to the bounding, permitted and effective sets; false when all had it.
fn lend(caps: &mut LinuxCapabilities, cap: oci_spec::runtime::Capability) -> bool {
    let mut added = false;
    let mut add = |set: Option<std::collections::HashSet<_>>| {
        let mut set = set.unwrap_or_default();
        added |= set.insert(cap);
        Some(set)
    };
    let (b, p, e) = (
        add(caps.bounding().clone()),
        add(caps.permitted().clone()),
        add(caps.effective().clone()),
    );
    caps.set_bounding(b).set_permitted(p).set_effective(e);
    added
}

impl Executor for SeccompExecutor {
    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| ExecutorError::Other(format!("{what}: {e}"));
        libcontainer::seccomp::initialize_seccomp(&self.seccomp)
            .map_err(|e| fail("loading the container's seccomp filter", &e))?;
        // The bounding set first (that needs CAP_SETPCAP still effective), then effective
        // before permitted (effective must stay a subset of permitted).
        for set in [CapSet::Bounding, CapSet::Effective, CapSet::Permitted] {
            for cap in &self.borrowed {
                caps::drop(None, set, *cap)
                    .map_err(|e| fail("dropping a capability lent for seccomp", &e))?;
            }
        }
        DefaultExecutor {}.exec(spec)
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        DefaultExecutor {}.validate(spec)
    }
}
