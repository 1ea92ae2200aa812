#!/usr/bin/env bash
# The installed zerosim runs from anywhere: `cmake --install` into a fresh prefix, then, from a
# directory outside the source and build trees, `zerosim --version`, `zerosim suite` with no
# directory (the installed library, found from the binary's own location) and `zerosim run` on an
# installed scenario. Usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
fail() { echo "install_test: $*" >&2; exit 1; }
for file in bin/zerosim share/doc/zerosim/README.md share/doc/zerosim/LICENSE \
            share/zerosim/python/zerosim_state/__init__.py share/zerosim/python/zerosim_torch_hook.py \
            share/zerosim/python/hooks/sitecustomize.py share/zerosim/scenarios/examples/save_by_4_ranks.json; do
  [ -f "$prefix/$file" ] || fail "$prefix/$file was not installed"
done
mkdir "$work/elsewhere"
cd "$work/elsewhere"
zerosim="$prefix/bin/zerosim"
# zerosim_state is importable from the Python package directory (on python3's path with /usr).
imported=$(PYTHONPATH="$prefix/lib/python3/dist-packages" python3 -c 'import zerosim_state; print(zerosim_state.__file__)')
[ "$imported" = "$prefix/lib/python3/dist-packages/zerosim_state/__init__.py" ] || fail "import zerosim_state found '$imported'"
for module in huggingface lightning; do
  [ -f "$prefix/lib/python3/dist-packages/zerosim_state/$module.py" ] || fail "zerosim_state.$module was not installed"
done

version=$("$zerosim" --version)
[[ "$version" =~ ^zerosim\ [0-9]+\.[0-9]+\.[0-9]+(\+[0-9a-f]{12})?\ \(git\ commit\ ([0-9a-f]{12}|unknown)\)$ ]] \
  || fail "--version printed '$version'"

library="$prefix/share/zerosim/scenarios/library"
count=$(find "$library" -maxdepth 1 -name '*.json' | wc -l)
[ "$count" -gt 50 ] || fail "the installed library holds $count scenarios"
"$zerosim" suite --report-dir report > suite.log 2>&1 || { cat suite.log >&2; fail "the installed suite failed"; }
grep -q "^$count scenario(s): $count passed, 0 failed" suite.log || { tail -3 suite.log >&2; fail "expected $count passed"; }
# It ran the installed library, not a source tree's (the report's title names the directory).
grep -q "\"title\": \"zerosim suite $prefix/share/zerosim/scenarios/library\"" report/report.json \
  || fail "the suite did not run the installed library: $(grep -o '"title": "[^"]*"' report/report.json)"
# The report carries the build's version, the same string --version prints.
build_version=$(echo "$version" | cut -d' ' -f2)
grep -q "\"zerosim_version\": \"$build_version\"" report/report.json || fail "report.json lacks zerosim_version $build_version"
scenario="$library/class_c_lr_schedule_across_warmup.json"
[ -f "$scenario" ] || fail "no $scenario installed"
"$zerosim" run "$scenario" > run.log 2>&1 || { cat run.log >&2; fail "zerosim run $scenario failed"; }
grep -q "^1 scenario(s): 1 passed, 0 failed" run.log || fail "zerosim run: $(tail -1 run.log)"
# Moved elsewhere, the installed tree still works (nothing in it points back at the build).
mv "$prefix" "$work/moved"
"$work/moved/bin/zerosim" run "$work/moved/share/zerosim/scenarios/library/$(basename "$scenario")" > moved.log 2>&1 \
  || { tail -3 moved.log >&2; fail "the moved install failed"; }
# A binary with no library beside it says so and names where it looked (never the working directory).
mkdir -p "$work/lonely/bin" "$work/lonely/cwd/scenarios/library"
cp "$work/moved/bin/zerosim" "$work/lonely/bin/"
cd "$work/lonely/cwd"
if "$work/lonely/bin/zerosim" suite > lonely.log 2>&1; then fail "a zerosim without a library ran a suite"; fi
grep -q "no scenario library beside this zerosim (looked in $work/lonely/share/zerosim/scenarios/library" lonely.log \
  || fail "the lonely zerosim said: $(cat lonely.log)"
echo "install_test: $version; $count scenarios passed from $prefix, and one after moving it"
