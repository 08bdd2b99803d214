//! What the converters' fuzz targets share: any bytes as a file of one format, converted the
//! way uploads are (`sluice_convert::convert_contained`, a short time budget). The promise
//! checked is the server's: a conversion returns — text in sections, or an error — and a
//! parser's panic stays inside it (the process-wide panic hook is silenced so that a
//! contained panic is not mistaken for a crash; one that escapes still aborts). Converted
//! sections hold text. A known file must convert (liveness).

use std::time::Duration;

use sluice_contract::cancel::Cancel;
use sluice_convert::{Format, ConvertLimits, convert_contained};

pub fn run(format: Format, known: &[u8], expected: &str, data: &[u8]) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|_| {}));
        let converted = convert_contained(format, known.to_vec(), &limits(), &Cancel::new()).expect("the known file converts");
        assert!(converted.text().contains(expected), "{:?}", converted.text());
    });
    if let Ok(converted) = convert_contained(format, data.to_vec(), &limits(), &Cancel::new()) {
        for section in &converted.sections {
            assert!(!section.text.trim().is_empty(), "an empty section");
        }
    }
}

fn limits() -> ConvertLimits {
    ConvertLimits {
        timeout: Duration::from_secs(5),
        max_text_bytes: 1 << 20,
        max_docx_bytes: 16 << 20,
        ..ConvertLimits::default()
    }
}
