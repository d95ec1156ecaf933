# Sourced by scripts/main.sh and .ci/run: `ensure_venv EXTRAS` builds .venv on
# first use and installs the package (editable) only when it is not installed
# yet for this pyproject.toml — the code itself is read from the checkout, so
# only a change to pyproject.toml (dependencies, entry points, packages) needs
# a new install. The stamp .venv/.provnet-install holds "<sha256 of
# pyproject.toml> <extras>" of the last install; delete it to force one.
ensure_venv() {
  local extras=$1 py=${PYTHON:-python3} stamp=.venv/.provnet-install hash
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  hash=$(.venv/bin/python -c 'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')
  if [ -x .venv/bin/provnet ] && [ -f "$stamp" ]; then
    local have
    have=$(cat "$stamp")
    # an install with [dev] serves a caller that needs no extras too
    if [ "$have" = "$hash $extras" ] || { [ -z "$extras" ] && [ "$have" = "$hash [dev]" ]; }; then
      return 0
    fi
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".$extras"
  echo "$hash $extras" > "$stamp"
}
