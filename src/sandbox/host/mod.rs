//! What a pod is given on the host besides its namespaces (which its monitor makes and pins):
//! its cgroup, through the one cgroup library, and the files its containers mount
//! (`resolv.conf`, `hostname`, `hosts`, and the pod's `/dev/shm`). Containers use both too: a
//! container's cgroup sits under its pod's, and its bundle mounts the pod's files.

mod beyond_systemd;
pub mod cgroup;
pub mod files;
