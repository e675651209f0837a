//! What the error stream (SPDY) or channel (WebSocket) says when a command ends. v4 and v5
//! send a Kubernetes `Status` as JSON every time: `Success`, or `Failure` with reason
//! `NonZeroExitCode` and a cause of type `ExitCode` holding the code (which kubectl and
//! crictl turn into their own exit code), or `InternalError`. Older protocols send only a
//! failure's message, as text.

use serde::Serialize;

/// How an exec or attach ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    ExitCode(i32),
    Error(String),
}

impl Outcome {
    pub fn from_exit_code(code: i32) -> Outcome {
        if code == 0 {
            Outcome::Success
        } else {
            Outcome::ExitCode(code)
        }
    }
}

#[derive(Serialize)]
struct Status {
    status: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

#[derive(Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(Serialize)]
struct Cause {
    reason: &'static str,
    message: String,
}

fn message(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Success => String::new(),
        Outcome::ExitCode(code) => {
            format!("command terminated with non-zero exit code: exit status {code}")
        }
        Outcome::Error(e) => format!("Internal error occurred: {e}"),
    }
}

/// The v4/v5 error-stream payload.
pub fn status_json(outcome: &Outcome) -> Vec<u8> {
    let status = match outcome {
        Outcome::Success => Status {
            status: "Success",
            message: String::new(),
            reason: "",
            details: None,
            code: None,
        },
        Outcome::ExitCode(code) => Status {
            status: "Failure",
            message: message(outcome),
            reason: "NonZeroExitCode",
            details: Some(Details {
                causes: vec![Cause {
                    reason: "ExitCode",
                    message: code.to_string(),
                }],
            }),
            code: None,
        },
        Outcome::Error(_) => Status {
            status: "Failure",
            message: message(outcome),
            reason: "InternalError",
            details: None,
            code: Some(500),
        },
    };
    serde_json::to_vec(&status).unwrap_or_default()
}

/// The error-stream payload for `outcome` in the negotiated protocol: JSON for v4 and later,
/// else the bare failure message (nothing on success).
pub fn error_stream_payload(outcome: &Outcome, json: bool) -> Vec<u8> {
    if json {
        status_json(outcome)
    } else {
        message(outcome).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_look_like_kubelets() {
        assert_eq!(
            String::from_utf8(status_json(&Outcome::Success)).unwrap(),
            r#"{"status":"Success"}"#
        );
        let v: serde_json::Value =
            serde_json::from_slice(&status_json(&Outcome::ExitCode(3))).unwrap();
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "3");
        let v: serde_json::Value =
            serde_json::from_slice(&status_json(&Outcome::Error("boom".into()))).unwrap();
        assert_eq!(v["reason"], "InternalError");
        assert_eq!(v["code"], 500);
        assert!(error_stream_payload(&Outcome::Success, false).is_empty());
        assert!(
            String::from_utf8(error_stream_payload(&Outcome::ExitCode(2), false))
                .unwrap()
                .contains("exit status 2")
        );
        assert_eq!(Outcome::from_exit_code(0), Outcome::Success);
    }
}
