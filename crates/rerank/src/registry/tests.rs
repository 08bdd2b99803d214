use super::*;

struct NoHost;
impl crate::HostServices for NoHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|_| vec![0.0]).collect())
    }
    fn count_tokens(&self, _: &str) -> u32 {
        0
    }
}

/// A candidate's text reaches a component cut to `max_text_bytes`, on a character
/// boundary; a shorter one whole.
#[test]
fn candidate_texts_are_cut_to_the_limit() {
    let limit = ComponentLimits::default().max_text_bytes;
    assert_eq!(limit, 8 << 10);
    let mut long = sluice_testkit::hit("long", 1.0);
    long.text = "é".repeat(limit) + "x";
    let mut odd = sluice_testkit::hit("odd", 0.5);
    odd.text = format!("x{}", "é".repeat(limit));
    let short = sluice_testkit::hit("short", 0.1);
    let given = candidates(&[long, odd, short.clone()], limit);
    assert_eq!(given[0].text.len(), limit);
    assert_eq!(given[1].text.len(), limit - 1, "not inside a character");
    assert_eq!(given[2].text, short.text);
}

#[test]
fn what_the_registry_remembers_stays_bounded_whatever_tenants_ask() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(ComponentLimits::default(), Arc::new(NoHost)).unwrap();
    let registry = Registry::new(
        sandbox,
        Arc::new(Disk::open(dir.path()).unwrap()),
        Duration::from_secs(5),
    );
    let max = sluice_contract::REMEMBERED_TENANTS;
    for i in 0..max * 2 + 3 {
        registry
            .inner
            .remember(&sluice_testkit::tenant(&format!("t{i}")), None);
    }
    let known = lock(&registry.inner.known);
    assert!(known.len() <= max, "{}", known.len());
    assert!(
        known.contains_key(format!("t{}", max * 2 + 2).as_str()),
        "the newest is kept"
    );
}

/// Compiles wait for a place, one a core: an upload whose client leaves while it waits gets
/// none (and so compiles nothing); a place given back goes to the next upload.
#[test]
fn an_upload_waiting_for_a_compile_place_gives_up_when_its_client_leaves() {
    use sluice_contract::cancel::Cancel;
    let slots = Slots::new(1);
    let held = slots.take(&Cancel::new()).expect("a free place");
    let gone = Cancel::new();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| slots.take(&gone).is_some());
        // While the place is held the upload waits (however long the machine takes to get
        // here), then gives up once its client is gone.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiting.is_finished(), "it waits for the held place");
        gone.cancel();
        assert!(
            !waiting.join().unwrap(),
            "no place for a request that is gone"
        );
    });
    std::thread::scope(|scope| {
        let next = scope.spawn(|| slots.take(&Cancel::new()).is_some());
        std::thread::sleep(Duration::from_millis(200));
        assert!(!next.is_finished(), "it waits for the held place");
        drop(held);
        assert!(next.join().unwrap(), "the place given back goes to it");
    });
    // A request already gone never takes a free place.
    let left = Cancel::new();
    left.cancel();
    assert!(slots.take(&left).is_none());
}
