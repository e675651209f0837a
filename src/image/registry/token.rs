//! Tokens: the registry's `/v2/` answers 401 with a `Bearer realm=...,service=...` challenge,
//! and the realm hands out a token for pulling one repository (`authorize`, the distribution
//! spec's token flow, with basic credentials when there are any); or a refresh token is posted
//! to the realm (`grant_type=refresh_token`, Docker's OAuth2 identity-token flow: `exchange`)
//! and the access token it returns is used as a bearer token.
//!
//! The realm is whatever host the registry names, so its answers are read as any registry
//! answer is: a token response of at most `MAX_TOKEN_RESPONSE` bytes, an error body of at most
//! 64 KiB, `/v2/`'s own body not at all. (oci-client's flow, used before, read the token
//! response whole: a realm streaming without end swelled the daemon on every pull.)

use bytes::Bytes;

use super::endpoint::Endpoint;
use super::http::{FetchError, transport};
use crate::image::PullError;

/// A token response is a few kilobytes of JSON.
const MAX_TOKEN_RESPONSE: usize = 1 << 20;

/// The rest of the sentence after the registry when `realm` sent a token response over the cap.
pub fn too_large(realm: &str) -> String {
    format!(
        "named a token realm ({}) that answered with more than {} MiB, the cap on a token response",
        super::http::clip(realm),
        MAX_TOKEN_RESPONSE >> 20
    )
}

/// What the registry's token flow gave for a pull.
#[derive(Debug)]
pub enum Authorized {
    /// `/v2/` asked for no token (no challenge, or a basic one): basic credentials, if any,
    /// go with each request as they are.
    NoToken,
    Token(String),
    /// The token endpoint refused: its status and the start of its body.
    Refused {
        status: u16,
        body: Bytes,
    },
}

#[derive(Debug)]
pub enum AuthorizeError {
    Transport(reqwest::Error),
    /// A token response over `MAX_TOKEN_RESPONSE` from this realm.
    TooLarge {
        realm: String,
    },
    /// A successful token response without a token in it.
    NoToken,
}

/// Asks the registry's ping URL (`scheme://host/v2/`) how to pull `repo`, and its token realm,
/// if it names one, for a token (sending `basic` credentials there when given).
pub async fn authorize(
    client: &reqwest::Client,
    ping_url: &str,
    repo: &str,
    basic: Option<(&str, &str)>,
) -> Result<Authorized, AuthorizeError> {
    let ping = client
        .get(ping_url)
        .send()
        .await
        .map_err(AuthorizeError::Transport)?;
    let challenge = ping
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_bearer_challenge);
    // Its body is never read: dropping the answer closes the connection under it.
    drop(ping);
    let Some(challenge) = challenge else {
        return Ok(Authorized::NoToken);
    };
    let scope = format!("repository:{repo}:pull");
    let mut query = vec![("scope", scope.as_str())];
    if let Some(s) = &challenge.service {
        query.push(("service", s));
    }
    let mut rb = client.get(&challenge.realm).query(&query);
    if let Some((user, password)) = basic {
        rb = rb.basic_auth(user, Some(password));
    }
    let resp = match super::http::fetch(rb, MAX_TOKEN_RESPONSE).await {
        Ok(r) => r,
        Err(FetchError::Transport(e)) => return Err(AuthorizeError::Transport(e)),
        Err(FetchError::TooLarge { .. }) => {
            return Err(AuthorizeError::TooLarge {
                realm: challenge.realm,
            });
        }
    };
    if !resp.status.is_success() {
        return Ok(Authorized::Refused {
            status: resp.status.as_u16(),
            body: resp.body,
        });
    }
    token_of(&resp.body)
        .map(Authorized::Token)
        .ok_or(AuthorizeError::NoToken)
}

/// The token of a token response (`token`, or OAuth2's `access_token`).
fn token_of(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct TokenResponse {
        access_token: Option<String>,
        token: Option<String>,
    }
    let body: TokenResponse = serde_json::from_slice(body).ok()?;
    body.token.or(body.access_token).filter(|t| !t.is_empty())
}

/// Exchanges `refresh_token` for an access token for pulling `repo` from `ep`, with `client`
/// (which carries the endpoint's TLS settings and timeouts).
pub async fn exchange(
    client: &reqwest::Client,
    ep: &Endpoint,
    repo: &str,
    refresh_token: &str,
) -> Result<String, PullError> {
    let registry = ep.to_string();
    let unreachable = |e: reqwest::Error| PullError::Unreachable {
        registry: registry.clone(),
        detail: transport(&e, ep),
    };
    let no_token = || PullError::Registry {
        registry: ep.to_string(),
        detail: "answered the identity-token exchange without a token".into(),
    };
    let host = super::reference::api_host(&ep.host);
    let scheme = if ep.plain_http { "http" } else { "https" };
    let resp = client
        .get(format!("{scheme}://{host}{}", ep.ping_path()))
        .send()
        .await
        .map_err(unreachable)?;
    let challenge = resp
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_bearer_challenge)
        .ok_or_else(|| PullError::Unauthenticated {
            registry: registry.clone(),
            detail: "offers no bearer token endpoint, so an identity token cannot be used".into(),
        })?;
    let scope = format!("repository:{repo}:pull");
    let mut form = vec![
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
        ("client_id", "crust"),
        ("scope", scope.as_str()),
    ];
    if let Some(s) = &challenge.service {
        form.push(("service", s));
    }
    let rb = client.post(&challenge.realm).form(&form);
    let resp = match super::http::fetch(rb, MAX_TOKEN_RESPONSE).await {
        Ok(r) => r,
        Err(FetchError::Transport(e)) => return Err(unreachable(e)),
        Err(FetchError::TooLarge { .. }) => {
            return Err(PullError::Registry {
                registry,
                detail: too_large(&challenge.realm),
            });
        }
    };
    if !resp.status.is_success() {
        return Err(PullError::Unauthenticated {
            registry,
            detail: format!(
                "rejected the identity token (HTTP {})",
                resp.status.as_u16()
            ),
        });
    }
    token_of(&resp.body).ok_or_else(no_token)
}

#[derive(Debug, PartialEq)]
pub struct BearerChallenge {
    pub realm: String,
    pub service: Option<String>,
}

/// Parses `Bearer realm="https://auth/token",service="registry"` (parameters quoted or not).
pub fn parse_bearer_challenge(header: &str) -> Option<BearerChallenge> {
    let rest = header
        .trim()
        .strip_prefix("Bearer ")
        .or_else(|| header.trim().strip_prefix("bearer "))?;
    let mut realm = None;
    let mut service = None;
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let value: String = if chars.peek() == Some(&'"') {
            chars.next();
            let mut v = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => v.extend(chars.next()),
                    '"' => break,
                    c => v.push(c),
                }
            }
            v
        } else {
            chars.by_ref().take_while(|c| *c != ',').collect()
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "realm" => realm = Some(value),
            "service" => service = Some(value),
            _ => {}
        }
    }
    Some(BearerChallenge {
        realm: realm?,
        service,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse() {
        let c = parse_bearer_challenge(
            r#"Bearer realm="https://auth.example/token",service="reg",scope="x:y:pull""#,
        )
        .unwrap();
        assert_eq!(
            c,
            BearerChallenge {
                realm: "https://auth.example/token".into(),
                service: Some("reg".into())
            }
        );
        let c = parse_bearer_challenge("Bearer realm=http://a/t").unwrap();
        assert_eq!(c.realm, "http://a/t");
        assert!(parse_bearer_challenge(r#"Basic realm="x""#).is_none());
    }
}
