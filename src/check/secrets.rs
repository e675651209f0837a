//! Whether the node's registry secrets are kept from the node's other users: the files that
//! give `registry.configs.<host>.auth` credentials, and the private keys of client
//! certificates (`key_file`), must not be readable by group or others (containerd's and
//! CRI-O's configs hold the same secrets and want the same; kubelet's pull secrets never
//! reach these files).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::Finding;
use crate::config::layers::{Loaded, Origin, join_key};

pub(super) fn secrets(loaded: &Loaded) -> Finding {
    let mut held: Vec<(String, PathBuf)> = Vec::new();
    for (host, c) in &loaded.config.registry.configs {
        if c.auth.is_some() {
            let key = join_key(&join_key("registry.configs", host), "auth");
            if let Origin::File(file) = loaded.origin(&key) {
                held.push((format!("credentials for {host}"), file));
            }
        }
        if let Some(key) = &c.key_file {
            held.push((format!("the client key for {host}"), key.clone()));
        }
    }
    if held.is_empty() {
        return Finding::Ok("no registry credentials or client keys configured".into());
    }
    let exposed: Vec<String> = held
        .iter()
        .filter_map(|(what, file)| {
            let mode = std::fs::metadata(file).ok()?.permissions().mode() & 0o777;
            (mode & 0o077 != 0).then(|| format!("{what} in {} (mode {mode:04o})", file.display()))
        })
        .collect();
    if exposed.is_empty() {
        return Finding::Ok(format!(
            "{} registry secret(s), each in a file only its owner reads",
            held.len()
        ));
    }
    Finding::Warn(format!(
        "readable by other users of the node: {}; chmod 600 them",
        exposed.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;
    use crate::config::layers::{LoadRequest, load};

    fn loaded(dir: &std::path::Path, text: &str, mode: u32) -> Loaded {
        let path = dir.join("config.toml");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        load(LoadRequest {
            path: Some(path),
            overrides: Overrides::default(),
        })
        .unwrap()
    }

    fn text(f: Finding) -> (char, String) {
        match f {
            Finding::Ok(t) => ('o', t),
            Finding::Warn(t) => ('w', t),
            Finding::Fail(t) => ('f', t),
        }
    }

    #[test]
    fn credentials_in_a_file_others_read_are_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let creds = "[registry.configs.\"reg.example\".auth]\nusername = \"u\"\npassword = \"p\"\n";
        let (kind, said) = text(secrets(&loaded(dir.path(), creds, 0o644)));
        assert_eq!(kind, 'w', "{said}");
        assert!(
            said.contains("credentials for reg.example") && said.contains("0644"),
            "{said}"
        );
        assert_eq!(text(secrets(&loaded(dir.path(), creds, 0o600))).0, 'o');
        let (kind, said) = text(secrets(&loaded(
            dir.path(),
            "log_level = \"info\"\n",
            0o644,
        )));
        assert_eq!(kind, 'o', "{said}");
        assert!(said.starts_with("no registry credentials"), "{said}");
    }
}
