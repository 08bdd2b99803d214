//! The docx converter on any bytes (see convert.rs for what is checked).
#![no_main]

#[path = "convert.rs"]
mod convert;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let known = include_bytes!("../seeds/convert_docx/cards.docx");
    convert::run(sluice_convert::Format::Docx, known, "replaced in five days", data);
});
