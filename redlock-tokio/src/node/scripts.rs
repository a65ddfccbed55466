//! The scripts on a node: their SHA1 digests, computed once, and the
//! command that sends one.

use std::borrow::Cow;
use std::sync::LazyLock;

use redis::Cmd;
use redlock_core::{Request, scripts};

use super::encode::script_call;

/// Every script the core may ask for, with its SHA1, computed once.
pub(super) struct Script {
    pub(super) source: &'static str,
    pub(super) sha: String,
}

pub(super) static SCRIPTS: LazyLock<[Script; scripts::ALL.len()]> = LazyLock::new(|| {
    scripts::ALL.map(|source| Script {
        source,
        sha: redis::Script::new(source).get_hash().to_owned(),
    })
});

pub(super) fn sha_of(source: &'static str) -> Cow<'static, str> {
    SCRIPTS
        .iter()
        // The core hands out its own constants: the pointer check is
        // enough, and skips comparing the texts of a dozen scripts.
        .find(|script| std::ptr::eq(script.source, source) || script.source == source)
        .map(|script| Cow::Borrowed(script.sha.as_str()))
        // A command added to the core later: hash its script on the fly.
        .unwrap_or_else(|| Cow::Owned(redis::Script::new(source).get_hash().to_owned()))
}

/// `request` sent as `script`: `EVALSHA` of its digest, or `EVAL` of the
/// source where the core asks for it in full
/// ([`Request::in_full`](redlock_core::Request::in_full): the node answered
/// `NOSCRIPT`, and the core sends it again where it may).
pub(super) fn script_command(request: &Request, script: &'static str) -> Cmd {
    if request.in_full {
        script_call("EVAL", script, request)
    } else {
        script_call("EVALSHA", &sha_of(script), request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shas_match_redis_script() {
        for script in SCRIPTS.iter() {
            assert_eq!(script.sha.len(), 40);
            assert_eq!(sha_of(script.source), script.sha);
        }
    }
}
