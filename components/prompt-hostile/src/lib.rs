//! prompt-hostile: a prompt-assembly component that misbehaves as its question says, so that
//! one built component gives the sandbox's tests each case: `trap`, `loop`, `huge` (8 MiB of
//! text), `flood` (messages far over any token budget), `no-user` (the last message is not
//! the user's). Any other question gets the built-in messages with a first line of its own —
//! which is also what its smoke run at upload sees.

use sluice_rerank_sdk::prompt::{Guest, Message, PromptInput, export_assembler, message};

struct Component;

impl Guest for Component {
    fn assemble(input: PromptInput) -> Result<Vec<Message>, String> {
        let mut messages = input.built_in;
        match input.question.as_str() {
            "trap" => panic!("asked to trap"),
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "huge" => messages.push(message("user", "x".repeat(8 << 20))),
            "flood" => {
                let long = "word ".repeat(200);
                messages.extend((0..200).map(|_| message("user", long.clone())));
            }
            "no-user" => messages.push(message("assistant", "I speak last.")),
            _ => messages.insert(0, message("system", "hostile: well behaved this time")),
        }
        Ok(messages)
    }
}

export_assembler!(Component);
