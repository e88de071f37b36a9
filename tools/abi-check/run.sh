#!/usr/bin/env bash
# The ABI check (a wrong width or order in a hand-copied prototype compiles and corrupts arguments
# at run time; a compiler against the real headers catches it): every FFI declaration of
# cann/src/acl/ffi*.rs (the ACL runtime, nnopbase and both stages of every aclnn op of
# acl_api_table!, plus every enum value and status code the project uses) and of
# cann/src/hccl/ffi.rs (hccl_api_table!, HCCL's enums, result codes and HcclRootInfo's size, for
# data-parallel training) against CANN's real headers, by a compiler.
#
#   tools/abi-check/run.sh [--keep] [--no-self-check]
#
# 1. fetches the headers into a temporary directory (they are under CANN's own licence: never
#    committed): the ACL and HCCL headers from the torch-npu wheel on PyPI (torch_npu/include/acl,
#    torch_npu/include/third_party/hccl/inc/hccl: HcclBarrier and HcclGetErrorString are
#    declared from 2.6.0.post5 on; 2.6.0's trimmed hccl.h lacks them), the
#    nnopbase headers (aclnn/acl_meta.h, aclnn/aclnn_base.h, opdev/op_errno.h) from
#    hicann/opbase, and each op's aclnn_*.h from hicann/ops-math, hicann/ops-nn and
#    cannmirror/ops-transformer (found by the declaration of <op>GetWorkspaceSize; an op whose
#    header is generated at build time is checked against the prototype of its docs/<op>.md);
# 2. generates a C++17 file of static_asserts from the Rust table (abi-check-gen, this crate;
#    why C++ and per-parameter asserts: see src/lib.rs) and compiles it with -fsyntax-only;
# 3. self-check: compiles it again with each deliberately broken width
#    (abi-check-gen --list-self-check-mutations) and fails unless the compiler rejects every
#    one, naming the mutated function and parameter;
# 4. prints the torch-npu and CANN versions the headers came from.
#
# Needs the network (pip, git) unless given local copies; not part of .ci/run (the crate's
# unit tests, which are, check the generator offline). Environment:
#   ABI_CHECK_TORCH_NPU        torch-npu version to download (default: the newest)
#   ABI_CHECK_TORCH_NPU_WHEEL  a torch-npu wheel already on disk (no download)
#   ABI_CHECK_MIRRORS          a directory of bare git mirrors named <owner>+<name>/repo
#                              (e.g. /work/.mirror); a repository found there is not cloned
#   ABI_CHECK_GIT_HOST         where to clone from (default https://github.com)
#   ABI_CHECK_REPOS            "owner/name …" (default: hicann/opbase hicann/ops-math
#                              hicann/ops-nn cannmirror/ops-transformer; opbase first)
#   ABI_CHECK_WORK             work directory (default: a fresh mktemp -d, removed at exit)
#   ABI_CHECK_ALLOW_MISSING=1  pass with ops whose header was not found (listed, unchecked)
#   CXX                        the C++ compiler (default c++)
# Exit status: 0 passed; 1 a declaration differs from CANN's; 2 could not run (fetch, missing
# header); 3 the self-check failed (a broken width was not caught).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
keep=0
self_check=1
for a in "$@"; do
  case "$a" in
    --keep) keep=1 ;;
    --no-self-check) self_check=0 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "run.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done

die() { echo "abi-check: $*" >&2; exit 2; }
cxx=${CXX:-c++}
command -v "$cxx" >/dev/null || die "no C++ compiler ($cxx); set CXX"
command -v git >/dev/null || die "git is needed"

if [ -n "${ABI_CHECK_WORK:-}" ]; then
  work=$ABI_CHECK_WORK
  mkdir -p "$work"
else
  work=$(mktemp -d -t burn-ascend-abi.XXXXXX)
  [ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
fi
inc=$work/include
rm -rf "$inc"
mkdir -p "$inc"

echo "== generator"
(cd "$root" && cargo build -q -p burn-ascend-abi-check --bin abi-check-gen)
target_dir=$(cd "$root" && cargo metadata --no-deps --format-version 1 |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
gen=$target_dir/debug/abi-check-gen
[ -x "$gen" ] || die "abi-check-gen not built at $gen"

# ---- 1a. ACL headers: the torch-npu wheel ---------------------------------------------------
echo "== ACL headers (torch-npu wheel)"
wheel=${ABI_CHECK_TORCH_NPU_WHEEL:-}
if [ -z "$wheel" ]; then
  spec=torch-npu${ABI_CHECK_TORCH_NPU:+==$ABI_CHECK_TORCH_NPU}
  # Any platform's wheel carries the same headers: if none fits this Python, ask for one.
  python3 -m pip download -q --no-deps "$spec" -d "$work/wheel" >&2 ||
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_28_x86_64 "$spec" -d "$work/wheel" >&2 ||
    die "pip download $spec failed (network?)"
  wheel=$(ls "$work"/wheel/torch_npu-*.whl | head -n1)
fi
[ -f "$wheel" ] || die "no torch-npu wheel ($wheel)"
rm -rf "$work/tnpu"
mkdir -p "$work/tnpu"
python3 - "$wheel" "$work/tnpu" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist()
    if n.startswith(("torch_npu/include/acl/", "torch_npu/include/third_party/hccl/",
                     "torch_npu/include/third_party/acl/")) or n == "torch_npu/version.py"])
PY
[ -f "$work/tnpu/torch_npu/include/acl/acl.h" ] || die "$wheel has no torch_npu/include/acl/acl.h"
cp -r "$work/tnpu/torch_npu/include/acl" "$inc/acl"
# HCCL's headers (hccl.h includes third_party/acl/inc/acl/acl.h, the same ACL headers).
[ -f "$work/tnpu/torch_npu/include/third_party/hccl/inc/hccl/hccl.h" ] ||
  die "$wheel has no torch_npu/include/third_party/hccl/inc/hccl/hccl.h"
cp -r "$work/tnpu/torch_npu/include/third_party" "$inc/third_party"
# One set of ACL headers: hccl.h's include of third_party/acl/inc/acl/acl.h goes to the
# acl/acl.h checked above (wheels that ship both copies would otherwise mix two versions).
rm -rf "$inc/third_party/acl"
mkdir -p "$inc/third_party/acl/inc/acl"
echo '#include "acl/acl.h"' >"$inc/third_party/acl/inc/acl/acl.h"
tnpu_version=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$work/tnpu/torch_npu/version.py")
tnpu_git=$(sed -n "s/^git_version = '\(.*\)'/\1/p" "$work/tnpu/torch_npu/version.py")
echo "   $(basename "$wheel")"

# ---- 1b. CANN's op repositories ----------------------------------------------------------------
# Each repository is read through two functions, whichever way it was obtained: a bare mirror
# (git objects, read at HEAD) or a shallow, sparse clone of only the headers and op docs.
declare -A gitdir worktree
repos=${ABI_CHECK_REPOS:-hicann/opbase hicann/ops-math hicann/ops-nn cannmirror/ops-transformer}
echo "== CANN repositories"
for r in $repos; do
  m=${ABI_CHECK_MIRRORS:-}/${r/\//+}/repo
  if [ -n "${ABI_CHECK_MIRRORS:-}" ] && git --git-dir="$m" rev-parse -q --verify HEAD >/dev/null 2>&1; then
    gitdir[$r]=$m
    worktree[$r]=
    echo "   $r: mirror $m"
  else
    d=$work/git/${r/\//+}
    rm -rf "$d"
    url=${ABI_CHECK_GIT_HOST:-https://github.com}/$r
    git clone -q --depth 1 --filter=blob:none --sparse "$url" "$d" >&2 || die "git clone $url failed"
    git -C "$d" sparse-checkout set --no-cone '/include/' 'aclnn_*.h' '**/docs/aclnn*.md' \
      '/version.cmake' '/version.info' >&2 || die "sparse checkout of $r failed"
    gitdir[$r]=$d/.git
    worktree[$r]=$d
    echo "   $r: cloned from $url"
  fi
done
# src_decls REPO: "<function> <path>" for every `<function>GetWorkspaceSize(` declared in a
# header of REPO (one pass per repository: a grep per op would take minutes).
src_decls() {
  local pat='[A-Za-z0-9_]*GetWorkspaceSize[[:space:]]*\('
  if [ -n "${worktree[$1]}" ]; then
    (cd "${worktree[$1]}" && grep -r -o -E --include='*.h' "$pat" . | sed 's|^\./||') || true
  else
    git --git-dir="${gitdir[$1]}" grep -o -E "$pat" HEAD -- '*.h' | sed 's/^HEAD://' || true
  fi | sed -n 's/^\([^:]*\):\(aclnn[A-Za-z0-9_]*\)GetWorkspaceSize.*/\2 \1/p' | sort -u
}
# src_files REPO: every path of REPO (as far as it was fetched).
src_files() {
  if [ -n "${worktree[$1]}" ]; then
    (cd "${worktree[$1]}" && find . -type f -not -path './.git/*' | sed 's|^\./||')
  else
    git --git-dir="${gitdir[$1]}" ls-tree -r --name-only HEAD
  fi
}
# src_show REPO PATH: a file's text (fails if absent).
src_show() {
  if [ -n "${worktree[$1]}" ]; then
    cat "${worktree[$1]}/$2"
  else
    git --git-dir="${gitdir[$1]}" show "HEAD:$2"
  fi
}
# repo_version REPO: "<package version> @ <commit> (<date>)".
repo_version() {
  local v
  v=$(src_show "$1" version.cmake 2>/dev/null | sed -n 's/.*set_cann_package([^ ]* VERSION "\([^"]*\)").*/\1/p')
  [ -n "$v" ] || v=$(src_show "$1" version.info 2>/dev/null | sed -n 's/^Version=//p')
  echo "${v:-unknown version} @ $(git --git-dir="${gitdir[$1]}" log -1 --format='%H (%cs)' HEAD)"
}

opbase=
for r in $repos; do case $r in */opbase) opbase=$r ;; esac; done
[ -n "$opbase" ] || die "no opbase repository in ABI_CHECK_REPOS"
mkdir -p "$inc/aclnn" "$inc/opdev"
for f in aclnn/acl_meta.h aclnn/aclnn_base.h opdev/op_errno.h; do
  src_show "$opbase" "include/nnopbase/$f" >"$inc/$f" || die "$opbase has no include/nnopbase/$f"
done
src_show "$opbase" include/aclnnop/aclnn_util.h >"$inc/aclnn_util.h" || die "$opbase has no include/aclnnop/aclnn_util.h"

# ---- 1c. each op's header ----------------------------------------------------------------------
echo "== aclnn op headers"
prelude=$work/prelude.h
{
  echo '#include "acl/acl.h"'
  echo '#include "third_party/hccl/inc/hccl/hccl.h"'
  echo '#include "aclnn/acl_meta.h"'
  echo '#include "aclnn/aclnn_base.h"'
  echo '#include "opdev/op_errno.h"'
} >"$prelude"
# copy_header REPO PATH: copies PATH and the headers it includes from its own directory.
copy_header() {
  local dest=$inc/ops/${1/\//+}/$2 dir inc_name
  [ -f "$dest" ] && return 0
  mkdir -p "$(dirname "$dest")"
  src_show "$1" "$2" >"$dest"
  dir=$(dirname "$2")
  for inc_name in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$dest"); do
    [ -f "$inc/$inc_name" ] && continue
    src_show "$1" "$dir/$inc_name" >/dev/null 2>&1 && copy_header "$1" "$dir/$inc_name"
  done
  return 0
}
op_repos=()
for r in $repos; do [ "$r" = "$opbase" ] || op_repos+=("$r"); done
mkdir -p "$work/decls"
for r in "${op_repos[@]}"; do src_decls "$r" >"$work/decls/${r/\//+}"; done
missing=()
doc_only=()
declare -A seen_header
for op in $("$gen" --list-ops); do
  found=
  for r in "${op_repos[@]}"; do
    hits=$(awk -v op="$op" '$1 == op { print $2 }' "$work/decls/${r/\//+}" |
      grep -v -E '(^|/)(experimental|tests?|examples?|3rd|third_party)/' | sort | head -n1 || true)
    if [ -n "$hits" ]; then
      found="$r:$hits"
      copy_header "$r" "$hits"
      if [ -z "${seen_header[$found]:-}" ]; then
        seen_header[$found]=1
        echo "#include \"$inc/ops/${r/\//+}/$hits\"" >>"$prelude"
      fi
      break
    fi
  done
  if [ -z "$found" ]; then
    # No header in the sources: CANN generates some aclnn headers at build time from the op
    # definition. Check against the prototype of the op's own documentation instead.
    for r in "${op_repos[@]}"; do
      doc=$(src_files "$r" | grep -E "(^|/)docs/${op}\.md$" | sort | head -n1 || true)
      [ -n "$doc" ] || continue
      out=$inc/doc/$op.h
      mkdir -p "$inc/doc"
      src_show "$r" "$doc" >"$work/doc.md"
      if python3 - "$op" "$work/doc.md" >"$out" <<'PY'
import re, sys
op, text = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
decls = []
for name in (op + "GetWorkspaceSize", op):
    m = re.search(r"aclnnStatus\s+" + name + r"\s*\(", text)
    if not m:
        sys.exit(1)
    depth, i = 0, m.end() - 1
    while True:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    decls.append(" ".join(text[m.start():i].split()) + ";")
print('#include "aclnn/aclnn_base.h"\nextern "C" {')
print("\n".join(decls))
print("}")
PY
      then
        found="$r:$doc (documented prototype; the header is generated at build time)"
        doc_only+=("$op: $r:$doc")
        echo "#include \"$out\"" >>"$prelude"
        break
      fi
    done
  fi
  if [ -z "$found" ]; then
    missing+=("$op")
    echo "   $op: NOT FOUND"
  else
    echo "   $op: $found"
  fi
done

skip_args=()
if [ ${#missing[@]} -gt 0 ]; then
  echo "abi-check: no header or documented prototype found for: ${missing[*]}" >&2
  [ "${ABI_CHECK_ALLOW_MISSING:-0}" = 1 ] || die "set ABI_CHECK_ALLOW_MISSING=1 to check the rest"
  for op in "${missing[@]}"; do skip_args+=(--skip "$op"); done
fi

# ---- 2. generate and compile ---------------------------------------------------------------------
compile() { "$cxx" -std=c++17 -fsyntax-only -I"$inc" "$1" 2>&1; }
echo "== check"
"$gen" --prelude "$prelude" "${skip_args[@]}" >"$work/check.cpp"
n_asserts=$(grep -c '^static_assert' "$work/check.cpp")
if ! log=$(compile "$work/check.cpp"); then
  echo "$log" | grep -E 'error' | head -n 80
  # What the headers say, for each function that failed.
  for fn in $(echo "$log" | sed -n 's/.*static assertion failed: \([A-Za-z0-9_]*\) (ffi.rs.*/\1/p' | sort -u); do
    echo "-- CANN's declaration of $fn:"
    grep -rh -A14 -E "(^|[^A-Za-z0-9_])$fn[[:space:]]*\(" "$inc" | sed '/;/q' | head -n 16
  done
  echo
  echo "FAILED: the Rust declarations differ from CANN's headers (full log: keep the work dir"
  echo "with --keep and compile $work/check.cpp)."
  [ "$keep" = 1 ] && echo "$log" >"$work/check.log"
  exit 1
fi
if [ "$keep" = 1 ] || [ -n "${ABI_CHECK_WORK:-}" ]; then
  echo "   $n_asserts static_asserts passed ($work/check.cpp)"
else
  echo "   $n_asserts static_asserts passed"
fi

# ---- 3. self-check: a broken width must fail -------------------------------------------------------
if [ "$self_check" = 1 ]; then
  echo "== self-check (each deliberately broken width must be rejected)"
  for m in $("$gen" --list-self-check-mutations | tr ' ' '@'); do
    m=${m//@/ }
    fn=${m%%:*}
    rest=${m#*:}
    idx=${rest%%:*}
    skipped=0
    for op in "${missing[@]}"; do case $fn in "$op" | "${op}GetWorkspaceSize") skipped=1 ;; esac; done
    [ "$skipped" = 0 ] || { echo "   $m: skipped (op not checked)"; continue; }
    "$gen" --prelude "$prelude" "${skip_args[@]}" --mutate "$m" >"$work/mutant.cpp"
    if log=$(compile "$work/mutant.cpp"); then
      echo "SELF-CHECK FAILED: mutation $m compiled; the check cannot see a wrong width" >&2
      exit 3
    fi
    if ! grep -q "$fn (ffi.rs [A-Za-z0-9]*): parameter $idx " <<<"$log"; then
      echo "$log" | grep error | head -n 20 >&2
      echo "SELF-CHECK FAILED: mutation $m failed, but not on $fn parameter $idx" >&2
      exit 3
    fi
    echo "   $m: rejected"
  done
fi

# ---- 4. report ---------------------------------------------------------------------------------
echo "== passed against"
echo "   torch-npu $tnpu_version (git $tnpu_git): ACL and HCCL headers"
for r in $repos; do echo "   $r $(repo_version "$r")"; done
if [ ${#doc_only[@]} -gt 0 ]; then
  echo "   checked against documented prototypes (header generated at build time):"
  printf '     %s\n' "${doc_only[@]}"
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "   NOT CHECKED (no header found): ${missing[*]}"
fi
echo "ABI check passed: $("$gen" --list-ops | wc -l) aclnn ops, $n_asserts static_asserts."
