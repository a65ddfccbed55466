//! Fuzzed bytes from a server, read by the core's RESP reader
//! ([`resp::parse`]), as an adapter's connection reads them.
//!
//! Raw bytes: the reader never panics, an answer it finds is self-delimiting
//! (read again alone it is the same answer, and every shorter prefix of it is
//! incomplete). Built answers: any tree of replies a server may send, written
//! as RESP and cut into any chunks, reads back as the same answers, in order,
//! whatever the cuts. Any command's words, encoded ([`resp::encode`]), read
//! back as themselves.
//!
//! Shared by the `resp` fuzz target (`fuzz/`, nightly) and the stable test
//! `tests/fuzzed_inputs.rs`.

use arbitrary::{Result, Unstructured};
use redlock_core::resp::{self, Parsed};
use redlock_core::{Argument, NodeError, NodeErrorKind, Response};

/// Runs one input; panics when a property fails.
pub(crate) fn check(data: &[u8]) {
    raw(data);
    let mut u = Unstructured::new(data);
    let _ = built(&mut u);
    let mut u = Unstructured::new(data);
    let _ = words(&mut u);
}

fn raw(data: &[u8]) {
    let Ok(Parsed::Answer(answer, used)) = resp::parse(data) else {
        return;
    };
    assert!(used > 0 && used <= data.len());
    let again = resp::parse(&data[..used]).expect("the same bytes");
    assert_eq!(again, Parsed::Answer(answer, used));
    // Prefixes: every one of a short answer, a few of a long one.
    let step = (used / 64).max(1);
    for cut in (0..used).step_by(step) {
        assert_eq!(
            resp::parse(&data[..cut]),
            Ok(Parsed::Incomplete),
            "cut {cut}"
        );
    }
}

/// A reply a server may send, and the answer it reads as.
fn reply(
    u: &mut Unstructured<'_>,
    depth: u32,
    out: &mut Vec<u8>,
) -> Result<Result<Response, String>> {
    Ok(match u.int_in_range(0..=if depth < 3 { 6 } else { 4 })? {
        0 => {
            let n: i64 = u.arbitrary()?;
            out.extend_from_slice(format!(":{n}\r\n").as_bytes());
            Ok(Response::Int(n))
        }
        1 => {
            let bytes: Vec<u8> = u.arbitrary()?;
            out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
            out.extend_from_slice(&bytes);
            out.extend_from_slice(b"\r\n");
            Ok(Response::Data(bytes))
        }
        2 => {
            out.extend_from_slice(if u.arbitrary()? { b"$-1\r\n" } else { b"_\r\n" });
            Ok(Response::Nil)
        }
        3 => {
            let text = line(u)?;
            out.extend_from_slice(format!("+{text}\r\n").as_bytes());
            Ok(Response::Other(format!("status {text}")))
        }
        4 => {
            let text = format!("ERR {}", line(u)?);
            out.extend_from_slice(format!("-{text}\r\n").as_bytes());
            Err(text)
        }
        _ => {
            let count = u.int_in_range(0..=4)?;
            out.extend_from_slice(format!("*{count}\r\n").as_bytes());
            let mut items = Vec::new();
            let mut error = None;
            for _ in 0..count {
                match reply(u, depth + 1, out)? {
                    Ok(item) => items.push(item),
                    Err(text) => {
                        error.get_or_insert(text);
                    }
                }
            }
            match error {
                Some(text) => Err(text),
                None => Ok(Response::Array(items)),
            }
        }
    })
}

/// A status or error line: printable, no line breaks.
fn line(u: &mut Unstructured<'_>) -> Result<String> {
    let len = u.int_in_range(0..=20)?;
    (0..len)
        .map(|_| Ok(char::from(u.int_in_range(b' '..=b'~')?)))
        .collect()
}

fn built(u: &mut Unstructured<'_>) -> Result<()> {
    let mut stream = Vec::new();
    let mut expected = Vec::new();
    for _ in 0..u.int_in_range(1..=8)? {
        expected.push(reply(u, 0, &mut stream)?);
    }
    // Fed in chunks, as reads deliver them.
    let mut buffer: Vec<u8> = Vec::new();
    let mut read: Vec<Result<Response, NodeError>> = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let chunk = u
            .int_in_range(1..=stream.len() - at)
            .unwrap_or(stream.len() - at);
        buffer.extend_from_slice(&stream[at..at + chunk]);
        at += chunk;
        while let Parsed::Answer(answer, used) = resp::parse(&buffer).expect("valid RESP") {
            buffer.drain(..used);
            read.push(answer);
        }
    }
    assert!(buffer.is_empty(), "{} bytes left", buffer.len());
    assert_eq!(read.len(), expected.len());
    for (answer, expected) in read.into_iter().zip(expected) {
        match (answer, expected) {
            (Ok(answer), Ok(expected)) => assert_eq!(answer, expected),
            // The error's words, tidied, classified by its code.
            (Err(error), Err(text)) => {
                assert_eq!(error, NodeError::tidied(NodeErrorKind::Server, &text));
            }
            (answer, expected) => panic!("{answer:?} read, {expected:?} sent"),
        }
    }
    Ok(())
}

fn words(u: &mut Unstructured<'_>) -> Result<()> {
    let mut owned: Vec<Result<Vec<u8>, u64>> = Vec::new();
    for _ in 0..u.int_in_range(1..=6)? {
        owned.push(if u.arbitrary()? {
            Ok(u.arbitrary()?)
        } else {
            Err(u.arbitrary()?)
        });
    }
    let words: Vec<Argument<'_>> = owned
        .iter()
        .map(|word| match word {
            Ok(bytes) => Argument::Bytes(bytes),
            Err(n) => Argument::Int(*n),
        })
        .collect();
    let mut out = Vec::new();
    resp::encode(&words, &mut out);
    let expected: Vec<Response> = owned
        .iter()
        .map(|word| match word {
            Ok(bytes) => Response::Data(bytes.clone()),
            Err(n) => Response::Data(n.to_string().into_bytes()),
        })
        .collect();
    assert_eq!(
        resp::parse(&out),
        Ok(Parsed::Answer(Ok(Response::Array(expected)), out.len()))
    );
    Ok(())
}
