//! RESP, the protocol Redis and Valkey speak, for an adapter that runs its
//! own connections: a request's words ([`Request::words`](crate::Request::words))
//! appended to a write buffer as the array of bulk strings a server reads
//! ([`encode`]), and each answer read
//! back from the bytes, in order, as the core's [`Response`] or the node's
//! error ([`parse`]). Bytes in, values out: no I/O here.
//!
//! A connection that never sends `HELLO 3` is answered in RESP2. RESP3's
//! types are read too (a server that answers in them unasked still means
//! something by them), except push messages and attributes, which answer
//! no request: met where an answer should start, they are garbage, and so
//! is anything else that is not RESP. After garbage the stream cannot be
//! read in step with its requests any more: the connection must go.

use crate::{Argument, NodeError, NodeErrorKind, Response};

/// Appends `words` (the command's name first) to `out` as one command.
///
/// ```
/// use redlock_core::{Argument, resp};
/// let mut out = Vec::new();
/// resp::encode(&[Argument::Bytes(b"GET"), Argument::Bytes(b"k")], &mut out);
/// resp::encode(&[Argument::Bytes(b"PEXPIRE"), Argument::Bytes(b"k"), Argument::Int(30)], &mut out);
/// assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$7\r\nPEXPIRE\r\n$1\r\nk\r\n$2\r\n30\r\n");
/// ```
pub fn encode(words: &[Argument<'_>], out: &mut Vec<u8>) {
    let size: usize = words
        .iter()
        .map(|word| match word {
            Argument::Bytes(bytes) => bytes.len() + 16,
            Argument::Int(_) => 28,
        })
        .sum();
    out.reserve(size + 16);
    out.push(b'*');
    out.extend_from_slice(Digits::of(words.len() as u64).as_bytes());
    out.extend_from_slice(b"\r\n");
    for word in words {
        match *word {
            Argument::Bytes(bytes) => bulk(bytes, out),
            Argument::Int(number) => bulk(Digits::of(number).as_bytes(), out),
        }
    }
}

fn bulk(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'$');
    out.extend_from_slice(Digits::of(bytes.len() as u64).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// A number's decimal digits, on the stack.
struct Digits {
    bytes: [u8; 20],
    start: usize,
}

impl Digits {
    fn of(mut number: u64) -> Self {
        let mut digits = Digits {
            bytes: [0; 20],
            start: 20,
        };
        loop {
            digits.start -= 1;
            digits.bytes[digits.start] = b'0' + (number % 10) as u8;
            number /= 10;
            if number == 0 {
                return digits;
            }
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

/// What [`parse`] found at the front of the bytes read so far.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// One whole answer: what the node said (an error reply is the node's
    /// [`NodeError`], classified by its code), and how many bytes it took.
    Answer(Result<Response, NodeError>, usize),
    /// The answer has not all arrived: parse again, from the same start,
    /// once more is read.
    Incomplete,
}

/// The deepest nesting of arrays read; our scripts' answers nest two deep.
const MAX_DEPTH: usize = 16;

/// The longest bulk string read, Redis' own limit (`proto-max-bulk-len`).
const MAX_BULK: i64 = 512 * 1024 * 1024;

/// Reads the answer at the front of `buf`.
///
/// An `Err` is garbage (not RESP, or RESP that answers no request): the
/// connection can no longer tell which answer belongs to which request.
///
/// ```
/// use redlock_core::resp::{Parsed, parse};
/// use redlock_core::{NodeErrorKind, Response};
/// assert_eq!(parse(b":1\r\n$2\r"), Ok(Parsed::Answer(Ok(Response::Int(1)), 4)));
/// assert_eq!(parse(b"$2\r"), Ok(Parsed::Incomplete));
/// let Ok(Parsed::Answer(Err(error), _)) = parse(b"-NOSCRIPT No matching script.\r\n") else {
///     panic!()
/// };
/// assert_eq!(error.kind, NodeErrorKind::NoScript);
/// assert_eq!(parse(b"HTTP/1.1 400").unwrap_err().kind, NodeErrorKind::Protocol);
/// ```
pub fn parse(buf: &[u8]) -> Result<Parsed, NodeError> {
    let mut cursor = Cursor { buf, at: 0 };
    Ok(match cursor.value(0)? {
        Some(answer) => Parsed::Answer(answer, cursor.at),
        None => Parsed::Incomplete,
    })
}

/// The node's words as the error they are: classified by their code (the
/// first word: `NOSCRIPT`, `WRONGTYPE`, `NOPERM`, ...), tidied for a
/// one-line report.
pub(crate) fn error_reply(text: &str) -> NodeError {
    let code = text.split_whitespace().next().unwrap_or_default();
    NodeError::tidied(NodeErrorKind::from_error_code(code), text)
}

fn garbage(what: impl std::fmt::Display) -> NodeError {
    NodeError::new(
        NodeErrorKind::Protocol,
        format!("{what} (is this a Redis server?)"),
    )
}

/// `None` wherever the answer runs past what was read.
type Step<T> = Result<Option<T>, NodeError>;

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// The line from here to its `\r\n`, which it moves past.
    fn line(&mut self) -> Step<&'a [u8]> {
        let rest = &self.buf[self.at..];
        let Some(end) = rest.iter().position(|&byte| byte == b'\r') else {
            return Ok(None);
        };
        match rest.get(end + 1) {
            None => Ok(None),
            Some(b'\n') => {
                self.at += end + 2;
                Ok(Some(&rest[..end]))
            }
            Some(_) => Err(garbage("a line ended by a lone CR")),
        }
    }

    fn number(&mut self) -> Step<i64> {
        let Some(line) = self.line()? else {
            return Ok(None);
        };
        let number = std::str::from_utf8(line)
            .ok()
            .filter(|text| !text.starts_with('+'))
            .and_then(|text| text.parse().ok());
        match number {
            Some(number) => Ok(Some(number)),
            None => Err(garbage(format!(
                "{:?} where a number was expected",
                String::from_utf8_lossy(line)
            ))),
        }
    }

    /// `len` bytes and their `\r\n`, or `None` for a length of -1.
    fn blob(&mut self, len: i64) -> Step<Option<&'a [u8]>> {
        if len == -1 {
            return Ok(Some(None));
        }
        if !(0..=MAX_BULK).contains(&len) {
            return Err(garbage(format!("a bulk string of length {len}")));
        }
        let len = len as usize;
        let rest = &self.buf[self.at..];
        if rest.len() < len + 2 {
            return Ok(None);
        }
        if &rest[len..len + 2] != b"\r\n" {
            return Err(garbage("a bulk string longer than its length"));
        }
        self.at += len + 2;
        Ok(Some(Some(&rest[..len])))
    }

    fn text(&mut self) -> Step<String> {
        Ok(self
            .line()?
            .map(|line| String::from_utf8_lossy(line).into_owned()))
    }

    /// One value; an error reply, at any depth, makes the whole answer
    /// that error (the first one met), once the rest is read past.
    fn value(&mut self, depth: usize) -> Step<Result<Response, NodeError>> {
        let Some(&kind) = self.buf.get(self.at) else {
            return Ok(None);
        };
        self.at += 1;
        let answer = match kind {
            b':' => self.number()?.map(|n| Ok(Response::Int(n))),
            b'$' => match self.number()? {
                Some(len) => self.blob(len)?.map(|bytes| {
                    Ok(bytes.map_or(Response::Nil, |bytes| Response::Data(bytes.to_vec())))
                }),
                None => None,
            },
            b'+' => self
                .text()?
                .map(|text| Ok(Response::Other(format!("status {text}")))),
            b'-' => self.text()?.map(|text| Err(error_reply(&text))),
            b'*' | b'~' | b'%' => match self.number()? {
                Some(count) => {
                    let count = if kind == b'%' {
                        count.saturating_mul(2)
                    } else {
                        count
                    };
                    self.array(count, depth)?
                }
                None => None,
            },
            b'_' => self.line()?.map(|_| Ok(Response::Nil)),
            b'#' => self
                .text()?
                .map(|text| Ok(Response::Other(format!("boolean {text}")))),
            b',' => self
                .text()?
                .map(|text| Ok(Response::Other(format!("double {text}")))),
            b'(' => self
                .text()?
                .map(|text| Ok(Response::Other(format!("big number {text}")))),
            b'=' | b'!' => match self.number()? {
                Some(len) => match self.blob(len)? {
                    Some(Some(bytes)) if kind == b'=' => {
                        // "txt:" or "mkd:", then the text.
                        Some(Ok(Response::Data(
                            bytes.get(4..).unwrap_or_default().to_vec(),
                        )))
                    }
                    Some(Some(bytes)) => Some(Err(error_reply(&String::from_utf8_lossy(bytes)))),
                    Some(None) => Some(Ok(Response::Nil)),
                    None => None,
                },
                None => None,
            },
            b'>' => return Err(garbage("a RESP3 push message where an answer was due")),
            b'|' => return Err(garbage("a RESP3 attribute where an answer was due")),
            other => {
                return Err(garbage(format!(
                    "byte {:?} where an answer starts",
                    char::from(other)
                )));
            }
        };
        Ok(answer)
    }

    fn array(&mut self, count: i64, depth: usize) -> Step<Result<Response, NodeError>> {
        if count == -1 {
            return Ok(Some(Ok(Response::Nil)));
        }
        if count < 0 {
            return Err(garbage(format!("an array of length {count}")));
        }
        if depth >= MAX_DEPTH {
            return Err(garbage(format!("arrays nested deeper than {MAX_DEPTH}")));
        }
        // The count is the node's word: room grows with what arrives.
        let mut items = Vec::with_capacity((count as usize).min(64));
        let mut first_error = None;
        for _ in 0..count {
            match self.value(depth + 1)? {
                None => return Ok(None),
                Some(Ok(item)) => items.push(item),
                Some(Err(error)) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        Ok(Some(match first_error {
            Some(error) => Err(error),
            None => Ok(Response::Array(items)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(bytes: &[u8]) -> Result<Response, NodeError> {
        match parse(bytes) {
            Ok(Parsed::Answer(answer, used)) => {
                assert_eq!(used, bytes.len(), "the whole of {bytes:?}");
                answer
            }
            other => panic!("{bytes:?} gave {other:?}"),
        }
    }

    #[test]
    fn each_resp2_type_reads_as_the_cores_response() {
        assert_eq!(answer(b":-42\r\n"), Ok(Response::Int(-42)));
        assert_eq!(
            answer(b"$3\r\na\r\n\r\n"),
            Ok(Response::Data(b"a\r\n".to_vec()))
        );
        assert_eq!(answer(b"$0\r\n\r\n"), Ok(Response::Data(Vec::new())));
        assert_eq!(answer(b"$-1\r\n"), Ok(Response::Nil));
        assert_eq!(answer(b"*-1\r\n"), Ok(Response::Nil));
        assert_eq!(answer(b"+OK\r\n"), Ok(Response::Other("status OK".into())));
        assert_eq!(
            answer(b"*3\r\n:1\r\n*1\r\n$1\r\nx\r\n$-1\r\n"),
            Ok(Response::Array(vec![
                Response::Int(1),
                Response::Array(vec![Response::Data(b"x".to_vec())]),
                Response::Nil,
            ]))
        );
    }

    #[test]
    fn an_error_reply_is_classified_by_its_code_and_tidied() {
        let error =
            answer(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")
                .unwrap_err();
        assert_eq!(error.kind, NodeErrorKind::WrongType);
        let error = answer(
            b"-ERR user_script:1: Script attempted to access a non local key script: \
              0123456789012345678901234567890123456789, on @user_script:1.\r\n",
        )
        .unwrap_err();
        assert_eq!(error.kind, NodeErrorKind::Server);
        assert_eq!(
            error.detail,
            "ERR Script attempted to access a non local key"
        );
        // Inside an array, after the rest is read past.
        let error = answer(b"*2\r\n-NOPERM no\r\n:1\r\n").unwrap_err();
        assert_eq!(error.kind, NodeErrorKind::NoPermission);
    }

    #[test]
    fn resp3_types_read_as_what_they_mean() {
        assert_eq!(answer(b"_\r\n"), Ok(Response::Nil));
        assert_eq!(answer(b"#t\r\n"), Ok(Response::Other("boolean t".into())));
        assert_eq!(
            answer(b",1.5\r\n"),
            Ok(Response::Other("double 1.5".into()))
        );
        assert_eq!(
            answer(b"=7\r\ntxt:abc\r\n"),
            Ok(Response::Data(b"abc".to_vec()))
        );
        assert_eq!(
            answer(b"%1\r\n+a\r\n:1\r\n"),
            Ok(Response::Array(vec![
                Response::Other("status a".into()),
                Response::Int(1)
            ]))
        );
        assert_eq!(
            answer(b"!9\r\nNOAUTH no\r\n").unwrap_err().kind,
            NodeErrorKind::Auth
        );
        assert!(parse(b">2\r\n+message\r\n+x\r\n").is_err());
        assert!(parse(b"|1\r\n+a\r\n+b\r\n").is_err());
    }

    #[test]
    fn every_cut_of_an_answer_is_incomplete_and_garbage_is_an_error() {
        let whole = b"*2\r\n$5\r\nhello\r\n:7\r\n";
        for cut in 0..whole.len() {
            assert_eq!(parse(&whole[..cut]), Ok(Parsed::Incomplete), "cut at {cut}");
        }
        for garbage in [
            &b"HTTP/1.1 400 Bad Request\r\n"[..],
            b"$-2\r\n",
            b"*-2\r\n",
            b":12a\r\n",
            b":+1\r\n",
            b"$1\r\nab\r\n",
            b"+a\rb\r\n",
        ] {
            let error = parse(garbage).unwrap_err();
            assert_eq!(error.kind, NodeErrorKind::Protocol, "{garbage:?}");
        }
        let deep = [&b"*1\r\n".repeat(MAX_DEPTH + 1)[..], b":1\r\n"].concat();
        assert!(parse(&deep).is_err());
        // A huge count costs nothing until its items arrive.
        assert_eq!(parse(b"*999999999999\r\n:1\r\n"), Ok(Parsed::Incomplete));
    }

    #[test]
    fn a_command_reads_back_as_its_words() {
        let words = [
            Argument::Bytes(b"EVALSHA"),
            Argument::Bytes(b""),
            Argument::Int(0),
            Argument::Int(u64::MAX),
            Argument::Bytes(b"a\r\nb"),
        ];
        let mut out = Vec::new();
        encode(&words, &mut out);
        let expected = ["EVALSHA", "", "0", &u64::MAX.to_string(), "a\r\nb"]
            .map(|word| Response::Data(word.as_bytes().to_vec()));
        assert_eq!(answer(&out), Ok(Response::Array(expected.to_vec())));
    }
}
