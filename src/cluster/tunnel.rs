//! A port-forward into a container through Docker exec streams, in the manner of
//! `kubectl port-forward`: how argus reaches a remote head's Jobs API while the dashboard
//! stays bound to the loopback of the head's host.
//!
//! [`Tunnel::open`] listens on 127.0.0.1 (never another address) and, for every accepted
//! connection, starts an exec in the container running a small Python relay that connects
//! to 127.0.0.1:<port> inside the container's network namespace and copies bytes both
//! ways; the exec's stdin and stdout carry the connection. The exec stream travels over
//! the Docker endpoint itself (`unix://`, `tcp://`, or the SSH connection of `ssh://`), so
//! nothing but the engine's own endpoint needs to be reachable. The relay gets the port as
//! an argument: nothing is ever interpolated into its code.
//!
//! Dropping the [`Tunnel`] closes the listener and every connection; each relay then sees
//! EOF on its stdin, half-closes its socket and exits when the server closes (at most
//! [`RELAY_GRACE_S`] later).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::exit::{Classify, Exit};

/// After its client half-closed (stdin EOF), how long a relay waits for the server to
/// finish answering before it exits on its own. HTTP and websocket clients never
/// half-close: EOF means they are gone.
pub const RELAY_GRACE_S: u32 = 10;

/// The relay, run as `python3 -I -S -c RELAY <port> [probe]` (isolated, no site: it needs
/// only the standard library and starts in a few milliseconds). Exit 3: the port refused.
const RELAY: &str = r#"
import os, select, socket, sys, time
port = int(sys.argv[1])
try:
    s = socket.create_connection(("127.0.0.1", port), 10)
except OSError as e:
    sys.stderr.write("connect to 127.0.0.1:%d: %s\n" % (port, e))
    sys.exit(3)
if sys.argv[2:] == ["probe"]:
    s.close()
    sys.exit(0)
s.settimeout(None)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
quickack = getattr(socket, "TCP_QUICKACK", None)
watch = [0, s]
deadline = None
try:
    while True:
        ready, _, _ = select.select(watch, [], [], None if deadline is None else 1.0)
        if deadline is not None and time.monotonic() > deadline:
            break
        if 0 in ready:
            data = os.read(0, 65536)
            if data:
                s.sendall(data)
            else:
                watch.remove(0)
                s.shutdown(socket.SHUT_WR)
                deadline = time.monotonic() + GRACE
        if s in ready:
            data = s.recv(65536)
            if not data:
                break
            if quickack is not None:
                # Linux re-enables delayed ACKs after every read: a server that writes its
                # headers and body apart (Nagle on) would wait 40 ms for each ACK.
                s.setsockopt(socket.IPPROTO_TCP, quickack, 1)
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
except OSError as e:
    sys.stderr.write("relay to 127.0.0.1:%d: %s\n" % (port, e))
"#;

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("cannot listen on 127.0.0.1 for the tunnel to {container}:{port}")]
    Listen {
        container: String,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("container {0} does not exist")]
    NoContainer(String),
    #[error("container {0} is not running")]
    NotRunning(String),
    #[error("nothing accepts connections on port {port} inside container {container}: {detail}")]
    Refused {
        container: String,
        port: u16,
        detail: String,
    },
    #[error("the tunnel's relay cannot run in container {container}: {detail}")]
    Relay { container: String, detail: String },
    #[error("Docker refused to {action}")]
    Docker {
        action: String,
        #[source]
        source: bollard::errors::Error,
    },
}

impl Classify for TunnelError {
    fn exit(&self) -> Exit {
        match self {
            TunnelError::NoContainer(_)
            | TunnelError::NotRunning(_)
            | TunnelError::Refused { .. } => Exit::Unreachable,
            TunnelError::Listen { .. } | TunnelError::Relay { .. } | TunnelError::Docker { .. } => {
                Exit::Failed
            }
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            TunnelError::NoContainer(_) | TunnelError::NotRunning(_) => {
                Some("is the cluster up? `argus status` shows its containers".into())
            }
            TunnelError::Refused { .. } => Some(
                "Ray's dashboard may still be starting, or have stopped: `docker logs` of the head shows why"
                    .into(),
            ),
            TunnelError::Relay { .. } => {
                Some("the tunnel needs python3 on the container's PATH (Ray images have it)".into())
            }
            _ => None,
        }
    }
}

/// A forward from `127.0.0.1:<local port>` to `127.0.0.1:<port>` inside a container.
/// Dropping it stops the listener and every relay.
#[derive(Debug)]
pub struct Tunnel {
    local: SocketAddr,
    container: String,
    port: u16,
    relays: Arc<AtomicU64>,
    serve: JoinHandle<()>,
}

impl Tunnel {
    /// Opens the forward after proving the path once (one exec reaching the port), so a
    /// missing container, a stopped one or a refused port is an error here rather than a
    /// dropped connection later.
    pub async fn open(docker: Docker, container: &str, port: u16) -> Result<Tunnel, TunnelError> {
        probe(&docker, container, port).await?;
        Self::listen(docker, container, port).await
    }

    /// Opens the forward without proving the path: for a port that is not listening yet
    /// (a head whose dashboard is starting). A connection that cannot be relayed is closed,
    /// which an HTTP client sees as the server being unreachable.
    pub async fn listen(docker: Docker, container: &str, port: u16) -> Result<Tunnel, TunnelError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .and_then(|l| Ok((l.local_addr()?, l)))
            .map_err(|source| TunnelError::Listen {
                container: container.to_string(),
                port,
                source,
            });
        let (local, listener) = listener?;
        let relays = Arc::new(AtomicU64::new(0));
        let serve = tokio::spawn(serve(
            listener,
            docker,
            container.to_string(),
            port,
            relays.clone(),
        ));
        tracing::debug!("tunnel {local} -> {container}:{port} open");
        Ok(Tunnel {
            local,
            container: container.to_string(),
            port,
            relays,
            serve,
        })
    }

    /// `http://127.0.0.1:<local port>`: the base URL to give an HTTP client.
    pub fn url(&self) -> String {
        format!("http://{}", self.local)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// How many relays (one per accepted connection) have been started.
    pub fn relays_started(&self) -> u64 {
        self.relays.load(Ordering::Relaxed)
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        // Aborting the accept loop drops the listener and its JoinSet, which aborts every
        // connection: their exec streams close and each relay sees EOF.
        self.serve.abort();
        tracing::debug!(
            "tunnel {} -> {}:{} closed",
            self.local,
            self.container,
            self.port
        );
    }
}

async fn serve(
    listener: TcpListener,
    docker: Docker,
    container: String,
    port: u16,
    relays: Arc<AtomicU64>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    relays.fetch_add(1, Ordering::Relaxed);
                    let (docker, container) = (docker.clone(), container.clone());
                    connections.spawn(async move {
                        if let Err(e) = forward(&docker, &container, port, client).await {
                            tracing::debug!("tunnel to {container}:{port}: {e}");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!("tunnel to {container}:{port}: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

type Output =
    std::pin::Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type Input = std::pin::Pin<Box<dyn AsyncWrite + Send>>;

/// Starts the relay in `container`; `probe` only connects and exits.
async fn start_relay(
    docker: &Docker,
    container: &str,
    port: u16,
    probe: bool,
) -> Result<(String, Output, Input), TunnelError> {
    let script = RELAY.replace("GRACE", &RELAY_GRACE_S.to_string());
    let mut cmd = vec![
        "python3".to_string(),
        "-I".into(),
        "-S".into(),
        "-c".into(),
        script,
        port.to_string(),
    ];
    if probe {
        cmd.push("probe".into());
    }
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(cmd),
                attach_stdin: Some(!probe),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                ..Default::default()
            },
        )
        .await
        .map_err(|source| match &source {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            } => TunnelError::NoContainer(container.to_string()),
            bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            } => TunnelError::NotRunning(container.to_string()),
            _ => TunnelError::Docker {
                action: format!("create an exec in container {container}"),
                source,
            },
        })?;
    match docker.start_exec(&exec.id, None).await {
        Ok(StartExecResults::Attached { output, input }) => Ok((exec.id, output, input)),
        Ok(StartExecResults::Detached) => Err(TunnelError::Relay {
            container: container.to_string(),
            detail: "Docker started the exec detached".into(),
        }),
        Err(source) => Err(TunnelError::Docker {
            action: format!("start an exec in container {container}"),
            source,
        }),
    }
}

/// One exec that connects to the port and exits: proves the whole path.
async fn probe(docker: &Docker, container: &str, port: u16) -> Result<(), TunnelError> {
    let (id, mut output, _input) = start_relay(docker, container, port, true).await?;
    let mut text = String::new();
    while let Some(chunk) = output.next().await {
        match chunk {
            Ok(chunk) => text.push_str(&String::from_utf8_lossy(&chunk.into_bytes())),
            Err(source) => {
                return Err(TunnelError::Docker {
                    action: format!("read an exec's output in container {container}"),
                    source,
                });
            }
        }
    }
    let inspect = docker
        .inspect_exec(&id)
        .await
        .map_err(|source| TunnelError::Docker {
            action: format!("inspect an exec in container {container}"),
            source,
        })?;
    let detail = text.trim().to_string();
    match inspect.exit_code {
        Some(0) => Ok(()),
        Some(3) => Err(TunnelError::Refused {
            container: container.to_string(),
            port,
            detail,
        }),
        code => Err(TunnelError::Relay {
            container: container.to_string(),
            detail: format!(
                "exit code {}: {detail}",
                code.map_or("unknown".into(), |c| c.to_string())
            ),
        }),
    }
}

/// Carries one client connection through one relay.
async fn forward(
    docker: &Docker,
    container: &str,
    port: u16,
    client: TcpStream,
) -> Result<(), TunnelError> {
    let _ = client.set_nodelay(true);
    let (_, mut output, mut input) = start_relay(docker, container, port, false).await?;
    let (mut from_client, mut to_client) = client.into_split();
    let io_err = |what: &str, e: std::io::Error| TunnelError::Relay {
        container: container.to_string(),
        detail: format!("{what}: {e}"),
    };
    // Client -> relay; the client's EOF becomes the relay's stdin EOF (a half-close).
    let upstream = async {
        tokio::io::copy(&mut from_client, &mut input)
            .await
            .map_err(|e| io_err("from the client", e))?;
        let _ = input.shutdown().await;
        std::future::pending::<Result<(), TunnelError>>().await
    };
    // Relay -> client until the relay exits (the server closed).
    let downstream = async {
        let mut stderr = Vec::new();
        let mut relayed = false;
        while let Some(chunk) = output.next().await {
            let chunk = chunk.map_err(|source| TunnelError::Docker {
                action: format!("read the relay's output in container {container}"),
                source,
            })?;
            match chunk {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    relayed = true;
                    to_client
                        .write_all(&message)
                        .await
                        .map_err(|e| io_err("to the client", e))?
                }
                LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                LogOutput::StdIn { .. } => {}
            }
        }
        let _ = to_client.shutdown().await;
        let stderr = String::from_utf8_lossy(&stderr);
        let stderr = stderr.trim();
        // The client sees a closed connection (Ray unreachable, with its hint); what the
        // relay said is for -v: while a head starts, its port refuses for a while.
        if !stderr.is_empty() {
            tracing::debug!("tunnel relay in {container} (relayed: {relayed}): {stderr}");
        }
        Ok(())
    };
    tokio::select! {
        done = downstream => done,
        failed = upstream => failed,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_relay_script_takes_nothing_but_its_arguments() {
        let script = super::RELAY.replace("GRACE", "10");
        assert!(script.contains("int(sys.argv[1])"));
        assert!(!script.contains("GRACE"));
        assert!(!script.contains('{'), "no format placeholders in the relay");
    }
}
