//! Entry points for the cargo-fuzz targets in `fuzz/` (not an API): each feeds untrusted bytes
//! to one parser the way a pull does and checks what must hold whatever the input.

use std::path::Path;

use super::registry::manifest::{self, Document, Platform};
use super::registry::reference::ImageRef;
use super::store::space::Reserve;
use super::store::unpack::lower::Lowers;
use super::store::unpack::{Below, extract_tar};

/// An image reference: parsing never panics, and what parses prints as itself normalised.
pub fn reference(s: &str) {
    if let Ok(r) = ImageRef::parse(s) {
        let again = ImageRef::parse(&r.to_string()).expect("a printed reference parses");
        assert_eq!(again, r, "normalising is idempotent");
        let oci = r.to_oci(None);
        assert_eq!(oci.repository(), r.path);
    }
}

/// A manifest, index or config as a registry may send it, with any content type.
pub fn manifest(bytes: &[u8], content_type: Option<&str>) {
    if let Ok(doc) = manifest::parse_document(bytes, content_type) {
        if let Document::Index(_) = &doc {
            let _ = doc.for_platform(&Platform::current());
        }
    }
    let _ = manifest::parse_manifest(bytes, content_type);
    let _ = manifest::parse_config(bytes);
}

/// A layer (possibly compressed) extracted into `dir/layer`, which must be empty and whose
/// parent must hold nothing else: no entry may land outside it, whatever the tar says.
pub fn extract(bytes: &[u8], dir: &Path) {
    let layer = dir.join("layer");
    std::fs::create_dir(&layer).expect("a fresh layer directory");
    let _ = extract_tar(
        bytes,
        &layer,
        Below::Ready(Lowers::default()),
        None,
        Reserve::new(0),
        dir,
    );
    let outside: Vec<_> = std::fs::read_dir(dir)
        .expect("the fuzz directory")
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != "layer")
        .map(|e| e.path())
        .collect();
    assert!(outside.is_empty(), "entries escaped the layer: {outside:?}");
}
