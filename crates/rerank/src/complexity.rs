//! What an uploaded component may ask the compiler to do, checked before it is compiled.
//!
//! Cranelift cannot be stopped once it compiles a function, and its cost is not linear in
//! the bytes uploaded: a component with one function of 2,000 locals and 16,000 nested blocks
//! took 34 s of CPU and 2.5 GB of memory to compile on the machine of a live audit. Measured
//! here (`examples/compile_cost.rs`), a function's cost grows with the square of its blocks
//! (5,000 blocks one after another: 0.37 s; 20,000: 4 s; nested, about 2.7 times that), and
//! with locals × blocks where the locals live across the blocks. Each function's shape is
//! read here with wasmparser (the parser wasmtime itself uses, linear in the bytes) and a
//! component whose code is bigger than any a compiler emits for a rerank rule is refused
//! before Cranelift sees it. The limits are [`Complexity`]'s; `docs/security.md` lists them
//! with what compiling at each costs.

use wasmparser::{Operator, Parser, Payload};

/// The most a component's code may hold. The SDK's example components peak at 30 locals and
/// 140 blocks in a function and at about 8,700 locals × blocks in all; the defaults sit far
/// above what a compiler emits for a rerank rule, and low enough that the worst upload they
/// let through compiles in about 2 s of CPU on the project's 2-core machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Complexity {
    /// Locals one function may declare.
    pub max_locals: u64,
    /// Control structures (`block`, `loop`, `if`, `try_table`) one function may open.
    pub max_blocks: u64,
    /// How deep they may nest.
    pub max_depth: u64,
    /// Locals × blocks of one function: SSA construction's share.
    pub max_function_cost: u64,
    /// `SLUICE_COMPONENT_MAX_COMPILE_WORK`: the compile work of every function together —
    /// each function 5, plus its blocks × (blocks + 2,000) / 2,000, plus its locals / 256:
    /// linear for small functions and quadratic for big ones, a function's own cost about five
    /// blocks', and every 256 locals it declares (used or not: Cranelift sets each up) about
    /// one, as measured. Summed over functions, so that many functions each under the
    /// per-function limits are bounded together.
    pub max_work: u64,
}

impl Default for Complexity {
    fn default() -> Self {
        Self {
            max_locals: 10_000,
            max_blocks: 10_000,
            max_depth: 1_000,
            max_function_cost: 4_000_000,
            max_work: 50_000,
        }
    }
}

/// Locals that cost the compiler about as much as one unit of work ([`Complexity::max_work`]).
const LOCALS_PER_WORK: u64 = 256;

/// The compile work of a function of `blocks` blocks and `locals` locals
/// ([`Complexity::max_work`]).
fn work(blocks: u64, locals: u64) -> u64 {
    5 + blocks.saturating_mul(blocks + 2_000) / 2_000 + locals / LOCALS_PER_WORK
}

/// The shape of the biggest function, and the total, of what was read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape {
    /// Functions read.
    pub functions: u64,
    /// Most locals in one function.
    pub locals: u64,
    /// Most control structures in one function.
    pub blocks: u64,
    /// Deepest nesting.
    pub depth: u64,
    /// Highest (locals + 1) × (blocks + 1) of one function.
    pub function_cost: u64,
    /// The compile work of every function together ([`Complexity::max_work`]).
    pub work: u64,
}

/// Reads every function of `bytes` (a component, or a module; nested modules included)
/// and refuses it at the first limit passed, naming the limit and the function.
pub fn check(bytes: &[u8], limits: &Complexity) -> Result<Shape, String> {
    let mut shape = Shape::default();
    for payload in Parser::new(0).parse_all(bytes) {
        // A malformed binary is wasmtime's to describe; this only measures what parses.
        let Ok(Payload::CodeSectionEntry(body)) = payload else {
            continue;
        };
        let index = shape.functions;
        shape.functions += 1;
        let mut locals = 0u64;
        let Ok(reader) = body.get_locals_reader() else {
            continue;
        };
        for entry in reader {
            let Ok((count, _)) = entry else { break };
            locals = locals.saturating_add(u64::from(count));
        }
        if locals > limits.max_locals {
            return Err(format!(
                "function {index} declares {locals} locals; the limit is {}",
                limits.max_locals
            ));
        }
        let (mut blocks, mut depth, mut deepest) = (0u64, 0u64, 0u64);
        let Ok(operators) = body.get_operators_reader() else {
            continue;
        };
        for operator in operators {
            let Ok(operator) = operator else { break };
            match operator {
                Operator::Block { .. }
                | Operator::Loop { .. }
                | Operator::If { .. }
                | Operator::TryTable { .. } => {
                    blocks += 1;
                    depth += 1;
                    deepest = deepest.max(depth);
                    if blocks > limits.max_blocks {
                        return Err(format!(
                            "function {index} opens more than {} blocks, the limit",
                            limits.max_blocks
                        ));
                    }
                    if depth > limits.max_depth {
                        return Err(format!(
                            "function {index} nests blocks more than {} deep, the limit",
                            limits.max_depth
                        ));
                    }
                }
                Operator::End => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        let cost = (locals + 1).saturating_mul(blocks + 1);
        if cost > limits.max_function_cost {
            return Err(format!(
                "function {index} has {locals} locals and {blocks} blocks: {cost} to compile, over the limit of {} (locals × blocks)",
                limits.max_function_cost
            ));
        }
        shape.work = shape.work.saturating_add(work(blocks, locals));
        if shape.work > limits.max_work {
            return Err(format!(
                "its functions are more work to compile together than the limit of {} (SLUICE_COMPONENT_MAX_COMPILE_WORK: each function 5 plus blocks × (blocks + 2,000) / 2,000 plus locals / 256, summed; {} functions read)",
                limits.max_work, shape.functions
            ));
        }
        shape.locals = shape.locals.max(locals);
        shape.blocks = shape.blocks.max(blocks);
        shape.depth = shape.depth.max(deepest);
        shape.function_cost = shape.function_cost.max(cost);
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component holding one core module with one function of `locals` locals and
    /// `blocks` blocks, nested or one after another.
    pub(crate) fn hostile(locals: usize, blocks: usize, nested: bool) -> Vec<u8> {
        let mut body = String::new();
        if nested {
            body.push_str(&"(block local.get 0 br_if 0 ".repeat(blocks));
            body.push_str(&")".repeat(blocks));
        } else {
            body.push_str(&"(block local.get 0 br_if 0) ".repeat(blocks));
        }
        let wat = format!(
            "(component (core module (func (param i32) {} {body})))",
            "(local i32)".repeat(locals)
        );
        wat::parse_str(&wat).expect("valid text")
    }

    #[test]
    fn the_shape_of_a_function_is_measured() {
        let shape = check(&hostile(3, 40, true), &Complexity::default()).unwrap();
        assert_eq!(shape.functions, 1);
        assert_eq!(shape.locals, 3);
        assert_eq!(shape.blocks, 40);
        assert_eq!(shape.depth, 40);
        assert_eq!(shape.function_cost, 4 * 41);
        let flat = check(&hostile(0, 40, false), &Complexity::default()).unwrap();
        assert_eq!(flat.depth, 1);
    }

    #[test]
    fn each_limit_refuses_and_names_itself() {
        let limits = Complexity {
            max_locals: 100,
            max_blocks: 100,
            max_depth: 10,
            max_function_cost: 1_000,
            max_work: 150,
        };
        let refused = |bytes: Vec<u8>| check(&bytes, &limits).unwrap_err();
        assert!(refused(hostile(101, 1, false)).contains("101 locals"));
        assert!(refused(hostile(0, 101, false)).contains("more than 100 blocks"));
        assert!(refused(hostile(0, 11, true)).contains("more than 10 deep"));
        assert!(refused(hostile(50, 50, false)).contains("locals × blocks"));
        // Work adds up over functions: one of 90 blocks is within, two are not.
        let one = check(&hostile(0, 90, false), &limits).unwrap();
        assert_eq!(one.work, 5 + 90 * 2090 / 2000);
        // Locals count too, in every function: many functions each under the per-function
        // limits (the audit's 9,000 × 10,000 unused locals) are bounded together.
        let each = "(local i32)".repeat(100);
        let wide = |n: usize| {
            let funcs = format!("(func (param i32) {each})").repeat(n);
            wat::parse_str(format!("(component (core module {funcs}))")).unwrap()
        };
        assert_eq!(check(&wide(1), &limits).unwrap().work, 5);
        let locals_limits = Complexity {
            max_work: 1_000,
            ..Complexity::default()
        };
        let thousands = format!("(func (param i32) {})", "(local i32)".repeat(9_000));
        let many = format!("(component (core module {}))", thousands.repeat(30));
        let e = check(&wat::parse_str(&many).unwrap(), &locals_limits).unwrap_err();
        assert!(e.contains("more work to compile together"), "{e}");
        assert_eq!(
            check(
                &wat::parse_str(format!("(component (core module {thousands}))")).unwrap(),
                &locals_limits
            )
            .unwrap()
            .work,
            5 + 9_000 / 256
        );
        let two = wat::parse_str(
            "(component (core module (func (param i32) (block) (block)) (func (param i32) (block))))",
        )
        .unwrap();
        assert_eq!(check(&two, &limits).unwrap().functions, 2);
        let twice = format!(
            "(component (core module {0} {0}))",
            format!(
                "(func (param i32) {})",
                "(block local.get 0 br_if 0) ".repeat(90)
            )
        );
        let e = check(&wat::parse_str(&twice).unwrap(), &limits).unwrap_err();
        assert!(e.contains("more work to compile together"), "{e}");
        // Under every limit.
        check(&hostile(9, 9, true), &limits).unwrap();
    }
}
