//! A node's answers as the core's `Response`, and redis errors as the
//! core's `NodeError` (TLS rejections included), tidied for one-line
//! reports.

use redis::{ErrorKind, RedisError, Value};
use redlock_core::{NodeError, NodeErrorKind, Response};

/// A script's return value as the core's `Response`.
pub(crate) fn map_value(value: Value) -> Response {
    match value {
        Value::Int(n) => Response::Int(n),
        Value::BulkString(bytes) => Response::Data(bytes),
        Value::Nil => Response::Nil,
        Value::Array(items) => Response::Array(items.into_iter().map(map_value).collect()),
        Value::Okay => Response::Other("status OK".to_owned()),
        Value::SimpleString(text) => Response::Other(format!("status {text}")),
        other => Response::Other(format!("{other:?}")),
    }
}

/// What a refused `AUTH` says.
pub(super) const WRONG_CREDENTIALS: &str =
    "wrong password or unknown user (the server refused AUTH)";

/// A redis error as the core's `NodeError`, classified by what the caller can do.
pub(crate) fn map_error(err: &RedisError) -> NodeError {
    if let Some(detail) = tls_rejection(err) {
        return NodeError::new(NodeErrorKind::Tls, detail);
    }
    let code = err.code().unwrap_or_default();
    let kind = match err.kind() {
        ErrorKind::AuthenticationFailed => NodeErrorKind::Auth,
        // An error reply: the core classifies it by its code.
        _ if err.code().is_some() => NodeErrorKind::from_error_code(code),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => NodeErrorKind::Protocol,
        ErrorKind::Server(_) | ErrorKind::Extension => NodeErrorKind::Server,
        ErrorKind::Io => NodeErrorKind::Connection,
        // Client-side errors (TLS setup, invalid configuration, ...): the node
        // cannot be used through this connection.
        _ => NodeErrorKind::Connection,
    };
    let detail = match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ if kind == NodeErrorKind::Protocol => {
            // Parse errors list every unexpected byte on lines of their own.
            let text = err.to_string();
            let first = text.lines().next().unwrap_or_default();
            format!("{first} (is this a Redis server?)")
        }
        // redis' own text ("Password authentication failed -
        // AuthenticationFailed") says the kind twice; one cause, once.
        _ if kind == NodeErrorKind::Auth => WRONG_CREDENTIALS.to_owned(),
        _ => err.to_string(),
    };
    NodeError::tidied(kind, &detail)
}

/// What rustls said, when `err` is a TLS handshake that either side refused
/// (an untrusted or unsuitable certificate, a missing client certificate):
/// a configuration error. A server that does not speak TLS at all (garbage
/// instead of a handshake) is not one of these: it counts as unreachable.
#[cfg(feature = "tls")]
fn tls_rejection(err: &RedisError) -> Option<String> {
    use rustls::Error as Tls;
    use std::error::Error as _;

    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;

    // redis keeps the cause in an Arc and returns the Arc as the source.
    let mut cause: &(dyn std::error::Error + 'static) = err.source()?;
    if let Some(shared) = cause.downcast_ref::<Shared>() {
        cause = shared.as_ref();
    }
    // rustls errors come either directly (building the TLS configuration)
    // or inside the io::Error of the handshake or of a later read.
    let tls = cause.downcast_ref::<Tls>().or_else(|| {
        cause
            .downcast_ref::<std::io::Error>()?
            .get_ref()?
            .downcast_ref::<Tls>()
    })?;
    match tls {
        Tls::InvalidCertificate(_)
        | Tls::NoCertificatesPresented
        | Tls::UnsupportedNameType
        | Tls::PeerIncompatible(_)
        | Tls::InconsistentKeys(_)
        | Tls::AlertReceived(_) => Some(tls.to_string()),
        _ => None,
    }
}

#[cfg(not(feature = "tls"))]
fn tls_rejection(_: &RedisError) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_map_to_responses() {
        assert_eq!(map_value(Value::Int(1)), Response::Int(1));
        assert_eq!(map_value(Value::Nil), Response::Nil);
        assert_eq!(
            map_value(Value::BulkString(b"abc".to_vec())),
            Response::Data(b"abc".to_vec())
        );
        assert!(matches!(map_value(Value::Okay), Response::Other(_)));
        assert_eq!(
            map_value(Value::Array(vec![Value::Int(1), Value::Int(7)])),
            Response::Array(vec![Response::Int(1), Response::Int(7)])
        );
        assert!(matches!(map_value(Value::Map(vec![])), Response::Other(_)));
    }

    #[test]
    fn errors_map_to_kinds() {
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(map_error(&io).kind, NodeErrorKind::Connection);
        let auth = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(map_error(&auth).kind, NodeErrorKind::Auth);
        let shown = map_error(&auth).to_string();
        assert_eq!(
            shown,
            "authentication failed: wrong password or unknown user (the server refused AUTH)"
        );
        let parse = RedisError::from((ErrorKind::Parse, "garbage"));
        assert_eq!(map_error(&parse).kind, NodeErrorKind::Protocol);
        let wrongtype =
            redis::make_extension_error("WRONGTYPE".into(), Some("Operation against a key".into()));
        assert_eq!(map_error(&wrongtype).kind, NodeErrorKind::WrongType);
        let noauth =
            redis::make_extension_error("NOAUTH".into(), Some("Authentication required.".into()));
        assert_eq!(map_error(&noauth).kind, NodeErrorKind::Auth);
        let oom = redis::make_extension_error("OOM".into(), Some("command not allowed".into()));
        assert_eq!(map_error(&oom).kind, NodeErrorKind::Server);
    }

    #[test]
    fn script_noise_is_stripped_from_node_errors() {
        // As Redis 7 words errors raised inside a script.
        let wrongtype = redis::make_extension_error(
            "WRONGTYPE".into(),
            Some(
                "Operation against a key holding the wrong kind of value script: \
                 30066d0618efaa6f4d54a3824876d45cb637d4f7, on @user_script:1."
                    .into(),
            ),
        );
        assert_eq!(
            map_error(&wrongtype).detail,
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        let script = redis::make_extension_error(
            "ERR".into(),
            Some(
                "user_script:1: Script attempted to access nonexistent global variable 'foo' \
                 script: be8e79a153b67c7996be1e272cc18cdc0e67b346, on @user_script:1."
                    .into(),
            ),
        );
        assert_eq!(
            map_error(&script).detail,
            "ERR Script attempted to access nonexistent global variable 'foo'"
        );
        let long = redis::make_extension_error("ERR".into(), Some("x\ny ".repeat(200)));
        let detail = map_error(&long).detail;
        assert!(detail.chars().count() <= 160, "{detail}");
        assert!(!detail.contains('\n'), "{detail}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn refused_handshakes_are_tls_errors_but_a_server_without_tls_is_unreachable() {
        use std::io;
        let handshake = |error: rustls::Error| {
            RedisError::from(io::Error::new(io::ErrorKind::InvalidData, error))
        };
        let unknown_ca = handshake(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        let error = map_error(&unknown_ca);
        assert_eq!(error.kind, NodeErrorKind::Tls);
        assert!(error.detail.contains("UnknownIssuer"), "{error}");
        let no_client_cert = handshake(rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired,
        ));
        assert_eq!(map_error(&no_client_cert).kind, NodeErrorKind::Tls);
        let plain_server = handshake(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert_eq!(map_error(&plain_server).kind, NodeErrorKind::Connection);
    }
}
