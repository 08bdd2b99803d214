//! Hostile components, written in the component text format (wasmtime compiles WAT
//! directly). Each behaves during the upload smoke run (2 candidates) and misbehaves on a
//! real request (3 or more), as an adversary would; after each, the sandbox must still serve
//! a well-behaved component.

use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use sluice_rerank::{
    Call, Candidate, ComponentLimits, ContextEntry, HostServices, MetaField, MetaValue,
    RerankError, Sandbox, UploadError, WALL_DEADLINES, WORLD_0_1, WORLD_0_2,
};

/// The default limits' deadline.
const DEFAULT_DEADLINE: Duration = Duration::from_millis(5);

mod common;
use common::roomy;

struct NoHost;

impl HostServices for NoHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        text.split_whitespace().count() as u32
    }
}

fn sandbox(limits: ComponentLimits) -> Sandbox {
    Sandbox::new(limits, Arc::new(NoHost)).expect("engine")
}

/// The well-behaved component of `reverse.wat`, with `hostile` (which must leave the address
/// of a result record on the stack, or never return) run instead when there are more than
/// two candidates.
fn component(hostile: &str) -> String {
    let template = include_str!("reverse.wat");
    assert!(template.contains(MARK));
    template.replace(MARK, hostile)
}

const MARK: &str = "(call $reverse (local.get $n)) ;; misbehaviour";
const WELL_BEHAVED: &str = "(call $reverse (local.get $n))";

fn candidates(n: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| Candidate {
            id: format!("doc{i}"),
            title: format!("Doc {i}"),
            text: format!("text of candidate {i}"),
            score: 1.0 / (60.0 + i as f32),
            chunk: i as u32,
            metadata: vec![MetaField {
                key: "audience".into(),
                value: MetaValue::Strings(vec!["pro".into(); 64]),
            }],
        })
        .collect()
}

/// A call on `candidates` with no context.
fn call(candidates: &[Candidate]) -> Call<'_> {
    Call {
        query: "q",
        context: &[],
        candidates,
    }
}

/// Uploads `hostile`, runs it on 5 candidates, then proves the sandbox still works.
fn run_hostile(sandbox: &Sandbox, hostile: &str) -> RerankError {
    let bad = sandbox
        .compile(component(hostile).as_bytes())
        .expect("passes the smoke run");
    let err = sandbox
        .rerank(&bad, "q", &candidates(5))
        .expect_err("hostile component must fail");
    let good = sandbox.compile(component(WELL_BEHAVED).as_bytes()).unwrap();
    assert_eq!(
        sandbox.rerank(&good, "q", &candidates(5)).unwrap(),
        vec![4, 3, 2, 1, 0]
    );
    err
}

#[test]
fn a_well_behaved_component_reorders_candidates() {
    let sb = sandbox(roomy());
    let prepared = sb.compile(component(WELL_BEHAVED).as_bytes()).unwrap();
    assert_eq!(
        sb.rerank(&prepared, "q", &candidates(4)).unwrap(),
        vec![3, 2, 1, 0]
    );
    // The stored artefact loads without compiling and behaves the same.
    let loaded = sb.load(&prepared.artifact).unwrap();
    assert_eq!(
        sb.rerank(&loaded, "q", &candidates(3)).unwrap(),
        vec![2, 1, 0]
    );
}

#[test]
fn an_infinite_loop_runs_out_of_fuel() {
    let sb = sandbox(ComponentLimits {
        fuel: 2_000_000,
        ..roomy()
    });
    let err = run_hostile(&sb, "(loop $forever (br $forever)) (unreachable)");
    assert_eq!(err, RerankError::OutOfFuel(2_000_000));
}

#[test]
fn an_infinite_loop_hits_the_epoch_deadline() {
    let sb = sandbox(ComponentLimits {
        fuel: u64::MAX / 2,
        deadline: Duration::from_millis(5),
        ..ComponentLimits::default()
    });
    let bad = sb
        .compile(component("(loop $forever (br $forever)) (unreachable)").as_bytes())
        .unwrap();
    let err = sb.rerank(&bad, "q", &candidates(5)).unwrap_err();
    // That it returned is the property: the loop never ends by itself (no fuel runs out).
    assert_eq!(err, RerankError::Deadline(Duration::from_millis(5)));
}

#[test]
fn a_memory_bomb_is_capped() {
    let sb = sandbox(roomy());
    let err = run_hostile(
        &sb,
        "(loop $grow (drop (memory.grow (i32.const 16))) (br $grow)) (unreachable)",
    );
    assert_eq!(err, RerankError::Memory(16 << 20));
}

#[test]
fn a_trap_is_reported() {
    let err = run_hostile(&sandbox(roomy()), "(unreachable)");
    assert!(
        matches!(err, RerankError::Trap(ref m) if m.contains("unreachable")),
        "{err:?}"
    );
}

#[test]
fn a_huge_output_is_refused() {
    // Claims ten million scores: far past the end of its memory.
    let hostile = "(i32.store8 (i32.const 256) (i32.const 0)) (i32.store (i32.const 260) (i32.const 512)) \
                   (i32.store (i32.const 264) (i32.const 10000000)) (i32.const 256)";
    let err = run_hostile(&sandbox(roomy()), hostile);
    assert!(matches!(err, RerankError::Trap(_)), "{err:?}");
}

#[test]
fn a_wrong_length_output_is_refused() {
    let err = run_hostile(&sandbox(roomy()), "(call $reverse (i32.const 2))");
    assert_eq!(
        err,
        RerankError::InvalidOutput("2 scores for 5 candidates".into())
    );
}

#[test]
fn nan_scores_are_refused() {
    let hostile = "(drop (call $reverse (local.get $n))) (f32.store (i32.const 524) (f32.const nan)) (i32.const 256)";
    let err = run_hostile(&sandbox(roomy()), hostile);
    assert!(
        matches!(err, RerankError::InvalidOutput(ref m) if m.contains("not finite")),
        "{err:?}"
    );
}

#[test]
fn a_component_error_is_passed_on() {
    // err("nope"): tag 1, then the string's pointer and length.
    let hostile = "(i32.store (i32.const 1024) (i32.const 0x65706f6e)) (i32.store8 (i32.const 256) (i32.const 1)) \
                   (i32.store (i32.const 260) (i32.const 1024)) (i32.store (i32.const 264) (i32.const 4)) (i32.const 256)";
    let err = run_hostile(&sandbox(roomy()), hostile);
    assert_eq!(err, RerankError::Guest("nope".into()));
    // err("x" × 5,000): the first 1,024 characters are kept.
    let long = "(memory.fill (i32.const 40000) (i32.const 120) (i32.const 5000)) \
                (i32.store8 (i32.const 256) (i32.const 1)) (i32.store (i32.const 260) (i32.const 40000)) \
                (i32.store (i32.const 264) (i32.const 5000)) (i32.const 256)";
    let message = match run_hostile(&sandbox(roomy()), long) {
        RerankError::Guest(message) => message,
        other => panic!("a component error, not {other:?}"),
    };
    assert_eq!(message, "x".repeat(1024));
}

#[test]
fn oversized_input_is_refused_before_running() {
    let sb = sandbox(ComponentLimits {
        max_candidates: 3,
        max_text_bytes: 16,
        ..roomy()
    });
    let good = sb.compile(component(WELL_BEHAVED).as_bytes()).unwrap();
    assert!(matches!(
        sb.rerank(&good, "q", &candidates(4)),
        Err(RerankError::Input(_))
    ));
    let mut long = candidates(1);
    long[0].text = "x".repeat(17);
    assert!(matches!(
        sb.rerank(&good, "q", &long),
        Err(RerankError::Input(_))
    ));
}

#[test]
fn forbidden_imports_are_refused_at_upload() {
    let wasi = "(component\n  (import \"wasi:filesystem/types@0.2.0\" (instance (export \"sync\" (func))))";
    let wat = component(WELL_BEHAVED).replacen("(component", wasi, 1);
    let err = sandbox(roomy()).compile(wat.as_bytes()).err().unwrap();
    assert_eq!(
        err,
        UploadError::ForbiddenImport("wasi:filesystem/types@0.2.0".into())
    );
}

#[test]
fn other_bytes_are_refused_at_upload() {
    let sb = sandbox(roomy());
    assert!(matches!(
        sb.compile(b"MZ\x90\0 not wasm"),
        Err(UploadError::NotAComponent(_))
    ));
    let module = b"\0asm\x01\0\0\0";
    assert!(
        matches!(sb.compile(module), Err(UploadError::NotAComponent(m)) if m.contains("core wasm module"))
    );
    let truncated = b"\0asm\x0d\0\x01\0\x07";
    assert!(matches!(
        sb.compile(truncated),
        Err(UploadError::NotAComponent(_))
    ));
    let too_big = vec![0u8; (2 << 20) + 1];
    assert!(matches!(
        sb.compile(&too_big),
        Err(UploadError::TooLarge { .. })
    ));
}

#[test]
fn a_component_of_another_world_is_refused() {
    let wat = r#"(component
  (core module $m (func (export "f") (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func $f (result u32) (canon lift (core func $i "f")))
  (export "score" (func $f)))"#;
    let err = sandbox(roomy()).compile(wat.as_bytes()).err().unwrap();
    assert!(matches!(err, UploadError::WrongWorld(_)), "{err:?}");
}

#[test]
fn a_component_that_fails_its_smoke_run_is_refused() {
    let wat = component("(unreachable)")
        .replace("(i32.le_u (local.get $n) (i32.const 2))", "(i32.const 0)");
    let err = sandbox(roomy()).compile(wat.as_bytes()).err().unwrap();
    assert!(
        matches!(
            err,
            UploadError::SmokeRun {
                error: RerankError::Trap(_),
                ..
            }
        ),
        "{err:?}"
    );
}

// Host-call floods: host code runs outside fuel and epochs, so each call has a budget of host
// work. `Counting` records every byte and text the host was asked to work on, so the tests
// assert the work the host did, not a time.

/// A host that counts what it was asked to do.
#[derive(Default)]
struct Counting {
    tokenised: std::sync::atomic::AtomicUsize,
    embedded: std::sync::atomic::AtomicUsize,
}

impl HostServices for Counting {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        use std::sync::atomic::Ordering::Relaxed;
        self.embedded.fetch_add(texts.len(), Relaxed);
        self.tokenised
            .fetch_add(texts.iter().map(|t| t.len()).sum(), Relaxed);
        Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        self.tokenised
            .fetch_add(text.len(), std::sync::atomic::Ordering::Relaxed);
        text.split_whitespace().count() as u32
    }
}

/// `host_calls.wat` with `flood` run on real requests (more than two candidates).
fn host_calls(flood: &str) -> String {
    let template = include_str!("host_calls.wat");
    assert!(template.contains(FLOOD));
    template.replace(FLOOD, flood)
}

const FLOOD: &str = "(nop) ;; flood";

/// Runs `flood` on 5 candidates under the default limits with room in time (the budgets, not
/// a loaded machine's clock, must end it) with a counting host; the error (if any), what the
/// call cost and what the host saw.
fn flood(flood: &str) -> (Option<RerankError>, sluice_rerank::CallCost, (usize, usize)) {
    flood_under(roomy(), flood)
}

/// [`flood`] under `limits`.
fn flood_under(
    limits: ComponentLimits,
    flood: &str,
) -> (Option<RerankError>, sluice_rerank::CallCost, (usize, usize)) {
    use std::sync::atomic::Ordering::Relaxed;
    let host = Arc::new(Counting::default());
    let sb = Sandbox::new(limits, host.clone()).expect("engine");
    let bad = sb
        .compile(host_calls(flood).as_bytes())
        .expect("passes the smoke run");
    let (result, cost) = sb.rerank_costed(&bad, &call(&candidates(5)), Default::default());
    let seen = (host.tokenised.load(Relaxed), host.embedded.load(Relaxed));
    (result.err(), cost, seen)
}

#[test]
fn a_component_that_calls_the_host_within_its_budget_works() {
    // Three texts to embed, one count and one log line: well within every budget.
    let (err, cost, (tokenised, embedded)) = flood(
        "(call $fill (i32.const 65536) (i32.const 256)) (call $pairs (i32.const 3) (i32.const 100)) \
         (call $embed (i32.const 4096) (i32.const 3) (i32.const 2048)) \
         (drop (call $count (i32.const 65536) (i32.const 200))) \
         (call $log (i32.const 1) (i32.const 65536) (i32.const 40))",
    );
    assert_eq!(err, None);
    assert_eq!((embedded, tokenised), (3, 500));
    assert_eq!(cost.host.embedded_texts, 3);
    assert_eq!(cost.host.tokenised_bytes, 500);
    assert_eq!((cost.host.log_lines, cost.host.refused), (1, 0));
    assert!(cost.fuel > 0 && cost.fuel < ComponentLimits::default().fuel);
}

#[test]
fn count_tokens_of_a_large_text_is_refused_before_any_tokenising() {
    // 8 MiB counted ten times with no loop between the calls (only the host can stop them),
    // and the largest string memory allows (15 MiB). Given a second, so that writing the text
    // never runs into the deadline first: the first call is refused as wasmtime copies its
    // argument (over the call's 2 MiB copy budget), and stops the component.
    let limits = || ComponentLimits {
        deadline: Duration::from_secs(1),
        ..ComponentLimits::default()
    };
    for size in ["0x800000", "0xF00000"] {
        let wat = include_str!("floods/count_tokens.wat").replace("0x800000", size);
        let (err, cost, (tokenised, _)) = flood_under(limits(), &wat);
        assert!(
            matches!(&err, Some(RerankError::HostBudget(m)) if m.contains("copy budget")),
            "{err:?}"
        );
        assert_eq!(tokenised, 0, "the host tokenised nothing");
        assert_eq!(
            cost.host.refused, 1,
            "the call stopped at the first refusal"
        );
    }
    // Under the default 5 ms the deadline may stop it first, while it writes the text: either
    // way, nothing is tokenised.
    let (err, _, (tokenised, _)) = flood(include_str!("floods/count_tokens.wat"));
    assert!(
        matches!(
            err,
            Some(RerankError::HostBudget(_)) | Some(RerankError::Deadline(_))
        ),
        "{err:?}"
    );
    assert_eq!(tokenised, 0);
}

#[test]
fn count_tokens_stops_at_the_byte_budget() {
    // 16 KiB at a time: four fit the 64 KiB budget, the fifth stops the call.
    let (err, cost, (tokenised, _)) = flood(
        "(call $fill (i32.const 65536) (i32.const 16384)) (local.set $k (i32.const 1000)) \
         (loop $again (drop (call $count (i32.const 65536) (i32.const 16384))) \
           (local.set $k (i32.sub (local.get $k) (i32.const 1))) (br_if $again (local.get $k)))",
    );
    assert!(matches!(err, Some(RerankError::HostBudget(_))), "{err:?}");
    assert_eq!(tokenised, 4 * 16384);
    assert!(tokenised <= ComponentLimits::default().max_host_bytes);
    assert_eq!(cost.host.tokenised_bytes, tokenised);
}

#[test]
fn an_embed_flood_gets_errors_past_its_budget_and_the_host_stops() {
    // The 64 texts of 8 KiB are refused at once (512 KiB of text); the first batch of 8 fits
    // the 64 KiB budget; every later one is refused.
    let (err, cost, (tokenised, embedded)) = flood(include_str!("floods/embed.wat"));
    // The component ignores the errors and loops on: its own deadline or fuel ends it, or it
    // finishes; the host did at most one budget's work either way.
    assert!(
        matches!(
            err,
            None | Some(RerankError::Deadline(_)) | Some(RerankError::OutOfFuel(_))
        ),
        "{err:?}"
    );
    assert_eq!(embedded, 8, "one batch embedded");
    assert!(
        tokenised <= ComponentLimits::default().max_host_bytes,
        "{tokenised}"
    );
    assert!(cost.host.refused >= 2, "{cost:?}");
}

#[test]
fn a_log_flood_writes_only_its_budget() {
    let (err, cost, _) = flood(include_str!("floods/log.wat"));
    let limits = ComponentLimits::default();
    // 1 KiB lines into a 4 KiB budget: four lines, the rest dropped, until the call's host
    // calls run out (or its deadline passes) and the next one traps.
    assert_eq!(cost.host.log_lines, limits.max_log_bytes / 1024);
    assert!(cost.host.log_lines <= limits.max_log_lines);
    // The lines written are the call's log, for the tenant to read.
    assert_eq!(cost.logs.len(), cost.host.log_lines);
    assert!(
        cost.logs.iter().all(|l| l.message.len() == 1024),
        "{:?}",
        cost.logs.len()
    );
    assert!(cost.host.refused > 0, "{cost:?}");
    assert!(
        matches!(&err, Some(RerankError::HostBudget(m)) if m.contains("host calls") || m.contains("deadline")),
        "{err:?}"
    );
}

/// The CPU time this thread has used: a component's guest code and its host calls run on the
/// thread that calls it, so this is what one rerank call cost the server.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack frame.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A host whose every call first burns `cpu` of this thread's CPU time, then sleeps `sleep`
/// (as a host whose other work keeps the call's thread off a core).
struct Waiting {
    cpu: Duration,
    sleep: Duration,
}

impl Waiting {
    fn wait(&self) {
        let start = thread_cpu();
        while thread_cpu() - start < self.cpu {
            std::hint::spin_loop();
        }
        std::thread::sleep(self.sleep);
    }
}

impl HostServices for Waiting {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        self.wait();
        Ok(texts.iter().map(|_| vec![0.0]).collect())
    }
    fn count_tokens(&self, _: &str) -> u32 {
        self.wait();
        1
    }
}

/// Runs `flood` on 5 candidates under the default limits but `deadline`, `host` answering its
/// host calls: the call's result and cost.
fn run_waiting(
    deadline: Duration,
    host: Waiting,
    flood: &str,
) -> (
    Result<Vec<(usize, f32)>, RerankError>,
    sluice_rerank::CallCost,
) {
    let limits = ComponentLimits {
        deadline,
        ..ComponentLimits::default()
    };
    let sb = Sandbox::new(limits, Arc::new(host)).expect("engine");
    let prepared = sb
        .compile(host_calls(flood).as_bytes())
        .expect("passes the smoke run");
    sb.rerank_costed(&prepared, &call(&candidates(5)), Default::default())
}

/// `text` written into the guest's memory at `at`, a byte at a time.
fn store_text(at: u32, text: &str) -> String {
    (text.bytes().enumerate())
        .map(|(i, b)| {
            format!(
                "(i32.store8 (i32.const {}) (i32.const {b})) ",
                at + i as u32
            )
        })
        .collect()
}

const PANIC_LINE: &str = "panicked at src/lib.rs:7:9: every document has tags";

#[test]
fn a_panic_the_sdk_reports_is_the_failure_with_its_message_and_location() {
    let line = store_text(65536, PANIC_LINE);
    let log = format!(
        "(call $log (i32.const 3) (i32.const 65536) (i32.const {}))",
        PANIC_LINE.len()
    );
    // Logged, then the trap a panic ends in.
    let (err, _, _) = flood(&format!("{line} {log} (unreachable)"));
    let err = err.expect("the call fails");
    assert_eq!(err, RerankError::Panic(PANIC_LINE.into()));
    let failure = err.failure();
    assert_eq!(failure.kind, sluice_contract::stages::FailureKind::Panic);
    assert_eq!(failure.message, PANIC_LINE);
    // The line alone fails nothing; a limit after it is the limit, not the panic.
    let (err, _, _) = flood(&format!("{line} {log}"));
    assert_eq!(err, None);
    let (err, _, _) = flood_under(
        ComponentLimits {
            fuel: 2_000_000,
            ..roomy()
        },
        &format!("{line} {log} (loop $forever (br $forever))"),
    );
    assert_eq!(err, Some(RerankError::OutOfFuel(2_000_000)));
    // Without the line, a trap is a trap.
    let (err, _, _) = flood("(unreachable)");
    assert!(matches!(err, Some(RerankError::Trap(_))), "{err:?}");
}

#[test]
fn a_log_line_past_the_deadline_is_dropped_not_a_trap() {
    // `count-tokens` takes 10 ms of CPU against the 5 ms deadline; the line logged after it
    // is dropped (counted as refused). The call then ends as its epoch says (past the
    // deadline, or done if the ticker has not looked yet), never as a host-budget trap.
    let host = Waiting {
        cpu: Duration::from_millis(10),
        sleep: Duration::ZERO,
    };
    let (result, cost) = run_waiting(
        DEFAULT_DEADLINE,
        host,
        "(call $fill (i32.const 65536) (i32.const 64)) \
         (drop (call $count (i32.const 65536) (i32.const 10))) \
         (call $log (i32.const 1) (i32.const 65536) (i32.const 10))",
    );
    assert!(
        matches!(&result, Ok(_) | Err(RerankError::Deadline(_))),
        "{result:?}"
    );
    assert_eq!((cost.host.log_lines, cost.host.refused), (0, 1), "{cost:?}");
}

#[test]
fn a_call_kept_waiting_by_a_busy_host_is_not_failed_for_the_wait() {
    // The deadline is CPU time: twice the deadline off a core (a sleeping host call) is not
    // the component's doing, and the call succeeds; past `WALL_DEADLINES` deadlines of wall
    // time it is stopped all the same. A 50 ms deadline rather than the default 5 ms, so that
    // a loaded machine keeping the thread off a core a while longer does not reach the
    // 500-ms wall bound in the first call.
    let deadline = Duration::from_millis(50);
    let run = |sleep| {
        let host = Waiting {
            cpu: Duration::ZERO,
            sleep,
        };
        run_waiting(
            deadline,
            host,
            "(call $fill (i32.const 65536) (i32.const 64)) \
             (drop (call $count (i32.const 65536) (i32.const 10)))",
        )
    };
    let (result, cost) = run(deadline * 2);
    assert_eq!(result.map(|order| order.len()).ok(), Some(5), "{cost:?}");
    assert!(cost.wall >= deadline * 2, "{cost:?}");
    assert!(cost.cpu < cost.wall, "{cost:?}");
    let (result, _) = run(deadline * (WALL_DEADLINES + 1));
    assert!(
        matches!(result, Err(RerankError::Deadline(_))),
        "{result:?}"
    );
}

/// The server CPU one rerank call may cost with the default limits and a host whose work is
/// free (no model): its 5 ms deadline, up to 256 entries into the host and 4 MiB copied out
/// of the guest, with room for a loaded machine (the worst flood takes about 10 ms alone, and
/// has taken 53 ms of CPU beside a build: its 13 MiB of page faults cost more there), and far
/// below the 0.9 s the same flood cost before the budgets. `docs/security.md` states it.
const FLOOD_CPU: Duration = Duration::from_millis(200);

/// `call` written out `times` times in a row, with no loop or function entry between them:
/// only the host can stop such a flood (the epoch is checked at loop headers and entries).
fn straight_line(setup: &str, call: &str, times: usize) -> String {
    let mut flood = String::from(setup);
    for _ in 0..times {
        flood.push_str(call);
        flood.push('\n');
    }
    flood
}

#[test]
fn straight_line_floods_of_every_host_function_cost_the_server_little() {
    // Each under a 5 s deadline as well as the default 5 ms: the budget of host calls and of
    // bytes copied, not the deadline, must end them.
    let mb13 = 13 << 20;
    let floods = [
        (
            "log, 1,000 × 13 MiB",
            straight_line(
                &format!("(call $fill (i32.const 65536) (i32.const {mb13}))"),
                &format!("(call $log (i32.const 3) (i32.const 65536) (i32.const {mb13}))"),
                1000,
            ),
        ),
        (
            "log, 5,000 × 1 KiB",
            straight_line(
                "(call $fill (i32.const 65536) (i32.const 1024))",
                "(call $log (i32.const 3) (i32.const 65536) (i32.const 1024))",
                5000,
            ),
        ),
        (
            "log, 2,000 × 64 KiB",
            straight_line(
                "(call $fill (i32.const 65536) (i32.const 65536))",
                "(call $log (i32.const 3) (i32.const 65536) (i32.const 65536))",
                2000,
            ),
        ),
        (
            "count-tokens, 5,000 × 1 B",
            straight_line(
                "(call $fill (i32.const 65536) (i32.const 4))",
                "(drop (call $count (i32.const 65536) (i32.const 1)))",
                5000,
            ),
        ),
        (
            "count-tokens, 1,000 × 13 MiB",
            straight_line(
                &format!("(call $fill (i32.const 65536) (i32.const {mb13}))"),
                &format!("(drop (call $count (i32.const 65536) (i32.const {mb13})))"),
                1000,
            ),
        ),
        (
            // 1,600 texts of the same 8 KiB: 13 MiB in one list.
            "embed, 1,000 × 1,600 texts",
            straight_line(
                "(call $fill (i32.const 65536) (i32.const 8192)) (call $pairs (i32.const 1600) (i32.const 8192))",
                "(call $embed (i32.const 4096) (i32.const 1600) (i32.const 2048))",
                1000,
            ),
        ),
        (
            "embed, 5,000 × 1 text",
            straight_line(
                "(call $fill (i32.const 65536) (i32.const 16)) (call $pairs (i32.const 1) (i32.const 16))",
                "(call $embed (i32.const 4096) (i32.const 1) (i32.const 2048))",
                5000,
            ),
        ),
    ];
    for deadline in [ComponentLimits::default().deadline, Duration::from_secs(5)] {
        let limits = ComponentLimits {
            deadline,
            ..ComponentLimits::default()
        };
        let sb = Sandbox::new(limits.clone(), Arc::new(NoHost)).expect("engine");
        for (name, flood) in &floods {
            let bad = sb
                .compile(host_calls(flood).as_bytes())
                .expect("passes the smoke run");
            let before = thread_cpu();
            let (result, cost) = sb.rerank_costed(&bad, &call(&candidates(5)), Default::default());
            let cpu = thread_cpu() - before;
            eprintln!(
                "{name:<30} deadline {deadline:>6?}: {:>6.2} ms CPU, {:?}, {:?}",
                cpu.as_secs_f64() * 1e3,
                cost.host,
                result.as_ref().err()
            );
            assert!(
                matches!(
                    &result,
                    Err(RerankError::HostBudget(_) | RerankError::Deadline(_))
                ),
                "{name}: {result:?}"
            );
            assert!(
                cost.host.log_lines <= limits.max_log_lines,
                "{name}: {cost:?}"
            );
            assert!(
                cost.host.embedded_texts <= limits.max_embed_texts,
                "{name}: {cost:?}"
            );
            assert!(
                cpu <= FLOOD_CPU,
                "{name}, deadline {deadline:?}: {cpu:?} of CPU for one call (bound {FLOOD_CPU:?})"
            );
        }
    }
}

#[test]
fn no_host_work_starts_after_the_deadline() {
    // A host whose every call takes 20 ms of CPU, against a 5 ms deadline: the first embed
    // runs one text, then the rest of that call and every later call are refused.
    let slow = Waiting {
        cpu: Duration::from_millis(20),
        sleep: Duration::ZERO,
    };
    let (result, cost) = run_waiting(
        DEFAULT_DEADLINE,
        slow,
        "(call $fill (i32.const 65536) (i32.const 256)) (call $pairs (i32.const 8) (i32.const 100)) \
         (call $embed (i32.const 4096) (i32.const 8) (i32.const 2048)) \
         (drop (call $count (i32.const 65536) (i32.const 10)))",
    );
    assert_eq!(cost.host.embedded_texts, 1, "{cost:?}");
    // The guest is then interrupted by its epoch deadline, or reaches `count-tokens`, which
    // the host refuses: either way nothing more ran.
    assert!(
        matches!(&result, Err(RerankError::Deadline(_)))
            || matches!(&result, Err(RerankError::HostBudget(m)) if m.contains("deadline")),
        "{result:?}"
    );
    // Thread CPU time, which a loaded machine does not stretch: the one embed's 20 ms and the
    // guest's few milliseconds, not the eight embeds' 160 ms.
    assert!(cost.cpu < Duration::from_millis(100), "{cost:?}");
}

// The 0.2 world: the same rule (behaves in the smoke run, misbehaves after), with what a 0.2
// component can return besides scores — dropped candidates — and the request context.

/// The well-behaved 0.2 component of `keep.wat` (keeps all, reversed), with `hostile` run
/// instead when there are more than two candidates.
fn component_0_2(hostile: &str) -> String {
    let template = include_str!("keep.wat");
    assert!(template.contains(MARK_0_2));
    template.replace(MARK_0_2, hostile)
}

const MARK_0_2: &str = "(call $rank (local.get $n)) ;; misbehaviour";

/// Uploads the 0.2 `hostile`, runs it on 5 candidates with metadata, then proves the sandbox
/// still serves both worlds.
fn run_hostile_0_2(sandbox: &Sandbox, hostile: &str) -> Result<Vec<usize>, RerankError> {
    let bad = sandbox
        .compile(component_0_2(hostile).as_bytes())
        .expect("passes the smoke run");
    assert_eq!(bad.world(), WORLD_0_2);
    let result = sandbox.rerank(&bad, "q", &candidates(5));
    let good = sandbox
        .compile(component_0_2("(call $rank (local.get $n))").as_bytes())
        .unwrap();
    assert_eq!(
        sandbox.rerank(&good, "q", &candidates(5)).unwrap(),
        vec![4, 3, 2, 1, 0]
    );
    let old = sandbox.compile(component(WELL_BEHAVED).as_bytes()).unwrap();
    assert_eq!(
        sandbox.rerank(&old, "q", &candidates(5)).unwrap(),
        vec![4, 3, 2, 1, 0]
    );
    result
}

#[test]
fn both_worlds_run_side_by_side_and_say_which_they_are() {
    let sb = sandbox(roomy());
    let old = sb.compile(component(WELL_BEHAVED).as_bytes()).unwrap();
    let new = sb.compile(component_0_2(MARK_0_2).as_bytes()).unwrap();
    assert_eq!((old.world(), new.world()), (WORLD_0_1, WORLD_0_2));
    // A 0.1 component is given the same call, context and metadata included, and cannot see
    // them; the stored artefacts load into the same world.
    let context = [ContextEntry {
        key: "plan".into(),
        value: "pro".into(),
    }];
    let cands = candidates(4);
    let call = Call {
        query: "q",
        context: &context,
        candidates: &cands,
    };
    for prepared in [&old, &new] {
        let (order, cost) = sb.rerank_costed(prepared, &call, HashMap::new());
        let ranked = order.unwrap();
        let indices: Vec<usize> = ranked.iter().map(|&(i, _)| i).collect();
        assert_eq!(indices, vec![3, 2, 1, 0]);
        // Each with the score the component gave it, best first.
        assert!(ranked.windows(2).all(|w| w[0].1 >= w[1].1), "{ranked:?}");
        assert!(cost.fuel > 0 && cost.wall > Duration::ZERO, "{cost:?}");
        assert_eq!(
            sb.load(&prepared.artifact).unwrap().world(),
            prepared.world()
        );
    }
}

#[test]
fn a_dropped_candidate_leaves_the_order() {
    let order = run_hostile_0_2(
        &sandbox(roomy()),
        "(call $drop (call $unscore_last (call $rank (local.get $n))) (i32.sub (local.get $n) (i32.const 1)))",
    );
    assert_eq!(order.unwrap(), vec![3, 2, 1, 0]);
}

#[test]
fn dropping_everything_is_a_valid_empty_order() {
    let order = run_hostile_0_2(&sandbox(roomy()), "(call $drop_all (local.get $n))");
    assert_eq!(order.unwrap(), Vec::<usize>::new());
}

#[test]
fn dropping_an_index_out_of_range_is_refused() {
    let err = run_hostile_0_2(
        &sandbox(roomy()),
        "(call $drop (call $unscore_last (call $rank (local.get $n))) (i32.add (local.get $n) (i32.const 5)))",
    )
    .unwrap_err();
    assert_eq!(
        err,
        RerankError::InvalidOutput("dropped index 10 out of range for 5 candidates".into())
    );
}

#[test]
fn dropping_twice_or_dropping_a_scored_candidate_is_refused() {
    let sb = sandbox(roomy());
    let twice = "(call $drop (call $drop (call $unscore_last (call $unscore_last (call $rank (local.get $n))))
                   (i32.const 4)) (i32.const 4))";
    assert_eq!(
        run_hostile_0_2(&sb, twice).unwrap_err(),
        RerankError::InvalidOutput("index 4 dropped twice".into())
    );
    let both = "(call $drop (call $unscore_last (call $rank (local.get $n))) (i32.const 0))";
    assert_eq!(
        run_hostile_0_2(&sb, both).unwrap_err(),
        RerankError::InvalidOutput("index 0 both scored and dropped".into())
    );
    // Scores for every candidate and a drop besides: one entry too many.
    let extra = "(call $drop (call $rank (local.get $n)) (i32.const 2))";
    assert_eq!(
        run_hostile_0_2(&sb, extra).unwrap_err(),
        RerankError::InvalidOutput("5 scores and 1 dropped for 5 candidates".into())
    );
}

#[test]
fn a_huge_dropped_list_is_refused() {
    let sb = sandbox(roomy());
    // Three million dropped indices (12 MB), inside its (grown) memory: stopped as it is
    // copied out, past the call's 2 MiB copy budget; with a budget that holds it, lifted and
    // refused by count.
    let err = run_hostile_0_2(&sb, "(call $huge (local.get $n))").unwrap_err();
    assert!(
        matches!(&err, RerankError::HostBudget(m) if m.contains("copied out")),
        "{err:?}"
    );
    let wide = sandbox(ComponentLimits {
        max_host_copy_bytes: 16 << 20,
        ..roomy()
    });
    let err = run_hostile_0_2(&wide, "(call $huge (local.get $n))").unwrap_err();
    assert_eq!(
        err,
        RerankError::InvalidOutput("5 scores and 3000000 dropped for 5 candidates".into())
    );
    // A length past the end of its memory: the lift itself fails.
    let err = run_hostile_0_2(
        &sb,
        "(drop (call $rank (local.get $n))) (i32.store (i32.const 272) (i32.const 0x10000000)) (i32.const 256)",
    )
    .unwrap_err();
    assert!(matches!(err, RerankError::Trap(_)), "{err:?}");
}

#[test]
fn context_over_the_limit_is_refused_before_running() {
    let sb = sandbox(roomy());
    let good = sb.compile(component_0_2(MARK_0_2).as_bytes()).unwrap();
    let context: Vec<ContextEntry> = (0..17)
        .map(|i| ContextEntry {
            key: format!("k{i}"),
            value: "v".into(),
        })
        .collect();
    let cands = candidates(3);
    let call = Call {
        query: "q",
        context: &context,
        candidates: &cands,
    };
    let (order, cost) = sb.rerank_costed(&good, &call, HashMap::new());
    assert_eq!(
        order.unwrap_err(),
        RerankError::Input("17 context entries; the limit is 16".into())
    );
    assert_eq!(cost.fuel, 0, "nothing ran");
}

#[test]
fn nothing_a_call_writes_to_memory_is_seen_by_the_next() {
    // Each call traps if it finds the marks a previous call left — in its first page and past
    // a grown memory's first MiB — then leaves its own. Slots are reused (and, where the
    // kernel allows, kept resident between calls): every call must still start clean. The
    // deadline is not what is tested: a loaded machine must not fail a call on time.
    let sb = sandbox(roomy());
    let marking = "(if (i32.ne (i32.load (i32.const 60000)) (i32.const 0)) (then (unreachable)))
                   (i32.store (i32.const 60000) (i32.const 0xdead))
                   (drop (memory.grow (i32.const 20)))
                   (if (i32.ne (i32.load (i32.const 1000000)) (i32.const 0)) (then (unreachable)))
                   (i32.store (i32.const 1000000) (i32.const 0xbeef))
                   (call $rank (local.get $n))";
    let prepared = sb.compile(component_0_2(marking).as_bytes()).unwrap();
    for _ in 0..200 {
        assert_eq!(
            sb.rerank(&prepared, "q", &candidates(3)).unwrap(),
            vec![2, 1, 0]
        );
    }
    // Which reset was proven: the kernel decides, and the result says so.
    let reset = sluice_rerank::memory_reset();
    eprintln!("memory reset between calls: {reset}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let expected = match release
        .trim()
        .split('.')
        .take(2)
        .map(|p| p.parse::<u32>().unwrap_or(0))
        .collect::<Vec<_>>()[..]
    {
        [major, minor] if (major, minor) >= (6, 7) => "pagemap_scan",
        _ => "madvise",
    };
    assert_eq!(reset, expected, "kernel {}", release.trim());
}

/// A component with one function of `locals` locals and `blocks` `block`/`br_if`s, nested
/// or one after another: what Cranelift's compile costs grows with.
fn costly(locals: usize, blocks: usize, nested: bool) -> String {
    let body = match nested {
        true => format!(
            "{}{}",
            "(block local.get 0 br_if 0 ".repeat(blocks),
            ")".repeat(blocks)
        ),
        false => "(block local.get 0 br_if 0) ".repeat(blocks),
    };
    format!(
        "(component (core module (func (param i32) {} {body})))",
        "(local i32)".repeat(locals)
    )
}

/// The audit's upload — a 2 MB component text with one function of 2,000 locals and 16,000
/// nested blocks, which took 34 s of CPU and 2.5 GB to compile — is refused before it is
/// compiled, with its own error; the refusal costs a parse, not a compile.
#[test]
fn a_component_too_costly_to_compile_is_refused_before_compiling() {
    let sandbox = sandbox(roomy());
    let wat = costly(2_000, 16_000, true);
    let e = sandbox.compile(wat.as_bytes()).err().expect("refused");
    assert!(matches!(e, UploadError::TooComplex(_)), "{e}");
    assert!(e.to_string().contains("too complex to compile"), "{e}");
    // Each dimension alone, past its limit.
    for (locals, blocks, nested, says) in [
        (20_000, 1, true, "locals"),
        (1, 1_001, true, "deep"),
        (1, 10_001, false, "blocks"),
    ] {
        let e = sandbox
            .compile(costly(locals, blocks, nested).as_bytes())
            .err()
            .expect("refused");
        assert!(e.to_string().contains(says), "{e}");
    }
    // A small function of the same shape passes this check (and fails later, for the world).
    let e = sandbox
        .compile(costly(10, 10, true).as_bytes())
        .err()
        .expect("not a reranker");
    assert!(!matches!(e, UploadError::TooComplex(_)), "{e}");
}
