//! A stopped container's logs (exec needs it running): the logs directory copied out as
//! one archive, read as it streams, only the listing and the tails asked for kept.

use bollard::Docker;
use futures_util::StreamExt;

use super::{Container, LogFile, RAY_LOGS, Request, Tail, plain_name};

/// The logs of a container that is not running (exec needs it running): the logs
/// directory as one archive, streamed, each file's tail kept as [`Request::pick`] says
/// (in the archive's order, within [`Request::node_cap`]).
pub(super) async fn read_archive(
    docker: &Docker,
    id: &str,
    request: &Request<'_>,
    out: &mut Container,
) {
    use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
    let options = DownloadFromContainerOptionsBuilder::default()
        .path(RAY_LOGS)
        .build();
    let mut stream = docker.download_from_container(id, Some(options));
    let mut tar = Tails::default();
    let mut left = request.node_cap;
    let head = out.head;
    let mut pick = |file: &LogFile| {
        let keep = (request.pick)(head, file).min(file.size).min(left);
        left -= keep;
        keep
    };
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => tar.feed(&bytes, &mut pick),
            Err(e) => {
                out.missed.push((
                    RAY_LOGS.into(),
                    format!("cannot copy it out of the stopped container: {e}"),
                ));
                break;
            }
        }
        // Kept so far, should the deadline come.
        out.listing.append(&mut tar.listing);
        out.files.append(&mut tar.tails);
    }
}

/// A tar stream read as it comes: the listing of the files directly under its top
/// directory, and the tails asked for (nothing else is kept).
#[derive(Default)]
struct Tails {
    header: Vec<u8>,
    body: Option<Body>,
    long_name: Option<String>,
    listing: Vec<LogFile>,
    tails: Vec<Tail>,
}

struct Body {
    /// The file (None: a long name's data, or an entry skipped).
    file: Option<LogFile>,
    long_name: bool,
    /// Data bytes left, then data and padding left.
    data_left: u64,
    left: u64,
    keep: u64,
    tail: Vec<u8>,
}

impl Tails {
    fn feed(&mut self, mut input: &[u8], pick: &mut dyn FnMut(&LogFile) -> u64) {
        while !input.is_empty() {
            if let Some(body) = &mut self.body {
                let n = input
                    .len()
                    .min(usize::try_from(body.left).unwrap_or(usize::MAX));
                let data = n.min(usize::try_from(body.data_left).unwrap_or(usize::MAX));
                if body.long_name && body.tail.len() < 4096 {
                    body.tail.extend_from_slice(&input[..data]);
                } else if body.keep > 0 {
                    body.tail.extend_from_slice(&input[..data]);
                    let keep = usize::try_from(body.keep).unwrap_or(usize::MAX);
                    if body.tail.len() > 2 * keep + (64 << 10) {
                        body.tail.drain(..body.tail.len() - keep);
                    }
                }
                body.data_left -= data as u64;
                body.left -= n as u64;
                input = &input[n..];
                if body.left == 0 {
                    let mut body = self.body.take().expect("a body");
                    if body.long_name {
                        let end = body
                            .tail
                            .iter()
                            .position(|b| *b == 0)
                            .unwrap_or(body.tail.len());
                        self.long_name = Some(String::from_utf8_lossy(&body.tail[..end]).into());
                    } else if let Some(file) = body.file.take().filter(|_| body.keep > 0) {
                        let keep = usize::try_from(body.keep).unwrap_or(usize::MAX);
                        if body.tail.len() > keep {
                            body.tail.drain(..body.tail.len() - keep);
                        }
                        self.tails.push(Tail {
                            name: file.name,
                            size: file.size,
                            bytes: body.tail,
                        });
                    }
                }
                continue;
            }
            let need = 512 - self.header.len();
            let n = need.min(input.len());
            self.header.extend_from_slice(&input[..n]);
            input = &input[n..];
            if self.header.len() < 512 {
                return;
            }
            let header = std::mem::take(&mut self.header);
            if header.iter().all(|b| *b == 0) {
                continue;
            }
            self.start(&header, pick);
        }
    }

    /// An entry's header: what its body is.
    fn start(&mut self, h: &[u8], pick: &mut dyn FnMut(&LogFile) -> u64) {
        let text = |range: std::ops::Range<usize>| {
            let field = &h[range];
            let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
            String::from_utf8_lossy(&field[..end]).into_owned()
        };
        let octal = |range: std::ops::Range<usize>| {
            u64::from_str_radix(text(range).trim().trim_matches(' '), 8).unwrap_or(0)
        };
        let size = octal(124..136);
        let padded = size.div_ceil(512) * 512;
        let mut body = Body {
            file: None,
            long_name: false,
            data_left: size,
            left: padded,
            keep: 0,
            tail: Vec::new(),
        };
        match h[156] {
            b'L' => body.long_name = true,
            b'0' | 0 => {
                let name = match self.long_name.take() {
                    Some(long) => long,
                    None if &h[257..262] == b"ustar" && h[345] != 0 => {
                        format!("{}/{}", text(345..500), text(0..100))
                    }
                    None => text(0..100),
                };
                // Directly under the archive's top directory (`logs/`).
                let mut parts = name.trim_end_matches('/').splitn(2, '/');
                let (_, rest) = (parts.next(), parts.next());
                if let Some(name) = rest.filter(|n| plain_name(n)) {
                    let file = LogFile {
                        name: name.to_string(),
                        size,
                        mtime: octal(136..148) as f64,
                    };
                    body.keep = pick(&file);
                    self.listing.push(file.clone());
                    body.file = Some(file);
                }
            }
            _ => self.long_name = None,
        }
        if body.left > 0 {
            self.body = Some(body);
        } else if let Some(file) = body.file.filter(|_| body.keep > 0) {
            self.tails.push(Tail {
                name: file.name,
                size: 0,
                bytes: Vec::new(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar entry's header (ustar, name in the name field).
    fn header(name: &str, size: usize, kind: u8) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let size = format!("{size:011o}");
        h[124..135].copy_from_slice(size.as_bytes());
        h[136..147].copy_from_slice(b"00000000012");
        h[156] = kind;
        h[257..262].copy_from_slice(b"ustar");
        h
    }

    fn entry(name: &str, data: &[u8]) -> Vec<u8> {
        let mut out = header(name, data.len(), b'0');
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
        out
    }

    #[test]
    fn an_archive_is_read_as_it_streams_keeping_only_the_tails_asked_for() {
        let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let long = format!("logs/{}", "w".repeat(120));
        let mut tar = header("logs/", 0, b'5');
        tar.extend(entry("logs/raylet.out", &big));
        tar.extend(entry("logs/skip.log", b"not asked"));
        tar.extend(entry("logs/sub/nested.log", b"not directly under"));
        let mut name = long.clone().into_bytes();
        name.push(0);
        let mut l = header("././@LongLink", name.len(), b'L');
        l.extend_from_slice(&name);
        l.resize(1024, 0);
        tar.extend(l);
        tar.extend(entry("logs/wwwwwwww", b"long one"));
        tar.extend(entry("logs/empty.err", b""));
        tar.extend(vec![0u8; 1024]);
        for piece in [1usize, 7, 512, 100_000] {
            let mut t = Tails::default();
            let mut asked = Vec::new();
            let mut pick = |f: &LogFile| {
                asked.push(f.name.clone());
                if f.name == "skip.log" { 0 } else { 1000 }
            };
            for chunk in tar.chunks(piece) {
                t.feed(chunk, &mut pick);
            }
            assert_eq!(
                asked,
                [
                    "raylet.out",
                    "skip.log",
                    "w".repeat(120).as_str(),
                    "empty.err"
                ],
                "{piece}"
            );
            assert_eq!(t.listing[0].mtime, 10.0);
            let tails: Vec<(&str, usize)> = t
                .tails
                .iter()
                .map(|t| (t.name.as_str(), t.bytes.len()))
                .collect();
            assert_eq!(
                tails,
                [
                    ("raylet.out", 1000),
                    ("w".repeat(120).as_str(), 8),
                    ("empty.err", 0)
                ]
            );
            assert_eq!(t.tails[0].bytes, &big[4000..]);
            assert_eq!(t.tails[0].size, 5000);
        }
    }
}
