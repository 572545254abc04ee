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
