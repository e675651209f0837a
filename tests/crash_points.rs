//! The daemon killed right after every durable step of every verb, one step per run: no one
//! chooses where. Every change the daemon makes to the node (a directory, a file, a record, a
//! mount, a cgroup, a CNI ADD or DEL, a call its monitor answered) goes through
//! `crust::durable`, which `tests/architecture.rs` enforces, and each is a crash point of the
//! debug build: `CRUST_CRASH=<Method>:<N>` kills the daemon right after the Nth durable step
//! taken once the first `<Method>` RPC arrived (`:0` only logs them).
//!
//! For each verb of a pod's life (PullImage, RunPodSandbox, CreateContainer, StartContainer,
//! StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox, RemoveImage) a traced run
//! counts its steps; then for each step N the daemon is started armed at N, brought to the
//! verb (the verbs before it, uncounted), killed inside it, and started again. Then:
//! - what it lists answers its status, and a retry of the verb succeeds (or finds its object
//!   listed whole: the name is taken by what is listed, never by a ghost);
//! - everything it lists stops and removes cleanly, twice;
//! - nothing is left: no record, directory, namespace pin, mount, monitor, cgroup, address,
//!   veth or image content that no listed object owns.
//!
//! RemoveContainer returns before the reclaim of what the container held: the traced run
//! waits for the reclaim's end, so its steps are counted and each is killed at like the rest
//! (the call may have returned by then); the restarted daemon finishes the reclaim.
//!
//! The output lists each crash point it killed at (verb, step, kind, path, source line), how
//! many, and the source lines no verb reached.

mod common;

use std::collections::BTreeSet;
use std::time::Instant;

use common::crash::{assert_killed_at, assert_nothing_left, converge, env_with_second_image};
use common::workload::Env;
use common::*;
use crust::cri::pb;

/// The verbs, in the order of a pod's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verb {
    PullImage,
    RunPodSandbox,
    CreateContainer,
    StartContainer,
    StopContainer,
    RemoveContainer,
    StopPodSandbox,
    RemovePodSandbox,
    RemoveImage,
}

use Verb::*;

impl Verb {
    const ALL: [Verb; 9] = [
        PullImage,
        RunPodSandbox,
        CreateContainer,
        StartContainer,
        StopContainer,
        RemoveContainer,
        StopPodSandbox,
        RemovePodSandbox,
        RemoveImage,
    ];

    /// What must have happened before the verb (in life order), run uncounted.
    fn before(self) -> &'static [Verb] {
        match self {
            PullImage => &[],
            RunPodSandbox => &[PullImage],
            CreateContainer => &[PullImage, RunPodSandbox],
            StartContainer => &[PullImage, RunPodSandbox, CreateContainer],
            StopContainer => &[PullImage, RunPodSandbox, CreateContainer, StartContainer],
            RemoveContainer => &[
                PullImage,
                RunPodSandbox,
                CreateContainer,
                StartContainer,
                StopContainer,
            ],
            // A pod with a running container: what kubelet stops most of the time.
            StopPodSandbox => &[PullImage, RunPodSandbox, CreateContainer, StartContainer],
            RemovePodSandbox => &[
                PullImage,
                RunPodSandbox,
                CreateContainer,
                StartContainer,
                StopPodSandbox,
            ],
            RemoveImage => &[PullImage],
        }
    }

    fn method(self) -> String {
        format!("{self:?}")
    }

    /// The verb returns before some of its steps: RemoveContainer leaves the reclaim of what
    /// the container held (unmounts, writable layer, cgroup, image holds) to the background.
    fn defers(self) -> bool {
        self == RemoveContainer
    }
}

/// Waits for the steps `verb` left to the background after it returned (their last one says
/// so in the log, after `from`): the traced run counts them too.
async fn settled(env: &Env, verb: Verb, from: usize) {
    if !verb.defers() {
        return;
    }
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while !env.d.log()[from..].contains("container reclaimed") {
        assert!(
            Instant::now() < deadline,
            "{verb:?}: its reclaim did not end within 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The objects a run made so far.
#[derive(Default)]
struct World {
    pod: Option<(String, pb::PodSandboxConfig)>,
    ctr: Option<String>,
}

struct Life<'a> {
    image: &'a str,
    name: String,
}

impl Life<'_> {
    fn spec(&self) -> Option<pb::ImageSpec> {
        Some(pb::ImageSpec {
            image: self.image.into(),
            ..Default::default()
        })
    }

    async fn run(&self, env: &Env, verb: Verb, w: &mut World) -> Result<(), tonic::Status> {
        let mut c = env.d.client().await;
        let mut images = env.d.images().await;
        let pod_id = || w.pod.as_ref().map(|p| p.0.clone()).unwrap_or_default();
        let ctr = || w.ctr.clone().unwrap_or_default();
        match verb {
            PullImage => {
                images
                    .pull_image(pb::PullImageRequest {
                        image: self.spec(),
                        ..Default::default()
                    })
                    .await?;
            }
            RunPodSandbox => {
                let mut config = pod_config(&self.name);
                config.log_directory = env
                    .d
                    .dir
                    .join("logs")
                    .join(&self.name)
                    .display()
                    .to_string();
                let id = c
                    .run_pod_sandbox(run_request(config.clone()))
                    .await?
                    .into_inner()
                    .pod_sandbox_id;
                w.pod = Some((id, config));
            }
            CreateContainer => {
                let (id, config) = w.pod.clone().unwrap_or_default();
                let mut ctr = env.config("c", &["sleep", "60"]);
                ctr.image = self.spec();
                let made = c
                    .create_container(pb::CreateContainerRequest {
                        pod_sandbox_id: id,
                        config: Some(ctr),
                        sandbox_config: Some(config),
                    })
                    .await?
                    .into_inner()
                    .container_id;
                w.ctr = Some(made);
            }
            StartContainer => {
                c.start_container(pb::StartContainerRequest {
                    container_id: ctr(),
                })
                .await?;
            }
            StopContainer => {
                c.stop_container(pb::StopContainerRequest {
                    container_id: ctr(),
                    timeout: 0,
                })
                .await?;
            }
            RemoveContainer => {
                c.remove_container(pb::RemoveContainerRequest {
                    container_id: ctr(),
                })
                .await?;
            }
            StopPodSandbox => {
                c.stop_pod_sandbox(pb::StopPodSandboxRequest {
                    pod_sandbox_id: pod_id(),
                })
                .await?;
            }
            RemovePodSandbox => {
                c.remove_pod_sandbox(pb::RemovePodSandboxRequest {
                    pod_sandbox_id: pod_id(),
                })
                .await?;
            }
            RemoveImage => {
                images
                    .remove_image(pb::RemoveImageRequest { image: self.spec() })
                    .await?;
            }
        }
        Ok(())
    }

    async fn run_all(&self, env: &Env, verbs: &[Verb], w: &mut World) {
        for &v in verbs {
            self.run(env, v, w)
                .await
                .unwrap_or_else(|e| panic!("{}: {v:?} before the verb: {e:?}", self.name));
        }
    }
}

/// The crash points a traced run of `verb` logged: "kind what at file:line", in order.
fn traced(log: &str, verb: Verb) -> Vec<String> {
    let prefix = format!("crash point {}#", verb.method());
    log.lines()
        .filter_map(|l| l.split_once(&prefix).map(|(_, rest)| rest))
        .filter(|rest| !rest.contains(" reached: "))
        .filter_map(|rest| rest.split_once(": ").map(|(_, what)| what.to_owned()))
        .collect()
}

/// After a crash inside `verb` and a restart: a retry of the verb succeeds, or finds its
/// object listed whole.
async fn retry(env: &Env, life: &Life<'_>, verb: Verb, w: &mut World, point: &str) {
    let mut c = env.d.client().await;
    match verb {
        RunPodSandbox => {
            let pods = c
                .list_pod_sandbox(pb::ListPodSandboxRequest::default())
                .await
                .unwrap()
                .into_inner()
                .items;
            match pods
                .iter()
                .find(|p| p.metadata.as_ref().is_some_and(|m| m.name == life.name))
            {
                Some(p) => {
                    let err = life
                        .run(env, verb, &mut World::default())
                        .await
                        .expect_err(point);
                    assert!(
                        err.message().contains(&p.id),
                        "{point}: a retry names the listed pod: {err:?}"
                    );
                }
                None => life
                    .run(env, verb, w)
                    .await
                    .unwrap_or_else(|e| panic!("{point}: retry: {e:?}")),
            }
        }
        CreateContainer => {
            let listed = c
                .list_containers(pb::ListContainersRequest::default())
                .await
                .unwrap()
                .into_inner()
                .containers;
            match listed.first() {
                Some(ctr) => {
                    let err = life
                        .run(
                            env,
                            verb,
                            &mut World {
                                pod: w.pod.clone(),
                                ctr: None,
                            },
                        )
                        .await
                        .expect_err(point);
                    assert!(
                        err.message().contains(&ctr.id),
                        "{point}: a retry names the listed container: {err:?}"
                    );
                }
                None => life
                    .run(env, verb, w)
                    .await
                    .unwrap_or_else(|e| panic!("{point}: retry: {e:?}")),
            }
        }
        StartContainer => {
            let s = c
                .container_status(pb::ContainerStatusRequest {
                    container_id: w.ctr.clone().unwrap_or_default(),
                    verbose: false,
                })
                .await
                .unwrap_or_else(|e| panic!("{point}: the container is listed: {e:?}"))
                .into_inner()
                .status
                .unwrap();
            if s.state == pb::ContainerState::ContainerCreated as i32 {
                life.run(env, verb, w)
                    .await
                    .unwrap_or_else(|e| panic!("{point}: retry: {e:?}"));
            } else {
                assert_eq!(
                    s.state,
                    pb::ContainerState::ContainerRunning as i32,
                    "{point}: started or not, never half"
                );
            }
        }
        // The others are idempotent: a retry finishes what the crash cut short.
        _ => life
            .run(env, verb, w)
            .await
            .unwrap_or_else(|e| panic!("{point}: retry: {e:?}")),
    }
}

/// Every crash point of `verbs`, each in turn; returns the source lines reached.
async fn sweep(verbs: &[Verb]) -> BTreeSet<String> {
    let (mut env, image, baseline) = env_with_second_image().await;
    let started = Instant::now();
    let mut reached = BTreeSet::new();
    let mut killed = 0;
    for &verb in verbs {
        // A traced run: how many durable steps the verb takes, and which.
        env.d.kill9();
        env.d
            .launch_with(&[("CRUST_CRASH", &format!("{}:0", verb.method()))]);
        let life = Life {
            image: &image,
            name: format!("trace-{verb:?}"),
        };
        let mut w = World::default();
        life.run_all(&env, verb.before(), &mut w).await;
        let log_before = env.d.log().len();
        life.run(&env, verb, &mut w)
            .await
            .unwrap_or_else(|e| panic!("{verb:?} traced: {e:?}"));
        settled(&env, verb, log_before).await;
        let points = traced(&env.d.log()[log_before..], verb);
        assert!(!points.is_empty(), "{verb:?} took no durable step");
        converge(&env, &image, &format!("{verb:?} traced")).await;
        assert_nothing_left(&env, &baseline, &format!("{verb:?} traced"));
        for (n, point) in points.iter().enumerate() {
            let step = n + 1;
            let label = format!("{verb:?}#{step} ({point})");
            env.d.kill9();
            env.d
                .launch_with(&[("CRUST_CRASH", &format!("{}:{step}", verb.method()))]);
            let life = Life {
                image: &image,
                name: format!("{verb:?}-{step}").to_lowercase(),
            };
            let mut w = World::default();
            life.run_all(&env, verb.before(), &mut w).await;
            let result = life.run(&env, verb, &mut w).await;
            // A step left to the background may come after the verb returned.
            assert!(
                result.is_err() || verb.defers(),
                "{label}: the verb ended before its step {step}"
            );
            assert_killed_at(
                &mut env,
                &label,
                &format!("crash point {}#{step} reached", verb.method()),
            );
            let said = env.d.log();
            let at = said
                .lines()
                .find_map(|l| {
                    l.split_once(&format!("crash point {}#{step} reached: ", verb.method()))
                })
                .map(|(_, rest)| rest.trim_end_matches(": killing this process").to_owned())
                .unwrap_or_default();
            env.d.launch();
            retry(&env, &life, verb, &mut w, &label).await;
            let survived = converge(&env, &image, &label).await;
            assert_nothing_left(&env, &baseline, &label);
            eprintln!(
                "crash point {verb:?}#{step}: {at}; after restart: {survived:?}; nothing left"
            );
            if let Some((_, place)) = at.rsplit_once(" at ") {
                reached.insert(place.to_owned());
            }
            killed += 1;
        }
    }
    eprintln!(
        "crash points: killed at {killed} in {:?} ({verbs:?}), leaks found: 0",
        started.elapsed()
    );
    reached
}

#[tokio::test]
async fn killed_after_any_durable_step_of_a_pod_the_daemon_leaves_nothing_half_done() {
    sweep(&[RunPodSandbox, StopPodSandbox, RemovePodSandbox]).await;
}

#[tokio::test]
async fn killed_after_any_durable_step_of_a_container_the_daemon_leaves_nothing_half_done() {
    sweep(&[
        CreateContainer,
        StartContainer,
        StopContainer,
        RemoveContainer,
    ])
    .await;
}

#[tokio::test]
async fn killed_after_any_durable_step_of_an_image_the_daemon_leaves_nothing_half_done() {
    sweep(&[PullImage, RemoveImage]).await;
}

#[test]
fn every_verb_is_swept() {
    let swept: BTreeSet<Verb> = [
        RunPodSandbox,
        StopPodSandbox,
        RemovePodSandbox,
        CreateContainer,
        StartContainer,
        StopContainer,
        RemoveContainer,
        PullImage,
        RemoveImage,
    ]
    .into_iter()
    .collect();
    assert_eq!(swept, Verb::ALL.into_iter().collect());
}
