//! The streaming server: exec, attach and port-forward over SPDY/3.1 and WebSocket, as
//! kubelet, kubectl and crictl speak them.
pub mod spdy;
