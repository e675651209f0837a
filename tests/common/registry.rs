//! A real registry for tests: Debian's `docker-registry` (CNCF distribution 2.8) on a free
//! loopback port with a temporary storage directory, optionally behind htpasswd basic auth or
//! bearer-token auth (with the tiny token server below), and pushing through its HTTP API.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::oci_build::{Blob, Image};

/// reqwest with rustls needs a process-wide crypto provider (crust uses ring).
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Fails the test loudly when a tool the test needs is missing (never a silent skip).
pub fn require(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "SKIPPED is not a pass: {tool} not found; install Debian's {package} (hack/install-deps.sh test)"
    );
}

/// Runs `openssl ARGS` in `dir` (keys and certificates for the token server and TLS registry).
fn openssl(dir: &Path, args: &[&str]) {
    require("openssl", "openssl");
    let s = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        s.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&s.stderr)
    );
}

pub enum Auth {
    None,
    Basic { user: String, password: String },
    Token { user: String, password: String },
}

pub struct Registry {
    pub addr: String,
    pub dir: tempfile::TempDir,
    child: Child,
    token: Option<TokenServer>,
    /// Credentials pushes use.
    push_auth: Option<(String, String)>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    pub fn start(auth: Auth) -> Registry {
        require("docker-registry", "docker-registry");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut token = None;
        let mut push_auth = None;
        let auth_yaml = match &auth {
            Auth::None => String::new(),
            Auth::Basic { user, password } => {
                require("htpasswd", "apache2-utils");
                let out = Command::new("htpasswd")
                    .args(["-Bbn", user, password])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "htpasswd failed");
                std::fs::write(dir.path().join("htpasswd"), out.stdout).unwrap();
                push_auth = Some((user.clone(), password.clone()));
                format!(
                    "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                    dir.path().join("htpasswd").display()
                )
            }
            Auth::Token { user, password } => {
                let t = TokenServer::start(dir.path(), user, password);
                let yaml = format!(
                    "auth:\n  token:\n    realm: http://{}/token\n    service: crust-test\n    issuer: crust-test-issuer\n    rootcertbundle: {}\n",
                    t.addr,
                    t.cert_pem.display()
                );
                push_auth = Some((user.clone(), password.clone()));
                token = Some(t);
                yaml
            }
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{auth_yaml}",
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let reg = Registry {
            addr,
            dir,
            child,
            token,
            push_auth,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&reg.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "registry did not start; see {}",
                reg.dir.path().join("registry.log").display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        reg
    }

    /// The file the registry stores a blob in (to corrupt it behind the registry's back).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = &digest[7..];
        self.dir.path().join(format!(
            "data/docker/registry/v2/blobs/sha256/{}/{hex}/data",
            &hex[..2]
        ))
    }

    async fn client_token(&self, repo: &str) -> Option<String> {
        let t = self.token.as_ref()?;
        let (u, p) = self.push_auth.as_ref()?;
        Some(t.issue(u, p, repo, &["pull", "push"]).expect("token"))
    }

    fn authed(
        &self,
        rb: reqwest::RequestBuilder,
        token: &Option<String>,
    ) -> reqwest::RequestBuilder {
        match (token, &self.push_auth) {
            (Some(t), _) => rb.bearer_auth(t),
            (None, Some((u, p))) => rb.basic_auth(u, Some(p)),
            (None, None) => rb,
        }
    }

    pub async fn push_blob(&self, repo: &str, blob: &Blob) {
        let c = http();
        let token = self.client_token(repo).await;
        let r = self
            .authed(
                c.post(format!("http://{}/v2/{repo}/blobs/uploads/", self.addr)),
                &token,
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "starting upload: {}", r.status());
        let loc = r.headers()["location"].to_str().unwrap().to_owned();
        let loc = if loc.starts_with("http") {
            loc
        } else {
            format!("http://{}{loc}", self.addr)
        };
        let sep = if loc.contains('?') { '&' } else { '?' };
        let r = self
            .authed(c.put(format!("{loc}{sep}digest={}", blob.digest())), &token)
            .header("content-type", "application/octet-stream")
            .body(blob.bytes.clone())
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "uploading {}: {}",
            blob.digest(),
            r.status()
        );
    }

    pub async fn push_manifest(&self, repo: &str, reference: &str, m: &Blob) {
        let c = http();
        let token = self.client_token(repo).await;
        let r = self
            .authed(
                c.put(format!(
                    "http://{}/v2/{repo}/manifests/{reference}",
                    self.addr
                )),
                &token,
            )
            .header("content-type", &m.media_type)
            .body(m.bytes.clone())
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "pushing manifest {repo}:{reference}: {} {}",
            r.status(),
            r.text().await.unwrap_or_default()
        );
    }

    /// Pushes an image's blobs and manifest and tags it.
    pub async fn push(&self, repo: &str, tag: &str, img: &Image) {
        self.push_blob(repo, &img.config).await;
        for l in &img.layers {
            self.push_blob(repo, l).await;
        }
        self.push_manifest(repo, tag, &img.manifest).await;
    }

    /// Pushes the images, then `index` over them under `tag`.
    pub async fn push_index(&self, repo: &str, tag: &str, index: &Blob, images: &[&Image]) {
        for img in images {
            self.push(repo, &img.manifest.digest(), img).await;
        }
        self.push_manifest(repo, tag, index).await;
    }

    /// Issues a pull token directly (what a kubelet credential provider would hand over).
    pub fn token_for(&self, repo: &str) -> String {
        let t = self.token.as_ref().expect("token registry");
        let (u, p) = self.push_auth.as_ref().unwrap();
        t.issue(u, p, repo, &["pull"]).unwrap()
    }

    /// A refresh token the token server accepts for the identity-token flow.
    pub fn identity_token(&self) -> String {
        self.token
            .as_ref()
            .expect("token registry")
            .refresh_token
            .clone()
    }
}

/// A minimal bearer-token server for distribution's token auth: GET /token with basic auth
/// issues an ES256 JWT (signed with a throwaway key whose self-signed certificate the registry
/// trusts); POST /token with `grant_type=refresh_token` does the same for the identity token.
pub struct TokenServer {
    pub addr: String,
    pub cert_pem: PathBuf,
    key: std::sync::Arc<ring::signature::EcdsaKeyPair>,
    cert_der: Vec<u8>,
    user: String,
    password: String,
    pub refresh_token: String,
    _thread: std::thread::JoinHandle<()>,
}

impl TokenServer {
    fn start(dir: &Path, user: &str, password: &str) -> TokenServer {
        let run = |args: &[&str]| openssl(dir, args);
        run(&[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            "key.pem",
        ]);
        run(&[
            "pkcs8", "-topk8", "-nocrypt", "-in", "key.pem", "-outform", "DER", "-out", "key.der",
        ]);
        run(&[
            "req",
            "-new",
            "-x509",
            "-key",
            "key.pem",
            "-out",
            "cert.pem",
            "-days",
            "2",
            "-subj",
            "/CN=crust-test-token",
        ]);
        run(&[
            "x509", "-in", "cert.pem", "-outform", "DER", "-out", "cert.der",
        ]);
        let rng = ring::rand::SystemRandom::new();
        let key = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &std::fs::read(dir.join("key.der")).unwrap(),
            &rng,
        )
        .expect("P-256 key");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut server = TokenServer {
            addr,
            cert_pem: dir.join("cert.pem"),
            key: std::sync::Arc::new(key),
            cert_der: std::fs::read(dir.join("cert.der")).unwrap(),
            user: user.into(),
            password: password.into(),
            refresh_token: "refresh-crust-test-0123456789".into(),
            _thread: std::thread::spawn(|| {}),
        };
        let issuer = server.clone_issuer();
        server._thread = std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let issuer = issuer.clone();
                std::thread::spawn(move || issuer.serve(stream));
            }
        });
        server
    }

    fn clone_issuer(&self) -> Issuer {
        Issuer {
            key: self.key.clone(),
            cert_der: self.cert_der.clone(),
            user: self.user.clone(),
            password: self.password.clone(),
            refresh_token: self.refresh_token.clone(),
        }
    }

    fn issue(&self, user: &str, password: &str, repo: &str, actions: &[&str]) -> Option<String> {
        let i = self.clone_issuer();
        (user == i.user && password == i.password).then(|| i.jwt(user, repo, actions))
    }
}

#[derive(Clone)]
struct Issuer {
    key: std::sync::Arc<ring::signature::EcdsaKeyPair>,
    cert_der: Vec<u8>,
    user: String,
    password: String,
    refresh_token: String,
}

impl Issuer {
    fn jwt(&self, sub: &str, repo: &str, actions: &[&str]) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let std64 = base64::engine::general_purpose::STANDARD;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [std64.encode(&self.cert_der)]});
        let claims = serde_json::json!({
            "iss": "crust-test-issuer", "sub": sub, "aud": "crust-test",
            "exp": now + 600, "nbf": now - 60, "iat": now - 60, "jti": format!("{now}-{repo}"),
            "access": [{"type": "repository", "name": repo, "actions": actions}],
        });
        let signing_input = format!(
            "{}.{}",
            b64.encode(header.to_string()),
            b64.encode(claims.to_string())
        );
        let sig = self
            .key
            .sign(&ring::rand::SystemRandom::new(), signing_input.as_bytes())
            .unwrap();
        format!("{signing_input}.{}", b64.encode(sig.as_ref()))
    }

    /// One HTTP/1.1 request per connection.
    fn serve(&self, mut s: std::net::TcpStream) {
        use std::io::{BufRead, BufReader, Read, Write};
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        if r.read_line(&mut line).is_err() {
            return;
        }
        let (method, target) = {
            let mut p = line.split_whitespace();
            (
                p.next().unwrap_or("").to_owned(),
                p.next().unwrap_or("").to_owned(),
            )
        };
        let (mut auth, mut len) = (String::new(), 0usize);
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap_or(("", ""));
            match k.trim().to_ascii_lowercase().as_str() {
                "authorization" => auth = v.trim().to_owned(),
                "content-length" => len = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
        let mut body = vec![0u8; len];
        let _ = r.read_exact(&mut body);
        let query = if method == "GET" {
            target.split_once('?').map(|x| x.1).unwrap_or("").to_owned()
        } else {
            String::from_utf8_lossy(&body).into_owned()
        };
        let params: Vec<(String, String)> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), urldecode(v)))
            .collect();
        let get = |k: &str| {
            params
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let scope = get("scope");
        let repo = scope.split(':').nth(1).unwrap_or("").to_owned();
        let actions: Vec<&str> = scope
            .split(':')
            .nth(2)
            .unwrap_or("pull")
            .split(',')
            .collect();
        let ok = if method == "POST" {
            get("grant_type") == "refresh_token" && get("refresh_token") == self.refresh_token
        } else {
            use base64::Engine;
            let expected = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", self.user, self.password));
            auth == format!("Basic {expected}")
        };
        let (status, body) = if ok {
            let t = self.jwt(&self.user, &repo, &actions);
            (
                "200 OK",
                serde_json::json!({"token": t, "access_token": t, "expires_in": 600}).to_string(),
            )
        } else {
            (
                "401 Unauthorized",
                r#"{"details":"invalid credentials"}"#.to_owned(),
            )
        };
        let _ = write!(
            s,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

fn urldecode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?'));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A TCP server that accepts connections and never answers: a registry that stalls.
pub fn stalling_server() -> (String, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s); // keep it open, say nothing
            if held.len() > 64 {
                break;
            }
        }
    });
    (addr, h)
}

/// A TCP proxy in front of a registry that slows what the registry sends (to catch a pull in
/// the middle of a download) and can freeze it (a registry that stops mid-blob). Requests go
/// through untouched.
pub struct Throttle {
    pub addr: String,
    /// Bytes per second from the registry to the client; 0 means no limit.
    rate: std::sync::Arc<std::sync::atomic::AtomicU64>,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Throttle {
    pub fn start(upstream: &str, bytes_per_sec: u64) -> Throttle {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let t = Throttle {
            addr: l.local_addr().unwrap().to_string(),
            rate: Arc::new(AtomicU64::new(bytes_per_sec)),
            paused: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (rate, paused, stop) = (t.rate.clone(), t.paused.clone(), t.stop.clone());
        let upstream = upstream.to_owned();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                match l.accept() {
                    Ok((client, _)) => {
                        let up = std::net::TcpStream::connect(&upstream).unwrap();
                        let (rate, paused, stop) = (rate.clone(), paused.clone(), stop.clone());
                        std::thread::spawn(move || relay(client, up, rate, paused, stop));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        t
    }

    pub fn set_rate(&self, bytes_per_sec: u64) {
        self.rate
            .store(bytes_per_sec, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn pause(&self, paused: bool) {
        self.paused
            .store(paused, std::sync::atomic::Ordering::SeqCst);
    }
}

fn relay(
    client: std::net::TcpStream,
    up: std::net::TcpStream,
    rate: std::sync::Arc<std::sync::atomic::AtomicU64>,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering::SeqCst;
    let (mut c_in, mut up_out) = (client.try_clone().unwrap(), up.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_in, &mut up_out);
        let _ = up_out.shutdown(std::net::Shutdown::Write);
    });
    let (mut up_in, mut c_out) = (up, client);
    let mut buf = [0u8; 16 << 10];
    loop {
        while paused.load(SeqCst) && !stop.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if stop.load(SeqCst) {
            break;
        }
        let n = match up_in.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if c_out.write_all(&buf[..n]).is_err() {
            break;
        }
        let r = rate.load(SeqCst);
        if r > 0 {
            std::thread::sleep(Duration::from_secs_f64(n as f64 / r as f64));
        }
    }
    let _ = c_out.shutdown(std::net::Shutdown::Both);
}

/// What the canned registry answers to one request path.
pub enum Canned {
    /// Status, content type and body.
    Body(u16, &'static str, Vec<u8>),
    /// A 200 whose body never ends (no Content-Length): `head`, then `filler` until the
    /// client hangs up.
    Endless { head: Vec<u8>, filler: Vec<u8> },
    /// A 200 that declares this Content-Length and sends only a little.
    Declared(u64),
}

/// A fake registry answering every request from `route(path)`: for malformed or hostile
/// answers a real registry would not give. One request per connection.
pub fn canned_registry(route: fn(&str) -> Canned) -> (String, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || answer(s, route));
        }
    });
    (addr, h)
}

fn answer(mut s: std::net::TcpStream, route: fn(&str) -> Canned) {
    use std::io::{BufRead, BufReader, Write};
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let path = path.split('?').next().unwrap_or("/").to_owned();
    let head = |status: u16, ctype: &str, len: Option<u64>| {
        let len = len.map_or(String::new(), |n| format!("Content-Length: {n}\r\n"));
        format!("HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\n{len}Connection: close\r\n\r\n")
    };
    let _ = match route(&path) {
        Canned::Body(status, ctype, body) => s
            .write_all(head(status, ctype, Some(body.len() as u64)).as_bytes())
            .and_then(|_| s.write_all(&body)),
        Canned::Endless {
            head: first,
            filler,
        } => (|| {
            s.write_all(head(200, "application/vnd.oci.image.manifest.v1+json", None).as_bytes())?;
            s.write_all(&first)?;
            // Bounded anyway, so a broken client cannot keep the test running forever.
            for _ in 0..(1u64 << 30) / filler.len() as u64 {
                s.write_all(&filler)?;
            }
            Ok(())
        })(),
        Canned::Declared(n) => s
            .write_all(head(200, "application/vnd.oci.image.manifest.v1+json", Some(n)).as_bytes())
            .and_then(|_| s.write_all(b"{\"schemaVersion\":2,")),
    };
}

/// `<name>.key` and `<name>.pem` in `dir`: a key and a certificate for `subject` with the
/// extension `ext`, signed by the CA there (`ca.pem`, `ca.key`).
fn signed_by_ca(dir: &Path, name: &str, subject: &str, ext: &str) {
    let file = |suffix: &str| format!("{name}.{suffix}");
    let (key, csr, pem, extfile) = (file("key"), file("csr"), file("pem"), file("ext"));
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    );
    std::fs::write(
        dir.join(&extfile),
        format!("{ext}\nbasicConstraints=CA:FALSE\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &extfile,
        ],
    );
}

/// A second `docker-registry` serving the same storage/// A second `docker-registry` serving the same storage as a plain one over TLS, with a
/// certificate (for 127.0.0.1) from a throwaway CA whose PEM is `ca`.
pub struct TlsRegistry {
    pub addr: String,
    pub ca: PathBuf,
    /// A client certificate and key from the same CA (`start_mtls`'s registry asks for one).
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    dir: tempfile::TempDir,
    child: Child,
}

impl Drop for TlsRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TlsRegistry {
    pub fn start(plain: &Registry) -> TlsRegistry {
        TlsRegistry::start_with(plain, false)
    }

    /// A TLS registry that refuses a client without a certificate from its CA (mTLS).
    pub fn start_mtls(plain: &Registry) -> TlsRegistry {
        TlsRegistry::start_with(plain, true)
    }

    fn start_with(plain: &Registry, mtls: bool) -> TlsRegistry {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| openssl(dir.path(), args);
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=crust-test-ca",
        ]);
        signed_by_ca(
            dir.path(),
            "server",
            "/CN=127.0.0.1",
            "subjectAltName=IP:127.0.0.1",
        );
        signed_by_ca(
            dir.path(),
            "client",
            "/CN=crust-node",
            "extendedKeyUsage=clientAuth",
        );
        let addr = format!("127.0.0.1:{}", free_port());
        let client_cas = if mtls {
            format!(
                "    clientcas:\n      - {}\n",
                dir.path().join("ca.pem").display()
            )
        } else {
            String::new()
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n  tls:\n    certificate: {}\n    key: {}\n{client_cas}",
            plain.dir.path().join("data").display(),
            dir.path().join("server.pem").display(),
            dir.path().join("server.key").display(),
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "TLS registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        TlsRegistry {
            addr,
            ca: dir.path().join("ca.pem"),
            client_cert: dir.path().join("client.pem"),
            client_key: dir.path().join("client.key"),
            dir,
            child,
        }
    }
}

/// An HTTP front for a registry under paths of its own, as a pull-through cache serving many
/// upstreams from one host is (Harbor's proxy-cache projects, Artifactory or Nexus remotes):
/// each request whose path starts with one of `rewrites`' prefixes is sent on to `upstream`
/// with that prefix replaced, one upstream connection per request; any other path is answered
/// 404 without reaching the registry. Every path asked for is kept, in order (`asked`).
pub struct PathProxy {
    pub addr: String,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl PathProxy {
    pub fn start(upstream: &str, rewrites: &[(&str, &str)]) -> PathProxy {
        use std::sync::{Arc, Mutex};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let p = PathProxy {
            addr: l.local_addr().unwrap().to_string(),
            asked: asked.clone(),
        };
        let upstream = upstream.to_owned();
        let rewrites: Vec<(String, String)> = rewrites
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        std::thread::spawn(move || {
            for client in l.incoming().flatten() {
                let (upstream, rewrites, asked) =
                    (upstream.clone(), rewrites.clone(), asked.clone());
                std::thread::spawn(move || proxy_requests(client, &upstream, &rewrites, &asked));
            }
        });
        p
    }

    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

/// Serves one client connection's requests (GETs and HEADs: no request bodies) in turn.
fn proxy_requests(
    client: std::net::TcpStream,
    upstream: &str,
    rewrites: &[(String, String)],
    asked: &std::sync::Mutex<Vec<String>>,
) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut out = client;
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let end = line == "\r\n";
            head.push(line);
            if end {
                break;
            }
        }
        let mut first = head[0].split(' ');
        let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
        asked.lock().unwrap().push(path.to_owned());
        let Some(to) = rewrites.iter().find_map(|(from, to)| {
            path.strip_prefix(from.as_str())
                .map(|rest| format!("{to}{rest}"))
        }) else {
            let _ = out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            continue;
        };
        // One request per upstream connection, closed after its answer, which is relayed whole.
        let mut up = std::net::TcpStream::connect(upstream).unwrap();
        let mut request = format!("{method} {to} HTTP/1.1\r\n");
        for h in &head[1..head.len() - 1] {
            if !h.to_ascii_lowercase().starts_with("connection:") {
                request.push_str(h);
            }
        }
        request.push_str("Connection: close\r\n\r\n");
        up.write_all(request.as_bytes()).unwrap();
        let mut answer = Vec::new();
        let _ = up.read_to_end(&mut answer);
        // The client's connection closes after this answer too: it came without a length the
        // relay would have to parse to keep the connection for the next request.
        let text = String::from_utf8_lossy(&answer);
        let split = text.find("\r\n\r\n").map_or(answer.len(), |i| i + 2);
        let mut reply: Vec<u8> = answer[..split]
            .split(|b| *b == b'\n')
            .filter(|l| !l.to_ascii_lowercase().starts_with(b"connection:") && !l.is_empty())
            .flat_map(|l| l.iter().copied().chain(std::iter::once(b'\n')))
            .collect();
        reply.extend_from_slice(b"Connection: close\r\n");
        reply.extend_from_slice(&answer[split..]);
        let _ = out.write_all(&reply);
        return;
    }
}
