#!/bin/sh
# embed.sh NAME FILE - prints a C file defining `const char NAME[]` with FILE's
# bytes and a trailing NUL (coreutils only: no xxd on a fresh machine).
set -eu
name=$1 file=$2
printf '/* generated from %s by scripts/embed.sh; do not edit */\n' "$file"
printf 'const char %s[] = {\n' "$name"
od -An -v -tx1 "$file" | sed -e 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g' -e 's/^/  /'
printf '  0x00\n};\n'
