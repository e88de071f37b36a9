#!/usr/bin/env bash
# Pairs of places in production code (tests, examples, benches, generated code and test-support
# excluded) that share six or more same or same-shape lines, by the `duplicates` command of the
# development machines; prints its summary and the count of pairs not marked boilerplate.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
command -v duplicates >/dev/null || { echo "duplicates: not installed on this machine" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git ls-files -co --exclude-standard -- '*.rs' \
  | grep -vE '(^|/)(tests|examples|benches)/|/generated/|^test-support/|/tests?\.rs$|/test_util\.rs$' | while read -r f; do
  [ -f "$f" ] && mkdir -p "$tmp/$(dirname "$f")" && cp "$f" "$tmp/$f"
done
out=$(duplicates --repo "$tmp" --most 200 --seconds 300)
echo "$out" | head -1
echo "$(echo "$out" | grep -E '^D[0-9]' | grep -vc boilerplate) pairs not marked boilerplate"
