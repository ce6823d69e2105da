#!/bin/sh
# embed_ui.sh DIR - prints a C file with every file of DIR (flat) as a static
# asset of the web console: rd_ui_assets[] {path, content type, bytes, length}.
# coreutils only.
set -eu
dir=$1
printf '/* generated from %s/ by scripts/embed_ui.sh; do not edit */\n' "$dir"
printf '#include "retryd/ui.h"\n\n'
i=0
names=""
for f in $( [ -d "$dir" ] && ls "$dir" | LC_ALL=C sort); do
    [ -f "$dir/$f" ] || continue
    printf 'static const char asset_%d[] = {\n' "$i"
    od -An -v -tx1 "$dir/$f" | sed -e 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g' -e 's/^/  /'
    printf '  0x00\n};\n'
    names="$names $f"
    i=$((i + 1))
done
printf '\nconst rd_ui_asset_t rd_ui_assets[] = {\n'
i=0
for f in $names; do
    case "$f" in
        *.html) type="text/html; charset=utf-8" ;;
        *.js) type="text/javascript; charset=utf-8" ;;
        *.css) type="text/css; charset=utf-8" ;;
        *.svg) type="image/svg+xml" ;;
        *.png) type="image/png" ;;
        *.ico) type="image/x-icon" ;;
        *) type="application/octet-stream" ;;
    esac
    printf '    { "/ui/%s", "%s", asset_%d, sizeof asset_%d - 1 },\n' "$f" "$type" "$i" "$i"
    i=$((i + 1))
done
printf '    { 0, 0, 0, 0 },\n};\n'
