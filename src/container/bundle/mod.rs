//! What a container is made of before its pod's monitor creates it: the image's account files
//! (`accounts`), what the host offers and how
//! host paths propagate (`host`), AppArmor's profiles (`apparmor`), the OCI spec and bundle
//! (`prepare`), the overlay root filesystem (`rootfs`), the image volumes mounted into it
//! (`volumes`), the volumes the image's config declares (`declared`), the id-mapped layers and mounts of a pod with a user namespace (`idmap`), and
//! the poststop hooks its removal runs (`poststop`). Functions over paths and records, no
//! container table: the verbs one level up call them, and undo them in the reverse order
//! (`teardown`).

pub mod accounts;
pub mod apparmor;
pub mod declared;
pub mod host;
pub mod idmap;
pub mod poststop;
pub mod prepare;
pub mod rootfs;
pub mod volumes;
