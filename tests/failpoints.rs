//! The daemon killed (SIGKILL, from inside: a failpoint of the debug build) after each step of
//! PullImage, RunPodSandbox, CreateContainer, StartContainer, RemoveContainer, StopPodSandbox
//! and RemovePodSandbox: every name in `crust::failpoint::NAMES`, so a new failpoint is tried
//! without anyone listing it here. After a restart without it, every object is either there,
//! answering its status and stopping and removing cleanly, or gone; a second Stop and Remove
//! succeed, and nothing is left: no sandbox or container directory, namespace pin, mount under
//! the root, monitor, pod cgroup (v1 or v2), IP, veth, or half-stored image content.

mod common;

use std::time::Instant;

use common::crash::{assert_killed_at, assert_nothing_left, converge, env_with_second_image, life};

#[tokio::test]
async fn the_daemon_killed_after_any_step_of_any_verb_leaves_nothing_half_done() {
    assert!(
        !crust::failpoint::NAMES.is_empty(),
        "a debug build lists its failpoints"
    );
    let (mut env, image2, baseline) = env_with_second_image().await;

    // CRUST_TEST_FAILPOINT narrows the run to one failpoint while debugging.
    let only = std::env::var("CRUST_TEST_FAILPOINT").ok();
    let started = Instant::now();
    let mut tried = 0;
    for (n, &name) in crust::failpoint::NAMES.iter().enumerate() {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        env.d.kill9();
        env.d.launch_with(&[("CRUST_FAILPOINT", name)]);
        let result = life(&env, &image2, &format!("fp{n}")).await;
        assert!(result.is_err(), "{name}: never reached");
        assert_killed_at(&mut env, name, &format!("failpoint {name} reached"));
        env.d.launch();
        let survived = converge(&env, &image2, name).await;
        assert_nothing_left(&env, &baseline, name);
        eprintln!("{name}: killed; after restart: {survived:?}; nothing left");
        tried += 1;
    }
    eprintln!(
        "failpoints: {tried} crashes survived in {:?}, leaks found: 0",
        started.elapsed()
    );
    assert!(tried > 0, "no failpoint was tried");
}

/// A pod's monitor killed (SIGKILL) while the pod starts, while a container is created in it
/// and while one starts: the verb fails with a code that says why and names its step, the
/// daemon serves on, and everything is undone or removable.
#[tokio::test]
async fn a_monitor_killed_mid_start_fails_the_verb_cleanly_and_leaks_nothing() {
    let (mut env, image2, baseline) = env_with_second_image().await;
    for (n, &name) in crust::failpoint::MONITOR_NAMES.iter().enumerate() {
        env.d.kill9();
        env.d.launch_with(&[("CRUST_FAILPOINT", name)]);
        let err = life(&env, &image2, &format!("mon{n}"))
            .await
            .expect_err(name);
        eprintln!("{name}: {:?}: {}", err.code(), err.message());
        assert!(
            !matches!(err.code(), tonic::Code::Internal | tonic::Code::Unknown),
            "{name}: {err:?}"
        );
        assert!(
            err.message().contains("monitor"),
            "{name}: the message names the monitor: {err:?}"
        );
        let child = env.d.child.as_mut().expect("daemon running");
        assert!(
            child.try_wait().unwrap().is_none(),
            "{name}: the daemon lives"
        );
        let survived = converge(&env, &image2, name).await;
        assert_nothing_left(&env, &baseline, name);
        eprintln!("{name}: then {survived:?}; nothing left");
    }
    env.d.kill9();
    env.d.launch();
    life(&env, &image2, "after").await.unwrap();
    assert_nothing_left(&env, &baseline, "after");
}
