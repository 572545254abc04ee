#!/usr/bin/env bash
# Tests bench/roofline_report.py on fixed inputs (a probe output with and
# without the AMX tile lines, one run of ours and one of the peer, a batch of
# streams with and without AMX), so the
# shares it prints are known exactly; and that build/bench/roofline_probe
# prints the AMX lines exactly when kvstitch runs prefill on AMX tiles.
# Prints "ok <name>" / "FAIL <name>" lines for scripts/run-tests.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD="${BUILD:-build}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_roofline_report.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME CONDITION-EXIT-STATUS
    if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

cat >"$tmp/probe" <<'EOF'
load 0.10 0.20 0.30 1/100 1
isa avx512vnni
clock_ghz - threads 1 cpu_median 3.50 cpu_best 3.60 wall_median 3.40 wall_best 3.55
read_gbs - threads 1 cpu_median 16.00 cpu_best 17.00 wall_median 16.00 wall_best 20.00
int8_gmacs avx512vnni threads 1 cpu_median 400.00 cpu_best 410.00 wall_median 400.00 wall_best 410.00
EOF
# an older probe's output: no float-step ceiling
cp "$tmp/probe" "$tmp/probe_no_float"
echo 'int8_float_gmacs avx512vnni threads 1 cpu_median 350.00 cpu_best 360.00 wall_median 320.00 wall_best 340.00' >>"$tmp/probe"
cp "$tmp/probe" "$tmp/probe_amx"
cat >>"$tmp/probe_amx" <<'EOF'
amx_gmacs bf16 threads 1 cpu_median 1500.00 cpu_best 1510.00 wall_median 1500.00 wall_best 1510.00
amx_gmacs int8 threads 1 cpu_median 3000.00 cpu_best 3010.00 wall_median 3000.00 wall_best 3010.00
amx_block_gdots q4 threads 1 cpu_median 25.00 cpu_best 25.50 wall_median 25.00 wall_best 25.50
amx_block_gdots q8 threads 1 cpu_median 12.50 cpu_best 13.00 wall_median 12.50 wall_best 13.00
amx_overlap q8 threads 1 tiles_ns 20.00 vector_ns 16.00 both_ns 27.00 ratio 0.750
amx_overlap_by_op q8 threads 1 products_ns 10.00 products_vector_ns 18.00 stores_ns 8.00 stores_vector_ns 23.00
EOF
: >"$tmp/kernels"
# 100 MB of weights a token: the 20 GB/s read bound is 200 tok/s.
cat >"$tmp/runs" <<'EOF'
{"who": "ours", "type": "Q8_0", "threads": 1, "pp": 1000.0, "tg": 150.0, "bytes": 100000000}
{"who": "ours_noamx", "type": "Q8_0", "threads": 1, "pp": 600.0}
{"who": "llama.cpp", "type": "Q8_0", "threads": 1, "pp": 800.0, "tg": 100.0}
{"who": "ours_streams", "type": "Q8_0", "threads": 1, "tg": 600.0, "streams": 8}
{"who": "ours_streams_noamx", "type": "Q8_0", "threads": 1, "tg": 450.0, "streams": 8}
EOF
report() { # report PROBE AMX: 128M MACs a decoded token, 100M a prompt token
    python3 bench/roofline_report.py "$1" "$tmp/kernels" "$tmp/runs" "Test CPU" 1 abc1234 512 64 1 3 \
        "llama.cpp test" 128000000 "$2" 100000000
}

out=$(report "$tmp/probe_amx" 1)
check report_amx_exit_0 $?
grep -Eq '^\| 1 \| 1500\.0 / 1510\.0 \| 3000\.0 / 3010\.0 \| 25\.0 / 25\.5 \| 12\.5 / 13\.0 \|$' <<<"$out"
check report_amx_ceilings_row $?
# 27.0 / (20.0 + 16.0) = 0.75 of the sum; 256 dots / 27 ns = 9.5 G dots/s
grep -q 'took 27.0 ns interleaved, 0.75 of their sum: here the tile unit and the vector unit partly overlap' <<<"$out"
check report_amx_overlap $?
grep -q "Q8_0's ceiling with its epilogue: 9.5 G dots/s a thread" <<<"$out"
check report_amx_epilogue_ceiling $?
# products: (10 + 16 - 18) / 10 = 80% hidden; stores: (8 + 16 - 23) / 8 = 12%
grep -q 'products alone 10.0 ns, with the epilogue 18.0 ns (80% of them hidden); its two tile stores alone 8.0 ns, with the epilogue 23.0 ns (12% hidden): the stores are what' <<<"$out"
check report_amx_overlap_by_op $?
# decode 150 / 200 = 75%; prefill 1000 / 800 = 1.25x; int8 share of a prompt
# token's MACs 1000 x 100M x 2 / 400G = 50%; block steps 1000 x 100M / 32 /
# 12.5G = 25%; no AMX 600 / 800 = 0.75x
grep -Eq '^\| Q8_0 \| 1 \| 150\.0 \| 100\.0 \| 1\.50x \| 200\.0 \| 75% \| .* \| 1000\.0 \| 800\.0 \| 1\.25x \| 50% \| 25% \| 600\.0 \| 0\.75x \|$' <<<"$out"
check report_amx_model_row $?
grep -q 'pp tok/s x 100M MACs (a prompt token' <<<"$out"
check report_prompt_token_macs $?
# 8 streams: 600 / 150 = 4.00x; of the float-step ceiling 600 x 128M x 2 /
# 320G (wall) = 48%, five single streams 750 tok/s 60%; without AMX 450 / 150 = 3.00x
grep -Eq '^\| Q8_0 \| 1 \| 150\.0 \| 600\.0 \| 4\.00x \| 48% \| 60% \| 450\.0 \| 3\.00x \|$' <<<"$out"
check report_amx_batch_row $?

# llama.cpp's parallel sequences beside ours: its 8 at 300 over its one at 100
# = 3.00x, ours 600 / 300 = 2.00x
cp "$tmp/runs" "$tmp/runs_no_peer"
echo '{"who": "llama_streams", "type": "Q8_0", "threads": 1, "tg": 300.0, "tg1": 100.0, "streams": 8}' >>"$tmp/runs"
out=$(report "$tmp/probe_amx" 1)
grep -Eq '^\| Q8_0 \| 1 \| 150\.0 \| 600\.0 \| 4\.00x \| 48% \| 60% \| 450\.0 \| 3\.00x \| 300\.0 \| 3\.00x \| 2\.00x \|$' <<<"$out"
check report_batch_row_with_peer $?
grep -q 'llama-batched-bench -npl 1,8' <<<"$out"
check report_batch_names_peer $?
cp "$tmp/runs_no_peer" "$tmp/runs"

# bench_json.py reads llama-batched-bench's jsonl: the row of N sequences and of one
printf '%s\n' 'main: n_kv_max = 600' \
    '{"pl": 1, "speed_tg": 68.5, "speed_pp": 70.0}' '{"pl": 8, "speed_tg": 202.25, "speed_pp": 250.0}' \
    | python3 bench/bench_json.py llama-batched llama_streams type=Q4_1 threads=2 streams=8 >"$tmp/llb.json"
check bench_json_llama_batched_exit_0 $?
python3 -c 'import json,sys; d = json.load(open(sys.argv[1]))
sys.exit(not (d["tg"] == 202.25 and d["tg1"] == 68.5 and d["threads"] == 2 and d["who"] == "llama_streams"))' "$tmp/llb.json"
check bench_json_llama_batched_rows $?
# a run without the row of N sequences is an error, not a made-up figure
echo '{"pl": 1, "speed_tg": 68.5}' | python3 bench/bench_json.py llama-batched x streams=8 >/dev/null 2>&1
[ $? -ne 0 ]
check bench_json_llama_batched_missing_row $?
# a failed run (no output, or not JSON): one line naming the engine, no traceback
err=$(python3 bench/bench_json.py kvstitch kvstitch threads=1 </dev/null 2>&1 >/dev/null)
[ $? -ne 0 ] && grep -q '^bench_json: kvstitch printed no JSON' <<<"$err" && ! grep -q Traceback <<<"$err"
check bench_json_empty_run_is_one_line $?
err=$(echo 'error: no model' | python3 bench/bench_json.py llama llama.cpp 2>&1 >/dev/null)
[ $? -ne 0 ] && grep -q '^bench_json: llama.cpp printed no valid JSON' <<<"$err" && ! grep -q Traceback <<<"$err"
check bench_json_invalid_run_is_one_line $?

out=$(report "$tmp/probe" 0)
check report_plain_exit_0 $?
# the ceilings row: read, int8 peak, with the float steps and the core clock
# (CPU time / wall medians)
grep -Eq '^\| 1 \| 16\.0 / 17\.0 \| 16\.0 / 20\.0 \| 400\.0 \| 400\.0 \| 350\.0 / 320\.0 \| 3\.50 / 3\.40 \|$' <<<"$out"
check report_ceilings_row_with_clock $?
! grep -q 'AMX' <<<"$out"
check report_plain_has_no_amx $?
grep -Eq '^\| Q8_0 \| 1 \| 150\.0 \| 100\.0 \| 1\.50x \| 200\.0 \| 75% \| .* \| 1000\.0 \| 800\.0 \| 1\.25x \| 50% \|$' <<<"$out"
check report_plain_model_row $?
grep -Eq '^\| Q8_0 \| 1 \| 150\.0 \| 600\.0 \| 4\.00x \| 48% \| 60% \|$' <<<"$out"
check report_plain_batch_row $?
# an older probe without the float-step line: those columns are "-", not made up
out=$(report "$tmp/probe_no_float" 0)
grep -Eq '^\| Q8_0 \| 1 \| 150\.0 \| 600\.0 \| 4\.00x \| - \| - \|$' <<<"$out" &&
    grep -Eq '^\| 1 \| 16\.0 / 17\.0 \| 16\.0 / 20\.0 \| 400\.0 \| 400\.0 \| - \| 3\.50 / 3\.40 \|$' <<<"$out"
check report_no_float_line $?

# The probe itself: AMX lines iff kvstitch's prefill runs on tiles here.
if [ -x "$BUILD/bench/roofline_probe" ] && [ -x "$BUILD/kvstitch" ]; then
    probe=$("$BUILD/bench/roofline_probe" --threads 1 --reps 1 --mib 8)
    check probe_exit_0 $?
    grep -Eq '^read_gbs - threads 1 cpu_median [0-9.]+' <<<"$probe"
    check probe_read_line $?
    # the core clock: a real chain gives some tenths of a GHz at least
    awk '$1 == "clock_ghz" && $4 == 1 && $6 > 0.1 && $6 < 20 { found = 1 } END { exit !found }' <<<"$probe"
    check probe_clock_line $?
    # the float-step ceiling beside the VNNI peak, on a VNNI path only
    if grep -q '^isa avx512vnni' <<<"$probe"; then
        awk '$1 == "int8_float_gmacs" && $2 == "avx512vnni" && $4 == 1 && $6 > 0 { found = 1 } END { exit !found }' <<<"$probe"
    else
        ! grep -q '^int8_float_gmacs' <<<"$probe"
    fi
    check probe_float_step_line $?
    if "$BUILD/kvstitch" --version 2>/dev/null | grep -q 'amx'; then
        for key in "amx_gmacs bf16" "amx_gmacs int8" "amx_block_gdots q4" "amx_block_gdots q8"; do
            awk -v k="$key" '$1 " " $2 == k && $4 == 1 && $6 > 0 { found = 1 } END { exit !found }' <<<"$probe"
            check "probe_${key// /_}" $?
        done
        grep -Eq '^amx_overlap q8 threads 1 tiles_ns [0-9.]+ vector_ns [0-9.]+ both_ns [0-9.]+ ratio [0-9.]+$' <<<"$probe"
        check probe_amx_overlap $?
        grep -Eq '^amx_overlap_by_op q8 threads 1 products_ns [0-9.]+ products_vector_ns [0-9.]+ stores_ns [0-9.]+ stores_vector_ns [0-9.]+$' <<<"$probe"
        check probe_amx_overlap_by_op $?
        # KVS_AMX=0 takes prefill off the tiles: the probe leaves them out too
        KVS_AMX=0 "$BUILD/bench/roofline_probe" --threads 1 --reps 1 --mib 8 | grep -q '^amx_'
        [ $? -ne 0 ]
        check probe_no_amx_when_disabled $?
    else
        ! grep -q '^amx_' <<<"$probe"
        check probe_no_amx_lines $?
    fi
else
    echo "skip probe: $BUILD/bench/roofline_probe not built"
fi

# Report names (bench_lib.sh's report_slug): the CPU model, our best kernel
# path, -amx only where prefill runs on tiles, so that two CPUs of one model
# name with different paths never share a report.
if [ -x "$BUILD/kvstitch" ]; then
    . bench/bench_lib.sh
    slug=$(report_slug "$BUILD/kvstitch")
    best=$(best_vector_path "$BUILD/kvstitch")
    [[ "$slug" =~ ^[a-z0-9-]+$ && "$slug" == *"-$best"* ]]
    check slug_names_cpu_and_path $?
    # a model name without a number ("AMD EPYC") gets the family and model
    model_name=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
    if [[ "$model_name" == *[0-9]* ]]; then [[ "$slug" != *-family* ]]; else
        [[ "$slug" =~ -family[0-9]+-model[0-9]+- ]]; fi
    check slug_generation_where_the_name_has_none $?
    [[ "$(KVS_AMX=0 report_slug "$BUILD/kvstitch")" != *-amx ]]
    check slug_no_amx_when_disabled $?
    if [ "$(amx_prefill "$BUILD/kvstitch")" = 1 ]; then [[ "$slug" == *-amx ]]; else [[ "$slug" != *-amx ]]; fi
    check slug_amx_iff_tiles $?
fi

[ "$fails" -eq 0 ]
