//! A PDF's compressed streams, bounded before any parser decodes them.
//!
//! lopdf and pdf-extract decode a stream whole into memory with no cap, through every filter
//! of its chain (`/Filter [/FlateDecode /FlateDecode]` inflates what the first step inflated):
//! a 2 KB file can decode to gigabytes. So every decoding step of every stream is run here
//! first into a small buffer, each step's output counted as it comes, and the file refused at
//! a cap ([`Inflation`]). Three moments of lopdf decode streams, each bounded before it:
//!
//! 1. **Reading the cross-reference streams**, before any object is parsed. Those are bounded
//!    by a scan of the raw bytes: every `stream` is decoded through every filter chain the file
//!    declares anywhere (not only the one its own dictionary seems to name, which a crafted
//!    dictionary can hide from a scan that is not a full parser), and always as a zlib stream.
//! 2. **Object streams** (`/Type /ObjStm`), which lopdf expands while loading — for an
//!    encrypted file, after decrypting them, where no scan of the raw bytes can see. lopdf is
//!    given a copy of the file whose `/ObjStm` and `/Encrypt` names are renamed, so that it
//!    loads every file as if unencrypted and expands nothing; the file is decrypted here and
//!    each object stream counted with its real filters before it is expanded ([`load`]).
//! 3. **Content, font and other streams**, which pdf-extract decodes as it reads pages: each
//!    counted with its real filters after loading, before a page is read.
//!
//! The counting mirrors lopdf's decoders (`FlateDecode`, `LZWDecode` with its `EarlyChange`,
//! `ASCII85Decode`; any other filter stops lopdf's chain with an error, and the count there).

use std::collections::BTreeSet;

use lopdf::{Document, Object, ObjectId, Stream};

use sluice_contract::cancel::Cancel;

use crate::{ConvertError, ConvertLimits, stopped};

/// Bytes decoded between two checks of `cancel`.
const CHECK_STEP: usize = 1 << 20;

/// Distinct filter chains one file may declare: real files use one to three
/// (`/FlateDecode`, `/DCTDecode`, `[/ASCII85Decode /FlateDecode]`); the raw scan decodes every
/// stream through each, so their number multiplies its work.
const MAX_CHAINS: usize = 8;

/// The most bytes a `/Filter` array is read over (real ones are a few dozen).
const MAX_ARRAY_BYTES: usize = 1 << 10;

/// What lopdf names its object streams' and encryption's keys, and what they are renamed to in
/// the copy it loads (the same length, so that no offset moves).
const OBJECT_STREAM: (&[u8], &[u8]) = (b"ObjStm", b"ObjStq");
const ENCRYPT: (&[u8], &[u8]) = (b"Encrypt", b"Encrypq");

/// The file parsed, every stream of it counted within the caps, its object streams expanded
/// and an encrypted one (with an empty user password) decrypted.
pub(super) fn load(
    bytes: &[u8],
    limits: &ConvertLimits,
    cancel: &Cancel,
) -> Result<Document, ConvertError> {
    // The file's names, read once for both uses below.
    let tokens: Vec<Name> = names(bytes).collect();
    // 1. What lopdf decodes before it parses any object: the cross-reference streams.
    scan_raw(bytes, &tokens, limits, cancel)?;
    // 2. The rest is loaded with nothing decoded, and counted before it is.
    let mut document = Document::load_mem(&hide_names(bytes, &tokens))
        .map_err(|e| ConvertError::Malformed(format!("not a readable PDF ({e})")))?;
    if let Some(encrypt) = document.trailer.remove(ENCRYPT.1) {
        document.trailer.set(ENCRYPT.0, encrypt);
        // Many PDFs are encrypted with an empty user password, to set permissions: those open.
        document.decrypt("").map_err(|_| ConvertError::Encrypted)?;
    }
    let mut inflation = Inflation::new(limits, cancel);
    let containers: Vec<ObjectId> = (document.objects.iter())
        .filter(|(_, o)| {
            o.as_stream()
                .is_ok_and(|s| s.dict.has_type(OBJECT_STREAM.1))
        })
        .map(|(id, _)| *id)
        .collect();
    for id in containers {
        expand(&mut document, id, &mut inflation)?;
    }
    // 3. What pdf-extract decodes while it reads pages (each time a page uses it: at most the
    // per-stream cap each time, and the time budget over all).
    for stream in document.objects.values().filter_map(|o| o.as_stream().ok()) {
        inflation.count_stream(stream)?;
    }
    Ok(document)
}

/// Expands object stream `id` (counted first) into the document's objects as lopdf does:
/// an object the cross-reference table places in another container is not taken from it, and
/// none replaces one already loaded.
fn expand(
    document: &mut Document,
    id: ObjectId,
    inflation: &mut Inflation,
) -> Result<(), ConvertError> {
    let Some(Object::Stream(stream)) = document.objects.get_mut(&id) else {
        return Ok(());
    };
    inflation.count_stream(stream)?;
    stream
        .dict
        .set("Type", Object::Name(OBJECT_STREAM.0.to_vec()));
    let Ok(objects) = lopdf::ObjectStream::new(stream) else {
        return Ok(());
    };
    for (object_id, object) in objects.objects {
        let elsewhere = match document.reference_table.entries.get(&object_id.0) {
            Some(lopdf::xref::XrefEntry::Compressed { container, .. }) => *container != id.0,
            _ => false,
        };
        if !elsewhere {
            document.objects.entry(object_id).or_insert(object);
        }
    }
    Ok(())
}

/// A copy of the file in which every name that reads `/ObjStm` or `/Encrypt` (written plainly
/// or with `#xx` escapes) is renamed, so lopdf neither expands an object stream nor decrypts
/// one while loading. An escaped name is rewritten plainly, padded with spaces (delimiters).
fn hide_names(bytes: &[u8], tokens: &[Name]) -> Vec<u8> {
    let mut copy = bytes.to_vec();
    for &(at, len, ref name) in tokens {
        for (from, to) in [OBJECT_STREAM, ENCRYPT] {
            if name == from {
                let token = &mut copy[at..at + len];
                token.fill(b' ');
                token[0] = b'/';
                token[1..=to.len()].copy_from_slice(to);
            }
        }
    }
    copy
}

/// A name token of the raw bytes: where it starts (its `/`), its length, and the name it
/// spells once `#xx` escapes are decoded.
type Name = (usize, usize, Vec<u8>);

/// Every name token of the raw bytes.
fn names(bytes: &[u8]) -> impl Iterator<Item = Name> + '_ {
    let regular = |b: u8| !b.is_ascii_whitespace() && !b"()<>[]{}/%\0".contains(&b);
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            let start = at;
            at += 1;
            if bytes[start] != b'/' {
                continue;
            }
            let len = bytes[at..].iter().take_while(|&&b| regular(b)).count();
            at += len;
            let raw = &bytes[start + 1..at];
            let mut name = Vec::with_capacity(raw.len());
            let mut i = 0;
            while i < raw.len() {
                let hex = (raw[i] == b'#')
                    .then(|| raw.get(i + 1..i + 3))
                    .flatten()
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        name.push(b);
                        i += 3;
                    }
                    None => {
                        name.push(raw[i]);
                        i += 1;
                    }
                }
            }
            return Some((start, len + 1, name));
        }
        None
    })
}

/// A filter lopdf decodes; any other ends its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Filter {
    Flate,
    Lzw { early_change: bool },
    Ascii85,
}

impl Filter {
    fn named(name: &[u8], early_change: bool) -> Option<Filter> {
        match name {
            b"FlateDecode" => Some(Filter::Flate),
            b"LZWDecode" => Some(Filter::Lzw { early_change }),
            b"ASCII85Decode" => Some(Filter::Ascii85),
            _ => None,
        }
    }
}

/// The chains a raw scan decodes every stream through: every `/Filter` value the file holds
/// (a name, or an array's names, up to the first lopdf does not decode), each LZW step both
/// ways when the file says `EarlyChange` anywhere, and a plain zlib stream.
fn declared_chains(bytes: &[u8], tokens: &[Name]) -> Result<BTreeSet<Vec<Filter>>, ConvertError> {
    let says_early = tokens.iter().any(|(_, _, n)| n == b"EarlyChange");
    let mut chains = BTreeSet::from([vec![Filter::Flate]]);
    for (i, (at, len, name)) in tokens.iter().enumerate() {
        if name != b"Filter" {
            continue;
        }
        let after = &bytes[at + len..];
        let value = after.trim_ascii_start();
        let names: Vec<&[u8]> = if value.starts_with(b"[") {
            // Looked for within a bound: a file of unclosed arrays must not cost a scan to its
            // end each.
            let window = &value[..value.len().min(MAX_ARRAY_BYTES)];
            let close = window
                .iter()
                .position(|&b| b == b']')
                .unwrap_or(window.len());
            let end = at + len + (after.len() - value.len()) + close;
            (tokens[i + 1..].iter())
                .take_while(|(a, _, _)| *a < end)
                .map(|(_, _, n)| n.as_slice())
                .collect()
        } else if value.starts_with(b"/") {
            tokens
                .get(i + 1)
                .map(|(_, _, n)| n.as_slice())
                .into_iter()
                .collect()
        } else {
            continue;
        };
        for early_change in [true, false].into_iter().take(1 + says_early as usize) {
            let chain: Vec<Filter> = (names.iter())
                .map_while(|n| Filter::named(n, early_change))
                .collect();
            if !chain.is_empty() {
                chains.insert(chain);
            }
        }
        if chains.len() > MAX_CHAINS {
            return Err(ConvertError::Malformed(format!(
                "it declares more than {MAX_CHAINS} different filter chains for its streams"
            )));
        }
    }
    Ok(chains)
}

/// Counts what every `stream` of the raw bytes decodes to through every declared chain.
fn scan_raw(
    bytes: &[u8],
    tokens: &[Name],
    limits: &ConvertLimits,
    cancel: &Cancel,
) -> Result<(), ConvertError> {
    let chains = declared_chains(bytes, tokens)?;
    let mut inflation = Inflation::new(limits, cancel);
    for at in stream_starts(bytes) {
        inflation.count(&bytes[at..], &chains)?;
    }
    Ok(())
}

/// Where the data of each `stream` keyword of the file starts (after its end of line).
fn stream_starts(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    const KEYWORD: &[u8] = b"stream";
    (0..bytes.len().saturating_sub(KEYWORD.len()))
        .filter(move |&at| bytes[at..].starts_with(KEYWORD) && !bytes[..at].ends_with(b"end"))
        .filter_map(move |at| {
            let after = at + KEYWORD.len();
            match &bytes[after..] {
                [b'\r', b'\n', ..] => Some(after + 2),
                [b'\n', ..] | [b'\r', ..] => Some(after + 1),
                _ => None,
            }
        })
}

/// What a file's streams may still decode to, per stream and in all.
struct Inflation<'a> {
    left: usize,
    limits: &'a ConvertLimits,
    cancel: &'a Cancel,
}

impl<'a> Inflation<'a> {
    fn new(limits: &'a ConvertLimits, cancel: &'a Cancel) -> Self {
        Self {
            left: limits.max_pdf_inflated_bytes,
            limits,
            cancel,
        }
    }

    /// Counts a loaded stream through its own filters, as lopdf reads them: a name or an
    /// array of names given directly (anything else, lopdf does not decode), `EarlyChange`
    /// from `DecodeParms` when that is a dictionary.
    fn count_stream(&mut self, stream: &Stream) -> Result<(), ConvertError> {
        let Ok(names) = stream.filters() else {
            return Ok(());
        };
        let early_change = (stream.dict.get(b"DecodeParms"))
            .and_then(Object::as_dict)
            .and_then(|p| p.get(b"EarlyChange"))
            .and_then(Object::as_i64)
            .map_or(true, |v| v != 0);
        let chain: Vec<Filter> = (names.iter())
            .map_while(|n| Filter::named(n, early_change))
            .collect();
        if chain.is_empty() {
            return Ok(());
        }
        self.count(&stream.content, &BTreeSet::from([chain]))
    }

    /// Counts what `data` decodes to through each of `chains` (decoded together as a tree,
    /// a step shared by chains run once), every byte every step gives counted as it comes:
    /// over [`ConvertLimits::max_pdf_stream_bytes`] for the stream, or over what is left of
    /// [`ConvertLimits::max_pdf_inflated_bytes`], the file is refused there.
    fn count(&mut self, data: &[u8], chains: &BTreeSet<Vec<Filter>>) -> Result<(), ConvertError> {
        let mut roots: Vec<Step> = Vec::new();
        for chain in chains {
            Step::add(&mut roots, chain);
        }
        let mut counter = Counter {
            total: 0,
            since_check: 0,
            cap: self.limits.max_pdf_stream_bytes.min(self.left),
            limits: self.limits,
            cancel: self.cancel,
        };
        for root in &mut roots {
            root.feed(data, &mut counter)?;
        }
        self.left -= counter.total.min(self.left);
        Ok(())
    }
}

/// The bytes one stream's steps have given.
struct Counter<'a> {
    total: usize,
    since_check: usize,
    cap: usize,
    limits: &'a ConvertLimits,
    cancel: &'a Cancel,
}

impl Counter<'_> {
    fn take(&mut self, n: usize) -> Result<(), ConvertError> {
        self.total += n;
        self.since_check += n;
        if self.since_check >= CHECK_STEP {
            self.since_check = 0;
            (self.cancel.check()).map_err(|why| stopped(why, self.limits))?;
        }
        if self.total <= self.cap {
            return Ok(());
        }
        Err(if self.cap == self.limits.max_pdf_stream_bytes {
            ConvertError::TooLarge(format!(
                "a compressed stream decodes to more than {} bytes (SLUICE_MAX_PDF_STREAM_BYTES)",
                self.limits.max_pdf_stream_bytes
            ))
        } else {
            ConvertError::TooLarge(format!(
                "its compressed streams decode to more than {} bytes together (SLUICE_MAX_PDF_INFLATED_BYTES)",
                self.limits.max_pdf_inflated_bytes
            ))
        })
    }
}

/// One decoding step and the steps that decode its output. A step's decoder is made when
/// its first input comes: data that fails an earlier step costs no later step anything.
struct Step {
    filter: Filter,
    decoder: Option<Decoder>,
    next: Vec<Step>,
}

impl Step {
    fn add(steps: &mut Vec<Step>, chain: &[Filter]) {
        let Some((&first, rest)) = chain.split_first() else {
            return;
        };
        let at = match steps.iter().position(|s| s.filter == first) {
            Some(at) => at,
            None => {
                steps.push(Step {
                    filter: first,
                    decoder: None,
                    next: Vec::new(),
                });
                steps.len() - 1
            }
        };
        Step::add(&mut steps[at].next, rest);
    }

    /// Decodes `input` (the next piece of this step's input), counting what comes out and
    /// passing it on to the next steps.
    fn feed(&mut self, input: &[u8], counter: &mut Counter) -> Result<(), ConvertError> {
        let Step {
            filter,
            decoder,
            next,
        } = self;
        let decoder = decoder.get_or_insert_with(|| Decoder::new(*filter));
        decoder.decode(input, &mut |out| {
            counter.take(out.len())?;
            next.iter_mut().try_for_each(|step| step.feed(out, counter))
        })
    }
}

/// A streaming decoder of one filter, as lopdf decodes it. Once its data ends (or fails to
/// decode: lopdf keeps what came before), it takes no more.
enum Decoder {
    /// lopdf inflates a zlib stream and, when that gives nothing, the raw deflate data after
    /// its two-byte header: the raw data after the header is what both give.
    Flate {
        inflater: Box<flate2::Decompress>,
        header_left: usize,
        ended: bool,
    },
    Lzw {
        decoder: Box<weezl::decode::Decoder>,
        ended: bool,
    },
    /// Groups of five characters (or `z`) to four bytes; whitespace is skipped, anything else
    /// ends the data.
    Ascii85 {
        value: u32,
        group: usize,
        ended: bool,
    },
}

impl Decoder {
    fn new(filter: Filter) -> Self {
        match filter {
            Filter::Flate => Decoder::Flate {
                inflater: Box::new(flate2::Decompress::new(false)),
                header_left: 2,
                ended: false,
            },
            Filter::Lzw { early_change } => {
                let order = weezl::BitOrder::Msb;
                let decoder = if early_change {
                    weezl::decode::Decoder::with_tiff_size_switch(order, 8)
                } else {
                    weezl::decode::Decoder::new(order, 8)
                };
                Decoder::Lzw {
                    decoder: Box::new(decoder),
                    ended: false,
                }
            }
            Filter::Ascii85 => Decoder::Ascii85 {
                value: 0,
                group: 0,
                ended: false,
            },
        }
    }

    fn decode(
        &mut self,
        mut input: &[u8],
        emit: &mut dyn FnMut(&[u8]) -> Result<(), ConvertError>,
    ) -> Result<(), ConvertError> {
        let mut buffer = [0u8; 16 << 10];
        match self {
            Decoder::Flate {
                inflater,
                header_left,
                ended,
            } => {
                let skip = (*header_left).min(input.len());
                *header_left -= skip;
                input = &input[skip..];
                while !*ended && !input.is_empty() {
                    let (before_in, before_out) = (inflater.total_in(), inflater.total_out());
                    let status =
                        inflater.decompress(input, &mut buffer, flate2::FlushDecompress::None);
                    let produced = (inflater.total_out() - before_out) as usize;
                    let consumed = (inflater.total_in() - before_in) as usize;
                    input = &input[consumed..];
                    emit(&buffer[..produced])?;
                    match status {
                        Ok(flate2::Status::Ok) if produced + consumed > 0 => {}
                        // Output space was the limit: go on with what is left.
                        Ok(flate2::Status::BufError) if produced > 0 => {}
                        _ => *ended = true,
                    }
                }
            }
            Decoder::Lzw { decoder, ended } => {
                while !*ended && !input.is_empty() {
                    let result = decoder.decode_bytes(input, &mut buffer);
                    input = &input[result.consumed_in..];
                    emit(&buffer[..result.consumed_out])?;
                    match result.status {
                        Ok(weezl::LzwStatus::Ok)
                            if result.consumed_in + result.consumed_out > 0 => {}
                        _ => *ended = true,
                    }
                }
            }
            Decoder::Ascii85 {
                value,
                group,
                ended,
            } => {
                let mut filled = 0;
                for &c in input {
                    if *ended {
                        break;
                    }
                    match c {
                        b'z' if *group == 0 => {
                            buffer[filled..filled + 4].fill(0);
                            filled += 4;
                        }
                        b'!'..=b'u' => {
                            // lopdf fails the whole chain on an overflow: nothing more comes.
                            match value
                                .checked_mul(85)
                                .and_then(|v| v.checked_add(u32::from(c - b'!')))
                            {
                                Some(v) => *value = v,
                                None => *ended = true,
                            }
                            *group += 1;
                            if *group == 5 {
                                buffer[filled..filled + 4].copy_from_slice(&value.to_be_bytes());
                                filled += 4;
                                (*value, *group) = (0, 0);
                            }
                        }
                        c if c.is_ascii_whitespace() => {}
                        _ => *ended = true,
                    }
                    if filled + 4 > buffer.len() {
                        emit(&buffer[..filled])?;
                        filled = 0;
                    }
                }
                emit(&buffer[..filled])?;
            }
        }
        Ok(())
    }
}

/// Which names the raw scan saw, for tests.
#[cfg(test)]
fn name_list(bytes: &[u8]) -> Vec<String> {
    names(bytes)
        .map(|(_, _, n)| String::from_utf8_lossy(&n).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_with_their_escapes() {
        assert_eq!(
            name_list(b"<</Type /Obj#53tm/Filter[/FlateDecode /A#385Decode]>>"),
            ["Type", "ObjStm", "Filter", "FlateDecode", "A85Decode"]
        );
        // Renamed in place, plainly, at the same length.
        let file = b"<</Type/Obj#53tm /Encrypt 5 0 R/EncryptMetadata true>>";
        let hidden = hide_names(file, &names(file).collect::<Vec<_>>());
        assert_eq!(
            &hidden[..],
            &b"<</Type/ObjStq   /Encrypq 5 0 R/EncryptMetadata true>>"[..]
        );
    }

    fn chains_of(bytes: &[u8]) -> Result<BTreeSet<Vec<Filter>>, ConvertError> {
        declared_chains(bytes, &names(bytes).collect::<Vec<_>>())
    }

    #[test]
    fn every_declared_chain_is_found() {
        let chains = chains_of(
            b"1 0 obj <</Filter [/FlateDecode /FlateDecode] /F (x)>> 2 0 obj <</Filter/LZWDecode \
              /DecodeParms <</EarlyChange 0>>>> 3 0 obj <</Filter /DCTDecode>>",
        )
        .unwrap();
        let chains: Vec<Vec<Filter>> = chains.into_iter().collect();
        assert_eq!(
            chains,
            [
                vec![Filter::Flate],
                vec![Filter::Flate, Filter::Flate],
                vec![Filter::Lzw {
                    early_change: false
                }],
                vec![Filter::Lzw { early_change: true }],
            ]
        );
        let many: String = (1..=MAX_CHAINS + 1)
            .map(|n| format!("<</Filter [{}]>>", "/FlateDecode ".repeat(n)))
            .collect();
        assert!(chains_of(many.as_bytes()).is_err());
        // An unclosed array is read over a bounded window, up to the first name that is no
        // filter (here the next `/Filter`).
        let unclosed = "/Filter [/FlateDecode ".repeat(1_000);
        let chains: Vec<Vec<Filter>> = (chains_of(unclosed.as_bytes()).unwrap())
            .into_iter()
            .collect();
        assert_eq!(chains, [vec![Filter::Flate]]);
    }

    #[test]
    fn ascii85_counts_what_lopdf_decodes() {
        let mut decoder = Decoder::new(Filter::Ascii85);
        let mut out = 0;
        let mut emit = |b: &[u8]| {
            out += b.len();
            Ok(())
        };
        // Three groups and a `z` (16 bytes), then the end marker: nothing after it counts.
        decoder
            .decode(b"87cURD]i,\"Ebo80 z~>zzzz", &mut emit)
            .unwrap();
        assert_eq!(out, 16);
    }
}
