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

# report_slug KVSTITCH: the name part of a report of this machine, as
# "<cpu model>-<kernel path>[-amx]" in lower case (e.g. amd-epyc-avx2,
# amd-epyc-avx512vnni, intel-r-xeon-r-processor-avx512vnni-amx): CPUs of one
# model name differ in what they expose (an EPYC VM with AVX2 only, another
# with AVX-512), so the path keeps their reports apart.
report_slug() {
    local cpu isa
    cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
    isa=$(best_vector_path "$1")
    [ "$(amx_prefill "$1")" = 1 ] && isa="$isa-amx"
    echo "${cpu:-cpu}-${isa:-scalar}" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-$//'
}
