//! The daemon's side of the monitor: spawning one and waiting for its Ready line, sending it
//! requests, and waiting for it to exit.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::{
    ContainerState, CreateRequest, Event, ExecOutput, ExecRequest, ExitInfo, Fault, Identity, LOG,
    MonitorConfig, PIDFILE, Ready, Reply, Request, SOCKET,
};

#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("starting monitor: {0}")]
    Spawn(std::io::Error),
    #[error("monitor failed to {step}: {error}")]
    Setup { step: String, error: String },
    /// The monitor ended without a Ready line: `detail` says how its first process ended if
    /// it failed (a clean exit says nothing: that process exits once it has forked the
    /// monitor), then the last line the monitor wrote to its log (a panic, a start-up error).
    #[error("monitor exited before it was ready{detail} (see {})", log.display())]
    Vanished { log: PathBuf, detail: String },
    #[error("the pod monitor (pid {0}) died before it answered")]
    Died(i32),
    #[error("monitor did not answer within {0:?}")]
    Timeout(Duration),
    #[error("monitor connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("monitor: {0}")]
    Protocol(String),
    /// The monitor answered, refusing the request.
    #[error("{error}")]
    Refused { fault: Fault, error: String },
}

/// A start that did not happen: why, and the container's exit when that ended it (the monitor
/// records it before it answers).
#[derive(Debug)]
pub struct StartFailed {
    pub error: MonitorError,
    pub exit: Option<ExitInfo>,
}

impl From<MonitorError> for StartFailed {
    fn from(error: MonitorError) -> Self {
        StartFailed { error, exit: None }
    }
}

/// A monitor the daemon knows: its identity and its sandbox directory.
#[derive(Debug, Clone)]
pub struct MonitorHandle {
    pub identity: Identity,
    pub dir: PathBuf,
}

/// What is known of a monitor that ended before its Ready line: how its first process ended
/// and the last thing its log says.
fn vanished(log: &Path, exit: std::io::Result<std::process::ExitStatus>) -> MonitorError {
    let how = match exit {
        Ok(status) if status.success() => String::new(),
        Ok(status) => format!(" ({status})"),
        Err(e) => format!(" (its status unknown: {e})"),
    };
    let said = last_line(log).map(|l| format!(": {l}")).unwrap_or_default();
    MonitorError::Vanished {
        log: log.to_owned(),
        detail: how + &said,
    }
}

/// The last non-empty line of a log, from at most its last 4 KiB.
fn last_line(log: &Path) -> Option<String> {
    let text = crate::sys::read_tail(log, 4096).ok()?;
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(line.trim().chars().take(500).collect())
}

/// Starts a monitor for `config` with the crust binary `exe` and waits until it is ready.
pub async fn spawn(
    exe: &Path,
    config: &MonitorConfig,
    timeout: Duration,
) -> Result<MonitorHandle, MonitorError> {
    let log = crate::durable::open_append(config.dir.join(LOG)).map_err(MonitorError::Spawn)?;
    let mut child = tokio::process::Command::new(exe)
        .args(["monitor", "--sandbox", &config.sandbox_id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .current_dir("/")
        .spawn()
        .map_err(MonitorError::Spawn)?;
    let input = serde_json::to_vec(config).unwrap_or_default();
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let handshake = async {
        stdin.write_all(&input).await?;
        drop(stdin);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).await?;
        Ok::<_, std::io::Error>(line)
    };
    let line = match tokio::time::timeout(timeout, handshake).await {
        Ok(line) => line?,
        Err(_) => {
            let _ = child.start_kill();
            return Err(MonitorError::Timeout(timeout));
        }
    };
    // The first process exits right after forking the monitor; reap it.
    let exit = child.wait().await;
    crate::durable::step("monitor started", &config.sandbox_id);
    match serde_json::from_str::<Ready>(&line) {
        Ok(Ready::Ok(identity)) => Ok(MonitorHandle {
            identity,
            dir: config.dir.clone(),
        }),
        Ok(Ready::Failed { step, error }) => Err(MonitorError::Setup { step, error }),
        Err(_) if line.is_empty() => Err(vanished(&config.dir.join(LOG), exit)),
        Err(e) => Err(MonitorError::Protocol(format!(
            "unreadable ready line: {e}"
        ))),
    }
}

/// The identity the monitor of sandbox directory `dir` wrote, if any.
pub fn read_pidfile(dir: &Path) -> Option<Identity> {
    serde_json::from_slice(&std::fs::read(dir.join(PIDFILE)).ok()?).ok()
}

impl MonitorHandle {
    /// Asks the monitor for its identity; fails if another process answers or none does.
    /// Returns the protocol version it speaks.
    pub async fn ping(&self, timeout: Duration) -> Result<u32, MonitorError> {
        match self.ask(&Request::Ping, timeout).await? {
            Reply::Ok {
                identity, protocol, ..
            } if identity == self.identity => Ok(protocol),
            Reply::Ok { identity, .. } => Err(MonitorError::Protocol(format!(
                "socket answered as monitor {}, expected {}",
                identity.pid, self.identity.pid
            ))),
            other => Err(unexpected(other)),
        }
    }

    /// Creates a container; returns its process id.
    pub async fn create(&self, req: CreateRequest, timeout: Duration) -> Result<i32, MonitorError> {
        match self.ask(&Request::Create(Box::new(req)), timeout).await? {
            Reply::Created { pid } => Ok(pid),
            other => Err(unexpected(other)),
        }
    }

    /// Starts a created container; returns when it started (nanoseconds since the epoch).
    pub async fn start(&self, id: &str, timeout: Duration) -> Result<i64, StartFailed> {
        let req = Request::Start { id: id.to_owned() };
        match self.ask(&req, timeout).await? {
            Reply::Started { started_at } => Ok(started_at),
            Reply::StartFailed { fault, error, exit } => Err(StartFailed {
                error: MonitorError::Refused { fault, error },
                exit: Some(exit),
            }),
            other => Err(unexpected(other).into()),
        }
    }

    /// Signals a container's process (and with `all`, everything in its cgroup).
    pub async fn signal(
        &self,
        id: &str,
        signal: nix::sys::signal::Signal,
        all: bool,
        timeout: Duration,
    ) -> Result<(), MonitorError> {
        let req = Request::Signal {
            id: id.to_owned(),
            signal: signal as i32,
            all,
        };
        self.done(&req, timeout).await
    }

    /// Makes the monitor forget a container (killing what is left of it).
    pub async fn forget(&self, id: &str, timeout: Duration) -> Result<(), MonitorError> {
        self.done(&Request::Forget { id: id.to_owned() }, timeout)
            .await
    }

    pub async fn reopen_log(&self, id: &str, timeout: Duration) -> Result<(), MonitorError> {
        self.done(&Request::ReopenLog { id: id.to_owned() }, timeout)
            .await
    }

    /// Runs a process in a running container and returns its output.
    pub async fn exec(
        &self,
        req: ExecRequest,
        timeout: Duration,
    ) -> Result<ExecOutput, MonitorError> {
        match self.ask(&Request::Exec(Box::new(req)), timeout).await? {
            Reply::Exec(out) => Ok(out),
            other => Err(unexpected(other)),
        }
    }

    /// Asks the monitor, which may die while answering (killed, out of memory): its death
    /// ends the wait at once. No EOF need come: a created container's process holds a copy of
    /// the connection until it starts.
    async fn ask(&self, req: &Request, timeout: Duration) -> Result<Reply, MonitorError> {
        self.unless_died(request(&self.dir, req, timeout)).await
    }

    /// `work`, a conversation with the monitor, unless the monitor dies first. A dead
    /// monitor's listening socket can outlive it in a created container's process, so a
    /// connection made after the death is accepted by the kernel and never answered.
    pub(super) async fn unless_died<T>(
        &self,
        work: impl Future<Output = Result<T, MonitorError>>,
    ) -> Result<T, MonitorError> {
        let died = async {
            if self.exited().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            // A reply written before the monitor died is still read.
            biased;
            reply = work => match reply {
                Err(MonitorError::Io(e)) if connection_lost(&e) && self.gone_soon().await => {
                    Err(MonitorError::Died(self.identity.pid))
                }
                other => other,
            },
            () = died => Err(MonitorError::Died(self.identity.pid)),
        }
    }

    /// Whether the monitor is gone, or goes within a moment: a connection it lost as it
    /// died (closed or reset by the kernel) can come before its process is reaped.
    async fn gone_soon(&self) -> bool {
        let Ok(pidfd) = crate::sys::pidfd_open(self.identity.pid) else {
            return true;
        };
        !super::is_alive(&self.identity)
            || crate::sys::pidfd_wait(pidfd, Some(DEATH_GRACE))
                .await
                .unwrap_or(false)
    }

    async fn done(&self, req: &Request, timeout: Duration) -> Result<(), MonitorError> {
        match self.ask(req, timeout).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Subscribes to the monitor's events: the state of every container it knows, then one
    /// event per change as it happens.
    pub async fn subscribe(
        &self,
        timeout: Duration,
    ) -> Result<(Vec<ContainerState>, Subscription), MonitorError> {
        let open = async {
            let (_dir, path) = super::short_socket_path(&self.dir, SOCKET)?;
            let mut stream = UnixStream::connect(path).await?;
            let mut line = serde_json::to_vec(&Request::Subscribe).unwrap_or_default();
            line.push(b'\n');
            stream.write_all(&line).await?;
            let mut reader = BufReader::new(stream);
            let mut first = String::new();
            reader.read_line(&mut first).await?;
            Ok::<_, std::io::Error>((reader, first))
        };
        let (reader, first) = self
            .unless_died(async {
                tokio::time::timeout(timeout, open)
                    .await
                    .map_err(|_| MonitorError::Timeout(timeout))?
                    .map_err(MonitorError::Io)
            })
            .await?;
        match serde_json::from_str(&first) {
            Ok(Reply::Snapshot { containers }) => Ok((containers, Subscription { reader })),
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(MonitorError::Protocol(format!(
                "unreadable snapshot {first:?}: {e}"
            ))),
        }
    }

    /// Stops the pod's processes and the monitor, and waits until it is gone. A monitor that
    /// does not answer in time is killed.
    pub async fn shutdown(&self, timeout: Duration) -> Result<(), MonitorError> {
        if !super::is_alive(&self.identity) {
            return Ok(());
        }
        let pidfd = crate::sys::pidfd_open(self.identity.pid)?;
        let init = self.init_pidfd();
        // The pidfd names the process we checked; it may have exited since (then all is done).
        if !super::is_alive(&self.identity) {
            return Ok(());
        }
        let asked = request(&self.dir, &Request::Shutdown, timeout).await;
        if let Err(e) = &asked {
            tracing::warn!(pid = self.identity.pid, error = %e, "monitor did not take shutdown; killing it");
        }
        if asked.is_err() || !wait_pidfd(&pidfd, timeout).await {
            if let Some(init) = &init {
                let _ = crate::sys::pidfd_send_signal(init, nix::sys::signal::SIGKILL);
            }
            let _ = crate::sys::pidfd_send_signal(&pidfd, nix::sys::signal::SIGKILL);
            if !wait_pidfd(&pidfd, timeout).await {
                return Err(MonitorError::Timeout(timeout));
            }
        }
        Ok(())
    }

    /// A pidfd for the pod's init, taken while it is still the live monitor's child: its pid
    /// cannot have been reused before the monitor reaps it, and the pidfd keeps naming it after.
    fn init_pidfd(&self) -> Option<std::os::fd::OwnedFd> {
        let init = self.identity.init_pid?;
        let fd = crate::sys::pidfd_open(init).ok()?;
        let child_of_monitor = super::parent_pid(init) == Some(self.identity.pid);
        (child_of_monitor && super::is_alive(&self.identity)).then_some(fd)
    }

    /// Resolves when the monitor process exits (at once if it was reaped already).
    pub async fn exited(&self) -> std::io::Result<()> {
        let pidfd = match crate::sys::pidfd_open(self.identity.pid) {
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(()),
            other => other?,
        };
        if !super::is_alive(&self.identity) {
            return Ok(());
        }
        crate::sys::pidfd_wait(pidfd, None).await.map(drop)
    }
}

/// The events of one monitor, in the order they happened.
pub struct Subscription {
    reader: BufReader<UnixStream>,
}

impl Subscription {
    /// The next event; `None` when the monitor closed the connection (it exited).
    pub async fn next(&mut self) -> Option<Event> {
        let mut line = String::new();
        loop {
            line.clear();
            match self.reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {
                    if let Ok(event) = serde_json::from_str(&line) {
                        return Some(event);
                    }
                    tracing::warn!(line = %line.trim(), "unreadable monitor event");
                }
            }
        }
    }
}

fn unexpected(reply: Reply) -> MonitorError {
    match reply {
        Reply::Err { fault, error } => MonitorError::Refused { fault, error },
        other => MonitorError::Protocol(format!("unexpected answer {other:?}")),
    }
}

async fn wait_pidfd(pidfd: &std::os::fd::OwnedFd, timeout: Duration) -> bool {
    let Ok(dup) = pidfd.try_clone() else {
        return false;
    };
    crate::sys::pidfd_wait(dup, Some(timeout))
        .await
        .unwrap_or(false)
}

/// How long a call whose connection was lost waits to see the monitor's death.
const DEATH_GRACE: Duration = Duration::from_secs(1);

/// The ways a monitor's socket fails when the monitor has died: the connection closed or reset
/// under a call, or no one listening any more.
fn connection_lost(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | BrokenPipe | ConnectionRefused | NotFound
    )
}

/// The longest answer read from a monitor: an exec's output is bounded by the caller, and
/// base64 makes it a third longer.
const MAX_REPLY: u64 = 64 << 20;

async fn request(dir: &Path, req: &Request, timeout: Duration) -> Result<Reply, MonitorError> {
    let work = async {
        let (_dir, path) = super::short_socket_path(dir, SOCKET)?;
        let mut stream = UnixStream::connect(path).await?;
        let mut line = serde_json::to_vec(req).unwrap_or_default();
        line.push(b'\n');
        stream.write_all(&line).await?;
        let mut answer = String::new();
        BufReader::new(stream)
            .take(MAX_REPLY)
            .read_line(&mut answer)
            .await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(timeout, work).await;
    // What the monitor changed for the pod is done (or not) once the call returns.
    if !matches!(req, Request::Ping | Request::Subscribe) {
        crate::durable::step("monitor call", req.op_name());
    }
    let answer = answer.map_err(|_| MonitorError::Timeout(timeout))??;
    if answer.is_empty() {
        // The connection closed without a word: the monitor is exiting (or was killed).
        return Err(MonitorError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    serde_json::from_str(&answer)
        .map_err(|e| MonitorError::Protocol(format!("unreadable reply {answer:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_vanished_monitor_says_what_its_log_last_said() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join(LOG);
        std::fs::write(
            &log,
            "started\nthread 'main' panicked at src/x.rs:1: boom\n\n",
        )
        .unwrap();
        let clean = vanished(&log, Ok(std::process::ExitStatus::from_raw(0))).to_string();
        assert_eq!(
            clean,
            format!(
                "monitor exited before it was ready: thread 'main' panicked at src/x.rs:1: boom \
                 (see {})",
                log.display()
            )
        );
        // A first process killed before it forked says so; a log never written says nothing.
        let killed = vanished(
            &dir.path().join("none.log"),
            Ok(std::process::ExitStatus::from_raw(9)),
        );
        let text = killed.to_string();
        assert!(
            text.starts_with("monitor exited before it was ready (signal: 9"),
            "{text}"
        );
        assert!(!text.contains(": ("), "{text}");
    }

    /// A monitor that died while a created container's process still holds its listening
    /// socket: connections are accepted by the kernel and never answered.
    fn dead_monitor_with_its_socket_held() -> (
        tempfile::TempDir,
        std::os::unix::net::UnixListener,
        MonitorHandle,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let held = std::os::unix::net::UnixListener::bind(dir.path().join(SOCKET)).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let start_time = super::super::process_start_time(pid).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let identity = Identity {
            pid,
            start_time,
            init_pid: None,
        };
        let handle = MonitorHandle {
            identity,
            dir: dir.path().to_owned(),
        };
        (dir, held, handle)
    }

    #[tokio::test]
    async fn a_dead_monitor_s_held_socket_stalls_no_subscription_request_or_session() {
        let (_dir, _held, monitor) = dead_monitor_with_its_socket_held();
        let patience = Duration::from_secs(30);
        let began = std::time::Instant::now();
        let subscribed = monitor.subscribe(patience).await;
        assert!(
            matches!(subscribed, Err(MonitorError::Died(_))),
            "{:?}",
            subscribed.err()
        );
        let pinged = monitor.ping(patience).await;
        assert!(matches!(pinged, Err(MonitorError::Died(_))), "{pinged:?}");
        let attached = monitor.attach_session("c", false, patience).await;
        assert!(
            matches!(attached, Err(MonitorError::Died(_))),
            "{:?}",
            attached.err()
        );
        // Each would have waited out its 30 s for an answer from no one.
        assert!(began.elapsed() < patience, "{:?}", began.elapsed());
    }
}
