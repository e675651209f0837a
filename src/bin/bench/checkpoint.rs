//! Checkpoint and restore of a container holding 10 MiB and 200 MiB of touched memory (a
//! shell variable that long; the bench image links only sh, sleep and true, so the rest is
//! called through busybox): CheckpointContainer to an archive on disk, then, where the
//! runtime restores (crust; containerd 2.4 removed its CreateContainer restore), CreateContainer
//! from that archive and StartContainer in the same pod, until the restored process runs.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crust::cri::pb;

use super::{Args, Client, create_container, remove_pod, run_pod, start_container};
use crate::common::report;

pub async fn checkpoint_restore(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    let dir = Path::new(&args.checkpoint_dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for mib in [10usize, 200] {
        let pod = run_pod(c, &format!("ckpt-{mib}")).await?;
        // The pod goes whatever happens: pods outlive the runtime's daemon, and a row that
        // failed would leave its pod running after the run.
        let measured = measure(c, args, &pod, dir, mib).await;
        remove_pod(c, &pod).await?;
        measured?;
    }
    Ok(())
}

async fn measure(
    c: &mut Client,
    args: &Args,
    pod: &super::Pod,
    dir: &Path,
    mib: usize,
) -> anyhow::Result<()> {
    let pod = pod.clone();
    let script = format!(
        "x=$(busybox head -c {} /dev/zero | busybox tr '\\0' a); : > /tmp/ready; sleep 100000; \
         echo ${{#x}}",
        mib << 20
    );
    let id = create_container(c, &pod, "holder", &args.image, &script).await?;
    start_container(c, &id).await?;
    wait_ready(c, &id).await?;
    let (mut dumps, mut restores) = (Vec::new(), Vec::new());
    let mut restorable = true;
    for i in 0..1 + args.checkpoints {
        let archive = dir.join(format!("{}-{mib}-{i}.tar", args.label));
        let t = Instant::now();
        c.checkpoint_container(pb::CheckpointContainerRequest {
            container_id: id.clone(),
            location: archive.display().to_string(),
            timeout: 0,
        })
        .await
        .with_context(|| format!("checkpoint of a container with {mib} MiB"))?;
        let dumped = t.elapsed();
        if restorable {
            match restore(c, &pod, &archive, i).await {
                Ok(took) if i > 0 => restores.push(took),
                Ok(_) => {}
                Err(e) => {
                    println!(
                        "{:<12} restore, {mib} MiB touched: not measured: {e:#}",
                        args.label
                    );
                    restorable = false;
                }
            }
        }
        let _ = std::fs::remove_file(&archive);
        if i > 0 {
            dumps.push(dumped);
        }
    }
    report(
        &args.label,
        &format!("checkpoint, {mib} MiB touched"),
        &dumps,
    );
    if restorable {
        let what = format!("restore (create + start), {mib} MiB touched");
        report(&args.label, &what, &restores);
    }
    Ok(())
}

/// Creates and starts a container from `archive` in `pod`; answers how long until it ran, and
/// removes it.
async fn restore(
    c: &mut Client,
    pod: &super::Pod,
    archive: &Path,
    i: usize,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let image = archive.display().to_string();
    let id = create_container(c, pod, &format!("restored-{i}"), &image, "").await?;
    start_container(c, &id).await?;
    let took = t.elapsed();
    c.stop_container(pb::StopContainerRequest {
        container_id: id.clone(),
        timeout: 0,
    })
    .await?;
    c.remove_container(pb::RemoveContainerRequest { container_id: id })
        .await?;
    Ok(took)
}

async fn wait_ready(c: &mut Client, id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = c
            .exec_sync(pb::ExecSyncRequest {
                container_id: id.into(),
                cmd: vec!["sh".into(), "-c".into(), "[ -f /tmp/ready ]".into()],
                timeout: 10,
            })
            .await?
            .into_inner();
        if r.exit_code == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the container did not fill its memory within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
