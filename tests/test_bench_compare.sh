#!/usr/bin/env bash
# Tests bench/compare-llamacpp.sh without llama.cpp and without our engine:
# both sides are mocks that print fixed JSON, so the table and its ratios are
# known exactly. Also checks the "skipped" path when llama.cpp is missing.
# Prints "ok <name>" / "FAIL <name>" lines for scripts/run-tests.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_bench_compare.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME CONDITION-EXIT-STATUS
    if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# Our CLI, in the JSON shape of tools/cmd_bench.c: prefill 1e6/(P+500) tok/s,
# decode 250.5 tok/s (only when -n > 0).
cat >"$tmp/kvstitch" <<'EOF'
#!/usr/bin/env bash
[ "$1" = bench ] || exit 9
p=0; n=0
while [ $# -gt 0 ]; do case "$1" in -p) p=$2; shift 2;; -n) n=$2; shift 2;; *) shift;; esac; done
tg=""
[ "$n" -gt 0 ] && tg=", \"tg\": {\"n\": $n, \"tok_s\": 250.5, \"runs\": [250.5]}"
echo "{\"threads\": 2, \"pp\": {\"n\": $p, \"tok_s\": $((1000000 / (p + 500))), \"runs\": [1]}$tg}"
EOF
# The peer's python: answers the import probe, then prints fixed results.
cat >"$tmp/python" <<'EOF'
#!/usr/bin/env bash
if [ "$1" = -c ]; then case "$2" in *print*) echo "llama-cpp-python mock";; esac; exit 0; fi
echo '{"engine":"llama.cpp","pp512_tok_s":900.0,"pp2048_tok_s":530.0,"tg128_tok_s":315.0}'
EOF
chmod +x "$tmp/kvstitch" "$tmp/python"
touch "$tmp/model.gguf"

out=$(KVSTITCH_CLI="$tmp/kvstitch" LLAMACPP_PYTHON="$tmp/python" \
      bench/compare-llamacpp.sh "$tmp/model.gguf" --threads 2 --reps 1 --rounds 2 --no-save 2>/dev/null)
rc=$?
check compare_exit_0 $rc
# 1e6/1012 = 988 (integer in the mock) vs 900 -> 1.10x
grep -Eq '^pp512 +988\.0 +900\.0 +1\.10x$' <<<"$out"; check compare_pp512_row $?
# 1e6/2548 = 392 vs 530 -> 0.74x
grep -Eq '^pp2048 +392\.0 +530\.0 +0\.74x$' <<<"$out"; check compare_pp2048_row $?
grep -Eq '^tg128 +250\.5 +315\.0 +0\.80x$' <<<"$out"; check compare_tg128_row $?
grep -q '^threads:  2 ' <<<"$out"; check compare_reports_threads $?

# The flat field names are accepted as well.
printf '#!/usr/bin/env bash\necho "{\\"prefill_tok_s\\": 450, \\"decode_tok_s\\": 63}"\n' >"$tmp/flat"
chmod +x "$tmp/flat"
out=$(KVSTITCH_CLI="$tmp/flat" LLAMACPP_PYTHON="$tmp/python" \
      bench/compare-llamacpp.sh "$tmp/model.gguf" --reps 1 --no-save 2>/dev/null)
grep -Eq '^pp512 +450\.0 +900\.0 +0\.50x$' <<<"$out" && grep -Eq '^tg128 +63\.0 +315\.0 +0\.20x$' <<<"$out"
check compare_flat_fields $?

# A bench JSON without the prefill figure is an error, not a silent zero.
printf '#!/usr/bin/env bash\necho "{\\"foo\\":1}"\n' >"$tmp/bad"
chmod +x "$tmp/bad"
! KVSTITCH_CLI="$tmp/bad" LLAMACPP_PYTHON="$tmp/python" \
    bench/compare-llamacpp.sh "$tmp/model.gguf" --reps 1 --no-save >/dev/null 2>&1
check compare_rejects_missing_field $?

# Without llama.cpp: a clear "skipped" and exit 0.
out=$(LLAMACPP_PYTHON="$tmp/none" bench/compare-llamacpp.sh "$tmp/model.gguf" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q 'skipped' <<<"$out" && grep -q 'setup-llamacpp.sh' <<<"$out"
check compare_skips_without_llamacpp $?

# bench/ab.sh: two builds (or settings) alternating, the median of the
# rounds' ratios. The mock prints decode ${MOCK_TG:-100} and prefill
# ${MOCK_PP:-500} tok/s, so the ratios are known; it logs its order.
cat >"$tmp/ab_kvs" <<'EOF2'
#!/usr/bin/env bash
[ "$1" = bench ] || exit 9
echo "${MOCK_TG:-100}" >>"${MOCK_LOG:-/dev/null}"
echo "{\"pp\": {\"tok_s\": ${MOCK_PP:-500}}, \"tg\": {\"tok_s\": ${MOCK_TG:-100}}}"
EOF2
chmod +x "$tmp/ab_kvs"
out=$(MOCK_LOG="$tmp/ab.log" bench/ab.sh --rounds 3 --env-b MOCK_TG=110 "$tmp/ab_kvs" "$tmp/ab_kvs" -- -m x 2>&1)
grep -Eq '^A median 100\.0 tok/s, B median 110\.0, B/A paired median 1\.100 \(min 1\.100, max 1\.100\), 3 rounds, tg$' \
    <<<"$out" && [ "$(grep -c '^round [123]: A 100\.0 B 110\.0 (B/A 1\.100)$' <<<"$out")" -eq 3 ]
check ab_tg_ratio $?
# odd rounds run A first, even rounds B first
[ "$(tr '\n' ' ' <"$tmp/ab.log")" = "100 110 110 100 100 110 " ]
check ab_alternates $?
out=$(bench/ab.sh --rounds 1 --test pp --env-a MOCK_PP=400 "$tmp/ab_kvs" "$tmp/ab_kvs" -- -m x 2>&1)
grep -q 'B/A paired median 1\.250 (min 1\.250, max 1\.250), 1 rounds, pp$' <<<"$out"
check ab_pp_ratio $?
out=$(bench/ab.sh "$tmp/ab_kvs" -- -m x 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'name two kvstitch executables' <<<"$out"
check ab_needs_two $?
out=$(bench/ab.sh --test xx "$tmp/ab_kvs" "$tmp/ab_kvs" -- -m x 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- '--test is tg or pp' <<<"$out"
check ab_rejects_test $?
printf '#!/usr/bin/env bash\necho "{\\"pp\\": {\\"tok_s\\": 1}}"\n' >"$tmp/ab_no_tg"
chmod +x "$tmp/ab_no_tg"
out=$(bench/ab.sh --rounds 1 "$tmp/ab_no_tg" "$tmp/ab_no_tg" -- -m x -n 0 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q 'no tg figure' <<<"$out"
check ab_missing_figure $?


# bench/ab-kernels.sh: two bench_kernels alternating, each figure's fastest
# round per side and the paired median. The mock's times are MOCK_US on
# even calls of a side and twice it on odd ones (so the fastest is MOCK_US);
# it logs MOCK_US per call (the order).
cat >"$tmp/bk" <<'EOF2'
#!/usr/bin/env bash
[ "${MOCK_FAIL:-0}" = 1 ] && { echo "mock failure"; exit 3; }
f="$MOCK_DIR/count.$MOCK_US"; n=$(( $(cat "$f" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$f"
echo "$MOCK_US" >>"$MOCK_DIR/log"
us=$(( MOCK_US * (1 + n % 2) ))
echo "bench_kernels: mock, 2 cores; best ISA amx; wall clock"
echo "  pool t=1: empty kvs_pool_run 0.003 us, kvs_pool_for of 2 empty chunks 0.006 us (medians of 7 x 20000)"
echo "  amx        t=1  ffn_up   576->1536   Q4_1 m=8       $us.0 us     92.3 GOPS     3.6 GB/s(w)"
echo "  avx512vnni t=1  attention 9x3x64 ctx=512   prefill      5.18 ms (  58.4 GFLOPS,   10.12 us/token)  decode     30.1 us"
EOF2
chmod +x "$tmp/bk"
mkdir -p "$tmp/bkd" "$tmp/build/bench" && cp "$tmp/bk" "$tmp/build/bench/bench_kernels"
out=$(MOCK_DIR="$tmp/bkd" bench/ab-kernels.sh --rounds 2 --env-a MOCK_US=100 --env-b MOCK_US=90 "$tmp/bk" "$tmp/build" -- --quick 2>&1)
grep -Eq '^amx t=1 ffn_up 576->1536 Q4_1 m=8 +100\.0 +90\.0 +0\.900 +0\.900 \(0\.900-0\.900\)$' <<<"$out"
check ab_kernels_fastest_and_paired $?
grep -Eq '^avx512vnni t=1 attention 9x3x64 ctx=512 prefill +5180\.0 +5180\.0 +1\.000 ' <<<"$out" &&
    grep -Eq '^avx512vnni t=1 attention 9x3x64 ctx=512 decode +30\.1 +30\.1 +1\.000 ' <<<"$out" &&
    [ "$(grep -c '^[a-z0-9]* t=1 ' <<<"$out")" -eq 3 ]  # not the pool line, not us/token
check ab_kernels_figures $?
[ "$(tr '\n' ' ' <"$tmp/bkd/log")" = "100 90 90 100 " ]
check ab_kernels_alternates $?
out=$(MOCK_DIR="$tmp/bkd" bench/ab-kernels.sh --rounds 1 --match 'decode' --env-a MOCK_US=1 --env-b MOCK_US=1 "$tmp/bk" "$tmp/bk" -- 2>&1)
[ "$(grep -c ' t=1 ' <<<"$out")" -eq 1 ] && grep -q 'ctx=512 decode' <<<"$out"
check ab_kernels_match $?
out=$(bench/ab-kernels.sh "$tmp/bk" -- 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'name two bench_kernels' <<<"$out"
check ab_kernels_needs_two $?
out=$(bench/ab-kernels.sh "$tmp/bk" "$tmp/nowhere" -- 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'nowhere is neither a bench_kernels executable' <<<"$out"
check ab_kernels_rejects_missing $?
out=$(MOCK_DIR="$tmp/bkd" bench/ab-kernels.sh --rounds 1 --env-b MOCK_FAIL=1 --env-a MOCK_US=1 "$tmp/bk" "$tmp/bk" -- 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'failed' <<<"$out" && grep -q 'mock failure' <<<"$out"
check ab_kernels_reports_failure $?
out=$(MOCK_DIR="$tmp/bkd" bench/ab-kernels.sh --rounds 1 --match 'nothing-like-this' --env-a MOCK_US=1 --env-b MOCK_US=1 "$tmp/bk" "$tmp/bk" -- 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q 'no figure common to both sides' <<<"$out"
check ab_kernels_no_figures $?
[ "$fails" -eq 0 ]
