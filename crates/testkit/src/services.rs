//! What an end-to-end test needs besides the code: the services and tools `make test` installs
//! and starts (the test LLM, the AWS emulator, the embedding model, the Lambda emulator, a
//! browser, the infrastructure linters). A test names them first, with [`needs!`](crate::needs):
//!
//! - all there: the test runs;
//! - one missing, outside `CI`: the test stops at once, and the terminal says which test was
//!   skipped, what it needs and how to get it (a line `skipped: …` that libtest does not
//!   capture, counted as skipped by `make test`'s summary) — so `cargo test --workspace` on a
//!   clone without setup says what is missing instead of panicking;
//! - one missing under `CI`: the test fails, saying the same — CI runs every test.

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// A service or tool that an end-to-end test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// The test LLM (llama-server) at `SLUICE_TEST_LLM_URL`.
    Llm,
    /// The AWS emulator (moto) at `AWS_ENDPOINT_URL_DYNAMODB`, `_S3`, `_SECRETS_MANAGER` and
    /// `_SQS`.
    Aws,
    /// The embedding model in `SLUICE_MODEL_DIR`.
    Model,
    /// cargo-lambda's runtime-API emulator, in `$SLUICE_HOME/venv`.
    Lambda,
    /// Chromium and playwright-core.
    Browser,
    /// The SAM CLI, cfn-lint, checkov, the OpenAI and MCP clients (venvs) and the MCP
    /// Inspector (npm), under `$SLUICE_HOME`.
    Tools,
    /// The example rerank components, built, and the toolchain that builds them (jco).
    Components,
    /// The evaluation dataset (τ²-bench banking), in `$SLUICE_HOME/eval/tau2-banking`.
    Eval,
}

impl Service {
    /// What is missing and how to get it; `None` when the service is there.
    pub fn missing(self) -> Option<String> {
        let make_test = "`make test` installs and starts it";
        match self {
            Service::Llm => match std::env::var("SLUICE_TEST_LLM_URL") {
                Err(_) => Some(format!(
                    "the test LLM (SLUICE_TEST_LLM_URL is not set): {make_test}"
                )),
                Ok(url) if !listening(&url) => Some(format!(
                    "the test LLM at {url}, which does not answer: {make_test}"
                )),
                Ok(_) => None,
            },
            Service::Aws => ["DYNAMODB", "S3", "SECRETS_MANAGER", "SQS"]
                .into_iter()
                .find_map(|service| {
                    let name = format!("AWS_ENDPOINT_URL_{service}");
                    match std::env::var(&name) {
                        Err(_) => {
                            Some(format!("the AWS emulator ({name} is not set): {make_test}"))
                        }
                        Ok(url) if !listening(&url) => Some(format!(
                            "the AWS emulator at {url}, which does not answer: {make_test}"
                        )),
                        Ok(_) => None,
                    }
                }),
            Service::Model => {
                let dir = model_dir();
                (!dir.join("tokenizer.json").is_file()).then(|| {
                    format!(
                        "the embedding model in {} (SLUICE_MODEL_DIR): `scripts/setup.sh model`",
                        dir.display()
                    )
                })
            }
            Service::Lambda => {
                let tool = sluice_home().join("venv/bin/cargo-lambda");
                (!tool.is_file()).then(|| {
                    format!(
                        "cargo-lambda ({}): `scripts/setup.sh tools`",
                        tool.display()
                    )
                })
            }
            Service::Browser => {
                let modules = sluice_home().join("browser/node_modules/playwright-core");
                let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
                    .iter()
                    .any(|p| std::path::Path::new(p).is_file());
                (!modules.is_dir() || !chromium)
                    .then(|| "Chromium and playwright-core: `scripts/setup.sh browser`".to_string())
            }
            Service::Tools => [
                "sam/bin/sam",
                "iac/bin/cfn-lint",
                "iac/bin/checkov",
                "openai/bin/python",
                "mcp-inspector/node_modules/.bin/mcp-inspector",
            ]
            .into_iter()
            .map(|tool| sluice_home().join(tool))
            .find(|path| !path.is_file())
            .map(|path| format!("{}: `scripts/setup.sh tools`", path.display())),
            Service::Components => {
                let built = std::env::var_os("SLUICE_COMPONENTS_DIR")
                    .map_or_else(|| sluice_home().join("components"), PathBuf::from);
                let jco = sluice_home().join("npm/node_modules/.bin/jco");
                ["keyword-boost", "mmr", "policy"]
                    .iter()
                    .map(|name| built.join(format!("{name}.component.wasm")))
                    .chain([jco])
                    .find(|path| !path.is_file())
                    .map(|path| format!("{}: `scripts/build-components.sh`", path.display()))
            }
            Service::Eval => {
                let data = sluice_home().join("eval/tau2-banking");
                (!data.join("documents.json").is_file()).then(|| {
                    format!(
                        "the evaluation data in {}: `scripts/setup.sh eval`",
                        data.display()
                    )
                })
            }
        }
    }
}

/// Whether a test needing `services` can run; see the module's documentation. The test's name
/// is the thread's, as libtest names it.
pub fn ready(services: &[Service]) -> bool {
    let missing: Vec<String> = services.iter().filter_map(|s| s.missing()).collect();
    if missing.is_empty() {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    if std::env::var_os("CI").is_some() {
        panic!("{test} needs {} (CI runs every test)", missing.join("; "));
    }
    // Straight to the terminal: libtest captures what `eprintln!` writes, not this.
    let line = format!("skipped: {test} needs {}\n", missing.join("; "));
    let _ = std::io::stderr().write_all(line.as_bytes());
    false
}

/// Returns from the test at once unless the services named are there (see
/// [`services`](crate::services)): `sluice_testkit::needs!(Llm, Model);`.
#[macro_export]
macro_rules! needs {
    ($($service:ident),+ $(,)?) => {
        if !$crate::services::ready(&[$($crate::services::Service::$service),+]) {
            return;
        }
    };
}

/// Where setup puts what it installs, as the configuration names it (`SLUICE_HOME`).
pub fn sluice_home() -> PathBuf {
    sluice_contract::settings::home(&sluice_contract::settings::env)
}

/// The embedding model's folder, as the configuration names it (`SLUICE_MODEL_DIR`).
pub fn model_dir() -> PathBuf {
    sluice_contract::settings::model_dir(&sluice_contract::settings::env)
}

/// Whether something accepts connections at `url`'s host and port (within a second).
fn listening(url: &str) -> bool {
    let Some(rest) = url.split("://").nth(1) else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let Ok(mut addrs) = authority.to_socket_addrs() else {
        return false;
    };
    addrs.any(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_listened_on_only_when_something_accepts_there() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listening(&format!("http://127.0.0.1:{port}/v1")));
        drop(listener);
        assert!(!listening(&format!("http://127.0.0.1:{port}/v1")));
        assert!(!listening("not a url"));
    }
}
