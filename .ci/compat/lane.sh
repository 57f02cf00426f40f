#!/usr/bin/env bash
# The compatibility lane (`make test-compat`): the suite's non-slow tests of functional, surgery
# and augment, and every compile test, on each end of the supported torch range, each release in
# its own virtual environment under $COMPAT_DIR (git-ignored; kept and reused between runs).
#
#   .ci/compat/lane.sh 2.6 2.15     # the releases to run; each has .ci/compat/torch-R.txt
#
# A release's constraints file pins torch and torchvision; it is passed as PIP_CONSTRAINT,
# which replaces (never edits) any constraint of the machine's pip configuration. An
# environment is reinstalled only when pyproject.toml or its constraints file changed. Every
# release runs even when an earlier one fails; the summary at the end names each result, and
# the exit status is non-zero if any install or test run failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

COMPAT_DIR=${COMPAT_DIR:-.venv-compat}
PYTHON=${PYTHON:-python3}
# The selection: what the issue that opened the lane measured (non-slow of the three packages'
# tests, and the compile tests whole: tests/compile and the compile-marked ones elsewhere).
MARKERS="not slow or compile"
PATHS=(tests/functional tests/surgery tests/augment tests/compile)

if [ "$#" -eq 0 ]; then
    echo "usage: $0 RELEASE [RELEASE ...]   (e.g. 2.6 2.15)" >&2
    exit 2
fi

summary=()
failed=0

install() {  # install RELEASE VENV CONSTRAINTS: (re)create the environment when out of date
    local release=$1 venv=$2 constraints=$3
    local want
    want=$(cat pyproject.toml "$constraints" | sha256sum | cut -d' ' -f1)
    if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.compat-stamp" 2>/dev/null)" = "$want" ]; then
        echo "== torch $release: reusing $venv"
        return 0
    fi
    echo "== torch $release: installing into $venv (pinned by $constraints)"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv" || return 1
    local log="$venv/install.log"
    if ! PIP_CONSTRAINT="$PWD/$constraints" "$venv/bin/python" -m pip install -q -e '.[test]' \
        >"$log" 2>&1; then
        echo "!! torch $release: pip install failed; the end of $log:" >&2
        grep -v "^WARNING: Location" "$log" | tail -n 30 >&2
        return 1
    fi
    echo "$want" >"$venv/.compat-stamp"
}

for release in "$@"; do
    constraints=.ci/compat/torch-$release.txt
    venv=$COMPAT_DIR/t${release//./}
    if [ ! -f "$constraints" ]; then
        echo "!! torch $release: no constraints file $constraints" >&2
        summary+=("torch $release: no constraints file")
        failed=1
        continue
    fi
    start=$(date +%s)
    if ! install "$release" "$venv" "$constraints"; then
        summary+=("torch $release: INSTALL FAILED (see $venv/install.log)")
        failed=1
        continue
    fi
    installed=$(($(date +%s) - start))
    # The environment must hold exactly the pinned releases (a stale or hand-edited one fails).
    if ! "$venv/bin/python" - "$constraints" <<'EOF'
import sys
from importlib.metadata import version

pins = dict(line.strip().split("==") for line in open(sys.argv[1]) if "==" in line)
got = {name: version(name).split("+")[0] for name in pins}
print("   installed:", ", ".join(f"{name} {got[name]}" for name in pins))
sys.exit(0 if got == pins else f"   expected {pins}, got {got}")
EOF
    then
        summary+=("torch $release: WRONG RELEASE INSTALLED in $venv (delete it to reinstall)")
        failed=1
        continue
    fi
    start=$(date +%s)
    OMP_WAIT_POLICY=PASSIVE HYPOTHESIS_PROFILE=ci TEST_TORCH_SEED=${TEST_TORCH_SEED:-0} \
        "$venv/bin/python" -m pytest -q -n 2 -p no:cacheprovider -m "$MARKERS" "${PATHS[@]}" \
        | tee "$venv/pytest.log"
    status=${PIPESTATUS[0]}
    took=$(($(date +%s) - start))
    result=$(tail -n 1 "$venv/pytest.log" | sed 's/=//g; s/^ *//; s/ *$//')
    if [ "$status" -eq 0 ]; then
        summary+=("torch $release: ok, $result (install ${installed}s, tests ${took}s)")
    else
        summary+=("torch $release: FAILED (pytest exit $status), $result (tests ${took}s)")
        failed=1
    fi
done

echo "== compatibility lane"
printf '   %s\n' "${summary[@]}"
exit "$failed"
