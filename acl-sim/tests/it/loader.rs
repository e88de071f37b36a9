//! Run-time loading of CANN: the search order and the one-line error without it.

use burn_ascend_kernels::acl::{loader, AclError, Runtime};

#[test]
fn search_order_is_toolkit_home_then_home_path_then_the_default() {
    let c = loader::toolkit_candidates();
    assert_eq!(
        c.last().unwrap().1,
        std::path::PathBuf::from(loader::DEFAULT_TOOLKIT)
    );
    let names: Vec<&str> = c.iter().map(|(from, _)| from.as_str()).collect();
    let pos = |s: &str| names.iter().position(|n| *n == s);
    if let (Some(a), Some(b)) = (pos("$ASCEND_TOOLKIT_HOME"), pos("$ASCEND_HOME_PATH")) {
        assert!(a < b);
    }
    assert_eq!(
        loader::lib_dir(std::path::Path::new("/x")),
        std::path::PathBuf::from("/x/lib64")
    );
}

#[test]
fn without_cann_the_npu_runtime_fails_with_one_line_naming_the_paths() {
    match Runtime::npu(0) {
        Ok(_) => eprintln!("CANN and an NPU are present: nothing to check here"),
        Err(AclError::NotFound(m)) => {
            assert_eq!(m.lines().count(), 1, "{m}");
            for (_, root) in loader::toolkit_candidates() {
                let lib = loader::lib_dir(&root).join("libascendcl.so");
                assert!(m.contains(&lib.display().to_string()), "{m}");
            }
        }
        Err(other) => eprintln!("CANN present but not usable here: {other}"),
    }
}
