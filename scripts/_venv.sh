# Sourced by scripts/serve and scripts/test: make .venv and install the project into it.
# Re-installs only when pyproject.toml changes (a stamp file keyed by its hash).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RIGHTSIZE_VENV:-$ROOT/.venv}"

pick_python() {
    for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    echo "rightsize needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
    exit 1
}

ensure_venv() {  # $1: pip extras, e.g. "dev" or ""
    local extras="$1" spec="." stamp
    [ -n "$extras" ] && spec=".[$extras]"
    if [ ! -x "$VENV/bin/python" ]; then
        "$(pick_python)" -m venv "$VENV"
    fi
    stamp="$VENV/.installed-${extras:-base}-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
    if [ ! -f "$stamp" ]; then
        echo "installing rightsize into $VENV (torch==2.13.0 among the dependencies) ..."
        # --no-compile: byte-compiling every installed file (torch has thousands) doubles the
        # install; Python compiles what it imports, once, on first use
        (cd "$ROOT" && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
            --no-compile -e "$spec")
        rm -f "$VENV"/.installed-"${extras:-base}"-*
        touch "$stamp"
    fi
}
