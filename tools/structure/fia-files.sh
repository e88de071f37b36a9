#!/usr/bin/env bash
# The production files that name fused inference attention (docs/design.md, "Adding an
# attention op"): what adding an op like it touches.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
git grep -l -E "\bfia\b|fia_|Fia[A-Z]|fused_infer|FusedInfer|::fia|mod fia" -- \
  '*.rs' ':!*/tests/*' ':!*/examples/*' ':!*/benches/*'
