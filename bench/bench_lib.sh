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
