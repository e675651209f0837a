//! The request models several rooms share, as plain data: what CreateContainer asks for
//! (`ContainerSpec` with its mounts, devices, `Resources` and `SecurityContext`), the user it
//! resolved to, namespace modes, and ids. It stands below every room that uses them
//! (`container`, `sandbox`, `oci`, `monitor`), so that those rooms' arrows run one way:
//! `container` -> `sandbox` -> `oci` / `monitor` -> `model`. No behaviour beyond plain
//! helpers lives here (`cri_json` writes the models back as the CRI messages they came from,
//! for the verbose status); validation belongs to the verbs that take the requests.

mod container;
pub mod cri_json;
mod id;
mod namespaces;
mod resources;
mod runtime;
mod security;

pub use container::{
    BindOption, ContainerMetadata, ContainerSpec, DeviceSpec, MountSpec, Propagation, ResolvedUser,
};
pub use id::new_id;
pub use namespaces::{IdMaps, IdRange, NamespaceMode, UserNsRequest};
pub use resources::{HugepageLimit, Resources};
pub use runtime::OciRuntime;
pub use security::{
    Capabilities, Profile, SecurityContext, SelinuxOptions, SupplementalGroupsPolicy,
};
