#!/usr/bin/env bash
# Create (once) the project's virtualenv in .venv and install kudu_async with its dev tools into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[dev,spark]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
# The web UI's browser test (tests/integration/test_web_ui_browser.py) drives Debian's Chromium through
# Playwright (never Playwright's own browser downloads). Installed when missing and this runs as root (CI
# does); elsewhere the test skips and says why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing Debian's chromium for the web UI's browser test" >&2
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation; } >/dev/null; then
    echo "setup: could not install chromium; the browser test fails under CI and skips elsewhere" >&2
  fi
fi
# PySpark finds data sources to register by itself with pkgutil.iter_modules(), which cannot see modules
# that an editable install serves through an import hook; put the directory of pyspark_kudu_async on the
# path of the venv's interpreters (driver and Spark workers) so that format("kudu") needs no register().
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/kudu_async/spark/autoreg" > "$site/kudu_async_spark_autoreg.pth"
# The network-namespace test drives iproute2's `ip` as root: install it where it is missing and apt can
# (the test skips, saying why, where namespaces cannot be made).
if ! command -v ip >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if ! { apt-get install -y -q iproute2 >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q iproute2 >/dev/null; }; }; then
    echo "setup.sh: could not install iproute2; tests/integration/test_network_namespaces.py will skip" >&2
  fi
fi
