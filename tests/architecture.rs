//! The shape STYLE.md asks for, checked: protobuf types stay in the gRPC adapters, and `unsafe`
//! stays in `src/sys`.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn offenders(pattern: &str, allowed: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&f).unwrap();
            let hit = text
                .lines()
                .any(|l| !l.trim_start().starts_with("//") && l.contains(pattern));
            (hit && !allowed.iter().any(|a| rel.starts_with(a))).then_some(rel)
        })
        .collect()
}

#[test]
fn protobuf_types_stay_in_the_adapters() {
    // The benchmark clients speak CRI, so they use its types too.
    let found = offenders("pb::", &["cri/", "stream/", "bin/"]);
    assert!(
        found.is_empty(),
        "protobuf types used outside src/cri: {found:?}"
    );
}

#[test]
fn unsafe_code_stays_in_sys() {
    let found = offenders("unsafe ", &["sys/"]);
    assert!(found.is_empty(), "unsafe outside src/sys: {found:?}");
}
