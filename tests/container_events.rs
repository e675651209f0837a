//! GetContainerEvents: every subscriber sees every lifecycle change, in order, with the pod's
//! and containers' statuses as they are after it; one that stops reading is cut off without
//! slowing the others; exits during a daemon restart reach a reconnecting subscriber.

mod common;

use std::time::{Duration, Instant};

use common::workload::Env;
use common::*;
use crust::cri::pb;
use pb::ContainerEventType as Kind;
use tokio_stream::StreamExt;

/// An event stream and the client whose connection carries it.
type Events = (Client, tonic::Streaming<pb::ContainerEventResponse>);

async fn subscribe(e: &Env) -> Events {
    let mut c = e.d.client().await;
    let stream = c
        .get_container_events(pb::GetEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    (c, stream)
}

/// The next `n` events, as (id, kind).
async fn next(events: &mut Events, n: usize) -> Vec<(String, Kind, pb::ContainerEventResponse)> {
    let mut out = Vec::new();
    while out.len() < n {
        let e = tokio::time::timeout(Duration::from_secs(10), events.1.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream goes on")
            .unwrap();
        let kind = Kind::try_from(e.container_event_type).unwrap();
        out.push((e.container_id.clone(), kind, e));
    }
    out
}

#[tokio::test]
async fn subscribers_see_every_change_in_order_with_statuses() {
    let mut e = Env::start().await;
    let mut a = subscribe(&e).await;
    let mut b = subscribe(&e).await;
    let pod = e.pod("evented").await;
    let id = e.run(&pod, e.config("main", &["sh", "-c", "exit 3"])).await;
    e.wait_exit(&id, Duration::from_secs(10)).await;
    e.remove(&id).await;
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    let want = [
        (&pod.0, Kind::ContainerCreatedEvent),
        (&pod.0, Kind::ContainerStartedEvent),
        (&id, Kind::ContainerCreatedEvent),
        (&id, Kind::ContainerStartedEvent),
        (&id, Kind::ContainerStoppedEvent),
        (&id, Kind::ContainerDeletedEvent),
        (&pod.0, Kind::ContainerStoppedEvent),
        (&pod.0, Kind::ContainerDeletedEvent),
    ];
    for events in [&mut a, &mut b] {
        let got = next(events, want.len()).await;
        let ids: Vec<(&String, Kind)> = got.iter().map(|(i, k, _)| (i, *k)).collect();
        let want: Vec<(&String, Kind)> = want.iter().map(|(i, k)| (*i, *k)).collect();
        assert_eq!(ids, want);
        // Every event carries the pod's status (kubelet drops events without it).
        for (_, _, event) in &got {
            let status = event.pod_sandbox_status.as_ref().unwrap();
            assert_eq!(status.metadata.as_ref().unwrap().uid, "uid-evented");
            assert!(event.created_at > 0);
        }
        // The stop event's statuses are those after the exit.
        let stopped = &got[4].2;
        let c = &stopped.containers_statuses[0];
        assert_eq!((c.id.as_str(), c.exit_code), (id.as_str(), 3));
        assert_eq!(c.state, pb::ContainerState::ContainerExited as i32);
        assert!(
            got[5].2.containers_statuses.is_empty(),
            "deleted is gone from the list"
        );
        let ready = pb::PodSandboxState::SandboxReady as i32;
        assert_eq!(got[1].2.pod_sandbox_status.as_ref().unwrap().state, ready);
        assert_ne!(got[6].2.pod_sandbox_status.as_ref().unwrap().state, ready);
    }
}

#[tokio::test]
async fn pod_status_lists_its_containers_without_a_timestamp() {
    let mut e = Env::start().await;
    let pod = e.pod("with-containers").await;
    let id = e.run(&pod, e.config("main", &["sleep", "600"])).await;
    let r =
        e.c.pod_sandbox_status(pb::PodSandboxStatusRequest {
            pod_sandbox_id: pod.0.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.containers_statuses.len(), 1);
    assert_eq!(r.containers_statuses[0].id, id);
    assert_eq!(
        r.containers_statuses[0].state,
        pb::ContainerState::ContainerRunning as i32
    );
    // No timestamp: with one, kubelet 1.37 (EventedPLEG) restarts finished init containers
    // (tests/kubelet.rs runs one).
    assert_eq!(r.timestamp, 0);
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn an_exit_during_a_daemon_restart_reaches_the_reconnecting_subscriber() {
    let mut e = Env::start().await;
    let pod = e.pod("restart").await;
    let id = e
        .run(&pod, e.config("quits", &["sh", "-c", "sleep 2; exit 4"]))
        .await;
    e.d.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await;
    e.relaunch().await;
    let mut events = subscribe(&e).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (who, kind, event) = next(&mut events, 1).await.remove(0);
        if who == id && kind == Kind::ContainerStoppedEvent {
            assert_eq!(event.containers_statuses[0].exit_code, 4);
            break;
        }
        assert!(Instant::now() < deadline, "no STOPPED event for {id}");
    }
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}
