# Shell helpers of the bench/ scripts (sourced from the repository root).

# need_numbers SCRIPT VAR...: exits 2 naming the first VAR whose value is not
# a non-negative integer.
need_numbers() {
    local who="$1" v
    shift
    for v in "$@"; do
        [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "$who: $v must be a number, got '${!v}'" >&2; exit 2; }
    done
}

# amx_prefill KVSTITCH: prints 1 if that build's prefill runs on AMX tiles
# here (kvstitch --version lists amx first, KVS_AMX is not 0), else 0; the
# reports of such a CPU carry "-amx" in their names.
amx_prefill() {
    local paths
    paths=$("$1" --version | sed -n 's/^kernel paths on this CPU: //p')
    if [ "${paths%% *}" = amx ] && [ "${KVS_AMX:-1}" != 0 ]; then echo 1; else echo 0; fi
}

# best_vector_path KVSTITCH: the first kernel path that build lists here
# other than amx (avx512vnni, avx2 or scalar).
best_vector_path() {
    "$1" --version | sed -n 's/^kernel paths on this CPU: //p' | tr ' ' '\n' | grep -v -m1 '^amx$'
}

# cpu_label: the CPU's model name, as lscpu gives it. A model name with no
# number in it (a VM's "AMD EPYC") names no generation: the family and model
# numbers follow it ("AMD EPYC (family 23, model 49)", a Zen 2), since a Zen
# 2 VM's roofline had overwritten a Zen 3's report of the same name and path.
cpu_label() {
    local info cpu
    info=$(lscpu 2>/dev/null)
    cpu=$(sed -n 's/^Model name: *//p' <<<"$info" | head -n 1)
    if [[ "$cpu" != *[0-9]* ]]; then
        cpu="$cpu (family $(sed -n 's/^CPU family: *//p' <<<"$info" | head -n 1),"
        cpu="$cpu model $(sed -n 's/^Model: *//p' <<<"$info" | head -n 1))"
    fi
    echo "$cpu"
}

# report_slug KVSTITCH: the name part of a report of this machine, as
# "<cpu_label>-<kernel path>[-amx]" in lower case (e.g. amd-epyc-avx2,
# amd-epyc-family23-model49-avx2, intel-r-xeon-r-processor-avx512vnni-amx):
# CPUs of one model name differ in what they expose (an EPYC VM with AVX2
# only, another with AVX-512), so the path keeps their reports apart.
report_slug() {
    local cpu isa
    cpu=$(cpu_label | sed 's/family /family/; s/model /model/')
    isa=$(best_vector_path "$1")
    [ "$(amx_prefill "$1")" = 1 ] && isa="$isa-amx"
    echo "${cpu:-cpu}-${isa:-scalar}" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-$//'
}

# The paired runs' scripts (ab.sh, ab-kernels.sh) share these.
# ab_option ARGS...: takes the options they share (--rounds, --env-a,
# --env-b; --help prints the calling script's header) into rounds, env_a and
# env_b, and sets ab_shift to the number of arguments taken (0: none of them).
# shellcheck disable=SC2034  # rounds, env_a, env_b, ab_shift: the caller's
ab_option() {
    ab_shift=0
    case "$1" in
        --rounds) rounds="$2"; ab_shift=2;;
        --env-a) env_a="$2"; ab_shift=2;;
        --env-b) env_b="$2"; ab_shift=2;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    esac
}

# ab_alternate ROUNDS FN: FN a R and FN b R for R = 1..ROUNDS, A first on odd
# rounds and B first on even ones, so that neither side always runs second
# (warmer caches, a host that slows down in the middle of a round).
ab_alternate() {
    local r
    for r in $(seq "$1"); do
        if [ $((r % 2)) -eq 1 ]; then "$2" a "$r"; "$2" b "$r"; else "$2" b "$r"; "$2" a "$r"; fi
    done
}
