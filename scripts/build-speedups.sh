#!/usr/bin/env bash
# Builds kbroker/protocol/_speedups (the compiled record walk, issue 17) in place for a source
# checkout, with the venv's Python headers: what `pip install -e .` does through setup.py, without
# reinstalling. Optional: without it kbroker runs the same walk in Python.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
inc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
suffix="$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
"${CC:-cc}" -O2 -Wall -Wextra -shared -fPIC -I"$inc" "$root/kbroker/protocol/_speedups.c" \
    -o "$root/kbroker/protocol/_speedups$suffix"
echo "$root/kbroker/protocol/_speedups$suffix"
