//! The `crust` command: `serve` runs the daemon, `monitor` is the per-pod monitor the daemon
//! spawns (never run by hand), `check` inspects the host, `diagnose` says why a pod or container is unhealthy, `config default|dump` print the
//! default and the effective configuration, `image import|ls` work on the image store directly
//! (with or without a running daemon), `version` prints the version.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use crust::config::layers::{LoadRequest, Loaded};
use crust::config::{Config, LogFormat, Overrides};

#[derive(Parser)]
#[command(
    name = "crust",
    version,
    about = "A Kubernetes container runtime (CRI v1)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Default)]
struct DaemonArgs {
    /// Configuration file (default /etc/crust/config.toml when it exists); the *.toml files of
    /// the config.d directory beside it apply after it, in lexical order.
    #[arg(long)]
    config: Option<PathBuf>,
    /// CRI endpoint: unix:///path or /path.
    #[arg(long)]
    listen: Option<String>,
    /// Persistent data directory.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Runtime state directory.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Log filter, e.g. info, debug, crust=debug.
    #[arg(long)]
    log_level: Option<String>,
    /// Log format.
    #[arg(long, value_parser = parse_format)]
    log_format: Option<LogFormat>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve CRI on the unix socket.
    Serve(DaemonArgs),
    /// Check that this host can run crust, and print what is missing.
    Check(DaemonArgs),
    /// Print the default configuration, or the effective one with where each value came from.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Work on the image store directly (safe while the daemon runs: it sees the changes).
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// Say why a pod or container is unhealthy: the cause first, then the pod, its containers,
    /// the pod's history, the node and the runtime. Reads crust's records (works while the
    /// daemon is down).
    Diagnose {
        /// A container id or unique prefix, a sandbox id or unique prefix, or a pod's
        /// namespace/name.
        target: String,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        args: DaemonArgs,
    },
    /// Print the version.
    Version,
    /// The per-pod monitor (started by the daemon).
    #[command(hide = true)]
    Monitor {
        #[arg(long)]
        sandbox: String,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Every key with its default value and a comment (what the package installs as
    /// /etc/crust/config.toml).
    Default,
    /// The effective configuration, each value with its origin: the running daemon's (what it
    /// loaded at start or at its last reload) when one runs, else what the files and flags give.
    Dump {
        /// What the files and flags give now, even while a daemon runs.
        #[arg(long)]
        files: bool,
        #[command(flatten)]
        args: DaemonArgs,
    },
}

#[derive(Subcommand)]
enum ImageCommand {
    /// Load images from an OCI image layout directory, an OCI archive or a docker archive.
    Import {
        /// The layout directory or archive file.
        path: PathBuf,
        /// Repository for images the archive names only by tag (or not at all), e.g.
        /// registry.example/app or registry.example/app:1.0.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        args: DaemonArgs,
    },
    /// List stored images.
    Ls {
        /// Print image ids only.
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        args: DaemonArgs,
    },
}

fn parse_format(s: &str) -> Result<LogFormat, String> {
    match s {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!("{s:?} is not text or json")),
    }
}

fn main() {
    // The monitor must stay single-threaded and small: dispatch to it before anything else runs
    // (argument parsing included; its one flag, --sandbox, only names it in `ps`).
    if std::env::args_os().nth(1).is_some_and(|a| a == "monitor") {
        std::process::exit(crust::monitor::run());
    }
    let cli = Cli::parse();
    if let Err(e) = run(cli.command) {
        eprintln!("crust: {}", render(&e));
        std::process::exit(1);
    }
}

/// The error and its causes on one line. crust's errors already name their cause in their own
/// message (gRPC clients see only that), so a cause already said is not said again.
fn render(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain().map(ToString::to_string) {
        if !out.contains(&cause) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&cause);
        }
    }
    out
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => {
            let loaded = load_layers(args)?;
            let c = &loaded.config;
            let log = crust::logging::init(&c.log_level, c.log_format)?;
            #[cfg(debug_assertions)]
            crust::failpoint::arm().map_err(anyhow::Error::msg)?;
            crust::daemon::run(loaded, Some(log))?;
        }
        Command::Config { command } => config_command(command)?,
        Command::Check(args) => {
            let loaded = load_layers(args)?;
            let problems = crust::check::run(&loaded);
            if !problems.is_empty() {
                anyhow::bail!("{} problem(s) found", problems.len());
            }
        }
        Command::Image { command } => image_command(command)?,
        Command::Diagnose { target, json, args } => {
            let config = load(args)?;
            let inputs = crust::diagnose::Inputs::from_config(&config);
            let report = crust::diagnose::diagnose(&inputs, &target)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", crust::diagnose::text(&report));
            }
        }
        Command::Version => println!("crust {}", env!("CARGO_PKG_VERSION")),
        Command::Monitor { .. } => unreachable!("dispatched in main"),
    }
    Ok(())
}

fn config_command(command: ConfigCommand) -> anyhow::Result<()> {
    match command {
        ConfigCommand::Default => print!("{}", crust::config::DEFAULT_TOML),
        ConfigCommand::Dump { files, args } => {
            // The running daemon's state directory: the flag's, else the files' (when they
            // load), else the default.
            let flag_state = args.state.clone();
            let loaded = load_layers(args);
            let state = flag_state
                .or_else(|| loaded.as_ref().ok().map(|l| l.config.state.clone()))
                .unwrap_or_else(|| Config::default().state);
            let running = (!files)
                .then(|| crust::daemon::running_config(&state))
                .flatten();
            match (loaded, running) {
                (Ok(loaded), running) => {
                    print!("{}", crust::config::dump::report(&loaded, running.as_ref()))
                }
                (Err(e), Some(running)) => {
                    let why = render(&e);
                    print!(
                        "{}",
                        crust::config::dump::report_running(&running, Err(&why))
                    );
                }
                (Err(e), None) => return Err(e),
            }
        }
    }
    Ok(())
}

fn image_command(command: ImageCommand) -> anyhow::Result<()> {
    use crust::image::{ImageSettings, Images};
    // Warnings (an archive naming no image, content skipped) reach the operator on stderr.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn,libcgroups=error"))
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match command {
        ImageCommand::Import { path, name, args } => {
            let config = load(args)?;
            let images = Images::open(ImageSettings::from_config(&config), false)?;
            // Held for the whole import: the daemon's garbage collection and record writes wait,
            // and it reloads the records when the generation file changes.
            images.hold_store_lock()?;
            let imported = runtime.block_on(images.import(&path, name.as_deref()))?;
            for r in &imported {
                let names = if r.repo_tags.is_empty() {
                    "<untagged> (name it with --name REPO[:TAG])".to_owned()
                } else {
                    r.repo_tags.join(", ")
                };
                println!("imported {} {names}", r.id);
            }
            if imported.is_empty() {
                anyhow::bail!("{} holds no images", path.display());
            }
        }
        ImageCommand::Ls { quiet, args } => {
            let config = load(args)?;
            let images = Images::open(ImageSettings::from_config(&config), false)?;
            let list = images.list(None)?;
            if !quiet {
                println!(
                    "{:<60} {:<20} {:<13} {:>10}",
                    "IMAGE", "TAG", "IMAGE ID", "SIZE"
                );
            }
            for v in list {
                if quiet {
                    println!("{}", v.record.id);
                    continue;
                }
                let mut names: Vec<(String, String)> = v
                    .record
                    .repo_tags
                    .iter()
                    .filter_map(|t| {
                        t.rsplit_once(':')
                            .map(|(r, t)| (r.to_owned(), t.to_owned()))
                    })
                    .collect();
                if names.is_empty() {
                    names.push(("<none>".into(), "<none>".into()));
                }
                for (repo, tag) in names {
                    println!(
                        "{repo:<60} {tag:<20} {:<13} {:>10}",
                        v.record.id.short(),
                        human(v.record.size)
                    );
                }
            }
        }
    }
    Ok(())
}

fn human(bytes: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < units.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.1}{}", units[i])
    }
}

fn load(a: DaemonArgs) -> anyhow::Result<Config> {
    load_layers(a).map(|l| l.config)
}

/// The configuration files and flags, with where each value came from.
fn load_layers(a: DaemonArgs) -> anyhow::Result<Loaded> {
    let overrides = Overrides {
        listen: a.listen,
        root: a.root,
        state: a.state,
        log_level: a.log_level,
        log_format: a.log_format,
    };
    crust::config::layers::load(LoadRequest {
        path: a.config,
        overrides,
    })
    .context("loading configuration")
}
