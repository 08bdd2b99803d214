#!/usr/bin/env python3
"""Writes tests/fixtures/cache_guard_pairs.jsonl: labelled question pairs for the answer
cache's false-hit guard, built from systematic templates — question frames × classes of word
swaps (antonyms, entities and roles, products, places, dates, amounts, negation, quantifiers)
and true paraphrases (the rewordings the guard knows to be equivalent, and natural ones with
synonyms it does not know). Every pair has a split: `tune` (used while building the guard) or
`held-out` (reported), alternating within each class so that both halves hold every class.

    scripts/guard_pairs.py            # rewrite the fixture (deterministic: same output each run)

Each line: {"cached": …, "asked": …, "label": class, "split": "tune" | "held-out"}. A pair is
answered from the cache only when `label` is `paraphrase`. No asked question is a cached
question of another pair, so that every hit can be judged from its own pair.
"""
import json
import pathlib
import re

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/cache_guard_pairs.jsonl"


def swaps(frames):
    """(frame with one {} slot, [(a, b), …]) → pairs (frame(a), frame(b))."""
    for frame, options in frames:
        for a, b in options:
            yield frame.format(a), frame.format(b)


ANTONYMS = list(swaps([
    ("Does the premium card {} travel insurance?", [("include", "exclude"), ("cover", "exclude")]),
    ("How do I {} notifications for my account?", [("enable", "disable"), ("turn on", "turn off"),
                                                    ("activate", "deactivate"), ("show", "hide")]),
    ("How do I {} email alerts?", [("subscribe to", "unsubscribe from"), ("start", "stop")]),
    ("Can I {} a payee in the app?", [("add", "remove"), ("approve", "reject"), ("save", "delete")]),
    ("Why was my loan application {}?", [("approved", "declined"), ("accepted", "rejected")]),
    ("What is the {} overdraft on a current account?", [("maximum", "minimum"), ("highest", "lowest")]),
    ("Are transfers {} $1,000 checked by the fraud team?", [("above", "below"), ("over", "under")]),
    ("How do I {} my card?", [("lock", "unlock"), ("freeze", "unfreeze"), ("block", "unblock")]),
    ("What happens {} the fixed rate period ends?", [("before", "after")]),
    ("Is the rate on my mortgage {}?", [("fixed", "variable")]),
    ("Can I {} money from abroad with the app?", [("send", "receive")]),
    ("What is the fee for {} payments?", [("incoming", "outgoing"), ("domestic", "international")]),
    ("Which savings account has the {} interest rate?", [("highest", "lowest"), ("best", "worst")]),
    ("How do I {} my overdraft limit?", [("increase", "decrease"), ("raise", "lower")]),
    ("Can I {} shares through the app?", [("buy", "sell")]),
    ("What do I need to {} a joint account?", [("open", "close"), ("join", "leave")]),
    ("How long does it take to {} a dispute?", [("open", "close"), ("win", "lose")]),
    ("Can I {} my statement as a PDF?", [("download", "upload")]),
    ("Why is my card {}?", [("active", "inactive"), ("valid", "expired"), ("blocked", "unblocked")]),
    ("Do I pay a fee when I {} cash?", [("deposit", "withdraw"), ("borrow", "lend")]),
    ("Is the cashback offer {}?", [("permanent", "temporary")]),
    ("Is the personal loan {}?", [("secured", "unsecured")]),
    ("What happens if I pay my credit card bill {}?", [("early", "late")]),
    ("Is the {} payment on a new loan free?", [("first", "last")]),
    ("Does the bank {} cash withdrawals at the counter?", [("allow", "forbid"), ("encourage", "discourage")]),
    ("Is interest {} to my account every month?", [("added", "deducted"), ("credited", "debited")]),
]))

ENTITIES = list(swaps([
    ("Does {} charge a fee for ATM withdrawals abroad?", [("Visa", "Mastercard"), ("Amex", "Discover")]),
    ("Can my {} use my debit card?", [("partner", "child"), ("parent", "employer"), ("spouse", "friend")]),
    ("How do I add my {} as a joint account holder?", [("wife", "husband"), ("son", "daughter"),
                                                       ("partner", "mother")]),
    ("Can I pay with {} in shops?", [("Apple Pay", "Google Pay"), ("PayPal", "Klarna")]),
    ("How do I send money to a {} account?", [("Wise", "Revolut"), ("PayPal", "Venmo")]),
    ("Is a {} accepted for identity checks?", [("passport", "driving licence"), ("utility bill", "bank statement")]),
    ("Can the {} see my account balance?", [("account manager", "branch manager"), ("auditor", "accountant")]),
])) + [
    # Roles swapped: the same words, another question.
    ("How do I move money from savings to checking?", "How do I move money from checking to savings?"),
    ("How do I transfer money from my ISA to my current account?",
     "How do I transfer money from my current account to my ISA?"),
    ("Can I switch from a fixed rate to a variable rate?", "Can I switch from a variable rate to a fixed rate?"),
    ("Can I convert dollars into euros in the app?", "Can I convert euros into dollars in the app?"),
    ("Is the ATM fee higher than the transfer fee?", "Is the transfer fee higher than the ATM fee?"),
    ("Can I move my mortgage from your bank to another lender?",
     "Can I move my mortgage from another lender to your bank?"),
    ("What is the difference between a debit card and a credit card?",
     "What is the difference between a credit card and a prepaid card?"),
    ("How long does a transfer from the UK to Spain take?", "How long does a transfer from Spain to the UK take?"),
]

PRODUCTS = list(swaps([
    ("What is the interest rate on the {}?", [("savings account", "current account"), ("ISA", "fixed bond"),
                                              ("mortgage", "personal loan"), ("credit card", "overdraft")]),
    ("How do I close my {}?", [("savings account", "credit card"), ("ISA", "mortgage"),
                               ("business account", "student account")]),
    ("Is there a monthly fee for the {}?", [("premium card", "basic card"), ("business account", "student account"),
                                            ("joint account", "children's account")]),
    ("Can I apply for a {} online?", [("mortgage", "car loan"), ("credit card", "overdraft"),
                                      ("business loan", "student loan")]),
    ("What is the withdrawal limit on a {}?", [("debit card", "credit card"), ("prepaid card", "business card"),
                                                ("savings account", "current account")]),
    ("Does the {} come with travel insurance?", [("gold card", "platinum card"), ("premium account", "basic account")]),
    ("How do I report a lost {}?", [("debit card", "chequebook"), ("credit card", "phone")]),
    ("Can I open a {} for my child?", [("savings account", "current account"), ("junior ISA", "trust fund")]),
]))

PLACES = list(swaps([
    ("Can I use my card in {}?", [("Japan", "Brazil"), ("Canada", "Mexico"), ("France", "Germany"),
                                  ("Egypt", "Morocco")]),
    ("Is there a branch in {}?", [("London", "Manchester"), ("Paris", "Lyon"), ("Boston", "Chicago"),
                                  ("Leeds", "Bristol")]),
    ("What is the fee for transfers to {}?", [("India", "China"), ("the US", "Canada"), ("Spain", "Italy"),
                                              ("Nigeria", "Kenya")]),
    ("Do I need to tell you before I travel to {}?", [("Thailand", "Vietnam"), ("Australia", "New Zealand")]),
    ("Are ATMs in {} free to use?", [("Ireland", "Scotland"), ("Portugal", "Greece"), ("Poland", "Hungary")]),
    ("Can I open an account if I live in {}?", [("Switzerland", "Norway"), ("Singapore", "Hong Kong")]),
    ("Which branches in {} are open late?", [("the city centre", "the suburbs"), ("Glasgow", "Edinburgh")]),
]))

DATES = list(swaps([
    ("Are branches open on {}?", [("Saturday", "Sunday"), ("Monday", "Friday"),
                                  ("Christmas Eve", "New Year's Eve"), ("Easter Monday", "Good Friday")]),
    ("What was the savings rate in {}?", [("2023", "2024"), ("March", "April"), ("January 2025", "January 2026"),
                                          ("the spring", "the autumn")]),
    ("Will the new fees apply from {}?", [("June", "July"), ("next week", "next month"), ("today", "tomorrow")]),
    ("Is my card payment due on the {}?", [("1st", "15th"), ("5th", "25th")]),
    ("Can I get a statement for {}?", [("last year", "this year"), ("last month", "this month"),
                                       ("the first quarter", "the second quarter")]),
    ("Did the interest rate change in {}?", [("2022", "2021"), ("October", "November")]),
    ("When does my fixed rate end in {}?", [("2027", "2028")]),
    ("Are transfers processed on {} mornings?", [("Tuesday", "Thursday"), ("weekday", "weekend")]),
]))

AMOUNTS = list(swaps([
    ("What is the fee for a {} transfer?", [("$500", "$5,000"), ("£100", "£1,000"), ("€20", "€200")]),
    ("Can I withdraw {} a day?", [("$300", "$400"), ("$1,000", "$2,000"), ("£250", "£500")]),
    ("Is express delivery in {}?", [("2 days", "3 days"), ("one week", "two weeks")]),
    ("Can I have {} cards on one account?", [("two", "three"), ("3", "5")]),
    ("Can I overpay {} of my mortgage each year?", [("10%", "20%"), ("5%", "15%")]),
    ("What happens after {} wrong PIN attempts?", [("three", "five"), ("2", "4")]),
    ("Is the minimum deposit {}?", [("$10", "$100"), ("1,000 euros", "10,000 euros")]),
    ("Is the overdraft fee {} a month?", [("$5", "$15"), ("£2.50", "£3.50")]),
    ("Do I earn {} cashback on groceries?", [("1%", "2%"), ("3 percent", "5 percent")]),
    ("Can I borrow {} with a personal loan?", [("$15,000", "$50,000"), ("twenty thousand dollars", "forty thousand dollars")]),
    ("Is a {} deposit enough for a mortgage?", [("5%", "10%")]),
]))

NEGATION = [
    ("Can I use my card abroad?", "Can't I use my card abroad?"),
    ("Why is my card working?", "Why is my card not working?"),
    ("Do I need a PIN for contactless payments?", "Do I not need a PIN for contactless payments?"),
    ("Is there a fee for early repayment?", "Is there no fee for early repayment?"),
    ("Does the savings rate change?", "Does the savings rate never change?"),
    ("Will my direct debits continue?", "Won't my direct debits continue?"),
    ("Can I reset my password online?", "Can I reset my password without going online?"),
    ("Should I report a lost card?", "Shouldn't I report a lost card?"),
    ("Is my account protected by the deposit scheme?", "Is my account not protected by the deposit scheme?"),
    ("Has my transfer arrived?", "Hasn't my transfer arrived?"),
    ("Why was I charged a fee?", "Why wasn't I charged a fee?"),
    ("What happens if I pay on time?", "What happens if I don't pay on time?"),
    ("Are weekends included in the delivery time?", "Are weekends not included in the delivery time?"),
    ("Does the app work on my phone?", "Doesn't the app work on my phone?"),
    ("Can I pay with a frozen card?", "Can I not pay with a frozen card?"),
    ("Is interest paid on my current account?", "Is no interest paid on my current account?"),
    ("Did my payment go through?", "Didn't my payment go through?"),
    ("Can I open an account with a credit history?", "Can I open an account without a credit history?"),
    ("Is a deposit needed for a car loan?", "Is no deposit needed for a car loan?"),
    ("Why was my card accepted?", "Why was my card not accepted?"),
    ("Do I have to pay tax on my savings?", "Do I not have to pay tax on my savings?"),
    ("Can I withdraw cash with my credit card?", "Can I never withdraw cash with my credit card?"),
    ("Is my salary counted as a deposit?", "Isn't my salary counted as a deposit?"),
    ("Does the offer apply to existing customers?", "Does the offer not apply to existing customers?"),
    ("Can I cancel a standing order?", "Cannot I cancel a standing order?"),
    ("Were any fees charged last month?", "Were no fees charged last month?"),
    ("Is the branch accessible by wheelchair?", "Is the branch not accessible by wheelchair?"),
    ("Would I lose my rate if I move house?", "Wouldn't I lose my rate if I move house?"),
    ("Can someone else pay into my account?", "Can nobody else pay into my account?"),
    ("Is there a limit on contactless payments?", "Is there no limit on contactless payments?"),
    ("Could my card be used for online shopping?", "Couldn't my card be used for online shopping?"),
    ("Does my overdraft have a fee?", "Does my overdraft have no fee?"),
]

QUANTIFIERS = list(swaps([
    ("Are {} transfers free?", [("all", "some"), ("most", "few"), ("all", "many")]),
    ("Do {} cards have contactless?", [("all", "some"), ("both", "the")]),
    ("Can I have {} one account?", [("more than", "only"), ("at least", "at most")]),
    ("Are there fees on {} of my accounts?", [("all", "any"), ("both", "one"), ("most", "several")]),
    ("Can {} account holders sign cheques?", [("all", "both"), ("either", "neither"), ("any", "two")]),
    ("Is {} withdrawal charged?", [("every", "the first"), ("any", "a single")]),
    ("Do {} customers get the bonus rate?", [("all", "new"), ("many", "few"), ("some", "no")]),
    ("Are {} branches open on Sundays?", [("any", "all"), ("most", "some")]),
    ("Does the cashback apply to {} purchases?", [("all", "some"), ("every", "only online")]),
    ("Can I make {} transfers a day?", [("unlimited", "several"), ("many", "a few")]),
    ("Do I need {} documents to open an account?", [("any", "all"), ("two", "several")]),
]))

# True paraphrases: first the rewordings the guard knows to be equivalent (function words,
# contractions, inflection, spelling, numbers written another way, fixed phrases, order), then
# natural rewordings with synonyms, which it does not know (misses, by design).
PARAPHRASES = [
    ("How do I reset my password?", "How can I reset my password?"),
    ("How do I reset my online banking password?", "how do i reset my online banking password"),
    ("What is the daily ATM withdrawal limit?", "What's the daily ATM withdrawal limit?"),
    ("What is the ATM withdrawal limit per day?", "What is the daily limit for ATM withdrawals?"),
    ("How long does a replacement card take to arrive?", "How long will a replacement card take to arrive?"),
    ("How long does it take for a new card to arrive?", "How long does a new card take to arrive?"),
    ("How do I freeze my debit card?", "How can I freeze my debit card?"),
    ("What are the fees for international transfers?", "What are the international transfer fees?"),
    ("How do I change my PIN?", "How should I change my PIN?"),
    ("Where can I see my card limits?", "Where do I see my card limits?"),
    ("How long does an international transfer take?", "How long do international transfers take?"),
    ("What should I do if my card is stolen?", "What do I do if my card was stolen?"),
    ("Can I cancel a payment that is scheduled?", "Can I cancel a scheduled payment?"),
    ("Why was my payment cancelled?", "Why was my payment canceled?"),
    ("How do I deposit a cheque with the app?", "How do I deposit a check with the app?"),
    ("Can I authorise a payment from my phone?", "Can I authorize a payment from my phone?"),
    ("Is there a fee for three transfers a month?", "Is there a fee for 3 transfers per month?"),
    ("Can I withdraw 1,000 euros at a branch?", "Can I withdraw 1000 euros at a branch?"),
    ("Is the overdraft fee 2.50 dollars?", "Is the overdraft fee 2.5 dollars?"),
    ("How do I turn on contactless payments?", "How do I turn contactless payments on?"),
    ("Which card has no foreign transaction fee?", "What card has no foreign transaction fee?"),
    ("How do I set up a standing order?", "How do I setup a standing order?"),
    ("How do I log in to online banking?", "How can I login to online banking?"),
    ("Can't I use my card at this ATM?", "Can I not use my card at this ATM?"),
    ("What's the interest rate on the business loan?", "What is the business loan's interest rate?"),
    ("How do I update my e-mail address?", "How do I update my email address?"),
    ("Is interest paid monthly?", "Is interest paid every month?"),
    ("Are statements sent yearly?", "Are statements sent annually?"),
    ("How do I report a stolen card?", "How to report a stolen card?"),
    ("How many transfers can I make per week?", "How many transfers can I make each week?"),
    ("Is it possible to close my account online?", "Can I close my account online?"),
    ("How do I order a new chequebook?", "How can I order a new chequebook?"),
    ("What documents do I need to open an account?", "What documents should I need to open an account?"),
    ("How long do refunds take to arrive?", "How long does a refund take to arrive?"),
    ("When is my credit card bill due?", "When is my credit card bill due?!"),
    ("How do I dispute a transaction?", "How can I dispute a transaction?"),
    ("Where do I find my sort code?", "Where can I find my sort code?"),
    ("How do I increase my contactless limit?", "How can I increase my contactless limit?"),
    ("What is the fee for replacing a card?", "What's the fee for replacing a card?"),
    ("Can I pay my mortgage early?", "Could I pay my mortgage early?"),
    ("How do I activate my new card?", "How do I activate my new card, please?"),
    ("Are there charges for paying abroad?", "Are there charges for payments abroad?"),
    ("What happens if I miss a loan repayment?", "What happens if I miss loan repayments?"),
    ("How do I cancel a direct debit?", "How do I cancel direct debits?"),
    ("Why has my card been declined?", "Why was my card declined?"),
    ("How do I contact customer support?", "How do I get in touch with customer support?"),
    ("What interest rate does the savings account pay?", "What interest rate does the savings account offer?"),
    ("What are the fees for international transfers?", "What fees apply to international transfers?"),
    ("Can I overpay my mortgage without a penalty?", "Can I overpay my mortgage without paying a penalty?"),
    ("How do I begin a complaint?", "How do I start a complaint?"),
    ("What should I do if I misplaced my card?", "What should I do if I lost my card?"),
    ("How do I move funds to my savings?", "How do I move money to my savings?"),
    ("Is there a charge for using an ATM abroad?", "Is there a fee for using an ATM abroad?"),
    ("How quickly will I get my refund?", "How fast will I get my refund?"),
    ("How do I change my address?", "How do I update my address?"),
    ("Can I get a new PIN?", "Can I obtain a new PIN?"),
    ("How do I stop a cheque?", "How do I cancel a cheque?"),
    ("How do I close my joint account?", "How do I shut my joint account?"),
    ("What is my account number?", "Where is my account number?"),
    ("How can I see my statements?", "How can I view my statements?"),
    ("Can I pay bills with the app?", "Can I pay bills using the app?"),
    ("How long is the fixed rate?", "How long does the fixed rate last?"),
    ("Is my money safe with you?", "Is my money protected with you?"),
    ("How do I switch my account to you?", "How do I move my account to you?"),
    ("What is the minimum balance?", "What is the lowest balance allowed?"),
    ("How do I add a card to Apple Pay?", "How can I add a card to Apple Pay?"),
    ("How do I send money abroad?", "How can I send money abroad?"),
    ("What time do branches open?", "When do branches open?"),
    ("Do you charge for paper statements?", "Is there a fee for paper statements?"),
    ("How do I apply for an overdraft?", "How can I apply for an overdraft?"),
    ("Can I change my direct debit date?", "Could I change my direct debit date?"),
    ("How many cards can I have?", "How many cards can I get?"),
    ("How do I unlock my online banking?", "How do I unlock online banking?"),
    ("What is the limit for contactless payments?", "What's the contactless payment limit?"),
    ("How long does a mortgage application take?", "How long will a mortgage application take?"),
    ("Can I open an account online?", "Can I open accounts online?"),
    ("How do I request a credit limit increase?", "How can I request a credit limit increase?"),
    ("What do I need to apply for a loan?", "What do I need to apply for loans?"),
    ("Where can I deposit cash?", "Where do I deposit cash?"),
    ("How long are transfers to savings?", "How long are transfers to my savings?"),
    ("How do I order a replacement card?", "How do I order replacement cards?"),
    ("Why is my account frozen?", "Why has my account been frozen?"),
    ("How do I set up text alerts?", "How can I set up text alerts?"),
    ("Can I pay in cheques at the post office?", "Can I pay cheques in at the post office?"),
    ("Is online banking free?", "Is online banking free of charge?"),
    ("How do I close my savings account?", "How do I close the savings account?"),
    ("What's the process for disputing a charge?", "What is the process for disputing a charge?"),
    ("How can I pay off my credit card?", "How do I pay off my credit card?"),
    ("Can I have two current accounts?", "Can I have 2 current accounts?"),
    ("How do I authorise a new device?", "How do I authorize a new device?"),
    ("Is there a travel money service?", "Is there a travel-money service?"),
    ("How do I change my phone number?", "How do I change my phone number on file?"),
    ("Can I choose my own PIN?", "Am I able to choose my own PIN?"),
    ("How do I make a complaint?", "How can I make a complaint?"),
    ("How much does a bank transfer cost?", "How much do bank transfers cost?"),
    ("When will I receive my new card?", "When will I get my new card?"),
    ("How do I pay someone new?", "How do I pay a new person?"),
    ("Where is my nearest branch?", "Where's my nearest branch?"),
    ("How do I find my IBAN?", "How can I find my IBAN?"),
    ("What's the cut-off time for same-day transfers?", "What is the cut-off time for same day transfers?"),
]


def normalised(text):
    return re.sub(r"[^\w.]+", " ", text.lower().replace("'", "")).strip()


def main():
    classes = [
        ("antonym", ANTONYMS), ("entity", ENTITIES), ("product", PRODUCTS), ("place", PLACES),
        ("date", DATES), ("amount", AMOUNTS), ("negation", NEGATION), ("quantifier", QUANTIFIERS),
        ("paraphrase", PARAPHRASES),
    ]
    rows, seen = [], set()
    for label, pairs in classes:
        for i, (cached, asked) in enumerate(pairs):
            key = (normalised(cached), normalised(asked))
            assert key[0] != key[1] or label == "paraphrase", (cached, asked)
            if key in seen:
                continue
            seen.add(key)
            rows.append({"cached": cached, "asked": asked, "label": label,
                         "split": "tune" if i % 2 == 0 else "held-out"})
    cached = {normalised(r["cached"]) for r in rows}
    for r in rows:
        # Judged from its own pair: no asked question is another pair's cached question.
        assert normalised(r["asked"]) not in cached - {normalised(r["cached"])}, r
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    counts = {}
    for r in rows:
        counts[(r["label"], r["split"])] = counts.get((r["label"], r["split"]), 0) + 1
    print(f"{len(rows)} pairs → {OUT}")
    for label, _ in classes:
        print(f"  {label:<11} tune {counts.get((label, 'tune'), 0):>3}  held-out {counts.get((label, 'held-out'), 0):>3}")


if __name__ == "__main__":
    main()
