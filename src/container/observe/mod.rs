//! What clients read about containers, never waiting on a lifecycle verb: the event stream for
//! GetContainerEvents (`events`), statistics and pod metrics (`stats`), status and listing
//! (`status`).

pub mod events;
pub mod stats;
pub mod status;
