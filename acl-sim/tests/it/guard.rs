//! The guard every simulated entry point runs under: a kernel panic becomes
//! `ACLNN_ERR_INNER` with its message and location, and prints nothing (no backtrace before
//! the caller's one-line error).

use burn_ascend_acl_sim::guarded_for_tests;
use burn_ascend_cann::acl::ffi::ACLNN_ERR_INNER;

/// Set in the child process the test starts: run the panicking guard, print the outcome.
const CHILD: &str = "BURN_ASCEND_SIM_GUARD_CHILD";

#[test]
fn guard_child_process() {
    match std::env::var(CHILD).as_deref() {
        Ok("inside") => {
            let (st, msg) = guarded_for_tests(|| panic!("kernel index out of range"));
            println!("STATUS {st} MESSAGE {msg}");
        }
        Ok("outside") => {
            // The quiet hook is installed by the first guard; a panic outside any guard must
            // still reach the previous (default) hook and be printed.
            let _ = guarded_for_tests(|| {});
            let joined = std::thread::spawn(|| panic!("outside any guard")).join();
            println!("JOINED_ERR {}", joined.is_err());
        }
        _ => {}
    }
}

fn child(mode: &str) -> (String, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "guard::guard_child_process", "--nocapture"])
        .env(CHILD, mode)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn a_panic_caught_by_the_guard_prints_nothing_and_keeps_its_message_and_location() {
    let (stdout, stderr) = child("inside");
    let want = format!(
        "STATUS {ACLNN_ERR_INNER} MESSAGE [simulation] internal error: kernel index out of range (at "
    );
    assert!(stdout.contains(&want), "{stdout}");
    assert!(
        !stderr.contains("panicked"),
        "the caught panic was printed: {stderr}"
    );
    assert!(
        !stdout.contains("panicked"),
        "the caught panic was printed: {stdout}"
    );
}

#[test]
fn a_panic_outside_the_guard_still_reaches_the_previous_hook() {
    let (stdout, stderr) = child("outside");
    assert!(stdout.contains("JOINED_ERR true"), "{stdout}");
    assert!(
        stderr.contains("panicked") && stderr.contains("outside any guard"),
        "the default hook must still print panics outside the guard: {stderr}"
    );
}
