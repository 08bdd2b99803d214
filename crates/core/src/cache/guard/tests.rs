use super::*;
use crate::language::normalise;

fn conflict(a: &str, b: &str) -> Option<String> {
    Guard::of(&normalise(a)).conflict(&Guard::of(&normalise(b)), &Lexicon::default())
}

#[track_caller]
fn differ(a: &str, b: &str) {
    assert!(
        conflict(a, b).is_some(),
        "{a:?} and {b:?} passed for one question"
    );
    assert!(
        conflict(b, a).is_some(),
        "{b:?} and {a:?} passed for one question"
    );
}

#[track_caller]
fn same(a: &str, b: &str) {
    assert_eq!(conflict(a, b), None, "{a:?} / {b:?}");
    assert_eq!(conflict(b, a), None, "{b:?} / {a:?}");
}

#[test]
fn any_content_word_that_differs_makes_another_question() {
    // Opposites, whether or not anyone listed them.
    differ(
        "Does the premium card include travel insurance?",
        "Does the premium card exclude travel insurance?",
    );
    differ(
        "How do I turn on card payments?",
        "How do I turn off card payments?",
    );
    differ("How do I enable alerts", "how to disable alerts");
    differ("why was my loan approved", "why was my loan declined");
    differ("fees before March", "fees after March");
    // Products, places, dates, people, quantifiers.
    differ(
        "What is the rate on the savings account?",
        "What is the rate on the current account?",
    );
    differ(
        "Can I use my card in Japan?",
        "Can I use my card in Brazil?",
    );
    differ(
        "Are branches open on Saturday?",
        "Are branches open on Sunday?",
    );
    differ("Can my partner use my card?", "Can my child use my card?");
    differ("Are all transfers free?", "Are some transfers free?");
    differ("Is there a fee?", "Is there any fee?");
}

#[test]
fn negation_and_numbers_must_agree() {
    differ("Can I reset my PIN online?", "Can't I reset my PIN online?");
    differ(
        "Why does my card work abroad",
        "Why does my card not work abroad",
    );
    differ(
        "Can I reset my password online?",
        "Can I reset my password without going online?",
    );
    differ("fees in 2023", "fees in 2024");
    differ("limit for 3 transfers", "limit for 4 transfers");
    differ("overdraft fees", "overdraft fees in 2024");
    differ("a $500 transfer", "a $5,000 transfer");
    differ("three wrong PIN attempts", "five wrong PIN attempts");
}

#[test]
fn a_swap_of_roles_is_another_question() {
    differ(
        "How do I move money from savings to checking?",
        "How do I move money from checking to savings?",
    );
    differ("Is the fee higher than 5%?", "Is the fee higher than 10%?");
    // A role word in one question only is no conflict ("how to").
    same("How to reset my password?", "How do I reset my password?");
}

#[test]
fn what_the_guard_knows_to_be_equivalent_passes() {
    same("How do I reset my password?", "how can I reset my password");
    same(
        "What is the daily ATM withdrawal limit?",
        "What's the ATM withdrawal limit per day?",
    );
    same("refund within three days", "refund within 3 days");
    same(
        "Can I send twenty five payments?",
        "Can I send 25 payments?",
    );
    same("a transfer of 1,000 euros", "a transfer of 1000 euros");
    same("a fee of 2.50", "a fee of 2.5");
    same("What's the fee on transfers?", "what is the transfer fee");
    same("I can't log in", "I cannot log in");
    same(
        "Why was my payment cancelled?",
        "Why was my payment canceled?",
    );
    same("How do I deposit a cheque?", "How do I deposit a check?");
    same(
        "How long do international transfers take?",
        "How long does an international transfer take?",
    );
    same("Can I authorise a payment?", "Can I authorize payments?");
    same(
        "What should I do if my card is stolen?",
        "What do I do if my card was stolen?",
    );
    same("Which card has no fee?", "What card has no fee?");
    same("How do I turn on alerts?", "How can I turn alerts on?");
    differ("How do I turn alerts on?", "How can I switch alerts off?");
}

#[test]
fn synonyms_the_guard_does_not_know_are_misses() {
    // Cheap: one LLM call. The guard never learns that two different words mean the same.
    differ("How do I turn on alerts?", "how can I activate alerts");
    differ(
        "How do I contact customer support?",
        "How do I get in touch with customer support?",
    );
}

/// A few of WordNet's relations, in the table's format.
const TABLE: &str = "\
# synsets 0..6
s close shut
s call_off cancel
s buy purchase
s all any
s get obtain
s transfer
s send
s lift raise
! buy sell
! lift raise
> 5 6
x bought buy
";

fn with_lexicon(a: &str, b: &str) -> Option<String> {
    let lexicon = Lexicon::parse(TABLE).expect("table");
    let (a, b) = (Guard::of(&normalise(a)), Guard::of(&normalise(b)));
    let one = a.conflict(&b, &lexicon);
    assert_eq!(
        one.is_some(),
        b.conflict(&a, &lexicon).is_some(),
        "not symmetric"
    );
    one
}

/// However well each differing word stands for its counterpart, more than four of them
/// make another question.
#[test]
fn at_most_four_words_may_differ() {
    let lexicon = Lexicon::parse(
        "s card plastic\ns fee charge\ns limit cap\ns branch office\ns abroad overseas\n",
    )
    .expect("table");
    let conflict = |a: &str, b: &str| {
        let (a, b) = (Guard::of(&normalise(a)), Guard::of(&normalise(b)));
        a.conflict(&b, &lexicon)
    };
    let four = ("card fee limit branch", "plastic charge cap office");
    assert_eq!(conflict(four.0, four.1), None);
    let five = (
        "card fee limit branch abroad",
        "plastic charge cap office overseas",
    );
    assert!(conflict(five.0, five.1).is_some());
    // Each of the five pairs alone stands for the other.
    for (a, b) in five.0.split(' ').zip(five.1.split(' ')) {
        assert_eq!(conflict(a, b), None, "{a} / {b}");
    }
}

#[test]
fn words_the_lexicon_relates_stand_for_one_another() {
    for (a, b) in [
        ("How do I shut my account?", "How do I close my account?"),
        // A phrase is one word; inflected forms find their lemma.
        (
            "How do I call off a transfer?",
            "How do I cancel a transfer?",
        ),
        (
            "Can I cancel a payment I bought?",
            "Can I call off a payment I purchased?",
        ),
        // "Send" is a way to "transfer" (a verb's direct hypernym).
        (
            "How do I send money abroad?",
            "How do I transfer money abroad?",
        ),
        // A function word ("get") may be what a content word stands for.
        ("Can I get a new PIN?", "Can I obtain a new PIN?"),
    ] {
        assert_eq!(with_lexicon(a, b), None, "{a:?} / {b:?}");
    }
}

#[test]
fn the_lexicon_never_makes_other_questions_one() {
    for (a, b) in [
        // An antonymy in any sense vetoes a sense they share.
        ("Can I lift my limit?", "Can I raise my limit?"),
        ("Can I buy shares?", "Can I sell shares?"),
        // Quantifiers, question words and directions are decisive, whatever WordNet says.
        ("Are all transfers free?", "Are any transfers free?"),
        // A word the other question lacks is still another question.
        (
            "How do I shut my account?",
            "How do I close my joint account?",
        ),
        // A word the lexicon does not relate.
        ("How do I shut my account?", "How do I open my account?"),
    ] {
        assert!(with_lexicon(a, b).is_some(), "{a:?} / {b:?} passed");
    }
    // An empty lexicon relates nothing.
    assert!(
        Guard::of(&normalise("how do I shut it"))
            .conflict(
                &Guard::of(&normalise("how do I close it")),
                &Lexicon::default()
            )
            .is_some()
    );
}

#[test]
fn two_answers_state_the_same_facts_only_with_the_same_numbers_negations_and_no_antonym() {
    let lexicon = Lexicon::parse(TABLE).expect("table");
    let same = |a: &str, b: &str| same_facts(a, b, &lexicon);
    assert!(same(
        "It arrives in five days.",
        "Expect it within 5 days, as a rule."
    ));
    assert!(!same("It arrives in 5 days.", "It arrives in 10 days."));
    assert!(!same(
        "The card includes insurance.",
        "The card does not include insurance."
    ));
    assert!(!same(
        "You can buy shares in the app.",
        "You can sell shares in the app."
    ));
    assert!(same(
        "You can buy shares in the app.",
        "Shares can be bought in the app."
    ));
}

#[test]
fn a_malformed_table_names_its_line() {
    assert_eq!(Lexicon::parse("s a b\n? x\n").unwrap_err(), 2);
    assert_eq!(Lexicon::parse("> 1 x\n").unwrap_err(), 1);
    assert!(Lexicon::parse("# only a comment\n").unwrap().is_empty());
}

#[test]
fn stems_meet_across_inflections_and_spellings() {
    for (a, b) in [
        ("transfers", "transferring"),
        ("transferred", "transfer"),
        ("closing", "close"),
        ("closed", "closes"),
        ("policies", "policy"),
        ("branches", "branch"),
        ("cancelled", "canceled"),
        ("colour", "color"),
        ("centre", "center"),
        ("organisation", "organization"),
        ("analysed", "analyzed"),
    ] {
        assert_eq!(stem(a), stem(b), "{a} / {b}");
    }
    for (a, b) in [
        ("include", "exclude"),
        ("lock", "unlock"),
        ("fee", "free"),
        ("use", "us"),
    ] {
        assert_ne!(stem(a), stem(b), "{a} / {b}");
    }
}

#[test]
fn ordinary_words_are_told_from_numbers_negations_quantifiers_and_roles() {
    let ordinary = |a: &str, b: &str| {
        Guard::of(&normalise(a))
            .differs_in_ordinary_words(&Guard::of(&normalise(b)), &Lexicon::default())
    };
    // Words no lexicon relates here, and nothing else.
    assert!(ordinary(
        "How do I send money abroad?",
        "How do I transfer money abroad?"
    ));
    assert!(ordinary("Is my money safe?", "Is my money secure?"));
    // A number, a negation, a quantifier, a question word or a swapped role is never ordinary.
    assert!(!ordinary("Can I have 3 cards?", "Can I have 4 cards?"));
    assert!(!ordinary(
        "Can I close my account online?",
        "Can't I close my account online?"
    ));
    assert!(!ordinary(
        "Are all fees refunded?",
        "Are some fees refunded?"
    ));
    assert!(!ordinary(
        "When do branches open?",
        "Where do branches open?"
    ));
    assert!(!ordinary(
        "Move money from savings to checking",
        "Move money from checking to savings"
    ));
    // More than four words apart is another question altogether.
    assert!(!ordinary(
        "How do I order a new debit card quickly?",
        "Where can tourists exchange foreign currency cheaply today?"
    ));
}
