//! The CDI devices this node offers: what the spec directories define right now, each with the
//! file it comes from, and the files and devices no request can get (a spec that does not read
//! or validate, a device two files of one directory define).

use std::path::PathBuf;

use super::Finding;
use crate::cdi::Registry;

/// Continuation lines line up under the first line's detail (`ok    cdi         `).
const INDENT: &str = "                  ";

pub fn cdi(dirs: &[PathBuf]) -> Finding {
    let registry = Registry::load(dirs);
    let devices = registry.devices();
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let mut lines = vec![match devices.len() {
        0 => format!("no CDI devices in {}", shown.join(", ")),
        1 => format!("1 CDI device in {}", shown.join(", ")),
        n => format!("{n} CDI devices in {}", shown.join(", ")),
    }];
    for (name, file) in &devices {
        lines.push(format!("{INDENT}{name}  ({})", file.display()));
    }
    let conflicts = registry.conflicts();
    for (name, files) in &conflicts {
        let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        lines.push(format!(
            "{INDENT}{name} is defined by both {}: no container can get it",
            files.join(" and ")
        ));
    }
    for b in &registry.broken {
        lines.push(format!(
            "{INDENT}{} is not usable: {}",
            b.path.display(),
            b.error
        ));
    }
    let text = lines.join("\n");
    if conflicts.is_empty() && registry.broken.is_empty() {
        Finding::Ok(text)
    } else {
        Finding::Warn(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_listed_and_what_cannot_be_used_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().to_owned(), dir.path().join("absent")];
        let Finding::Ok(text) = cdi(&dirs) else {
            panic!("an empty directory is fine")
        };
        assert!(text.starts_with("no CDI devices in "), "{text}");
        let spec = r#"{"cdiVersion":"0.6.0","kind":"a.com/x","devices":[
            {"name":"0","containerEdits":{"env":["A=0"]}},{"name":"1","containerEdits":{"env":["A=1"]}}]}"#;
        std::fs::write(dir.path().join("a.json"), spec).unwrap();
        let Finding::Ok(text) = cdi(&dirs) else {
            panic!("two good devices")
        };
        let file = dir.path().join("a.json");
        assert_eq!(
            text.lines().map(str::trim).collect::<Vec<_>>()[1..],
            [
                format!("a.com/x=0  ({})", file.display()),
                format!("a.com/x=1  ({})", file.display())
            ]
        );
        std::fs::write(dir.path().join("b.yaml"), "cdiVersion: 0.6.0\n").unwrap();
        let Finding::Warn(text) = cdi(&dirs) else {
            panic!("a broken spec is a warning")
        };
        assert!(text.starts_with("2 CDI devices in "), "{text}");
        assert!(
            text.contains("b.yaml is not usable: missing field"),
            "{text}"
        );
    }
}
