//! Egress NAT for pod subnets, set up once per node rather than once per pod: one iptables
//! MASQUERADE rule per configured subnet serves every pod in it. The bridge plugin's per-pod
//! `ipMasq` would instead add and delete a chain on every ADD and DEL (about 12 ms and 35 ms
//! here), which is most of a pod's start and stop time.

use std::process::Stdio;

const COMMENT: &str = "crust: pod egress";

/// Ensures a MASQUERADE rule exists for each subnet; returns one message per failure.
pub async fn ensure(subnets: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for subnet in subnets {
        if let Err(e) = ensure_one(subnet).await {
            problems.push(format!("masquerading {subnet}: {e}"));
        }
    }
    problems
}

async fn ensure_one(subnet: &str) -> Result<(), String> {
    let tool = if subnet.contains(':') {
        "ip6tables"
    } else {
        "iptables"
    };
    let rule = |op: &str| {
        [
            "-w",
            "-t",
            "nat",
            op,
            "POSTROUTING",
            "-s",
            subnet,
            "!",
            "-d",
            subnet,
            "-m",
            "comment",
            "--comment",
            COMMENT,
            "-j",
            "MASQUERADE",
        ]
        .map(str::to_owned)
    };
    let run = |args: [String; 16]| async move {
        tokio::process::Command::new(tool)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .await
    };
    let check = run(rule("-C"))
        .await
        .map_err(|e| format!("running {tool}: {e}"))?;
    if check.status.success() {
        return Ok(());
    }
    let add = run(rule("-A"))
        .await
        .map_err(|e| format!("running {tool}: {e}"))?;
    if add.status.success() {
        tracing::info!(subnet, "added pod egress masquerade rule");
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&add.stderr).trim().to_owned())
    }
}
