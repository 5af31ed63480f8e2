#!/usr/bin/env bash
# update-playground.sh refreshes the GraphiQL files that httpapi/playground
# embeds, so the playground works offline and building needs no npm.
#
#   scripts/update-playground.sh        # needs npm and node, and the npm registry
#
# To upgrade, change a version below and its line in integrity() (a run
# prints the new value in its error), re-run, check the page in a browser
# (see httpapi/playground's package comment) and commit
# httpapi/playground/assets/.
#
# Only the files listed in VENDORED are replaced; playground.js and
# favicon.svg are ours and left alone.
#
# graphiql 3.x is the last line that ships a standalone UMD build
# (graphiql.min.js); it bundles graphql-js, @graphiql/react, @graphiql/toolkit
# and graphql-ws, so subscriptions over websocket need no extra file. React
# and ReactDOM are its peer dependencies and come as their own UMD builds.
set -euo pipefail

GRAPHIQL_VERSION=3.9.0
REACT_VERSION=18.3.1

# integrity prints npm's dist.integrity for name@version, checked against
# the downloaded tarball so a re-run can only reproduce the committed files.
# (A case, not an associative array, so macOS's bash 3.2 runs it too.)
integrity() {
	case $1 in
	"graphiql@3.9.0") echo "sha512-rJYFlHdBbug9+YbFSwRVvgfPjCayC7wHecZkx/qB4XLuQPFQZw/yB9pmHFtOJV6RiNBBHro3u1GdocKa3YcGRA==" ;;
	"react@18.3.1") echo "sha512-wS+hAgJShR0KhEvPJArfuPVN1+Hz1t0Y6n5jLrGQbkb4urgPE/0Rve+1kMB1v/oWgHgm4WIcV+i7F2pTVj+2iQ==" ;;
	"react-dom@18.3.1") echo "sha512-5m4nQKp+rZRb09LNH59GM4BxTh9251/ylbKIbpe7TpGxfJ+9kv6BLkLBXIjjspbgbnIBNqlI23tRnTWT0snUIw==" ;;
	*) echo "<unset>" ;;
	esac
}

# package@version:path-in-package:name-in-assets
VENDORED=(
	"graphiql@${GRAPHIQL_VERSION}:graphiql.min.js:graphiql.min.js"
	"graphiql@${GRAPHIQL_VERSION}:graphiql.min.css:graphiql.min.css"
	"react@${REACT_VERSION}:umd/react.production.min.js:react.production.min.js"
	"react-dom@${REACT_VERSION}:umd/react-dom.production.min.js:react-dom.production.min.js"
)

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$root/httpapi/playground/assets"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for bin in npm node tar; do
	command -v "$bin" >/dev/null || { echo "update-playground: $bin not found" >&2; exit 1; }
done
mkdir -p "$dest"

# fetch name@version into $tmp/name@version/package, checking its integrity.
fetch() {
	local spec=$1 dir="$tmp/$1"
	[[ -d "$dir/package" ]] && return 0
	mkdir -p "$dir"
	local tgz
	tgz=$(cd "$dir" && npm pack --silent "$spec" | tail -n1)
	[[ -f "$dir/$tgz" ]] || { echo "update-playground: npm pack $spec failed" >&2; exit 1; }
	local got
	got=$(node -e 'const c=require("crypto"),f=require("fs");process.stdout.write("sha512-"+c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$dir/$tgz")
	if [[ "$got" != "$(integrity "$spec")" ]]; then
		echo "update-playground: $spec integrity is $got, want $(integrity "$spec")" >&2
		exit 1
	fi
	tar -xzf "$dir/$tgz" -C "$dir"
}

# The source maps are not shipped (graphiql's alone is 4 MB), so drop the
# comments that point at them: browsers' dev tools would ask for them and
# get a 404.
strip_source_map() {
	sed -E -e '/^\/\/# sourceMappingURL=/d' -e 's|/\*# sourceMappingURL=[^*]*\*/||' "$1"
}

versions="$tmp/VERSIONS"
{
	echo "# Vendored by scripts/update-playground.sh; do not edit by hand."
	echo "# package@version  license  file  sha256"
} >"$versions"

for entry in "${VENDORED[@]}"; do
	IFS=: read -r spec src name <<<"$entry"
	fetch "$spec"
	pkg="$tmp/$spec/package"
	[[ -f "$pkg/$src" ]] || { echo "update-playground: $spec has no $src" >&2; exit 1; }
	strip_source_map "$pkg/$src" >"$dest/$name"
	license=$(node -p 'require(process.argv[1]).license' "$pkg/package.json")
	sum=$(node -e 'const c=require("crypto"),f=require("fs");process.stdout.write(c.createHash("sha256").update(f.readFileSync(process.argv[1])).digest("hex"))' "$dest/$name")
	echo "$spec  $license  $name  $sum" >>"$versions"
done

# The licence texts go with the files (MIT asks for the notice to be kept).
for spec in "graphiql@${GRAPHIQL_VERSION}" "react@${REACT_VERSION}" "react-dom@${REACT_VERSION}"; do
	lic=$(ls "$tmp/$spec/package/" | grep -iE '^licen[cs]e' | head -n1)
	cp "$tmp/$spec/package/$lic" "$dest/LICENSE.${spec%@*}"
done
{
	echo "#"
	echo "# graphiql.min.js is graphiql's own bundle: it includes graphql-js,"
	echo "# @graphiql/react, @graphiql/toolkit, graphql-ws, CodeMirror 5 and"
	echo "# markdown-it among others, each under its own (MIT-style) licence."
} >>"$versions"
mv "$versions" "$dest/VERSIONS"

total=$(cat "$dest"/* | wc -c | tr -d ' ')
echo "update-playground: wrote $dest ($total bytes)"
ls -l "$dest"
