//! The daemon's log: a tracing filter and a format (text or JSON) on stderr, both swappable
//! while it runs, so a reload can change `log_level` and `log_format` without a restart. Each
//! sits in a `reload` layer of tracing-subscriber: a swap takes a write lock the log lines
//! being written finish under, and rebuilds the callsites' cached interest, so a level turned on
//! reaches every `debug!` at once.

use std::io::IsTerminal;

use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

use crate::config::LogFormat;

type Filtered = Layered<reload::Layer<EnvFilter, Registry>, Registry>;
type Format = Box<dyn Layer<Filtered> + Send + Sync>;

/// Changes the running daemon's log filter and format.
pub struct LogHandle {
    filter: reload::Handle<EnvFilter, Registry>,
    format: reload::Handle<Format, Filtered>,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("log_level {level:?}: {msg}")]
    Filter { level: String, msg: String },
    #[error("changing the log: {0}")]
    Reload(#[from] reload::Error),
}

/// The filter for `level`: libcgroups announces its manager at info level and every controller
/// the host lacks at warn level, for every cgroup it touches, so it speaks only of errors.
fn filter(level: &str) -> Result<EnvFilter, LogError> {
    EnvFilter::try_new(format!("{level},libcgroups=error")).map_err(|e| LogError::Filter {
        level: level.to_owned(),
        msg: e.to_string(),
    })
}

fn format(format: LogFormat) -> Format {
    // Colour only for a person at a terminal; a log file or the journal gets plain text.
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => Box::new(layer),
        LogFormat::Json => Box::new(layer.json()),
    }
}

/// Installs the daemon's log as the global subscriber.
pub fn init(level: &str, log_format: LogFormat) -> Result<LogHandle, LogError> {
    let (filter_layer, filter_handle) = reload::Layer::new(filter(level)?);
    let (format_layer, format_handle) = reload::Layer::new(format(log_format));
    tracing_subscriber::registry()
        .with(filter_layer)
        .with(format_layer)
        .init();
    Ok(LogHandle {
        filter: filter_handle,
        format: format_handle,
    })
}

impl LogHandle {
    /// Logs with `level` and `log_format` from now on.
    pub fn set(&self, level: &str, log_format: LogFormat) -> Result<(), LogError> {
        let f = filter(level)?;
        self.filter.reload(f)?;
        self.format.reload(format(log_format))?;
        Ok(())
    }
}
