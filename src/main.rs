//! The `crust` command: `serve` runs the daemon, `monitor` is the per-pod monitor the daemon
//! spawns (never run by hand), `check` inspects the host, `version` prints the version.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
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
    /// Configuration file (default /etc/crust/config.toml when it exists).
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
    /// Print the version.
    Version,
    /// The per-pod monitor (started by the daemon).
    #[command(hide = true)]
    Monitor {
        #[arg(long)]
        sandbox: String,
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
    let cli = Cli::parse();
    // The monitor must stay single-threaded: dispatch to it before anything else starts.
    if let Command::Monitor { .. } = cli.command {
        std::process::exit(crust::monitor::run());
    }
    if let Err(e) = run(cli.command) {
        eprintln!("crust: {e:#}");
        std::process::exit(1);
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => {
            let config = load(args)?;
            init_tracing(&config);
            crust::daemon::run(config)?;
        }
        Command::Check(args) => {
            let config = load(args)?;
            let problems = crust::check::run(&config);
            if !problems.is_empty() {
                anyhow::bail!("{} problem(s) found", problems.len());
            }
        }
        Command::Version => println!("crust {}", env!("CARGO_PKG_VERSION")),
        Command::Monitor { .. } => unreachable!("dispatched in main"),
    }
    Ok(())
}

fn load(a: DaemonArgs) -> anyhow::Result<Config> {
    let overrides = Overrides {
        listen: a.listen,
        root: a.root,
        state: a.state,
        log_level: a.log_level,
        log_format: a.log_format,
    };
    Config::load(a.config.as_deref(), overrides).context("loading configuration")
}

fn init_tracing(config: &Config) {
    // libcgroups announces its manager at info level, and every controller this host lacks at warn level, for every cgroup it touches.
    let filter =
        tracing_subscriber::EnvFilter::new(format!("{},libcgroups=error", config.log_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
