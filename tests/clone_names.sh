#!/bin/sh
# Static kernels compiled once per vector width (TG_VECTOR_CLONES) must have
# names unique across the library: clang before 18 gives each one's
# dispatcher a global symbol ("name.resolver"), so two files with a static
# clone of one name do not link there, while gcc builds never notice.
# Usage: clone_names.sh SOURCE_DIR
dir=${1:?usage: clone_names.sh SOURCE_DIR}
names=$(awk '
    /^TG_VECTOR_CLONES[ \t]*$/ { clone = 1; next }
    clone && /^static/ {
        line = $0; sub(/\(.*/, "", line); n = split(line, w, /[ \t*]+/)
        print w[n] " " FILENAME
    }
    { clone = 0 }
' "$dir"/tensor/*.c "$dir"/autograd/*.c "$dir"/nn/*.c | sort)
dups=$(echo "$names" | awk '$1 == prev { print $1 ": " prevfile " and " $2 } { prev = $1; prevfile = $2 }')
if [ -n "$dups" ]; then
    echo "static TG_VECTOR_CLONES kernels share a name (rename one):"
    echo "$dups"
    exit 1
fi
echo "$(echo "$names" | grep -c .) static clone names, all distinct"
