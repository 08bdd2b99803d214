//! What the guard knows about English words: WordNet 3.0's synonyms, antonyms, derivations
//! and multi-word expressions, as the table `scripts/lexicon.py` builds at setup
//! (`lexicon.txt` beside the model; on Lambda in the model layer).
//!
//! The cache's guard asks one question of it: may this word of one question stand for that
//! word of the other? The grounding check asks the same of a word of an answer and one of a
//! source. Yes when the two share a common sense (a synset in which both are frequent
//! enough: the table keeps only those) or are derived from one another (`pay` / `payment`),
//! and no sense of one is an antonym of the other. Words whose difference always changes an
//! answer (quantifiers, question words, directions) are never substituted, whatever WordNet
//! says. The table holds no sense context: the two questions' embeddings, already past the
//! cosine threshold, are the context.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use thiserror::Error;

/// The table could not be read.
#[derive(Debug, Error)]
pub enum LexiconError {
    /// The file is missing or unreadable.
    #[error(
        "cannot read the cache guard's lexicon {path}: {source} (scripts/setup.sh model builds it from WordNet; SLUICE_CACHE_LEXICON=none runs the guard without it)"
    )]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not one of the table's relations.
    #[error("the cache guard's lexicon {path} is malformed at line {line}")]
    Malformed {
        /// The file.
        path: String,
        /// The 1-based line.
        line: usize,
    },
}

/// Words never replaced by another, whatever the table says: each changes what a question
/// asks ("all" / "any", "when" / "where", "in" / "out", "before" / "after").
pub(crate) const DECISIVE: &[&str] = &[
    "all", "any", "some", "most", "many", "much", "few", "several", "every", "each", "both",
    "either", "more", "less", "fewer", "least", "only", "enough", "who", "whom", "whose", "what",
    "when", "where", "why", "how", "in", "out", "up", "down", "off", "on", "over", "under",
    "before", "after", "above", "below", "from", "to", "into", "than", "between", "within",
    "inside", "outside", "early", "late",
];

/// The longest multi-word expression read as one word (WordNet has longer ones, no question
/// needs them).
const MAX_PHRASE: usize = 4;

/// WordNet's relations between words, by word id.
#[derive(Debug, Default)]
pub struct Lexicon {
    ids: HashMap<String, u32>,
    /// Per word id, the word.
    words: Vec<String>,
    /// First words of the multi-word expressions (a phrase is looked for only after one).
    phrase_heads: HashSet<String>,
    /// Per word id, the synsets it is a frequent member of, sorted.
    synsets: Vec<Vec<u32>>,
    /// Word id pairs, smaller first.
    antonyms: HashSet<(u32, u32)>,
    derived: HashSet<(u32, u32)>,
    /// Synset pairs one step apart (a kind of the other, or a similar adjective), smaller
    /// first.
    links: HashSet<(u32, u32)>,
    /// Irregular forms ("paid") and their lemmas' ids.
    irregular: HashMap<String, Vec<u32>>,
}

impl Lexicon {
    /// Reads the table at `path`.
    pub fn load(path: &Path) -> Result<Self, LexiconError> {
        let text = std::fs::read_to_string(path).map_err(|source| LexiconError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|line| LexiconError::Malformed {
            path: path.display().to_string(),
            line,
        })
    }

    /// The table in `text`; the bad line's number when it is malformed.
    pub fn parse(text: &str) -> Result<Self, usize> {
        let mut lex = Lexicon::default();
        let mut synset = 0u32;
        for (n, line) in text.lines().enumerate() {
            let mut fields = line.split(' ');
            let kind = fields.next().unwrap_or_default();
            let words: Vec<&str> = fields.collect();
            match (kind, words.as_slice()) {
                ("" | "#", _) => {}
                ("s", members) if !members.is_empty() => {
                    for m in members {
                        let id = lex.intern(m);
                        lex.synsets[id as usize].push(synset);
                    }
                    synset += 1;
                }
                ("!" | "+", [a, b]) => {
                    let pair = ordered(lex.intern(a), lex.intern(b));
                    if kind == "!" {
                        lex.antonyms.insert(pair);
                    } else {
                        lex.derived.insert(pair);
                    }
                }
                (">", [general, specific]) => match (general.parse(), specific.parse()) {
                    (Ok(g), Ok(s)) => {
                        lex.links.insert(ordered(g, s));
                    }
                    _ => return Err(n + 1),
                },
                ("x", [form, lemma]) => {
                    let id = lex.intern(lemma);
                    lex.irregular.entry(form.to_string()).or_default().push(id);
                }
                _ => return Err(n + 1),
            }
        }
        lex.synsets.iter_mut().for_each(|s| s.dedup());
        Ok(lex)
    }

    /// Whether the table has no word at all (`SLUICE_CACHE_LEXICON=none`).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn intern(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.ids.get(word) {
            return id;
        }
        let id = self.words.len() as u32;
        self.ids.insert(word.to_string(), id);
        self.words.push(word.to_string());
        self.synsets.push(Vec::new());
        if let Some((head, _)) = word.split_once('_') {
            self.phrase_heads.insert(head.to_string());
        }
        id
    }

    /// The lemmas `word` can be an inflection of, as WordNet's morphology finds them (its
    /// irregular forms, then its suffix rules), keeping only lemmas the table knows.
    pub(crate) fn lemmas(&self, word: &str) -> Vec<u32> {
        let mut out: Vec<u32> = self.ids.get(word).copied().into_iter().collect();
        if let Some(ids) = self.irregular.get(word) {
            out.extend(ids);
        }
        // WordNet's detachment rules for nouns, verbs and adjectives.
        const RULES: &[(&str, &str)] = &[
            ("s", ""),
            ("ses", "s"),
            ("xes", "x"),
            ("zes", "z"),
            ("ches", "ch"),
            ("shes", "sh"),
            ("men", "man"),
            ("ies", "y"),
            ("es", "e"),
            ("es", ""),
            ("ed", "e"),
            ("ed", ""),
            ("ing", "e"),
            ("ing", ""),
            ("er", ""),
            ("est", ""),
            ("er", "e"),
            ("est", "e"),
        ];
        let mut lemma = String::new();
        for (suffix, ending) in RULES {
            if let Some(base) = word.strip_suffix(suffix).filter(|b| !b.is_empty()) {
                lemma.clear();
                lemma.push_str(base);
                lemma.push_str(ending);
                if let Some(&id) = self.ids.get(&lemma) {
                    out.push(id);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The multi-word expression starting `tokens` (`call off`, `get in touch`, `called off`
    /// with the first or last word inflected), as its lemma's id and how many tokens it took;
    /// `lemmas` are the tokens' [`lemmas`](Self::lemmas).
    pub(crate) fn phrase(&self, tokens: &[String], lemmas: &[Vec<u32>]) -> Option<(u32, usize)> {
        let forms = |i: usize| {
            std::iter::once(tokens[i].as_str()).chain(lemmas[i].iter().map(|&id| self.word(id)))
        };
        if !forms(0).any(|head| self.phrase_heads.contains(head)) {
            return None;
        }
        let mut joined = String::new();
        for n in (2..=MAX_PHRASE.min(tokens.len())).rev() {
            for first in forms(0) {
                for last in forms(n - 1) {
                    joined.clear();
                    joined.push_str(first);
                    for middle in &tokens[1..n - 1] {
                        joined.push('_');
                        joined.push_str(middle);
                    }
                    joined.push('_');
                    joined.push_str(last);
                    if let Some(&id) = self.ids.get(&joined) {
                        return Some((id, n));
                    }
                }
            }
        }
        None
    }

    /// The word with id `id`.
    pub(crate) fn word(&self, id: u32) -> &str {
        self.words.get(id as usize).map_or("", String::as_str)
    }

    /// The single words that share a sense with `word` and that the guard lets stand for it
    /// (by [`Self::equivalent`]): what an evaluation rewords an answer with. A scan of the
    /// whole table: for tools, not for a request.
    pub fn synonyms(&self, word: &str) -> Vec<&str> {
        let lemmas = self.lemmas(word);
        let senses: Vec<u32> = lemmas
            .iter()
            .flat_map(|&id| self.synsets[id as usize].iter().copied())
            .collect();
        (0..self.words.len() as u32)
            .filter(|id| !lemmas.contains(id))
            .filter(|&id| self.synsets[id as usize].iter().any(|s| senses.contains(s)))
            .map(|id| self.word(id))
            .filter(|w| !w.contains('_') && *w != word)
            .filter(|w| self.equivalent(word, &lemmas, w, &self.lemmas(w)))
            .collect()
    }

    /// Whether any sense of a word with lemmas `a` is an antonym of one with lemmas `b`.
    pub(crate) fn opposed(&self, a: &[u32], b: &[u32]) -> bool {
        a.iter()
            .any(|&x| b.iter().any(|&y| self.antonyms.contains(&ordered(x, y))))
    }

    /// Whether a word with lemmas `a` (its text `a_text`) may stand for one with lemmas `b`:
    /// a common sense shared, or one a kind of the other ("send" / "transfer", "fee" /
    /// "charge"), or a derivation; and no antonymy in any sense.
    pub(crate) fn equivalent(&self, a_text: &str, a: &[u32], b_text: &str, b: &[u32]) -> bool {
        if DECISIVE.contains(&a_text) || DECISIVE.contains(&b_text) || a.is_empty() || b.is_empty()
        {
            return false;
        }
        if self.opposed(a, b) {
            return false;
        }
        let pairs = || {
            a.iter()
                .flat_map(|&x| b.iter().map(move |&y| ordered(x, y)))
        };
        pairs().any(|(x, y)| {
            let (sx, sy) = (&self.synsets[x as usize], &self.synsets[y as usize]);
            self.derived.contains(&(x, y))
                || shares(sx, sy)
                || sx
                    .iter()
                    .any(|&i| sy.iter().any(|&j| self.links.contains(&ordered(i, j))))
        })
    }
}

/// The lexicon as the stages that read it share it: empty until it is read (reading takes
/// about 0.1 s, which no cold start should wait for), and for good if it cannot be — the
/// guard then substitutes no word and the grounding check matches words only as written.
#[derive(Debug, Clone, Default)]
pub struct SharedLexicon(Arc<OnceLock<Arc<Lexicon>>>);

impl SharedLexicon {
    /// A lexicon that is already read.
    pub fn ready(lexicon: Arc<Lexicon>) -> Self {
        let shared = Self::default();
        let _ = shared.0.set(lexicon);
        shared
    }

    /// The lexicon at `path`, read on a thread of its own; a failure is logged.
    pub fn read_in_background(path: std::path::PathBuf) -> Self {
        let shared = Self::default();
        let slot = shared.0.clone();
        std::thread::spawn(move || match Lexicon::load(&path) {
            Ok(lexicon) => {
                let _ = slot.set(Arc::new(lexicon));
            }
            Err(e) => tracing::error!("{e}"),
        });
        shared
    }

    /// The lexicon, or an empty one until it is read.
    pub fn get(&self) -> &Lexicon {
        static NONE: std::sync::LazyLock<Lexicon> = std::sync::LazyLock::new(Lexicon::default);
        self.0.get().map_or(&NONE, |l| l.as_ref())
    }
}

fn ordered(a: u32, b: u32) -> (u32, u32) {
    (a.min(b), a.max(b))
}

/// Whether two sorted lists share an element.
fn shares(a: &[u32], b: &[u32]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}
