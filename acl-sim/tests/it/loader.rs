//! Run-time loading of CANN: the search order and the one-line error without it.

use burn_ascend_cann::acl::{loader, AclError, Runtime};

#[test]
fn search_order_is_toolkit_home_then_home_path_then_the_default() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |var: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| std::ffi::OsString::from(v))
        }
    };
    let roots = |c: Vec<(String, std::path::PathBuf)>| -> Vec<(String, String)> {
        c.into_iter()
            .map(|(from, p)| (from, p.display().to_string()))
            .collect()
    };
    let both = &[
        ("ASCEND_HOME_PATH", "/home"),
        ("ASCEND_TOOLKIT_HOME", "/tk"),
    ];
    assert_eq!(
        roots(loader::toolkit_candidates_in(env(both))),
        [
            ("$ASCEND_TOOLKIT_HOME".to_string(), "/tk".to_string()),
            ("$ASCEND_HOME_PATH".to_string(), "/home".to_string()),
            ("default".to_string(), loader::DEFAULT_TOOLKIT.to_string()),
        ]
    );
    // An empty variable counts as unset, as torch_npu's search treats it.
    let one = &[("ASCEND_HOME_PATH", "/home"), ("ASCEND_TOOLKIT_HOME", "")];
    assert_eq!(
        roots(loader::toolkit_candidates_in(env(one))),
        [
            ("$ASCEND_HOME_PATH".to_string(), "/home".to_string()),
            ("default".to_string(), loader::DEFAULT_TOOLKIT.to_string()),
        ]
    );
    assert_eq!(
        roots(loader::toolkit_candidates_in(env(&[]))),
        [("default".to_string(), loader::DEFAULT_TOOLKIT.to_string())]
    );
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
