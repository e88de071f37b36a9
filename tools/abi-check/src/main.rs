//! `abi-check-gen`: prints what `tools/abi-check/run.sh` needs from the Rust side.
//!
//! ```text
//! abi-check-gen --list-ops                      aclnn ops of the table, one a line
//! abi-check-gen --manifest                      every function and constant, readable
//! abi-check-gen --prelude FILE [--skip OP]… [--mutate FN:INDEX:CTYPE]
//!                                               the C++ check after FILE's #includes
//! abi-check-gen --self-declared [--mutate …]    the check against declarations made from
//!                                               the table itself (offline)
//! ```

use std::process::ExitCode;

use burn_ascend_abi_check::{check_source, constants, functions, ops, Mutation, Prelude};

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("abi-check-gen: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<String, String> {
    let mut prelude = None;
    let mut skip = Vec::new();
    let mut mutations = Vec::new();
    let mut it = args.into_iter();
    let value = |it: &mut std::vec::IntoIter<String>, flag: &str| {
        it.next().ok_or_else(|| format!("{flag} needs a value"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list-ops" => return Ok(ops().iter().map(|o| format!("{o}\n")).collect()),
            "--manifest" => return Ok(manifest()),
            "--list-self-check-mutations" => {
                return Ok(Mutation::self_check_set()
                    .iter()
                    .map(|m| format!("{}:{}:{}\n", m.function, m.index, m.c_type))
                    .collect())
            }
            "--self-declared" => prelude = Some(Prelude::SelfDeclared),
            "--prelude" => {
                let path = value(&mut it, "--prelude")?;
                let text =
                    std::fs::read_to_string(&path).map_err(|e| format!("--prelude {path}: {e}"))?;
                prelude = Some(Prelude::Headers(text));
            }
            "--skip" => skip.push(value(&mut it, "--skip")?),
            "--mutate" => mutations.push(Mutation::parse(&value(&mut it, "--mutate")?)?),
            other => {
                return Err(format!(
                    "unknown argument `{other}` (see the source's docs)"
                ))
            }
        }
    }
    let prelude = prelude.ok_or("one of --prelude FILE, --self-declared is needed")?;
    let known = ops();
    if let Some(s) = skip.iter().find(|s| !known.contains(&s.as_str())) {
        return Err(format!("--skip {s}: not an op of the table"));
    }
    let mut fns = functions();
    let constants = constants();
    // With --self-declared the declarations come from the unmutated table: only the
    // transcription is broken.
    let prelude = match prelude {
        Prelude::SelfDeclared if !mutations.is_empty() => {
            Prelude::Headers(burn_ascend_abi_check::self_declarations(&fns, &constants))
        }
        p => p,
    };
    for m in &mutations {
        m.apply(&mut fns)?;
    }
    Ok(check_source(&fns, &constants, &prelude, &skip))
}

fn manifest() -> String {
    let mut s = String::new();
    for f in functions() {
        s += &format!(
            "{} {}({})  // {}\n",
            f.ret,
            f.c_name,
            f.params.join(", "),
            f.rust_type
        );
    }
    for c in constants() {
        s += &format!("{} = {}  // {}\n", c.c_name, c.value, c.source);
    }
    s
}
