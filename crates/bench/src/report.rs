//! From samples to numbers, and from numbers to files: `report.json` (everything, samples
//! included), `report.csv` (one row per level) and `report.html` (self-contained: tables and
//! inline SVG plots — TTFT distribution, latency against load, server stage breakdown).
//!
//! Definitions (as vLLM's benchmark and GuideLLM use them): TTFT is sending → first token
//! event; end-to-end is sending → end of the stream; ITL is the gap between consecutive
//! token events; TPOT is `(e2e − TTFT) / (tokens − 1)` per request; goodput counts requests
//! per second that succeeded with TTFT within the SLO. "TTFT added by Sluice" is a
//! percentile of Sluice's TTFT minus the same percentile straight from the LLM, at the same
//! load, with the same prompts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::load::{Level, Load, Sample};

/// Count, mean and percentiles (nearest rank) of one measure, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Values.
    pub count: usize,
    /// Mean.
    pub mean: f64,
    /// Percentiles.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    /// The statistics of `values` (all zero when there are none).
    pub fn of(mut values: Vec<f64>) -> Self {
        values.retain(|v| v.is_finite());
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let rank = |q: f64| values[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        Self {
            count: n,
            mean: values.iter().sum::<f64>() / n as f64,
            p50: rank(0.50),
            p90: rank(0.90),
            p95: rank(0.95),
            p99: rank(0.99),
            min: values[0],
            max: values[n - 1],
        }
    }
}

/// Server stage timings from `done.timings`, per stage that ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stages {
    /// Cache lookups.
    pub cache_ms: Stats,
    /// Query embedding.
    pub embed_ms: Stats,
    /// Hybrid retrieval.
    pub retrieve_ms: Stats,
    /// Tenant rerank component.
    pub rerank_ms: Stats,
    /// Prompt assembly.
    pub prompt_ms: Stats,
    /// LLM request → first token.
    pub llm_ttft_ms: Stats,
    /// Request received → first token sent.
    pub ttft_ms: Stats,
    /// Request received → end.
    pub total_ms: Stats,
    /// `ttft_ms − llm_ttft_ms`: what the pipeline adds, measured inside the server.
    pub pipeline_ms: Stats,
}

/// The client-side numbers of one set of samples.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Measures {
    /// Recorded requests (`ok + errors`).
    pub requests: usize,
    /// Ended with `done` (or a finish reason).
    pub ok: usize,
    /// Did not.
    pub errors: usize,
    /// `errors / requests`.
    pub error_rate: f64,
    /// First recorded start to last end, seconds.
    pub duration_s: f64,
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Token events per second, all streams together.
    pub output_tokens_per_s: f64,
    /// Requests per second that succeeded within the TTFT SLO.
    pub goodput_per_s: f64,
    /// The share of requests that did.
    pub goodput_share: f64,
    /// Time to first token.
    pub ttft_ms: Stats,
    /// Time per output token after the first.
    pub tpot_ms: Stats,
    /// Inter-token latency.
    pub itl_ms: Stats,
    /// End to end.
    pub e2e_ms: Stats,
    /// Tokens per answer.
    pub tokens: Stats,
    /// The most frequent error messages with their counts.
    pub error_kinds: Vec<(String, usize)>,
}

/// TTFT added by Sluice: its percentile minus the LLM's alone, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Added {
    /// At the median.
    pub p50: f64,
    /// At the 90th percentile.
    pub p90: f64,
    /// At the 99th percentile.
    pub p99: f64,
}

/// One level of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LevelReport {
    /// The load.
    pub load: Load,
    /// Its label.
    pub label: String,
    /// Sluice, measured by the client.
    pub sluice: Measures,
    /// Sluice's own stage timings.
    pub stages: Stages,
    /// Answers served from the cache.
    pub cache_hits: usize,
    /// Answers with `meta.degraded`.
    pub degraded: usize,
    /// The same prompts straight to the LLM at the same load (comparison mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<Measures>,
    /// TTFT added by Sluice (comparison mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_ttft_ms: Option<Added>,
    /// The server's resident memory after the level (this and the next two from its
    /// `/metrics`; absent when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_mb: Option<f64>,
    /// Peak resident memory so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_peak_rss_mb: Option<f64>,
    /// The server's open file descriptors after the level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_open_fds: Option<f64>,
    /// The recorded requests.
    pub samples: Vec<Sample>,
}

impl LevelReport {
    /// The level in one line, as `sluice bench run` prints it when the level ends.
    pub fn summary(&self) -> String {
        let m = &self.sluice;
        let added = (self.added_ttft_ms.as_ref()).map_or(String::new(), |a| {
            format!(" | added ttft p50 {:.1} p99 {:.1} ms", a.p50, a.p99)
        });
        let rss = match (
            self.server_rss_mb,
            self.server_peak_rss_mb,
            self.server_open_fds,
        ) {
            (Some(now), Some(peak), Some(fds)) => {
                format!(" | server rss {now:.0} MB (peak {peak:.0}), {fds:.0} fds")
            }
            _ => String::new(),
        };
        format!(
            "{:<18} {} ok {} errors | ttft p50 {:.1} p99 {:.1} ms | e2e p50 {:.0} ms | {:.1} req/s \
             {:.0} tok/s | pipeline p99 {:.1} ms{added}{rss}",
            self.label,
            m.ok,
            m.errors,
            m.ttft_ms.p50,
            m.ttft_ms.p99,
            m.e2e_ms.p50,
            m.requests_per_s,
            m.output_tokens_per_s,
            self.stages.pipeline_ms.p99,
        )
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// What was measured, for people (URL, upstream, settings).
    pub target: String,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// The TTFT SLO of goodput, ms.
    pub slo_ttft_ms: f64,
    /// Warm-up per level, seconds.
    pub warmup_s: f64,
    /// Levels in the order they ran.
    pub levels: Vec<LevelReport>,
}

/// The numbers of one level's samples.
pub fn measures(level: &Level, slo_ttft_ms: f64) -> Measures {
    let samples = &level.samples;
    let ok: Vec<&Sample> = samples.iter().filter(|s| s.ok).collect();
    let duration_s = level.duration.as_secs_f64();
    let good = ok
        .iter()
        .filter(|s| s.ttft_ms.is_some_and(|t| t <= slo_ttft_ms))
        .count();
    let tokens: u64 = ok.iter().map(|s| s.tokens).sum();
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for e in samples.iter().filter_map(|s| s.error.as_deref()) {
        let kind: String = e.chars().take(120).collect();
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    kinds.truncate(5);
    let requests = samples.len();
    Measures {
        requests,
        ok: ok.len(),
        errors: requests - ok.len(),
        error_rate: if requests > 0 {
            (requests - ok.len()) as f64 / requests as f64
        } else {
            0.0
        },
        duration_s,
        requests_per_s: ok.len() as f64 / duration_s,
        output_tokens_per_s: tokens as f64 / duration_s,
        goodput_per_s: good as f64 / duration_s,
        goodput_share: if requests > 0 {
            good as f64 / requests as f64
        } else {
            0.0
        },
        ttft_ms: Stats::of(ok.iter().filter_map(|s| s.ttft_ms).collect()),
        tpot_ms: Stats::of(
            ok.iter()
                .filter(|s| s.tokens > 1)
                .filter_map(|s| s.ttft_ms.map(|t| (s.e2e_ms - t) / (s.tokens - 1) as f64))
                .collect(),
        ),
        itl_ms: Stats::of(ok.iter().flat_map(|s| s.itl_ms.iter().copied()).collect()),
        e2e_ms: Stats::of(ok.iter().map(|s| s.e2e_ms).collect()),
        tokens: Stats::of(ok.iter().map(|s| s.tokens as f64).collect()),
        error_kinds: kinds,
    }
}

/// Sluice's stage timings over the level's successful answers.
pub fn stages(level: &Level) -> Stages {
    let timings: Vec<_> = level
        .samples
        .iter()
        .filter(|s| s.ok)
        .filter_map(|s| s.server.as_ref())
        .collect();
    let of = |f: fn(&sluice_contract::sse::Timings) -> Option<f64>| {
        Stats::of(timings.iter().filter_map(|t| f(t)).collect())
    };
    Stages {
        cache_ms: of(|t| t.cache_ms),
        embed_ms: of(|t| t.embed_ms),
        retrieve_ms: of(|t| t.retrieve_ms),
        rerank_ms: of(|t| t.rerank_ms),
        prompt_ms: of(|t| t.prompt_ms),
        llm_ttft_ms: of(|t| t.llm_ttft_ms),
        ttft_ms: of(|t| t.ttft_ms),
        total_ms: of(|t| t.total_ms),
        pipeline_ms: of(|t| Some(t.ttft_ms? - t.llm_ttft_ms?)),
    }
}

/// Sluice's TTFT percentiles minus the LLM's.
pub fn added(sluice: &Measures, direct: &Measures) -> Added {
    Added {
        p50: sluice.ttft_ms.p50 - direct.ttft_ms.p50,
        p90: sluice.ttft_ms.p90 - direct.ttft_ms.p90,
        p99: sluice.ttft_ms.p99 - direct.ttft_ms.p99,
    }
}

/// Writes `report.json`, `report.csv` and `report.html` into `dir`; returns their paths.
pub fn write(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::Io(dir.to_path_buf(), e))?;
    let files = [
        (
            "report.json",
            serde_json::to_string_pretty(report).map_err(|e| BenchError::Setup(e.to_string()))?,
        ),
        ("report.csv", csv(report)),
        ("report.html", html(report)),
    ];
    let mut paths = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| BenchError::Io(path.clone(), e))?;
        paths.push(path);
    }
    Ok(paths)
}

/// One row per level.
pub fn csv(report: &Report) -> String {
    let mut out = String::from(
        "load,level,requests,ok,errors,error_rate,duration_s,requests_per_s,output_tokens_per_s,\
         goodput_per_s,ttft_p50_ms,ttft_p90_ms,ttft_p95_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,\
         itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,pipeline_p50_ms,pipeline_p99_ms,\
         direct_ttft_p50_ms,direct_ttft_p99_ms,added_ttft_p50_ms,added_ttft_p99_ms,\
         cache_hits,degraded,server_peak_rss_mb,server_rss_mb,server_open_fds\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    for l in &report.levels {
        let m = &l.sluice;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{:.4},{:.3},{:.3},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{},{},{},{},{}",
            l.label,
            l.load.level(),
            m.requests,
            m.ok,
            m.errors,
            m.error_rate,
            m.duration_s,
            m.requests_per_s,
            m.output_tokens_per_s,
            m.goodput_per_s,
            m.ttft_ms.p50,
            m.ttft_ms.p90,
            m.ttft_ms.p95,
            m.ttft_ms.p99,
            m.tpot_ms.p50,
            m.tpot_ms.p99,
            m.itl_ms.p50,
            m.itl_ms.p99,
            m.e2e_ms.p50,
            m.e2e_ms.p99,
            l.stages.pipeline_ms.p50,
            l.stages.pipeline_ms.p99,
            opt(l.direct.as_ref().map(|d| d.ttft_ms.p50)),
            opt(l.direct.as_ref().map(|d| d.ttft_ms.p99)),
            opt(l.added_ttft_ms.as_ref().map(|a| a.p50)),
            opt(l.added_ttft_ms.as_ref().map(|a| a.p99)),
            l.cache_hits,
            l.degraded,
            opt(l.server_peak_rss_mb),
            opt(l.server_rss_mb),
            opt(l.server_open_fds),
        );
    }
    out
}

/// Colours of series, in order (distinguishable in light and dark print).
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A plot frame 640×300 with axes from 0 to `x_max`/`y_max`; `body` draws in data
/// coordinates through the returned mapping.
struct Plot {
    svg: String,
    x_max: f64,
    y_max: f64,
}

const W: f64 = 640.0;
const H: f64 = 300.0;
const LEFT: f64 = 60.0;
const BOTTOM: f64 = 40.0;
const TOP: f64 = 30.0;
const RIGHT: f64 = 160.0;

impl Plot {
    fn new(title: &str, x_label: &str, y_label: &str, x_max: f64, y_max: f64) -> Self {
        let x_max = if x_max > 0.0 { x_max * 1.05 } else { 1.0 };
        let y_max = if y_max > 0.0 { y_max * 1.05 } else { 1.0 };
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}"><title>{t}</title><rect width="{W}" height="{H}" fill="white"/><text x="{LEFT}" y="18" font-size="14" font-weight="bold">{t}</text>"#,
            t = esc(title)
        );
        let (x0, y0, x1, y1) = (LEFT, H - BOTTOM, W - RIGHT, TOP);
        let _ = write!(
            svg,
            r##"<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#333"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/>"##
        );
        for i in 0..=4 {
            let f = i as f64 / 4.0;
            let (xv, yv) = (x_max * f, y_max * f);
            let x = x0 + (x1 - x0) * f;
            let y = y0 - (y0 - y1) * f;
            let _ = write!(
                svg,
                r##"<text x="{x}" y="{}" font-size="11" text-anchor="middle">{}</text><line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#ddd"/>"##,
                y0 + 15.0,
                short(xv),
            );
            // A plot without a y label (the stage bars) has rows, not a y scale.
            if !y_label.is_empty() {
                let _ = write!(
                    svg,
                    r#"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"#,
                    x0 - 5.0,
                    y + 4.0,
                    short(yv)
                );
            }
        }
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text><text x="14" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>"#,
            (x0 + x1) / 2.0,
            H - 5.0,
            esc(x_label),
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            esc(y_label)
        );
        Self { svg, x_max, y_max }
    }

    fn x(&self, v: f64) -> f64 {
        LEFT + (W - RIGHT - LEFT) * (v / self.x_max)
    }

    fn y(&self, v: f64) -> f64 {
        (H - BOTTOM) - (H - BOTTOM - TOP) * (v / self.y_max)
    }

    fn line(&mut self, i: usize, name: &str, points: &[(f64, f64)], dashed: bool) {
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", self.x(*x), self.y(*y)))
            .collect();
        let dash = if dashed {
            r#" stroke-dasharray="5 4""#
        } else {
            ""
        };
        let _ = write!(
            self.svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        for (x, y) in points.iter().filter(|_| points.len() < 30) {
            let _ = write!(
                self.svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#,
                self.x(*x),
                self.y(*y)
            );
        }
        self.legend(i, name, colour, dash);
    }

    fn legend(&mut self, i: usize, name: &str, colour: &str, dash: &str) {
        let y = TOP + 10.0 + 16.0 * i as f64;
        let x = W - RIGHT + 10.0;
        let _ = write!(
            self.svg,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="3"{dash}/><text x="{}" y="{}" font-size="11">{}</text>"#,
            x + 18.0,
            x + 22.0,
            y + 4.0,
            esc(name)
        );
    }

    fn finish(self) -> String {
        self.svg + "</svg>"
    }
}

fn short(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The empirical distribution of TTFT per level (and straight from the LLM, dashed).
fn ttft_plot(report: &Report) -> String {
    let mut series: Vec<(String, Vec<f64>, bool)> = Vec::new();
    for l in &report.levels {
        series.push((
            format!("Sluice, {}", l.label),
            l.samples.iter().filter_map(|s| s.ttft_ms).collect(),
            false,
        ));
    }
    let x_max = series
        .iter()
        .flat_map(|(_, v, _)| v.iter().copied())
        .fold(0.0, f64::max);
    let mut plot = Plot::new(
        "TTFT distribution (client)",
        "time to first token, ms",
        "share of requests",
        x_max,
        1.0 / 1.05,
    );
    for (i, (name, mut values, dashed)) in series.into_iter().enumerate() {
        values.sort_by(f64::total_cmp);
        let n = values.len() as f64;
        let points: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .map(|(k, v)| (*v, (k + 1) as f64 / n))
            .collect();
        plot.line(i, &name, &points, dashed);
    }
    plot.finish()
}

/// A named line: its points and whether it is dashed.
type Series<'a> = (&'a str, Vec<(f64, f64)>, bool);
/// A stage's name and its mean.
type StagePart = (&'static str, fn(&Stages) -> f64);

/// p50/p99 TTFT and p50 end-to-end against the level, with the direct LLM's TTFT.
fn load_plot(report: &Report) -> String {
    let xs: Vec<f64> = report.levels.iter().map(|l| l.load.level()).collect();
    let pick = |f: &dyn Fn(&LevelReport) -> Option<f64>| -> Vec<(f64, f64)> {
        report
            .levels
            .iter()
            .zip(&xs)
            .filter_map(|(l, x)| f(l).map(|y| (*x, y)))
            .collect()
    };
    let series: Vec<Series<'_>> = vec![
        (
            "TTFT p50",
            pick(&|l: &LevelReport| Some(l.sluice.ttft_ms.p50)),
            false,
        ),
        (
            "TTFT p99",
            pick(&|l: &LevelReport| Some(l.sluice.ttft_ms.p99)),
            false,
        ),
        (
            "LLM alone p50",
            pick(&|l: &LevelReport| l.direct.as_ref().map(|d| d.ttft_ms.p50)),
            true,
        ),
        (
            "LLM alone p99",
            pick(&|l: &LevelReport| l.direct.as_ref().map(|d| d.ttft_ms.p99)),
            true,
        ),
        (
            "pipeline p99 (server)",
            pick(&|l: &LevelReport| Some(l.stages.pipeline_ms.p99)),
            false,
        ),
    ];
    let x_max = xs.iter().copied().fold(0.0, f64::max);
    let y_max = series
        .iter()
        .flat_map(|(_, p, _)| p.iter().map(|(_, y)| *y))
        .fold(0.0, f64::max);
    let x_label = match report.levels.first().map(|l| l.load) {
        Some(Load::Constant(_) | Load::Poisson(_)) => "requests per second",
        _ => "concurrent streams",
    };
    let mut plot = Plot::new("Latency against load", x_label, "ms", x_max, y_max);
    for (i, (name, points, dashed)) in series.into_iter().enumerate() {
        if !points.is_empty() {
            plot.line(i, name, &points, dashed);
        }
    }
    plot.finish()
}

/// Mean server time per stage before the first token, one stacked bar per level.
fn stage_plot(report: &Report) -> String {
    let parts: [StagePart; 6] = [
        ("cache", |s| s.cache_ms.mean),
        ("embed", |s| s.embed_ms.mean),
        ("retrieve", |s| s.retrieve_ms.mean),
        ("rerank", |s| s.rerank_ms.mean),
        ("prompt", |s| s.prompt_ms.mean),
        ("LLM first token", |s| s.llm_ttft_ms.mean),
    ];
    let total = |s: &Stages| parts.iter().map(|(_, f)| f(s)).sum::<f64>();
    let x_max = report
        .levels
        .iter()
        .map(|l| total(&l.stages))
        .fold(0.0, f64::max);
    let n = report.levels.len().max(1) as f64;
    let mut plot = Plot::new(
        "Server time to first token by stage (mean)",
        "ms",
        "",
        x_max,
        n,
    );
    let bar = ((H - BOTTOM - TOP) / n * 0.6).min(28.0);
    for (row, l) in report.levels.iter().enumerate() {
        let y = plot.y(row as f64 + 0.5) - bar / 2.0;
        let mut at = 0.0;
        for (i, (_, f)) in parts.iter().enumerate() {
            let v = f(&l.stages);
            if v > 0.0 {
                let _ = write!(
                    plot.svg,
                    r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{bar:.1}" fill="{}"><title>{}: {v:.2} ms</title></rect>"#,
                    plot.x(at),
                    plot.x(at + v) - plot.x(at),
                    COLOURS[i],
                    esc(&l.label)
                );
            }
            at += v;
        }
        let _ = write!(
            plot.svg,
            r#"<text x="{}" y="{:.1}" font-size="10">{}</text>"#,
            LEFT + 4.0,
            y - 2.0,
            esc(&l.label)
        );
    }
    for (i, (name, _)) in parts.iter().enumerate() {
        plot.legend(i, name, COLOURS[i], "");
    }
    plot.finish()
}

fn stats_row(name: &str, s: &Stats) -> String {
    format!(
        "<tr><th scope=\"row\">{}</th><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>",
        esc(name),
        s.count,
        s.mean,
        s.p50,
        s.p90,
        s.p95,
        s.p99,
        s.max
    )
}

/// The self-contained HTML report.
pub fn html(report: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sluice benchmark</title>
<style>body{{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:0 auto;padding:1rem}}table{{border-collapse:collapse;margin:.5rem 0 1rem;font-variant-numeric:tabular-nums}}th,td{{padding:.15rem .6rem;border-bottom:1px solid #ddd;text-align:right}}th:first-child{{text-align:left}}svg{{max-width:100%;height:auto;display:block;margin:.5rem 0}}</style></head><body>
<h1>Sluice benchmark</h1><p>{} · started {} · warm-up {} s per level · TTFT SLO {} ms</p>"#,
        esc(&report.target),
        esc(&report.started_at),
        report.warmup_s,
        report.slo_ttft_ms
    );
    out.push_str(&ttft_plot(report));
    out.push_str(&load_plot(report));
    out.push_str(&stage_plot(report));
    out.push_str("<h2>Levels</h2><table><tr><th>load</th><th>requests</th><th>errors</th><th>req/s</th><th>tokens/s</th><th>goodput/s</th><th>TTFT p50</th><th>TTFT p99</th><th>added p50</th><th>added p99</th><th>peak RSS MB</th></tr>");
    for l in &report.levels {
        let m = &l.sluice;
        let added = l.added_ttft_ms.as_ref();
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{:.2}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&l.label),
            m.requests,
            m.errors,
            m.requests_per_s,
            m.output_tokens_per_s,
            m.goodput_per_s,
            m.ttft_ms.p50,
            m.ttft_ms.p99,
            added.map_or("–".into(), |a| format!("{:.1}", a.p50)),
            added.map_or("–".into(), |a| format!("{:.1}", a.p99)),
            l.server_peak_rss_mb
                .map_or("–".into(), |v| format!("{v:.0}")),
        );
    }
    out.push_str("</table>");
    for l in &report.levels {
        let _ = write!(
            out,
            "<h2>{}</h2><table><tr><th>ms</th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>",
            esc(&l.label)
        );
        let m = &l.sluice;
        for (name, s) in [
            ("TTFT", &m.ttft_ms),
            ("TPOT", &m.tpot_ms),
            ("ITL", &m.itl_ms),
            ("end to end", &m.e2e_ms),
            ("server: embed", &l.stages.embed_ms),
            ("server: retrieve", &l.stages.retrieve_ms),
            ("server: rerank", &l.stages.rerank_ms),
            ("server: prompt", &l.stages.prompt_ms),
            ("server: LLM first token", &l.stages.llm_ttft_ms),
            ("server: pipeline (ttft − LLM)", &l.stages.pipeline_ms),
        ] {
            if s.count > 0 {
                out.push_str(&stats_row(name, s));
            }
        }
        if let Some(d) = &l.direct {
            out.push_str(&stats_row("LLM alone: TTFT", &d.ttft_ms));
            out.push_str(&stats_row("LLM alone: end to end", &d.e2e_ms));
        }
        out.push_str("</table>");
        for (kind, n) in &m.error_kinds {
            let _ = write!(out, "<p>{n} × {}</p>", esc(kind));
        }
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let s = Stats::of((1..=100).map(f64::from).collect());
        assert_eq!((s.p50, s.p90, s.p99, s.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(s.mean, 50.5);
        let one = Stats::of(vec![7.0]);
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert_eq!(Stats::of(vec![]).count, 0);
    }

    fn sample(ttft: f64, e2e: f64, tokens: u64) -> Sample {
        Sample {
            ok: true,
            ttft_ms: Some(ttft),
            e2e_ms: e2e,
            tokens,
            ..Sample::default()
        }
    }

    #[test]
    fn measures_count_errors_goodput_and_tpot() {
        let failed = Sample {
            error: Some("HTTP 500".into()),
            e2e_ms: 3.0,
            ..Sample::default()
        };
        let level = Level {
            load: Load::Concurrent(2),
            samples: vec![sample(10.0, 110.0, 11), sample(300.0, 400.0, 1), failed],
            duration: std::time::Duration::from_secs(2),
        };
        let m = measures(&level, 100.0);
        assert_eq!((m.requests, m.ok, m.errors), (3, 2, 1));
        assert!((m.error_rate - 1.0 / 3.0).abs() < 1e-9);
        // One request within the SLO, over two seconds.
        assert_eq!(m.goodput_per_s, 0.5);
        // (110 - 10) / (11 - 1); the one-token answer has no TPOT.
        assert_eq!((m.tpot_ms.count, m.tpot_ms.p50), (1, 10.0));
        assert_eq!(m.output_tokens_per_s, 6.0);
        assert_eq!(m.error_kinds, vec![("HTTP 500".to_string(), 1)]);
    }
}
