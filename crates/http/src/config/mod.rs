//! The wire's configuration: `sluice serve`'s listener, what one request may bring and how
//! fast each tenant may send them, and who may call — read from `SLUICE_*` variables and
//! checked once at start, beside the engine's sections (`sluice-core`) and each adapter's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_contract::net::IpRange;
use sluice_contract::settings::{ConfigError, millis, parse, ranged};
use sluice_contract::tenant::{InvalidTenant, TENANT_RULE, Tenant};

/// The wire's sections of the environment.
#[derive(Debug, Clone)]
pub struct WireConfig {
    /// `sluice serve`'s listener and the streams' keep-alive.
    pub server: ServerConfig,
    /// Request sizes and per-tenant rates.
    pub limits: RequestLimits,
    /// API keys, tenants' settings and the tenant of unauthenticated requests.
    pub auth: AuthConfig,
}

impl WireConfig {
    /// Reads the wire's variables through `get` (a blank value unset); files it keeps default
    /// to `data_dir` (`SLUICE_DATA_DIR`).
    pub fn from_lookup(
        get: &impl Fn(&str) -> Option<String>,
        data_dir: &Path,
    ) -> Result<Self, ConfigError> {
        Ok(WireConfig {
            server: server_section(get)?,
            limits: limits_section(get)?,
            auth: auth_section(get, data_dir)?,
        })
    }
}

/// `sluice serve`'s listener, and what every entry point's streams do.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `SLUICE_ADDR`: where `sluice serve` listens.
    pub addr: SocketAddr,
    /// `SLUICE_DRAIN_TIMEOUT_MS`: after SIGTERM, how long `sluice serve` lets open streams
    /// finish before ending them with a retryable error.
    pub drain_timeout: Duration,
    /// `SLUICE_ALLOWED_HOSTS`: the `Host` names `sluice serve` answers to (`*`: any); `None`
    /// for the default, the loopback names and the address it listens on.
    pub allowed_hosts: Option<Vec<String>>,
    /// `SLUICE_ALLOW_UNAUTHENTICATED`: let `sluice serve` listen beyond loopback with auth off.
    pub allow_unauthenticated: bool,
    /// `SLUICE_SSE_KEEPALIVE_MS`: after this long without an event, a stream sends an SSE
    /// comment line, so that proxies with idle timeouts keep it open (0: never).
    pub sse_keepalive: Duration,
}

/// What one request may bring, and how fast each tenant may send them.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    /// `SLUICE_MAX_BODY_BYTES`: request body cap for `/v1/answer` (413 above).
    pub max_body_bytes: usize,
    /// `SLUICE_MAX_INGEST_BYTES`: request body cap for `/v1/documents` (413 above).
    pub max_ingest_bytes: usize,
    /// `SLUICE_TENANT_RATE`: requests per second per tenant (0 = no limit).
    pub tenant_rate: f64,
    /// `SLUICE_TENANT_BURST`: requests a tenant may make at once above its rate.
    pub tenant_burst: u32,
    /// `SLUICE_TENANT_MAX_STREAMS`: answers one tenant may have streaming at once (0 = no limit).
    pub tenant_max_streams: usize,
    /// `SLUICE_HEADER_READ_TIMEOUT_MS`: how long `sluice serve` waits for a request's head
    /// (its line and headers) before it closes the connection.
    pub header_timeout: Duration,
    /// `SLUICE_BODY_READ_TIMEOUT_MS`: how long a request's body may take to arrive, whole
    /// (408 `body_timeout` past it).
    pub body_timeout: Duration,
    /// `SLUICE_EVAL_RUNS_PER_TENANT`: evaluation runs one tenant may have going at once.
    pub eval_runs_per_tenant: usize,
    /// `SLUICE_EVAL_RUN_TIMEOUT_MS`: the longest an evaluation run may take, whole; past it
    /// the run stops and what it answered is scored.
    pub eval_run_timeout: Duration,
    /// How a source's sync may read the source.
    pub sync: SyncLimits,
}

/// What a sync of a tenant's source may do.
#[derive(Debug, Clone)]
pub struct SyncLimits {
    /// `SLUICE_SYNC_HOST_RATE`: requests per second a sync makes to one website host (a
    /// site's `Crawl-delay` may slow it further).
    pub host_rate: f64,
    /// `SLUICE_SYNC_MAX_PAGES`: the most pages or objects a source may ask one sync to read.
    pub max_pages: usize,
    /// `SLUICE_SYNC_MAX_BYTES`: the most bytes a source may ask one sync to read.
    pub max_bytes: u64,
    /// `SLUICE_SYNC_TIMEOUT_MS`: the longest a sync may take, whole; past it the sync stops,
    /// keeps what it wrote and deletes nothing it did not see.
    pub timeout: Duration,
    /// `SLUICE_SYNC_PAGE_TIMEOUT_MS`: the longest one page (or `robots.txt`, or sitemap) may
    /// take to arrive, whole.
    pub page_timeout: Duration,
}

impl SyncLimits {
    /// The least time between two requests to one host.
    pub fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.host_rate)
    }
}

/// Who may call: API keys, and the tenant of a request while auth is off.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// `SLUICE_DEFAULT_TENANT`: the tenant of requests without `x-sluice-tenant` while auth
    /// is off.
    pub default_tenant: Tenant,
    /// `SLUICE_API_KEYS_FILE`: the key file of `sluice serve` (auth on when set).
    pub api_keys_file: Option<PathBuf>,
    /// `SLUICE_SETTINGS_FILE`: where `sluice serve` keeps each tenant's settings (default
    /// `settings.json` in `SLUICE_DATA_DIR`).
    pub settings_file: PathBuf,
    /// `SLUICE_RECORDS_DIR`: where `sluice serve` keeps each tenant's evaluation sets and runs
    /// (default `records` in `SLUICE_DATA_DIR`).
    pub records_dir: PathBuf,
    /// `SLUICE_SETTINGS_FRESH_MS`: how long a process uses a tenant's settings before reading
    /// them again: a change is in force everywhere within it.
    pub settings_fresh: Duration,
    /// `SLUICE_FETCH_ALLOW`: address ranges (CIDR, comma-separated; default none) that URLs
    /// tenants give (`jwks_url`) may reach although they are not public — loopback, private,
    /// link-local. For tests and identity providers inside the operator's own network.
    pub fetch_allow: Vec<IpRange>,
}

impl AuthConfig {
    /// The tenant a command names (`--tenant`), else `SLUICE_DEFAULT_TENANT`.
    pub fn tenant_or_default(&self, named: Option<&str>) -> Result<Tenant, InvalidTenant> {
        named.map_or_else(|| Ok(self.default_tenant.clone()), Tenant::new)
    }
}

fn server_section(get: &impl Fn(&str) -> Option<String>) -> Result<ServerConfig, ConfigError> {
    Ok(ServerConfig {
        addr: parse(
            get,
            "SLUICE_ADDR",
            "127.0.0.1:8080",
            "a socket address such as 127.0.0.1:8080",
        )?,
        drain_timeout: millis(get, "SLUICE_DRAIN_TIMEOUT_MS", 25_000, 0)?,
        allowed_hosts: match get("SLUICE_ALLOWED_HOSTS") {
            None => None,
            Some(list) => Some(host_names(&list)?),
        },
        allow_unauthenticated: parse(
            get,
            "SLUICE_ALLOW_UNAUTHENTICATED",
            "false",
            "true or false",
        )?,
        sse_keepalive: millis(get, "SLUICE_SSE_KEEPALIVE_MS", 5000, 0)?,
    })
}

fn limits_section(get: &impl Fn(&str) -> Option<String>) -> Result<RequestLimits, ConfigError> {
    const RATE: &str = "requests per second, from 0 (no limit) to 100000";
    let tenant_rate: f64 = parse(get, "SLUICE_TENANT_RATE", "50", RATE)?;
    if !(0.0..=100_000.0).contains(&tenant_rate) {
        return Err(ConfigError {
            name: "SLUICE_TENANT_RATE",
            value: tenant_rate.to_string(),
            expected: RATE.into(),
        });
    }
    Ok(RequestLimits {
        max_body_bytes: ranged(get, "SLUICE_MAX_BODY_BYTES", 1 << 20, 1024, 1 << 30)?,
        max_ingest_bytes: ranged(get, "SLUICE_MAX_INGEST_BYTES", 16 << 20, 1024, 1 << 30)?,
        tenant_rate,
        tenant_burst: ranged(get, "SLUICE_TENANT_BURST", 100, 1, 1_000_000)? as u32,
        tenant_max_streams: ranged(get, "SLUICE_TENANT_MAX_STREAMS", 64, 0, 1_000_000)?,
        header_timeout: millis(get, "SLUICE_HEADER_READ_TIMEOUT_MS", 10_000, 100)?,
        body_timeout: millis(get, "SLUICE_BODY_READ_TIMEOUT_MS", 30_000, 100)?,
        eval_runs_per_tenant: ranged(get, "SLUICE_EVAL_RUNS_PER_TENANT", 1, 1, 16)?,
        eval_run_timeout: millis(get, "SLUICE_EVAL_RUN_TIMEOUT_MS", 600_000, 1_000)?,
        sync: sync_section(get)?,
    })
}

fn sync_section(get: &impl Fn(&str) -> Option<String>) -> Result<SyncLimits, ConfigError> {
    const RATE: &str = "requests per second, above 0 and at most 1000";
    let host_rate: f64 = parse(get, "SLUICE_SYNC_HOST_RATE", "1", RATE)?;
    if !(host_rate > 0.0 && host_rate <= 1_000.0) {
        return Err(ConfigError {
            name: "SLUICE_SYNC_HOST_RATE",
            value: host_rate.to_string(),
            expected: RATE.into(),
        });
    }
    Ok(SyncLimits {
        host_rate,
        max_pages: ranged(get, "SLUICE_SYNC_MAX_PAGES", 10_000, 1, 1_000_000)?,
        max_bytes: ranged(get, "SLUICE_SYNC_MAX_BYTES", 1 << 30, 1 << 20, 1 << 40)? as u64,
        timeout: millis(get, "SLUICE_SYNC_TIMEOUT_MS", 1_800_000, 1_000)?,
        page_timeout: millis(get, "SLUICE_SYNC_PAGE_TIMEOUT_MS", 10_000, 100)?,
    })
}

fn auth_section(
    get: &impl Fn(&str) -> Option<String>,
    data_dir: &Path,
) -> Result<AuthConfig, ConfigError> {
    let default_tenant = get("SLUICE_DEFAULT_TENANT").unwrap_or_else(|| "default".into());
    Ok(AuthConfig {
        default_tenant: Tenant::new(&default_tenant).map_err(|_| ConfigError {
            name: "SLUICE_DEFAULT_TENANT",
            value: default_tenant.clone(),
            expected: TENANT_RULE.into(),
        })?,
        api_keys_file: get("SLUICE_API_KEYS_FILE").map(PathBuf::from),
        settings_file: (get("SLUICE_SETTINGS_FILE").map(PathBuf::from))
            .unwrap_or_else(|| data_dir.join("settings.json")),
        records_dir: (get("SLUICE_RECORDS_DIR").map(PathBuf::from))
            .unwrap_or_else(|| data_dir.join("records")),
        settings_fresh: millis(get, "SLUICE_SETTINGS_FRESH_MS", 5_000, 0)?,
        fetch_allow: (IpRange::list(&get("SLUICE_FETCH_ALLOW").unwrap_or_default())).map_err(
            |why| ConfigError {
                name: "SLUICE_FETCH_ALLOW",
                value: get("SLUICE_FETCH_ALLOW").unwrap_or_default(),
                expected: format!("addresses or CIDR ranges, comma-separated ({why})"),
            },
        )?,
    })
}

/// `SLUICE_ALLOWED_HOSTS`: comma-separated host names or addresses (no port; IPv6 in
/// brackets), or `*` alone; lower-cased.
fn host_names(value: &str) -> Result<Vec<String>, ConfigError> {
    let names: Vec<String> = value
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    let valid = |h: &String| {
        h == "*"
            || h.strip_prefix('[')
                .and_then(|v6| v6.strip_suffix(']'))
                .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok())
            || (h.len() <= 253
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'))
    };
    if names.is_empty()
        || !names.iter().all(valid)
        || (names.len() > 1 && names.iter().any(|h| h == "*"))
    {
        return Err(ConfigError {
            name: "SLUICE_ALLOWED_HOSTS",
            value: value.to_string(),
            expected: "comma-separated host names or addresses without a port (IPv6 in brackets), such as localhost,sluice.internal,10.0.0.5; or * alone for any".into(),
        });
    }
    Ok(names)
}

#[cfg(test)]
mod tests;
