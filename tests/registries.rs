//! Registries as enterprises run them: mirrors behind a path on a shared host (Harbor's
//! proxy-cache projects, Artifactory and Nexus remotes), read as containerd reads a hosts.toml
//! host URL, and a registry that asks for a client certificate (mTLS).

#[path = "common/crust_daemon.rs"]
mod crust_daemon;
#[path = "common/oci_build.rs"]
mod oci_build;
#[path = "common/registry.rs"]
mod registry;

use crust::cri::pb;
use crust_daemon::Crust;
use oci_build::{Comp, busybox_layer, image};
use registry::{Auth, PathProxy, Registry};
use serde_json::json;
use tonic::Code;

async fn pull(c: &Crust, image: &str) -> Result<String, tonic::Status> {
    let r = c
        .images()
        .await
        .pull_image(pb::PullImageRequest {
            image: Some(pb::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            auth: None,
            sandbox_config: None,
        })
        .await?;
    Ok(r.into_inner().image_ref)
}

fn busybox_image() -> oci_build::Image {
    image(
        &[(oci_build::tar(&busybox_layer()), Comp::Gzip)],
        json!({}),
        "amd64",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_behind_a_path_serves_pulls_in_both_of_containerds_layouts() {
    let reg = Registry::start(Auth::None);
    let img = busybox_image();
    reg.push("library/app", "1", &img).await;
    // One host, two upstream caches: Nexus/Artifactory's layout (the API under a path of
    // the host, `<path>/v2/...`) and Harbor's (a project prefix inside the API:
    // `/v2/<project>/<repository>`, which containerd writes as an `override_path` host).
    let proxy = PathProxy::start(
        &reg.addr,
        &[("/repository/hub/v2/", "/v2/"), ("/v2/hub-proxy/", "/v2/")],
    );
    for (mirror, registry) in [
        (format!("http://{}/repository/hub", proxy.addr), "docker.io"),
        (format!("http://{}/v2/hub-proxy/", proxy.addr), "quay.io"),
    ] {
        let c = Crust::start(&format!(
            "[registry.mirrors.\"{registry}\"]\nendpoints = [\"{mirror}\"]\n"
        ));
        let before = proxy.asked().len();
        let image = if registry == "docker.io" {
            "app:1".to_owned()
        } else {
            format!("{registry}/library/app:1")
        };
        assert_eq!(pull(&c, &image).await.unwrap(), img.id(), "{mirror}");
        let asked = proxy.asked()[before..].to_vec();
        let under = mirror.trim_start_matches(&format!("http://{}", proxy.addr));
        let under = under.trim_end_matches('/');
        assert!(
            asked.iter().any(|p| p.contains("/library/app/manifests/1"))
                && asked
                    .iter()
                    .any(|p| p.contains("/library/app/blobs/sha256:")),
            "{mirror}: manifest and blobs through the mirror: {asked:?}"
        );
        for p in &asked {
            let through =
                p.starts_with(&format!("{under}/")) || (under.starts_with("/v2/") && p == "/v2/");
            assert!(through, "{mirror}: {p} is not under the mirror's path");
        }
    }
    // A path that would be reinterpreted on the way is refused when the config is read.
    let bad = Crust::try_start(&format!(
        "[registry.mirrors.\"docker.io\"]\nendpoints = [\"http://{}/a/../v2\"]\n",
        proxy.addr
    ));
    assert!(
        bad.contains("http://host[:port][/path]"),
        "the refusal says what an endpoint may be: {bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_asking_for_a_client_certificate_is_pulled_from_with_the_configured_one() {
    let reg = Registry::start(Auth::None);
    let img = busybox_image();
    reg.push("app", "1", &img).await;
    let tls = registry::TlsRegistry::start_mtls(&reg);
    let image = format!("{}/app:1", tls.addr);

    // Without the client certificate: refused, and the message says which setting is missing.
    let c = Crust::start(&format!(
        "[registry.configs.\"{}\"]\nca_file = \"{}\"\n",
        tls.addr,
        tls.ca.display()
    ));
    let e = pull(&c, &image).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert!(
        e.message().contains("client certificate") && e.message().contains("cert_file"),
        "{e}"
    );
    drop(c);

    // With it: pulled.
    let c = Crust::start(&format!(
        "[registry.configs.\"{}\"]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        tls.addr,
        tls.ca.display(),
        tls.client_cert.display(),
        tls.client_key.display()
    ));
    assert_eq!(pull(&c, &image).await.unwrap(), img.id());

    // A certificate without its key (or the other way round) is refused at start.
    let bad = Crust::try_start(&format!(
        "[registry.configs.\"{}\"]\ncert_file = \"{}\"\n",
        tls.addr,
        tls.client_cert.display()
    ));
    assert!(
        bad.contains("cert_file") && bad.contains("key_file"),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_layer_is_refused_before_it_is_fetched() {
    let reg = Registry::start(Auth::None);
    let mut img = busybox_image();
    // What ocicrypt (`ctr images encrypt`, skopeo --encryption-key) makes of a gzip layer.
    img.layers[0].media_type = "application/vnd.oci.image.layer.v1.tar+gzip+encrypted".into();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": img.config.descriptor(),
        "layers": img.layers.iter().map(oci_build::Blob::descriptor).collect::<Vec<_>>(),
    });
    img.manifest = oci_build::Blob::new(
        serde_json::to_vec(&manifest).unwrap(),
        "application/vnd.oci.image.manifest.v1+json",
    );
    reg.push("secret", "1", &img).await;
    let proxy = PathProxy::start(&reg.addr, &[("/v2/", "/v2/")]);
    let c = Crust::start(&format!(
        "[registry.mirrors.\"{0}\"]\nendpoints = [\"http://{0}\"]\n",
        proxy.addr
    ));
    let e = pull(&c, &format!("{}/secret:1", proxy.addr))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    let layer = img.layers[0].digest();
    assert!(
        e.message().contains("layer 1")
            && e.message().contains(&layer)
            && e.message().contains("encrypted"),
        "{e}"
    );
    let asked = proxy.asked();
    assert!(
        asked.iter().any(|p| p.contains("/manifests/1")),
        "{asked:?}"
    );
    assert!(
        !asked.iter().any(|p| p.contains(&layer)),
        "the encrypted layer was fetched: {asked:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerds_host_directories_are_read_on_every_pull() {
    let reg = Registry::start(Auth::None);
    let img = busybox_image();
    reg.push("library/app", "1", &img).await;
    let proxy = PathProxy::start(&reg.addr, &[("/v2/hub-proxy/", "/v2/")]);
    let tls = registry::TlsRegistry::start_mtls(&reg);
    let certs = tempfile::tempdir().unwrap();
    let dir = |name: &str| {
        let d = certs.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    // docker.io: a Harbor-style proxy project, written as k3s and containerd's docs write it.
    std::fs::write(
        dir("docker.io").join("hosts.toml"),
        format!(
            "server = \"https://registry-1.docker.io\"\n\n[host.\"http://{}/v2/hub-proxy\"]\n  \
             capabilities = [\"pull\", \"resolve\"]\n  override_path = true\n",
            proxy.addr
        ),
    )
    .unwrap();
    let c = Crust::start(&format!(
        "[registry]\nconfig_path = \"/nonexistent:{}\"\n",
        certs.path().display()
    ));
    assert_eq!(pull(&c, "app:1").await.unwrap(), img.id());
    assert!(
        proxy
            .asked()
            .iter()
            .any(|p| p.starts_with("/v2/hub-proxy/library/app/manifests/1")),
        "{:?}",
        proxy.asked()
    );

    // quay.io has no directory yet: its pull goes to quay.io itself and fails offline. A
    // directory written now (no reload) sends the next pull to the mTLS registry, with the
    // CA and client pair given relative to the directory.
    assert!(pull(&c, "quay.io/library/app:1").await.is_err());
    let quay = dir("quay.io");
    for (from, to) in [
        (&tls.ca, "ca.pem"),
        (&tls.client_cert, "client.pem"),
        (&tls.client_key, "client.key"),
    ] {
        std::fs::copy(from, quay.join(to)).unwrap();
    }
    std::fs::write(
        quay.join("hosts.toml"),
        format!(
            "[host.\"https://{}\"]\n  ca = \"ca.pem\"\n  client = [[\"client.pem\", \"client.key\"]]\n",
            tls.addr
        ),
    )
    .unwrap();
    assert_eq!(pull(&c, "quay.io/library/app:1").await.unwrap(), img.id());

    // Docker's layout, for the registry itself: <host>_<port>_ with ca.crt, node.cert, node.key.
    let (host, port) = tls.addr.rsplit_once(':').unwrap();
    let own = dir(&format!("{host}_{port}_"));
    std::fs::copy(&tls.ca, own.join("ca.crt")).unwrap();
    std::fs::copy(&tls.client_cert, own.join("node.cert")).unwrap();
    std::fs::copy(&tls.client_key, own.join("node.key")).unwrap();
    assert_eq!(
        pull(&c, &format!("{}/library/app:1", tls.addr))
            .await
            .unwrap(),
        img.id()
    );

    // A file crust cannot follow fails the pull naming the file and the key.
    std::fs::write(
        quay.join("hosts.toml"),
        format!(
            "[host.\"https://{}\"]\n  [host.\"https://{0}\".header]\n  x-token = \"1\"\n",
            tls.addr
        ),
    )
    .unwrap();
    let e = pull(&c, "quay.io/library/app:1").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(
        e.message().contains("quay.io/hosts.toml") && e.message().contains("header"),
        "{e}"
    );
}
