//! RESP, as much of it as the nodes speak: commands in (arrays of bulk
//! strings), replies out.

use redlock_core::Response;
use redlock_core::resp::{self, Parsed};

pub(crate) fn number(word: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(word)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| "ERR value is not an integer".to_owned())
}

pub(crate) fn encode(response: &Result<Response, String>, out: &mut Vec<u8>) {
    match response {
        Err(error) => out.extend_from_slice(format!("-{error}\r\n").as_bytes()),
        Ok(Response::Int(n)) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
        Ok(Response::Data(bytes)) => {
            out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
        Ok(Response::Nil) => out.extend_from_slice(b"$-1\r\n"),
        Ok(Response::Array(items)) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode(&Ok(item.clone()), out);
            }
        }
        Ok(Response::Other(status)) => out.extend_from_slice(format!("+{status}\r\n").as_bytes()),
    }
}

/// One command (a RESP array of bulk strings) from the front of `bytes`, and
/// how many bytes it took, read by the core's RESP reader; `None` until it
/// is complete (or when it is not one: a client of this kit is the real
/// client, which sends only these).
pub(crate) fn parse(bytes: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let Ok(Parsed::Answer(Ok(Response::Array(words)), used)) = resp::parse(bytes) else {
        return None;
    };
    let words = words
        .into_iter()
        .map(|word| match word {
            Response::Data(bytes) => Some(bytes),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    // An empty command runs nothing: every command has a name.
    (!words.is_empty()).then_some((words, used))
}
