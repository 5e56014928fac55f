//! The benchmark's upper bound: a bare hyper 1 HTTP/1 server answering fixed bytes, with the
//! same runtime shape as the agent (one worker thread). Not part of the agent.
//!
//! `bare_hyper ADDR PATH=FILE...` serves each FILE's bytes at PATH as `application/json`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let address: std::net::SocketAddr = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: bare_hyper ADDR PATH=FILE..."))?
        .parse()?;
    let mut routes = Vec::new();
    for arg in args {
        let (path, file) = arg
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("expected PATH=FILE, got {arg}"))?;
        routes.push((path.to_owned(), Bytes::from(std::fs::read(file)?)));
    }
    let routes = Arc::new(routes);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let routes = Arc::clone(&routes);
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let routes = Arc::clone(&routes);
                    async move {
                        let found = routes.iter().find(|(path, _)| path == request.uri().path());
                        let mut response = match found {
                            Some((_, body)) => Response::new(Full::new(body.clone())),
                            None => {
                                let mut response = Response::new(Full::new(Bytes::new()));
                                *response.status_mut() = StatusCode::NOT_FOUND;
                                response
                            }
                        };
                        response.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                if let Err(error) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    eprintln!("connection: {error}");
                }
            });
        }
    })
}
