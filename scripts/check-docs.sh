#!/usr/bin/env bash
# Lints the Markdown a reader sees first: README.md and docs/*.md.
# - every table has a separator row after its header, and every row the
#   header's number of columns (a row that does not start with `|` inside a
#   table is an error too: that is how a corrupted table looked);
# - no path of a developer's machine (/work/, /tmp/, /root/, /home/);
# - README.md is at most 250 lines (the rest belongs in docs/);
# - every relative link points at a file that exists;
# - every file under docs/ is listed in docs/README.md.
# Prints one line per problem and exits 1 if there is any; silent otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MAX_README_LINES=250
status=0
files=(README.md docs/*.md)

for file in "${files[@]}"; do
    # Tables, outside fenced code blocks. Backtick spans and `\|` are taken
    # out before the pipes are counted, so `a|b` in code is one cell.
    awk -v file="$file" '
        function cells(line,   s) {
            s = line
            gsub(/`[^`]*`/, "x", s)
            gsub(/\\\|/, "x", s)
            sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s)
            return gsub(/\|/, "|", s) - 1
        }
        function problem(msg) { printf "%s:%d: %s\n", file, NR, msg; bad = 1 }
        /^[ \t]*(```|~~~)/ { fence = !fence; intable = 0; next }
        fence { next }
        /^[ \t]*$/ { intable = 0; next }
        {
            line = $0; sub(/^[ \t]+/, "", line); sub(/[ \t]+$/, "", line)
            if (!intable) {
                if (line ~ /^\|/) { intable = 1; row = 1; want = cells(line); header = NR }
                next
            }
            row++
            if (line !~ /^\|/ || line !~ /\|$/) { problem("table row does not start and end with |: " substr(line, 1, 40)); next }
            if (row == 2 && line !~ /^\|([ \t]*:?-+:?[ \t]*\|)+$/) problem("table without a separator row after its header (line " header ")")
            n = cells(line)
            if (n != want) problem("table row has " n " columns, its header (line " header ") has " want)
        }
        END { exit bad }
    ' "$file" || status=1

    # Relative links: the file (or directory) must exist; anchors are not checked.
    dir=$(dirname "$file")
    while IFS= read -r target; do
        path=${target%%#*}
        [ -z "$path" ] && continue
        if [ ! -e "$dir/$path" ]; then
            echo "$file: link to a missing file: $target"
            status=1
        fi
    done < <(grep -oE '\]\([^)# ]+(#[^) ]*)?\)' "$file" | sed -E 's/^\]\((.*)\)$/\1/' | grep -vE '^(https?|mailto):' || true)

    if grep -nE '(^|[^A-Za-z0-9_.])/(work|tmp|root|home)/' "$file" | sed "s|^|$file:|; s|\$|  (a path of this machine)|"; then
        status=1
    fi
done

lines=$(wc -l < README.md)
if [ "$lines" -gt "$MAX_README_LINES" ]; then
    echo "README.md: $lines lines, at most $MAX_README_LINES (move the rest to docs/)"
    status=1
fi

# The API documentation command the README gives: without --no-deps it
# documents every dependency (minutes), without the feature no `blocking`.
for file in README.md docs/README.md; do
    command=$(tr '\n' ' ' < "$file" | grep -oE '`cargo doc [^`]*`' || true)
    if [ -z "$command" ]; then
        echo "$file: gives no cargo doc command"
        status=1
    elif ! grep -q -- '--no-deps' <<<"$command" || ! grep -q 'redlock-tokio/blocking' <<<"$command"; then
        echo "$file: $command must take --no-deps and the blocking feature"
        status=1
    fi
done

for file in docs/*.md; do
    name=${file#docs/}
    [ "$name" = README.md ] && continue
    if ! grep -q "($name)" docs/README.md; then
        echo "docs/README.md: does not link $name"
        status=1
    fi
done

exit $status
