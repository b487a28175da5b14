//! `argus slurm relay PORT`: one connection to `127.0.0.1:PORT` on a node, carried over
//! this process's stdin and stdout. The login node runs it on the head's node with
//! `srun --overlap --unbuffered` (see `attach`), once per HTTP connection, so that the
//! Jobs API can stay bound to that node's loopback: Slurm's own authentication decides who
//! may reach it (only the job's owner can start a step in the job).
//!
//! Plain blocking I/O on two threads: stdin → socket, socket → stdout. Every chunk is
//! flushed at once (srun's `--unbuffered` passes it on as it comes). When stdin ends (the
//! client closed), the socket's write half is shut and the server gets [`GRACE`] to finish
//! its answer.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpStream};
use std::time::Duration;

/// After the client's EOF, how long the server may still answer.
pub const GRACE: Duration = Duration::from_secs(10);

/// Exit code of a relay whose port refused: the login side names it.
pub const REFUSED: i32 = 3;

/// Relays until the server closes. `Err` only when the port cannot be reached.
pub fn run(port: u16) -> Result<(), std::io::Error> {
    let socket = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    let _ = socket.set_nodelay(true);
    let upstream = socket.try_clone()?;
    std::thread::spawn(move || {
        let mut upstream = upstream;
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut upstream);
        let _ = upstream.shutdown(Shutdown::Write);
        // HTTP clients never half-close: EOF means the client has gone. The server gets a
        // bounded time to finish, then the socket is closed under the reader.
        std::thread::sleep(GRACE);
        let _ = upstream.shutdown(Shutdown::Both);
    });
    let mut socket = socket;
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match socket.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if stdout
            .write_all(&buf[..n])
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
    Ok(())
}
