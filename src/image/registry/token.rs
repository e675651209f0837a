//! The identity-token flow (Docker's OAuth2 refresh token): the registry's `/v2/` answers 401
//! with a `Bearer realm=...,service=...` challenge; the refresh token is posted to the realm
//! (`grant_type=refresh_token`) and the access token it returns is used as a bearer token.
//! oci-client has no such flow, so this small part is done with reqwest directly.

use super::endpoint::Endpoint;
use super::http::{FetchError, transport};
use crate::image::PullError;

/// A token response is a few kilobytes of JSON.
const MAX_TOKEN_RESPONSE: usize = 1 << 20;

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
        .get(format!("{scheme}://{host}/v2/"))
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
        Err(FetchError::TooLarge { .. }) => return Err(no_token()),
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
    #[derive(serde::Deserialize)]
    struct TokenResponse {
        access_token: Option<String>,
        token: Option<String>,
    }
    let body: TokenResponse = serde_json::from_slice(&resp.body).map_err(|_| no_token())?;
    body.access_token.or(body.token).ok_or_else(no_token)
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
