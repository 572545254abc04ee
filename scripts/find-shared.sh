# Sourced by the scripts that need the test data: find_shared prints the
# path of ../shared next to this checkout, or next to the repository it was
# cloned from (a clone in /tmp of the work tree, as CI makes, still finds
# it), else says so on stderr and prints where it would be.
find_shared() {
    local origin
    if [ -d ../shared ]; then readlink -f ../shared; return; fi
    origin=$(git config --get remote.origin.url 2>/dev/null || true)
    if [ -n "$origin" ] && [ -d "$origin/../shared" ]; then readlink -f "$origin/../shared"; return; fi
    echo "${0##*/}: ../shared not found next to $(pwd) or its origin; set KVSTITCH_SHARED" >&2
    echo "$(pwd)/../shared"
}
