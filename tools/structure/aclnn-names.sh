#!/usr/bin/env bash
# Every aclnn op name should be spelled in code in one production file: the op table
# (cann/src/acl/ffi/table.rs); everything else names ops through its generated `names::` constants.
# Prints each name spelled in more than one production file (comments stripped; tests,
# examples and benches excluded) and exits 1 if there is one.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git ls-files -- '*.rs' | grep -vE '(^|/)(tests|examples|benches)/' | while read -r f; do
  mkdir -p "$tmp/$(dirname "$f")"; sed -E 's#//.*$##' "$f" > "$tmp/$f"
done
cd "$tmp"
multi=0; total=0
for n in $(grep -rhoE '\baclnn[A-Z][A-Za-z0-9]+' . | sort -u); do
  total=$((total + 1))
  files=$(grep -rlw "$n" . | sed 's#^\./##' | sort)
  if [ "$(echo "$files" | wc -l)" -gt 1 ]; then multi=$((multi + 1)); echo "$n:" $files; fi
done
echo "$multi of $total aclnn names are spelled in code in more than one production file"
[ "$multi" -eq 0 ]
