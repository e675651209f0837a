//! Ids of sandboxes, containers and exec sessions.

/// A new id: 64 random hex digits, like containerd's and CRI-O's sandbox and container ids.
pub fn new_id() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the kernel's random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
